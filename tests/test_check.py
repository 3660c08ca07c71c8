"""The regression check on result files built here (no benchmarking), the CLI's exit codes and one-line errors, and
the CI gate's settings on the committed baseline."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.check import GATE_THRESHOLDS, TOLERANCES, Thresholds, best_of, check, tolerance
from harness.results import SCHEMA_VERSION, ResultFile, Row, load_result, write_result
from linnet_core.errors import UserError
from runners import REFERENCE, RUNNERS

ROOT = Path(__file__).resolve().parent.parent
GATE_BASELINE = ROOT / ".ci" / "baseline" / "qwen2-tiny.json"


def metrics(decode=50.0, ttft=40.0, load=4.0, mem=0.5, spread=0.02) -> dict:
    """A row's metrics with a +-spread around each timed median (load and memory have no spread, as measured)."""
    return {
        "decode_tok_s": decode, "decode_tok_s_min": decode * (1 - spread), "decode_tok_s_max": decode * (1 + spread),
        "ttft_ms": ttft, "ttft_ms_min": ttft * (1 - spread), "ttft_ms_max": ttft * (1 + spread),
        "load_s": load, "first_call_s": 0.2, "peak_mem_gib": mem, "mem_kind": "host",
    }  # fmt: skip


def row(runner: str, status="ok", distance=0.0, **kw) -> Row:
    if status != "ok":
        return Row(runner=runner, label=runner, group="PyTorch", status=status, reason=f"planted {status}\nmore")
    return Row(runner=runner, label=runner, group="PyTorch", status="ok", distance=distance, metrics=metrics(**kw))


def run(*rows: Row, cpu="AMD EPYC", run_id="r1", created_at="2026-12-02T00:00:00+00:00", dtype="f32") -> ResultFile:
    return ResultFile(
        schema_version=SCHEMA_VERSION, model="qwen2-tiny", run_id=run_id, created_at=created_at,
        machine={"cpu": cpu, "cpu_cores": 2}, workload={"prompt_tokens": 32, "new_tokens": 8, "batch": 1},
        protocol={"profile": "quick", "dtype": dtype, "device": "cpu"}, weights="synthetic", rows=list(rows),
    )  # fmt: skip


def baseline_rows() -> list[Row]:
    return [row(REFERENCE), row("transformers-compiled", distance=1.6e-5, decode=20.0, ttft=200.0, load=4.5, mem=0.6)]


def compare(tmp_path, candidate: ResultFile, baseline: ResultFile | None = None, **kw):
    write_result(candidate, tmp_path / "candidate.json")
    write_result(baseline or run(*baseline_rows()), tmp_path / "baseline.json")
    return check(tmp_path / "candidate.json", tmp_path / "baseline.json", **kw)


def regressions(report) -> set[tuple[str, str]]:
    return {(f.runner, f.subject) for f in report.findings("regression")}


def planted(change) -> ResultFile:
    """The baseline run with `change(rows)` applied to its rows."""
    rows = baseline_rows()
    change({r.runner: r for r in rows})
    return run(*rows, run_id="r2")


def scale(r: Row, name: str, factor: float) -> None:
    for key in (name, f"{name}_min", f"{name}_max"):
        if key in r.metrics:
            r.metrics[key] *= factor


def test_identical_files_pass(tmp_path):
    report = compare(tmp_path, run(*baseline_rows()))
    assert report.passed and not report.findings("improvement")
    assert all(r.verdict == "same" for r in report.comparisons[0].rows)
    assert not report.comparisons[0].ratios


def test_a_planted_30_percent_decode_slowdown_fails(tmp_path):
    report = compare(tmp_path, planted(lambda rows: scale(rows["transformers-compiled"], "decode_tok_s", 0.7)))
    assert regressions(report) == {("transformers-compiled", "decode_tok_s")}
    (finding,) = report.findings("regression")
    assert finding.change == pytest.approx(-0.3) and finding.baseline == 20.0 and finding.candidate == pytest.approx(14.0)


@pytest.mark.parametrize("name, factor", [("ttft_ms", 1.3), ("load_s", 1.3), ("peak_mem_gib", 1.5)])
def test_a_rise_in_time_or_memory_fails(tmp_path, name, factor):
    report = compare(tmp_path, planted(lambda rows: scale(rows["transformers-compiled"], name, factor)))
    assert regressions(report) == {("transformers-compiled", name)}


def test_changes_within_the_threshold_or_the_spread_are_noise(tmp_path):
    within_threshold = planted(lambda rows: scale(rows["transformers-compiled"], "decode_tok_s", 0.96))
    assert compare(tmp_path, within_threshold).passed
    assert compare(tmp_path, planted(lambda rows: scale(rows["transformers-compiled"], "peak_mem_gib", 1.15))).passed

    def noisy(rows):  # 30% slower in the median, but the two runs' spreads overlap: noise
        slow = rows["transformers-compiled"]
        scale(slow, "decode_tok_s", 0.7)
        slow.metrics["decode_tok_s_max"] = 21.0

    report = compare(tmp_path, planted(noisy))
    assert report.passed and report.comparisons[0].rows[1].changes["decode_tok_s"] == pytest.approx(-0.3)


def test_a_planted_distance_of_one_on_an_f32_row_fails(tmp_path):
    def wrong(rows):
        rows["transformers-compiled"].distance = 1.0

    report = compare(tmp_path, planted(wrong))
    assert regressions(report) == {("transformers-compiled", "distance")}
    assert "above its tolerance 0.0001" in report.findings("regression")[0].message


def test_tolerances_follow_the_row_and_the_run_dtype():
    assert tolerance("transformers-compiled", "f32") == TOLERANCES["f32"] == 1e-4
    assert tolerance("linnet-ort-f16", "f32") == TOLERANCES["f16"]  # an f16 row in an f32 run: its own rounding
    assert tolerance("linnet-ort-f32", "bf16") == TOLERANCES["bf16"]  # compared with a bf16 reference
    assert tolerance("transformers", "bf16") == TOLERANCES["bf16"]
    assert tolerance("linnet-torch", "f32", "qwen2-tiny") == 1e-4  # 2 layers: the project's bar
    assert tolerance("linnet-torch", "f32", "qwen2.5-0.5b-instruct") == pytest.approx(1.2e-3)  # 24 layers
    assert tolerance("linnet-ort-f16", "f32", "qwen2.5-0.5b-instruct") == TOLERANCES["f16"]


def test_a_deep_models_f32_rows_pass_at_their_measured_distances_and_a_wrong_answer_fails(tmp_path):
    measured = ROOT / "results" / "qwen2.5-0.5b-instruct" / "20261202T210342Z.json"
    run = load_result(measured)
    assert run.protocol["dtype"] == "f32" and max(r.distance for r in run.rows) > 1e-4
    assert check(measured, measured).passed
    wrong = run.model_copy(deep=True)
    next(r for r in wrong.rows if r.runner == "linnet-torch").distance = 0.01
    write_result(wrong, tmp_path / "wrong.json")
    assert regressions(check(tmp_path / "wrong.json", measured)) == {("linnet-torch", "distance")}
    assert TOLERANCES["f32"] < TOLERANCES["f16"] < TOLERANCES["bf16"] < 1.0


@pytest.mark.parametrize("distance, passes", [(0.3, True), (1.0, False)])
def test_bf16_rows_get_the_bf16_bound(tmp_path, distance, passes):
    base = run(row(REFERENCE), row("linnet-ort-bf16", distance=0.2), dtype="bf16")
    cand = run(row(REFERENCE), row("linnet-ort-bf16", distance=distance), dtype="bf16")
    assert compare(tmp_path, cand, base).passed is passes


def test_a_row_that_became_failed_fails(tmp_path):
    report = compare(tmp_path, run(row(REFERENCE), row("transformers-compiled", status="failed")))
    assert regressions(report) == {("transformers-compiled", "status")}
    assert "was ok, now failed: planted failed" in report.findings("regression")[0].message


def test_a_row_that_became_skipped_fails_and_one_that_stays_failed_does_not(tmp_path):
    assert regressions(compare(tmp_path, run(row(REFERENCE), row("transformers-compiled", status="skipped"))))
    base = run(row(REFERENCE), row("transformers-compiled", status="failed"))
    assert compare(tmp_path, run(row(REFERENCE), row("transformers-compiled", status="failed")), base).passed


def test_a_row_that_now_runs_is_an_improvement_unless_it_is_wrong(tmp_path):
    base = run(row(REFERENCE), row("transformers-compiled", status="failed"))
    assert compare(tmp_path, run(*baseline_rows()), base).findings("improvement")
    wrong = planted(lambda rows: setattr(rows["transformers-compiled"], "distance", 1.0))
    assert regressions(compare(tmp_path, wrong, base)) == {("transformers-compiled", "distance")}


def test_a_row_no_longer_compared_with_the_reference_fails(tmp_path):
    uncompared = planted(lambda rows: setattr(rows["transformers-compiled"], "distance", None))
    uncompared.rows[1].notes.append("not compared: this engine exposes no logits")
    report = compare(tmp_path, uncompared)
    assert regressions(report) == {("transformers-compiled", "distance")}
    assert "this engine exposes no logits" in report.findings("regression")[0].message


def test_a_vanished_row_fails(tmp_path):
    report = compare(tmp_path, run(row(REFERENCE)))
    assert regressions(report) == {("transformers-compiled", "row")}
    assert report.comparisons[0].rows[1].verdict == "regressed"


def test_an_improvement_is_reported_and_passes(tmp_path):
    report = compare(tmp_path, planted(lambda rows: scale(rows["transformers-compiled"], "decode_tok_s", 1.5)))
    assert report.passed
    (better,) = report.findings("improvement")
    assert (better.runner, better.subject) == ("transformers-compiled", "decode_tok_s")
    assert better.change == pytest.approx(0.5)


def test_rows_the_baseline_lacks_are_reported_as_new_and_not_judged(tmp_path):
    cand = run(*baseline_rows(), row("linnet-torch", distance=1.0, decode=1.0))
    report = compare(tmp_path, cand)
    assert report.passed
    (new,) = report.findings("new")
    assert new.runner == "linnet-torch" and "above its tolerance" in new.message


def on_another_machine(r: ResultFile, factor=2.0) -> ResultFile:
    """Every absolute number times `factor`, on a machine with another CPU."""
    out = r.model_copy(deep=True, update={"machine": {"cpu": "Intel Xeon", "cpu_cores": 64}})
    for row_ in out.rows:
        for name in ("decode_tok_s", "ttft_ms", "load_s", "peak_mem_gib"):
            scale(row_, name, factor)
    return out


def test_another_machine_is_compared_by_ratios_to_the_reference(tmp_path):
    report = compare(tmp_path, on_another_machine(run(*baseline_rows())))
    comparison = report.comparisons[0]
    assert report.passed and comparison.ratios and "cpu 'Intel Xeon' vs 'AMD EPYC'" in comparison.why_ratios
    assert comparison.rows[1].changes["decode_tok_s"] == pytest.approx(0.0)
    # The same numbers on the same machine are a 2x change: absolute mode sees it.
    same_machine = on_another_machine(run(*baseline_rows())).model_copy(update={"machine": {"cpu": "AMD EPYC"}})
    assert not compare(tmp_path, same_machine).passed


def test_ratio_mode_catches_a_slowdown_relative_to_the_reference(tmp_path):
    slower = on_another_machine(planted(lambda rows: scale(rows["transformers-compiled"], "decode_tok_s", 0.7)))
    report = compare(tmp_path, slower)
    assert report.comparisons[0].ratios
    assert regressions(report) == {("transformers-compiled", "decode_tok_s")}
    assert report.findings("regression")[0].change == pytest.approx(-0.3)


def test_ratios_can_be_forced_on_one_machine(tmp_path):
    # The whole machine is twice as slow: absolute figures regress, ratios to the reference do not.
    busy = on_another_machine(run(*baseline_rows()), 0.5).model_copy(update={"machine": {"cpu": "AMD EPYC"}})
    assert not compare(tmp_path, busy).passed
    report = compare(tmp_path, busy, ratios=True)
    assert report.passed and report.comparisons[0].why_ratios == "--ratios"


def test_without_a_reference_ratios_are_not_compared_and_say_why(tmp_path):
    cand = on_another_machine(run(row(REFERENCE, status="failed"), baseline_rows()[1]))
    report = compare(tmp_path, cand)
    assert regressions(report) == {(REFERENCE, "status")}
    notes = [f.message for f in report.findings("note")]
    assert any("the candidate run has no measured transformers row" in n for n in notes), notes


def test_runs_of_another_workload_are_refused(tmp_path):
    other = run(*baseline_rows())
    other.workload["new_tokens"] = 128
    with pytest.raises(UserError, match="new_tokens 128 vs 8"):
        compare(tmp_path, other)


def test_directory_mode_takes_the_latest_run_of_each_model(tmp_path):
    cand_dir, base_dir = tmp_path / "cand", tmp_path / "base"
    write_result(run(*baseline_rows()), base_dir / "qwen2-tiny" / "r1.json")
    slow = planted(lambda rows: scale(rows["transformers-compiled"], "decode_tok_s", 0.5))
    write_result(slow, cand_dir / "qwen2-tiny" / "b-old.json")
    fine = run(*baseline_rows(), run_id="r3", created_at="2026-12-03T00:00:00+00:00")
    write_result(fine, cand_dir / "qwen2-tiny" / "a-new.json")  # sorts first by name, newest by created_at
    report = check(cand_dir, base_dir)
    assert report.passed and report.comparisons[0].candidate.run_id == "r3"
    write_result(slow.model_copy(update={"created_at": "2026-12-04T00:00:00+00:00"}), cand_dir / "qwen2-tiny" / "b-old.json")
    assert regressions(check(cand_dir, base_dir)) == {("transformers-compiled", "decode_tok_s")}


def test_directory_mode_matches_models_and_a_missing_model_fails(tmp_path):
    cand_dir, base_dir = tmp_path / "cand", tmp_path / "base"
    write_result(run(*baseline_rows()), base_dir / "qwen2-tiny" / "r1.json")
    other = run(*baseline_rows()).model_copy(update={"model": "qwen2.5-0.5b-instruct"})
    write_result(other, base_dir / "qwen2.5-0.5b-instruct" / "r1.json")
    write_result(run(*baseline_rows()), cand_dir / "qwen2-tiny" / "r1.json")
    report = check(cand_dir, base_dir)
    assert [c.model for c in report.comparisons] == ["qwen2-tiny", "qwen2.5-0.5b-instruct"]
    assert regressions(report) == {(REFERENCE, "row"), ("transformers-compiled", "row")}
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="empty: no result files"):
        check(cand_dir, tmp_path / "empty")


def test_best_of_takes_the_better_repeat_for_speed_and_the_worse_for_correctness():
    fast = run(row(REFERENCE, decode=60.0), row("transformers-compiled", distance=1e-5, decode=20.0, ttft=100.0), run_id="a")
    slow = run(row(REFERENCE, decode=30.0), row("transformers-compiled", distance=3e-5, decode=25.0, ttft=300.0), run_id="b")
    best = best_of([fast, slow])
    ref, compiled = best.rows
    assert ref.metrics["decode_tok_s"] == 60.0 and ref.metrics["decode_tok_s_max"] == pytest.approx(61.2)
    assert compiled.metrics["decode_tok_s"] == 25.0 and compiled.metrics["ttft_ms"] == 100.0
    assert compiled.distance == 3e-5 and best.best_of == ["a", "b"]
    broken = run(row(REFERENCE), row("transformers-compiled", status="failed"), run_id="c")
    assert best_of([fast, broken]).rows[1].status == "failed"


# ---- the command line -----------------------------------------------------------------------------------------------


def cli(*args):
    return subprocess.run([sys.executable, "-m", "harness.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)  # fmt: skip


def test_the_cli_exits_0_on_a_pass_and_1_on_a_regression_with_a_json_report(tmp_path):
    write_result(run(*baseline_rows()), tmp_path / "base.json")
    write_result(run(*baseline_rows()), tmp_path / "same.json")
    out = cli("check", tmp_path / "same.json", "--baseline", tmp_path / "base.json")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip().splitlines()[-1].startswith("PASS: no regression in 2 row(s)")

    write_result(planted(lambda rows: scale(rows["transformers-compiled"], "decode_tok_s", 0.7)), tmp_path / "slow.json")
    out = cli("check", tmp_path / "slow.json", "--baseline", tmp_path / "base.json", "--json", tmp_path / "r.json")
    assert out.returncode == 1, out.stdout + out.stderr
    assert out.stdout.strip().splitlines()[-1] == "FAIL: 1 regression(s): transformers-compiled decode"
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["passed"] is False and report["regressions"] == 1
    rows = report["comparisons"][0]["rows"]
    assert [r["verdict"] for r in rows] == ["same", "regressed"]
    assert rows[1]["findings"][0]["subject"] == "decode_tok_s"

    loose = cli("check", tmp_path / "slow.json", "--baseline", tmp_path / "base.json", "--threshold-speed", "0.5")
    assert loose.returncode == 0, loose.stdout


def test_the_cli_says_when_it_compares_by_ratios(tmp_path):
    write_result(run(*baseline_rows()), tmp_path / "base.json")
    write_result(on_another_machine(run(*baseline_rows())), tmp_path / "other.json")
    out = cli("check", tmp_path / "other.json", "--baseline", tmp_path / "base.json")
    assert out.returncode == 0 and "ratio to transformers" in out.stdout and "machines differ" in out.stdout


@pytest.mark.parametrize(
    "text, message",
    [
        ("{not json", "not a JSON result file"),
        ('{"schema_version": 1, "model": "m"}', "malformed result file"),
        ('{"schema_version": 99, "model": "qwen2-tiny"}', "result schema version 99 is not known"),
    ],
)
def test_malformed_and_unknown_version_files_are_one_line_errors(tmp_path, text, message):
    write_result(run(*baseline_rows()), tmp_path / "base.json")
    (tmp_path / "bad.json").write_text(text)
    sides = [("bad.json", "base.json")] + ([("base.json", "bad.json")] if "version" in message else [])
    for candidate, baseline in sides:
        out = cli("check", tmp_path / candidate, "--baseline", tmp_path / baseline)
        assert out.returncode == 1, out
        lines = out.stdout.strip().splitlines()
        assert len(lines) == 1 and message in lines[0] and "bad.json" in lines[0], out.stdout
        assert "Traceback" not in out.stderr


def test_best_of_on_the_cli_writes_one_result_file(tmp_path):
    write_result(run(row(REFERENCE, decode=60.0), run_id="a"), tmp_path / "a.json")
    write_result(run(row(REFERENCE, decode=30.0), run_id="b"), tmp_path / "b.json")
    out = cli("best-of", tmp_path / "a.json", tmp_path / "b.json", "--out", tmp_path / "best.json")
    assert out.returncode == 0, out.stdout + out.stderr
    assert load_result(tmp_path / "best.json").rows[0].metrics["decode_tok_s"] == 60.0


# ---- the CI gate ----------------------------------------------------------------------------------------------------


def gate_runners() -> list[str]:
    text = (ROOT / "Makefile").read_text()
    return re.search(r"^GATE_RUNNERS\s*[:?]?=\s*(.*)$", text, re.M).group(1).split()


def test_the_gate_runs_known_runners_and_its_baseline_holds_only_those():
    assert gate_runners() and all(r in RUNNERS for r in gate_runners()), gate_runners()
    baseline = load_result(GATE_BASELINE)
    assert baseline.protocol["profile"] == "gate" and baseline.protocol["dtype"] == "f32"
    assert {r.runner for r in baseline.rows} <= set(gate_runners())  # else every gate run reports a vanished row
    assert all(r.status == "ok" for r in baseline.rows), [(r.runner, r.reason) for r in baseline.rows]
    assert "make gate" in (ROOT / ".ci" / "run").read_text()


def gate(tmp_path, candidate: ResultFile):
    write_result(candidate, tmp_path / "candidate.json")
    return check(tmp_path / "candidate.json", GATE_BASELINE, GATE_THRESHOLDS, ratios=True)


def planted_on_the_baseline(change) -> ResultFile:
    measured = load_result(GATE_BASELINE)
    change({r.runner: r for r in measured.rows})
    return measured.model_copy(update={"machine": {"cpu": "a CI machine"}})


def test_the_gate_passes_its_own_baseline_on_another_machine(tmp_path):
    report = gate(tmp_path, on_another_machine(load_result(GATE_BASELINE), 0.6))
    assert report.passed and report.comparisons[0].ratios


def test_the_gate_catches_a_planted_slowdown_of_a_row_relative_to_the_reference(tmp_path):
    others = [r.runner for r in load_result(GATE_BASELINE).rows if r.runner != REFERENCE]
    assert others, "the gate's baseline needs rows besides the reference"

    def half_as_fast(rows):
        for runner in others:
            scale(rows[runner], "decode_tok_s", 0.5)

    found = regressions(gate(tmp_path, planted_on_the_baseline(half_as_fast)))
    assert found == {(r, "decode_tok_s") for r in others}, (
        f"{found}: the committed baseline's spreads are too wide to catch a 2x slowdown; "
        "re-run `make baseline` on a quiet machine"
    )


def test_the_gate_catches_a_planted_wrong_answer(tmp_path):
    def wrong(rows):
        rows["transformers-compiled"].distance = 1.0

    assert regressions(gate(tmp_path, planted_on_the_baseline(wrong))) == {("transformers-compiled", "distance")}


def test_the_gate_does_not_judge_times_too_short_to_measure_but_judges_the_rest(tmp_path):
    def slower(rows):
        for runner, row in rows.items():
            if runner != REFERENCE:
                scale(row, "ttft_ms", 3.0)
                scale(row, "decode_tok_s", 0.5)

    report = gate(tmp_path, planted_on_the_baseline(slower))
    short = {r.runner for r in load_result(GATE_BASELINE).rows if r.runner != REFERENCE and r.metrics["ttft_ms"] * 3 < 50}
    assert short, "the gate's baseline has no row with a TTFT under 50 ms: this test proves nothing"
    found = regressions(report)
    assert not {(r, "ttft_ms") for r in short} & found
    assert {(r, "decode_tok_s") for r in short} <= found  # decode is judged whatever its size
    notes = [f.message for c in report.comparisons for row in c.rows for f in row.findings if f.kind == "note"]
    assert "TTFT not judged: under 50 ms in both runs" in notes


def test_the_gate_thresholds_are_wider_than_the_defaults():
    assert GATE_THRESHOLDS.speed > Thresholds().speed and GATE_THRESHOLDS.memory >= Thresholds().memory


# The gate script itself, with a stand-in for `linnet-bench run` that hands out planted result files in order.
FAKE_BENCH = """
import pathlib, shutil, sys
from harness.cli import main

queue, log = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
args = sys.argv[3:]
if args[0] == "run":
    out = pathlib.Path(args[args.index("--out") + 1]) / "qwen2-tiny"
    out.mkdir(parents=True)
    planted = sorted(queue.glob("*.json"))[0]
    shutil.move(planted, out / planted.name)
    with log.open("a") as f:
        f.write(" ".join(args) + "\\n")
else:
    sys.argv = ["linnet-bench", *args]
    main()
"""


def gate_script(tmp_path, mode: str, tries: list[ResultFile], baseline: Path | None = None):
    if baseline is None:
        baseline = tmp_path / "baseline.json"
        write_result(run(*baseline_rows()), baseline)
    queue = tmp_path / "queue"
    for i, r in enumerate(tries):
        write_result(r.model_copy(update={"run_id": f"try{i}"}), queue / f"{i}.json")
    (tmp_path / "fake_bench.py").write_text(FAKE_BENCH)
    bench = f"{sys.executable} {tmp_path / 'fake_bench.py'} {queue} {tmp_path / 'runs.log'}"
    env = {"PATH": "/usr/bin:/bin", "BENCH": bench, "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)}
    out = subprocess.run([str(ROOT / ".ci" / "gate"), mode, str(baseline), str(len(tries)), *gate_runners()],
                         capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    runs = (tmp_path / "runs.log").read_text().splitlines() if (tmp_path / "runs.log").exists() else []
    return out, runs


def test_the_gate_script_passes_a_good_build_on_its_first_try(tmp_path):
    out, runs = gate_script(tmp_path, "check", [on_another_machine(run(*baseline_rows()), 0.7)] * 2)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "gate: passed on try 1 of 2" in out.stdout and len(runs) == 1
    assert "--profile gate --device cpu --dtype f32" in runs[0]
    assert " ".join(f"--runner {r}" for r in gate_runners()) in runs[0]


def test_the_gate_script_retries_a_slow_try_and_keeps_the_better(tmp_path):
    slow = planted(lambda rows: scale(rows["transformers-compiled"], "decode_tok_s", 0.4))
    out, runs = gate_script(tmp_path, "check", [slow, run(*baseline_rows())])
    assert out.returncode == 0, out.stdout + out.stderr
    assert "try 1 of 2: FAIL: 1 regression(s): transformers-compiled decode; trying again" in out.stdout
    assert "passed on try 2 of 2" in out.stdout


def test_the_gate_script_fails_a_real_slowdown_and_a_wrong_answer_in_every_try(tmp_path):
    def slow_and_wrong(rows):
        scale(rows["transformers-compiled"], "decode_tok_s", 0.5)
        rows["transformers-compiled"].distance = 1.0

    out, runs = gate_script(tmp_path, "check", [planted(slow_and_wrong)] * 2)
    assert out.returncode == 1, out.stdout + out.stderr
    assert len(runs) == 2
    verdict = out.stdout.strip().splitlines()[-1]
    assert verdict.startswith("FAIL: 2 regression(s)") and "compiled decode" in verdict and "compiled distance" in verdict


def test_the_gate_script_writes_the_better_of_its_tries_as_the_baseline(tmp_path):
    fast = run(*baseline_rows())
    slow = planted(lambda rows: scale(rows[REFERENCE], "decode_tok_s", 0.5))
    out, runs = gate_script(tmp_path, "baseline", [slow, fast], baseline=tmp_path / "new" / "baseline.json")
    assert out.returncode == 0, out.stdout + out.stderr
    written = load_result(tmp_path / "new" / "baseline.json")
    assert written.best_of == ["try0", "try1"] and len(runs) == 2
    assert written.rows[0].metrics["decode_tok_s"] == fast.rows[0].metrics["decode_tok_s"]


def accurate(r: Row, kl_mean=1e-11, kl_p99=5e-11, top1_agree=1.0) -> Row:
    r.kl_mean, r.kl_p99, r.top1_agree = kl_mean, kl_p99, top1_agree
    return r


@pytest.mark.parametrize("figures", [{"kl_mean": 0.5}, {"kl_p99": 3.0}, {"top1_agree": 0.6}, {"kl_mean": None, "kl_p99": None}])
def test_a_row_whose_distributions_left_the_reference_fails_on_accuracy(tmp_path, figures):
    base = run(*(accurate(r) for r in baseline_rows()))
    cand = run(*(accurate(r) for r in baseline_rows()), run_id="r2")
    for name, value in figures.items():
        setattr(cand.rows[1], name, value)
    report = compare(tmp_path, cand, base)
    assert regressions(report) == {("transformers-compiled", "accuracy")}, report.findings("regression")


def test_accuracy_bounds_follow_the_quantization_then_the_dtype(tmp_path):
    from harness.check import ACCURACY_BOUNDS, accuracy_bound

    assert accuracy_bound("linnet-torch", None, "f32") == ACCURACY_BOUNDS["f32"]
    assert accuracy_bound("linnet-torch-int8", None, "f32") == ACCURACY_BOUNDS["int8"]  # from the runner id
    assert accuracy_bound("llamacpp-linnet-gguf-q8_0", None, "f32") == ACCURACY_BOUNDS["q8_0"]
    assert accuracy_bound("some-row", "q8_0", "f32") == ACCURACY_BOUNDS["q8_0"]  # from the row's quant field
    assert accuracy_bound("linnet-ort-f32", None, "bf16") == ACCURACY_BOUNDS["bf16"]  # the reference ran in bf16
    for quant in ("int8", "q8_0"):  # quantized rows: the distance is not judged, the accuracy is
        assert ACCURACY_BOUNDS["f32"].kl_mean < ACCURACY_BOUNDS[quant].kl_mean
    # an int8 row within its bound passes though its distance is far beyond f32's
    rows = [accurate(r) for r in baseline_rows()]
    base = run(*rows, accurate(row("linnet-torch-int8", distance=0.3), kl_mean=2e-4, kl_p99=1e-3, top1_agree=0.996))
    assert compare(tmp_path, base.model_copy(update={"run_id": "r2"}), base).passed


def test_best_of_keeps_the_worst_accuracy_of_the_repeats():
    good = run(accurate(row(REFERENCE)), accurate(row("linnet-torch")))
    bad = run(accurate(row(REFERENCE)), accurate(row("linnet-torch"), kl_mean=0.3, top1_agree=0.7), run_id="r2")
    best = {r.runner: r for r in best_of([good, bad]).rows}["linnet-torch"]
    assert best.kl_mean == 0.3 and best.top1_agree == 0.7 and best.kl_p99 == 5e-11
