"""The `linnet-bench` command line: list models, run a benchmark (and, in their modules, render the site and check
for regressions). A UserError is printed as one line with exit status 1; anything else is a real traceback."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Optional

import typer
from rich import box
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from harness import check as checks
from harness import check_report
from harness import cluster as clusters
from harness import stats
from harness.bench import BenchSettings, Display, run_bench
from harness.bounds import run_dtype, truth_ratio_judged
from harness.memory import busy_note, nvml_handles
from harness.metrics import METRICS
from harness.registry import MODELS, get_model
from harness.results import Row, load_result, write_result
from harness.validate import printable
from harness.workload import PROFILES, get_profile
from linnet_core import devices, dtypes
from linnet_core.checkpoint import check_seed
from linnet_core.devices import DEVICES
from linnet_core.errors import UserError, literal, run_cli
from runners import RUNNERS, get_runner, with_extras, with_peers

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
    model: list[str] = typer.Argument(..., help="model ids or aliases (see `linnet-bench models`) or local checkpoint directories; several run in turn, or at once on a cluster"),
    runner: Optional[list[str]] = typer.Option(None, "--runner", "-r", help="a runner id; repeat for several (default: all)"),
    extra_runner: Optional[list[str]] = typer.Option(None, "--extra-runner", help="a row whose trials come after every other row's, in what --budget leaves of the run; repeat for several"),
    profile: Optional[str] = typer.Option(None, help=f"one of {', '.join(PROFILES)} (default: 'default' on a GPU or for a tiny model, else 'cpu')"),
    weights: Optional[Path] = typer.Option(None, help="a local Hugging Face checkpoint directory (default: synthetic weights)"),
    dtype: Optional[list[str]] = typer.Option(None, help="f32, f16 or bf16; repeat for several (default: bf16 on a GPU, f32 on a CPU)"),
    device: Optional[list[str]] = typer.Option(None, help="cpu or cuda; repeat for several (default: cuda when there is a GPU)"),
    out: Path = typer.Option(Path("results"), help="result files go to OUT/<model>/<run-id>.json"),
    timeout: Optional[float] = typer.Option(None, help="seconds before a runner's child is killed (default: the profile's)"),
    seed: int = typer.Option(0, help="seed of the prompt, the probe and synthetic weights"),
    trials: Optional[int] = typer.Option(None, min=1, max=100, help="fresh processes per row, round robin over the rows (default: the profile's; default and cpu: 3, serving rows 1)"),
    peer_duets: float = typer.Option(0.0, "--peer-duets", min=0, max=600, help="after the trials, time each Linnet row in turns with the stack it replaces for this many seconds per process pair (2 pairs); the page's comparison then rests on those run pairs (0: off)"),
    runs: Optional[int] = typer.Option(None, "--runs", min=1, max=1000, help="timed runs per trial of a single-request row (default: the profile's)"),
    peer: Optional[list[str]] = typer.Option(None, "--peer", help="RUNNER=PEER: compare this Linnet row with PEER instead of the stack the registry names (in the table, and in turns with --peer-duets); repeat for several"),
    budget: Optional[float] = typer.Option(None, help="seconds each run (a model on a device in a dtype) may take: no trial starts once they are spent and a running child is cut at them; every row gets its first trial before any its second (a short GPU window: scripts/gpu-suite.sh)"),
    cluster: Optional[str] = typer.Option(None, help="run the rows as tasks on the Ray cluster at this address (HEAD:6379), or `local` to start one here (needs the `cluster` extra)"),
    accelerator_type: Optional[list[str]] = typer.Option(None, "--accelerator-type", help="with --cluster: run every row on each of these kinds of GPU (Ray's accelerator_type:NAME, e.g. H100); repeat"),
) -> None:
    """Run every requested row on each MODEL, each trial in its own process, and write one result file per model
    (per model and machine on a cluster)."""
    if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
        raise UserError(f"--timeout {timeout}: give a number of seconds above 0, e.g. --timeout 600")
    if budget is not None and not (math.isfinite(budget) and 0 < budget <= 7 * 24 * 3600):
        raise UserError(f"--budget {budget}: give the run's seconds, above 0 and at most a week, e.g. --budget 400")
    if budget is not None and cluster is not None:
        raise UserError("--budget times a run here, not on a cluster: leave out one of --budget and --cluster")
    check_seed(seed)
    entries = [get_model(m) for m in model]
    for d in device or ():
        devices.check(d)
    for d in dtype or ():
        dtypes.check(d)
    chosen = tuple(dict.fromkeys(get_runner(r) for r in runner)) if runner else tuple(RUNNERS.values())  # one row each
    chosen = with_peers(with_extras(chosen, extra_runner or (), named=bool(runner)), peer or ())
    if profile is not None:
        get_profile(profile)
    if peer_duets and cluster is not None:
        raise UserError("--peer-duets runs here, not on a cluster: leave out one of --peer-duets and --cluster")
    if accelerator_type and cluster is None:
        raise UserError("--accelerator-type picks nodes of a Ray cluster; give --cluster too")

    def matrix(has_gpu) -> list[BenchSettings]:
        """Each model x device x dtype, with the profile its device and model call for."""
        matrix_runs = []
        for entry in entries:
            for dev in device or ["cuda" if has_gpu() else "cpu"]:
                for dt in dtype or [DEVICES[dev].default_dtype]:
                    name = profile or ("default" if DEVICES[dev].gpu or entry.is_tiny else "cpu")
                    matrix_runs.append(BenchSettings(entry, chosen, get_profile(name), dt, dev, weights, out, seed, timeout, trials,
                                              peer_duets, budget, runs, frozenset(extra_runner or ())))  # fmt: skip
        return matrix_runs

    try:
        if cluster is None:
            for settings in matrix(lambda: bool(nvml_handles())):
                path = run_bench(settings, RichDisplay(chosen))
                result = load_result(path)
                console.print(summary_table(result.rows, run_dtype(result)))
                console.print(f"result file: {literal(path, 4096)}", highlight=False)
            return
        with clusters.connected(cluster) as gpu:
            paths = clusters.run_cluster(matrix(lambda: gpu), tuple(accelerator_type or [None]), ClusterLines())
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/]: the finished rows are kept in the result file (complete: false)")
        raise typer.Exit(130)
    from harness.site.context import machine_name  # the site (and plotly) only for a cluster run's closing lines

    for path in paths:
        result = load_result(path)
        console.print(f"[bold]{literal(result.model)}[/] on {literal(machine_name(result))}", highlight=False)
        console.print(summary_table(result.rows, run_dtype(result)))
        console.print(f"result file: {literal(path, 4096)}", highlight=False)


@app.command()
def check(
    candidate: Path = typer.Argument(..., help="a result file, or a directory: the latest run of each model"),
    baseline: Path = typer.Option(..., "--baseline", "-b", help="the result file or directory to compare with"),
    threshold_speed: Optional[float] = typer.Option(None, help="relative change of a speed or time that counts (default 0.05)"),
    threshold_memory: Optional[float] = typer.Option(None, help="relative change of peak memory that counts (default 0.20)"),
    ratios: bool = typer.Option(False, "--ratios", help="compare ratios to the in-run reference even on one machine"),
    paired: bool = typer.Option(False, "--paired", help="trial i of each side ran side by side: resample them together"),
    gate: bool = typer.Option(False, "--gate", help="the CI gate's paired check (.ci/gate): --paired and its thresholds (harness/check.py)"),
    json_path: Optional[Path] = typer.Option(None, "--json", help="also write the report as JSON here"),
) -> None:
    """Compare CANDIDATE with a baseline row by row; exit 1 on a regression beyond the thresholds and the noise."""
    defaults = checks.GATE_THRESHOLDS if gate else checks.Thresholds()
    thresholds = checks.Thresholds(
        speed=defaults.speed if threshold_speed is None else threshold_speed,
        memory=defaults.memory if threshold_memory is None else threshold_memory,
        min_seconds=defaults.min_seconds,
    )
    if not all(math.isfinite(t) and t >= 0 for t in (thresholds.speed, thresholds.memory)):
        raise UserError("thresholds are relative changes: finite and not negative, e.g. --threshold-speed 0.05")
    if json_path is not None and json_path.is_dir():
        raise UserError(f"--json {json_path}: a directory; give a file name, e.g. {json_path / 'report.json'}")
    report = checks.check(candidate, baseline, thresholds, ratios=ratios, paired=paired or gate)
    check_report.print_comparisons(console, report)
    if json_path is not None:
        try:
            json_path.parent.mkdir(parents=True, exist_ok=True)
            json_path.write_text(json.dumps(report.to_json(), indent=2) + "\n")
        except OSError as e:
            raise UserError(f"--json {json_path}: cannot be written ({e.strerror})") from None
    console.print(check_report.verdict(report), highlight=False, soft_wrap=True)
    if not report.passed:
        raise typer.Exit(1)


@app.command("merge")
def merge(
    runs: list[Path] = typer.Argument(..., help="result files of one suite, e.g. one trial each"),
    out: Path = typer.Option(..., help="where to write the merged result file"),
) -> None:
    """Merge runs of one suite into one run whose rows hold every trial (the gate merges its trials so)."""
    from harness.trials import merge_runs

    merged = merge_runs([load_result(p) for p in runs])
    write_result(merged, out)
    console.print(f"{len(runs)} run(s), {merged.protocol['trials']} trial(s): {literal(out, 4096)}", highlight=False)


@app.command("duet")
def duet_command(
    model: str = typer.Argument(..., help="a model id or alias, or a local checkpoint directory"),
    baseline_checkout: Path = typer.Option(..., "--baseline-checkout", help="a checkout of this repository (a git worktree of the baseline commit, say)"),
    candidate_checkout: Optional[Path] = typer.Option(None, "--candidate-checkout", help="another checkout (default: this one)"),
    runner: list[str] = typer.Option(..., "--runner", "-r", help="a single-request runner id; repeat for several"),
    profile: str = typer.Option("gate", help=f"one of {', '.join(PROFILES)}: prompt, new tokens, warm-ups"),
    dtype: str = typer.Option("f32", help="f32, f16 or bf16"),
    device: str = typer.Option("cpu", help="cpu or cuda"),
    pairs: int = typer.Option(2, min=1, max=8, help="process pairs per row at least (each side a fresh process), round robin over the rows"),
    row_seconds: float = typer.Option(0.0, min=0, max=3600, help="more process pairs (up to 8) while a row has taken less than this, loads included"),
    seconds: float = typer.Option(15.0, min=0.1, max=3600, help="seconds of turns per process pair (at least 10 runs a side)"),
    timeout: Optional[float] = typer.Option(None, help="seconds a process pair may take (default: the profile's)"),
    seed: int = typer.Option(0, help="seed of the prompt and synthetic weights"),
    out: Path = typer.Option(..., help="writes OUT/baseline.json and OUT/candidate.json; compare them with `check --paired`"),
) -> None:
    """Time each row of two checkouts of this code in lock-step turns (harness/duet.py): the two sides of each pair of
    runs share the machine's slow and fast spells, so their ratio holds still where their figures do not."""
    import tempfile

    from harness.duet import Side, Turns, run_duet

    if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
        raise UserError(f"--timeout {timeout}: give a number of seconds above 0, e.g. --timeout 600")
    check_seed(seed)
    devices.check(device)
    dtypes.check(dtype)
    chosen = tuple(get_runner(r) for r in runner)
    if serving := [r.id for r in chosen if r.kind != "single"]:
        raise UserError(f"duet times single-request rows; {', '.join(serving)} serve(s) many requests")
    sides = []
    for name, path in (("baseline", baseline_checkout), ("candidate", candidate_checkout or Path(__file__).resolve().parent.parent)):
        if not (path / "harness" / "__init__.py").is_file() or not (path / "runners" / "base.py").is_file():
            raise UserError(f"--{name}-checkout {path}: not a checkout of this repository (no harness/ and runners/base.py)")
        sides.append(Side(name, path.resolve()))
    settings = BenchSettings(get_model(model), chosen, get_profile(profile), dtype, device, None, out, seed, timeout, 1)
    with tempfile.TemporaryDirectory(prefix="linnet-duet-") as scratch:
        paths, failures = run_duet(settings, (sides[0], sides[1]), pairs, Turns(seconds), Path(scratch), out,
                                   lambda text: console.print(f"duet: {literal(text, 1000)}", highlight=False), row_seconds)  # fmt: skip
    for name, path in paths.items():
        console.print(f"{name}: {literal(path, 4096)}", highlight=False)
    for failure in failures:
        console.print(f"failed: {printable(str(failure))[:400]}", highlight=False, markup=False)
    if any(f.side == "candidate" for f in failures):
        raise UserError("the candidate side failed on a row: see above")


@app.command("site")
def site_command(
    results: Path = typer.Option(Path("results"), help="the result files: RESULTS/<model>/<run-id>.json"),
    out: Path = typer.Option(Path("site"), help="where the website goes: OUT/index.html, OUT/models/<model>.html"),
) -> None:
    """Render the result files as a static website that works offline (open OUT/index.html)."""
    from harness.site import build_site

    def warn(message: str) -> None:
        console.print(f"[yellow]warning:[/] {literal(message, 1000)}", highlight=False, soft_wrap=True)

    pages = build_site(results, out, warn)
    console.print(f"{len(pages)} page(s) written; open {literal(pages[0], 4096)}", highlight=False)


class RichDisplay(Display):
    """A spinner with the child's current phase while a runner works, then one line per finished row."""

    def __init__(self, runners):
        self.runners = runners
        self.bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console, transient=True)
        self.task = None

    def begin(self, result, path):
        console.print(
            f"[bold]{literal(result.model)}[/] · {len(self.runners)} runner(s) · {result.protocol['trials']} trial(s) each, "
            f"round robin · profile {literal(result.protocol['profile'])} · "
            f"{literal(result.protocol['dtype'])} on {literal(result.protocol['device'])} · weights: {literal(result.weights, 4096)} · "
            f"writing {literal(path, 4096)}",
            highlight=False,
        )

    def start(self, runner):
        if self.task is None:
            self.bar.start()
        else:
            self.bar.remove_task(self.task)
        self.task = self.bar.add_task(f"{literal(runner.id)}: starting")

    def progress(self, runner, text):
        self.bar.update(self.task, description=f"{literal(runner.id)}: {literal(text, 160)}")

    def finish(self, row):
        mark = {"ok": "[green]ok[/]", "skipped": "[yellow]skipped[/]", "failed": "[red]failed[/]"}[row.status]
        m = row.metrics
        if row.status == "ok" and "serving_tok_s" in m:
            detail = f"{m['serving_tok_s']:.1f} tok/s serving, TTFT {m['serving_ttft_ms']:.1f} ms"
        elif row.status == "ok" and "decode_tok_s" in m:
            detail = f"{m['decode_tok_s']:.1f} tok/s"
            if "energy_j_per_tok" in m:
                detail += f", {m['energy_j_per_tok']:.3g} J/tok"
        else:
            detail = row.reason or ""
        trials = f" (trial {m['trials']})" if row.status == "ok" and m.get("trials", 1) > 1 else ""
        first = literal(detail.splitlines()[0], 160) if detail.strip() else ""
        self.bar.console.print(f"{mark} {literal(row.runner)}{trials}: {first}", highlight=False)


class ClusterLines(clusters.ClusterDisplay):
    """A cluster run's rows finish in any order on any machine: a line each, saying which; the tables close the run."""

    def begin(self, result, path):
        from harness.site.context import machine_name

        console.print(f"[bold]{literal(result.model)}[/] · {literal(result.protocol['dtype'])} on {literal(machine_name(result))} · "
                      f"writing {literal(path, 4096)}", highlight=False)  # fmt: skip

    def finish(self, result, row):
        from harness.site.context import machine_name

        reason = f": {row.reason.splitlines()[0][:160]}" if row.reason else ""
        console.print(f"{row.status} {result.model} · {machine_name(result)} · {row.runner}{reason}", highlight=False, markup=False)


def short(value: float | None) -> str:
    """A figure in at most 6 characters: 3 significant figures, whole numbers from 100 up."""
    if value is None:
        return "–"
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def with_interval(metrics: dict, name: str, unstable: list[str]) -> str:
    """ "1536 ±4%": the median and the half-width of its 95% interval, relative; "!" when its trials disagree."""
    value = metrics.get(name)
    if value is None:
        return "–"
    text = short(value)
    ci = metrics.get(f"{name}_ci")
    if isinstance(ci, list) and len(ci) == 2 and all(isinstance(v, (int, float)) for v in ci) and value:
        text += f" ±{(ci[1] - ci[0]) / 2 / abs(value):.0%}"
    return text + ("!" if name in unstable else "")


def truth_figure(row: Row, dtype: str) -> str:
    """The row's truth ratio; n/a where check leaves it unjudged (8-bit weights, another dtype than the run's)."""
    if row.truth_ratio is None:
        return "–"
    return f"{row.truth_ratio:.2g}x" if truth_ratio_judged(row, dtype) else "n/a"


def summary_table(rows: list[Row], dtype: str = "f32") -> Table:
    """The closing table, readable at 80 columns: the metrics with a CLI column (harness/metrics.py), a serving row's
    in the column of their single-request counterpart (load times are in the result file and on the page); `dtype`
    is the run's."""
    columns = [m for m in METRICS if m.column]
    table = Table("runner", "status", *(m.column for m in columns), "distance", "×truth",
                  box=None, pad_edge=False, padding=(0, 1, 0, 0), header_style="bold underline", caption_justify="left")  # fmt: skip
    for column in table.columns:
        column.no_wrap = True
    serving_of = {m.single: m for m in METRICS if m.single}
    flagged = False
    for r in rows:
        m = r.metrics
        serving = "serving_tok_s" in m  # a serving row: its figures are the serving ones
        flagged = flagged or bool(r.unstable)
        shown = [serving_of[c.key] if serving and c.key in serving_of else c for c in columns]
        table.add_row(
            literal(r.runner),
            r.status,
            *(with_interval(m, c.key, r.unstable) if c.sampled else short(m.get(c.key)) for c in shown),
            "–" if r.distance is None else f"{r.distance:.2g}",
            truth_figure(r, dtype),
        )
    caption = ["×truth: distance from the float64 truth over the reference's (linnet-bench check bounds it); n/a: "
               "quantized weights or another dtype, judged by KL and top-1"]
    if flagged:
        caption.append(f"! unstable: its trials' medians differ by more than {stats.UNSTABLE_CV:.0%} (std/mean)")
    caption += [f"{literal(r.runner)}: {note}" for r in rows if (note := busy_note(r.metrics))]
    table.caption = "\n".join(caption)
    return table


def main() -> None:
    run_cli(app, console)


if __name__ == "__main__":
    main()
