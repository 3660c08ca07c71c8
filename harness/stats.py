"""Statistics over trials: a row's raw samples are {metric: [[run values of trial 1], [trial 2], ...]}, each trial a
fresh process. On a busy machine processes differ far more than runs within one process, so every interval here is a
two-level bootstrap: resample the trials (with replacement), then the runs within each chosen trial, and take the
median of what was drawn. 95% percentile intervals from BOOTSTRAP_RESAMPLES draws of a fixed seed, so the same
samples always give the same interval.

- interval(trials): a metric's 95% interval of its median;
- ratio_interval(a, b): the interval of median(a) / median(b), e.g. candidate / baseline, or Linnet / the stack it
  replaces; `paired` resamples the same trial indices on both sides, for runs made side by side (the gate);
- unstable(trials): whether the trials disagree beyond UNSTABLE_CV (see there);
- judge(interval, ...): what an interval of a ratio says against a threshold: a regression or an improvement when it
  lies beyond, the same when it lies within, unclear otherwise (trials_to_decide: about how many would settle it).
With one trial the interval holds only the run-to-run noise of one process: narrower than the truth."""

from __future__ import annotations

import math
import statistics
from typing import Literal, Sequence

import numpy as np

Trials = Sequence[Sequence[float]]  # [[run values of trial 1], [trial 2], ...]

BOOTSTRAP_RESAMPLES = 2000
CONFIDENCE = 0.95
SEED = 20261203  # any fixed number: an interval is a function of its samples

# pyperf warns when a benchmark's standard deviation is above 10% of its mean. Applied here to the trial medians (one
# per process), the spread the intervals rest on: beyond it, one process's figure says little about the next, and the
# row is flagged as unstable. Needs at least 2 trials.
UNSTABLE_CV = 0.10


def clean(trials: Trials) -> list[list[float]]:
    """The trials as lists of floats, empty trials dropped."""
    return [[float(v) for v in t] for t in trials if len(t)]


def pooled(trials: Trials) -> list[float]:
    return [v for t in clean(trials) for v in t]


def summary(name: str, trials: Trials) -> dict[str, float | list[float] | None]:
    """{name: median, name_min, name_max} over every sample, and name_ci: its 95% interval (None for one value,
    which has none: a single serving run, say)."""
    values = pooled(trials)
    return {name: statistics.median(values), f"{name}_min": min(values), f"{name}_max": max(values),
            f"{name}_ci": list(interval(trials)) if len(values) > 1 else None}  # fmt: skip


def resampled_medians(trials: Trials, rng: np.random.Generator, trial_picks: np.ndarray | None = None) -> np.ndarray:
    """BOOTSTRAP_RESAMPLES medians: each draws K trials with replacement (or takes trial_picks, shape (B, K)), then
    from each drawn trial as many runs as the longest trial has, with replacement (every trial weighs the same)."""
    t = clean(trials)
    if not t:
        raise ValueError("no samples")
    k, longest = len(t), max(len(x) for x in t)
    table = np.full((k, longest), np.nan)
    for i, x in enumerate(t):
        table[i, : len(x)] = x
    lengths = np.array([len(x) for x in t])
    picks = rng.integers(0, k, size=(BOOTSTRAP_RESAMPLES, k)) if trial_picks is None else trial_picks
    runs = (rng.random((BOOTSTRAP_RESAMPLES, k, longest)) * lengths[picks][..., None]).astype(int)
    drawn = table[picks[..., None], runs]  # (B, K, longest)
    return np.median(drawn.reshape(BOOTSTRAP_RESAMPLES, -1), axis=1)


def percentile_interval(draws: np.ndarray) -> tuple[float, float]:
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(draws, [tail, 100 - tail])
    return float(low), float(high)


def interval(trials: Trials) -> tuple[float, float]:
    """The 95% interval of the median of the samples."""
    return percentile_interval(resampled_medians(trials, np.random.default_rng(SEED)))


def ratio_interval(a: Trials, b: Trials, paired: bool = False, run_pairs: bool = False) -> tuple[float, float, float]:
    """(median(a) / median(b), low, high): the ratio of medians and its 95% interval. Paired (runs made side by side,
    trial i of a with trial i of b): the same trial indices are drawn on both sides, so that a slow spell that hit
    both halves of a pair cancels; the sides then need the same number of trials. run_pairs (a duet: run j of trial i
    of a made next to run j of trial i of b, harness/duet.py): see run_pair_ratio_interval."""
    ta, tb = clean(a), clean(b)
    if run_pairs:
        if [len(x) for x in ta] != [len(x) for x in tb]:
            raise ValueError("run pairs need as many runs in each trial on both sides")
        return run_pair_ratio_interval(ta, tb)
    rng = np.random.default_rng(SEED)
    if paired:
        if len(ta) != len(tb):
            raise ValueError(f"paired samples need as many trials on both sides, not {len(ta)} and {len(tb)}")
        picks = rng.integers(0, len(ta), size=(BOOTSTRAP_RESAMPLES, len(ta)))
        ma, mb = resampled_medians(ta, rng, picks), resampled_medians(tb, rng, picks)
    else:
        ma, mb = resampled_medians(ta, rng), resampled_medians(tb, rng)
    low, high = percentile_interval(ma / mb)
    return statistics.median(pooled(ta)) / statistics.median(pooled(tb)), low, high


def run_pair_ratio_interval(a: Trials, b: Trials) -> tuple[float, float, float]:
    """(median of a[i][j] / b[i][j], low, high) for runs made in pairs (a duet): each pair's ratio is a sample, and the
    interval is the two-level bootstrap's over those ratios. A pair's two runs share the machine's spell, so their
    ratio is far steadier than either figure; a median of ratios (as in duet benchmarking) rather than a ratio of
    medians, since on this machine a figure's distribution is two-humped (a fast and a slow state) and the median of
    each side may fall on either hump."""
    ratios = [[x / y for x, y in zip(ta, tb)] for ta, tb in zip(clean(a), clean(b))]
    low, high = interval(ratios)
    return statistics.median(pooled(ratios)), low, high


def trial_medians(trials: Trials) -> list[float]:
    return [statistics.median(t) for t in clean(trials)]


def trial_cv(trials: Trials) -> float | None:
    """Standard deviation of the trial medians over their mean; None with fewer than 2 trials."""
    medians = trial_medians(trials)
    if len(medians) < 2 or statistics.fmean(medians) == 0:
        return None
    return statistics.stdev(medians) / abs(statistics.fmean(medians))


def unstable(trials: Trials) -> bool:
    cv = trial_cv(trials)
    return cv is not None and cv > UNSTABLE_CV


def holds(low: float, high: float, value: float = 1.0) -> bool:
    """Whether the interval holds the value: for a ratio, 1 means no clear difference."""
    return low <= value <= high


Verdict = Literal["regression", "improvement", "same", "unclear"]


def band(threshold: float) -> tuple[float, float]:
    """The ratios that are no change beyond the threshold: 1 - threshold .. 1 / (1 - threshold) (the band is its own
    inverse, so it serves rates and times alike)."""
    return 1 - threshold, (1 / (1 - threshold) if threshold < 1 else math.inf)


def judge(low: float, high: float, threshold: float, higher_is_better: bool) -> Verdict:
    """What the interval of candidate / baseline says. Put as the candidate's advantage (the ratio for a rate, its
    inverse for a time or a size; 0.85 = 15% slower), a regression is an interval that excludes every slowdown smaller
    than the threshold: its upper end below 1 - threshold. So unchanged code fails only if its interval misses the
    truth by more than the threshold (rarely: a 95% interval misses 1 at all 2.5% of the time on that side), while a
    slowdown that is larger than the threshold by about two interval half-widths fails almost always. Improvements
    are the mirror image: the lower end above 1 / (1 - threshold). The same: the whole interval within the band (no
    change beyond the threshold either way). Anything else, an interval across an edge of the band (or one that is
    not finite and positive), is unclear: the data cannot tell."""
    if not (math.isfinite(low) and math.isfinite(high) and low > 0 and high > 0):
        return "unclear"
    lo, hi = (low, high) if higher_is_better else (1 / high, 1 / low)
    bottom, top = band(threshold)
    if hi < bottom:
        return "regression"
    if lo > top:
        return "improvement"
    if lo >= bottom and hi <= top:
        return "same"
    return "unclear"


def trials_to_decide(middle: float, low: float, high: float, threshold: float, trials: int) -> int | None:
    """About how many trials a side would likely make an unclear interval decide: its half-width (on a log scale)
    shrinks as 1/sqrt(trials), and it decides once that is under the distance from the middle to the nearest edge of
    the band. None when the middle sits on an edge (no number of trials would) or the figures are not positive."""
    if not all(math.isfinite(x) and x > 0 for x in (middle, low, high)) or trials < 1:
        return None
    edges = [edge for edge in band(threshold) if 0 < edge < math.inf]
    distance = min((abs(math.log(middle) - math.log(edge)) for edge in edges), default=0.0)
    half = (math.log(high) - math.log(low)) / 2
    if distance < 1e-9:
        return None
    return max(trials + 1, math.ceil(trials * (half / distance) ** 2))
