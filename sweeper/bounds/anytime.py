"""Precision intervals that stay valid however often a sweep looks: the sequential frontier's.

Why.  The frontier's interval (`sweeper.reports.stats.pooled_precision`) is Clopper–Pearson's
exact interval of the pooled precision ΣTP/(ΣTP+ΣFP): it holds for a number of trials fixed in
advance.  A sweep that looks after every trial and stops once a cell "looks decided" chooses its
sample size from the data, and then a 95 % interval misses far more often than 5 % of the time
(`tests/test_sweeper/bounds/test_anytime_bounds.py` shows it).  An interval valid at every look at once, a
confidence sequence, stays right at any stopping time.

The method (a choice; see docs/sequential.md): a union bound over looks.  Look k (k = 1, 2, …,
the number of trials pooled) gets the two-sided Clopper–Pearson interval of its cumulative
counts at level 1 − α_k, α_k = α·6/(π²k²).  Σ_k α_k = α, so the chance that any look's interval
misses is at most α: the intervals hold simultaneously over every look, hence at any stopping
time (Darling & Robbins 1967's argument; Howard et al. 2021, §1, call it the naive confidence
sequence).  A betting confidence sequence (Waudby-Smith & Ramdas 2023) is tighter by a constant
factor at large samples but has no closed form for the Binomial's exact ends; this one is exact at
each look, needs only SciPy's Beta quantiles, and is easy to check by hand.

`decide` is the sequential frontier's stopping rule on those intervals, pure so that the runner,
its tests and anyone at a prompt apply the same rule.
"""

from __future__ import annotations

import math

import numpy as np

from sweeper.bounds._checks import ArrayLike, check, check_counts

__all__ = ["look_alpha", "anytime_precision_interval", "decide", "DECISIONS"]

#: What `decide` returns, and what each says (the frontier's `decision` column).
DECISIONS = {
    "violation": "the interval lies wholly above U: the data prove a precision above the bound",
    "below": "the interval lies wholly below U − margin: the attack stays clear of the bound",
    "width": "the interval is narrower than the goal's width",
    "": "undecided",
}


def look_alpha(look: ArrayLike, alpha: float) -> np.ndarray:
    """The error look k (1, 2, …) may spend: α·6/(π²k²), which sums to α over every look."""
    k = np.asarray(look, float)
    if np.any(k < 1):
        raise ValueError(f"look must be 1 or more; got {k[k < 1].flat[0]:g}")
    return alpha * 6.0 / (math.pi ** 2 * k ** 2)


def anytime_precision_interval(tp: ArrayLike, fp: ArrayLike, level: float = 0.95
                               ) -> tuple[np.ndarray, np.ndarray]:
    """The precision interval after each look, valid at every look at once at `level`.

    Args:
        tp: cumulative true positives after each look, along the last axis (look k = index
            k − 1: the trials pooled so far); leading axes are independent sequences (a
            simulation's, say).  Non-decreasing along the last axis.
        fp: cumulative false positives, shaped as `tp`.
        level: 1 − α: the chance that every look's interval holds the precision.

    Returns:
        (low, high), each shaped like the counts: look k's two-sided Clopper–Pearson interval of
        tp/(tp + fp) at level 1 − α_k (`look_alpha`).  NaN where nothing was flagged yet.

    Assumes what the fixed-sample interval assumes: each flagged record is a member with the
    same probability (the precision), independently of every other flagged record, and of how
    many records each trial flags.  Trials are independent trainings of the same cell, so the
    pooled TP is a Binomial draw of ΣTP+ΣFP given those counts; records flagged by the same
    trial's model are not strictly independent (the fixed-sample interval shares that
    approximation).  Looks are counted, not chosen: look k is the k-th trial pooled, whether or
    not it flagged anything.
    """
    tp, fp = np.asarray(check_counts("tp", tp), float), np.asarray(check_counts("fp", fp), float)
    alpha = 1.0 - float(check("level", level, 0.0, 1.0, low_open=True, high_open=True))
    tp, fp = np.broadcast_arrays(tp, fp)
    if tp.ndim == 0:
        raise ValueError("tp and fp must hold one count per look (a 1-d array at least)")
    looks = np.arange(1, tp.shape[-1] + 1, dtype=float)
    tail = look_alpha(looks, alpha) / 2.0
    return _clopper_pearson(tp, tp + fp, tail)


def _clopper_pearson(k: np.ndarray, n: np.ndarray, tail: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Clopper–Pearson's ends at `tail` each side (`jobs.metrics.clopper_pearson`'s rule, over
    arrays): 0 with no successes, 1 with no failures, NaN with no trials."""
    from scipy.special import betaincinv

    tail = np.broadcast_to(tail, k.shape)
    with np.errstate(invalid="ignore", divide="ignore"):
        low = betaincinv(k, n - k + 1, tail)
        high = betaincinv(k + 1, n - k, 1.0 - tail)
    low = np.where(n == 0, np.nan, np.where(k == 0, 0.0, low))
    high = np.where(n == 0, np.nan, np.where(k == n, 1.0, high))
    return low, high


def decide(low: ArrayLike, high: ArrayLike, bound: ArrayLike, width: float, margin: float
           ) -> np.ndarray:
    """The sequential frontier's goal for each interval: "violation" (wholly above the bound U),
    "below" (wholly below U − margin), "width" (narrower than `width`), or "" (undecided; also
    where the interval is NaN: nothing flagged yet).  The first two are checked first: an
    interval that proves a violation says so even when it is also narrow."""
    low, high, bound = np.broadcast_arrays(np.asarray(low, float), np.asarray(high, float),
                                           np.asarray(bound, float))
    known = ~(np.isnan(low) | np.isnan(high))
    with np.errstate(invalid="ignore"):
        return np.select([known & (low > bound), known & (high < bound - margin),
                          known & (high - low < width)], ["violation", "below", "width"], "")
