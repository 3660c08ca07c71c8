"""A whole run: resolve the checkpoint, build the workload, run the reference and every runner in its own child,
turn each outcome into a row, and keep the result file on disk up to date after every row. The run's settings and
what follows from them alone (the empty result file, each child's spec) are harness/settings.py's, which the duets
(harness/duet.py) share."""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness import accuracy, environment, launch, roofline
from harness.duet import DuetFailed, Turns, peer_duet
from harness.registry import checkpoint_for
from harness.results import ResultFile, Row, write_result
from harness.settings import GIB, BenchSettings, new_result, run_id_now, spec_fields, timeout_for, trial_spec, trials_for
from harness.trials import combine_trials
from harness.validate import invalid_figures
from runners import REFERENCE, RUNNERS, TRUTH, RunnerInfo, get_runner


class Display:
    """What a run tells its user as it goes; the CLI shows it with rich, tests ignore it."""

    def begin(self, result: ResultFile, path: Path) -> None: ...
    def start(self, runner: RunnerInfo) -> None: ...
    def progress(self, runner: RunnerInfo, text: str) -> None: ...
    def finish(self, row: Row) -> None: ...


def run_bench(settings: BenchSettings, display: Display = Display()) -> Path:
    """Runs every row; returns the result file's path. On Ctrl-C the rows so far are kept (complete: false)."""
    budget = Budget(settings.budget_s)  # from the run's start: making the checkpoint and the first probe count too
    ckpt, weights = checkpoint_for(settings.model, settings.weights, settings.seed)
    created_at, run_id = run_id_now()
    path = settings.out_dir / settings.model.id / f"{run_id}.json"
    first_probe = roofline.measure(settings.device)  # the memory wall: probed again at the end (roofline.py)
    machine = {**environment.machine(), **first_probe}
    result = new_result(settings, weights, machine, created_at, run_id)
    write_result(result, path)
    display.begin(result, path)
    scratch = Path(tempfile.mkdtemp(prefix=f"linnet-bench-{run_id}-"))
    base_spec = spec_fields(settings, ckpt)
    try:
        run_trials(settings, result, path, base_spec, scratch, display, budget)
        if settings.peer_duet_s > 0:
            run_peer_duets(settings, result, path, base_spec, scratch, display)
        result.machine.update(roofline.larger([first_probe, roofline.measure(settings.device)]))
        for row in result.rows:
            mark_wall(row, settings, result.machine)
        result.complete = True
    except KeyboardInterrupt:
        result.interrupted = True  # type: ignore[attr-defined]  # an extra field: the page says the run was cut short
        raise
    finally:
        write_result(result, path)
        shutil.rmtree(scratch, ignore_errors=True)
    return path


def run_trials(settings: BenchSettings, result: ResultFile, path: Path, base_spec: dict, scratch: Path,
               display: Display, budget: Budget) -> None:  # fmt: skip
    """Round robin over the rows, trial by trial (A B C A B C ...), so that a slow spell of the machine hits every row
    alike. A row's first trial decides a skip; a failed trial ends the row (failed, saying which trial); the result
    file is rewritten after every trial. With a budget (--budget), no trial starts once it is spent and a running
    child is cut at it: every row gets its first trial before any gets its second, and the rows given with
    --extra-runner only what the others leave; a row whose first trial the budget cut is skipped, saying so."""
    children = Children(settings, scratch, budget, display)
    reference = Reference()
    reference.load_truth(*children.run(TRUTH, base_spec, scratch / "truth", "truth"))
    order = sorted(settings.runners, key=lambda r: r.id != REFERENCE)  # the reference first
    if all(r.id != REFERENCE for r in order):
        reference.load(*children.run(get_runner(REFERENCE), base_spec, scratch / "reference", "score"))
    planned = {info.id: trials_for(info.kind, settings) for info in order}
    rows: dict[str, RowTrials] = {}
    for k, info in trial_order(order, planned, settings.extra):
        done = rows.get(info.id)
        if done is not None and done.row.status != "ok":
            continue
        if budget.spent():
            if done is None:
                done = rows[info.id] = RowTrials(budget.unstarted_row(info))
                result.rows.append(done.row)
            elif k == len(done.metrics) + 1:
                done.row.notes.append(budget.cut_note(len(done.metrics), planned[info.id]))
            write_result(result, path)
            continue
        label = f"trial {k}/{planned[info.id]} · " if planned[info.id] > 1 else ""
        # the row's distance and accuracy are its first trial's: later trials skip the probe (0.5B: a minute each)
        outcome, work = children.run(info, base_spec, scratch / info.id / f"trial-{k}", "measure" if k == 1 else "time",
                                     label)  # fmt: skip
        if done is None:
            if info.id == REFERENCE:
                reference.load(outcome, work)
            result.reference_distributions = reference.shape
            done = rows[info.id] = RowTrials(make_row(info, outcome, work, reference))
            if Budget.cut(outcome):  # the run's time ran out, not the row: no verdict on it
                done.row.status = "skipped"
            result.rows.append(done.row)
        elif Budget.cut(outcome):  # a later trial the budget cut short is not the row's failure: it is dropped
            done.row.notes.append(budget.cut_note(len(done.metrics), planned[info.id]))
        else:
            done.add(outcome, k, planned[info.id])
        mark_wall(done.row, settings, result.machine)
        shutil.rmtree(work, ignore_errors=True)  # its exports and logits are read: free the disk (0.5B: GiBs)
        write_result(result, path)
        display.finish(done.row)  # after every trial: the row as summarised so far


def trial_order(order: list[RunnerInfo], planned: dict[str, int], extra: frozenset[str]):
    """(k, row) for each trial k of each row, in the order they start: round robin (A B C A B C ...), then the rows
    given with `run --extra-runner` round robin among themselves, in what a budget leaves after every other trial."""
    for tier in ([r for r in order if r.id not in extra], [r for r in order if r.id in extra]):
        for k in range(1, max((planned[r.id] for r in tier), default=0) + 1):
            yield from ((k, info) for info in tier if k <= planned[info.id])


def mark_wall(row: Row, settings: BenchSettings, machine: dict) -> None:
    """A measured single-request row's bytes read per token and the share of the machine's memory wall its median
    decode reaches (harness/roofline.py); nothing without a bandwidth figure or a decode speed."""
    gb_s, decode = machine.get("memory_bandwidth_gb_s"), row.metrics.get("decode_tok_s")
    if row.status != "ok" or not gb_s or not decode or "serving_tok_s" in row.metrics:
        return
    read = roofline.bytes_per_token(settings.model.config, settings.dtype, row.quant, settings.profile.prompt_tokens,
                                    settings.profile.new_tokens)  # fmt: skip
    row.metrics["bytes_per_token"] = read
    row.metrics["roofline"] = roofline.roofline(decode, read, gb_s)


class Budget:
    """A run's time budget (`run --budget SECONDS`): what fits a short GPU window. None: no budget."""

    def __init__(self, seconds: float | None):
        self.seconds = seconds
        self.deadline = None if seconds is None else time.monotonic() + seconds

    def left(self) -> float:
        return float("inf") if self.deadline is None else self.deadline - time.monotonic()

    def spent(self) -> bool:
        return self.left() < MIN_TRIAL_S

    def timeout(self, timeout_s: float) -> float:
        """A child's timeout: its own, or what is left of the budget when that is less."""
        return min(timeout_s, max(self.left(), 1.0))

    def cut_short(self, outcome: launch.ChildOutcome, own_timeout_s: float, given_s: float) -> None:
        """Says so in the outcome when the child timed out at the budget's end rather than at its own timeout."""
        if given_s < own_timeout_s and outcome.record is None and (outcome.failure or "").startswith("timed out"):
            outcome.failure = f"{CUT_SHORT} of {self.seconds:g} s was spent ({outcome.failure})"

    @staticmethod
    def cut(outcome: launch.ChildOutcome) -> bool:
        return (outcome.failure or "").startswith(CUT_SHORT)

    def unstarted_row(self, info: RunnerInfo) -> Row:
        return Row(runner=info.id, label=info.label, group=info.group, peer=info.peer, quant=info.quant,
                   status="skipped", reason=f"not started: the run's budget of {self.seconds:g} s was spent")  # fmt: skip

    def cut_note(self, trials: int, planned: int) -> str:
        return f"{trials} of {planned} trials: the run's budget of {self.seconds:g} s was spent"


# A trial is not started with less of the budget left than this: a child's imports alone take seconds.
MIN_TRIAL_S = 10.0
CUT_SHORT = "cut short: the run's budget"


class Children:
    """Starts a run's children: each within the run's budget, sharing the run's compile caches (launch.compile_caches)."""

    def __init__(self, settings: BenchSettings, scratch: Path, budget: Budget, display: Display):
        self.settings, self.budget, self.display = settings, budget, display
        self.env = launch.compile_caches(scratch / "compile-cache")

    def run(self, info: RunnerInfo, base_spec: dict, work: Path, mode: str, label: str = ""):
        """One child of `info` in `mode`; returns its outcome and its work directory."""
        self.display.start(info)
        spec = trial_spec(self.settings, info, base_spec, work, mode)
        own = timeout_for(self.settings, info)
        timeout = self.budget.timeout(own)
        outcome = launch.run_child(spec, timeout, lambda t: self.display.progress(info, label + t), self.env)
        self.budget.cut_short(outcome, own, timeout)
        return outcome, spec.work


# Process pairs of a peer duet: two, so that one process's luck (where its memory landed) cannot make the figure.
PEER_DUET_PAIRS = 2


def run_peer_duets(settings: BenchSettings, result: ResultFile, path: Path, base_spec: dict, scratch: Path,
                   display: Display) -> None:  # fmt: skip
    """Each measured single-request row whose peer was measured too is timed in turns with it (harness/duet.py); the
    page's comparison of the two then rests on the run pairs. A duet that fails leaves a note, not a failed row."""
    measured = {r.runner: r for r in result.rows if r.status == "ok"}
    for row in result.rows:
        info, peer = RUNNERS.get(row.runner), RUNNERS.get(row.peer or "")
        if row.status != "ok" or info is None or peer is None or peer.id not in measured:
            continue
        if not info.kind == peer.kind == "single":  # serving rows are timed at the client, many requests at once
            continue
        display.start(info)
        display.progress(info, f"in turns with {peer.id}")
        try:
            row.peer_duet = peer_duet(settings, info, peer, base_spec, scratch, PEER_DUET_PAIRS, Turns(settings.peer_duet_s))
        except DuetFailed as e:
            row.notes.append(f"not timed in turns with {peer.id}: {e}")
        write_result(result, path)
        display.finish(row)


class RowTrials:
    """A row and the per-trial figures it is summarised from (harness/stats.py): after each trial its metrics are the
    median, min, max and 95% interval over every sample so far."""

    def __init__(self, row: Row):
        self.row = row
        self.metrics: list[dict] = []  # per trial: the child's metrics
        self.samples: list[dict] = []  # per trial: {metric: [run values]}
        if row.status == "ok":
            self.metrics.append(row.metrics)
            self.samples.append(row.samples)
            self.summarise()

    def add(self, outcome: launch.ChildOutcome, k: int, trials: int) -> None:
        record = outcome.record
        if record is None or record["status"] != "ok":
            why = (record or {}).get("reason") or outcome.failure
            status = "skipped" if record is not None and record["status"] == "skipped" else "failed"
            self.row.status = "failed"
            self.row.reason = f"trial {k} of {trials} {'was skipped' if status == 'skipped' else 'failed'}: {why}"
            return
        self.metrics.append(trial_metrics(record, outcome))
        self.samples.append(dict(record.get("samples") or {}))
        self.summarise()

    def summarise(self) -> None:
        self.row.metrics, self.row.samples, self.row.unstable = combine_trials(self.metrics, self.samples)
        if problems := invalid_figures(self.row):  # a NaN or an infinity measured is a broken row, not a figure to compare
            self.row.status, self.row.reason = "failed", f"invalid figure: {'; '.join(problems)}"


class Reference:
    """The reference row's probe logits and greedy tokens, once it has run, and the float64 truth's logits
    (runners/transformers_truth.py) with the reference's own distance from them."""

    logits: np.ndarray | None = None
    tokens: list[int] | None = None
    shape: dict | None = None  # how peaked its distributions are (accuracy.distribution_shape), for the result file
    failure: str | None = "the reference has not run"
    truth: np.ndarray | None = None  # float64 [positions, vocab]
    truth_failure: str | None = "the float64 truth has not run"
    truth_distance: float | None = None  # the reference's: every row's truth_ratio is over it

    def load(self, outcome: launch.ChildOutcome, work: Path) -> None:
        logits, why = child_logits(outcome, work)
        if logits is None:
            self.failure = f"the reference did not run ({why})"
            return
        self.logits, self.tokens, self.failure = logits, outcome.record["tokens"], None
        self.shape = accuracy.distribution_shape(self.logits)
        self.link()

    def load_truth(self, outcome: launch.ChildOutcome, work: Path) -> None:
        truth, why = child_logits(outcome, work)
        if truth is None:
            self.truth_failure = f"the float64 truth did not run ({why})"
            return
        self.truth, self.truth_failure = truth, None
        self.link()

    def link(self) -> None:
        """The reference's own distance from the truth, once both have run (the truth first, locally and on a cluster)."""
        if self.logits is not None and self.truth is not None and self.truth.shape == self.logits.shape:
            self.truth_distance = max_difference(self.logits, self.truth)


def child_logits(outcome: launch.ChildOutcome, work: Path) -> tuple[np.ndarray | None, str | None]:
    """The probe logits a child saved in WORK, or None and why there are none."""
    record = outcome.record
    if record is None or record["status"] != "ok" or not record.get("has_logits"):
        return None, (record or {}).get("reason") or outcome.failure or "it gave no logits"
    return np.load(work / "logits.npy"), None


def max_difference(a: np.ndarray, b: np.ndarray) -> float:
    """max |a - b| in float64: the distance of two sets of probe logits."""
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))


def make_row(info: RunnerInfo, outcome: launch.ChildOutcome, work: Path, reference: Reference) -> Row:
    row = Row(runner=info.id, label=info.label, group=info.group, peer=info.peer, quant=info.quant, status="failed")
    record = outcome.record
    if record is None:
        row.reason = outcome.failure
        return row
    if record["status"] != "ok":  # skipped, or failed by the runner's own verdict (runners.base.RowRefused)
        row.status, row.reason = record["status"], record["reason"]
        row.notes = list(record.get("notes", []))
        return row
    row.status = "ok"
    row.notes = list(record.get("notes", []))
    row.metrics = trial_metrics(record, outcome)
    row.samples = dict(record.get("samples") or {})
    compare_with_reference(row, record, work, reference)  # on the first trial's probe logits
    return row


def trial_metrics(record: dict, outcome: launch.ChildOutcome) -> dict:
    """One trial's metrics: the child's own, with the memory the parent saw and the child's whole life."""
    metrics = dict(record["metrics"])
    if outcome.gpu_present:
        if outcome.peak_gpu_bytes > 0:  # else NVML saw none of the child's processes: no figure, rather than 0 GiB
            metrics.update(peak_mem_gib=outcome.peak_gpu_bytes / GIB, mem_kind="gpu")
    else:
        metrics.update(peak_mem_gib=outcome.peak_rss_bytes / GIB, mem_kind="host")
    if outcome.peak_build_rss_bytes:
        metrics["build_peak_mem_gib"] = outcome.peak_build_rss_bytes / GIB
    metrics["child_s"] = outcome.seconds
    if outcome.other_cpu_share is not None:
        metrics["other_cpu_share"] = outcome.other_cpu_share  # a busy machine is named (memory.busy_note)
    return metrics


def compare_with_reference(row: Row, record: dict, work: Path, reference: Reference) -> None:
    """Sets the row's distance (max |logits - reference|), its accuracy figures (KL divergence from the reference's
    distributions, top-1 agreement) and how many greedy tokens agree with the reference."""
    logits = np.load(work / "logits.npy") if record.get("has_logits") else None
    if logits is None:
        row.notes.append("not compared: this engine exposes no logits")
    else:
        compare_with_truth(row, logits, reference)
        if reference.failure:
            row.notes.append(f"not compared: {reference.failure}")
        elif logits.shape != reference.logits.shape:
            row.notes.append(f"not compared: logits of shape {logits.shape}, the reference's are {reference.logits.shape}")
        else:
            row.distance = max_difference(logits, reference.logits)
            set_accuracy(row, reference.logits, logits)
    tokens = record.get("tokens")
    if tokens is not None and reference.tokens is not None:
        agree = next((i for i, (a, b) in enumerate(zip(tokens, reference.tokens)) if a != b), len(tokens))
        row.tokens_agree = agree  # type: ignore[attr-defined]  # leading greedy tokens equal to the reference's
        if agree < len(tokens):
            row.notes.append(f"greedy tokens follow the reference's for {agree} of {len(tokens)}")


def compare_with_truth(row: Row, logits: np.ndarray, reference: Reference) -> None:
    """Sets the row's truth_distance (max |logits - the float64 truth|) and truth_ratio (that over the reference's own:
    1 for the reference, near 1 for a row that rounds as transformers does, far above it for a wrong row, and far
    below it for every row when the reference itself is wrong)."""
    if reference.truth_failure:
        row.notes.append(f"not compared with the truth: {reference.truth_failure}")
        return
    if logits.shape != reference.truth.shape:
        row.notes.append(f"not compared with the truth: logits of shape {logits.shape}, the truth's are {reference.truth.shape}")
        return
    row.truth_distance = max_difference(logits, reference.truth)
    if reference.truth_distance is None:
        row.notes.append(f"no truth ratio: {reference.failure or 'the reference was not compared with the truth'}")
    elif reference.truth_distance > 0 and np.isfinite(row.truth_distance):
        row.truth_ratio = row.truth_distance / reference.truth_distance


def set_accuracy(row: Row, reference: np.ndarray, logits: np.ndarray) -> None:
    """The row's kl_mean, kl_p99 and top1_agree from one set of probe logits (harness/accuracy.py)."""
    figures = accuracy.accuracy(reference, logits)
    row.kl_mean, row.kl_p99, row.top1_agree = figures.kl_mean, figures.kl_p99, figures.top1_agree
    if figures.kl_mean is None:
        row.notes.append("KL divergence not computed: the row's probe logits are not all finite")
