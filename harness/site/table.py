"""The "Every number" table of a run, grouped by section, and the list of rows that were skipped or failed."""

from __future__ import annotations

from dataclasses import dataclass

from harness.memory import busy_note
from harness.results import ResultFile, Row
from harness.site import numbers
from harness.stats import UNSTABLE_CV
from harness.site.charts import hover_lines, in_page_order, metric_title
from harness.site.comparisons import FIRST_CALL, TABLED, Metric, against_peer
from runners import REFERENCE


@dataclass(frozen=True)
class Cell:
    text: str
    hint: str | None = None  # shown on hover: spread and number of runs
    extra: bool = False  # beyond the published page's columns
    flag: str | None = None  # a word after the text, e.g. "unstable"; its explanation is the hint


@dataclass(frozen=True)
class TableSection:
    name: str  # the page section, e.g. "PyTorch"
    rows: tuple[tuple[Cell, ...], ...]


@dataclass(frozen=True)
class Table:
    headers: tuple[Cell, ...]
    sections: tuple[TableSection, ...]

    @property
    def width(self) -> int:
        return len(self.headers)


@dataclass(frozen=True)
class Unmeasured:
    label: str  # the row's name
    group: str  # its section
    status: str  # "skipped" or "failed"
    reason: str  # the reason in one line
    detail: str | None  # the whole reason when it is longer (a failed child's stderr tail)


def numbers_table(result: ResultFile) -> Table:
    rows = result.rows
    headers = (Cell("Method"), *(Cell(metric_title(m, rows), extra=m is FIRST_CALL) for m in TABLED),
               Cell("Against the stack it replaces"), Cell("Distance from reference"), Cell("KL mean", extra=True),
               Cell("KL p99", extra=True), Cell("Top-1 agreement", extra=True), Cell("Notes"))  # fmt: skip
    measured = [r for r in in_page_order(rows) if r.status == "ok"]
    sections = []
    for group in dict.fromkeys(r.group for r in measured):
        sections.append(TableSection(group, tuple(table_row(r, result) for r in measured if r.group == group)))
    return Table(headers, tuple(sections))


def table_row(row: Row, result: ResultFile) -> tuple[Cell, ...]:
    comparison = against_peer(row, result.rows)
    if row.runner == REFERENCE:
        distance = "0 (the reference)" if row.distance == 0 else numbers.distance(row.distance) + " (the reference)"
    else:
        distance = numbers.distance(row.distance)
    unstable = None
    if row.unstable:
        names = ", ".join(m.name for m in TABLED if m.key in row.unstable) or ", ".join(row.unstable)
        unstable = f"unstable: the trials' medians of its {names} differ by more than {UNSTABLE_CV:.0%} (std/mean)"
    return (
        Cell(row.label, hint=unstable, flag="unstable" if unstable else None),
        *(metric_cell(row, m, result) for m in TABLED),
        Cell(comparison.against_text if comparison else ""),
        Cell(distance),
        *accuracy_cells(row, result),
        Cell("; ".join([*row.notes, *filter(None, [busy_note(row.metrics)])])),
    )


def accuracy_cells(row: Row, result: ResultFile) -> tuple[Cell, ...]:
    """KL mean, KL p99 and top-1 agreement (harness/accuracy.py), each hinting at the positions they cover."""
    positions = (result.reference_distributions or {}).get("positions")
    hint = f"over {positions} probe positions, against the reference's distributions" if positions else None
    figures = (numbers.kl(row.kl_mean), numbers.kl(row.kl_p99), numbers.share(row.top1_agree))
    return tuple(Cell(text, hint=hint if text != numbers.DASH else None, extra=True) for text in figures)


def metric_cell(row: Row, metric: Metric, result: ResultFile) -> Cell:
    """The figure, or a dash; its hint is the chart's hover text without the row's name."""
    value = metric.value(row)
    if value is None:
        return Cell(numbers.DASH, extra=metric is FIRST_CALL)
    hint = " · ".join(hover_lines(row, metric, result)[1:])
    return Cell(numbers.with_unit(value, metric.unit), hint=hint, extra=metric is FIRST_CALL)


def unmeasured(row: Row) -> Unmeasured:
    """A skipped row's reason is one line; a failed one's is a stderr tail, summed up by its last line (the error)."""
    reason = (row.reason or "").strip() or "no reason recorded"
    lines = [line for line in reason.splitlines() if line.strip()]
    summary = lines[-1].strip() if row.status == "failed" else lines[0]
    return Unmeasured(row.label, row.group, row.status, summary, reason if len(lines) > 1 else None)
