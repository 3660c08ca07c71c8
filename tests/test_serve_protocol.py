"""The serving protocol through the real harness (child processes, result files): its metrics, its bound on
requests in flight, its refusal of requests cut short, and linnet.serve's own row (its torch backend on this CPU)."""

from __future__ import annotations

import pytest

from harness.bench import BenchSettings, run_bench
from harness.results import load_result
from harness.workload import SERVING, get_profile
from runners import RUNNERS, RunnerInfo
from tests.fake_serving_runners import STARTING_S

SERVING_FIELDS = [f"serving_{m}{s}" for m in ("tok_s", "ttft_ms", "itl_ms") for s in ("", "_min", "_max")] + [
    "serving_ttft_ms_p90", "serving_ttft_ms_p99", "serving_itl_ms_p90", "serving_itl_ms_p99", "serving_tpot_ms",
    "load_s", "first_call_s", "peak_mem_gib", "mem_kind",
]  # fmt: skip


# rows whose stacks this machine lacks, and the reason each gives
NOT_HERE = {
    "serve-vllm": "vllm is not installed",
    "serve-vllm-linnet-export": "vllm is not installed",
    "serve-triton-linnet": "tritonserver is not installed",
    "serve-triton-vllm": "tritonserver is not installed",
}


def serving(name: str, cls: str) -> RunnerInfo:
    return RunnerInfo(name, f"tests.fake_serving_runners:{cls}", name, "Serving many requests", kind="serving")


@pytest.fixture(scope="module")
def serving_run(tiny, tmp_path_factory, private_cache):
    runners = (serving("steady", "Steady"), serving("cut-short", "CutShort"),
               *(RUNNERS[r] for r in ("serve-linnet-cudagraphs", *NOT_HERE)))  # fmt: skip
    settings = BenchSettings(tiny, runners, get_profile("quick"), "f32", "cpu", None, tmp_path_factory.mktemp("results"))
    return load_result(run_bench(settings))


def test_the_serving_metrics_are_measured_at_the_client(serving_run):
    w = SERVING["quick"]
    row = next(r for r in serving_run.rows if r.runner == "steady")
    m = row.metrics
    assert row.status == "ok", row.reason
    assert all(f in m for f in SERVING_FIELDS), sorted(set(SERVING_FIELDS) - set(m))
    assert m["serving_tok_s"] * m["serving_wall_s"] == pytest.approx(w.requests * w.new_tokens)
    assert m["serving_ttft_ms_min"] <= m["serving_ttft_ms"] <= m["serving_ttft_ms_p90"] <= m["serving_ttft_ms_p99"] <= m["serving_ttft_ms_max"]
    assert 0.5 < m["serving_itl_ms"] < 1000 and m["serving_tpot_ms"] > 0.5  # a token per >= 1 ms sleep
    assert m["most_open"] == w.max_in_flight  # all submitted at start, never more than the bound open
    assert m["first_call_s"] >= STARTING_S  # starting the server is in its first call's time
    assert (m["serving_requests"], m["serving_new_tokens"], m["serving_in_flight"]) == (w.requests, w.new_tokens, w.max_in_flight)
    assert any(n.startswith("serving workload 'quick'") for n in row.notes)


def test_the_result_file_records_the_serving_workload(serving_run):
    assert serving_run.workload["serving"]["name"] == "quick" and serving_run.workload["serving"]["requests"] == SERVING["quick"].requests


def test_a_request_cut_short_fails_the_row(serving_run):
    row = next(r for r in serving_run.rows if r.runner == "cut-short")
    assert row.status == "failed" and "cut-short: requests (index, tokens) came back with other than" in row.reason


def test_linnet_serve_matches_the_reference_and_says_how_it_ran(serving_run):
    row = next(r for r in serving_run.rows if r.runner == "serve-linnet-cudagraphs")
    assert row.status == "ok", row.reason
    assert row.label == "linnet.serve, CUDA graphs" and row.group == "Serving many requests" and row.peer == "serve-vllm"
    assert "on a CPU: the torch path without CUDA graphs" in row.notes
    assert row.tokens_agree == get_profile("quick").new_tokens
    assert row.distance is not None and row.distance <= 1e-4
    assert row.metrics["serving_steps"] > 0 and row.metrics["serving_tok_s"] > 0
    m = row.metrics  # the timed runs' model time by phase: every run's decode steps carry up to the in-flight rows
    assert m["serving_decode_tok_s"] > 0 and m["serving_prefill_tok_s"] > 0 and 0 < m["serving_prefill_share"] < 1
    assert 1 < m["serving_decode_rows"] <= SERVING["quick"].max_in_flight
    assert m["serving_host_ms"] > 0 and 0 < m["serving_host_share"] < 1  # the loop's time outside the engine's calls
    assert any("in the timed runs the engine decoded" in n and "ms a step outside the engine's calls" in n for n in row.notes), row.notes
    from harness.workload import PROBE_TOKENS

    positions = max(SERVING["quick"].max_positions, PROBE_TOKENS)  # the cache holds the workload or the probe
    assert any(f"4 rows x {positions} positions" in n for n in row.notes), row.notes


def test_the_rows_this_machine_cannot_run_are_skipped_with_the_reason(serving_run):
    rows = {r.runner: r for r in serving_run.rows}
    for runner, reason in NOT_HERE.items():
        assert (rows[runner].status, rows[runner].reason) == ("skipped", reason)
    assert rows["serve-vllm-linnet-export"].peer == "serve-vllm" and rows["serve-triton-linnet"].peer == "serve-triton-vllm"
