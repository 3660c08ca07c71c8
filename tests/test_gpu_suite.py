"""The GPU suite (scripts/gpu-suite.sh) prepared on a CPU: its exact command line in dry mode, a run's budget, and
`linnet-bench run` without the site's packages (the GPU image has no plotly)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.bench import BenchSettings, run_bench
from harness.results import load_result
from harness.workload import get_profile
from runners import RunnerInfo

ROOT = Path(__file__).resolve().parent.parent
SUITE_ROWS = ["transformers", "transformers-compiled", "linnet-cudagraphs", "serve-linnet-cudagraphs", "serve-linnet-xla",
              "linnet-inductor", "linnet-jax", "linnet-torch", "linnet-stablehlo", "serve-transformers-batched",
              "kerashub", "serve-kerashub-static"]  # fmt: skip


def test_the_suites_command_line_runs_in_dry_mode_without_plotly(suite_dry_run):
    """What `make gpu` runs on the device, on the tiny model on this CPU: every row of the suite is there, the CUDA-only
    one skipped with its reason, every other measured and within its truth-ratio bound, and the summary printed."""
    out, folder, result = suite_dry_run
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "result file:" in out.stdout and "Traceback" not in out.stdout + out.stderr
    assert result is not None, list(folder.iterdir())  # the result file, copied beside the log
    rows = {r.runner: r for r in result.rows}
    assert list(rows) == SUITE_ROWS and result.complete
    # the run's budget: the suite's seconds (1200 in dry mode) less the run's end (15) and the suite's (5), the
    # diagnostics only getting what the rows leave
    assert 1150 <= result.protocol["budget_s"] <= 1180, result.protocol
    assert rows["linnet-cudagraphs"].status == "skipped" and "need a GPU" in rows["linnet-cudagraphs"].reason
    for runner, row in rows.items():
        if runner != "linnet-cudagraphs":
            assert row.status == "ok", (runner, row.reason)
    for row in rows.values():
        if row.truth_ratio is not None:
            assert row.truth_ratio <= 10, (row.runner, row.truth_ratio)
    assert rows["transformers"].truth_ratio == 1.0 and rows["linnet-jax"].truth_ratio is not None
    kernels = (folder / "step-kernels.txt").read_text()  # the decode step's ops here (kernels on a GPU)
    steps = re.findall(r"^(\d+) row\(s\), a (decode|prefill) step.*: (\d+) ops, ", kernels, re.M)
    assert [s[:2] for s in steps] == [("1", "decode"), ("4", "decode"), ("4", "prefill")], kernels
    assert all(int(n) > 20 for *_, n in steps) and "3 chunks (768 tokens, 1 continuing a prompt), 1 rows decoding" in kernels, kernels
    assert "aten::scaled_dot_product_attention" in kernels and "Traceback" not in kernels, kernels
    tests = (folder / "gpu-tests.log").read_text()  # the GPU's own tests: collected, and skipped here
    assert "needs a GPU" in tests and " skipped" in tests and not re.search(r"\b(ERROR|FAILED|failed|error)\b", tests), tests
    targets = (folder / "targets.txt").read_text()  # the GPU issues' targets, last in the reply's tail
    assert re.search(r"no figure +linnet-cudagraphs decode +linnet-cudagraphs skipped: CUDA graphs need a GPU", targets)
    assert re.search(r"met +transformers decodes through its cache", targets) and "issue 28, speed" in targets, targets
    assert targets.splitlines()[-1] in out.stdout and re.search(r"^the suite took \d+ s of command time", out.stdout, re.M)


def test_rows_that_spend_the_suites_time_leave_the_diagnostics_out_and_the_targets_still_end_it(tmp_path, without_plotly):
    """The result file comes first: the run's budget is the suite's seconds less the ends of the run and the suite (here
    21 s: 1 s, spent before any row started), and where the rows leave under MIN_SECONDS of the suite's, the GPU tests
    and the kernel listing are left out, each with a line saying so, not cut short; the targets still end the output."""
    env = {**without_plotly, "OUT": str(tmp_path / "out"), "PYTHON": sys.executable, "GPU_SUITE_SECONDS": "21"}
    out = subprocess.run(["bash", "scripts/gpu-suite.sh", "--dry-run"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)  # fmt: skip
    assert out.returncode == 0 and "Traceback" not in out.stdout + out.stderr, out.stdout[-3000:] + out.stderr[-3000:]
    [path] = (tmp_path / "out").glob("*.json")
    assert load_result(path).protocol["budget_s"] == 1
    for name, line in (("gpu-tests.log", "the GPU tests are not run"), ("step-kernels.txt", "the steps' kernels are not listed")):
        text = (tmp_path / "out" / name).read_text()
        assert re.fullmatch(rf"{line}: \d+ s of the suite's 21 were left\n", text), text
    assert "no figure  linnet.serve on XLA" in out.stdout
    assert out.stdout.splitlines()[-1].startswith("the suite took "), out.stdout[-1000:]


@pytest.mark.parametrize("knob, value", [("GPU_SUITE_SECONDS", "1x"), ("GPU_SUITE_TEST_SECONDS", "-5"),
                                         ("GPU_SUITE_KERNEL_SECONDS", "x[$(touch pwned)]"), ("GPU_SUITE_SECONDS", "9" * 40)])
def test_a_suite_knob_that_is_no_whole_number_of_seconds_is_refused_in_one_line(tmp_path, knob, value):
    out = subprocess.run(["bash", "scripts/gpu-suite.sh", "--dry-run"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "OUT": str(tmp_path / "out"), knob: value})  # fmt: skip
    assert out.returncode == 2 and out.stdout == "" and not (tmp_path / "out").exists(), out
    assert out.stderr.startswith(f"error: {knob} must be a whole number of seconds") and len(out.stderr.splitlines()) == 1
    assert not (ROOT / "pwned").exists()


def test_run_imports_no_site_package(tmp_path, without_plotly):
    out = subprocess.run([sys.executable, "-c", "import sys, harness.cli; print(sorted(m for m in sys.modules if m.split('.')[0] in "
                          "('plotly', 'jinja2', 'harness.site', 'fastapi', 'uvicorn', 'ray', 'torch', 'jax')))"],
                         cwd=ROOT, env=without_plotly, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr


def fake(name: str, cls: str) -> RunnerInfo:
    return RunnerInfo(name, f"tests.fake_runners:{cls}", name, "PyTorch")


def test_a_budget_cuts_the_running_child_and_starts_no_more(tiny, tiny_checkpoint, tmp_path, monkeypatch):
    """A 20 s budget, counted from the run's start, cuts the hanging row's child at its end and starts nothing after
    it, here the row given with --extra-runner, whose trial would come last though it is listed first; the file says
    so, and neither row is failed: the run's time ran out, not the rows. (The truth and the reference are stand-ins
    here, so that the budget's arithmetic does not hang on how fast torch imports.)"""
    from harness import bench

    monkeypatch.setattr(bench, "TRUTH", fake("truth", "Counting"))
    monkeypatch.setattr(bench, "get_runner", lambda name: fake(name, "Counting"))
    checkpoint_for = bench.checkpoint_for
    monkeypatch.setattr(bench, "checkpoint_for", lambda *a: time.sleep(8) or checkpoint_for(*a))  # a slow checkpoint
    monkeypatch.setattr(bench, "MIN_TRIAL_S", 1.0)  # the hanging row starts in what the 8 s leave
    settings = BenchSettings(tiny, (fake("counting", "Counting"), fake("hang", "Hang")), get_profile("quick"), "f32", "cpu",
                             None, tmp_path, timeout_s=600, budget_s=20, extra=frozenset({"counting"}))  # fmt: skip
    started = time.monotonic()
    result = load_result(run_bench(settings))
    assert time.monotonic() - started < 26  # 20 s, the machine's bandwidth probed again at the end, the file written
    hang, counting = result.rows
    assert hang.status == "skipped" and hang.reason.startswith("cut short: the run's budget of 20 s was spent"), hang.reason
    assert counting.status == "skipped" and counting.reason == "not started: the run's budget of 20 s was spent"
    assert "not compared with the truth: the float64 truth did not run (it gave no logits)" not in hang.notes
    assert result.complete and result.protocol["budget_s"] == 20


def test_extra_rows_start_their_trials_after_every_other_rows():
    from harness.bench import trial_order

    rows = [fake(name, "Counting") for name in ("transformers", "x", "a", "y", "b")]
    planned = {"transformers": 2, "x": 2, "a": 3, "y": 1, "b": 2}
    started = [(k, info.id) for k, info in trial_order(rows, planned, frozenset({"x", "y"}))]
    assert started == [(1, "transformers"), (1, "a"), (1, "b"), (2, "transformers"), (2, "a"), (2, "b"), (3, "a"),
                       (1, "x"), (1, "y"), (2, "x")]  # fmt: skip
    assert [info.id for _, info in trial_order(rows, planned, frozenset())][:5] == ["transformers", "x", "a", "y", "b"]


@pytest.mark.parametrize("flags, message", [
    (["--extra-runner", "transformers"], "--extra-runner transformers: the reference runs first"),
    (["--runner", "linnet-torch", "--extra-runner", "linnet-torch"], "--extra-runner linnet-torch: it is given with --runner too"),
    (["--extra-runner", "no-such-row"], "unknown runner 'no-such-row'"),
    (["--extra-runner", "<b>" * 5000], "unknown runner '" + "<b>" * 26 + "<b'; known runners: "),  # cut to 80 characters
])  # fmt: skip
def test_an_extra_row_that_cannot_come_last_is_refused(flags, message, tmp_path):
    out = subprocess.run([sys.executable, "-m", "harness.cli", "run", "qwen2-tiny", *flags, "--out", str(tmp_path)],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 1 and out.stdout.strip().startswith(f"error: {message}"), out.stdout + out.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("budget", ["0", "-5", "nan", "inf", "1e12"])
def test_a_budget_that_is_no_number_of_seconds_is_refused(budget, tmp_path):
    out = subprocess.run([sys.executable, "-m", "harness.cli", "run", "qwen2-tiny", "--budget", budget, "--out", str(tmp_path)],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 1 and out.stdout.strip().startswith(f"error: --budget {float(budget)}"), out.stdout + out.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("flags", [["--rows", "0"], ["--prompt", "640"], ["--prompt", "nan"], ["--max-positions", "100"],
                                   ["--rows", "1e9x"]])  # fmt: skip
def test_the_kernel_listing_refuses_bad_flags_in_one_line(flags):
    out = subprocess.run([sys.executable, "scripts/gpu_step_kernels.py", "qwen2-tiny", "--device", "cpu", *flags],
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                         timeout=300)  # fmt: skip
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith("gpu_step_kernels.py: error: "), out.stderr
