"""A run's settings (BenchSettings) and what follows from them alone: the empty result file, the spec every child of
the run shares and each trial's, its timeout and how many trials a row gets. The bench (harness/bench.py), the
duets (harness/duet.py) and a cluster's driver (harness/cluster.py) build their children from here."""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from harness.registry import ModelEntry
from harness.results import SCHEMA_VERSION, ResultFile
from harness.workload import PROBE_PREFILL, PROBE_TOKENS, Profile, probe_for, probe_source, prompt_ids
from linnet_core.checkpoint import check_seed, synthetic_recipe
from runners import RunnerInfo
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
    budget_s: float | None = None  # the whole run's seconds (`run --budget`): no trial starts once they are spent
    runs: int | None = None  # timed runs per trial (`run --runs`); the profile's when None
    extra: frozenset[str] = frozenset()  # rows whose trials come after every other row's (`run --extra-runner`)

    @property
    def timed_runs(self) -> int:
        return self.runs or self.profile.runs

    def __post_init__(self) -> None:
        check_seed(self.seed)  # before any file is written: a seed the generators refuse fails the run's first row


def run_id_now() -> tuple[str, str]:
    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    return now.isoformat(), now.strftime("%Y%m%dT%H%M%SZ")


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
            "runs": settings.timed_runs,
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
                  **({"budget_s": settings.budget_s} if settings.budget_s is not None else {}),
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
        runs=settings.timed_runs,
        probe=probe,
        probe_prefill=PROBE_PREFILL,
        max_positions=profile.max_positions,
    )


def trial_spec(settings: BenchSettings, info: RunnerInfo, base_spec: dict, work: Path, mode="measure") -> RunSpec:
    """One trial's spec: the run's shared fields, the runner, its work dir, and the serving workload if it serves."""
    serving = serving_fields(info, settings.profile, settings.model, settings.seed)
    return RunSpec(runner=info.id, module=info.module, work_dir=str(work), mode=mode, **base_spec, **serving)


def serving_fields(info: RunnerInfo, profile: Profile, entry: ModelEntry, seed: int) -> dict:
    """A serving runner's spec also carries the serving workload and its prompts."""
    if info.kind != "serving":
        return {}
    workload = profile.serving
    return {"kind": "serving", "serving": dataclasses.asdict(workload),
            "serving_prompts": workload.prompts(entry.first_special_token, seed)}  # fmt: skip


def timeout_for(settings: BenchSettings, info: RunnerInfo) -> float:
    """Seconds before a trial's child is killed: --timeout, else its profile's (serving rows have their own)."""
    profile = settings.profile
    return settings.timeout_s or (profile.serving.timeout_s if info.kind == "serving" else profile.timeout_s)


def trials_for(kind: str, settings: BenchSettings) -> int:
    """How many trials (fresh processes) a row of this kind gets: --trials, else its profile's default."""
    if settings.trials is not None:
        return settings.trials
    return settings.profile.serving_trials if kind == "serving" else settings.profile.trials
