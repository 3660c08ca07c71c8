"""The site's one context: every result file under the results directory, loaded once, grouped by model and by setup
(machine, dtype and profile: runs that differ in those are not the same measurement, so neither is newer than the
other and a history never mixes them)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from harness.registry import MODELS, ModelEntry, get_model
from harness.results import ResultFile, load_result, result_paths
from harness.validate import invalid_figures, is_number, valid_metrics
from linnet_core.errors import UserError



@dataclass(frozen=True)
class LoadedRun:
    path: Path  # the result file on disk, copied into the site for download
    result: ResultFile  # its parsed content

    @property
    def machine(self) -> str:
        """What the numbers were measured on: the GPU's name for a GPU run, the CPU's otherwise."""
        return machine_name(self.result)

    @property
    def on_gpu(self) -> bool:
        return self.result.protocol.get("device") == "cuda"

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
        """Setup -> its runs, oldest first; GPU setups before CPU ones (a GPU is what the bench is for), each kind
        ordered by its newest run, newest first. The page opens on the first."""
        groups: dict[str, list[LoadedRun]] = {}
        for run in self.runs:
            groups.setdefault(run.setup, []).append(run)
        ordered = sorted(groups.items(), key=lambda kv: kv[1][-1].result.created_at, reverse=True)
        ordered.sort(key=lambda kv: not kv[1][-1].on_gpu)  # stable: newest first within each kind
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


def load_context(results_dir: Path, warn: Callable[[str], None] = lambda message: None) -> SiteContext:
    """Reads every results/<model>/<run-id>.json once; a one-line error for a missing directory. A file that cannot
    be shown (not a result file, an unknown version, a model id that cannot name a file) is skipped with a warning
    naming it and why; invalid figures of a file that can are shown as not measured, with a warning."""
    results_dir = Path(results_dir)
    if not results_dir.is_dir():
        raise UserError(f"{results_dir}: no such results directory; run `linnet-bench run MODEL` first")
    runs = []
    for path in result_paths(results_dir):
        try:
            runs.append(LoadedRun(path, shown(path, load_result(path), warn)))
        except UserError as e:
            warn(f"skipped {e}")
    per_model: dict[str, list[LoadedRun]] = {}
    for run in sorted(runs, key=lambda r: r.result.created_at):
        per_model.setdefault(run.result.model, []).append(run)
    models = [ModelRuns(model, registry_entry(model), tuple(model_runs)) for model, model_runs in per_model.items()]
    order = list(MODELS)
    return SiteContext(
        tuple(sorted(models, key=lambda m: (order.index(m.entry.id) if m.entry else len(order), m.model)))
    )


def shown(path: Path, result: ResultFile, warn: Callable[[str], None]) -> ResultFile:
    """The result as the site shows it: no invalid figure (a NaN, an infinity, a zero speed, a string) left to chart
    or rank. (Its model id names files of the site: load_result has checked it is a plain id.)"""
    problems, rows = [], []
    for row in result.rows:
        if found := invalid_figures(row):
            problems += [f"{row.runner[:60]}: {p}" for p in found]
            distance = row.distance if is_number(row.distance) and row.distance >= 0 else None
            row = row.model_copy(update={"metrics": valid_metrics(row.metrics), "distance": distance})
        rows.append(row)
    if problems:
        more = f" and {len(problems) - 3} more" if len(problems) > 3 else ""
        warn(f"{path}: invalid figures shown as not measured: {'; '.join(problems[:3])}{more}")
    return result.model_copy(update={"rows": rows})


def registry_entry(model: str) -> ModelEntry | None:
    try:
        return get_model(model)
    except UserError:
        return None
