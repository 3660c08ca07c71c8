"""A whole run: resolve the checkpoint, build the workload, run the reference and every runner in its own child,
turn each outcome into a row, and keep the result file on disk up to date after every row."""

from __future__ import annotations

import dataclasses
import datetime as dt
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness import accuracy, environment, launch
from harness.registry import ModelEntry, checkpoint_for
from harness.results import SCHEMA_VERSION, ResultFile, Row, write_result
from harness.trials import combine_trials
from harness.validate import invalid_figures
from harness.workload import PROBE_PREFILL, PROBE_TOKENS, Profile, probe_for, probe_source, prompt_ids
from linnet_core.checkpoint import check_seed, synthetic_recipe
from runners import REFERENCE, RunnerInfo
from runners.base import RunSpec

GIB = 2**30


@dataclass(frozen=True)
class BenchSettings:
    model: ModelEntry  # what to run
    runners: tuple[RunnerInfo, ...]  # which rows, in order
    profile: Profile  # prompt, new tokens, runs, timeout
    dtype: str  # "f32" | "f16" | "bf16"
    device: str  # "cpu" | "cuda"
    weights: Path | None  # a local HF checkpoint, or None for synthetic weights
    out_dir: Path  # result files go to out_dir/<model>/<run-id>.json
    seed: int = 0  # prompt, probe and synthetic weights
    timeout_s: float | None = None  # per runner; the profile's when None
    trials: int | None = None  # K: fresh processes per row, round robin; the profile's defaults when None
    peer_duet_s: float = 0.0  # > 0: after the trials, time each Linnet row in turns with its peer (harness/duet.py)

    def __post_init__(self) -> None:
        check_seed(self.seed)  # before any file is written: a seed the generators refuse fails the run's first row


class Display:
    """What a run tells its user as it goes; the CLI shows it with rich, tests ignore it."""

    def begin(self, result: ResultFile, path: Path) -> None: ...
    def start(self, runner: RunnerInfo) -> None: ...
    def progress(self, runner: RunnerInfo, text: str) -> None: ...
    def finish(self, row: Row) -> None: ...


def run_id_now() -> tuple[str, str]:
    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    return now.isoformat(), now.strftime("%Y%m%dT%H%M%SZ")


def run_bench(settings: BenchSettings, display: Display = Display()) -> Path:
    """Runs every row; returns the result file's path. On Ctrl-C the rows so far are kept (complete: false)."""
    ckpt, weights = checkpoint_for(settings.model, settings.weights, settings.seed)
    created_at, run_id = run_id_now()
    path = settings.out_dir / settings.model.id / f"{run_id}.json"
    result = new_result(settings, weights, environment.machine(), created_at, run_id)
    write_result(result, path)
    display.begin(result, path)
    scratch = Path(tempfile.mkdtemp(prefix=f"linnet-bench-{run_id}-"))
    base_spec = spec_fields(settings, ckpt)
    try:
        run_trials(settings, result, path, base_spec, scratch, display)
        if settings.peer_duet_s > 0:
            run_peer_duets(settings, result, path, base_spec, scratch, display)
        result.complete = True
    except KeyboardInterrupt:
        result.interrupted = True  # type: ignore[attr-defined]  # an extra field: the page says the run was cut short
        raise
    finally:
        write_result(result, path)
        shutil.rmtree(scratch, ignore_errors=True)
    return path


def new_result(settings: BenchSettings, weights: str, machine: dict, created_at: str, run_id: str) -> ResultFile:
    """An empty result file (complete: false) for a run of these settings on this machine."""
    profile = settings.profile
    serving = any(r.kind == "serving" for r in settings.runners)
    return ResultFile(
        schema_version=SCHEMA_VERSION,
        model=settings.model.id,
        run_id=run_id,
        created_at=created_at,
        machine=machine,
        workload={
            "prompt_tokens": profile.prompt_tokens,
            "new_tokens": profile.new_tokens,
            "batch": 1,
            "warmups": profile.warmups,
            "runs": profile.runs,
            "seed": settings.seed,
            "max_positions": profile.max_positions,
            "probe_tokens": PROBE_TOKENS,
            "probe": probe_source(has_tokenizer(settings)),
            "probe_prefill": PROBE_PREFILL,
            # the many-requests workload, recorded when a serving row runs
            **({"serving": dataclasses.asdict(profile.serving)} if serving else {}),
        },
        protocol={"profile": profile.name, "dtype": settings.dtype, "device": settings.device,
                  "timeout_s": settings.timeout_s or profile.timeout_s,
                  # K: each row's trials (fresh processes), round robin; serving rows may run fewer
                  "trials": trials_for("single", settings),
                  **({"peer_duet_s": settings.peer_duet_s} if settings.peer_duet_s > 0 else {}),
                  **({"serving_trials": trials_for("serving", settings)} if serving else {})},  # fmt: skip
        weights=weights,
        weights_recipe=synthetic_recipe(settings.model.config) if weights == "synthetic" else None,
        architecture=architecture(settings.model.config),
        complete=False,
    )


def has_tokenizer(settings: BenchSettings) -> bool:
    """Whether the run's checkpoint has a tokenizer.json (every synthetic one is written with one), as spec_fields
    will find it; known before the checkpoint is made, so that a cluster's driver can say it too."""
    return settings.weights is None or (Path(settings.weights) / "tokenizer.json").is_file()


def architecture(config) -> dict:
    """What the model is, as `check` and the page need it without the registry (a local checkpoint is not in it):
    its depth sets the distance bounds of 32- and 16-bit rows."""
    return {"model_type": config.model_type, "layers": config.num_hidden_layers, "hidden_size": config.hidden_size,
            "parameters": config.num_parameters}  # fmt: skip


def spec_fields(settings: BenchSettings, ckpt: Path) -> dict:
    """What every child's spec of this run shares: the model, checkpoint, dtype, device, prompt and probe."""
    entry, profile = settings.model, settings.profile
    probe = probe_for(ckpt, entry.first_special_token, settings.seed)
    return dict(
        model=entry.id,
        checkpoint=str(ckpt),
        dtype=settings.dtype,
        device=settings.device,
        prompt=prompt_ids(profile.prompt_tokens, entry.first_special_token, settings.seed),
        new_tokens=profile.new_tokens,
        warmups=profile.warmups,
        runs=profile.runs,
        probe=probe,
        probe_prefill=PROBE_PREFILL,
        max_positions=profile.max_positions,
    )


def trial_spec(settings: BenchSettings, info: RunnerInfo, base_spec: dict, work: Path, mode="measure") -> RunSpec:
    """One trial's spec: the run's shared fields, the runner, its work dir, and the serving workload if it serves."""
    serving = serving_fields(info, settings.profile, settings.model, settings.seed)
    return RunSpec(runner=info.id, module=info.module, work_dir=str(work), mode=mode, **base_spec, **serving)


def timeout_for(settings: BenchSettings, info: RunnerInfo) -> float:
    """Seconds before a trial's child is killed: --timeout, else its profile's (serving rows have their own)."""
    profile = settings.profile
    return settings.timeout_s or (profile.serving.timeout_s if info.kind == "serving" else profile.timeout_s)


def trials_for(kind: str, settings: BenchSettings) -> int:
    """How many trials (fresh processes) a row of this kind gets: --trials, else its profile's default."""
    if settings.trials is not None:
        return settings.trials
    return settings.profile.serving_trials if kind == "serving" else settings.profile.trials


def run_trials(settings: BenchSettings, result: ResultFile, path: Path, base_spec: dict, scratch: Path,
               display: Display) -> None:  # fmt: skip
    """Round robin over the rows, trial by trial (A B C A B C ...), so that a slow spell of the machine hits every row
    alike. A row's first trial decides a skip; a failed trial ends the row (failed, saying which trial); the result
    file is rewritten after every trial."""
    reference = Reference()
    order = sorted(settings.runners, key=lambda r: r.id != REFERENCE)  # the reference first
    if all(r.id != REFERENCE for r in order):
        reference.load(*score_reference(settings, base_spec, scratch, display))
    planned = {info.id: trials_for(info.kind, settings) for info in order}
    rows: dict[str, RowTrials] = {}
    for k in range(1, max(planned.values(), default=0) + 1):
        for info in order:
            done = rows.get(info.id)
            if k > planned[info.id] or (done is not None and done.row.status != "ok"):
                continue
            display.start(info)
            # the row's distance and accuracy are its first trial's: later trials skip the probe (0.5B: a minute each)
            spec = trial_spec(settings, info, base_spec, scratch / info.id / f"trial-{k}", "measure" if k == 1 else "time")
            timeout = timeout_for(settings, info)
            label = f"trial {k}/{planned[info.id]} · " if planned[info.id] > 1 else ""
            outcome = launch.run_child(spec, timeout, lambda t, info=info: display.progress(info, label + t))
            if done is None:
                if info.id == REFERENCE:
                    reference.load(outcome, spec.work)
                result.reference_distributions = reference.shape
                done = rows[info.id] = RowTrials(make_row(info, outcome, spec.work, reference))
                result.rows.append(done.row)
            else:
                done.add(outcome, k, planned[info.id])
            shutil.rmtree(spec.work, ignore_errors=True)  # its exports and logits are read: free the disk (0.5B: GiBs)
            write_result(result, path)
            display.finish(done.row)  # after every trial: the row as summarised so far


# Process pairs of a peer duet: two, so that one process's luck (where its memory landed) cannot make the figure.
PEER_DUET_PAIRS = 2


def run_peer_duets(settings: BenchSettings, result: ResultFile, path: Path, base_spec: dict, scratch: Path,
                   display: Display) -> None:  # fmt: skip
    """Each measured single-request row whose peer was measured too is timed in turns with it (harness/duet.py); the
    page's comparison of the two then rests on the run pairs. A duet that fails leaves a note, not a failed row."""
    from harness.duet import DuetFailed, Turns, peer_duet
    from runners import RUNNERS

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


def serving_fields(info: RunnerInfo, profile: Profile, entry: ModelEntry, seed: int) -> dict:
    """A serving runner's spec also carries the serving workload and its prompts."""
    if info.kind != "serving":
        return {}
    workload = profile.serving
    return {"kind": "serving", "serving": dataclasses.asdict(workload),
            "serving_prompts": workload.prompts(entry.first_special_token, seed)}  # fmt: skip


class Reference:
    """The reference row's probe logits and greedy tokens, once it has run."""

    logits: np.ndarray | None = None
    tokens: list[int] | None = None
    shape: dict | None = None  # how peaked its distributions are (accuracy.distribution_shape), for the result file
    failure: str | None = "the reference has not run"

    def load(self, outcome: launch.ChildOutcome, work: Path) -> None:
        record = outcome.record
        if record is None or record["status"] != "ok":
            self.failure = f"the reference did not run ({(record or {}).get('reason') or outcome.failure})"
            return
        self.logits = np.load(work / "logits.npy")
        self.tokens = record["tokens"]
        self.shape = accuracy.distribution_shape(self.logits)
        self.failure = None


def score_reference(settings, base_spec, scratch: Path, display: Display):
    """Runs the reference untimed for its logits and tokens when its row was not asked for."""
    from runners import get_runner

    info = get_runner(REFERENCE)
    display.start(info)
    spec = trial_spec(settings, info, base_spec, scratch / "reference", mode="score")
    outcome = launch.run_child(spec, timeout_for(settings, info), lambda t: display.progress(info, t))
    return outcome, spec.work


def make_row(info: RunnerInfo, outcome: launch.ChildOutcome, work: Path, reference: Reference) -> Row:
    row = Row(runner=info.id, label=info.label, group=info.group, peer=info.peer, quant=info.quant, status="failed")
    record = outcome.record
    if record is None:
        row.reason = outcome.failure
        return row
    if record["status"] == "skipped":
        row.status, row.reason = "skipped", record["reason"]
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
        metrics.update(peak_mem_gib=outcome.peak_gpu_bytes / GIB, mem_kind="gpu")
    else:
        metrics.update(peak_mem_gib=outcome.peak_rss_bytes / GIB, mem_kind="host")
    metrics["child_s"] = outcome.seconds
    if outcome.other_cpu_share is not None:
        metrics["other_cpu_share"] = outcome.other_cpu_share  # a busy machine is named (memory.busy_note)
    return metrics


def compare_with_reference(row: Row, record: dict, work: Path, reference: Reference) -> None:
    """Sets the row's distance (max |logits - reference|), its accuracy figures (KL divergence from the reference's
    distributions, top-1 agreement) and how many greedy tokens agree with the reference."""
    if not record.get("has_logits"):
        row.notes.append("not compared: this engine exposes no logits")
    elif reference.failure:
        row.notes.append(f"not compared: {reference.failure}")
        return
    else:
        logits = np.load(work / "logits.npy")
        if logits.shape != reference.logits.shape:
            row.notes.append(f"not compared: logits of shape {logits.shape}, the reference's are {reference.logits.shape}")
        else:
            row.distance = float(np.max(np.abs(logits.astype(np.float64) - reference.logits)))
            set_accuracy(row, reference.logits, logits)
    tokens = record.get("tokens")
    if tokens is not None and reference.tokens is not None:
        agree = next((i for i, (a, b) in enumerate(zip(tokens, reference.tokens)) if a != b), len(tokens))
        row.tokens_agree = agree  # type: ignore[attr-defined]  # leading greedy tokens equal to the reference's
        if agree < len(tokens):
            row.notes.append(f"greedy tokens follow the reference's for {agree} of {len(tokens)}")


def set_accuracy(row: Row, reference: np.ndarray, logits: np.ndarray) -> None:
    """The row's kl_mean, kl_p99 and top1_agree from one set of probe logits (harness/accuracy.py)."""
    figures = accuracy.accuracy(reference, logits)
    row.kl_mean, row.kl_p99, row.top1_agree = figures.kl_mean, figures.kl_p99, figures.top1_agree
    if figures.kl_mean is None:
        row.notes.append("KL divergence not computed: the row's probe logits are not all finite")
