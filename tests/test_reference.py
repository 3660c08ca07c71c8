"""The reference proves itself at both ends of pyproject's transformers range: 5.17 (the GPU image's, which dropped
`cache=` silently) reads the cache the runners pass, and the two releases' cached decodes agree. transformers' own
continuous batching (a row of the GPU suite) serves at both ends too: 5.17 names its page size otherwise."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OLDEST = ("transformers==5.17.0", "huggingface-hub>=1.5,<2")  # the range's low end and the hub it needs

SCRIPT = """
import dataclasses, json, sys, tempfile, transformers
from harness.protocol import measure_serving
from harness.registry import get_model
from harness.workload import get_profile
from runners import serve_transformers_batched, transformers_compiled, transformers_eager
from tests.exports_helpers import run_spec
tiny, out = get_model("qwen2-tiny"), {"version": transformers.__version__}
for name, module in (("transformers", transformers_eager), ("transformers-compiled", transformers_compiled)):
    runner = module.Runner(run_spec(tiny, name, sys.argv[1], tempfile.mkdtemp()))
    runner.load()
    out[name] = {"keyword": runner.keyword, "tokens": [runner.prefill(runner.spec.prompt), *runner.decode(6)],
                 "notes": runner.notes}
workload = get_profile("quick").serving
spec = dataclasses.replace(run_spec(tiny, "serve-transformers-batched", sys.argv[1], tempfile.mkdtemp()), kind="serving",
                           serving=dataclasses.asdict(workload), serving_prompts=workload.prompts(tiny.first_special_token, 0))
runner = serve_transformers_batched.Runner(spec)
try:
    out["serve-transformers-batched"] = {"tokens": measure_serving(runner, spec, lambda stage: None)["tokens"]}
finally:
    runner.close()
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def oldest_transformers(tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("transformers-5.17")
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), *OLDEST],
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    if pip.returncode != 0:
        pytest.skip(f"pip could not fetch {OLDEST[0]}: {pip.stderr.strip().splitlines()[-1:]}")
    return target


def decode_with(tiny_checkpoint, pythonpath: list[str]) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*pythonpath, str(ROOT)])}
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tiny_checkpoint)], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_both_ends_of_the_range_decode_through_their_cache_alike(tiny_checkpoint, oldest_transformers):
    oldest, newest = decode_with(tiny_checkpoint, [str(oldest_transformers)]), decode_with(tiny_checkpoint, [])
    assert oldest["version"] == "5.17.0" and newest["version"] != "5.17.0"
    assert oldest["transformers"]["keyword"] == "past_key_values"  # 5.17's name; `cache=` it would drop
    for name in ("transformers", "transformers-compiled"):
        assert oldest[name]["tokens"] == newest[name]["tokens"], name
        assert any(n.startswith("cached decode checked against a full forward") for n in oldest[name]["notes"])
    for release in (oldest, newest):  # the served reference prompt: eager's greedy tokens, then more
        served, eager = release["serve-transformers-batched"]["tokens"], release["transformers"]["tokens"]
        assert served[: len(eager)] == eager, release["version"]


PROMPT = [17, 250, 3, 999, 42, 64, 512, 8]  # the check's 8 tokens: 4 prefilled, 4 decoded


@pytest.fixture(scope="module")
def tiny_models(tiny_checkpoint):
    """transformers eager on the tiny twin, in f32 and in bf16, as the reference loads it."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_grad_enabled(False)
    return {dtype: AutoModelForCausalLM.from_pretrained(tiny_checkpoint, dtype=torch_dtype, attn_implementation="eager").eval()
            for dtype, torch_dtype in (("f32", torch.float32), ("bf16", torch.bfloat16))}  # fmt: skip


def cache_check(model, dtype: str, change=lambda logits: logits, cached: bool = True):
    """runners/_transformers.py's check of `model` on PROMPT, each decode call's logits passed through change() first;
    cached=False decodes as a forward that ignores its cache does: each call's tokens without what came before."""
    from transformers import DynamicCache

    from runners._transformers import cache_keyword, check_cached_decode, forward

    if cached:
        keyword = cache_keyword(model)
        decode = lambda ids, start, cache: change(forward(model, keyword, ids, cache))  # noqa: E731
        return check_cached_decode(model, PROMPT, dtype, decode, lambda: DynamicCache(config=model.config))
    alone = lambda ids, start, cache: model(input_ids=ids).logits  # noqa: E731
    return check_cached_decode(model, PROMPT, dtype, alone, lambda: None)  # a cache that does not say its length


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_the_cache_check_passes_rounding_and_refuses_a_decode_without_context(tiny_models, dtype):
    """The bound is a share of what losing the context moves the logits (CONTEXT_SHARE), so that rounding passes at
    any depth: a fixed 0.5 in bf16 refused the 24-layer 0.5B shape's correct reference at 0.555 apart, its tokens
    alone 20 apart (results/reference-check/). f32 keeps a fixed bound too: there the paths differ by summation order."""
    import torch

    from runners._transformers import F32_TOLERANCE, BrokenReference

    model = tiny_models[dtype]
    difference, alone = cache_check(model, dtype)
    assert alone > 3 and difference < (1e-5 if dtype == "f32" else 0.02 * alone)
    if dtype == "bf16":  # noise 4x the 0.5B shape's bf16 rounding (0.025 of the context's effect) passes: here about 1
        wave = torch.sin(torch.arange(model.config.vocab_size, dtype=torch.float32))
        assert cache_check(model, dtype, lambda logits: logits + 0.1 * alone * wave)[0] == pytest.approx(0.1 * alone, rel=0.1)
    else:  # a shift far below the context's effect, but beyond summation order
        with pytest.raises(BrokenReference, match=rf"\(bound {F32_TOLERANCE:g} in f32\)"):
            cache_check(model, dtype, lambda logits: logits + 10 * F32_TOLERANCE)
    with pytest.raises(BrokenReference) as refused:
        cache_check(model, dtype, cached=False)
    reason = str(refused.value)
    assert f"where the tokens alone are {alone:.3g} from it" in reason and reason.endswith("cannot be the reference")
    assert len(reason.splitlines()) == 1
