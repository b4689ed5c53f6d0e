"""The sequential frontier's intervals (`sweeper.bounds.anytime`): exact at each look by
SciPy's own Clopper–Pearson, and valid under optional stopping by simulation, where the plain
per-look interval (the planted mistake) is not.

Measured at these seeds: 0.983 against 0.759 (run the test's loop by hand to see them)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import beta, binomtest

from sweeper.bounds.anytime import anytime_precision_interval, decide, look_alpha

#: A precision the simulations know, and the looks each sequence may take.
PRECISION, LOOKS, SEQUENCES = 0.6, 40, 3000


def test_each_look_is_scipys_exact_interval_at_its_spent_level():
    """Look k's interval is scipy's exact binomial interval at 1 − α·6/(π²k²): the union bound's
    rule written out by hand, checked against SciPy's own Clopper–Pearson."""
    tp, fp = np.array([3, 3, 9, 20]), np.array([1, 4, 6, 11])
    low, high = anytime_precision_interval(tp, fp, level=0.9)
    for k in range(4):
        spent = 0.1 * 6 / (math.pi ** 2 * (k + 1) ** 2)
        ci = binomtest(int(tp[k]), int(tp[k] + fp[k])).proportion_ci(1 - spent, method="exact")
        assert low[k] == pytest.approx(ci.low, rel=1e-9)
        assert high[k] == pytest.approx(ci.high, rel=1e-9)
    assert look_alpha(np.arange(1, 200_001), 0.05).sum() == pytest.approx(0.05, rel=1e-4)


def test_no_flags_yet_has_no_interval_and_bad_counts_are_refused():
    low, high = anytime_precision_interval([0, 0, 2], [0, 1, 1])
    assert np.isnan(low[0]) and np.isnan(high[0])
    assert low[1] == 0.0 and high[2] < 1.0
    assert decide(low, high, 0.9, 0.1, 0.0).tolist()[0] == ""
    with pytest.raises(ValueError, match="tp must be a non-negative integer"):
        anytime_precision_interval([1.5], [0])
    with pytest.raises(ValueError, match="level must lie in"):
        anytime_precision_interval([1], [0], level=1.0)


def test_decide_reads_the_goal_in_order():
    low, high = np.array([0.62, 0.30, 0.50, 0.40]), np.array([0.70, 0.40, 0.55, 0.60])
    assert decide(low, high, 0.6, 0.1, 0.1).tolist() == ["violation", "below", "width", ""]


def _stopped_coverage(low: np.ndarray, high: np.ndarray, bound: float, width: float) -> float:
    """Peek after every trial, stop at the first decided look (the last when none is), and
    count how often the interval there holds the true precision."""
    decided = decide(low, high, bound, width, 0.0) != ""
    stop = np.where(decided.any(axis=1), decided.argmax(axis=1), low.shape[1] - 1)
    rows = np.arange(low.shape[0])
    at_low, at_high = low[rows, stop], high[rows, stop]
    return float(np.mean((at_low <= PRECISION) & (PRECISION <= at_high)))


def test_coverage_holds_under_optional_stopping_and_the_naive_interval_fails():
    """3 000 sequences of 40 trials, each flagging Poisson(12) records of which a share 0.6 are
    members; the goal's bound U sits at the true precision, so a look stops as soon as its
    interval leaves it (the worst case for optional stopping) or is narrower than 0.08.  The
    anytime interval covers at least 1 − α at the stopping time; the plain per-look 95 %
    Clopper–Pearson interval, stopped the same way, misses far more often than 5 %."""
    rng = np.random.default_rng(49)
    flagged = rng.poisson(12, size=(SEQUENCES, LOOKS))
    members = rng.binomial(flagged, PRECISION)
    tp, fp = members.cumsum(axis=1), (flagged - members).cumsum(axis=1)
    level = 0.95
    low, high = anytime_precision_interval(tp, fp, level)
    assert _stopped_coverage(low, high, PRECISION, 0.08) >= level

    # the planted mistake: each look's own exact 95 % interval, Beta quantiles written out
    with np.errstate(invalid="ignore"):
        naive_low = np.where(tp == 0, 0.0, beta.ppf((1 - level) / 2, tp, fp + 1))
        naive_high = np.where(fp == 0, 1.0, beta.ppf(1 - (1 - level) / 2, tp + 1, fp))
    assert _stopped_coverage(naive_low, naive_high, PRECISION, 0.08) < level - 0.1
    # and without peeking, at a size fixed in advance, the plain interval is right
    last = (naive_low[:, -1] <= PRECISION) & (PRECISION <= naive_high[:, -1])
    assert last.mean() >= level - 0.01
