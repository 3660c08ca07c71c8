"""A row's figures over the runs of one setup, and where they changed.

A point is a row's figure in one run with its interval (Metric.interval: the 95% interval over trials, else the
min–max of the run's runs). A change point is where a row's figure moved beyond both intervals between two consecutive
runs that measured it, the later interval wholly above or below the earlier one: a move bigger than the noise either
run saw, and by more than asv's default threshold (5%), so that a shift too small to matter is not news. A history
is always of one setup (machine, dtype, profile), so runs of different machines never meet here."""

from __future__ import annotations

from dataclasses import dataclass

from harness.site import numbers
from harness.site.comparisons import Metric, in_page_order
from harness.site.context import LoadedRun

# The least relative move that counts as a change (asv's default regressions threshold).
THRESHOLD = 0.05
# The rule in words, as the page states it.
RULE = f"the row's figure moved beyond both runs' intervals, and by more than {THRESHOLD:.0%}, since its previous run"


@dataclass(frozen=True)
class Point:
    run: str  # the run's label on the x axis: "2026-12-04 15:05 · cd28a57"
    value: float
    interval: tuple[float, float, str] | None  # (low, high, what) around the value


@dataclass(frozen=True)
class Change:
    row: str  # the row's label
    metric: Metric
    before: Point
    after: Point
    measured: str  # when the later run started (ISO), to order changes newest first

    @property
    def text(self) -> str:
        """ "Linnet, inductor: decode speed 2,398 → 2,962 tok/s (+23.5%) at 2026-12-04 15:05 · cd28a57"."""
        unit = self.metric.unit
        moved = numbers.change(self.after.value / self.before.value) if self.before.value else numbers.DASH
        return (f"{self.row}: {self.metric.name} {numbers.figure(self.before.value)} → "
                f"{numbers.with_unit(self.after.value, unit)} ({moved}) at {self.after.run}")  # fmt: skip


@dataclass(frozen=True)
class RowHistory:
    label: str  # the row's latest label
    points: tuple[Point, ...]  # one per run that measured it, oldest first
    changes: tuple[Change, ...]


def run_label(run: LoadedRun) -> str:
    """A run as the x axis names it: its start time and the commit it ran ("2026-12-04 15:05 · cd28a57")."""
    commit = run.result.machine.get("git_commit")
    short = commit[:7] if isinstance(commit, str) and commit else "no commit"
    return f"{numbers.when(run.result.created_at).removesuffix(' UTC')} · {short}"


def run_labels(runs: tuple[LoadedRun, ...]) -> list[str]:
    """Every run's label, oldest first; a label that repeats (two runs in one minute on one commit) gets a counter."""
    labels, seen = [], {}
    for run in runs:
        label = run_label(run)
        seen[label] = seen.get(label, 0) + 1
        labels.append(label if seen[label] == 1 else f"{label} ({seen[label]})")
    return labels


def row_histories(runs: tuple[LoadedRun, ...], metric: Metric) -> list[RowHistory]:
    """One history per runner id that measured the metric at least once, in page order, named by its latest label."""
    points: dict[str, list[Point]] = {}
    labels: dict[str, str] = {}
    measured: dict[str, str] = {}  # run label -> when the run started
    for run, label in zip(runs, run_labels(runs)):
        measured[label] = run.result.created_at
        for row in in_page_order(run.result.rows):
            if (value := metric.value(row)) is not None:
                points.setdefault(row.runner, []).append(Point(label, value, metric.interval(row)))
                labels[row.runner] = row.label
    return [RowHistory(labels[runner], tuple(p), tuple(changes(labels[runner], p, metric, measured)))
            for runner, p in points.items()]  # fmt: skip


def changes(label: str, points: list[Point], metric: Metric, measured: dict[str, str]) -> list[Change]:
    return [Change(label, metric, before, after, measured[after.run])
            for before, after in zip(points, points[1:]) if moved(before, after)]  # fmt: skip


def moved(before: Point, after: Point) -> bool:
    """Whether the later figure's interval lies wholly beyond the earlier one's and the figure moved by more than
    THRESHOLD; never without both intervals."""
    if before.interval is None or after.interval is None or before.value <= 0:
        return False
    (low0, high0, _), (low1, high1, _) = before.interval, after.interval
    return (low1 > high0 or high1 < low0) and abs(after.value / before.value - 1) > THRESHOLD
