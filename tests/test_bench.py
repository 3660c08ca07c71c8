"""The harness end to end: real child processes, a real transformers reference, and runners that misbehave."""

from __future__ import annotations

import _thread
import signal
import threading

import pytest

from harness.bench import BenchSettings, Display, run_bench
from harness.results import load_result
from harness.workload import get_profile
from runners import RUNNERS, RunnerInfo

PROTOCOL_FIELDS = [
    "ttft_ms", "ttft_ms_min", "ttft_ms_max", "decode_tok_s", "decode_tok_s_min", "decode_tok_s_max",
    "load_s", "first_call_s", "peak_mem_gib", "mem_kind", "runs", "warmups",
]  # fmt: skip


def fake(name: str, cls: str, module: str = "tests.fake_runners") -> RunnerInfo:
    return RunnerInfo(name, f"{module}:{cls}", name, "PyTorch")


def settings(tiny, tmp_path, runners, timeout_s=None) -> BenchSettings:
    return BenchSettings(tiny, tuple(runners), get_profile("quick"), "f32", "cpu", None, tmp_path, timeout_s=timeout_s)


@pytest.fixture(scope="module")
def transformers_run(tiny, tmp_path_factory, private_cache):
    runners = [RUNNERS["transformers"], RUNNERS["transformers-compiled"]]
    return load_result(run_bench(settings(tiny, tmp_path_factory.mktemp("results"), runners)))


def test_both_transformers_rows_are_measured_with_distances(transformers_run):
    rows = {r.runner: r for r in transformers_run.rows}
    assert transformers_run.complete and transformers_run.weights == "synthetic"
    for row in rows.values():
        assert row.status == "ok", row.reason
        assert all(f in row.metrics for f in PROTOCOL_FIELDS), sorted(row.metrics)
        m = row.metrics
        assert m["ttft_ms_min"] <= m["ttft_ms"] <= m["ttft_ms_max"]
        assert m["decode_tok_s_min"] <= m["decode_tok_s"] <= m["decode_tok_s_max"]
        assert m["mem_kind"] == "host" and m["peak_mem_gib"] > 0.1  # torch alone is more than that
        assert row.tokens_agree == get_profile("quick").new_tokens
    assert rows["transformers"].distance == 0.0
    assert 0 < rows["transformers-compiled"].distance <= 1e-4
    # the accuracy figures over the probe's positions (harness/accuracy.py), beside the distance
    assert rows["transformers"].kl_mean == rows["transformers"].kl_p99 == 0.0 and rows["transformers"].top1_agree == 1.0
    compiled = rows["transformers-compiled"]
    assert 0 <= compiled.kl_mean <= compiled.kl_p99 < 1e-6 and compiled.top1_agree == 1.0
    shape = transformers_run.reference_distributions
    assert shape["positions"] >= 256 and 0 < shape["entropy_mean"] < shape["uniform_entropy"], shape


def test_the_result_file_records_the_run(transformers_run):
    r = transformers_run
    assert r.protocol == {"profile": "quick", "dtype": "f32", "device": "cpu", "timeout_s": 600}
    assert r.workload["prompt_tokens"] == 32 and r.workload["new_tokens"] == 8 and r.workload["runs"] == 2
    assert "torch" in r.machine["versions"] and "transformers" in r.machine["versions"] and r.machine["cpu"]


def test_misbehaving_runners_become_rows_and_the_run_goes_on(tiny, tmp_path):
    runners = [
        fake("crash", "Crash"),
        fake("hang", "Hang"),
        fake("unavailable", "Unavailable"),
        fake("missing", "Counting", "tests.fake_package_runner"),
        fake("short", "ShortCount"),
        fake("counting", "Counting"),
    ]
    result = load_result(run_bench(settings(tiny, tmp_path, runners, timeout_s=20)))
    rows = {r.runner: r for r in result.rows}
    assert [r.runner for r in result.rows] == [r.id for r in runners]
    assert rows["crash"].status == "failed" and "planted crash in prefill" in rows["crash"].reason
    assert rows["hang"].status == "failed" and rows["hang"].reason.startswith("timed out after 20 s")
    assert rows["unavailable"].status == "skipped" and rows["unavailable"].reason == "needs a planted accelerator"
    assert rows["missing"].status == "skipped" and rows["missing"].reason == "linnet_missing_stack_package is not installed"
    assert rows["short"].status == "failed" and "generated 7 tokens, not 8" in rows["short"].reason
    ok = rows["counting"]
    assert ok.status == "ok" and ok.distance is None
    assert "not compared: this engine exposes no logits" in ok.notes
    assert result.complete


class InterruptDuring(Display):
    """Presses Ctrl-C (in the main thread) a moment after the named runner starts."""

    def __init__(self, runner_id):
        self.runner_id = runner_id

    def start(self, runner):
        if runner.id == self.runner_id:
            threading.Timer(1.0, _thread.interrupt_main).start()


@pytest.fixture
def ctrl_c_raises():
    """Ctrl-C as a terminal delivers it. A job started in the background (`cmd &` in a script, as some CI runners
    do) inherits SIGINT ignored, and then Python installs no handler and interrupt_main() does nothing."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def test_ctrl_c_keeps_the_finished_rows(tiny, tmp_path, ctrl_c_raises):
    runners = [fake("counting", "Counting"), fake("hang", "Hang"), fake("never", "Counting")]
    with pytest.raises(KeyboardInterrupt):
        run_bench(settings(tiny, tmp_path, runners, timeout_s=60), InterruptDuring("hang"))
    [path] = tmp_path.glob("qwen2-tiny/*.json")
    result = load_result(path)
    assert not result.complete and result.interrupted
    assert [r.runner for r in result.rows] == ["counting"] and result.rows[0].status == "ok"
