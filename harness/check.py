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
- its distance from the reference is above its tolerance (TOLERANCES by the row's dtype, QUANT_TOLERANCES by how its
  weights are stored);
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
`linnet-bench check` prints this module's report; the CI gate (`make gate`) runs it with GATE_THRESHOLDS, paired."""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from rich import box
from rich.table import Table
from rich.text import Text

from harness import stats
from harness.metrics import METRICS, SECONDS, Metric
from harness.registry import MODELS
from harness.results import ResultFile, Row, load_result
from harness.validate import invalid_figures, is_number
from linnet_core.errors import UserError, literal
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

# The largest distance from the reference that is not a wrong answer, by dtype. f32: the project's correctness bar.
# f16 and bf16 logits differ from the reference by rounding: a few units in the last place at a logit of 16 (the
# real model's largest), i.e. 0.25 is ~16 f16 ulps (the largest of 257 probe positions: on qwen2-tiny the f16 rows
# measured 0.13-0.15 there, 0.04-0.10 over the 17 of the earlier probe) and 0.5 is 4 bf16 ulps (the seed page's bf16
# rows are 0.14-0.39). Quantized weights move logits by more than any fixed bound tells from wrong (llama.cpp q8_0:
# 2.3 on qwen2-tiny, 8.2 on the 0.5B shape in bf16): their distance is not judged, their accuracy is
# (ACCURACY_BOUNDS).
TOLERANCES = {"f32": 1e-4, "f16": 0.25, "bf16": 0.5}
# f32 rounding grows with depth: on the 24-layer Qwen2.5-0.5B shape every engine measured sits 2.9e-4 to 4.9e-4 from
# the reference (results/qwen2.5-0.5b-instruct, sums in another order), the 2-layer test model within 5e-5. So a deep
# model's f32 bound is this much per layer (1.2e-3 at 24 layers), never under TOLERANCES["f32"].
F32_PER_LAYER = 5e-5
# f16 rounding grows with depth too: over the 257 probe positions the 2-layer qwen2-tiny's f16 rows sit 0.13-0.15 from
# the reference, the 6-layer gemma3-tiny's (embeddings scaled by sqrt(hidden), norms after each sublayer) 0.27.
F16_PER_LAYER = 0.05
# Rows whose weights are stored in another precision than the run's dtype (Row.quant, RunnerInfo.quant) are held to
# their storage's bound, or the run dtype's when looser. f16 weights round like f16 logits: TOLERANCES["f16"]
# (llama.cpp on f16 GGUF weights: 0.098 from the f32 reference on qwen2-tiny). 8-bit weights (q8_0, int8) move the
# largest logit difference further than any fixed bound tells from wrong (over the 257 probe positions on qwen2-tiny
# the int8 and q8_0 rows measured 2.0-2.7, where the 17 positions of the earlier probe gave 1.05): their distance is
# not judged, their accuracy is (ACCURACY_BOUNDS: KL and top-1 agreement). A quantization without an entry is not
# judged by distance either, until it is measured.
QUANT_TOLERANCES = {"f16": TOLERANCES["f16"], "q8_0": float("inf"), "int8": float("inf")}


# The largest truth_ratio that is not a wrong answer, by dtype: a row's distance from the float64 truth
# (runners/transformers_truth.py) over the reference's own, both in the run's dtype. A row that rounds as transformers
# does sits near 1. 16 bits: each engine rounds its activations at other places than transformers (fused projections,
# another attention kernel), so up to 4x the reference's error is rounding; a wrong row (a lost bias, a position off by
# one) is 100x and more. f32: the errors are summation order at 1e-6 relative, so the ratio of two such tiny distances
# moves more (qwen2-tiny: 1.1-1.9 over six engines); 10. Rows whose weights are stored in fewer bits (`quant`) are
# not judged by it: their distance is the rounding of their weights, and their accuracy bounds judge them.
TRUTH_RATIO_BOUNDS = {"f32": 10.0, "f16": 4.0, "bf16": 4.0}


def truth_ratio_bound(quant: str | None, dtype: str, runner: str = "") -> float:
    """A row's truth_ratio bound: its run dtype's; none (infinity) for quantized weights or a row that computes in
    another dtype than the run's (linnet-ort-f16 in an f32 run: its ratio is over an f32 reference's distance)."""
    own = next((d for d in TRUTH_RATIO_BOUNDS if runner.endswith(f"-{d}")), dtype)
    return float("inf") if quant or own != dtype else TRUTH_RATIO_BOUNDS.get(dtype, TRUTH_RATIO_BOUNDS["f32"])


@dataclass(frozen=True)
class AccuracyBound:
    """The loosest accuracy figures (harness/accuracy.py: KL(reference || row) over the probe's positions, top-1
    agreement) that are not a wrong answer."""

    kl_mean: float  # the largest mean KL divergence, nats
    kl_p99: float  # the largest 99th percentile of it
    top1_agree: float  # the smallest share of positions agreeing with the reference's top-1 token

    def loosest(self, other: AccuracyBound) -> AccuracyBound:
        return AccuracyBound(max(self.kl_mean, other.kl_mean), max(self.kl_p99, other.kl_p99),
                             min(self.top1_agree, other.top1_agree))  # fmt: skip


# Accuracy bounds by quantization (a row's `quant`, or its runner id's suffix: -int8, -q8_0, ...), else by dtype as
# TOLERANCES; a row is held to the looser of its own and the run's dtype's. Set from qwen2-tiny runs (f32, synthetic
# weights; harness/accuracy.py's test checks their distributions are neither flat nor one-hot), about 10x above
# what correct rows measured there, and from the physics: f32 differs by summation order (KL ~1e-10), f16 and bf16 by
# rounding every activation (3 and 8 significant bits fewer), 8-bit weights by a rounding step of 1/254 of each
# channel's (or block's) largest weight. On the random weights of synthetic recipe 2 near-ties were common and small
# logit errors flipped them: per-channel int8 weights measured KL 0.017, p99 0.094, top-1 0.926, llama.cpp q8_0
# (8-bit activations too) 0.023, 0.115, 0.899, and the 8-bit bounds hold about 2x above those. On the trained twins
# (recipe 3) and the text probe the same rows measure KL 6.2e-4 to 3.4e-3, p99 3.7e-3 to 2.4e-2, top-1 0.95-0.98
# (results/int8-twins/), where bf16 alone agrees at 0.96-0.98 (scripts/accuracy_floor.py), so the bounds are now
# loose; a broken row (a lost bias, a wrong scale, the lost embedding scale) is KL > 1, top-1 < 0.5.
ACCURACY_BOUNDS = {
    "f32": AccuracyBound(kl_mean=1e-6, kl_p99=1e-5, top1_agree=0.99),
    "f16": AccuracyBound(kl_mean=1e-3, kl_p99=1e-2, top1_agree=0.97),
    "bf16": AccuracyBound(kl_mean=2e-2, kl_p99=0.2, top1_agree=0.90),
    "int8": AccuracyBound(kl_mean=0.05, kl_p99=0.3, top1_agree=0.85),
    "q8_0": AccuracyBound(kl_mean=0.05, kl_p99=0.3, top1_agree=0.85),
}



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


def run_dtype(run: ResultFile) -> str:
    return run.protocol.get("dtype", "f32")


def machine_difference(a: ResultFile, b: ResultFile) -> str | None:
    """How two runs' machines differ (CPU, GPU or device), or None when they look the same."""
    pairs = [("cpu", a.machine.get("cpu"), b.machine.get("cpu")), ("gpu", a.machine.get("gpu"), b.machine.get("gpu")),
             ("device", a.protocol.get("device"), b.protocol.get("device"))]  # fmt: skip
    differ = [f"{what} {x!r} vs {y!r}" for what, x, y in pairs if x != y]
    return ", ".join(differ) or None


# ---- comparing ------------------------------------------------------------------------------------------------------


def tolerance(runner: str, dtype: str, model: str | None = None, quant: str | None = None,
              layers: int | None = None) -> float:  # fmt: skip
    """A row's bound: its weights' quantization's (the row's `quant`, else the registry's for that runner id), else
    its own dtype's (from a -f16/-bf16/-f32 runner id, else the run's), or the reference's, the looser, since the
    distance is to the reference run in the run's dtype; in f32 and f16, wider for a deep model (`layers`, else the
    registry's for `model`, else none)."""
    entry = MODELS.get(model) if model else None
    if layers is None:
        layers = entry.config.num_hidden_layers if entry else 0
    bounds = {**TOLERANCES, "f32": max(TOLERANCES["f32"], F32_PER_LAYER * layers),
              "f16": max(TOLERANCES["f16"], F16_PER_LAYER * layers)}  # fmt: skip
    f32 = bounds["f32"]
    quant = quant or (RUNNERS[runner].quant if runner in RUNNERS else None)  # files from before Row.quant
    if quant:
        own = QUANT_TOLERANCES.get(quant, max(QUANT_TOLERANCES.values()))
    else:
        own = bounds.get(next((d for d in bounds if runner.endswith(f"-{d}")), dtype), f32)
    return max(own, bounds.get(dtype, f32))


def row_tolerance(row: Row | None, other: Row | None, run: ResultFile) -> float:
    """tolerance() for a row given by one run or the other (the candidate's when both have it), in `run`."""
    given = row or other
    return tolerance(given.runner, run_dtype(run), run.model, given.quant, run_layers(run))


def run_layers(run: ResultFile) -> int | None:
    """The model's depth as the run recorded it (files from before it did: None, the registry says). Loading has
    checked it is a whole number; a depth no model has is not allowed to loosen a bound."""
    layers = (run.architecture or {}).get("layers")
    return layers if layers is not None and 0 < layers < 10_000 else None


def accuracy_bound(runner: str, quant: str | None, dtype: str) -> AccuracyBound:
    """A row's accuracy bound: its quantization's (`quant`, or a runner id ending in one), else its own dtype's (a
    runner id ending in one), loosened to the run's dtype's, since the reference ran in that."""
    own = quant or next((q for q in ACCURACY_BOUNDS if runner.endswith(f"-{q}")), dtype)
    run = ACCURACY_BOUNDS.get(dtype, ACCURACY_BOUNDS["f32"])
    return ACCURACY_BOUNDS.get(own, run).loosest(run)


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
    for runner in [*base_rows, *(r for r in cand_rows if r not in base_rows)]:
        bound = row_tolerance(cand_rows.get(runner), base_rows.get(runner), cand)
        quant = getattr(cand_rows.get(runner), "quant", None) or (RUNNERS[runner].quant if runner in RUNNERS else None)
        accuracy = accuracy_bound(runner, quant, run_dtype(cand))
        row = compare_row(runner, cand_rows.get(runner), base_rows.get(runner), bound, accuracy,
                          truth_ratio_bound(quant, run_dtype(cand), runner))  # fmt: skip
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


# ---- showing --------------------------------------------------------------------------------------------------------

STYLE = {"regression": "red", "improvement": "green", "unclear": "magenta", "new": "cyan", "note": "yellow", None: ""}


def header(c: Comparison) -> str:
    def side(info: RunInfo | None) -> str:
        return "none" if info is None else f"{literal(info.run_id)} ({literal(info.path, 4096)})"

    how = f"changes of each row's ratio to {REFERENCE} in its run ({literal(c.why_ratios)})" if c.ratios else "changes of absolute figures"
    return f"[bold]{literal(c.model)}[/]: candidate {side(c.candidate)} vs baseline {side(c.baseline)}; {how}"


def table(c: Comparison) -> Table:
    """One line per row: the relative change of each metric (red: regression, green: improvement), the distance,
    and the verdict with the status when it is not ok in both runs."""
    shown = [m for m in METRICS if any(m.key in r.changes for r in c.rows)]
    t = Table("runner", *(m.label for m in shown), "distance", "verdict", box=box.SIMPLE_HEAD, pad_edge=False)
    t.columns[0].no_wrap = True
    for row in c.rows:
        kinds = {f.subject: f.kind for f in row.findings}
        cells = [change_cell(row, m, kinds.get(m.key), c.ratios) for m in shown]
        distance = Text("–" if row.distance is None else f"{row.distance:.2g}", style=STYLE.get(kinds.get("distance"), ""))
        verdict = row.verdict
        if row.baseline_status is None:
            verdict += "" if row.candidate_status == "ok" else f" ({row.candidate_status})"
        elif not row.baseline_status == row.candidate_status == "ok":
            verdict += f" ({row.baseline_status} → {row.candidate_status or 'gone'})"
        t.add_row(literal(row.runner), *cells, distance, Text(verdict, style=VERDICT_STYLE.get(row.verdict, "dim")))
    return t


VERDICT_STYLE = {"regressed": "red", "improved": "green", "unclear": "magenta", "new": "cyan"}


def change_cell(row: RowReport, metric: Metric, kind: str | None, ratios: bool) -> Text:
    change = row.changes.get(metric.key)
    if change is None:
        return Text("ref" if ratios and row.runner == REFERENCE else "–", style="dim")
    return Text(f"{change:+.0%}", style=STYLE.get(kind, "dim"))


def finding_lines(c: Comparison) -> list[str]:
    marks = {"regression": "✗", "improvement": "↑", "unclear": "?", "new": "+", "note": "·"}
    lines = [f"  [yellow]·[/] {literal(note, 1000)}" for note in c.notes]
    for row in c.rows:
        for f in row.findings:
            lines.append(f"  [{STYLE[f.kind]}]{marks[f.kind]} {f.kind}[/] {literal(f.runner)}: {literal(f.message, 1000)}")
    return lines


def verdict(report: Report) -> str:
    """The one-line verdict."""
    regressions, improvements = report.findings("regression"), report.findings("improvement")
    if regressions:
        listed = ", ".join(literal(f"{f.runner} {f.label or f.subject}") for f in regressions[:6])
        more = f" and {len(regressions) - 6} more" if len(regressions) > 6 else ""
        return f"[bold red]FAIL[/]: {len(regressions)} regression(s): {listed}{more}"
    rows = sum(1 for c in report.comparisons for r in c.rows if r.verdict != "new")
    line = f"[bold green]PASS[/]: no regression in {rows} row(s)"
    if unclear := [f for f in report.findings("unclear")]:
        listed = ", ".join(literal(f"{f.runner} {f.label or f.subject}") for f in unclear[:6])
        line += f"; unclear, not judged: {listed}{f' and {len(unclear) - 6} more' if len(unclear) > 6 else ''} (more trials would decide)"
    if improvements:
        line += f"; {len(improvements)} improvement(s) beyond the thresholds: the baseline may be out of date"
    return line
