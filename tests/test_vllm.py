"""The vLLM rows: what they hand to vLLM (tested without vLLM), and the harness skipping them where vLLM is absent."""

from __future__ import annotations

import importlib.util

import pytest

from harness.bench import BenchSettings, run_bench
from harness.results import load_result
from harness.workload import get_profile
from linnet_core.errors import UserError
from runners import RUNNERS, _vllm
from tests.exports_helpers import run_spec


def test_sampling_is_greedy_with_eos_ignored(tiny, tmp_path):
    spec = run_spec(tiny, "vllm", tmp_path, tmp_path)
    args = _vllm.sampling_arguments(spec)
    assert args == {"temperature": 0.0, "max_tokens": spec.new_tokens, "ignore_eos": True, "detokenize": False}


@pytest.mark.parametrize("dtype, vllm_dtype", [("f32", "float32"), ("f16", "float16"), ("bf16", "bfloat16")])
def test_engine_arguments(tiny, tiny_checkpoint, tiny_tokenizer_checkpoint, tmp_path, dtype, vllm_dtype):
    spec = run_spec(tiny, "vllm", tiny_checkpoint, tmp_path, dtype)
    args = _vllm.engine_arguments(spec, tiny_checkpoint, _vllm.Settings())
    assert args["model"] == str(tiny_checkpoint) and args["dtype"] == vllm_dtype
    assert args["max_model_len"] == spec.max_positions and args["max_num_seqs"] == 1
    assert args["gpu_memory_utilization"] == 0.85 and args["enable_prefix_caching"] is False
    assert args["generation_config"] == "vllm"  # the checkpoint's sampling defaults are not applied
    assert args["skip_tokenizer_init"] is False  # synthetic checkpoints carry a tokenizer (linnet_core/tokenizer.py)
    bare = tmp_path / "bare"  # a checkpoint without one: token ids in, token ids out
    bare.mkdir()
    for f in tiny_checkpoint.glob("*"):
        if not f.name.startswith("tokenizer"):
            (bare / f.name).symlink_to(f)
    assert _vllm.engine_arguments(spec, bare, _vllm.Settings())["skip_tokenizer_init"] is True


def test_notes_say_the_memory_is_a_setting_and_why_not_compared():
    notes = _vllm.notes(_vllm.Settings.from_options({"gpu_memory_utilization": 0.6}))
    assert "reserves a KV-cache pool up front (gpu_memory_utilization 0.6), so its memory is a setting, not a need" in notes
    assert any("not logits" in n for n in notes)


def test_unknown_or_bad_options_are_one_line_errors():
    with pytest.raises(UserError, match="unknown vLLM option"):
        _vllm.Settings.from_options({"tensor_parallel": 2})
    with pytest.raises(UserError, match="gpu_memory_utilization=1.5"):
        _vllm.Settings.from_options({"gpu_memory_utilization": 1.5})


def test_both_rows_are_registered_with_their_pairing():
    assert RUNNERS["vllm"].group == RUNNERS["vllm-linnet-export"].group == "LLM engines"
    assert RUNNERS["vllm-linnet-export"].peer == "vllm" and RUNNERS["vllm-linnet-export"].label == "vLLM on Linnet's export"


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_without_vllm_both_rows_are_skipped_with_the_reason(tiny, tmp_path):
    runners = (RUNNERS["vllm"], RUNNERS["vllm-linnet-export"])
    result = load_result(run_bench(BenchSettings(tiny, runners, get_profile("quick"), "f32", "cpu", None, tmp_path)))
    assert [(r.runner, r.status, r.reason) for r in result.rows] == [
        ("vllm", "skipped", "vllm is not installed"),
        ("vllm-linnet-export", "skipped", "vllm is not installed"),
    ]
    assert all(r.distance is None and not r.metrics for r in result.rows)
