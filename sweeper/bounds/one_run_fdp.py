"""The f-DP audit in one run (Mahloujifar, Melis & Chaudhuri, ICML 2025): what a one-run
auditor's guesses prove, read through the Gaussian trade-off curve instead of ε-DP's.

Why beside Steinke et al.'s (`epsilon_one_run`).  Both test the claim "(ε, δ)-DP" from the same
guesses on m canaries (each in the training set with probability 1/2).  Steinke et al. bound
the count of right guesses by a binomial and pay δ through a term 2mδ·(…) that, at the sweep's
δ = 1e-5, caps what even a perfect attack proves (≈ 1.3 for m = 2 000 at α = 0.001); the f-DP
test reads the claim as the μ-GDP curve that gives (ε, δ) and bounds the right guesses by it
directly, so δ enters through μ alone: from the same guesses it proves 1.25–2× as much.

The test (the paper's `audit_rh_with_cap`; the rule of google-deepmind/jax_privacy
`auditing.py`, `_epsilon_one_run_fdp`): with c right of c_cap guesses, start r = α·c/m and
h = α·(c_cap − c)/m; for i = c − 1 … 0, h′ = max(h, f̄⁻¹(r)) with f̄⁻¹(x) = Φ(Φ⁻¹(x) − μ),
r ← min(r + i/(c_cap − i)·(h′ − h), 1), h ← h′ (stopping once h stands still); the claim is
rejected at level α when r + h > c_cap/m.  The audit's ε is the largest ε rejected.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from sweeper.bounds._checks import ArrayLike, Result, check, check_guesses, is_scalar, out

__all__ = ["gaussian_dp_mu_of", "epsilon_one_run_fdp"]


@functools.lru_cache(maxsize=4096)
def _mu_of(eps: float, delta: float) -> float:
    """The μ whose Gaussian curve is (ε, δ)-DP exactly: δ_μ(ε) = δ, increasing in μ."""
    from scipy.optimize import brentq

    from jobs.audits.mechanisms import gaussian_delta

    gap = lambda mu: gaussian_delta(eps, mu) - delta  # noqa: E731
    high = 1.0
    while gap(high) < 0.0:
        high *= 2.0
    return float(brentq(gap, 1e-12, high, xtol=1e-13, rtol=1e-13))


def gaussian_dp_mu_of(epsilon: ArrayLike, delta: ArrayLike) -> Result:
    """The μ of the μ-GDP curve that is exactly (ε, δ)-DP (the inverse of
    `epsilon_of_gaussian_dp` in ε): the curve an (ε, δ) claim is read as here.  δ ∈ (0, 1)."""
    scalar = is_scalar(epsilon, delta)
    e = check("epsilon", epsilon, 0.0, math.inf)
    d = check("delta", delta, 0.0, 1.0, low_open=True, high_open=True)
    e, d = np.broadcast_arrays(e, d)
    return out(np.vectorize(_mu_of, otypes=[float])(e, d), scalar)


def _rejects(eps: float, correct: int, guesses: int, canaries: int, delta: float,
             alpha: float) -> bool:
    """Whether `correct` right of `guesses` guesses on `canaries` reject "(ε, δ)-DP" at α."""
    from scipy.special import ndtr, ndtri

    mu = _mu_of(eps, delta)
    right = alpha * correct / canaries
    wrong = alpha * (guesses - correct) / canaries
    for i in range(correct - 1, -1, -1):
        raised = max(wrong, float(ndtr(ndtri(right) - mu)))
        if raised == wrong:  # neither can move again
            break
        right = min(right + i / (guesses - i) * (raised - wrong), 1.0)
        wrong = raised
    return right + wrong > guesses / canaries


def _epsilon(correct: float, guesses: float, canaries: float, delta: float, alpha: float,
             p: float) -> float:
    if p != 0.5 or delta == 0.0:
        return math.nan  # proven for canaries in with probability 1/2; μ-GDP is no ε-DP at δ = 0
    from scipy.optimize import brentq

    v, r, m = int(correct), int(guesses), int(canaries)
    if v == 0 or not _rejects(0.0, v, r, m, delta, alpha):
        return 0.0
    low, high = 0.0, 1.0
    while _rejects(high, v, r, m, delta, alpha):
        low, high = high, 2.0 * high
    gap = lambda eps: 1.0 if _rejects(eps, v, r, m, delta, alpha) else -1.0  # noqa: E731
    return float(brentq(gap, low, high, xtol=1e-9))


def epsilon_one_run_fdp(correct: ArrayLike, guesses: ArrayLike, canaries: ArrayLike, *,
                        delta: ArrayLike, alpha: ArrayLike = 0.05,
                        p: ArrayLike = 0.5) -> Result:
    """The largest ε whose claim (ε, δ)-DP the guesses reject at level α (see the module's
    docstring): `correct` right of `guesses` guesses ("in" or "out", the others abstained) on
    `canaries` canaries each in the training set with probability p.  NaN at p ≠ 1/2 (the
    paper's derivation) and at δ = 0; 0 without a right guess."""
    scalar = is_scalar(correct, guesses, canaries, delta, alpha, p)
    v, r, m, d, level, prior = check_guesses(correct, guesses, canaries, delta, alpha, p)
    return out(np.vectorize(_epsilon, otypes=[float])(v, r, m, d, level, prior), scalar)
