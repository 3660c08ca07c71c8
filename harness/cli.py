"""The `linnet-bench` command line: list models, run a benchmark (and, in their modules, render the site and check
for regressions). A UserError is printed as one line with exit status 1; anything else is a real traceback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from harness import check as checks
from harness.bench import BenchSettings, Display, run_bench
from harness.memory import nvml_handles
from harness.registry import MODELS, get_model
from harness.results import Row, load_result, write_result
from harness.workload import PROFILES, get_profile
from linnet_core.dtypes import NAMES as DTYPES
from linnet_core.errors import UserError, run_cli
from runners import RUNNERS, get_runner

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Linnet Bench: time every stack the same way.")
console = Console()


@app.command()
def models() -> None:
    """List the models the bench knows."""
    table = Table("id", "aliases", "parameters", "title")
    for m in MODELS.values():
        table.add_row(m.id, ", ".join(m.aliases), f"{m.parameters / 1e6:.1f}M", m.title)
    console.print(table)


@app.command()
def runners() -> None:
    """List the runners (rows) the bench knows."""
    table = Table("id", "label", "group", "replaces")
    for r in RUNNERS.values():
        table.add_row(r.id, r.label, r.group, r.peer or "")
    console.print(table)


@app.command()
def run(
    model: str = typer.Argument(..., help="model id or alias (see `linnet-bench models`), or a local checkpoint directory"),
    runner: Optional[list[str]] = typer.Option(None, "--runner", "-r", help="a runner id; repeat for several (default: all)"),
    profile: Optional[str] = typer.Option(None, help=f"one of {', '.join(PROFILES)} (default: 'default' on a GPU or for a tiny model, else 'cpu')"),
    weights: Optional[Path] = typer.Option(None, help="a local Hugging Face checkpoint directory (default: synthetic weights)"),
    dtype: Optional[str] = typer.Option(None, help="f32, f16 or bf16 (default: bf16 on a GPU, f32 on a CPU)"),
    device: Optional[str] = typer.Option(None, help="cpu or cuda (default: cuda when NVML sees a GPU)"),
    out: Path = typer.Option(Path("results"), help="result files go to OUT/<model>/<run-id>.json"),
    timeout: Optional[float] = typer.Option(None, help="seconds before a runner's child is killed (default: the profile's)"),
    seed: int = typer.Option(0, help="seed of the prompt, the probe and synthetic weights"),
) -> None:
    """Run every requested row on MODEL, each in its own process, and write one result file."""
    entry = get_model(model)
    device = device or ("cuda" if nvml_handles() else "cpu")
    if device not in ("cpu", "cuda"):
        raise UserError(f"unknown device {device!r}; use cpu or cuda")
    dtype = dtype or ("bf16" if device == "cuda" else "f32")
    if dtype not in DTYPES:
        raise UserError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}")
    chosen = tuple(get_runner(r) for r in runner) if runner else tuple(RUNNERS.values())
    profile_name = profile or ("default" if device == "cuda" or entry.is_tiny else "cpu")
    settings = BenchSettings(entry, chosen, get_profile(profile_name), dtype, device, weights, out, seed, timeout)
    try:
        path = run_bench(settings, RichDisplay(chosen))
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/]: the finished rows are kept in the result file (complete: false)")
        raise typer.Exit(130)
    console.print(summary_table(load_result(path).rows))
    console.print(f"result file: {path}")


@app.command()
def check(
    candidate: Path = typer.Argument(..., help="a result file, or a directory: the latest run of each model"),
    baseline: Path = typer.Option(..., "--baseline", "-b", help="the result file or directory to compare with"),
    threshold_speed: Optional[float] = typer.Option(None, help="relative change of a speed or time that counts (default 0.05)"),
    threshold_memory: Optional[float] = typer.Option(None, help="relative change of peak memory that counts (default 0.20)"),
    ratios: bool = typer.Option(False, "--ratios", help="compare ratios to the in-run reference even on one machine"),
    gate: bool = typer.Option(False, "--gate", help="the CI gate: --ratios and its wider thresholds (harness/check.py)"),
    json_path: Optional[Path] = typer.Option(None, "--json", help="also write the report as JSON here"),
) -> None:
    """Compare CANDIDATE with a baseline row by row; exit 1 on a regression beyond the thresholds and the noise."""
    defaults = checks.GATE_THRESHOLDS if gate else checks.Thresholds()
    thresholds = checks.Thresholds(
        speed=defaults.speed if threshold_speed is None else threshold_speed,
        memory=defaults.memory if threshold_memory is None else threshold_memory,
        min_seconds=defaults.min_seconds,
    )
    if thresholds.speed < 0 or thresholds.memory < 0:
        raise UserError("thresholds are relative changes and cannot be negative, e.g. --threshold-speed 0.05")
    report = checks.check(candidate, baseline, thresholds, ratios=ratios or gate)
    for comparison in report.comparisons:
        console.print(checks.header(comparison), highlight=False, soft_wrap=True)
        if comparison.rows:
            console.print(checks.table(comparison))
        for line in checks.finding_lines(comparison):
            console.print(line, highlight=False, soft_wrap=True)
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(report.to_json(), indent=2) + "\n")
    console.print(checks.verdict(report), highlight=False, soft_wrap=True)
    if not report.passed:
        raise typer.Exit(1)


@app.command("best-of")
def best_of(
    runs: list[Path] = typer.Argument(..., help="result files of repeats of one suite"),
    out: Path = typer.Option(..., help="where to write the combined result file"),
) -> None:
    """Combine repeats of one suite: per row and metric the best repeat, for correctness the worst."""
    write_result(checks.best_of([load_result(p) for p in runs]), out)
    console.print(f"the better of {len(runs)} run(s): {out}")


@app.command("site")
def site_command(
    results: Path = typer.Option(Path("results"), help="the result files: RESULTS/<model>/<run-id>.json"),
    out: Path = typer.Option(Path("site"), help="where the website goes: OUT/index.html, OUT/models/<model>.html"),
) -> None:
    """Render the result files as a static website that works offline (open OUT/index.html)."""
    from harness.site import build_site

    pages = build_site(results, out)
    console.print(f"{len(pages)} page(s) written; open {pages[0]}")


class RichDisplay(Display):
    """A spinner with the child's current phase while a runner works, then one line per finished row."""

    def __init__(self, runners):
        self.runners = runners
        self.bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console, transient=True)
        self.task = None

    def begin(self, result, path):
        console.print(
            f"[bold]{result.model}[/] · {len(self.runners)} runner(s) · profile {result.protocol['profile']} · "
            f"{result.protocol['dtype']} on {result.protocol['device']} · weights: {result.weights} · writing {path}"
        )

    def start(self, runner):
        if self.task is None:
            self.bar.start()
        else:
            self.bar.remove_task(self.task)
        self.task = self.bar.add_task(f"{runner.id}: starting")

    def progress(self, runner, text):
        self.bar.update(self.task, description=f"{runner.id}: {text}")

    def finish(self, row):
        mark = {"ok": "[green]ok[/]", "skipped": "[yellow]skipped[/]", "failed": "[red]failed[/]"}[row.status]
        m = row.metrics
        if row.status == "ok" and "serving_tok_s" in m:
            detail = f"{m['serving_tok_s']:.1f} tok/s serving, TTFT {m['serving_ttft_ms']:.1f} ms"
        elif row.status == "ok" and "decode_tok_s" in m:
            detail = f"{m['decode_tok_s']:.1f} tok/s"
        else:
            detail = row.reason or ""
        self.bar.console.print(f"{mark} {row.runner}: {detail.splitlines()[0][:160] if detail else ''}")


def fmt(value, unit: str, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}g} {unit}"


def summary_table(rows: list[Row]) -> Table:
    table = Table("runner", "status", "TTFT", "decode", "serving", "load", "first call", "peak mem", "distance")
    for r in rows:
        m = r.metrics
        table.add_row(
            r.runner,
            r.status,
            fmt(m.get("ttft_ms"), "ms"),
            fmt(m.get("decode_tok_s"), "tok/s"),
            fmt(m.get("serving_tok_s"), "tok/s"),
            fmt(m.get("load_s"), "s"),
            fmt(m.get("first_call_s"), "s"),
            fmt(m.get("peak_mem_gib"), f"GiB {m.get('mem_kind', '')}".strip()),
            "–" if r.distance is None else f"{r.distance:.3g}",
        )
    return table


def main() -> None:
    run_cli(app, console)


if __name__ == "__main__":
    main()
