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
`sweeper.grid.cells.overspent`, reads that).  σ′ is searched on a fixed grid relative to the claimed
σ (`GRID`), so that every profile is computed once per (σ, q, T) and shared by every cell.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from sweeper.bounds._checks import check, check_counts, check_delta, check_level

__all__ = ["family_audit", "noise_ruled_out", "family_law_audit", "law_departures"]

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
    from scipy.special import betaincinv

    tp, fp = check_counts("tp", tp).ravel(), check_counts("fp", fp).ravel()
    level = float(check_level(alpha)) / (2.0 * max(1, tp.size))
    fpr_high = np.where(fp < negatives, betaincinv(fp + 1, negatives - fp, 1 - level), 1.0)
    fnr = positives - tp
    fnr_high = np.where(fnr < positives, betaincinv(fnr + 1, positives - fnr, 1 - level), 1.0)
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


# --------------------------------------------------------------------------- the statistic's law

#: Gauss–Hermite nodes for a standard normal, and their weights (summing to 1).
_NODES, _WEIGHTS = np.polynomial.hermite_e.hermegauss(160)
_WEIGHTS = _WEIGHTS / _WEIGHTS.sum()
#: σ″ / σ on the fine grid the in-family check searches (σ/4 … 8σ in steps of 2^(1/64)).
FINE = 2.0 ** (np.arange(-128, 193) / 64)
#: How many standard deviations the in-family check allows each of the two moments: its misses
#: only withdraw a claim (NaN), never make one; 6 lets a correct engine pass but for chance
#: under 1/36 by Chebyshev (~1e-9 by the normal law).
FAMILY_SLACK = 6.0


def _ell(x: np.ndarray, sigma: float, q: float) -> np.ndarray:
    """The claimed σ's per-step log-likelihood ratio ℓ(z) = log(1 − q + q·e^{(2z − 1)/(2σ²)})."""
    return np.logaddexp(math.log1p(-q), math.log(q) + (2.0 * x - 1.0) / (2.0 * sigma ** 2))


def _step_moments(sigma: float, q: float, noise: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per step, the mean and variance of ℓ(z) when z ~ N(0, σ′²) (out) and
    q·N(1, σ′²) + (1 − q)·N(0, σ′²) (in), at each σ′ of `noise`: (mean out, variance out,
    mean in, variance in)."""
    z = np.asarray(noise, float)[:, None] * _NODES[None, :]
    out0, out1 = _ell(z, sigma, q), _ell(1.0 + z, sigma, q)
    mean_out, square_out = out0 @ _WEIGHTS, out0 ** 2 @ _WEIGHTS
    mean_in = (1.0 - q) * mean_out + q * (out1 @ _WEIGHTS)
    square_in = (1.0 - q) * square_out + q * (out1 ** 2 @ _WEIGHTS)
    return mean_out, square_out - mean_out ** 2, mean_in, square_in - mean_in ** 2


def _out_law(sigma: float, q: float, steps: int, noise: np.ndarray) -> tuple[np.ndarray, ...]:
    """An out canary's S = Σ_t ℓ(z_t), z_t ~ N(0, σ′²): its mean, variance and fourth central
    moment at each σ′ of `noise` (T independent steps: T·μ₄ + 3T(T − 1)·v²)."""
    z = np.asarray(noise, float)[:, None] * _NODES[None, :]
    values = _ell(z, sigma, q)
    mean = values @ _WEIGHTS
    centred = values - mean[:, None]
    var, fourth = centred ** 2 @ _WEIGHTS, centred ** 4 @ _WEIGHTS
    return steps * mean, steps * var, steps * fourth + 3.0 * steps * (steps - 1) * var ** 2


def _canaries(scores, members) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(scores, dtype=np.float64).ravel()
    inside = np.asarray(members, dtype=bool).ravel()
    if inside.shape != s.shape:
        raise ValueError(f"members must have one entry per score; got {inside.size} for "
                         f"{s.size} scores")
    return s, inside


def canaries_separate(scores: np.ndarray, inside: np.ndarray, alpha: float) -> bool:
    """Whether the in canaries' statistics lie above the out canaries' more than chance allows,
    at level alpha: the Mann–Whitney AUC, P̂(S_in > S_out) with ties 1/2, less
    √(ln(1/alpha)/(2k)) (k the fewer of in and out) still above 1/2.  Scores alike in and out
    (their AUC 1/2) pass with probability at most alpha at any number of canaries: Hoeffding's
    bound for a two-sample U statistic with a kernel in [0, 1], no normal approximation.  It
    reads ranks only, so the scores' scale or any increasing transform of them changes nothing."""
    from scipy.stats import rankdata

    ins, outs = int(inside.sum()), int((~inside).sum())
    if ins == 0 or outs == 0:
        return False
    auc = (rankdata(scores)[inside].sum() - ins * (ins + 1) / 2.0) / (ins * outs)
    return bool(auc - math.sqrt(math.log(1.0 / alpha) / (2.0 * min(ins, outs))) > 0.5)


#: c, the canary's clipped norm over the claimed C, on the grid the in canaries' test searches
#: (2^(k/16): C/8 … 8C).  An engine clipping to c·C with noise σ′·C is DP-SGD at σ′/c.
SIGNAL = 2.0 ** (np.arange(-48, 49) / 16)
#: The tilts the Chernoff bounds try, in units of 1/(the sum's standard deviation): fixed before
#: anything is observed, and any tilt gives a valid bound, so the best of them is one too.
_TILTS = np.geomspace(0.05, 40.0, 48)


def _log_mgf(values: np.ndarray, weights: np.ndarray, tilts: np.ndarray) -> np.ndarray:
    """log E e^{λ(X − E X)} per law (rows of `values`) and tilt (columns of `tilts`)."""
    centred = values - (values @ weights)[:, None]
    return np.log(np.einsum("lk,ltk->lt", np.broadcast_to(weights, values.shape),
                            np.exp(tilts[:, :, None] * centred[:, None, :])))


def _lower_threshold(values: np.ndarray, weights: np.ndarray, terms: int,
                     alpha: float) -> np.ndarray:
    """The Chernoff threshold of a sum of `terms` independent copies of a variable taking
    `values` (rows: laws) with `weights`: the w with P(sum ≤ w) ≤ alpha, as the best over the
    tilts λ < 0 of terms·E X + (terms·log E e^{λ(X − E X)} − log alpha)/λ.

    Why not Cantelli.  The sum of T·n steps is near normal, and Cantelli's √((1 − α)/α)
    (31.6 standard deviations at α = 0.001) left a 0.75σ engine unflagged at 4 000 canaries
    (issue 50); Chernoff's bound from the exact moment generating function (Gauss–Hermite) is
    about √(2 ln(1/α)) of them, and as valid at any count."""
    mean = values @ weights
    spread = np.sqrt(np.maximum(((values - mean[:, None]) ** 2) @ weights, 1e-300) * terms)
    tilts = -_TILTS[None, :] / spread[:, None]  # (laws, tilts)
    bound = terms * mean[:, None] + (terms * _log_mgf(values, weights, tilts)
                                     - math.log(alpha)) / tilts
    return bound.max(1)


def _out_thresholds(sigma: float, q: float, steps: int, noise: np.ndarray, count: int,
                    alpha: float) -> np.ndarray:
    """Per σ′ of `noise`, the Chernoff threshold under which the out canaries' sum W rules σ′
    out at level alpha (its law: `count`·T steps of ℓ(z), z ~ N(0, σ′²))."""
    values = _ell(np.asarray(noise, float)[:, None] * _NODES[None, :], sigma, q)
    return _lower_threshold(values, _WEIGHTS, count * steps, alpha)


def _running_out_thresholds(sigma: float, q: float, steps: int, count: int,
                            alpha: float) -> np.ndarray:
    """`_out_thresholds` on `GRID`, made monotone in the noise: at each σ′ the least threshold of
    every σ″ ≥ σ′ (a running bound).  Each is no larger than its own σ′'s, so each test stays
    valid, and the σ′ ruled out are all those above one: what "σ″ < σ*" needs (issue 50: at
    n_out ≤ 2 000 and α = 0.001 the thresholds themselves dip as the noise grows)."""
    raw = _out_thresholds(sigma, q, steps, sigma * np.asarray(GRID), count, alpha)
    return np.minimum.accumulate(raw[::-1])[::-1]


def _step_values(sigma: float, q: float, noise: float) -> tuple[np.ndarray, ...]:
    """One step's ℓ(z) at the Gauss–Hermite nodes: out (z ~ N(0, σ′²)) with its weights, and
    in, per c of `SIGNAL` (z ~ q·N(c, σ′²) + (1 − q)·N(0, σ′²)), with theirs."""
    z = noise * _NODES
    out = _ell(z, sigma, q)
    inside = np.concatenate([np.broadcast_to(out, (SIGNAL.size, z.size)),
                             _ell(SIGNAL[:, None] + z[None, :], sigma, q)], axis=1)
    return out, _WEIGHTS, inside, np.concatenate([(1.0 - q) * _WEIGHTS, q * _WEIGHTS])


def _in_thresholds(sigma: float, q: float, steps: int, noise: float, ins: int, outs: int,
                   alpha: float) -> np.ndarray:
    """Per c of `SIGNAL`, the Chernoff threshold above which D = mean S in − mean S out (`ins`
    and `outs` canaries) rules out a canary clipped to c·C at noise σ′ = `noise`, at level alpha,
    made monotone in c by a running maximum (ℓ is increasing, so a smaller c gives a smaller D
    draw by draw, and every c below one ruled out is ruled out too).

    Why the difference.  More noise raises the in canaries' statistics as a larger clip does
    (ℓ is convex), and the out canaries bound the noise only to a few per cent; their
    difference cancels most of that, so the clip is bounded at every noise left."""
    out, out_weights, inside, in_weights = _step_values(sigma, q, noise)
    out_mean, in_mean = out @ out_weights, inside @ in_weights
    out_var = ((out - out_mean) ** 2) @ out_weights
    in_var = ((inside - in_mean[:, None]) ** 2) @ in_weights
    spread = np.sqrt(steps * (in_var / ins + out_var / outs))
    tilts = _TILTS[None, :] / spread[:, None]
    log_mgf = (ins * steps * _log_mgf(inside, in_weights, tilts / ins)
               + outs * steps * _log_mgf(out[None, :], out_weights, -tilts / outs))
    bound = (steps * (in_mean - out_mean))[:, None] + (log_mgf - math.log(alpha)) / tilts
    return np.maximum.accumulate(bound.min(1))


def _in_family(outs: np.ndarray, sigma: float, q: float, steps: int, below: float) -> bool:
    """Whether the out canaries' mean and variance both fit the law of one σ″ ≤ `below` (within
    `FAMILY_SLACK` standard deviations each): a check of `family_law_audit`'s premise, that
    withdraws a claim from values no engine of the family gives (another statistic); it cannot
    refuse ~100 random numbers, which may fit some engine (`canaries_separate` does)."""
    n = outs.size
    if n < 4 or not np.isfinite(outs).all():
        return False
    noise = sigma * FINE[sigma * FINE <= below * (1 + 1e-12)]
    mean, var, fourth = _out_law(sigma, q, steps, noise)
    spread_var = np.sqrt(np.maximum(fourth - (n - 3) / (n - 1) * var ** 2, 0.0) / n)
    fits = ((np.abs(outs.mean() - mean) <= FAMILY_SLACK * np.sqrt(var / n))
            & (np.abs(outs.var(ddof=1) - var) <= FAMILY_SLACK * spread_var))
    return bool(fits.any())


def _law_arguments(noise_multiplier, sample_rate, steps, alpha):
    sigma, q, count = _training(noise_multiplier, sample_rate, steps)
    return sigma, q, count, float(check_level(alpha))


def law_departures(scores: np.ndarray, members: np.ndarray, *, noise_multiplier: float,
                   sample_rate: float, steps: int, alpha: float) -> list[str]:
    """How the canaries' likelihood-ratio statistics depart from the mechanism claimed, at level
    alpha (`family_law_audit`): one line of evidence per departure, none when they fit.

    The claim fixes both laws exactly (per step ℓ(z), z ~ N(0, σ²) out and
    q·N(1, σ²) + (1 − q)·N(0, σ²) in), so each is one Chernoff test at alpha/2: the out
    canaries' sum too low (*noise*: less noise than σ, or noise and clip norm both cut) or the in
    canaries' too high (*clip*: each canary moves its weight by more than C).  Like the ε, a
    departure needs the canaries to separate; unlike it, not that the out canaries fit some
    engine of the family (noise σ/30, below the grid, fits none and is a departure all the
    same: the claim's law is exact, whatever else is)."""
    sigma, q, count, level = _law_arguments(noise_multiplier, sample_rate, steps, alpha)
    s, inside = _canaries(scores, members)
    outs, ins = s[~inside], s[inside]
    if (q == 1.0 or outs.size == 0 or ins.size == 0 or np.isnan(s).any()
            or not canaries_separate(s, inside, level)):
        return []
    found = []
    noise = float(_out_thresholds(sigma, q, count, np.array([sigma]), outs.size, level / 2)[0])
    if outs.sum() <= noise:
        found.append(f"noise: the {outs.size} out canaries' mean statistic {outs.mean():.4g} is "
                     f"at or below {noise / outs.size:.4g}, which σ = {sigma:g} passes with "
                     f"probability ≤ {level / 2:g}")
    clip = float(_in_thresholds(sigma, q, count, sigma, ins.size, outs.size,
                                level / 2)[SIGNAL.size // 2])
    if ins.mean() - outs.mean() >= clip:
        found.append(f"clip: the {ins.size} in canaries' mean statistic is "
                     f"{ins.mean() - outs.mean():.4g} above the {outs.size} out canaries', at or "
                     f"above {clip:.4g}, which a canary clipped to C passes with probability "
                     f"≤ {level / 2:g}")
    return found


def _weakest_engine(outs: np.ndarray, ins: np.ndarray, sigma: float, q: float, steps: int,
                    alpha: float) -> float:
    """The largest σ′/c (relative to σ) of the engines, noise σ′·C and clip c·C, that neither
    the out canaries (σ′, at alpha/2) nor the in canaries (c at each σ′, at alpha/2) rule out:
    every engine left is DP-SGD at a noise multiplier below σ times this.  0 when none is left,
    ∞ when nothing bounds it."""
    ruled = outs.sum() <= _running_out_thresholds(sigma, q, steps, outs.size, alpha / 2)
    if not ruled.any():
        return math.inf
    weakest = 0.0
    for noise in GRID[:int(np.argmax(ruled)) + 1]:  # σ″ < the least σ′ ruled out
        clips_ruled = int((ins.mean() - outs.mean() >= _in_thresholds(
            sigma, q, steps, sigma * noise, ins.size, outs.size, alpha / 2)).sum())
        if clips_ruled == 0:
            return math.inf
        weakest = max(weakest, noise / SIGNAL[clips_ruled - 1])
    return weakest


def family_law_audit(scores: np.ndarray, members: np.ndarray, *, noise_multiplier: float,
                     sample_rate: float, steps: int, delta: float, alpha: float) -> float:
    """The ε proven at δ with confidence 1 − alpha from gradient canaries scored by the
    subsampled Gaussian's log-likelihood ratio summed over the steps (`canary_gradient_iterates`:
    S = Σ_t ℓ(z_t), ℓ at the claimed σ and q), read through the statistic's law in DP-SGD's
    family rather than through thresholds.

    Why.  The threshold audit (`family_audit`) meets the noise only through one (FPR, FNR) pair
    against a whole privacy profile, and missed a noise cut by 20 % (issue 41).  An out canary's
    S has a known law for every noise σ′: T independent steps, each ℓ(z) with z ~ N(0, σ′²),
    whatever the clipping did; an in canary's moreover depends on its clipped norm c·C (z ~
    q·N(c, σ′²) + (1 − q)·N(0, σ′²)).  Out alone is not enough (issue 50): an engine clipping to
    C/2 with σ/2 noise is exactly as private as claimed, yet its out law is σ/2's, and one clipping
    to 2C with σ noise has the claimed out law and twice the ε.  So the audit bounds both: the
    out canaries' sum rules out the noise levels above σ* (Chernoff's bound, at alpha/2, made
    monotone in the noise: `_running_out_thresholds`), the in canaries' sum the clip norms below
    c*(σ′) at each noise left (alpha/2, monotone in c); the engine is then DP-SGD at a noise
    multiplier below max σ′/c*(σ′), snapped up to `GRID`, and the ε is DP-SGD's there, read from
    the PRV's lower side.  It proves that ε whatever clip norm and noise the engine used, so an
    engine flagged as departing from its claim (`law_departures`) gets no ε it did not earn.

    But values alone can fool it: ~100 uniform random scores fit some engine's out law and
    "proved" ε > 0 in every audit.  So a claim also needs what separates members from
    non-members (`canaries_separate`): the canaries' AUC, in against out, above 1/2 at level alpha
    (Hoeffding's bound for a two-sample U statistic, rank-based).  0 when they do not separate
    or nothing is bounded, that of σ/4 when less is left; NaN where the out canaries' mean and
    variance fit no σ″ ≤ σ* (`_in_family`, a check of the premise below that only ever
    withdraws a claim), at q = 1, where ℓ is linear and its mean says nothing of the noise (the
    Gaussian-DP audit is exact there), and with no out canary or a score that is not a number.

    What it assumes: the in canaries' S independent and identically distributed, the out
    canaries' likewise and independent of them (gradient canaries: each its own coordinate,
    noise and Poisson draws), and the engine DP-SGD at the claimed q and T with some clip norm
    and some Gaussian noise (an engine sampling otherwise falls outside: its ε rests on that
    premise), with noise at most 8σ (`GRID`'s top).  What it proves, at level alpha: if the
    engine is in that family, its ε is at least the one returned; if the scores are alike in and
    out (a 0-DP mechanism, random scores), no claim at all, at any count and on any scale.
    Between the points of `GRID` and `SIGNAL` the tests are read at the point above (the noise)
    and below (the clip), which is exact where the thresholds move monotonically between them.
    """
    sigma, q, count, level = _law_arguments(noise_multiplier, sample_rate, steps, alpha)
    d = float(check_delta(delta))
    s, inside = _canaries(scores, members)
    outs, ins = s[~inside], s[inside]
    if q == 1.0 or outs.size == 0 or np.isnan(s).any():
        return math.nan
    if not canaries_separate(s, inside, level):
        return 0.0
    weakest = _weakest_engine(outs, ins, sigma, q, count, level)
    if weakest > GRID[-1]:
        return 0.0
    least = int(np.searchsorted(GRID, weakest * (1 - 1e-12)))  # the grid's σ′ at or above it
    ruled = outs.sum() <= _running_out_thresholds(sigma, q, count, outs.size, level / 2)
    if not _in_family(outs, sigma, q, count, sigma * GRID[int(np.argmax(ruled))]):
        return math.nan
    return _epsilon_low(sigma * GRID[least], q, count, d)
