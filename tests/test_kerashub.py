"""The KerasHub row: QwenCausalLM on Keras's JAX backend from the same checkpoint. Its prefill/decode split gives
exactly what KerasHub's own generate() gives, and its score path lands within 1e-4 of transformers eager."""

from __future__ import annotations

import dataclasses
import json

import numpy as np

from harness.bench import BenchSettings, run_bench
from harness.results import load_result
from harness.workload import get_profile, probe_ids
from runners import RUNNERS
from runners.base import RunSpec


def test_the_split_at_the_first_token_is_kerashubs_own_generate(tiny, tiny_checkpoint, tmp_path):
    from runners.kerashub import Runner

    prompt, new = list(np.random.default_rng(5).integers(0, 1000, 20)), 6
    spec = RunSpec("kerashub", "runners.kerashub", tiny.id, str(tiny_checkpoint), "f32", "cpu", prompt, new, 0, 1,
                   probe_ids(1000, 0, length=40), 24, 64, str(tmp_path))  # fmt: skip
    runner = Runner(spec)
    runner.load()
    ours = [runner.prefill(prompt), *runner.decode(new - 1)]
    token_ids = np.zeros((1, len(prompt) + new), np.int32)
    token_ids[0, : len(prompt)] = prompt
    mask = np.arange(token_ids.shape[1])[None, :] < len(prompt)
    generated = runner.lm.generate({"token_ids": token_ids, "padding_mask": mask}, stop_token_ids=None)
    assert ours == generated["token_ids"][0, len(prompt) :].tolist()


def test_the_kerashub_row_is_measured_with_a_distance(tiny, tmp_path):
    settings = BenchSettings(tiny, (RUNNERS["kerashub"],), get_profile("quick"), "f32", "cpu", None, tmp_path)
    [row] = load_result(run_bench(settings)).rows
    assert row.status == "ok", row.reason
    assert row.group == "JAX" and row.label == "KerasHub" and row.peer is None
    assert 0 < row.distance <= 1e-4
    assert row.metrics["decode_tok_s"] > 0
    assert any("split at the first token" in n for n in row.notes)


def test_the_kerashub_serving_row_serves_gemma3(tmp_path, private_cache):
    """KerasHub's generate() fails on Gemma 3 when it gathers its outputs (their "images" is None); the row calls
    the compiled generate function under it, and its greedy tokens are the reference's."""
    from harness.registry import get_model

    runners = (RUNNERS["transformers"], RUNNERS["serve-kerashub-static"])
    settings = BenchSettings(get_model("gemma3-tiny"), runners, get_profile("quick"), "f32", "cpu", None, tmp_path)
    row = next(r for r in load_result(run_bench(settings)).rows if r.runner == "serve-kerashub-static")
    assert row.status == "ok", row.reason
    assert row.metrics["serving_tok_s"] > 0
    assert row.tokens_agree >= 1 and not any("greedy tokens follow" in n for n in row.notes), row.notes


def test_an_architecture_without_a_kerashub_model_has_no_kerashub_row(bare_architecture, tiny, tmp_path):
    from runners.kerashub import unavailable
    from tests.exports_helpers import run_spec

    (tmp_path / "config.json").write_text(json.dumps(dataclasses.replace(tiny.config, model_type="bare").to_hf()))
    reason = unavailable(run_spec(tiny, "kerashub", tmp_path, tmp_path))
    assert reason.startswith("KerasHub ") and reason.endswith(" has no causal LM for the bare architecture")
