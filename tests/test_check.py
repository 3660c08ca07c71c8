"""The regression check on result files built here (no benchmarking): the min-max rule of files without samples, the
interval rule of files with trials, the CLI's exit codes and one-line errors, and the paired gate's script."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

import numpy as np

from harness.bounds import F16_PER_LAYER, TOLERANCES, TRUTH_RATIO_BOUNDS, rounding_dominates, tolerance
from harness.check import GATE_THRESHOLDS, Thresholds, check
from harness.results import SCHEMA_VERSION, ResultFile, Row, load_result, write_result
from harness.trials import merge_runs
from linnet_core.errors import UserError
from runners import REFERENCE, RUNNERS

ROOT = Path(__file__).resolve().parent.parent
COMMITTED_TINY = ROOT / "results" / "qwen2-tiny" / "20261202T203607Z.json"  # every row, schema 1


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


@pytest.mark.parametrize("name, factor", [("ttft_ms", 1.3), ("load_s", 1.6), ("peak_mem_gib", 1.5)])
def test_a_rise_in_time_or_memory_fails(tmp_path, name, factor):
    report = compare(tmp_path, planted(lambda rows: scale(rows["transformers-compiled"], name, factor)))
    assert regressions(report) == {("transformers-compiled", name)}


def test_one_timed_value_a_side_is_judged_only_beyond_what_processes_differ_by(tmp_path):
    """load_s is one value per trial: no spread. A 30% rise of one value is the noise between processes here."""
    report = compare(tmp_path, planted(lambda rows: scale(rows["transformers-compiled"], "load_s", 1.3)))
    assert report.passed
    [note] = [f for f in report.findings("unclear") if f.subject == "load_s"]
    assert "not judged: one value a side" in note.message


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


def test_a_peers_gap_the_baseline_had_is_a_note_but_ours_and_a_new_gap_fail(tmp_path):
    def gap(distance):
        return [row(REFERENCE), row("kerashub", distance=distance), row("linnet-jax", distance=distance)]

    report = compare(tmp_path, run(*gap(1.1e-3)), run(*gap(1.0e-3)))
    assert regressions(report) == {("linnet-jax", "distance")}  # Linnet's own rows are always held to the bound
    [note] = [f for f in report.findings("note") if f.runner == "kerashub"]
    assert "a peer's known gap" in note.message and "as in the baseline (0.001)" in note.message
    assert regressions(compare(tmp_path, run(*gap(1.1e-3)), run(*gap(5e-5)))) == {("kerashub", "distance"),
                                                                                   ("linnet-jax", "distance")}
    assert ("kerashub", "distance") in regressions(compare(tmp_path, run(*gap(0.1)), run(*gap(1.0e-3))))  # much worse


def test_a_local_checkpoints_bound_grows_with_the_depth_its_run_recorded(tmp_path):
    deep = run(row(REFERENCE), row("linnet-torch", distance=9e-4)).model_copy(update={"model": "my-local-model"})
    assert not check_file(tmp_path, deep).passed  # no depth recorded, not in the registry: the 2-layer bar
    deep.architecture = {"model_type": "qwen2", "layers": 24, "hidden_size": 896, "parameters": 494_032_768}
    assert check_file(tmp_path, deep).passed  # 24 layers: the same bound as the registry's 0.5B
    assert tolerance("linnet-torch", "f32", "my-local-model", layers=24) == tolerance("linnet-torch", "f32", "qwen2.5-0.5b-instruct")


def check_file(tmp_path, result):
    write_result(result, tmp_path / "local.json")
    return check(tmp_path / "local.json", tmp_path / "local.json")


def test_tolerances_follow_the_row_and_the_run_dtype():
    assert tolerance("transformers-compiled", "f32") == TOLERANCES["f32"] == 1e-4
    assert tolerance("linnet-ort-f16", "f32") == TOLERANCES["f16"]  # an f16 row in an f32 run: its own rounding
    assert tolerance("linnet-ort-f32", "bf16") == TOLERANCES["bf16"]  # compared with a bf16 reference
    assert tolerance("transformers", "bf16") == TOLERANCES["bf16"]
    assert tolerance("linnet-torch", "f32", "qwen2-tiny") == 1e-4  # 2 layers: the project's bar
    assert tolerance("linnet-torch", "f32", "qwen2.5-0.5b-instruct") == pytest.approx(1.2e-3)  # 24 layers
    assert tolerance("linnet-ort-f16", "f32", "qwen2-tiny") == TOLERANCES["f16"]  # 2 layers: f16 rounding alone
    assert tolerance("linnet-ort-f16", "f32", "qwen2.5-0.5b-instruct") == pytest.approx(F16_PER_LAYER * 24)  # deeper


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


@pytest.mark.parametrize("runner, ratio, passes", [
    ("linnet-cudagraphs", 3.5, True),  # rounds at other places than transformers: within 4x its error
    ("linnet-cudagraphs", 25.0, False),  # a wrong row: its distance from the truth is 25x the reference's
    ("linnet-torch-int8", 25.0, True),  # int8 weights: judged by its accuracy bounds, not by the truth ratio
    ("linnet-ort-f16", 25.0, True),  # computes in f16 in a bf16 run: its ratio is over another dtype's distance
])
def test_a_bf16_row_is_held_to_its_truth_ratio_bound(tmp_path, runner, ratio, passes):
    """The truth ratio (a row's distance from the float64 truth over the reference's) catches a wrong row that the
    distance alone cannot in 16 bits: there the reference's own rounding is as large as any row's."""
    def rows(r):
        return run(row(REFERENCE).model_copy(update={"truth_distance": 0.2, "truth_ratio": 1.0}),
                   row(runner, distance=0.3).model_copy(update={"truth_distance": 0.2 * r, "truth_ratio": r}),
                   dtype="bf16")  # fmt: skip

    report = compare(tmp_path, rows(ratio), rows(1.2))
    assert report.passed is passes
    if not passes:
        [finding] = report.findings("regression")
        assert finding.subject == "accuracy" and "25x the reference's distance from the float64 truth" in finding.message
    assert TRUTH_RATIO_BOUNDS["bf16"] == 4.0 < TRUTH_RATIO_BOUNDS["f32"]


# the 0.5B shape in bf16, where rounding moves the reference itself far from the truth
BF16_DEEP = ROOT / "results" / "reference-check" / "qwen2.5-0.5b-instruct" / "20261206T055113Z.json"


def test_a_16_bit_bound_grows_with_the_references_own_distance_from_the_truth():
    """A row within its truth-ratio bound is at most (1 + that bound) times the reference's truth distance from the
    reference; TOLERANCES hold where the reference rounds less than they assume, and f32 keeps its own bound."""
    assert tolerance("linnet-torch", "bf16", reference_truth=6.3) == pytest.approx(5 * 6.3)
    assert tolerance("linnet-torch", "f16", reference_truth=1.0) == pytest.approx(5.0)
    for truth in (None, 0.01, 0.0, math.nan, math.inf, -3.0, True, "6.3"):
        assert tolerance("linnet-torch", "bf16", reference_truth=truth) == TOLERANCES["bf16"]
        assert not rounding_dominates("bf16", truth)  # nor do they switch KL and top-1 off
    assert rounding_dominates("bf16", 6.3) and not rounding_dominates("f32", 6.3)
    assert tolerance("linnet-torch", "f32", "qwen2-tiny", reference_truth=6.3) == TOLERANCES["f32"]


@pytest.mark.parametrize("plant, wrong", [
    (None, set()),  # every row 5-6.8 from the reference, KL 0.3-0.54, top-1 0.38-0.47: rounding, truth ratio 0.87-1.0
    ("truth", {("linnet-torch", "accuracy"), ("linnet-torch", "distance")}),  # a wrong row is still caught
])
def test_a_bf16_run_whose_reference_rounds_far_from_the_truth_is_judged_by_it(tmp_path, plant, wrong):
    """On the 0.5B shape's random weights bf16 rounding moves the reference itself 6.3 from the float64 truth (the
    committed run): the fixed bf16 bounds failed every right row there. Now the truth judges: right rows pass, with one
    note saying why KL and top-1 are not judged, and a row 25x the reference's distance from the truth fails."""
    base = load_result(BF16_DEEP)
    cand = base.model_copy(deep=True)
    if plant == "truth":
        torch_row = next(r for r in cand.rows if r.runner == "linnet-torch")
        torch_row.truth_distance, torch_row.truth_ratio, torch_row.distance = 6.3 * 25, 25.0, 160.0
    write_result(cand, tmp_path / "candidate.json")
    report = check(tmp_path / "candidate.json", BF16_DEEP)
    assert regressions(report) == wrong and report.passed is not wrong
    [comparison] = report.comparisons
    assert any(n.startswith("KL and top-1 of unquantized rows not judged: in bf16 the reference itself is 6.31")
               for n in comparison.notes)  # fmt: skip


def test_a_bf16_run_whose_reference_is_near_the_truth_keeps_its_accuracy_bounds(tmp_path):
    reference = row(REFERENCE).model_copy(update={"truth_distance": 0.2, "truth_ratio": 1.0, "kl_mean": 0.0,
                                                  "kl_p99": 0.0, "top1_agree": 1.0})  # fmt: skip
    right = row("linnet-torch", distance=0.3).model_copy(update={"truth_distance": 0.25, "truth_ratio": 1.25,
                                                                 "kl_mean": 0.3, "kl_p99": 0.6, "top1_agree": 0.47})  # fmt: skip
    report = compare(tmp_path, run(reference, right, dtype="bf16"), run(reference, right, dtype="bf16"))
    assert regressions(report) == {("linnet-torch", "accuracy")}


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


# ---- files with trials: the interval rule ---------------------------------------------------------------------------


def with_trials(runner: str, decode: float, trials=3, runs=10, between=0.12, within=0.03, seed=0, distance=0.0) -> Row:
    """A measured row whose samples are `trials` processes of `runs` runs: each process at its own level around
    `decode` (between-process noise), runs around that (as on this 2-core machine, where the former is far larger)."""
    from harness.trials import combine_trials

    rng = np.random.default_rng(seed)
    levels = decode * (1 + rng.normal(0, between, trials))
    per_trial = [{"decode_tok_s": list(level * (1 + rng.normal(0, within, runs))),
                  "ttft_ms": list(1000 / level * (1 + rng.normal(0, within, runs)))} for level in levels]  # fmt: skip
    base = [{"load_s": 4.0, "first_call_s": 0.2, "peak_mem_gib": 0.5, "mem_kind": "host", "runs": runs}] * trials
    metrics, samples, unstable = combine_trials(base, per_trial)
    return Row(runner=runner, label=runner, group="PyTorch", status="ok", distance=distance, metrics=metrics,
               samples=samples, unstable=unstable)  # fmt: skip


def slowed(r: Row, factor: float) -> Row:
    """The row with every decode figure (samples, median, min, max, interval) times factor."""
    out = r.model_copy(deep=True)
    out.samples["decode_tok_s"] = [[v * factor for v in t] for t in out.samples["decode_tok_s"]]
    for key in ("decode_tok_s", "decode_tok_s_min", "decode_tok_s_max"):
        out.metrics[key] *= factor
    out.metrics["decode_tok_s_ci"] = [v * factor for v in out.metrics["decode_tok_s_ci"]]
    return out


def trial_runs(compiled_factor=1.0):
    """Three trials of ten runs each, each process's runs spread about +-15% (as the issue measured)."""
    a = run(with_trials(REFERENCE, 500.0, seed=1, within=0.08), with_trials("transformers-compiled", 2000.0, seed=2, within=0.08))
    b = a.model_copy(deep=True, update={"run_id": "r2"})
    b.rows[1] = slowed(b.rows[1], compiled_factor)
    return a, b


def test_the_issues_planted_30_percent_drop_passed_the_min_max_rule_and_fails_the_interval_rule(tmp_path):
    a, b = trial_runs(0.7)
    compiled_a, compiled_b = a.rows[1].metrics, b.rows[1].metrics
    assert compiled_b["decode_tok_s_max"] > compiled_a["decode_tok_s_min"]  # the spreads overlap: the old rule's "noise"
    old = compare(tmp_path, b.model_copy(update={"rows": [r.model_copy(update={"samples": {}}) for r in b.rows]}),
                  a.model_copy(update={"rows": [r.model_copy(update={"samples": {}}) for r in a.rows]}))  # fmt: skip
    assert old.passed
    new = compare(tmp_path, b, a)
    assert regressions(new) == {("transformers-compiled", "decode_tok_s")}
    low, high = new.comparisons[0].rows[1].intervals["decode_tok_s"]
    assert low < 0.7 < high < 0.95
    (finding,) = new.findings("regression")
    assert "(-30%): slower, the 95% interval of candidate/baseline" in finding.message and finding.change == pytest.approx(-0.3)


def test_the_same_code_measured_again_passes_by_the_interval_rule(tmp_path):
    a = run(with_trials(REFERENCE, 500.0, seed=1), with_trials("transformers-compiled", 2000.0, seed=2))
    b = run(with_trials(REFERENCE, 500.0, seed=11), with_trials("transformers-compiled", 2000.0, seed=12), run_id="r2")
    report = compare(tmp_path, b, a)
    assert report.passed, [f.message for f in report.findings("regression")]
    assert report.comparisons[0].rows[1].intervals["decode_tok_s"]  # judged by its interval


def test_a_slowdown_within_the_threshold_is_not_a_regression_however_sure(tmp_path):
    a = run(with_trials("transformers-compiled", 2000.0, between=0.001, within=0.001))
    b = run(slowed(a.rows[0], 0.97), run_id="r2")
    report = compare(tmp_path, b, a)
    low, high = report.comparisons[0].rows[0].intervals["decode_tok_s"]
    assert high < 1 and report.passed  # surely slower, by less than 5%


def test_single_trials_fall_back_to_the_min_max_rule(tmp_path):
    one = run(with_trials("transformers-compiled", 2000.0, trials=1, within=0.2))
    slower = run(slowed(one.rows[0], 0.85), run_id="r2")
    report = compare(tmp_path, slower, one)
    assert report.passed and not report.comparisons[0].rows[0].intervals  # judged by min-max: the spreads overlap


def test_version_1_files_still_check_against_version_2_files(tmp_path):
    a, _ = trial_runs()
    old = a.model_copy(update={"schema_version": 1, "rows": [r.model_copy(update={"samples": {}}) for r in a.rows]})
    write_result(old, tmp_path / "v1.json")
    write_result(a, tmp_path / "v2.json")
    assert check(tmp_path / "v2.json", tmp_path / "v1.json").passed
    assert check(tmp_path / "v1.json", tmp_path / "v2.json").passed


def test_paired_trials_cancel_drift_that_the_unpaired_interval_cannot(tmp_path):
    """Each pair of trials ran in its own slow or fast spell; the candidate is 15% slower throughout."""
    rng = np.random.default_rng(7)
    drift = 1 + rng.normal(0, 0.25, 5)
    base = Row(runner="linnet-torch", label="x", group="PyTorch", status="ok", distance=0.0,
               samples={"decode_tok_s": [list(2000 * d * (1 + rng.normal(0, 0.01, 9))) for d in drift]})  # fmt: skip
    cand = base.model_copy(deep=True, update={"samples": {"decode_tok_s": [list(1700 * d * (1 + rng.normal(0, 0.01, 9))) for d in drift]}})
    for r in (base, cand):
        r.metrics = {"decode_tok_s": float(np.median(np.concatenate(r.samples["decode_tok_s"]))), "mem_kind": "host"}
    assert compare(tmp_path, run(cand, run_id="r2"), run(base), thresholds=GATE_THRESHOLDS).passed  # unpaired: unsure
    report = compare(tmp_path, run(cand, run_id="r2"), run(base), thresholds=GATE_THRESHOLDS, paired=True)
    assert regressions(report) == {("linnet-torch", "decode_tok_s")}
    assert "paired 95% interval" in report.findings("regression")[0].message


def test_merge_makes_one_run_of_single_trial_runs(tmp_path):
    from harness.trials import merge_runs

    trials = [run(with_trials(REFERENCE, 500.0, trials=1, seed=i), with_trials("linnet-torch", 2000.0, trials=1, seed=9 + i,
                                                                              distance=i * 1e-5), run_id=f"t{i}")
              for i in range(3)]  # fmt: skip
    merged = merge_runs(trials)
    assert merged.protocol["trials"] == 3 and merged.merged == ["t0", "t1", "t2"] and merged.schema_version == 2
    torch = merged.rows[1]
    assert torch.distance == 2e-5  # the worst: a wrong answer is never noise
    assert len(torch.samples["decode_tok_s"]) == 3 and torch.metrics["trials"] == 3
    assert [len(t) for t in torch.samples["load_s"]] == [1, 1, 1]
    broken = trials[1].model_copy(deep=True)
    broken.rows[1] = row("linnet-torch", status="failed")
    assert merge_runs([trials[0], broken]).rows[1].status == "failed"
    v1 = trials[0].model_copy(update={"schema_version": 1, "rows": [r.model_copy(update={"samples": {}}) for r in trials[0].rows]})
    from_v1 = merge_runs([v1, v1.model_copy(update={"run_id": "t0-again"})]).rows[1]
    assert from_v1.samples["decode_tok_s"] == [[v1.rows[1].metrics["decode_tok_s"]]] * 2  # a median per file


def test_merge_refuses_runs_of_other_suites():
    from harness.trials import merge_runs

    a = run(row(REFERENCE))
    with pytest.raises(UserError, match="dtype"):
        merge_runs([a, run(row(REFERENCE), dtype="bf16")])
    with pytest.raises(UserError, match="at least one"):
        merge_runs([])


def test_merge_on_the_cli_writes_one_result_file(tmp_path):
    write_result(run(with_trials(REFERENCE, 60.0, trials=1), run_id="a"), tmp_path / "a.json")
    write_result(run(with_trials(REFERENCE, 30.0, trials=1), run_id="b"), tmp_path / "b.json")
    out = cli("merge", tmp_path / "a.json", tmp_path / "b.json", "--out", tmp_path / "m.json")
    assert out.returncode == 0, out.stdout + out.stderr
    assert len(load_result(tmp_path / "m.json").rows[0].samples["decode_tok_s"]) == 2


# ---- the CI gate ----------------------------------------------------------------------------------------------------


def gate_runners() -> list[str]:
    text = (ROOT / "Makefile").read_text()
    return re.search(r"^GATE_RUNNERS\s*[:?]?=\s*(.*)$", text, re.M).group(1).split()


def test_the_gate_runs_known_runners_and_ci_runs_the_gate():
    assert gate_runners() and all(r in RUNNERS for r in gate_runners()), gate_runners()
    assert "make gate" in (ROOT / ".ci" / "run").read_text()


# The gate script itself, with a stand-in Python whose `harness.cli run` and `harness.cli duet` hand out planted result
# files (run: the baseline's or the candidate's by the directory it runs in); check is the real one.
FAKE_PY = """
import os, pathlib, shutil, sys
queue, candidate = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]).resolve()
args = sys.argv[5:]  # after: -m harness.cli
if args[0] in ("run", "duet"):
    side = "candidate" if pathlib.Path.cwd().resolve() == candidate else "baseline"
    out = pathlib.Path(args[args.index("--out") + 1])
    if args[0] == "run":
        (out / "qwen2-tiny").mkdir(parents=True)
        shutil.copy(queue / side / "run.json", out / "qwen2-tiny" / "run.json")
    else:
        out.mkdir(parents=True)
        for name in ("baseline", "candidate"):
            shutil.copy(queue / name / "duet.json", out / f"{name}.json")
    with (queue / "runs.log").open("a") as f:
        f.write(side + " " + " ".join(args) + "\\n")
else:
    sys.argv = ["linnet-bench", *args]
    from harness.cli import main
    main()
"""


def gate_script(tmp_path, runs: tuple[ResultFile, ResultFile], duet: tuple[ResultFile, ResultFile]):
    """.ci/gate with planted (baseline, candidate) answer runs and duet files."""
    queue = tmp_path / "queue"
    for side, answers, timed in zip(("baseline", "candidate"), runs, duet):
        write_result(answers.model_copy(update={"run_id": f"{side}-run"}), queue / side / "run.json")
        write_result(timed, queue / side / "duet.json")
    (tmp_path / "fake_py.py").write_text(FAKE_PY)
    py = tmp_path / "py"
    py.write_text(f"#!/bin/sh\nexec {sys.executable} {tmp_path / 'fake_py.py'} {queue} {ROOT} \"$@\"\n")
    py.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "PY": str(py), "HOME": str(tmp_path), "GATE_BASE": "HEAD", "GATE_OUT": str(tmp_path / "out")}
    out = subprocess.run([str(ROOT / ".ci" / "gate"), "2", "10", "45", *gate_runners()],
                         capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    calls = (queue / "runs.log").read_text().splitlines() if (queue / "runs.log").exists() else []
    return out, calls


def answer_runs(distance: float = 1e-5) -> tuple[ResultFile, ResultFile]:
    one = lambda d: run(with_trials(REFERENCE, 500.0, trials=1), with_trials("linnet-torch", 2000.0, trials=1, distance=d))
    return one(1e-5), one(distance)


def duet_files(torch_factor: float = 1.0, pairs: int = 2, runs: int = 60, seed: int = 0) -> tuple[ResultFile, ResultFile]:
    """Two sides of a duet on this machine's kind of noise: each run's speed is the machine's state at that moment
    (a fast and a slow state, 2x apart, and +-20% besides), shared by the two runs of a pair, and 4% of noise each."""
    from harness.trials import combine_trials

    rng = np.random.default_rng(seed)
    rows = {"baseline": [], "candidate": []}
    for runner, level, slow in ((REFERENCE, 500.0, 1.0), ("linnet-torch", 2000.0, torch_factor)):
        per_side = {"baseline": [], "candidate": []}
        for _ in range(pairs):
            state = np.where(rng.random(runs) < 0.5, 1.0, 2.0) * (1 + rng.normal(0, 0.2, runs))
            for name, factor in (("baseline", 1.0), ("candidate", slow)):
                decode = level * factor * state * (1 + rng.normal(0, 0.04, runs))
                per_side[name].append({"decode_tok_s": list(decode), "ttft_ms": list(2.0 / state)})
        for name in per_side:
            base = [{"peak_mem_gib": 0.5, "mem_kind": "host"}] * pairs
            metrics, samples, unstable = combine_trials(base, per_side[name])
            rows[name].append(Row(runner=runner, label=runner, group="PyTorch", status="ok", metrics=metrics,
                                  samples=samples, unstable=unstable))  # fmt: skip
    out = []
    for name in ("baseline", "candidate"):
        f = run(*rows[name], run_id="duet1")
        f.protocol["duet"] = {"pairs": pairs, "seconds": 10, "side": name}
        out.append(f)
    return out[0], out[1]


def test_the_gate_script_checks_answers_then_duets_the_rows_and_passes_unchanged_code(tmp_path):
    out, calls = gate_script(tmp_path, answer_runs(), duet_files())
    assert out.returncode == 0, out.stdout + out.stderr
    assert "PASS" in out.stdout.strip().splitlines()[-1]
    assert [c.split()[:2] for c in calls] == [["baseline", "run"], ["candidate", "run"], ["candidate", "duet"]]
    assert "--profile gate --device cpu --dtype f32 --trials 1" in calls[0]
    assert " ".join(f"--runner {r}" for r in gate_runners()) in calls[0] and calls[2].endswith("--pairs 2 --seconds 10 --row-seconds 45 --out " + str(tmp_path / "out" / "duet"))
    assert (tmp_path / "out" / "report.json").exists()


def test_the_gate_script_catches_a_15_percent_slowdown_that_the_machine_s_two_speeds_hide(tmp_path):
    base, cand = duet_files(torch_factor=0.85)
    unpaired = cand.model_copy(update={"run_id": "another"})  # the same figures, not known to be run pairs
    assert compare(tmp_path, unpaired, base, thresholds=GATE_THRESHOLDS, paired=True).passed  # ratio of medians: unsure
    out, calls = gate_script(tmp_path, answer_runs(), (base, cand))
    assert out.returncode == 1, out.stdout + out.stderr
    assert out.stdout.strip().splitlines()[-1] == "FAIL: 1 regression(s): linnet-torch decode"
    assert "run-paired 95% interval" in out.stdout


def test_the_gate_script_fails_a_wrong_answer_at_once(tmp_path):
    out, calls = gate_script(tmp_path, answer_runs(distance=1.0), duet_files())
    assert out.returncode == 1, out.stdout + out.stderr
    assert len(calls) == 2 and "FAIL at once" in out.stdout and "linnet-torch distance" in out.stdout


# ---- hostile figures ------------------------------------------------------------------------------------------------


def write_raw(path: Path, result: ResultFile, change=lambda data: None) -> Path:
    """Writes a result file as a hostile or broken producer might: json.dumps keeps NaN and Infinity literally."""
    data = json.loads(result.model_dump_json())
    change(data)
    path.write_text(json.dumps(data))
    return path


def compare_raw(tmp_path, change, baseline_change=lambda data: None, **kw):
    cand = write_raw(tmp_path / "candidate.json", run(*baseline_rows(), run_id="r2"), change)
    base = write_raw(tmp_path / "baseline.json", run(*baseline_rows()), baseline_change)
    return check(cand, base, **kw)


def set_row(runner: str, **fields):
    def change(data):
        row = next(r for r in data["rows"] if r["runner"] == runner)
        for key, value in fields.items():
            if key in ("distance", "samples"):
                row[key] = value
            else:
                row["metrics"][key] = value

    return change


@pytest.mark.parametrize(
    "fields",
    [{"distance": float("nan")}, {"distance": float("inf")}, {"distance": -1.0}, {"decode_tok_s": float("nan")},
     {"decode_tok_s": 0.0}, {"decode_tok_s": -5.0}, {"decode_tok_s": float("inf")}, {"decode_tok_s": None},
     {"decode_tok_s": "fast"}, {"decode_tok_s": [1, 2]}, {"ttft_ms": float("-inf")}, {"ttft_ms_max": float("nan")},
     {"peak_mem_gib": -0.5}, {"decode_tok_s_ci": [1.0, float("nan")]}, {"decode_tok_s_ci": "wide"},
     {"samples": {"decode_tok_s": [[1.0, float("nan")]]}}, {"samples": {"decode_tok_s": [[1.0, -2.0]]}}],
)  # fmt: skip
def test_an_invalid_figure_in_the_candidate_is_a_regression(tmp_path, fields):
    report = compare_raw(tmp_path, set_row("transformers-compiled", **fields))
    assert not report.passed
    assert ("transformers-compiled", "figures") in regressions(report), report.findings("regression")
    assert "invalid figure" in report.findings("regression")[0].message


def test_an_invalid_figure_in_the_baseline_fails_too(tmp_path):
    report = compare_raw(tmp_path, lambda data: None, set_row("transformers-compiled", decode_tok_s=float("nan")))
    assert ("transformers-compiled", "figures") in regressions(report)


def test_valid_samples_and_intervals_are_accepted(tmp_path):
    extra = set_row("transformers-compiled", samples={"decode_tok_s": [[20.0, 21.0], [19.5]]}, decode_tok_s_ci=[19.0, 21.0])
    assert compare_raw(tmp_path, extra, extra).passed


@pytest.mark.parametrize("samples", ["many", [[1.0, 2.0]], {"decode_tok_s": "fast"}, {"decode_tok_s": [["x"]]}])
def test_samples_not_of_the_schema_s_shape_are_a_one_line_error(tmp_path, samples):
    with pytest.raises(UserError, match=r"candidate.json: malformed result file: rows\.\d+\.samples"):
        compare_raw(tmp_path, set_row("transformers-compiled", samples=samples))


@pytest.mark.parametrize("value", [float("nan"), 0.0, -5.0, None, "x"])
def test_the_gate_fails_when_the_reference_figure_is_invalid(tmp_path, value):
    def slow_and_broken_reference(data):
        rows = {r["runner"]: r for r in data["rows"]}
        rows[REFERENCE]["metrics"]["decode_tok_s"] = value
        for runner, r in rows.items():
            if runner != REFERENCE:
                r["metrics"].update(decode_tok_s=10.0, decode_tok_s_min=10.0, decode_tok_s_max=10.0)

    data = json.loads(load_result(COMMITTED_TINY).model_dump_json())
    slow_and_broken_reference(data)
    data["machine"] = {"cpu": "a CI machine"}
    (tmp_path / "candidate.json").write_text(json.dumps(data))
    report = check(tmp_path / "candidate.json", COMMITTED_TINY, GATE_THRESHOLDS, ratios=True)
    assert not report.passed
    messages = [f.message for f in report.findings("regression")]
    assert any("reference figure invalid" in m for m in messages), messages


def test_the_committed_results_pass_against_themselves():
    for path in sorted((ROOT / "results" / "qwen2-tiny").glob("*.json")):
        report = check(path, path)
        assert report.passed, (path, report.findings("regression"))


def test_quantized_rows_get_their_quantizations_bound():
    assert tolerance("llamacpp-linnet-gguf-q8_0", "f32", "qwen2-tiny") >= 1.05  # measured: results/qwen2-tiny
    assert tolerance("llamacpp-linnet-gguf-f16", "f32", "qwen2-tiny") == TOLERANCES["f16"]
    assert tolerance("some-row", "f32", "qwen2-tiny", quant="q8_0") == tolerance("llamacpp-linnet-gguf-q8_0", "f32")
    assert tolerance("some-row", "f32", "qwen2-tiny", quant="f16") == TOLERANCES["f16"]
    assert RUNNERS["llamacpp-linnet-gguf-q8_0"].quant == "q8_0" and RUNNERS["llamacpp-linnet-gguf-f16"].quant == "f16"
    assert RUNNERS["linnet-torch"].quant is None


def test_a_quantized_row_far_from_the_reference_still_fails(tmp_path):
    """8-bit rows are judged by their accuracy, not their distance: a far one fails on KL and top-1 agreement."""
    base = run(accurate(row(REFERENCE)), accurate(row("llamacpp-linnet-gguf-q8_0", distance=2.5), kl_mean=0.02,
                                                  kl_p99=0.1, top1_agree=0.9))  # fmt: skip
    cand = run(accurate(row(REFERENCE)), accurate(row("llamacpp-linnet-gguf-q8_0", distance=10.0), kl_mean=1.5,
                                                  kl_p99=4.0, top1_agree=0.4), run_id="r2")  # fmt: skip
    assert compare(tmp_path, base.model_copy(update={"run_id": "r3"}), base).passed  # 2.5 from it, yet accurate
    assert regressions(compare(tmp_path, cand, base)) == {("llamacpp-linnet-gguf-q8_0", "accuracy")}


BROKEN_FILES = {
    "deep nesting": lambda base: "[" * 100_000 + "]" * 100_000,
    "deep nesting in a field": lambda base: base.replace('"machine": {', '"machine": {"x": ' + "[" * 100_000 + "]" * 100_000 + ",", 1),
    "a 5000-digit integer": lambda base: base.replace('"decode_tok_s": 50.0', '"decode_tok_s": ' + "9" * 5000, 1),
    "null": lambda base: "null",
    "a string": lambda base: '"a result"',
    "empty": lambda base: "",
    "binary": lambda base: "\xff\xfe",
    "rows not a list": lambda base: base.replace('"rows": [', '"rows": 5, "x": [', 1),
}  # fmt: skip


@pytest.mark.parametrize("name", BROKEN_FILES)
def test_broken_files_are_one_line_errors_on_the_cli(tmp_path, name):
    write_result(run(*baseline_rows()), tmp_path / "base.json")
    text = BROKEN_FILES[name](json.dumps(json.loads((tmp_path / "base.json").read_text())))
    (tmp_path / "bad.json").write_bytes(b"\xff\xfe" if name == "binary" else text.encode())
    out = cli("check", tmp_path / "bad.json", "--baseline", tmp_path / "base.json")
    assert out.returncode == 1, out
    assert "Traceback" not in out.stderr, out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1 and "bad.json" in lines[0] and lines[0].startswith("error:"), out.stdout[-2000:]


@pytest.mark.parametrize("value", ["null", '"fast"', "[1, 2]", "NaN", "-Infinity"])
def test_a_null_or_non_number_metric_fails_the_check_without_a_traceback(tmp_path, value):
    write_result(run(*baseline_rows()), tmp_path / "base.json")
    text = (tmp_path / "base.json").read_text().replace('"decode_tok_s": 20.0', f'"decode_tok_s": {value}', 1)
    assert text != (tmp_path / "base.json").read_text()
    (tmp_path / "bad.json").write_text(text)
    out = cli("check", tmp_path / "bad.json", "--baseline", tmp_path / "base.json")
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert "invalid figure" in out.stdout and out.stdout.strip().splitlines()[-1].startswith("FAIL")


def test_json_report_pointing_at_a_directory_is_a_one_line_error(tmp_path):
    write_result(run(*baseline_rows()), tmp_path / "base.json")
    out = cli("check", tmp_path / "base.json", "--baseline", tmp_path / "base.json", "--json", tmp_path)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-2000:]
    last = out.stdout.strip().splitlines()[-1]
    assert last.startswith("error:") and str(tmp_path) in last, out.stdout


def test_a_directory_named_like_a_result_file_is_skipped_in_directory_mode(tmp_path):
    write_result(run(*baseline_rows()), tmp_path / "runs" / "base.json")
    (tmp_path / "runs" / "odd.json").mkdir()
    assert check(tmp_path / "runs", tmp_path / "runs" / "base.json").passed


def test_merge_refuses_a_run_with_an_invalid_figure_and_a_run_given_twice(tmp_path):
    """merge exited 0 on a file with NaN figures, and counted one file given twice as two trials (a narrower interval
    than the data supports); --out under a file was a traceback."""
    good = run(row(REFERENCE), row("transformers-compiled", decode=30.0), run_id="a")
    broken = run(row(REFERENCE), row("transformers-compiled", decode=float("nan")), run_id="b")
    with pytest.raises(UserError, match=r"run 'b', row transformers-compiled: invalid figure \(decode_tok_s is nan"):
        merge_runs([good, broken])
    with pytest.raises(UserError, match="run 'a' is given twice"):
        merge_runs([good, good.model_copy(deep=True)])
    write_result(good, tmp_path / "a.json")
    write_raw(tmp_path / "b.json", broken)
    (tmp_path / "file").write_text("not a directory")
    for args, says in (([tmp_path / "a.json", tmp_path / "b.json", "--out", tmp_path / "m.json"], "invalid figure"),
                       ([tmp_path / "a.json", tmp_path / "a.json", "--out", tmp_path / "m.json"], "given twice"),
                       ([tmp_path / "a.json", "--out", tmp_path / "file" / "m.json"], "cannot be written")):  # fmt: skip
        out = cli("merge", *args)
        assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-2000:]
        assert len(out.stdout.strip().splitlines()) == 1 and says in out.stdout, out.stdout
    assert not (tmp_path / "m.json").exists()


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
    from harness.bounds import ACCURACY_BOUNDS, accuracy_bound

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


def test_merge_keeps_the_worst_accuracy_of_the_repeats():
    good = run(accurate(row(REFERENCE)), accurate(row("linnet-torch")))
    bad = run(accurate(row(REFERENCE)), accurate(row("linnet-torch"), kl_mean=0.3, top1_agree=0.7), run_id="r2")
    best = {r.runner: r for r in merge_runs([good, bad]).rows}["linnet-torch"]
    assert best.kl_mean == 0.3 and best.top1_agree == 0.7 and best.kl_p99 == 5e-11


# ---- hostile text (issue 31) ----------------------------------------------------------------------------------------


def test_markup_in_runner_ids_run_ids_reasons_and_paths_is_printed_as_written(tmp_path):
    """A "[/]" or "[/x]" from a file or a path raised rich's MarkupError, so check crashed instead of giving a verdict,
    and "[old]" in a path was taken for a style."""
    hostile = "[/x]odd[/]"
    base = run(*baseline_rows(), row(hostile, decode=50.0), row("[/]", status="failed"), run_id="[/]base")
    cand = run(*baseline_rows(), row(hostile, decode=10.0), row("[/]", status="failed"), run_id="[/x]cand")
    folder = tmp_path / "[old]"
    write_result(base, folder / "base.json")
    write_result(cand, folder / "cand.json")
    out = cli("check", folder / "cand.json", "--baseline", folder / "base.json")
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stdout + out.stderr
    text = " ".join(out.stdout.split())
    assert f"{hostile}: decode" in text and "[/x]cand" in text and str(folder / "cand.json") in text, out.stdout
    assert out.stdout.strip().splitlines()[-1] == f"FAIL: 1 regression(s): {hostile} decode"


def test_two_rows_of_one_runner_are_an_error_not_a_pass(tmp_path):
    """A failed copy of a row and then an ok one passed: which of them was judged depended on the order."""
    candidate = run(row("transformers-compiled", status="failed"), *baseline_rows())
    with pytest.raises(UserError, match=r"rows 0 and 2 are both a str 'transformers-compiled'.*one row per runner"):
        compare(tmp_path, candidate)


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [("schema_version", 2.0, "schema version 2.0 is not known"), ("schema_version", True, "schema version True"),
     ("created_at", "not a date", "created_at is a str 'not a date', not an ISO 8601 time"),
     ("run_id", "r" * 5_000_000, "run_id is a str 'rrrr"), ("run_id", "r\nsecond line", "run_id"),
     ("label", "L" * 5_000_000, "rows.0.label is a str 'LLL"), ("runner", "x\ny", "rows.0.runner")],
)  # fmt: skip
def test_header_and_row_fields_are_checked_by_type_and_size(tmp_path, field, value, says):
    write_result(run(*baseline_rows()), tmp_path / "base.json")
    data = json.loads((tmp_path / "base.json").read_text())
    if field in ("label", "runner"):
        data["rows"][0][field] = value
    else:
        data[field] = value
    (tmp_path / "bad.json").write_text(json.dumps(data))
    out = cli("check", tmp_path / "bad.json", "--baseline", tmp_path / "base.json")
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert len(out.stdout.strip().splitlines()) == 1 and says in out.stdout and len(out.stdout) < 1000, out.stdout[:2000]


def test_a_drop_beyond_the_threshold_measured_too_few_times_is_unclear_never_same(tmp_path):
    """The issue's case: a copy of a run whose linnet-torch decode figures and samples are all 0.7x, 2 trials of 2 runs
    a side on a busy machine (processes 30% apart). It printed -30% and the verdict "same", then PASS. Same is an
    interval within the threshold; one across it is unclear, with about how many trials would decide."""
    a = run(with_trials(REFERENCE, 500.0, trials=2, seed=0),
            with_trials("linnet-torch", 2000.0, trials=2, runs=2, within=0.2, between=0.3, seed=5))  # fmt: skip
    b = a.model_copy(deep=True, update={"run_id": "r2"})
    b.rows[1] = slowed(b.rows[1], 0.7)
    report = compare(tmp_path, b, a)
    row = report.comparisons[0].rows[1]
    low, high = row.intervals["decode_tok_s"]
    assert low < 0.95 < high and row.verdict == "unclear" and report.passed, (low, high, row.findings)
    (finding,) = [f for f in report.findings("unclear") if f.subject == "decode_tok_s"]
    needed = int(re.search(r"\(-30%\): unclear, .* about (\d+) trials a side would likely decide", finding.message).group(1))
    assert 2 < needed <= 100, finding.message
    out = cli("check", tmp_path / "candidate.json", "--baseline", tmp_path / "baseline.json", "--json", tmp_path / "r.json")
    assert out.returncode == 0, out.stdout + out.stderr
    assert any(line.split()[:1] == ["linnet-torch"] and "unclear" in line for line in out.stdout.splitlines()), out.stdout
    verdict = out.stdout.strip().splitlines()[-1]
    assert verdict.startswith("PASS: no regression in 2 row(s); unclear, not judged: ") and "linnet-torch decode" in verdict
    assert json.loads((tmp_path / "r.json").read_text())["unclear"] == len(report.findings("unclear"))


def test_the_gates_policy_for_unclear_is_to_pass_and_name_it(tmp_path):
    """--gate fails a row only when the whole interval is a slowdown beyond 5% (GATE_THRESHOLDS); an interval across
    that line is unclear: named in the verdict, exit 0 (the gate's power to catch a 15% slowdown rests on duets
    narrow enough to decide, scripts/gate-power.sh)."""
    a = run(with_trials(REFERENCE, 500.0, trials=2, seed=0),
            with_trials("linnet-torch", 2000.0, trials=2, runs=2, within=0.2, between=0.3, seed=5))  # fmt: skip
    b = run(with_trials(REFERENCE, 500.0, trials=2, seed=1),
            with_trials("linnet-torch", 1400.0, trials=2, runs=2, within=0.2, between=0.3, seed=10), run_id="r2")  # fmt: skip
    report = compare(tmp_path, b, a, thresholds=GATE_THRESHOLDS, paired=True)
    row = report.comparisons[0].rows[1]
    low, high = row.intervals["decode_tok_s"]
    assert low < 0.95 < high and row.verdict == "unclear" and report.passed, (low, high, row.findings)
    out = cli("check", tmp_path / "candidate.json", "--baseline", tmp_path / "baseline.json", "--gate")
    assert out.returncode == 0 and "linnet-torch decode" in out.stdout.strip().splitlines()[-1], out.stdout


def test_same_means_the_interval_lies_within_the_threshold(tmp_path):
    a = run(with_trials("transformers-compiled", 2000.0, between=0.001, within=0.001))
    for factor, verdict in ((0.99, "same"), (1.02, "same"), (0.7, "regressed"), (1.3, "improved")):
        report = compare(tmp_path, run(slowed(a.rows[0], factor), run_id="r2"), a)
        low, high = report.comparisons[0].rows[0].intervals["decode_tok_s"]
        assert report.comparisons[0].rows[0].verdict == verdict, (factor, low, high)
        assert verdict != "same" or 0.95 <= low <= high <= 1 / 0.95
