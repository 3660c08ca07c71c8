"""The charts of a run: which rows each metric's chart draws (memory figures that are a setting are listed, not
drawn), the best bar, each bar's hover text (spread, runs, first call), and the history of a model's runs."""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness.results import ResultFile, Row
from harness.stats import UNSTABLE_CV
from harness.site import numbers
from harness.site.comparisons import DECODE, FIRST_CALL, LOAD, MEMORY, SERVING, TTFT, Metric, best_row
from harness.site.context import LoadedRun
from harness.site.figures import Bar, Series, bar_figure, history_figure
from runners import GROUPS

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


def in_page_order(rows: list[Row]) -> list[Row]:
    """Rows by section in GROUPS order (unknown sections last), keeping the result file's order within one."""
    rank = {g: i for i, g in enumerate(GROUPS)}
    return sorted(rows, key=lambda r: rank.get(r.group, len(GROUPS)))


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
            hover_lines(r, metric, result), r is best)
        for r in drawn
    ]  # fmt: skip
    description = f"{metric.unit}, {metric.direction}; the best bar is red."
    if metric is MEMORY:
        description = memory_description(memory_kind(result.rows), hidden)
    return ChartView(chart_id, metric_title(metric, result.rows), description, bar_figure(bars, metric.unit))


def memory_description(kind: str, hidden: list[Row]) -> str:
    if kind == "gpu":
        text = "What the driver reports the process holding at its peak, in GiB"
    else:
        text = "The process's peak resident memory (RSS), sampled from outside, in GiB"
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


def history_charts(runs: tuple[LoadedRun, ...], index: int) -> tuple[ChartView, ...]:
    """Headline metrics of every row over the runs on one machine; none for a single run."""
    if len(runs) < 2:
        return ()
    charts = []
    for metric in (DECODE, SERVING, TTFT):
        if series := history_series(runs, metric):
            description = (
                f"{metric.unit}, {metric.direction}; one line per row, over the {len(runs)} runs of this setup (machine, dtype, profile)."
            )
            figure = history_figure(series, metric.unit)
            charts.append(ChartView(f"history-{index}-{metric.key}", f"{metric.title} over time", description, figure))
    return tuple(charts)


def history_series(runs: tuple[LoadedRun, ...], metric: Metric) -> list[Series]:
    """One series per runner id that measured the metric at least once, named by its latest label."""
    points: dict[str, list[tuple[str, float]]] = {}
    labels: dict[str, str] = {}
    for run in runs:
        for row in in_page_order(run.result.rows):
            if (value := metric.value(row)) is not None:
                points.setdefault(row.runner, []).append((run.result.created_at, value))
                labels[row.runner] = row.label
    return [
        Series(labels[runner], tuple(d for d, _ in p), tuple(v for _, v in p),
               tuple(numbers.with_unit(v, metric.unit) for _, v in p))
        for runner, p in points.items()
    ]  # fmt: skip
