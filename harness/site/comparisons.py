"""What the page compares: the metrics it charts and tables (harness/metrics.py marks which), the headline cards
(Linnet against the stack it replaces), and the one function that turns two measured figures into a ratio. Every comparison is computed from the rows; the only
stack names here are the card table's, which says which rows each card puts side by side."""

from __future__ import annotations

import math
from dataclasses import dataclass
from fnmatch import fnmatchcase

from harness import stats
from harness.metrics import METRIC, METRICS, Metric
from harness.results import Row
from harness.site import numbers
from runners import GROUPS

TTFT, DECODE, SERVING = METRIC["ttft_ms"], METRIC["decode_tok_s"], METRIC["serving_tok_s"]
LOAD, FIRST_CALL, MEMORY, ENERGY = METRIC["load_s"], METRIC["first_call_s"], METRIC["peak_mem_gib"], METRIC["energy_j_per_tok"]
# One chart per metric, in page order; the table shows first-call time beside load time (harness/metrics.py).
CHARTED = tuple(m for m in METRICS if m.chart)
TABLED = tuple(m for m in METRICS if m.table)


@dataclass(frozen=True)
class Card:
    title: str  # what is compared, the card's heading
    metric: Metric  # the figure compared
    against: str  # runner id of the other side
    runners: str = "*"  # glob over runner ids of Linnet's side; its fastest matching row stands for it
    peer: str | None = None  # when set, Linnet's side is only rows whose peer is this runner id
    as_change: bool = False  # an export against the original checkpoint in the same engine: a signed percentage


CARDS = (
    Card("vs vLLM, one request", DECODE, against="vllm", runners="linnet-*"),
    Card("vs the reference, in PyTorch", DECODE, against="transformers-compiled", peer="transformers-compiled"),
    Card("vs KerasHub, in JAX", DECODE, against="kerashub", peer="kerashub"),
    Card("exported to vLLM, SGLang, TGI", DECODE, against="vllm", runners="vllm-linnet-export", as_change=True),
    Card("vs vLLM, serving", SERVING, against="serve-vllm", runners="serve-linnet-*"),
    Card("exported, serving", SERVING, against="serve-vllm", runners="serve-vllm-linnet-export", as_change=True),
    Card("vs vLLM, behind Triton", SERVING, against="serve-triton-vllm", runners="serve-triton-linnet"),
)


@dataclass(frozen=True)
class Comparison:
    metric: Metric  # what was compared
    ours: Row  # Linnet's side
    theirs: Row  # the other side
    ratio: float  # how many times better ours is (see advantage)
    as_change: bool  # written as a percentage change rather than a multiple
    interval: tuple[float, float] | None = None  # the ratio's 95% interval, when both rows kept trials' samples
    in_turns: bool = False  # ratio and interval from the rows' peer duet (run pairs timed in turns), not their trials

    @property
    def clear(self) -> bool:
        """False when the interval holds 1: the data cannot tell which side is ahead."""
        return self.interval is None or not stats.holds(*self.interval)

    @property
    def interval_text(self) -> str | None:
        """ "95% CI 1.62–1.95" (as changes for an export: "95% CI −5.0% to +3.1%"); None without an interval."""
        if self.interval is None:
            return None
        low, high = self.interval
        turns = ", timed in turns" if self.in_turns else ""
        if self.as_change:
            return f"95% CI {numbers.change(low)} to {numbers.change(high)}{turns}"
        return f"95% CI {numbers.times(low).rstrip('×')}–{numbers.times(high)}{turns}"

    @property
    def verdict(self) -> str:
        """The card's headline: "1.49× faster", "0.57× (slower)", "−27.9% slower", or "no clear difference" when the
        interval holds 1."""
        if not self.clear:
            return "no clear difference"
        if self.as_change:
            return f"{numbers.change(self.ratio)} {self.metric.better if self.ratio >= 1 else self.metric.worse}"
        if self.ratio >= 1:
            return f"{numbers.times(self.ratio)} {self.metric.better}"
        return f"{numbers.times(self.ratio)} ({self.metric.worse})"  # 0.57 times the other's speed

    @property
    def against_text(self) -> str:
        """The table's column: "0.57× transformers, compiled", "−27.9% from vLLM", with the interval when there is one:
        "1.80× transformers, compiled (95% CI 1.62–1.95)", "… no clear difference (95% CI 0.94–1.12)"."""
        text = (f"{numbers.change(self.ratio)} from {self.theirs.label}" if self.as_change
                else f"{numbers.times(self.ratio)} {self.theirs.label}")  # fmt: skip
        if self.interval is None:
            return text
        return f"{text}{'' if self.clear else ', no clear difference'} ({self.interval_text})"


def advantage_interval(ours: Row, theirs: Row, metric: Metric) -> tuple[float, float] | None:
    """The 95% interval of the advantage (harness/stats.py), when both rows kept the metric's samples over 2 trials or
    more (one trial's interval holds only the noise within one process)."""
    a, b = ours.samples.get(metric.key, []), theirs.samples.get(metric.key, [])
    if len(a) < 2 or len(b) < 2:
        return None
    _, low, high = stats.ratio_interval(a, b) if metric.higher_is_better else stats.ratio_interval(b, a)
    return (low, high) if math.isfinite(low) and math.isfinite(high) and low > 0 else None


def compare(ours: Row, theirs: Row, metric: Metric, as_change: bool) -> Comparison:
    if (in_turns := duet_advantage(ours, theirs, metric)) is not None:
        ratio, low, high = in_turns
        return Comparison(metric, ours, theirs, ratio, as_change, (low, high), in_turns=True)
    ratio = advantage(metric.ratio_of(ours), metric.ratio_of(theirs), metric)
    return Comparison(metric, ours, theirs, ratio, as_change, advantage_interval(ours, theirs, metric))


def duet_advantage(ours: Row, theirs: Row, metric: Metric) -> tuple[float, float, float] | None:
    """(advantage, low, high) from the row's peer duet with `theirs` (stats.run_pair_ratio_interval: the median of
    the run pairs' ratios), when it has one for this metric; None otherwise."""
    duet = ours.peer_duet
    if duet is None or duet.peer != theirs.runner or metric.key not in duet.ours or metric.key not in duet.theirs:
        return None
    a, b = duet.ours[metric.key], duet.theirs[metric.key]
    if [len(t) for t in a] != [len(t) for t in b] or not stats.pooled(a) or min(stats.pooled(a) + stats.pooled(b)) <= 0:
        return None
    middle, low, high = stats.ratio_interval(a, b, paired=True, run_pairs=True)
    if not metric.higher_is_better:  # a time: the advantage is theirs / ours
        middle, low, high = 1 / middle, 1 / high, 1 / low
    return (middle, low, high) if all(math.isfinite(x) and x > 0 for x in (middle, low, high)) else None


def advantage(ours: float, theirs: float, metric: Metric) -> float:
    """How many times better ours is: ours/theirs for a rate, theirs/ours for a time or a size (above 1: ours wins)."""
    return ours / theirs if metric.higher_is_better else theirs / ours


def best_row(rows: list[Row], metric: Metric) -> Row | None:
    """The row with the best measured value of the metric, or None when none measured it."""
    measured = [r for r in rows if metric.value(r) is not None]
    if not measured:
        return None
    pick = max if metric.higher_is_better else min
    return pick(measured, key=metric.value)


def selects(card: Card, row: Row) -> bool:
    """Whether the row may stand for Linnet's side of the card."""
    return row.runner != card.against and fnmatchcase(row.runner, card.runners) and card.peer in (None, row.peer)


def headline(card: Card, rows: list[Row]) -> Comparison | None:
    """The card's comparison: the best selected row against the card's other side; None when either was not measured."""
    theirs = next((r for r in rows if r.runner == card.against and card.metric.ratio_of(r)), None)
    ours = best_row([r for r in rows if selects(card, r) and card.metric.ratio_of(r)], card.metric)
    if theirs is None or ours is None:
        return None
    return compare(ours, theirs, card.metric, card.as_change)


def against_peer(row: Row, rows: list[Row]) -> Comparison | None:
    """The row against the stack its `peer` field names, on its headline speed (serving throughput for a serving
    row, decode speed otherwise); None without a peer or when either side lacks the figure."""
    if row.peer is None:
        return None
    metric = SERVING if SERVING.key in row.metrics else DECODE
    peer = next((r for r in rows if r.runner == row.peer), None)
    if peer is None or metric.ratio_of(row) is None or metric.ratio_of(peer) is None:
        return None
    as_change = any(card.as_change and card.against == row.peer and selects(card, row) for card in CARDS)
    return compare(row, peer, metric, as_change)


def in_page_order(rows: list[Row]) -> list[Row]:
    """Rows by section in GROUPS order (unknown sections last), keeping the result file's order within one."""
    rank = {g: i for i, g in enumerate(GROUPS)}
    return sorted(rows, key=lambda r: rank.get(r.group, len(GROUPS)))
