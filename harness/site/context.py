"""The site's one context: every result file under the results directory, loaded once, grouped by model and by setup
(machine, dtype and profile: runs that differ in those are not the same measurement, so neither is newer than the
other and a history never mixes them)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from harness.registry import MODELS, ModelEntry, get_model
from harness.results import ResultFile, load_result, result_paths
from linnet_core.errors import UserError

PLAIN_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")  # a model id that is safe as a file name


@dataclass(frozen=True)
class LoadedRun:
    path: Path  # the result file on disk, copied into the site for download
    result: ResultFile  # its parsed content

    @property
    def machine(self) -> str:
        """What the numbers were measured on: the GPU's name for a GPU run, the CPU's otherwise."""
        return machine_name(self.result)

    @property
    def setup(self) -> str:
        """The machine, dtype and profile: "AMD EPYC, 2 cores · bf16 · cpu profile"."""
        p = self.result.protocol
        return f"{self.machine} · {p.get('dtype', '?')} · {p.get('profile', '?')} profile"


@dataclass(frozen=True)
class ModelRuns:
    model: str  # the model id of the result files
    entry: ModelEntry | None  # the registry's facts; None for a model this bench no longer knows
    runs: tuple[LoadedRun, ...]  # oldest first

    def by_setup(self) -> dict[str, tuple[LoadedRun, ...]]:
        """Setup -> its runs, oldest first; setups ordered by their newest run, newest first."""
        groups: dict[str, list[LoadedRun]] = {}
        for run in self.runs:
            groups.setdefault(run.setup, []).append(run)
        ordered = sorted(groups.items(), key=lambda kv: kv[1][-1].result.created_at, reverse=True)
        return {setup: tuple(runs) for setup, runs in ordered}


@dataclass(frozen=True)
class SiteContext:
    models: tuple[ModelRuns, ...]  # every model with results, in registry order, then unknown ones by id


def machine_name(result: ResultFile) -> str:
    m = result.machine
    if result.protocol.get("device") == "cuda" and m.get("gpu"):
        return str(m["gpu"])
    cores = f", {m['cpu_cores']} cores" if m.get("cpu_cores") else ""
    return f"{m.get('cpu') or 'unknown CPU'}{cores}"


def load_context(results_dir: Path) -> SiteContext:
    """Reads every results/<model>/<run-id>.json once; a one-line error for a missing directory or a bad file."""
    results_dir = Path(results_dir)
    if not results_dir.is_dir():
        raise UserError(f"{results_dir}: no such results directory; run `linnet-bench run MODEL` first")
    runs = sorted((LoadedRun(p, load_result(p)) for p in result_paths(results_dir)), key=lambda r: r.result.created_at)
    per_model: dict[str, list[LoadedRun]] = {}
    for run in runs:
        if not PLAIN_NAME.fullmatch(run.result.model):  # it names files of the site
            raise UserError(f"{run.path}: model {run.result.model!r} is not a plain name (letters, digits, . _ -)")
        per_model.setdefault(run.result.model, []).append(run)
    models = [ModelRuns(model, registry_entry(model), tuple(model_runs)) for model, model_runs in per_model.items()]
    order = list(MODELS)
    return SiteContext(
        tuple(sorted(models, key=lambda m: (order.index(m.entry.id) if m.entry else len(order), m.model)))
    )


def registry_entry(model: str) -> ModelEntry | None:
    try:
        return get_model(model)
    except UserError:
        return None
