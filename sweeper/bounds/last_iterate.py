"""The last iterate's heuristic ε (Steinke, Zhang, Nasr, Jagielski et al., ICLR 2025, "The last
iterate advantage"): what a final-model audit could reach at best.

Why.  The accountant's ε (`epsilon_spent`) is DP-SGD's with every iterate released; a model a
user ships releases only the last.  For a linear model with a canary whose clipped gradient (norm
1) points along a coordinate no other record touches, the final iterate's coordinate is, up to
public shifts and scales, P = Binomial(T, q) + N(0, σ²T) when the canary is in and
Q = N(0, σ²T) when it is out (each of T steps draws it with probability q, each adds N(0, σ²)).
The heuristic ε at δ is that pair's: δ(ε) = max(H_{e^ε}(P‖Q), H_{e^ε}(Q‖P)),
H_γ(P‖Q) = ∫(p − γq)₊.  Not a proof for deep models (the paper gives counterexamples), but the
final-model audits published stay under it: it is the ceiling such audits aim at, drawn between
them and the accountant's ε.

How.  The likelihood ratio L(x) = Σ_k b_k·exp((k·x − k²/2)/s²), s² = σ²T, b_k the binomial
pmf, is increasing in x, so p > γq exactly above the root x₁ of L = γ and q > γp exactly below
the root x₂ of L = 1/γ: H_γ(P‖Q) = Σ_k b_k·Φ̄((x₁ − k)/s) − γ·Φ̄(x₁/s) and
H_γ(Q‖P) = Φ(x₂/s) − γ·Σ_k b_k·Φ((x₂ − k)/s) (0 when L never falls to 1/γ: L ≥ (1 − q)^T).
At q = 1, P = N(T, σ²T): the Gaussian mechanism with μ = √T/σ.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from sweeper.bounds._checks import (ArrayLike, Result, check, check_counts, check_delta,
                                    is_scalar, out)

__all__ = ["last_iterate_delta", "last_iterate_epsilon"]


class _LastIterate:
    """The pair (P, Q) of one (σ, q, T), its log-likelihood ratio and both hockey sticks."""

    def __init__(self, sigma: float, q: float, steps: int):
        from scipy.stats import binom

        k = np.arange(steps + 1, dtype=float)
        with np.errstate(divide="ignore"):
            log_b = binom.logpmf(k, steps, q)
        keep = log_b > -745.0  # weights under e^-745 are 0 in float64 anyway
        self.k, self.log_b, self.b = k[keep], log_b[keep], np.exp(log_b[keep])
        self.s = sigma * math.sqrt(steps)
        self.floor = float(log_b[0]) if q < 1.0 else -math.inf  # log L(−∞) = log b_0

    def log_ratio(self, x: float) -> float:
        return _log_sum_exp(self.log_b + (self.k * x - self.k ** 2 / 2.0) / self.s ** 2)

    def root(self, level: float) -> float:
        """The x with log L(x) = level (level above `floor`), L increasing."""
        from scipy.optimize import brentq

        gap = lambda x: self.log_ratio(x) - level  # noqa: E731
        low, high = -self.s - 1.0, self.k[-1] + self.s + 1.0
        while gap(low) > 0.0:
            low *= 2.0
        while gap(high) < 0.0:
            high *= 2.0
        return float(brentq(gap, low, high, xtol=1e-13, rtol=1e-15, maxiter=500))

    def delta(self, eps: float) -> float:
        """δ(ε), with e^ε kept in log space: each γ-term is e^{ε + log Φ(·)}, which stays finite
        where e^ε alone overflows (ε past ≈ 709, as tiny noise gives)."""
        from scipy.special import log_ndtr, ndtr

        s = self.s
        x1 = self.root(eps)
        forward = float(np.sum(self.b * ndtr((self.k - x1) / s))) - _exp(eps + log_ndtr(-x1 / s))
        backward = 0.0
        if -eps > self.floor:
            x2 = self.root(-eps)
            tail = _log_sum_exp(self.log_b + log_ndtr((x2 - self.k) / s))
            backward = float(ndtr(x2 / s)) - _exp(eps + tail)
        return min(1.0, max(forward, backward, 0.0))


def _log_sum_exp(values: np.ndarray) -> float:
    """log Σ e^v, the largest term factored out (scipy's `logsumexp`, without its per-call
    dispatch: 58 µs against 4 µs a call, and the root finders call it ~40 times a root)."""
    top = float(np.max(values))
    if math.isinf(top):
        return top
    return top + math.log(float(np.sum(np.exp(values - top))))


def _exp(log_value: float) -> float:
    """e^x capped at 1: each is subtracted from a probability at most 1, and a value above 1
    leaves a hockey stick ≤ 0, read as 0 either way."""
    return math.exp(min(log_value, 0.0))


@functools.lru_cache(maxsize=256)
def _pair(sigma: float, q: float, steps: int) -> _LastIterate:
    return _LastIterate(sigma, q, steps)


def _training(noise_multiplier, sample_rate, steps):
    sigma = check("noise_multiplier", noise_multiplier, 0.0, math.inf, low_open=True,
                  high_open=True)
    q = check("sample_rate", sample_rate, 0.0, 1.0, low_open=True)
    count = check_counts("steps", steps)
    if np.any(count < 1):
        raise ValueError(f"steps must be at least 1; got steps={float(np.min(count)):g}")
    return sigma, q, count


def _delta(eps: float, sigma: float, q: float, steps: float) -> float:
    return 0.0 if math.isinf(eps) else _pair(sigma, q, int(steps)).delta(eps)


def last_iterate_delta(epsilon: ArrayLike, noise_multiplier: ArrayLike, sample_rate: ArrayLike,
                       steps: ArrayLike) -> Result:
    """The last iterate's heuristic privacy profile δ(ε) = max(H_{e^ε}(P‖Q), H_{e^ε}(Q‖P)) of
    DP-SGD at noise multiplier σ, sampling rate q and `steps` T (module docstring); decreasing
    in ε, 0 at ε = ∞."""
    scalar = is_scalar(epsilon, noise_multiplier, sample_rate, steps)
    eps = check("epsilon", epsilon, 0.0, math.inf)
    args = np.broadcast_arrays(eps, *_training(noise_multiplier, sample_rate, steps))
    return out(np.vectorize(_delta, otypes=[float])(*args), scalar)


@functools.lru_cache(maxsize=1024)
def _epsilon(sigma: float, q: float, steps: float, delta: float) -> float:
    from scipy.optimize import brentq

    if delta == 0.0:
        return math.inf  # Gaussian noise: δ(ε) > 0 at every finite ε
    pair = _pair(sigma, q, int(steps))
    gap = lambda eps: pair.delta(eps) - delta  # noqa: E731
    if gap(0.0) <= 0.0:
        return 0.0
    low, high = 0.0, 1.0
    while gap(high) > 0.0:
        low, high = high, 2.0 * high
    return float(brentq(gap, low, high, xtol=1e-12, rtol=1e-12))


def last_iterate_epsilon(noise_multiplier: ArrayLike, sample_rate: ArrayLike, steps: ArrayLike,
                         delta: ArrayLike) -> Result:
    """The last iterate's heuristic ε at δ: the least ε with `last_iterate_delta` ≤ δ.

    At q = 1 the Gaussian mechanism's ε with μ = √T/σ; below, under the accountant's ε for
    (σ, q, T), which releases every iterate.  0 when δ ≥ δ(0); ∞ at δ = 0.  Cached per
    (σ, q, T, δ): every cell of a sweep's ε shares one.
    """
    scalar = is_scalar(noise_multiplier, sample_rate, steps, delta)
    args = np.broadcast_arrays(*_training(noise_multiplier, sample_rate, steps),
                               check_delta(delta))
    return out(np.vectorize(lambda *a: _epsilon(*map(float, a)), otypes=[float])(*args), scalar)
