"""The statistics on synthetic samples with known answers."""

import math
import numpy as np
import pytest

from harness import stats


def draw(rng, center, trials=5, runs=10, between=0.10, within=0.03):
    """Trials of runs: each trial (process) has its own level around center (between-process noise), runs around it."""
    return [list(center * (1 + rng.normal(0, between)) * (1 + rng.normal(0, within, runs))) for _ in range(trials)]


def test_the_interval_covers_the_true_median_about_95_times_in_100():
    rng = np.random.default_rng(1)
    covered = sum(stats.holds(*stats.interval(draw(rng, 100.0, trials=10)), 100.0) for _ in range(100))
    assert 85 <= covered <= 100  # a bootstrap over 10 trials is a little narrow, never wildly so


def test_the_summary_keeps_median_min_max_over_all_samples_and_adds_the_interval():
    trials = [[1.0, 2.0, 3.0], [4.0, 5.0]]
    out = stats.summary("decode_tok_s", trials)
    assert out["decode_tok_s"] == 3.0 and out["decode_tok_s_min"] == 1.0 and out["decode_tok_s_max"] == 5.0
    low, high = out["decode_tok_s_ci"]
    assert 1.0 <= low <= 3.0 <= high <= 5.0
    assert stats.summary("serving_tok_s", [[668.0]])["serving_tok_s_ci"] is None  # one value has no interval


def test_the_same_samples_give_the_same_interval():
    trials = draw(np.random.default_rng(2), 50.0)
    assert stats.interval(trials) == stats.interval(trials)
    assert stats.ratio_interval(trials, trials) == stats.ratio_interval(trials, trials)


def test_equal_distributions_give_a_ratio_interval_holding_1():
    rng = np.random.default_rng(3)
    held = 0
    for _ in range(40):
        ratio, low, high = stats.ratio_interval(draw(rng, 2000.0), draw(rng, 2000.0))
        held += stats.holds(low, high)
        assert low <= ratio <= high
    assert held >= 34  # about 95 in 100


def test_a_known_ratio_is_inside_its_interval():
    rng = np.random.default_rng(4)
    ratio, low, high = stats.ratio_interval(draw(rng, 1800.0, trials=8), draw(rng, 1000.0, trials=8))
    assert low < 1.8 < high and 1.6 < ratio < 2.0 and not stats.holds(low, high)


def test_pairing_cancels_drift_that_hits_both_sides_alike():
    rng = np.random.default_rng(5)
    drift = 1 + rng.normal(0, 0.2, 6)  # each pair of trials ran in its own slow or fast spell
    base = [list(1000 * d * (1 + rng.normal(0, 0.01, 10))) for d in drift]
    cand = [list(850 * d * (1 + rng.normal(0, 0.01, 10))) for d in drift]
    _, low_u, high_u = stats.ratio_interval(cand, base)
    _, low_p, high_p = stats.ratio_interval(cand, base, paired=True)
    assert high_p - low_p < (high_u - low_u) / 3
    assert low_p < 0.85 < high_p and stats.judge(low_p, high_p, 0.05, higher_is_better=True) == "regression"
    with pytest.raises(ValueError, match="as many trials"):
        stats.ratio_interval(cand, base[:3], paired=True)


def test_unstable_when_the_trial_medians_disagree_beyond_the_bound():
    steady = [[100.0, 101.0], [99.0, 100.0], [100.5, 100.0]]
    jumpy = [[100.0, 101.0], [140.0, 139.0], [80.0, 82.0]]
    assert not stats.unstable(steady) and stats.unstable(jumpy)
    assert not stats.unstable([[1.0, 100.0]])  # one trial: no between-process spread to judge
    assert stats.trial_cv([[1.0]]) is None


@pytest.mark.parametrize(
    "low, high, higher_is_better, verdict",
    [
        (0.80, 0.90, True, "regression"),  # every value a slowdown beyond 5%
        (0.80, 0.97, True, "unclear"),  # a slowdown under 5% not excluded, nor one beyond it
        (0.90, 1.10, True, "unclear"),
        (0.96, 1.04, True, "same"),  # within 5% either way
        (0.951, 0.99, False, "same"),
        (1.10, 1.20, True, "improvement"),
        (1.10, 1.20, False, "regression"),  # a time 10-20% longer
        (0.80, 0.90, False, "improvement"),
        (float("nan"), 1.0, True, "unclear"),
        (0.0, 0.5, True, "unclear"),
    ],
)
def test_judge_by_where_the_interval_lies_against_the_threshold(low, high, higher_is_better, verdict):
    assert stats.judge(low, high, 0.05, higher_is_better) == verdict


def test_judge_with_a_threshold_of_1_or_more_sees_no_improvement():
    assert stats.judge(5.0, 6.0, 1.0, True) == "same"


def test_trials_to_decide_shrink_the_interval_to_the_distance_from_the_threshold():
    """A half-width that shrinks as 1/sqrt(trials) decides once it is under the middle's distance to the band."""
    needed = stats.trials_to_decide(0.7, 0.47, 1.06, 0.05, 2)
    half, distance = (math.log(1.06) - math.log(0.47)) / 2, math.log(0.95) - math.log(0.7)
    assert needed == math.ceil(2 * (half / distance) ** 2) and half * math.sqrt(2 / needed) <= distance
    assert stats.trials_to_decide(0.7, 0.6, 0.96, 0.05, 2) < needed  # a narrower interval needs fewer
    assert stats.trials_to_decide(0.95, 0.8, 1.1, 0.05, 2) is None  # on the edge: no number of trials decides
    assert stats.trials_to_decide(1.0, 0.9, 1.1, 0.05, 3) >= 4  # always more than it has
