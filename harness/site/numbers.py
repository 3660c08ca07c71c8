"""How the site writes numbers: the one place that turns a float into the text on the page.

Figures read like the published page: three significant figures below 100 (12.4 ms, 7.03 ms, 0.83 s, 1.87 GiB),
whole numbers with thousands separators from 100 up (189 tok/s, 1,055 tok/s), ratios with two decimals below 10
(1.49×) and whole above (11×), changes as signed percentages with a real minus sign (−27.9%)."""

from __future__ import annotations

import datetime as dt
import math

DASH = "–"  # a value that was not measured
MINUS = "−"  # U+2212, as the published page writes a negative change


def figure(value: float | None) -> str:
    """A measured value without its unit: 12.4, 7.03, 0.83, 189, 1,055; a dash for None, NaN or an infinity."""
    if value is None or not math.isfinite(value):
        return DASH
    if value < 0:
        return MINUS + figure(-value)
    rounded = float(f"{value:.3g}")  # decide the layout after rounding, so 99.96 reads 100, not 100.0
    if rounded >= 100:
        return f"{round(value):,}"
    if rounded >= 1:
        return f"{value:.{2 - math.floor(math.log10(rounded))}f}"
    if rounded >= 0.01 or rounded == 0:
        return f"{value:.2f}"
    return f"{value:.2g}"  # tiny values keep two significant figures rather than read 0.00


def with_unit(value: float | None, unit: str) -> str:
    """12.4 ms, 1,055 tok/s; a bare dash for None, NaN or an infinity."""
    return DASH if value is None or not math.isfinite(value) else f"{figure(value)} {unit}"


def spread(low: float | None, high: float | None, unit: str) -> str | None:
    """The min–max spread, "12.1–12.9 ms"; None when it was not kept."""
    if low is None or high is None:
        return None
    return f"{figure(low)}–{figure(high)} {unit}"


def distance(value: float | None) -> str:
    """Distance from the reference: three significant figures (0.191, 5.98, 0.25, 1.2e-05)."""
    if value is None:
        return "not compared"
    return f"{value:.3g}" if math.isfinite(value) else DASH


def kl(value: float | None) -> str:
    """A KL divergence in nats: two significant figures (0.023, 5.8e-05); a dash when not compared."""
    return DASH if value is None else f"{value:.2g}"


def share(value: float | None) -> str:
    """A share as a percentage with one decimal (99.6%), a dash when not compared."""
    return DASH if value is None else f"{value * 100:.1f}%"


def times(ratio: float) -> str:
    """A speed ratio: 1.49×, 0.57×, 11×."""
    if not math.isfinite(ratio):
        return DASH
    return f"{ratio:.2f}×" if ratio < 9.995 else f"{ratio:.0f}×"


def change(ratio: float) -> str:
    """A ratio as a signed change: +39.4%, −27.9%."""
    if not math.isfinite(ratio):
        return DASH
    percent = (ratio - 1) * 100
    return f"{'+' if percent >= 0 else MINUS}{abs(percent):.1f}%"


def parameters(count: int) -> str:
    """494.5M, 1.5B, 214.7K."""
    for size, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if count >= size:
            return f"{count / size:.1f}{suffix}"
    return str(count)


def count(n: int, word: str) -> str:
    """A count and its noun: "1 warm-up", "3 warm-ups"."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def when(iso: str) -> str:
    """An ISO 8601 time as "2026-09-28 17:31 UTC"; the text itself when it is not one."""
    try:
        moment = dt.datetime.fromisoformat(iso)
    except ValueError:
        return iso
    if moment.tzinfo is not None:
        moment = moment.astimezone(dt.timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M") + (" UTC" if moment.tzinfo is not None else "")
