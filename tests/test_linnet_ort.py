"""The ONNX Runtime and TensorRT rows through the real harness: child processes, the transformers reference, the
quick profile. f32 matches the reference through the cache path; f16's distance is measured and bounded; rows this
machine cannot run are skipped with ONNX Runtime's own reason."""

from __future__ import annotations

import math

import onnxruntime as ort
import pytest

from harness.bench import BenchSettings, run_bench
from harness.results import load_result
from harness.workload import get_profile
from runners import RUNNERS

ROWS = ["linnet-ort-f32", "linnet-ort-f16", "linnet-ort-bf16", "linnet-trt-f32", "linnet-trt-f16", "linnet-trt-bf16"]
# f16 keeps 11 significant bits: the tiny model's logits reach ~12, so rounding alone moves one by ~0.006, and two
# layers of f16 weights and activations compound that several times (0.04 measured). A wrong graph (a missing bias,
# a shifted position, an unmasked row) moves logits by whole units, far beyond this bound.
F16_DISTANCE_BOUND = 0.25


@pytest.fixture(scope="module")
def rows(tiny, tmp_path_factory, private_cache):
    runners = (RUNNERS["transformers"], *(RUNNERS[r] for r in ROWS))
    settings = BenchSettings(
        tiny, runners, get_profile("quick"), "f32", "cpu", None, tmp_path_factory.mktemp("results")
    )
    return {r.runner: r for r in load_result(run_bench(settings)).rows}


def test_f32_matches_transformers_through_the_cache_path(rows):
    row = rows["linnet-ort-f32"]
    assert row.status == "ok", row.reason
    assert row.label == "Linnet, ONNX Runtime f32" and row.group == "ONNX Runtime and TensorRT" and row.peer == "llamacpp-linnet-gguf"
    assert 0 <= row.distance <= 1e-4
    assert row.tokens_agree == get_profile("quick").new_tokens


def test_f16_distance_is_measured_and_bounded(rows):
    row = rows["linnet-ort-f16"]
    assert row.status == "ok", row.reason
    print(f"linnet-ort-f16 distance from transformers f32: {row.distance:.4g}")
    # > 1e-3: the weights really are f16 (their rounding alone moves the logits that far)
    assert math.isfinite(row.distance) and 1e-3 < row.distance < F16_DISTANCE_BOUND, row.distance
    assert "distance: against transformers in f32" in row.notes


@pytest.mark.parametrize("runner", ["linnet-ort-f32", "linnet-ort-f16"])
def test_load_and_session_building_are_reported_apart(rows, runner):
    row = rows[runner]
    m = row.metrics
    assert m["load_s"] > 0 and m["first_call_s"] >= m["session_build_s"] > 0
    assert m["decode_tok_s"] > 0 and m["mem_kind"] == "host"
    # the model is written by `linnet compile` in a process of its own: timed in the load, its memory kept apart
    assert 0 < m["export_s"] <= m["load_s"] and m["build_peak_mem_gib"] > 0.05
    dtype = runner.rsplit("-", 1)[1]
    assert row.notes[0].startswith(f"{dtype}; ONNX Runtime's CPU execution provider")
    assert any("only the next token id crosses to the host" in n for n in row.notes)
    # on the CPU both dtypes run ONNX Runtime's fused attention kernels
    assert "attention as ONNX Runtime's RotaryEmbedding and GroupQueryAttention contrib ops" in row.notes


def test_fused_attention_is_chosen_where_onnx_runtime_has_the_kernels():
    from linnet_core.ort_engine import fuses_attention

    assert fuses_attention("cpu", "f32") and fuses_attention("cpu", "f16") and fuses_attention("cuda", "bf16")
    assert not fuses_attention("cuda", "f32") and not fuses_attention("tensorrt", "f16")


def test_bf16_is_skipped_because_the_cpu_provider_lacks_it(rows):
    row = rows["linnet-ort-bf16"]
    assert row.status == "skipped" and row.metrics == {}
    assert row.reason == (
        "ONNX Runtime's CPU execution provider does not implement bf16 compute "
        "(a bf16 MatMul session fails: NOT_IMPLEMENTED)"
    )


@pytest.mark.skipif("TensorrtExecutionProvider" in ort.get_available_providers(), reason="TensorRT is here")
@pytest.mark.parametrize("runner", ["linnet-trt-f32", "linnet-trt-f16", "linnet-trt-bf16"])
def test_tensorrt_rows_are_skipped_with_the_reason(rows, runner):
    row = rows[runner]
    assert row.status == "skipped" and row.label == f"Linnet, TensorRT {runner.rsplit('-', 1)[1]}"
    assert row.reason.startswith("ONNX Runtime here has no TensorrtExecutionProvider (it has ")
