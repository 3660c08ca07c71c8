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
from harness.workload import PROBE_PREFILL, Profile, probe_ids, prompt_ids
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
    entry, profile = settings.model, settings.profile
    created_at, run_id = run_id_now()
    path = settings.out_dir / entry.id / f"{run_id}.json"
    result = ResultFile(
        schema_version=SCHEMA_VERSION,
        model=entry.id,
        run_id=run_id,
        created_at=created_at,
        machine=environment.machine(),
        workload={
            "prompt_tokens": profile.prompt_tokens,
            "new_tokens": profile.new_tokens,
            "batch": 1,
            "warmups": profile.warmups,
            "runs": profile.runs,
            "seed": settings.seed,
            "max_positions": profile.max_positions,
            "probe_tokens": len(probe_ids(entry.first_special_token, settings.seed)),
            "probe_prefill": PROBE_PREFILL,
            # the many-requests workload, recorded when a serving row runs
            **({"serving": dataclasses.asdict(profile.serving)} if any(r.kind == "serving" for r in settings.runners) else {}),
        },
        protocol={"profile": profile.name, "dtype": settings.dtype, "device": settings.device,
                  "timeout_s": settings.timeout_s or profile.timeout_s},  # fmt: skip
        weights=weights,
        complete=False,
    )
    write_result(result, path)
    display.begin(result, path)
    scratch = Path(tempfile.mkdtemp(prefix=f"linnet-bench-{run_id}-"))
    base_spec = dict(
        model=entry.id,
        checkpoint=str(ckpt),
        dtype=settings.dtype,
        device=settings.device,
        prompt=prompt_ids(profile.prompt_tokens, entry.first_special_token, settings.seed),
        new_tokens=profile.new_tokens,
        warmups=profile.warmups,
        runs=profile.runs,
        probe=probe_ids(entry.first_special_token, settings.seed),
        probe_prefill=PROBE_PREFILL,
        max_positions=profile.max_positions,
    )
    try:
        reference = Reference()
        order = sorted(settings.runners, key=lambda r: r.id != REFERENCE)  # the reference first
        if all(r.id != REFERENCE for r in order):
            reference.load(*score_reference(settings, base_spec, scratch, display))
        for info in order:
            display.start(info)
            spec = RunSpec(runner=info.id, module=info.module, work_dir=str(scratch / info.id), **base_spec,
                           **serving_fields(info, profile, entry, settings.seed))  # fmt: skip
            timeout = settings.timeout_s or (profile.serving.timeout_s if info.kind == "serving" else profile.timeout_s)
            outcome = launch.run_child(spec, timeout, lambda t: display.progress(info, t))
            if info.id == REFERENCE:
                reference.load(outcome, spec.work)
            if reference.logits is not None and result.reference_distributions is None:
                result.reference_distributions = accuracy.distribution_shape(reference.logits)
            row = make_row(info, outcome, spec.work, reference)
            result.rows.append(row)
            write_result(result, path)
            display.finish(row)
        result.complete = True
    except KeyboardInterrupt:
        result.interrupted = True  # type: ignore[attr-defined]  # an extra field: the page says the run was cut short
        raise
    finally:
        write_result(result, path)
        shutil.rmtree(scratch, ignore_errors=True)
    return path


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
    failure: str | None = "the reference has not run"

    def load(self, outcome: launch.ChildOutcome, work: Path) -> None:
        record = outcome.record
        if record is None or record["status"] != "ok":
            self.failure = f"the reference did not run ({(record or {}).get('reason') or outcome.failure})"
            return
        self.logits = np.load(work / "logits.npy")
        self.tokens = record["tokens"]
        self.failure = None


def score_reference(settings, base_spec, scratch: Path, display: Display):
    """Runs the reference untimed for its logits and tokens when its row was not asked for."""
    from runners import get_runner

    info = get_runner(REFERENCE)
    display.start(info)
    spec = RunSpec(runner=REFERENCE, module=info.module, work_dir=str(scratch / "reference"), mode="score", **base_spec)
    outcome = launch.run_child(spec, settings.timeout_s or settings.profile.timeout_s, lambda t: display.progress(info, t))
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
    metrics = dict(record["metrics"])
    if outcome.gpu_present:
        metrics.update(peak_mem_gib=outcome.peak_gpu_bytes / GIB, mem_kind="gpu")
    else:
        metrics.update(peak_mem_gib=outcome.peak_rss_bytes / GIB, mem_kind="host")
    metrics["child_s"] = outcome.seconds
    row.metrics = metrics
    compare_with_reference(row, record, work, reference)
    return row


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
