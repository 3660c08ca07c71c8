"""The charts of a run: which rows each metric's chart draws (memory figures that are a setting are listed, not
drawn), the best bar, each bar's hover text (spread, runs, first call), and the history of a model's runs."""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness.results import ResultFile, Row
from harness.stats import UNSTABLE_CV
from harness.site import numbers
from harness.site.comparisons import DECODE, FIRST_CALL, LOAD, MEMORY, SERVING, TTFT, Metric, best_row, in_page_order
from harness.site.context import LoadedRun
from harness.site.figures import Bar, Marker, Series, bar_figure, history_figure
from harness.site.history import RULE, Change, Point, row_histories, run_labels

# What a whisker spans (Metric.interval).
WHISKERS = "each row's 95% interval over its trials (the min–max of its runs where it ran in one trial)"
# A note that says the memory figure is a pool reserved up front (a setting), not what the model needed.
SETTING_NOTE = re.compile(r"reserves .*pool|cache pool at")


@dataclass(frozen=True)
class ChartView:
    id: str  # the chart's element id
    title: str  # "Time to first token"
    description: str  # unit, which way is better, which rows are not drawn
    figure: dict  # plotly data, layout and config


def memory_kind(rows: list[Row]) -> str:
    """Where the rows' memory was read: "gpu" when any row's came from the driver, else "host" (the child's RSS)."""
    return "gpu" if any(r.metrics.get("mem_kind") == "gpu" for r in rows) else "host"


def metric_title(metric: Metric, rows: list[Row]) -> str:
    if metric is MEMORY:
        return "Peak GPU memory" if memory_kind(rows) == "gpu" else "Peak host memory"
    return metric.title


def memory_is_setting(row: Row) -> bool:
    """An engine that reserves a pool up front reports its pool: a setting, not what the model needs."""
    return bool(row.metrics.get("mem_is_setting")) or any(SETTING_NOTE.search(note) for note in row.notes)


def metric_chart(metric: Metric, result: ResultFile, chart_id: str) -> ChartView | None:
    """A bar per row that measured the metric, in page order; None when no row did."""
    rows = [r for r in in_page_order(result.rows) if metric.value(r) is not None]
    if not rows:
        return None
    hidden = [r for r in rows if metric is MEMORY and memory_is_setting(r)]
    drawn = [r for r in rows if r not in hidden]
    best = best_row(drawn, metric)
    bars = [
        Bar(r.group, r.label, metric.value(r), numbers.with_unit(metric.value(r), metric.unit),
            hover_lines(r, metric, result), r is best, *(metric.interval(r) or (None, None))[:2])
        for r in drawn
    ]  # fmt: skip
    description = f"{metric.unit}, {metric.direction}; the best bar is red."
    if metric is MEMORY:
        description = memory_description(memory_kind(result.rows), hidden)
    if any(b.low is not None for b in bars):
        description += f" Whiskers: {WHISKERS}."
    return ChartView(chart_id, metric_title(metric, result.rows), description, bar_figure(bars, metric.unit))


def memory_description(kind: str, hidden: list[Row]) -> str:
    if kind == "gpu":
        text = "What the driver reports the process holding at its peak, in GiB"
    else:
        text = ("The process's peak resident memory (RSS), sampled from outside, in GiB (the engine's: an ONNX or GGUF "
                "file written for it is written by a process apart)")  # fmt: skip
    text += "; lower is better; the best bar is red."
    if hidden:
        names = ", ".join(r.label for r in hidden)
        text += f" Not drawn, since theirs is a setting rather than a need: {names} (in the table)."
    return text


def hover_lines(row: Row, metric: Metric, result: ResultFile) -> tuple[str, ...]:
    """The bar's label, its figure and how it was measured, the min–max spread, and first-call time beside load."""
    m = row.metrics
    lines = [f"{row.label} ({row.group})", numbers.with_unit(metric.value(row), metric.unit)]
    trials = m.get("trials", 1)
    if metric in (TTFT, DECODE):
        runs = m.get("runs", result.workload.get("runs"))
        lines[-1] += f", median of {numbers.count(runs, 'run')}" if runs else ""
        lines[-1] += f" in each of {trials} trials" if runs and trials > 1 else ""
    ci = m.get(f"{metric.key}_ci")
    if trials > 1 and isinstance(ci, list) and len(ci) == 2 and all(isinstance(v, (int, float)) for v in ci):
        lines.append(f"95% CI {numbers.spread(ci[0], ci[1], metric.unit)}")
    low_high = numbers.spread(m.get(f"{metric.key}_min"), m.get(f"{metric.key}_max"), metric.unit)
    if low_high:
        lines.append(f"min–max {low_high}")
    if metric.key in row.unstable:
        lines.append(f"unstable: its trials' medians differ by more than {UNSTABLE_CV:.0%} (std/mean)")
    if metric is LOAD and FIRST_CALL.value(row) is not None:
        lines.append(f"first call {numbers.with_unit(FIRST_CALL.value(row), FIRST_CALL.unit)}")
    if row.top1_agree is not None:
        lines.append(f"KL from reference: mean {numbers.kl(row.kl_mean)}, p99 {numbers.kl(row.kl_p99)}; "
                     f"top-1 agreement {numbers.share(row.top1_agree)}")  # fmt: skip
    return tuple(lines)


def history_charts(runs: tuple[LoadedRun, ...], index: int) -> tuple[tuple[ChartView, ...], tuple[Change, ...]]:
    """The headline metrics of every row over the runs of one setup, and their change points, newest first; no chart
    for a single run."""
    if len(runs) < 2:
        return (), ()
    charts, found = [], []
    for metric in (DECODE, SERVING, TTFT):
        if not (histories := row_histories(runs, metric)):
            continue
        changes = [c for h in histories for c in h.changes]
        found += changes
        series = [Series(h.label, tuple(p.run for p in h.points), tuple(p.value for p in h.points),
                         tuple(point_text(h.label, p, metric) for p in h.points),
                         tuple(p.interval[0] if p.interval else None for p in h.points),
                         tuple(p.interval[1] if p.interval else None for p in h.points))
                  for h in histories]  # fmt: skip
        markers = [Marker(c.after.run, c.after.value, f"changed: {c.text}") for c in changes]
        description = (f"{metric.unit}, {metric.direction}; one line per row over the {len(runs)} runs of this setup, "
                       f"in run order (date and commit), on a log axis, with whiskers: {WHISKERS}. A ring marks a change "
                       f"point: {RULE}.")  # fmt: skip
        figure = history_figure(series, run_labels(runs), markers, metric.unit)
        charts.append(ChartView(f"history-{index}-{metric.key}", f"{metric.title} over the runs", description, figure))
    return tuple(charts), tuple(sorted(found, key=lambda c: c.measured, reverse=True))


def point_text(label: str, point: Point, metric: Metric) -> tuple[str, ...]:
    """The hover of a history point: the row, the run, the figure and its interval."""
    figure = numbers.with_unit(point.value, metric.unit)
    if point.interval:
        low, high, what = point.interval
        figure += f", {what} {numbers.spread(low, high, metric.unit)}"
    return (label, point.run, figure)
