"""An audit valid at any sampling rate, in DP-SGD's own family: which noise levels the canaries'
observations rule out.

Why.  The Gaussian-DP audit is a proof only at q = 1, where DP-SGD is exactly a Gaussian
mechanism; below, DP-SGD is T compositions of the Poisson-subsampled Gaussian, whose trade-off
curve is no Gaussian's.  But a correct engine's white-box canary observations are exactly that
mechanism's outputs for one record (a canary's clipped gradient, C, on a coordinate of its own,
its own noise and its own Poisson draws), post-processed: so any test of "in" against "out" on
them meets the mechanism's privacy profile δ(ε′) — for every ε′, FPR + e^{ε′}·FNR ≥ 1 − δ(ε′)
and FNR + e^{ε′}·FPR ≥ 1 − δ(ε′).  A measured (FPR, FNR) pair, at exact one-sided ends with
Bonferroni over the thresholds searched, that breaks this for the profile of noise multiplier
σ′ rules σ′ out, with confidence 1 − α: the engine's effective noise is below σ′.

`family_audit` finds the least σ′ ruled out (σ*: every larger σ′ is ruled out too, a weaker
mechanism's curve lying inside a stronger one's) and returns the ε that DP-SGD at (σ*, q, T)
spends at δ — read from the lower side of Opacus's PRV accountant, so the ε holds as a lower
bound.  The claimed σ itself ruled out (`noise_ruled_out`) is a bug in the engine (less noise, no clipping, other draws than
claimed); an accountant told another q than the training took is not one (the accounting check,
`sweeper.cells.overspent`, reads that).  σ′ is searched on a fixed grid relative to the claimed
σ (`GRID`), so that every profile is computed once per (σ, q, T) and shared by every cell.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from sweeper.bounds._checks import check, check_counts, check_delta, check_level

__all__ = ["family_audit", "noise_ruled_out"]

#: σ′ / σ on the grid searched: 2^(k/8), k = −16 … 24 (σ/4 … 8σ).  Below σ/4 the PRV's domain
#: grows past seconds a profile; a noise ruled out even there is a bug by far, proven as ε(σ/4).
GRID = tuple(2.0 ** (k / 8) for k in range(-16, 25))
#: The ε′ at which each profile is read: a pair breaks the profile when it does so at one of them.
EPSILON_PRIMES = np.linspace(0.0, 40.0, 801)


#: The PRV accountant's ε accuracy for these profiles: coarser than `bound_profile`'s (0.01),
#: five times cheaper; still an upper bound on δ (its error is added), so the test stays valid.
EPS_ERROR = 0.05


def _profile(sigma: float, sample_rate: float, steps: int):
    from sweeper.bounds.profile import dpsgd_privacy_profile

    return dpsgd_privacy_profile(sigma, sample_rate, steps, eps_error=EPS_ERROR)


@functools.lru_cache(maxsize=1024)
def _limits(sigma: float, sample_rate: float, steps: int) -> np.ndarray:
    """1 − δ(ε′) at `EPSILON_PRIMES` for the profile of (σ, q, T)."""
    return 1.0 - np.asarray(_profile(sigma, sample_rate, steps).delta_at(EPSILON_PRIMES), float)


_GROWTH = np.exp(EPSILON_PRIMES)


def _ruled_out(fpr_high: np.ndarray, fnr_high: np.ndarray, sigma: float, sample_rate: float,
               steps: int) -> bool:
    """Whether one of the (FPR, FNR) upper ends breaks the profile of (σ, q, T) at some ε′."""
    limit = _limits(sigma, sample_rate, steps)[None, :]
    a, b = fpr_high[:, None], fnr_high[:, None]
    return bool(np.any(a + _GROWTH * b < limit) or np.any(b + _GROWTH * a < limit))


def _epsilon_low(sigma: float, sample_rate: float, steps: int, delta: float) -> float:
    """The least ε with δ(ε) ≤ `delta` on the profile's lower side (PRV: δ̂ shifted the other way
    by its errors; exact at q = 1)."""
    profile = _profile(sigma, sample_rate, steps)
    shift_eps = getattr(profile, "eps_error", 0.0)
    shift_delta = getattr(profile, "delta_error", 0.0)
    grid = np.linspace(0.0, 60.0, 6001)
    lower = np.asarray(profile.delta_at(grid + 2 * shift_eps), float) - 2 * shift_delta
    below = np.flatnonzero(lower <= delta)
    return float(grid[below[0]]) if below.size else math.inf


def _upper_ends(tp, fp, positives: int, negatives: int, alpha: float) -> tuple[np.ndarray, ...]:
    """One-sided upper ends of FPR and of FNR (= 1 − TPR's lower end), exact, each at
    alpha/(2·thresholds)."""
    from scipy.stats import beta

    tp, fp = check_counts("tp", tp).ravel(), check_counts("fp", fp).ravel()
    level = float(check_level(alpha)) / (2.0 * max(1, tp.size))
    fpr_high = np.where(fp < negatives, beta.ppf(1 - level, fp + 1, negatives - fp), 1.0)
    fnr = positives - tp
    fnr_high = np.where(fnr < positives, beta.ppf(1 - level, fnr + 1, positives - fnr), 1.0)
    return fpr_high, fnr_high


def _training(noise_multiplier: float, sample_rate: float, steps: int) -> tuple[float, float, int]:
    return (float(check("noise_multiplier", noise_multiplier, 0.0, math.inf, low_open=True,
                        high_open=True)),
            float(check("sample_rate", sample_rate, 0.0, 1.0, low_open=True)),
            int(check_counts("steps", steps)))


def noise_ruled_out(tp: np.ndarray, fp: np.ndarray, positives: int, negatives: int, *,
                    noise_multiplier: float, sample_rate: float, steps: int,
                    alpha: float) -> bool:
    """Whether the counts of a threshold search rule out DP-SGD at (σ, q, T) itself, at level
    alpha: the engine's noise is provably less than it claims."""
    fpr_high, fnr_high = _upper_ends(tp, fp, positives, negatives, alpha)
    return _ruled_out(fpr_high, fnr_high, *_training(noise_multiplier, sample_rate, steps))


def family_audit(tp: np.ndarray, fp: np.ndarray, positives: int, negatives: int, *,
                 noise_multiplier: float, sample_rate: float, steps: int, delta: float,
                 alpha: float) -> float:
    """The ε proven at δ with confidence 1 − alpha from the counts of a threshold search (TP,
    FP at each of the thresholds searched) on `positives` canaries in and `negatives` out, each
    end at alpha/(2·thresholds): DP-SGD's ε at (σ*, q, T) for the least σ* ruled out.  0 when no
    σ′ of the grid is ruled out, and that of σ/4 when every one is."""
    fpr_high, fnr_high = _upper_ends(tp, fp, positives, negatives, alpha)
    d = float(check_delta(delta))
    sigma, q, count = _training(noise_multiplier, sample_rate, steps)

    def ruled(k: int) -> bool:
        return _ruled_out(fpr_high, fnr_high, sigma * GRID[k], q, count)

    if not ruled(len(GRID) - 1):
        return 0.0
    low, high = 0, len(GRID) - 1  # invariant: GRID[high] ruled out
    if ruled(low):
        high = low
    while high - low > 1:
        middle = (low + high) // 2
        if ruled(middle):
            high = middle
        else:
            low = middle
    return _epsilon_low(sigma * GRID[high], q, count, d)
