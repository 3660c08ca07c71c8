"""llama.cpp on Linnet's GGUF through the real harness: the f32 export with an f32 KV cache matches transformers
eager to 1e-4 through the cache path; the f16 and q8_0 rows run and get a measured distance."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("llama_cpp")

from harness.bench import BenchSettings, run_bench  # noqa: E402
from harness.results import load_result  # noqa: E402
from harness.workload import get_profile  # noqa: E402
from linnet_core.errors import UserError  # noqa: E402
from runners import RUNNERS  # noqa: E402
from runners.llamacpp_linnet_gguf import Runner, Settings  # noqa: E402
from tests.exports_helpers import run_spec  # noqa: E402

ROWS = ["transformers", "llamacpp-linnet-gguf", "llamacpp-linnet-gguf-f16", "llamacpp-linnet-gguf-q8_0"]


@pytest.fixture(scope="module")
def rows(tiny, tmp_path_factory, private_cache):
    settings = BenchSettings(tiny, tuple(RUNNERS[r] for r in ROWS), get_profile("quick"), "f32", "cpu", None,
                             tmp_path_factory.mktemp("results"))  # fmt: skip
    return {r.runner: r for r in load_result(run_bench(settings)).rows}


def test_the_f32_gguf_matches_transformers_through_the_cache_path(rows):
    row = rows["llamacpp-linnet-gguf"]
    assert row.status == "ok", row.reason
    assert 0 < row.distance <= 1e-4
    assert row.tokens_agree == get_profile("quick").new_tokens
    assert row.group == "LLM engines" and row.label == "llama.cpp on Linnet's GGUF"
    assert "GGUF f32, KV cache f32, flash attention off" in " ".join(row.notes)


@pytest.mark.parametrize("runner", ["llamacpp-linnet-gguf-f16", "llamacpp-linnet-gguf-q8_0"])
def test_f16_and_q8_0_rows_run_with_a_measured_distance(rows, runner):
    row = rows[runner]
    assert row.status == "ok", row.reason
    assert math.isfinite(row.distance) and row.distance > 1e-4  # rounded weights: measured, not hidden
    assert f"GGUF {runner.rsplit('-', 1)[1]}" in " ".join(row.notes)


@pytest.mark.parametrize("runner", ROWS[1:])
def test_the_export_is_timed_inside_the_load_and_its_memory_kept_apart(rows, runner):
    """The export runs in a process of its own: its time is in the load, its memory in build_peak_mem_gib, not in the
    row's peak (a llama.cpp user converts a model once, apart)."""
    m = rows[runner].metrics
    assert 0 < m["export_s"] <= m["load_s"]
    assert any(n.startswith("`linnet export gguf` in a process of its own (") and "included in load time" in n
               for n in rows[runner].notes)  # fmt: skip
    assert m["build_peak_mem_gib"] > 0.05 and m["peak_mem_gib"] > 0.05  # python and torch at least: both seen
    assert m["decode_tok_s"] > 0 and m["ttft_ms"] > 0


def test_settings_follow_the_gguf_dtype_and_refuse_unknown_options(tiny, tmp_path):
    spec = run_spec(tiny, "llamacpp-linnet-gguf", tmp_path, tmp_path)
    exact = Settings.from_spec(spec, None)
    assert (exact.gguf_dtype, exact.kv_cache, exact.flash_attn, exact.extra_bufts) == ("f32", "f32", "off", False)
    q8 = Settings.from_spec(run_spec(tiny, "llamacpp-linnet-gguf", tmp_path, tmp_path, gguf_dtype="q8_0"), None)
    assert (q8.gguf_dtype, q8.kv_cache, q8.flash_attn) == ("q8_0", "f16", "auto")
    assert Settings.from_spec(spec, "f16").gguf_dtype == "f16"
    with pytest.raises(UserError, match="runs a f16 GGUF; ask llamacpp-linnet-gguf for gguf_dtype=q8_0"):
        Settings.from_spec(run_spec(tiny, "llamacpp-linnet-gguf-f16", tmp_path, tmp_path, gguf_dtype="q8_0"), "f16")
    with pytest.raises(UserError, match="unknown option"):
        Settings.from_spec(run_spec(tiny, "llamacpp-linnet-gguf", tmp_path, tmp_path, kv="f32"), None)
    with pytest.raises(UserError, match="option kv_cache='q4_0'"):
        Settings.from_spec(run_spec(tiny, "llamacpp-linnet-gguf", tmp_path, tmp_path, kv_cache="q4_0"), None)


def test_a_gpu_request_without_gpu_offload_is_skipped(tiny, tmp_path):
    import llama_cpp

    spec = run_spec(tiny, "llamacpp-linnet-gguf", tmp_path, tmp_path)
    spec = type(spec)(**{**spec.__dict__, "device": "cuda"})
    reason = Runner.unavailable(spec)
    assert (reason is None) == bool(llama_cpp.llama_supports_gpu_offload())
