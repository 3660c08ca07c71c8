"""The harness end to end: real child processes, a real transformers reference, and runners that misbehave."""

from __future__ import annotations

import _thread
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from harness.bench import BenchSettings, Display, run_bench
from harness.results import load_result
from harness.workload import get_profile
from runners import RUNNERS, RunnerInfo

ROOT = Path(__file__).resolve().parent.parent
PROTOCOL_FIELDS = [
    "ttft_ms", "ttft_ms_min", "ttft_ms_max", "decode_tok_s", "decode_tok_s_min", "decode_tok_s_max",
    "load_s", "first_call_s", "peak_mem_gib", "mem_kind", "runs", "warmups",
]  # fmt: skip


def fake(name: str, cls: str, module: str = "tests.fake_runners") -> RunnerInfo:
    return RunnerInfo(name, f"{module}:{cls}", name, "PyTorch")


def settings(tiny, tmp_path, runners, timeout_s=None) -> BenchSettings:
    return BenchSettings(tiny, tuple(runners), get_profile("quick"), "f32", "cpu", None, tmp_path, timeout_s=timeout_s)


def transformers_rows(result) -> dict:
    """Both transformers rows of a real `linnet-bench run`: suite_run, the GPU suite's dry run (tests/conftest.py)."""
    return {r.runner: r for r in result.rows if r.runner in ("transformers", "transformers-compiled")}


def test_a_child_reports_its_own_peak_memory_not_its_parents():
    """Linux carries ru_maxrss across exec, so a child read it as at least its parent's size: every row on the tiny
    model measured the harness's own 0.26-0.45 GiB. The child's own high-water mark (harness/memory.py) does not."""
    ballast = bytearray(600 * 2**20)
    ballast[::4096] = b"\x01" * len(ballast[::4096])  # touched, so it is resident
    code = ("import resource; from harness.memory import own_peak_rss_bytes; "
            "print(own_peak_rss_bytes(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    own, carried = map(int, out.split())
    assert carried >= 600 * 2**20  # on this kernel ru_maxrss holds the parent's ballast: the test tells them apart
    assert 0 < own < 200 * 2**20  # an interpreter with psutil


def test_both_transformers_rows_are_measured_with_distances(suite_run):
    rows = transformers_rows(suite_run)
    assert suite_run.complete and suite_run.weights == "synthetic" and len(rows) == 2
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
    shape = suite_run.reference_distributions
    assert shape["positions"] >= 256 and 0 < shape["entropy_mean"] < shape["uniform_entropy"], shape


def test_every_row_is_measured_against_the_float64_truth(suite_run):
    """The truth (transformers in float64 on the CPU, one full forward) is no row; each row's distance from it, and its
    ratio to the reference's own, are. In f32 both transformers rows sit ~1e-5 from it."""
    assert "transformers-f64" not in {r.runner for r in suite_run.rows}
    rows = transformers_rows(suite_run)
    reference, compiled = rows["transformers"], rows["transformers-compiled"]
    assert 0 < reference.truth_distance < 1e-4 and reference.truth_ratio == 1.0
    assert 0 < compiled.truth_distance < 1e-4 and 0.2 < compiled.truth_ratio < 5
    assert any("cached decode checked against a full forward" in n for n in reference.notes)


def test_each_decode_row_is_placed_against_the_memory_wall(suite_run, tiny):
    """The run measured this machine's bandwidth once; each row records the bytes a decode step reads and the share of
    the wall its median decode reaches (the tiny model sits in the caches, so only the arithmetic is checked here)."""
    from harness import roofline

    gb_s = suite_run.machine["memory_bandwidth_gb_s"]
    assert 1 < gb_s < 1000
    assert "the larger of 2 probes, at the run's start and end" in suite_run.machine["memory_bandwidth_method"]
    for row in transformers_rows(suite_run).values():
        read = roofline.bytes_per_token(tiny.config, "f32", None, 32, 8)
        assert row.metrics["bytes_per_token"] == read
        assert row.metrics["roofline"] == pytest.approx(row.metrics["decode_tok_s"] * read / (gb_s * 1e9))


def test_a_reference_whose_cache_is_ignored_refuses_to_be_the_reference(tiny, tmp_path):
    """transformers 5.17 dropped `cache=` silently and the reference decoded without context, 25 from every right row.
    Such a reference now fails its own check at load, in one line, and no row is compared with it; the float64 truth
    still measures every row, and shows the right row right."""
    runners = [RunnerInfo("transformers", "tests.fake_reference:ReferenceThatIgnoresItsCache", "transformers", "PyTorch"),
               RUNNERS["linnet-torch"]]  # fmt: skip
    result = load_result(run_bench(settings(tiny, tmp_path, runners)))
    reference, right = result.rows
    assert reference.status == "failed" and reference.distance is None
    assert "ignored the cache it was given, so it cannot be the reference" in reference.reason
    assert "Traceback" not in reference.reason and len(reference.reason.splitlines()) == 1
    assert right.status == "ok" and right.distance is None and right.truth_ratio is None
    assert any(n.startswith("not compared: the reference did not run (transformers ") for n in right.notes)
    assert 0 < right.truth_distance < 1e-4


def test_the_result_file_records_the_run(suite_run):
    r = suite_run  # as scripts/gpu-suite.sh --dry-run asked for it (its budget: tests/test_gpu_suite.py)
    asked = {"profile": "quick", "dtype": "f32", "device": "cpu", "timeout_s": 240, "trials": 1, "serving_trials": 1}
    assert {k: v for k, v in r.protocol.items() if k != "budget_s"} == asked and r.protocol["budget_s"] > 0
    assert r.workload["prompt_tokens"] == 32 and r.workload["new_tokens"] == 8 and r.workload["runs"] == 2
    assert "torch" in r.machine["versions"] and "transformers" in r.machine["versions"] and r.machine["cpu"]
    assert r.architecture == {"model_type": "qwen2", "layers": 2, "hidden_size": 64, "parameters": 164_416}


def test_misbehaving_runners_become_rows_and_the_run_goes_on(tiny, tmp_path):
    runners = [
        fake("crash", "Crash"),
        fake("half-loaded", "HalfLoaded"),
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
    half = rows["half-loaded"]  # its close() fails too, and must not hide why the row failed
    assert half.status == "failed" and "planted crash in load" in half.reason and "AttributeError" not in half.reason
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


class Order(Display):
    def __init__(self):
        self.started = []

    def start(self, runner):
        self.started.append(runner.id)


def test_trials_run_round_robin_keep_every_sample_and_summarise_them(tiny, tmp_path):
    runners = [fake("counting", "Counting"), fake("unavailable", "Unavailable"), fake("flaky", "CrashOnTrial2"),
               fake("other", "ScoresInTrial1Only")]  # fmt: skip
    order = Order()
    s = settings(tiny, tmp_path, runners, timeout_s=60)
    result = load_result(run_bench(BenchSettings(**{**s.__dict__, "trials": 3}), order))
    # the float64 truth and the reference score once; a skip is decided once; a failed trial ends its row
    assert order.started == ["transformers-f64", "transformers", "counting", "unavailable", "flaky", "other", "counting", "flaky", "other",
                             "counting", "other"]  # fmt: skip
    assert result.schema_version == 2 and result.protocol["trials"] == 3 and result.workload["runs"] == 2
    rows = {r.runner: r for r in result.rows}
    assert rows["unavailable"].status == "skipped" and rows["unavailable"].samples == {}
    assert rows["flaky"].status == "failed" and rows["flaky"].reason.startswith("trial 2 of 3 failed: ")
    assert "planted crash in trial 2" in rows["flaky"].reason
    ok = rows["counting"]
    assert ok.status == "ok" and ok.metrics["trials"] == 3
    assert [len(t) for t in ok.samples["decode_tok_s"]] == [2, 2, 2] and [len(t) for t in ok.samples["ttft_ms"]] == [2, 2, 2]
    assert [len(t) for t in ok.samples["load_s"]] == [1, 1, 1]  # a figure per trial
    every = [v for t in ok.samples["decode_tok_s"] for v in t]
    m = ok.metrics
    assert m["decode_tok_s_min"] == min(every) and m["decode_tok_s_max"] == max(every)
    assert m["decode_tok_s_min"] <= m["decode_tok_s_ci"][0] <= m["decode_tok_s"] <= m["decode_tok_s_ci"][1] <= m["decode_tok_s_max"]
    assert "peak_mem_gib_ci" in m and m["mem_kind"] == "host"
    assert 0 <= m["other_cpu_share"] <= 1  # the machine's CPU others used, the mean over its trials
    assert rows["other"].status == "ok" and "shape" in " ".join(rows["other"].notes)  # scored once, in trial 1


def test_the_sampler_counts_other_processes_cpu_and_not_the_run_s_own():
    """A busy machine is named: the share of the cores that processes other than the harness and its child used
    while the child ran, from /proc. A process spinning beside the child is counted; the child's own CPU is not."""
    import psutil

    from harness.memory import MemorySampler, machine_busy_seconds

    cores = psutil.cpu_count()
    spin = "import time\nend = time.process_time() + {}\nwhile time.process_time() < end: pass"
    hog = subprocess.Popen([sys.executable, "-c", spin.format(600)])
    try:
        hog_cpu = lambda: sum(psutil.Process(hog.pid).cpu_times()[:2])  # noqa: E731
        before_hog, before_machine = hog_cpu(), machine_busy_seconds()
        child = subprocess.Popen([sys.executable, "-c", spin.format(1.5)])  # the run's child: 1.5 s of CPU
        with MemorySampler(child.pid) as sampler:
            child.wait()
            wall = time.monotonic() - sampler._cpu_start[0]
        hog_seconds, machine_seconds = hog_cpu() - before_hog, machine_busy_seconds() - before_machine
    finally:
        hog.kill()
        hog.wait()
    others = sampler.other_cpu_share * wall * cores
    assert others >= 0.8 * hog_seconds and hog_seconds > 0.3, (others, hog_seconds, wall)  # the spinning process
    assert others <= machine_seconds - 1.3, (others, machine_seconds)  # not the child's 1.5 s

    # a grandchild the child never waits for (reparented to init when the child exits) is the run's own too
    orphaning = ("import subprocess, sys, time\n"
                 f"subprocess.Popen([sys.executable, '-c', {spin.format(1.5)!r}])\n"
                 "time.sleep(2.5)")  # fmt: skip
    before_machine = machine_busy_seconds()
    child = subprocess.Popen([sys.executable, "-c", orphaning])
    with MemorySampler(child.pid) as sampler:
        child.wait()
        wall = time.monotonic() - sampler._cpu_start[0]
    machine_seconds = machine_busy_seconds() - before_machine
    assert sampler.other_cpu_share * wall * cores <= machine_seconds - 1.0, (sampler.other_cpu_share, machine_seconds)


def test_a_build_step_s_memory_is_kept_apart_from_the_engine_s():
    """A process whose environment carries BUILD_ENV (runners.base.run_build: an export the engine then loads) is a
    step a user takes once, apart: its memory is the build's peak, in neither the engine's host nor GPU peak."""
    from harness.memory import MemorySampler
    from runners.base import BUILD_ENV

    hold = "import time\nblock = b'x' * ({} << 20)\ntime.sleep(1.5)"
    child_code = ("import os, subprocess, sys\n"
                  f"subprocess.run([sys.executable, '-c', {hold.format(600)!r}], check=True, "
                  f"env={{**os.environ, {BUILD_ENV!r}: 'export'}})\n"
                  f"exec({hold.format(200)!r})")  # fmt: skip
    child = subprocess.Popen([sys.executable, "-c", child_code])
    with MemorySampler(child.pid) as sampler:
        child.wait()
    assert child.returncode == 0
    assert sampler.peak_build_rss >= 600 << 20, sampler.peak_build_rss / 2**20
    assert 200 << 20 <= sampler.peak_rss < 400 << 20, sampler.peak_rss / 2**20


def test_a_gpu_whose_process_list_nvml_refuses_gives_a_row_without_gpu_memory_and_says_why(tiny, tmp_path, monkeypatch):
    """Under a sandbox or on a virtual GPU, NVML may refuse to list a GPU's processes. The sampler then goes on reading
    the host's memory (its thread once died at the first sample), and the row gets no GPU memory figure, rather than
    0 GiB, with a note saying why."""
    import pynvml

    from harness import bench, memory

    def refused(handles, pids):
        raise pynvml.NVMLError_NotSupported()

    monkeypatch.setattr(memory, "nvml_handles", lambda: ["a GPU"])
    monkeypatch.setattr(memory, "gpu_bytes", refused)
    child = subprocess.Popen([sys.executable, "-c", "import time\nblock = b'x' * (200 << 20)\ntime.sleep(1)"])
    with memory.MemorySampler(child.pid) as sampler:
        child.wait()
    assert sampler.peak_rss >= 200 << 20 and sampler.peak_gpu == 0
    assert sampler.gpu_unread == "NVML did not list the GPU's processes (Not Supported)"

    # the run's own samplers meet the same refusal
    monkeypatch.setattr(bench, "TRUTH", fake("truth", "Counting"))  # stand-ins: only the row's memory is looked at
    monkeypatch.setattr(bench, "get_runner", lambda name: fake(name, "Counting"))
    [row] = load_result(run_bench(settings(tiny, tmp_path, [fake("counting", "Counting")]))).rows
    assert row.status == "ok" and "peak_mem_gib" not in row.metrics and "mem_kind" not in row.metrics
    assert "no GPU memory figure: NVML did not list the GPU's processes (Not Supported)" in row.notes


# ---- signals and bad options ----------------------------------------------------------------------------------------


def test_a_child_killed_by_a_signal_is_a_failed_row_that_names_the_signal(tiny, tmp_path):
    result = load_result(run_bench(settings(tiny, tmp_path, [fake("killed", "Killed")], timeout_s=60)))
    [row] = result.rows
    assert row.status == "failed" and row.reason.startswith("killed by SIGKILL"), row.reason


def test_a_row_whose_figures_are_invalid_is_failed():
    from harness.bench import Reference, RowTrials, make_row
    from harness.launch import ChildOutcome

    record = {"status": "ok", "metrics": {"decode_tok_s": float("inf"), "ttft_ms": 1.0}, "has_logits": False}
    outcome = ChildOutcome(record, None, 1.0, 2**20, 0, False)
    row = RowTrials(make_row(fake("x", "Counting"), outcome, Path("."), Reference())).row  # as run_trials summarises it
    assert row.status == "failed" and "invalid figure" in row.reason and "decode_tok_s" in row.reason


# A launcher for `linnet-bench` with the fake runners registered: the real command line, runners that hang.
BENCH_WITH_FAKES = """
import sys
from runners import RUNNERS, RunnerInfo
for name, cls in (("counting", "Counting"), ("hang", "Hang")):
    RUNNERS[name] = RunnerInfo(name, f"tests.fake_runners:{cls}", name, "PyTorch")
from harness.cli import main
sys.argv = ["linnet-bench", *sys.argv[1:]]
main()
"""


def processes_mentioning(text: str) -> list[int]:
    """Process ids whose command line contains text (the children of a run name their scratch files)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and text in (proc / "cmdline").read_bytes().decode(errors="replace"):
                found.append(int(proc.name))
        except OSError:
            pass
    return found


def test_sigterm_to_a_run_ends_its_child_removes_its_scratch_and_keeps_the_rows(tiny, tmp_path):
    scratch_root = tmp_path / "tmp"
    scratch_root.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch_root), "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-c", BENCH_WITH_FAKES, "run", "qwen2-tiny", "--runner", "counting", "--runner", "hang",
               "--profile", "quick", "--timeout", "600", "--out", str(tmp_path / "results")]  # fmt: skip
    parent = subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while not list(scratch_root.glob("linnet-bench-*/hang/**/spec.json")):
            assert parent.poll() is None, parent.communicate()  # the run ended early: show why
            assert time.monotonic() < deadline, "the hanging row's child never started"
            time.sleep(0.2)
        [scratch] = scratch_root.glob("linnet-bench-*")
        deadline = time.monotonic() + 60
        while not processes_mentioning(str(scratch / "hang")):  # the child has started
            assert time.monotonic() < deadline
            time.sleep(0.2)
        parent.send_signal(signal.SIGTERM)
        out, err = parent.communicate(timeout=60)
    finally:
        if parent.poll() is None:
            parent.kill()
    assert parent.returncode == 130, out + err
    assert "Traceback" not in err, err
    assert not scratch.exists() and processes_mentioning(str(scratch)) == []
    [path] = (tmp_path / "results").glob("qwen2-tiny/*.json")
    result = load_result(path)
    assert not result.complete and [r.runner for r in result.rows] == ["counting"]


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "-inf"])
def test_a_timeout_that_is_not_a_positive_finite_number_is_a_one_line_error(value, tmp_path):
    out = subprocess.run([sys.executable, "-m", "harness.cli", "run", "qwen2-tiny", "--runner", "transformers",
                          "--timeout", value, "--out", str(tmp_path)], capture_output=True, text=True, cwd=ROOT,
                         timeout=120)  # fmt: skip
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --timeout"), out.stdout
