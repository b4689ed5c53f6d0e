"""The audit direction: which ε an observed attack *proves*, and the bound checked against
mechanisms whose privacy is known exactly.

Why.  A measured precision or (TPR, FPR) pair above what (ε, δ)-DP allows rules that ε out; the
sweep's violation test reads these.  `tightest_bound` is the same comparison made exact: for a
mechanism whose whole privacy profile δ(ε') is known in closed form (jobs/mechanisms.py), the
least bound over every (ε', δ(ε')) pair it meets, which its likelihood-ratio tests must touch and
never exceed if the bound is right.
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np

from sweeper.bounds._checks import (ArrayLike, Result, check, check_delta, check_form,
                                    check_prob, check_rate, is_scalar, out)
from sweeper.bounds.thudi import precision_bound

__all__ = ["epsilon_from_precision", "epsilon_from_rates", "tightest_bound"]


def epsilon_from_precision(precision: ArrayLike, p: ArrayLike) -> Result:
    """The ε an observed precision proves (δ = 0): ln[prec·(1−p) / (p·(1−prec))].

    Inverting U: a precision above U(ε, p) is impossible, so the training cannot have been ε-DP for
    any smaller ε.  Pass the *lower* end of the precision's confidence interval so the claim holds
    with that confidence.  0 when precision ≤ p (no evidence beyond the prior); ∞ when
    precision = 1 (or p = 0 with a positive precision).  NaN precision gives NaN.
    """
    scalar = is_scalar(precision, p)
    prec = check("precision", precision, 0.0, 1.0, allow_nan=True)
    prior = check_prob("p", p)
    prec, prior = np.broadcast_arrays(prec, prior)
    with np.errstate(all="ignore"):
        eps = np.log(prec * (1.0 - prior)) - np.log(prior * (1.0 - prec))
    eps = np.where((prec == 1.0) | (prior == 0.0), math.inf, eps)
    eps = np.where(prec <= prior, 0.0, eps)
    return out(np.where(np.isnan(prec), np.nan, eps), scalar)


def epsilon_from_rates(tpr: ArrayLike, fpr: ArrayLike, delta: ArrayLike = 0.0) -> Result:
    """The ε an attack's (TPR, FPR) proves: max(ln((TPR − δ)/FPR), ln((1 − δ − FPR)/(1 − TPR)), 0).

    (ε, δ)-DP forces TPR ≤ e^ε·FPR + δ and 1 − FPR ≤ e^ε·(1 − TPR) + δ for every test; a measured
    pair violating them for some ε rules that ε out.  Use the interval ends (TPR low, FPR high) to
    make the claim hold with confidence.  A term whose numerator is ≤ 0 proves nothing (skipped);
    a positive numerator over a zero denominator proves ε = ∞.  NaN rates give NaN.
    """
    scalar = is_scalar(tpr, fpr, delta)
    t = check("tpr", tpr, 0.0, 1.0, allow_nan=True)
    f = check("fpr", fpr, 0.0, 1.0, allow_nan=True)
    t, f, d = np.broadcast_arrays(t, f, check_delta(delta))

    def _term(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            value = np.log(numerator) - np.log(denominator)
        value = np.where(denominator == 0.0, math.inf, value)
        return np.where(numerator <= 0.0, -math.inf, value)

    eps = np.maximum.reduce([_term(t - d, f), _term(1.0 - d - f, 1.0 - t), np.zeros_like(t)])
    return out(np.where(np.isnan(t) | np.isnan(f), np.nan, eps), scalar)


class PrivacyProfile(Protocol):
    """What `tightest_bound` needs of a mechanism (jobs.mechanisms' are two): its exact privacy
    profile, and the ε' at which its likelihood-ratio test has a given TPR."""

    def delta_at(self, epsilon_prime): ...

    def tight_epsilon(self, tpr): ...


def tightest_bound(mechanism: PrivacyProfile, p: ArrayLike, tpr: ArrayLike,
                   epsilons: ArrayLike | None = None, *, form: str = "derived") -> Result:
    """min over ε' ≥ 0 of U(ε', p, δ(ε'), tpr): every (ε', δ(ε')) pair the mechanism meets.

    U is `precision_bound` in the given `form`: "derived" (default), which the mechanisms touch,
    or "printed", whose minimum falls *below* the mechanism's exact precision
    (`jobs.mechanisms.precision_at`) for δ > 0, p < 1 (`sweeper.bounds.thudi`).
    Exact when `epsilons` is None: minimizing the derived U means maximizing
    h(ε') = e^-ε'·(s − δ(ε')); since dδ/dε' = −e^ε'·FPR_LR(ε'), h'(ε') = e^-ε'·(TPR_LR(ε') − s),
    and the LR test's TPR falls as ε' grows, so the optimum is where the LR test has TPR s:
    `mechanism.tight_epsilon(s)` (Gaussian: μt − μ²/2 at TPR(t) = s), where U equals that test's
    precision: the bound is touched.  The printed form is the derived one at TPR s/p, so its
    optimum is `tight_epsilon(min(1, s/p))`.  Both candidates and 0 are tried, then a safety grid
    over [0, ε_max] guards the non-smooth profiles (randomized response): both forms are ≥ their
    δ = 0 value, which grows with ε', so past the ε_max where U(ε_max, 0, p) equals the best
    candidate nothing can be lower (capped at 745, where e^-ε' underflows).  Explicit `epsilons`:
    the brute min over them.
    """
    scalar = is_scalar(p, tpr)
    prior, s, form = check_prob("p", p), check_rate("tpr", tpr), check_form(form)
    prior, s = np.broadcast_arrays(prior, s)

    def evaluate(eps):
        d = np.asarray(mechanism.delta_at(eps))
        value = precision_bound(eps, prior[..., None], np.where(d < 1.0, d, 0.0), s[..., None],
                                form=form)
        return np.where(d < 1.0, value, 1.0)  # δ = 1 promises nothing

    if epsilons is not None:
        grid = check("epsilons", epsilons, 0.0, math.inf).ravel()
        return out(evaluate(np.broadcast_to(grid, s.shape + grid.shape)).min(-1), scalar)
    with np.errstate(divide="ignore"):
        printed = np.minimum(1.0, s / prior)
    candidates = np.stack([np.zeros_like(s), np.asarray(mechanism.tight_epsilon(s), float),
                           np.asarray(mechanism.tight_epsilon(printed), float)], -1)
    best = evaluate(candidates).min(-1)
    eps_max = np.minimum(np.asarray(epsilon_from_precision(best, prior)), 745.0)
    return out(np.minimum(best, evaluate(eps_max[..., None] * np.linspace(0.0, 1.0, 513)).min(-1)),
               scalar)
