"""The regression check's printed report (`linnet-bench check`): each comparison's header, its table of changes, its
findings and the one-line verdict, through rich with every text from the files escaped. What is compared, and the
verdicts themselves, are harness/check.py's."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from harness.check import Comparison, Report, RowReport, RunInfo
from harness.metrics import METRICS, Metric
from linnet_core.errors import literal
from runners import REFERENCE


def print_comparisons(out: Console, report: Report) -> None:
    """Each model's comparison as `check` prints it: its header, its table, its findings (file text escaped)."""
    for comparison in report.comparisons:
        out.print(header(comparison), highlight=False, soft_wrap=True)
        if comparison.rows:
            out.print(table(comparison))
        for line in finding_lines(comparison):
            out.print(line, highlight=False, soft_wrap=True)


STYLE = {"regression": "red", "improvement": "green", "unclear": "magenta", "new": "cyan", "note": "yellow", None: ""}


def header(c: Comparison) -> str:
    def side(info: RunInfo | None) -> str:
        return "none" if info is None else f"{literal(info.run_id)} ({literal(info.path, 4096)})"

    how = f"changes of each row's ratio to {REFERENCE} in its run ({literal(c.why_ratios)})" if c.ratios else "changes of absolute figures"
    return f"[bold]{literal(c.model)}[/]: candidate {side(c.candidate)} vs baseline {side(c.baseline)}; {how}"


def table(c: Comparison) -> Table:
    """One line per row: the relative change of each metric (red: regression, green: improvement), the distance,
    and the verdict with the status when it is not ok in both runs."""
    shown = [m for m in METRICS if any(m.key in r.changes for r in c.rows)]
    t = Table("runner", *(m.label for m in shown), "distance", "verdict", box=box.SIMPLE_HEAD, pad_edge=False)
    t.columns[0].no_wrap = True
    for row in c.rows:
        kinds = {f.subject: f.kind for f in row.findings}
        cells = [change_cell(row, m, kinds.get(m.key), c.ratios) for m in shown]
        distance = Text("–" if row.distance is None else f"{row.distance:.2g}", style=STYLE.get(kinds.get("distance"), ""))
        verdict = row.verdict
        if row.baseline_status is None:
            verdict += "" if row.candidate_status == "ok" else f" ({row.candidate_status})"
        elif not row.baseline_status == row.candidate_status == "ok":
            verdict += f" ({row.baseline_status} → {row.candidate_status or 'gone'})"
        t.add_row(literal(row.runner), *cells, distance, Text(verdict, style=VERDICT_STYLE.get(row.verdict, "dim")))
    return t


VERDICT_STYLE = {"regressed": "red", "improved": "green", "unclear": "magenta", "new": "cyan"}


def change_cell(row: RowReport, metric: Metric, kind: str | None, ratios: bool) -> Text:
    change = row.changes.get(metric.key)
    if change is None:
        return Text("ref" if ratios and row.runner == REFERENCE else "–", style="dim")
    return Text(f"{change:+.0%}", style=STYLE.get(kind, "dim"))


def finding_lines(c: Comparison) -> list[str]:
    marks = {"regression": "✗", "improvement": "↑", "unclear": "?", "new": "+", "note": "·"}
    lines = [f"  [yellow]·[/] {literal(note, 1000)}" for note in c.notes]
    for row in c.rows:
        for f in row.findings:
            lines.append(f"  [{STYLE[f.kind]}]{marks[f.kind]} {f.kind}[/] {literal(f.runner)}: {literal(f.message, 1000)}")
    return lines


def verdict(report: Report) -> str:
    """The one-line verdict."""
    regressions, improvements = report.findings("regression"), report.findings("improvement")
    if regressions:
        listed = ", ".join(literal(f"{f.runner} {f.label or f.subject}") for f in regressions[:6])
        more = f" and {len(regressions) - 6} more" if len(regressions) > 6 else ""
        return f"[bold red]FAIL[/]: {len(regressions)} regression(s): {listed}{more}"
    rows = sum(1 for c in report.comparisons for r in c.rows if r.verdict != "new")
    line = f"[bold green]PASS[/]: no regression in {rows} row(s)"
    if unclear := [f for f in report.findings("unclear")]:
        listed = ", ".join(literal(f"{f.runner} {f.label or f.subject}") for f in unclear[:6])
        line += f"; unclear, not judged: {listed}{f' and {len(unclear) - 6} more' if len(unclear) > 6 else ''} (more trials would decide)"
    if improvements:
        line += f"; {len(improvements)} improvement(s) beyond the thresholds: the baseline may be out of date"
    return line
