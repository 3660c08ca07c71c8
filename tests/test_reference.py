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
