"""The "Every number" table of a run, grouped by section, and the list of rows that were skipped or failed."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, replace
from typing import Callable

from harness.bounds import own_dtype, run_dtype, truth_ratio_judged
from harness.memory import busy_note
from harness.results import ResultFile, Row
from harness.site import numbers
from harness.stats import UNSTABLE_CV
from harness.site.charts import hover_lines, metric_title
from harness.site.comparisons import ENERGY, FIRST_CALL, TABLED, Metric, against_peer, in_page_order
from runners import REFERENCE


# Notes up to this many characters stand in their cell; longer ones fold behind a summary of this length.
NOTE_FITS = 26


@dataclass(frozen=True)
class Cell:
    text: str
    hint: str | None = None  # shown on hover: spread and number of runs
    extra: bool = False  # beyond the published page's columns
    flag: str | None = None  # a word after the text, e.g. "unstable"; its explanation is the hint
    summary: str | None = None  # when set, the text is folded behind this one line until the reader opens it
    column: str = ""  # the column's key (COLUMNS)


@dataclass(frozen=True)
class Column:
    key: str  # its cells' class, e.g. "notes"
    title: Callable[[list[Row]], str]  # its heading, from the run's rows ("Peak host memory")
    cell: Callable[[Row, ResultFile], Cell]
    extra: bool = False  # beyond the published page's columns


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
    measured = [r for r in in_page_order(rows) if r.status == "ok"]
    # a column beyond the published page's that no row has a figure in (energy on a CPU) is left out: 1280 px is tight
    columns = [c for c in COLUMNS if not c.extra or any(c.cell(r, result).text != numbers.DASH for r in measured)]
    headers = tuple(Cell(c.title(rows), extra=c.extra, column=c.key) for c in columns)
    sections = []
    for group in dict.fromkeys(r.group for r in measured):
        sections.append(TableSection(group, tuple(table_row(r, result, columns) for r in measured if r.group == group)))
    return Table(headers, tuple(sections))


def table_row(row: Row, result: ResultFile, columns: list[Column]) -> tuple[Cell, ...]:
    return tuple(replace(c.cell(row, result), extra=c.extra, column=c.key) for c in columns)


def method_cell(row: Row, result: ResultFile) -> Cell:
    unstable = None
    if row.unstable:
        names = ", ".join(m.name for m in TABLED if m.key in row.unstable) or ", ".join(row.unstable)
        unstable = f"unstable: the trials' medians of its {names} differ by more than {UNSTABLE_CV:.0%} (std/mean)"
    return Cell(row.label, hint=unstable, flag="unstable" if unstable else None)


def against_cell(row: Row, result: ResultFile) -> Cell:
    comparison = against_peer(row, result.rows)
    return Cell(comparison.against_text if comparison else "")


def distance_cell(row: Row, result: ResultFile) -> Cell:
    if row.runner != REFERENCE:
        return Cell(numbers.distance(row.distance))
    return Cell("0 (the reference)" if row.distance == 0 else numbers.distance(row.distance) + " (the reference)")


def truth_cell(row: Row, result: ResultFile) -> Cell:
    """The row's distance from the float64 truth over the reference's (harness/bench.py compare_with_truth); for a row
    the ratio does not judge, its distance alone."""
    away = f"{numbers.distance(row.truth_distance)} from it" if row.truth_distance is not None else numbers.DASH
    hint = f"its logits are {numbers.distance(row.truth_distance)} from the float64 truth"
    if row.truth_ratio is None:
        return Cell(away)
    if row.runner == REFERENCE:
        return Cell("1 (the reference)", hint=hint)
    if not truth_ratio_judged(row, run_dtype(result)):
        why = f"its weights are {row.quant}" if row.quant else f"it computes in {own_dtype(row.runner, run_dtype(result))}"
        return Cell(away, hint=f"not a ratio: {why}, so the reference's rounding is no yardstick; KL and top-1 judge it")
    return Cell(f"{row.truth_ratio:.2g}x", hint=hint)


def wall_cell(row: Row, result: ResultFile) -> Cell:
    """The share of the machine's memory bandwidth the row's decode reaches (harness/roofline.py)."""
    share, read = row.metrics.get("roofline"), row.metrics.get("bytes_per_token")
    gb_s = result.machine.get("memory_bandwidth_gb_s")
    if not isinstance(share, (int, float)) or not isinstance(read, (int, float)) or not isinstance(gb_s, (int, float)):
        return Cell(numbers.DASH)
    hint = (f"its decode reads about {read / 1e6:.0f} MB per token (weights and KV cache); at this machine's "
            f"{gb_s:.0f} GB/s ({result.machine.get('memory_bandwidth_method', 'a large read')}) that allows "
            f"{gb_s * 1e9 / read:.0f} tok/s")
    return Cell(f"{share:.0%}", hint=hint)


def notes_cell(row: Row, result: ResultFile) -> Cell:
    """The notes (and whether other processes were busy while it was measured); folded behind a one-line summary when
    they are longer than one line of their column."""
    text = "; ".join([*row.notes, *filter(None, [busy_note(row.metrics)])])
    if len(text) <= NOTE_FITS:
        return Cell(text)
    return Cell(text, summary=textwrap.shorten(text, NOTE_FITS, placeholder=" …"))


def accuracy_column(title: str, figure: Callable[[Row], str]) -> Column:
    """KL mean, KL p99 or top-1 agreement (harness/accuracy.py), its cells hinting at the positions they cover."""

    def cell(row: Row, result: ResultFile) -> Cell:
        positions = (result.reference_distributions or {}).get("positions")
        text = figure(row)
        hint = f"over {positions} probe positions, against the reference's distributions" if positions else None
        return Cell(text, hint=hint if positions and text != numbers.DASH else None)

    return Column(title.lower().replace(" ", "-"), lambda rows: title, cell, extra=True)


def metric_column(metric: Metric) -> Column:
    return Column(metric.key, lambda rows: metric_title(metric, rows),
                  lambda row, result: metric_cell(row, metric, result), extra=metric in (FIRST_CALL, ENERGY))  # fmt: skip


# The table's columns, left to right: the one place a column is defined. A column's key is its cells' class (the
# stylesheet sizes columns by it); `extra` columns are beyond the published page's and drawn muted.
COLUMNS = (
    Column("method", lambda rows: "Method", method_cell),
    *(metric_column(m) for m in TABLED),
    Column("wall", lambda rows: "Of the memory wall", wall_cell, extra=True),
    Column("against", lambda rows: "Against the stack it replaces", against_cell),
    Column("distance", lambda rows: "Distance from reference", distance_cell),
    Column("truth", lambda rows: "Against the float64 truth", truth_cell, extra=True),
    accuracy_column("KL mean", lambda row: numbers.kl(row.kl_mean)),
    accuracy_column("KL p99", lambda row: numbers.kl(row.kl_p99)),
    accuracy_column("Top-1 agreement", lambda row: numbers.share(row.top1_agree)),
    Column("notes", lambda rows: "Notes", notes_cell),
)


def metric_cell(row: Row, metric: Metric, result: ResultFile) -> Cell:
    """The figure, or a dash; its hint is the chart's hover text without the row's name."""
    value = metric.value(row)
    if value is None:
        return Cell(numbers.DASH)
    hint = " · ".join(hover_lines(row, metric, result)[1:])
    return Cell(numbers.with_unit(value, metric.unit), hint=hint)


def unmeasured(row: Row) -> Unmeasured:
    """A skipped row's reason is one line; a failed one's is a stderr tail, summed up by its last line (the error)."""
    reason = (row.reason or "").strip() or "no reason recorded"
    lines = [line for line in reason.splitlines() if line.strip()]
    summary = lines[-1].strip() if row.status == "failed" else lines[0]
    return Unmeasured(row.label, row.group, row.status, summary, reason if len(lines) > 1 else None)
