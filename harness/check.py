"""The regression check: a candidate run against a baseline run, row by row (matched by runner id), beyond the noise.

A row regressed when, against the baseline:
- with raw samples of at least 2 trials on both sides (schema 2): the 95% interval of candidate / baseline (ratio of
  medians, bootstrap over trials then runs: harness/stats.py) excludes every slowdown smaller than the threshold,
  i.e. the whole interval lies beyond it (stats.judge); `--paired` (trials made side by side) resamples the trials
  of both sides together, and for the two files of one duet (harness/duet.py: runs made in pairs, the gate's) judges
  the ratios of the run pairs;
- otherwise (version 1 files, single trials): a speed (decode_tok_s, serving_tok_s) dropped, or a time (ttft_ms,
  serving_ttft_ms, load_s) or peak memory rose, by more than the threshold (relative to the baseline's median) AND
  outside both runs' spreads (the min..max of their timed runs): a change that the two spreads overlap on is noise;
- its distance from the reference is above its tolerance, or an accuracy figure beyond its bound (harness/bounds.py:
  TOLERANCES by the row's dtype, QUANT_TOLERANCES by how its weights are stored, ACCURACY_BOUNDS, TRUTH_RATIO_BOUNDS);
- it went from ok to failed or skipped, it vanished while ok, or a metric it had is gone;
- a figure of it in either run is invalid (harness/validate.py: NaN, infinite, a zero or negative speed, not a
  number): such a row is never compared, and a reference figure that is invalid fails the ratio comparison.
Improvements are the same test the other way and are reported (an out-of-date baseline is worth knowing); rows only
the candidate has are reported as new and not judged. A metric is the same only when its interval lies wholly within
the threshold band (stats.judge); an interval across an edge of it, a change beyond the threshold within the runs'
spreads, or one value a side within SINGLE_VALUE_THRESHOLD is **unclear**, with about how many trials a side would
likely decide. The policy, for `check` and the gate alike: unclear is not a failure (it would fail unchanged code
measured too few times) but is named in the verdict line and counted in the JSON report.

When the runs come from different machines (or when asked), each figure and its spread are first divided by the
median of the same figure of the in-run reference row (runners.REFERENCE), so that what is compared is a row's
standing relative to the reference; the reference itself is then judged only on its status and distance.
This module is the comparison, pure data (which rows differ, and how); `linnet-bench check` prints it
(harness/check_report.py); the CI gate (`make gate`) runs it with GATE_THRESHOLDS, paired."""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from harness import stats
from harness.metrics import METRICS, SECONDS, Metric
from harness.bounds import (TOLERANCES, AccuracyBound, accuracy_bound, reference_truth, rounding_dominates, run_dtype,
                            run_layers, tolerance, truth_ratio_bound)  # fmt: skip
from harness.results import ResultFile, Row, load_result
from harness.validate import invalid_figures, is_number
from linnet_core.errors import UserError
from runners import REFERENCE, RUNNERS


@dataclass(frozen=True)
class Thresholds:
    speed: float = 0.05  # relative change of a speed or time metric (decode, serving, TTFT, load) that counts
    memory: float = 0.20  # relative change of peak memory that counts
    min_seconds: float = 0.0  # a time (TTFT, load) under this in both runs is too short to judge: noted, not judged


# The CI gate's thresholds (.ci/gate: the baseline commit and the candidate timed in lock-step turns, harness/duet.py,
# judged by the interval of their run pairs' ratios). A row regresses when the whole 95% interval of its
# candidate/baseline ratio is a slowdown beyond 5%: unchanged code's interval reaches that far below 1 only by a miss of
# its interval by more than 5%, while a 15% slowdown's interval lies beyond 5% once its half-width is under 10% (a
# duet's is 1-8% on this machine). scripts/gate-power.sh measures both: 20 of 20 planted 15% slowdowns
# caught, 20 of 20 unchanged gates passed (results/gate-power/20261203T151935Z.txt, 20261203T171202Z.txt). Memory: 10%, peak RSS of
# each side's own process. Times of a few milliseconds (a Linnet row's TTFT on the test model) move with every
# interrupt, so the gate judges only times of 50 ms or more.
GATE_THRESHOLDS = Thresholds(speed=0.05, memory=0.10, min_seconds=0.05)


# Workload fields that change what a number means: runs that differ in these are not compared.
SAME_WORKLOAD = ("prompt_tokens", "new_tokens", "batch")


@dataclass(frozen=True)
class Span:
    """A median with the min and max of the runs it came from (a point when the row has no spread)."""

    mid: float
    lo: float
    hi: float

    @classmethod
    def of(cls, metrics: dict, name: str) -> Span:
        mid = metrics[name]
        return cls(mid, metrics.get(f"{name}_min", mid), metrics.get(f"{name}_max", mid))

    def over(self, ref: float) -> Span:
        """Divided by the reference's median: the row's own spread, in units of the reference."""
        return Span(self.mid / ref, self.lo / ref, self.hi / ref)

    def overlaps(self, other: Span) -> bool:
        return self.lo <= other.hi and other.lo <= self.hi


@dataclass(frozen=True)
class Finding:
    runner: str
    kind: str  # "regression" | "improvement" | "unclear" (the data cannot tell; not a failure) | "new" | "note"
    subject: str  # a metric name, "distance", "status" or "row"
    message: str  # one line for a person
    label: str = ""  # a few words for the verdict line, e.g. "decode", "vanished"; the subject when empty
    baseline: float | None = None  # the compared figures: absolute, or ratios to the reference in ratio mode
    candidate: float | None = None
    change: float | None = None  # candidate / baseline - 1


@dataclass
class RowReport:
    runner: str
    baseline_status: str | None  # None: the row is not in that run
    candidate_status: str | None
    distance: float | None = None  # the candidate's
    tolerance: float | None = None
    changes: dict[str, float] = field(default_factory=dict)  # metric -> candidate / baseline - 1, when compared
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)  # metric -> 95% interval of cand / base
    findings: list[Finding] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        kinds = {f.kind for f in self.findings}
        for kind, verdict in (("regression", "regressed"), ("new", "new"), ("improvement", "improved"),
                              ("unclear", "unclear")):  # fmt: skip
            if kind in kinds:
                return verdict
        return "same"


@dataclass(frozen=True)
class RunInfo:
    path: str
    run_id: str
    created_at: str
    cpu: str | None
    gpu: str | None


@dataclass
class Comparison:
    """One model's candidate run against its baseline run."""

    model: str
    candidate: RunInfo | None
    baseline: RunInfo | None
    ratios: bool  # figures were divided by the reference's of the same run
    why_ratios: str | None  # "--ratios", or how the machines differ
    rows: list[RowReport] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class Report:
    thresholds: Thresholds
    comparisons: list[Comparison]

    def findings(self, kind: str) -> list[Finding]:
        return [f for c in self.comparisons for r in c.rows for f in r.findings if f.kind == kind]

    @property
    def passed(self) -> bool:
        return not self.findings("regression")

    def to_json(self) -> dict:
        data = dataclasses.asdict(self)
        data["passed"] = self.passed
        data["regressions"] = len(self.findings("regression"))
        data["improvements"] = len(self.findings("improvement"))
        data["unclear"] = len(self.findings("unclear"))
        for comparison, c in zip(self.comparisons, data["comparisons"]):
            for row, r in zip(comparison.rows, c["rows"]):
                r["verdict"] = row.verdict
        return data


# ---- loading --------------------------------------------------------------------------------------------------------


def load_runs(path: Path) -> dict[str, tuple[Path, ResultFile]]:
    """model -> (file, run): one result file, or the latest run of each model in a directory (results/<model>/*.json
    or flat *.json)."""
    path = Path(path)
    if not path.is_dir():
        run = load_result(path)
        return {run.model: (path, run)}
    latest: dict[str, tuple[Path, ResultFile]] = {}
    for file in sorted(f for f in [*path.glob("*.json"), *path.glob("*/*.json")] if f.is_file()):
        run = load_result(file)
        if run.model not in latest or run.created_at > latest[run.model][1].created_at:
            latest[run.model] = (file, run)
    if not latest:
        raise UserError(f"{path}: no result files (*.json or <model>/*.json) in this directory")
    return latest


def check_comparable(a: ResultFile, b: ResultFile, where: str) -> None:
    """Refuses runs whose numbers mean different things: another model, prompt, output length, batch or dtype."""
    if a.model != b.model:
        raise UserError(f"{where}: runs of {a.model} and {b.model}; compare runs of one model")
    for key in SAME_WORKLOAD:
        if a.workload.get(key) != b.workload.get(key):
            raise UserError(f"{where}: {key} {a.workload.get(key)} vs {b.workload.get(key)}; compare runs of one workload")
    if run_dtype(a) != run_dtype(b):
        raise UserError(f"{where}: dtype {run_dtype(a)} vs {run_dtype(b)}; compare runs of one dtype")


def machine_difference(a: ResultFile, b: ResultFile) -> str | None:
    """How two runs' machines differ (CPU, GPU or device), or None when they look the same."""
    pairs = [("cpu", a.machine.get("cpu"), b.machine.get("cpu")), ("gpu", a.machine.get("gpu"), b.machine.get("gpu")),
             ("device", a.protocol.get("device"), b.protocol.get("device"))]  # fmt: skip
    differ = [f"{what} {x!r} vs {y!r}" for what, x, y in pairs if x != y]
    return ", ".join(differ) or None


# ---- comparing ------------------------------------------------------------------------------------------------------


def row_tolerance(row: Row | None, other: Row | None, run: ResultFile) -> float:
    """tolerance() for a row given by one run or the other (the candidate's when both have it), in `run`."""
    given = row or other
    return tolerance(given.runner, run_dtype(run), run.model, given.quant, run_layers(run), reference_truth(run))


UNBOUNDED = AccuracyBound(kl_mean=float("inf"), kl_p99=float("inf"), top1_agree=0.0)  # KL and top-1 not judged


def accuracy_problems(row: Row, bound: AccuracyBound, truth_bound: float = float("inf")) -> list[str]:
    """What of the row's accuracy figures is beyond its bound (nothing when it has none: not compared), its
    truth_ratio included."""
    problems = []
    if row.truth_ratio is not None and row.truth_ratio > truth_bound:
        problems.append(f"{row.truth_ratio:.3g}x the reference's distance from the float64 truth, beyond its bound "
                        f"{truth_bound:g}x")  # fmt: skip
    for name, value, limit, worse in (("mean KL", row.kl_mean, bound.kl_mean, float.__gt__),
                                      ("p99 KL", row.kl_p99, bound.kl_p99, float.__gt__),
                                      ("top-1 agreement", row.top1_agree, bound.top1_agree, float.__lt__)):  # fmt: skip
        if value is not None and worse(float(value), limit):
            problems.append(f"{name} {value:.3g} is beyond its bound {limit:g}")
    if row.top1_agree is not None and row.kl_mean is None:
        problems.append("its probe logits are not all finite")
    return problems


def check(candidate: Path, baseline: Path, thresholds: Thresholds = Thresholds(), ratios: bool = False,
          paired: bool = False) -> Report:  # fmt: skip
    """Compares two result files, or the latest run of each model in two directories (matched by model)."""
    cands, bases = load_runs(candidate), load_runs(baseline)
    comparisons = []
    for model in [*bases, *(m for m in cands if m not in bases)]:
        if model not in cands:
            comparisons.append(vanished_model(model, *bases[model]))
        elif model not in bases:
            path, run = cands[model]
            comparisons.append(Comparison(model, run_info(path, run), None, False, None,
                                          notes=[f"{model} is not in the baseline: not compared"]))  # fmt: skip
        else:
            comparisons.append(compare_runs(*cands[model], *bases[model], thresholds, ratios, paired))
    return Report(thresholds, comparisons)


def run_info(path: Path, run: ResultFile) -> RunInfo:
    return RunInfo(str(path), run.run_id, run.created_at, run.machine.get("cpu"), run.machine.get("gpu"))


def vanished_model(model: str, path: Path, run: ResultFile) -> Comparison:
    rows = [compare_row(r.runner, None, r, row_tolerance(r, None, run)) for r in run.rows]
    return Comparison(model, None, run_info(path, run), False, None, rows, [f"{model} has no run in the candidate"])


def compare_runs(cand_path: Path, cand: ResultFile, base_path: Path, base: ResultFile, thresholds: Thresholds,
                 force_ratios: bool = False, paired: bool = False) -> Comparison:  # fmt: skip
    check_comparable(cand, base, f"{cand_path} vs {base_path}")
    differ = machine_difference(cand, base)
    why = "; ".join(w for w in ("--ratios" if force_ratios else "", f"machines differ: {differ}" if differ else "") if w) or None
    comparison = Comparison(cand.model, run_info(cand_path, cand), run_info(base_path, base), why is not None, why)
    if not cand.complete:
        comparison.notes.append("the candidate run is incomplete (interrupted or still running)")
    cand_rows, base_rows = {r.runner: r for r in cand.rows}, {r.runner: r for r in base.rows}
    refs = (reference_row(cand_rows), reference_row(base_rows)) if comparison.ratios else None
    run_pairs = paired and same_duet(cand, base)
    dtype, truth = run_dtype(cand), reference_truth(cand)
    rounding = rounding_dominates(dtype, truth)  # then the truth ratio judges the unquantized rows, not KL and top-1
    if rounding:
        comparison.notes.append(f"KL and top-1 of unquantized rows not judged: in {dtype} the reference itself is "
                                f"{truth:.3g} from the float64 truth, beyond the {TOLERANCES[dtype]:g} their bounds "
                                "assume; each row's truth ratio judges it")  # fmt: skip
    for runner in [*base_rows, *(r for r in cand_rows if r not in base_rows)]:
        bound = row_tolerance(cand_rows.get(runner), base_rows.get(runner), cand)
        quant = getattr(cand_rows.get(runner), "quant", None) or (RUNNERS[runner].quant if runner in RUNNERS else None)
        accuracy = UNBOUNDED if rounding and not quant else accuracy_bound(runner, quant, dtype)
        row = compare_row(runner, cand_rows.get(runner), base_rows.get(runner), bound, accuracy,
                          truth_ratio_bound(quant, dtype, runner))  # fmt: skip
        if row.baseline_status == row.candidate_status == "ok" and not any(f.subject == "figures" for f in row.findings):
            compare_metrics(row, cand_rows[runner], base_rows[runner], refs, thresholds, paired, run_pairs)
        comparison.rows.append(row)
    return comparison


def same_duet(cand: ResultFile, base: ResultFile) -> bool:
    """Whether the two files are the two sides of one duet (harness/duet.py): their runs were made in pairs."""
    c, b = cand.protocol.get("duet"), base.protocol.get("duet")
    return isinstance(c, dict) and isinstance(b, dict) and cand.run_id == base.run_id and c.get("side") != b.get("side")


def reference_row(rows: dict[str, Row]) -> Row | None:
    row = rows.get(REFERENCE)
    return row if row is not None and row.status == "ok" else None


def compare_row(runner: str, cand: Row | None, base: Row | None, bound: float,
                accuracy: AccuracyBound | None = None, truth_bound: float = float("inf")) -> RowReport:  # fmt: skip
    """Status and correctness: vanished, failed, skipped, new, the distance against its tolerance and the accuracy
    figures against their bound."""
    report = RowReport(runner, base.status if base else None, cand.status if cand else None,
                       cand.distance if cand else None, bound)  # fmt: skip

    def add(kind: str, subject: str, message: str, **figures) -> None:
        report.findings.append(Finding(runner, kind, subject, message, **figures))

    # Validation first: a NaN, an infinity, a zero speed or a string is never compared, and never passes.
    for which, r in (("candidate", cand), ("baseline", base)):
        if r is not None and (problems := invalid_figures(r)):
            add("regression", "figures", f"invalid figure in the {which}: {'; '.join(problems[:3])}"[:300],
                label="invalid figure")  # fmt: skip
    if any(f.subject == "figures" for f in report.findings):
        return report

    wrong = cand is not None and cand.distance is not None and cand.distance > bound
    inaccurate = accuracy_problems(cand, accuracy, truth_bound) if cand is not None and accuracy is not None else []
    if cand is None:
        lost = base.status == "ok"  # a row that measured nothing before loses nothing by vanishing
        add("regression" if lost else "note", "row", f"vanished: the candidate run has no such row (was {base.status})",
            label="vanished")
        return report
    if base is None:
        add("new", "row", f"new row ({cand.status}), not in the baseline: not judged"
            + (f"; its distance {cand.distance:.3g} is above its tolerance {bound:g}" if wrong else "")
            + "".join(f"; {problem}" for problem in inaccurate))  # fmt: skip
        return report
    if base.status == "ok" and cand.status != "ok":
        add("regression", "status", f"was ok, now {cand.status}: {first_line(cand.reason)}", label=cand.status)
    elif base.status != "ok" and cand.status == "ok":
        add("improvement", "status", f"was {base.status}, now ok")
    if wrong and known_peer_gap(runner, cand, base, bound):
        add("note", "distance", f"a peer's known gap: distance {cand.distance:.3g} is above its tolerance {bound:g}, "
            f"as in the baseline ({base.distance:.3g})", baseline=base.distance, candidate=cand.distance)  # fmt: skip
    elif wrong:
        add("regression", "distance", f"distance {cand.distance:.3g} is above its tolerance {bound:g}",
            baseline=base.distance, candidate=cand.distance)  # fmt: skip
    elif cand.status == "ok" and cand.distance is None and base.distance is not None:
        add("regression", "distance", "no longer compared with the reference: "
            + first_line(next((n for n in cand.notes if n.startswith("not compared")), "no distance")))  # fmt: skip
    if inaccurate:
        add("regression", "accuracy", "accuracy: " + "; ".join(inaccurate), label="accuracy")
    return report


def known_peer_gap(runner: str, cand: Row, base: Row, bound: float) -> bool:
    """A peer stack (not Linnet's) that was already beyond its bound in the baseline and is no further now: a fact
    about that stack (KerasHub's Llama 3 rope, say), shown but not a regression of this code. Linnet's rows, and
    runners this code does not know, are always held to their bound."""
    info = RUNNERS.get(runner)
    return (info is not None and not info.ours and base.distance is not None and base.distance > bound
            and cand.distance is not None and cand.distance <= 1.5 * base.distance)  # fmt: skip


def first_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[0][:200] if lines else "no reason given"


def compare_metrics(report: RowReport, cand: Row, base: Row, refs: tuple[Row | None, Row | None] | None,
                    thresholds: Thresholds, paired: bool = False, run_pairs: bool = False) -> None:  # fmt: skip
    """Judges every metric the baseline row has: absolute figures, or ratios to each run's reference row."""
    for metric in (m for m in METRICS if m.judged):
        if metric.key not in base.metrics:
            continue
        if metric.key not in cand.metrics:
            report.findings.append(Finding(report.runner, "regression", metric.key, f"{metric.label} is no longer measured",
                                           f"{metric.label} gone"))
            continue
        if metric.memory and cand.metrics.get("mem_kind") != base.metrics.get("mem_kind"):
            report.findings.append(Finding(report.runner, "note", metric.key,
                                           f"{metric.label} not compared: {base.metrics.get('mem_kind')} memory then, "
                                           f"{cand.metrics.get('mem_kind')} memory now"))  # fmt: skip
            continue
        if refs is not None and report.runner == REFERENCE:
            continue  # its ratio to itself is 1 in both runs
        c, b = Span.of(cand.metrics, metric.key), Span.of(base.metrics, metric.key)
        if metric.unit in SECONDS and max(c.mid, b.mid) * SECONDS[metric.unit] < thresholds.min_seconds:
            report.findings.append(Finding(report.runner, "note", metric.key,
                                           f"{metric.label} not judged: under {thresholds.min_seconds * 1e3:g} ms in both runs"))  # fmt: skip
            continue
        scale = (1.0, 1.0)
        if refs is not None:
            ratios = ratio_spans(metric, c, b, *refs)
            if isinstance(ratios, str):
                kind = "regression" if isinstance(ratios, Invalid) else "note"
                report.findings.append(Finding(report.runner, kind, metric.key, f"{metric.label} not compared: {ratios}"))
                continue
            if ratios[0].mid and ratios[1].mid:
                scale = (c.mid / ratios[0].mid, b.mid / ratios[1].mid)  # each run's reference figure
            c, b = ratios
        if (run_pairs and metric.key in cand.samples and metric.key in base.samples) or (
                has_trials(cand, metric.key) and has_trials(base, metric.key)):  # fmt: skip
            judge_interval(report, metric, cand.samples[metric.key], base.samples[metric.key], scale, thresholds,
                           ratio=refs is not None, paired=paired, run_pairs=run_pairs)  # fmt: skip
        else:
            judge(report, metric, c, b, thresholds, ratio=refs is not None)


def has_trials(row: Row, name: str) -> bool:
    """Whether the row kept the metric's samples over at least 2 trials: with one, an interval holds only the noise
    within one process, far narrower than between processes, and the min-max rule judges instead."""
    return len([t for t in row.samples.get(name, []) if t]) >= 2


def judge_interval(report: RowReport, metric: Metric, cand: stats.Trials, base: stats.Trials, scale: tuple[float, float],
                   thresholds: Thresholds, ratio: bool, paired: bool, run_pairs: bool = False) -> None:  # fmt: skip
    """A change counts when the 95% interval of candidate / baseline lies wholly beyond the threshold (stats.judge). In
    ratio mode each side is first divided by its run's reference figure (scale), taken as exact."""
    paired = paired and len(cand) == len(base)
    run_pairs = paired and run_pairs and [len(t) for t in cand] == [len(t) for t in base]
    if not (statistics.median(stats.pooled(cand)) > 0 and statistics.median(stats.pooled(base)) > 0):
        return  # no ratio of a figure that is not positive (NaN and negatives: the validation of the files)
    middle, low, high = stats.ratio_interval(cand, base, paired=paired, run_pairs=run_pairs)
    middle, low, high = (x * scale[1] / scale[0] for x in (middle, low, high))
    report.changes[metric.key] = middle - 1
    report.intervals[metric.key] = (low, high)
    threshold = thresholds.memory if metric.memory else thresholds.speed
    verdict = stats.judge(low, high, threshold, metric.higher_is_better)
    if verdict == "same":
        return
    b, c = statistics.median(stats.pooled(base)) / scale[1], statistics.median(stats.pooled(cand)) / scale[0]
    unit = f"× {REFERENCE}" if ratio else metric.unit
    pairing = "run-paired " if run_pairs else "paired " if paired else ""
    how = f"{pairing}95% interval of candidate/baseline {low:.3g}–{high:.3g}"
    unit_word = "process pairs" if run_pairs else "trials"
    trials = f"{len(base)} vs {len(cand)} {unit_word}"
    change = f"{metric.label} {b:.3g} → {c:.3g} {unit} ({middle - 1:+.0%})"
    if verdict == "unclear":
        needed = stats.trials_to_decide(middle, low, high, threshold, min(len(base), len(cand)))
        decide = ("its middle sits on the threshold: more trials may never decide" if needed is None
                  else f"about {needed} {unit_word} a side would likely decide" if needed <= 100
                  else f"over 100 {unit_word} a side would be needed")  # fmt: skip
        message = f"{change}: unclear, the {how} reaches across {threshold:.0%} ({trials}; {decide})"
    else:
        worse = verdict == "regression"
        word = ("larger" if worse else "smaller") if metric.memory else ("slower" if worse else "faster")
        message = f"{change}: {word}, the {how} lies beyond {threshold:.0%} ({trials})"
    report.findings.append(Finding(report.runner, verdict, metric.key, message, metric.label, b, c, middle - 1))


class Invalid(str):
    """Why ratios cannot be taken when that is a failure: the reference's own figure is not a measurement."""


def ratio_spans(metric: Metric, c: Span, b: Span, cand_ref: Row | None, base_ref: Row | None) -> tuple[Span, Span] | str:
    """(candidate, baseline) as ratios to their own run's reference, or why they cannot be (Invalid: a failure)."""
    out = []
    for span, ref, which in ((c, cand_ref, "candidate"), (b, base_ref, "baseline")):
        if ref is None:
            return f"the {which} run has no measured {REFERENCE} row to take ratios to"
        name = next((n for n in metric.ratio_to if n in ref.metrics), None)
        if name is None:
            return f"the {which} run's {REFERENCE} row has no {metric.ratio_to[0]}"
        if not (is_number(ref.metrics[name]) and ref.metrics[name] > 0):
            return Invalid(f"reference figure invalid: the {which} run's {REFERENCE} {name} is {ref.metrics[name]!r:.40}")
        out.append(span.over(ref.metrics[name]))
    return out[0], out[1]


# A timed figure measured once a side is judged only beyond this change: between processes a 2-core machine's figures
# move 20-40% (issue 13's measurements), so a smaller change of one value is not evidence.
SINGLE_VALUE_THRESHOLD = 0.5


def judge(report: RowReport, metric: Metric, c: Span, b: Span, thresholds: Thresholds, ratio: bool) -> None:
    """A change counts when beyond the threshold and outside the overlap of the two spreads."""
    if not (b.mid > 0 and c.mid > 0):
        return
    change = c.mid / b.mid - 1
    report.changes[metric.key] = change
    threshold = thresholds.memory if metric.memory else thresholds.speed
    if abs(change) <= threshold:
        return
    if c.overlaps(b):  # beyond the threshold, but within what the runs themselves spread over
        report.findings.append(Finding(report.runner, "unclear", metric.key,
                                       f"{metric.label} {b.mid:.3g} → {c.mid:.3g} ({change:+.0%}): unclear, the runs' "
                                       f"spreads overlap ({b.lo:.3g}–{b.hi:.3g} then, {c.lo:.3g}–{c.hi:.3g} now); "
                                       "run --trials 3 or more to judge by an interval", metric.label))  # fmt: skip
        return
    if b.lo == b.hi and c.lo == c.hi and not metric.memory and abs(change) <= SINGLE_VALUE_THRESHOLD:
        # one timed value a side (a single trial's load, a single serving run): a change cannot be told from the
        # 20-40% that a small machine moves between processes
        report.findings.append(Finding(report.runner, "unclear", metric.key,
                                       f"{metric.label} {b.mid:.3g} → {c.mid:.3g} ({change:+.0%}) not judged: one value a "
                                       f"side, within the {SINGLE_VALUE_THRESHOLD:.0%} processes differ by (run --trials 2 "
                                       "or more)"))  # fmt: skip
        return
    worse = (change < 0) == metric.higher_is_better
    unit = f"× {REFERENCE}" if ratio else metric.unit
    spreads = (f"the runs' spreads ({b.lo:.3g}–{b.hi:.3g} then, {c.lo:.3g}–{c.hi:.3g} now)"
               if b.lo < b.hi or c.lo < c.hi else "no spread measured")  # fmt: skip
    message = f"{metric.label} {b.mid:.3g} → {c.mid:.3g} {unit} ({change:+.0%}), beyond {threshold:.0%}; {spreads}"
    kind = "regression" if worse else "improvement"
    report.findings.append(Finding(report.runner, kind, metric.key, message, metric.label, b.mid, c.mid, change))
