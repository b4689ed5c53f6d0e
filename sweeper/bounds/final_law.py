"""An audit of the final model alone, through the law of a gradient canary's final displacement:
what hidden-state DP-SGD proves when an adversary crafts a gradient into every step but sees
only the last iterate (Cebere et al., ICLR 2025).

Why.  A Dirac gradient canary owns a weight no record touches; under plain SGD (no momentum, one
learning rate) the final weight moves by the sum of the steps' noisy gradients at it, so its
final displacement in units of the claimed step C/B (`canary_gradient_final`) is

    in:  X = c·Binomial(T, q) + N(0, T·σ′²)        out:  X = N(0, T·σ′²)

for an engine clipping to c·C with noise σ′·C, the claim being c = 1, σ′ = σ.  That pair is the
last iterate's (`sweeper.bounds.last_iterate`) at noise multiplier τ = σ′/c: the mechanism this
canary's coordinate is, exactly, not a heuristic.  Thresholds on X meet the pair only through one
(FPR, FNR) pair and prove 0.27–0.84 of it at q ≈ 0.1 (docs/auditing.md); its law is known for
every (c, σ′), so the canaries bound both instead:

* the out canaries' Σ X² ~ T·σ′²·χ²_n bounds σ′ from above (exact χ² quantile, at alpha/2);
* the in canaries' Σ X = c·Binomial(n·T, q) + N(0, n·T·σ″²) bounds c from below at that noise
  (the exact tail, summed over the binomial, at alpha/2); a larger σ″ only lowers the bound, so
  the largest noise left is the worst case.

The engine is then at most τ* = σ′_max / c_min, and the ε proven is the last iterate's at τ*:
a lower bound on the engine's own ε (the final model is a post-processing of every iterate),
which a correct engine keeps under the last iterate's ε at σ, itself under the accountant's.
Like `sweeper.bounds.family.family_law_audit`, a claim needs the canaries to separate (rank
test) and the out canaries to centre on 0, the family's own law (a check of the premise that
only withdraws a claim).  `final_law_departures` reads the same two bounds against the claim:
less noise than σ, or a canary moved by more than C, each with its evidence.

What it assumes: the canaries' displacements independent (each its own weight, noise and Poisson
draws), the engine SGD without momentum at the claimed q, T and learning rate with some clip
norm and some Gaussian noise.  Momentum or Adam move the final weight otherwise: callers give
those no law (`sweeper.bounds.audit_columns.Training.final_sums_steps`).
"""

from __future__ import annotations

import math

import numpy as np

from sweeper.bounds._checks import check, check_counts, check_delta, check_level
from sweeper.bounds.family import FAMILY_SLACK, canaries_separate
from sweeper.bounds.last_iterate import last_iterate_epsilon

__all__ = ["final_law_audit", "final_law_departures"]

#: How far the in sum's binomial is summed each side of its mean, in its standard deviations;
#: the mass left out is added to the tail, so the tail stays an upper bound.
_BINOMIAL_SPAN = 14.0


def _claim(noise_multiplier, sample_rate, steps, alpha) -> tuple[float, float, int, float]:
    sigma = float(check("noise_multiplier", noise_multiplier, 0.0, math.inf, low_open=True,
                        high_open=True))
    q = float(check("sample_rate", sample_rate, 0.0, 1.0, low_open=True))
    count = int(check_counts("steps", steps))
    if count < 1:
        raise ValueError(f"steps must be at least 1; got steps={count}")
    return sigma, q, count, float(check_level(alpha))


def _split(scores, members) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    s = np.asarray(scores, dtype=np.float64).ravel()
    inside = np.asarray(members, dtype=bool).ravel()
    if inside.shape != s.shape:
        raise ValueError(f"members must have one entry per score; got {inside.size} for "
                         f"{s.size} scores")
    return s, inside, s[inside], s[~inside]


def noise_upper(outs: np.ndarray, steps: int, level: float) -> float:
    """The σ′ above which the out canaries' Σ X² is too small, at `level`: Σ X² / (T·σ′²) is
    χ²_n under σ′, so σ′ > √(Σ X² / (T·χ²_n(level))) passes with probability below `level`."""
    from scipy.stats import chi2

    return math.sqrt(float(np.sum(outs ** 2)) / (steps * float(chi2.ppf(level, outs.size))))


class _InSum:
    """The in canaries' Σ X = c·K + N(0, n·T·σ″²), K ~ Binomial(n·T, q), at one noise σ″: its
    upper tail at any c, exact over the binomial's bulk (the mass left out counted as above)."""

    def __init__(self, ins: int, noise: float, q: float, steps: int):
        from scipy.stats import binom

        trials = ins * steps
        mean, spread = trials * q, math.sqrt(trials * q * (1.0 - q))
        self.k = np.arange(max(0, math.floor(mean - _BINOMIAL_SPAN * spread)),
                           min(trials, math.ceil(mean + _BINOMIAL_SPAN * spread)) + 1,
                           dtype=float)
        self.weights = binom.pmf(self.k, trials, q)
        self.rest = max(0.0, 1.0 - float(self.weights.sum()))
        self.scale = noise * math.sqrt(trials)

    def tail(self, total: float, clip: float) -> float:
        """P(Σ X ≥ `total`) at clip c."""
        from scipy.special import ndtr

        return min(1.0, float(self.weights @ ndtr((clip * self.k - total) / self.scale))
                   + self.rest)


def clip_lower(ins: np.ndarray, noise: float, q: float, steps: int, level: float) -> float:
    """The c below which the in canaries' Σ X is too large at noise σ″ = `noise`, at `level`
    (the tail rises with c: bisection to a relative 1e-10); 0 when c = 0 itself passes."""
    total, law = float(np.sum(ins)), _InSum(ins.size, noise, q, steps)
    if law.tail(total, 0.0) > level:
        return 0.0
    low, high = 0.0, 1.0
    while law.tail(total, high) <= level:
        low, high = high, 2.0 * high
    while high - low > 1e-10 * high:
        middle = 0.5 * (low + high)
        if law.tail(total, middle) <= level:
            low = middle
        else:
            high = middle
    return low


def _centred(outs: np.ndarray) -> bool:
    """The family's out law has mean 0: the out canaries' mean within `FAMILY_SLACK` of its
    standard errors of 0 (a premise check, as `family_law_audit`'s)."""
    return bool(abs(outs.mean()) <= FAMILY_SLACK * outs.std(ddof=1) / math.sqrt(outs.size))


def final_law_audit(scores: np.ndarray, members: np.ndarray, *, noise_multiplier: float,
                    sample_rate: float, steps: int, delta: float, alpha: float) -> float:
    """The ε proven at δ with confidence 1 − alpha from gradient canaries' final displacements
    in units of the claimed step (`canary_gradient_final` under SGD without momentum): the last
    iterate's ε at τ* = σ′_max / c_min (module docstring), whatever clip norm and noise the
    engine used.  0 when the canaries do not separate or nothing bounds the clip from below;
    NaN without in or out canaries (two of each at least), with a score that is not a number,
    or where the out canaries do not centre on 0 (no engine of the family gives them)."""
    sigma, q, count, level = _claim(noise_multiplier, sample_rate, steps, alpha)
    d = float(check_delta(delta))
    s, inside, ins, outs = _split(scores, members)
    if ins.size < 2 or outs.size < 2 or not np.isfinite(s).all():
        return math.nan
    if not _centred(outs):
        return math.nan
    if not canaries_separate(s, inside, level):
        return 0.0
    noise = noise_upper(outs, count, level / 2)
    clip = clip_lower(ins, noise, q, count, level / 2)
    if clip <= 0.0:
        return 0.0
    return float(last_iterate_epsilon(noise / clip, q, count, d))


def final_law_departures(scores: np.ndarray, members: np.ndarray, *, noise_multiplier: float,
                         sample_rate: float, steps: int, alpha: float) -> list[str]:
    """How the canaries' final displacements depart from the claimed engine at level alpha: one
    line of evidence each, none when they fit.  *noise*: the out canaries' Σ X² below what σ
    passes at alpha/2; *clip*: the in canaries' Σ X above what c = 1 passes at the largest
    noise the out canaries leave (alpha/4 each, so a correct engine departs with probability at
    most alpha).  Like the ε, a departure needs the canaries to separate."""
    sigma, q, count, level = _claim(noise_multiplier, sample_rate, steps, alpha)
    s, inside, ins, outs = _split(scores, members)
    if (ins.size < 2 or outs.size < 2 or not np.isfinite(s).all()
            or not canaries_separate(s, inside, level)):
        return []
    from scipy.stats import chi2

    found = []
    if noise_upper(outs, count, level / 2) <= sigma:
        floor = count * sigma ** 2 * float(chi2.ppf(level / 2, outs.size)) / outs.size
        found.append(f"noise: the {outs.size} out canaries' mean square final displacement "
                     f"{np.mean(outs ** 2):.4g} (units of C/B) is at or below {floor:.4g}, which "
                     f"σ = {sigma:g} over {count} steps falls to with probability "
                     f"≤ {level / 2:g}")
    widest = noise_upper(outs, count, level / 4)
    clip = clip_lower(ins, widest, q, count, level / 4)
    if clip > 1.0:
        found.append(f"clip: the {ins.size} in canaries' mean final displacement "
                     f"{ins.mean():.4g} proves each moves its weight by at least {clip:.4g}·C a "
                     f"step it is drawn (at any noise multiplier up to {widest:.4g}, at "
                     f"level {level / 2:g} in all)")
    return found
