"""How a `make gpu` result file stands against what the GPU issues ask of it, one line a target: met, missed or no
figure, with the figure and, where its rows kept two trials or more, the 95% interval of it. Issue 27 (right answers):
the transformers rows decode through their cache, every row within its truth-ratio bound, an energy figure and two
trials on every GPU row. Issue 28 (speed): the figures in TARGETS. `make gpu` writes it beside the result file
(scripts/gpu-suite.sh); the verdict goes by the figure, and a line says when the interval reaches past the target.

    python scripts/gpu_targets.py out/gpu/20261208T101500Z.json

It reports and decides nothing: the exit status is 0 whatever it finds (2 for a file it cannot read), so that the
suite's own status stays the run's.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from harness import stats
from harness.bounds import run_dtype, truth_ratio_bound
from harness.check import has_trials
from harness.results import ResultFile, Row, load_result
from harness.validate import invalid_figures, is_number, printable
from linnet_core.errors import UserError
from runners.base import CACHE_CHECKED

TRIALS = 2  # fresh-process trials a row needs (issue 27)


@dataclass(frozen=True)
class Target:
    """A figure of one row (or a ratio of two rows' figures) and the bound issue 28 sets it."""

    what: str  # "linnet-cudagraphs decode"
    runner: str
    metric: str
    unit: str
    at_least: float | None = None
    at_most: float | None = None
    over: str | None = None  # a ratio: the row's figure over this row's (a valid rate: above 0)
    # judged by the slowest trial: a first call's, whose compile caches were cold (later trials share them)
    slowest: bool = False

    def meets(self, value: float) -> bool:
        return (self.at_least is None or value >= self.at_least) and (self.at_most is None or value <= self.at_most)

    @property
    def bound(self) -> str:
        if self.at_least is not None:
            return f"at least {number(self.at_least, self.unit)}"
        return f"at most {number(self.at_most, self.unit)}"


TARGETS = (
    Target("linnet-cudagraphs decode over transformers compiled's", "linnet-cudagraphs", "decode_tok_s", "x",
           at_least=2.0, over="transformers-compiled"),
    Target("linnet-cudagraphs decode", "linnet-cudagraphs", "decode_tok_s", "tok/s", at_least=1500),
    Target("linnet-cudagraphs first token", "linnet-cudagraphs", "ttft_ms", "ms", at_most=5.0),
    Target("linnet-inductor first call, the slowest trial's", "linnet-inductor", "first_call_s", "s", at_most=30.0,
           slowest=True),
    Target("linnet.serve on CUDA graphs", "serve-linnet-cudagraphs", "serving_tok_s", "tok/s", at_least=35_000),
    Target("linnet.serve on CUDA graphs, prefill's share of model time", "serve-linnet-cudagraphs",
           "serving_prefill_share", "", at_most=0.30),
    Target("linnet.serve on XLA", "serve-linnet-xla", "serving_tok_s", "tok/s", at_least=29_000),
)  # fmt: skip


@dataclass(frozen=True)
class Figure:
    value: float
    interval: tuple[float, float] | None = None  # the 95% interval, where the row kept 2 trials or more (has_trials)


def figure(row: Row, metric: str, slowest: bool = False) -> Figure | str:
    """The row's figure for `metric` with its interval (or its slowest trial's), or why there is none."""
    value = row.metrics.get(metric)
    if not is_number(value):
        return f"{row.runner} has no {metric}"
    samples = row.samples.get(metric, [])
    if slowest:
        return Figure(max(stats.pooled(samples), default=value))
    return Figure(value, stats.interval(samples) if has_trials(row, metric) else None)


def ratio(row: Row, other: Row, metric: str) -> Figure | str:
    mine, theirs = figure(row, metric), figure(other, metric)
    if isinstance(mine, str) or isinstance(theirs, str):
        return mine if isinstance(mine, str) else theirs
    both = has_trials(row, metric) and has_trials(other, metric)
    interval = stats.ratio_interval(row.samples[metric], other.samples[metric])[1:] if both else None
    return Figure(mine.value / theirs.value, interval)


def measured(rows: dict[str, Row], runner: str) -> Row | str:
    """The runner's row when it ran and its figures are valid, or why not."""
    row = rows.get(runner)
    if row is None:
        return f"no {runner} row"
    if row.status != "ok":
        return f"{runner} {row.status}: {printable(row.reason or 'no reason given')[:160]}"
    if problems := invalid_figures(row):
        return f"{runner}'s figures are invalid: {problems[0]}"
    return row


def number(value: float, unit: str) -> str:
    if unit == "x":
        return f"{value:.2f}x"
    text = f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return f"{text} {unit}".rstrip()


def judged(target: Target, rows: dict[str, Row]) -> tuple[str, str]:
    """(verdict, the figure's text) for one target."""
    row = measured(rows, target.runner)
    other = measured(rows, target.over) if target.over else None
    if isinstance(row, str) or isinstance(other, str):
        return "no figure", row if isinstance(row, str) else other
    got = ratio(row, other, target.metric) if other else figure(row, target.metric, target.slowest)
    if isinstance(got, str):
        return "no figure", got
    text = number(got.value, target.unit)
    if got.interval:
        low, high = got.interval
        text += f" (95% CI {number(low, target.unit)} to {number(high, target.unit)})"
    if got.interval and not all(target.meets(x) for x in got.interval):
        text += ", the interval reaches past the target"
    return ("met" if target.meets(got.value) else "missed"), f"{text}; the target: {target.bound}"


def cache_checked(rows: dict[str, Row], runner: str) -> tuple[str, str]:
    """Whether the transformers row checked its cached decode against a full forward at load (it refuses to run when
    they differ): its note says so; a row without the note comes from before the check and may have decoded without
    its cache, as on the first H200 run."""
    row = measured(rows, runner)
    if isinstance(row, str):
        return "no figure", row
    note = next((n for n in row.notes if n.startswith(CACHE_CHECKED)), None)
    return ("met", note) if note else ("missed", "its notes do not say its cached decode was checked at load")


def truth_ratios(rows: list[Row], dtype: str) -> list[tuple[str, str, str]]:
    """Each compared row's truth ratio against its bound (harness/bounds.py), where one bounds it."""
    lines = []
    for row in rows:
        bound = truth_ratio_bound(row.quant, dtype, row.runner)
        if bound == float("inf") or row.distance is None:  # quantized, another dtype, or not compared (a peer's server)
            continue
        if row.truth_ratio is None:
            lines.append((f"{row.runner} truth ratio", "no figure", "the run measured no float64 truth for it"))
        else:
            lines.append((f"{row.runner} truth ratio", "met" if row.truth_ratio <= bound else "missed",
                          f"{row.truth_ratio:.3g}; the bound: at most {bound:g}"))
    return lines


def every_row(what: str, rows: list[Row], lacking: list[str]) -> tuple[str, str, str]:
    """A target every measured row must meet: which rows do not."""
    if not rows:
        return what, "no figure", "no row ran"
    return (what, "missed", f"not on {', '.join(lacking)}") if lacking else (what, "met", f"all {len(rows)} rows")


def answers(run: ResultFile, rows: dict[str, Row]) -> list[tuple[str, str, str]]:
    """Issue 27's targets: (what, verdict, the figures)."""
    lines = [(f"{runner} decodes through its cache", *cache_checked(rows, runner))
             for runner in ("transformers", "transformers-compiled")]
    ok = [r for r in rows.values() if isinstance(measured(rows, r.runner), Row)]
    lines += truth_ratios(ok, run_dtype(run))
    if run.protocol.get("device") == "cuda":
        energy = ("energy_j_per_tok", "serving_energy_j_per_tok")
        lines.append(every_row("an energy figure on every GPU row", ok,
                               [r.runner for r in ok if not any(is_number(r.metrics.get(k)) for k in energy)]))
    lines.append(every_row(f"{TRIALS} trials on every row", ok, [
        f"{r.runner} ({r.metrics.get('trials', 1)})" for r in ok if not r.metrics.get("trials", 1) >= TRIALS]))
    if not_run := [f"{r.runner} ({r.status})" for r in rows.values() if r.status != "ok"]:
        lines.append(("rows that did not run", "note", ", ".join(not_run)))
    return lines


def report(run: ResultFile) -> list[str]:
    rows = {row.runner: row for row in run.rows}
    where = f"{run.model}, {run_dtype(run)} on {run.machine.get('gpu') or run.protocol.get('device', '?')}"
    lines = [f"{where}: the GPU issues' targets ({run.run_id})"]
    speed = [(t.what, *judged(t, rows)) for t in TARGETS]
    for title, group in (("issue 27, right answers", answers(run, rows)), ("issue 28, speed", speed)):
        lines.append(title)
        width = max(len(what) for what, _, _ in group)
        lines += [f"  {verdict:<9}  {what:<{width}}  {text}" for what, verdict, text in group]
    return [printable(line)[:1000] for line in lines]  # a runner id or a reason is the file's own text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("result", type=Path, help="a result file of `make gpu`")
    args = parser.parse_args()
    try:
        run = load_result(args.result)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    print("\n".join(report(run)))


if __name__ == "__main__":
    main()
