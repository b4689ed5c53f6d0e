"""The audit direction: which ε an observed attack *proves*, and the bound checked against
mechanisms whose privacy is known exactly.

Why.  A measured precision or (TPR, FPR) pair above what (ε, δ)-DP allows rules that ε out; the
sweep's violation test reads these.  `tightest_bound` is the same comparison made exact: for a
mechanism whose whole privacy profile δ(ε') is known in closed form (jobs/audits/mechanisms.py), the
least bound over every (ε', δ(ε')) pair it meets, which its likelihood-ratio tests must touch and
never exceed if the bound is right.

Canary audits (issue 20) read counts, not rates, and say at which confidence their ε holds:

* `epsilon_clopper_pearson`  rigorous: exact binomial ends of TPR and FPR, any mechanism;
* `epsilon_gaussian_dp`      μ-GDP's ε at δ: a proof only where training *is* a Gaussian
                             mechanism (full-batch DP-SGD), an estimate elsewhere;
* `epsilon_one_run`          Steinke, Nasr & Jagielski (2023): many canaries in one training run,
                             generalized to inclusion probability p ≠ 1/2 (δ = 0 there);

DP-SGD's whole privacy profile and the least bound over it (`bound_profile`) are in
`sweeper.bounds.profile`.

Counts are non-negative integers (floats holding integers are accepted); SciPy, Opacus and
jobs.audits.mechanisms are imported inside the functions, so importing the package stays NumPy-only.
"""

from __future__ import annotations

import functools
import math
from typing import Protocol, Sequence

import numpy as np

from sweeper.bounds._checks import (ArrayLike, Result, check, check_at_most, check_counts,
                                    check_delta, check_form, check_guesses, check_level,
                                    check_prob, check_rate, is_scalar, out)
from sweeper.bounds.thudi import precision_bound

__all__ = ["epsilon_from_precision", "epsilon_from_rates", "tightest_bound",
           "epsilon_clopper_pearson", "gaussian_dp_mu", "epsilon_of_gaussian_dp",
           "epsilon_gaussian_dp", "epsilon_one_run", "one_run_guesses", "best_one_run_epsilon",
           "one_run_ceiling"]


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
    """What `tightest_bound` needs of a mechanism (jobs.audits.mechanisms' are two): its exact privacy
    profile, and the ε' at which its likelihood-ratio test has a given TPR."""

    def delta_at(self, epsilon_prime): ...

    def tight_epsilon(self, tpr): ...


def tightest_bound(mechanism: PrivacyProfile, p: ArrayLike, tpr: ArrayLike,
                   epsilons: ArrayLike | None = None, *, form: str = "derived") -> Result:
    """min over ε' ≥ 0 of U(ε', p, δ(ε'), tpr): every (ε', δ(ε')) pair the mechanism meets.

    U is `precision_bound` in the given `form`: "derived" (default), which the mechanisms touch,
    or "printed", whose minimum falls *below* the mechanism's exact precision
    (`jobs.audits.mechanisms.precision_at`) for δ > 0, p < 1 (`sweeper.bounds.thudi`).
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


# --------------------------------------------------------------------------- canary audits


def _searched(thresholds: ArrayLike) -> np.ndarray:
    searched = check_counts("thresholds", thresholds)
    if np.any(searched < 1):
        raise ValueError("thresholds must be at least 1 (the thresholds searched); "
                         f"got thresholds={searched[searched < 1].flat[0]:g}")
    return searched


def _rate_ends(tp, fp, positives, negatives, delta, alpha, thresholds) -> tuple[np.ndarray, ...]:
    """Checked and broadcast arguments -> (TPR's lower end, FPR's upper end, δ).

    Each end is one-sided exact (`jobs.metrics`' Clopper–Pearson helpers, over arrays; the same
    as the sweep's `epsilon_audit_rates`) at alpha/(2·thresholds): Bonferroni over the two ends
    and the thresholds searched.  NaN where there are no positives or no negatives.
    """
    tp, fp = check_counts("tp", tp), check_counts("fp", fp)
    positives, negatives = check_counts("positives", positives), check_counts("negatives", negatives)
    tp, fp, positives, negatives, d, level, searched = np.broadcast_arrays(
        tp, fp, positives, negatives, check_delta(delta), check_level(alpha), _searched(thresholds))
    check_at_most("tp", tp, "positives", positives)
    check_at_most("fp", fp, "negatives", negatives)
    each = level / (2.0 * searched)
    return _cp_lower(tp, positives, each), _cp_upper(fp, negatives, each), d


def _cp_lower(successes: np.ndarray, trials: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """`jobs.metrics.clopper_pearson_lower` over arrays in one call (NaN with no trials, 0 with
    no successes)."""
    from scipy.special import betaincinv

    k, n = np.asarray(successes, float), np.asarray(trials, float)
    with np.errstate(invalid="ignore", divide="ignore"):
        ends = betaincinv(k, n - k + 1, alpha)
    return np.where(n == 0, np.nan, np.where(k == 0, 0.0, ends))


def _cp_upper(successes: np.ndarray, trials: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """`jobs.metrics.clopper_pearson_upper` over arrays in one call (NaN with no trials, 1 when
    every trial succeeded)."""
    from scipy.special import betaincinv

    k, n = np.asarray(successes, float), np.asarray(trials, float)
    with np.errstate(invalid="ignore", divide="ignore"):
        ends = betaincinv(k + 1, n - k, 1.0 - np.asarray(alpha, float))
    return np.where(n == 0, np.nan, np.where(k == n, 1.0, ends))


def epsilon_clopper_pearson(tp: ArrayLike, fp: ArrayLike, positives: ArrayLike,
                            negatives: ArrayLike, *, delta: ArrayLike = 0.0,
                            alpha: ArrayLike = 0.05, thresholds: ArrayLike = 1) -> Result:
    """The ε that TP of `positives` and FP of `negatives` prove with confidence ≥ 1 − alpha.

    Valid for any mechanism (Jagielski et al. 2020; the SPEC's "rigorous" audit): the TPR's lower
    and the FPR's upper one-sided exact ends, each at alpha/(2·thresholds), go into
    `epsilon_from_rates` (both of its terms, at δ).  `thresholds` is how many thresholds were
    searched to find this one (Bonferroni).  With thresholds = the policy's candidates this is
    the sweep's `epsilon_audit_rates` (`sweeper.grid.cells.audit_from_rates`).  NaN without positives
    or negatives.
    """
    scalar = is_scalar(tp, fp, positives, negatives, delta, alpha, thresholds)
    low, high, d = _rate_ends(tp, fp, positives, negatives, delta, alpha, thresholds)
    return out(np.asarray(epsilon_from_rates(low, high, d), float), scalar)


def gaussian_dp_mu(tpr: ArrayLike, fpr: ArrayLike) -> Result:
    """The μ of the Gaussian trade-off curve through (FPR, TPR): Φ⁻¹(TPR) − Φ⁻¹(FPR), ≥ 0.

    μ-GDP forces 1 − TPR ≥ Φ(Φ⁻¹(1 − FPR) − μ) for every test (Dong, Roth & Su 2022), so a
    measured pair proves μ at least this.  The mirrored test (accept the low scores) gives the
    same μ, the curve being symmetric.  0 when TPR ≤ FPR; ∞ when TPR = 1 or FPR = 0 (above
    FPR); NaN rates give NaN.  Pass the interval ends (TPR low, FPR high) for a claim.
    """
    from scipy.special import ndtri

    scalar = is_scalar(tpr, fpr)
    t = check("tpr", tpr, 0.0, 1.0, allow_nan=True)
    f = check("fpr", fpr, 0.0, 1.0, allow_nan=True)
    t, f = np.broadcast_arrays(t, f)
    with np.errstate(invalid="ignore"):
        mu = np.where(t > f, ndtri(t) - ndtri(f), 0.0)
    return out(np.where(np.isnan(t) | np.isnan(f), np.nan, mu), scalar)


@functools.lru_cache(maxsize=65536)
def _gaussian_dp_epsilon(mu: float, delta: float) -> float:
    """Cached: the cells that share one attack's scores (a policy, a p each) ask for the same μ
    at every threshold; in the DP audit test 16 207 of 17 920 calls were asked before."""
    if math.isnan(mu):
        return math.nan
    if mu == 0.0:
        return 0.0
    if math.isinf(mu):
        return math.inf
    if delta == 0.0:
        return math.nan  # δ_μ(ε) > 0 for every finite ε: μ-GDP is no ε-DP
    from scipy.optimize import brentq
    from scipy.special import ndtri

    from jobs.audits.mechanisms import gaussian_delta

    gap = lambda eps: gaussian_delta(eps, mu) - delta  # noqa: E731
    if gap(0.0) <= 0.0:
        return 0.0
    # δ_μ(ε) ≤ Φ(−ε/μ + μ/2), which is ≤ δ from ε = μ(μ/2 − Φ⁻¹(δ)) on: the root is below.
    high = mu * (mu / 2.0 - float(ndtri(delta)))
    return float(brentq(gap, 0.0, high, xtol=1e-12, rtol=1e-12))


def epsilon_of_gaussian_dp(mu: ArrayLike, delta: ArrayLike) -> Result:
    """The least ε with δ_μ(ε) ≤ δ, δ_μ(ε) = Φ(−ε/μ + μ/2) − e^ε·Φ(−ε/μ − μ/2).

    μ-GDP is (ε, δ_μ(ε))-DP for every ε and no better (Dong, Roth & Su 2022, Cor. 2.13); the
    profile is `jobs.audits.mechanisms.GaussianMechanism`'s.  0 when μ = 0 or δ ≥ δ_μ(0) = 2Φ(μ/2) − 1;
    ∞ when μ = ∞; NaN at δ = 0 with μ > 0, since μ-GDP is ε-DP for no finite ε; NaN μ gives NaN.
    """
    scalar = is_scalar(mu, delta)
    m = check("mu", mu, 0.0, math.inf, allow_nan=True)
    m, d = np.broadcast_arrays(m, check_delta(delta))
    return out(np.vectorize(_gaussian_dp_epsilon, otypes=[float])(m, d), scalar)


def epsilon_gaussian_dp(tp: ArrayLike, fp: ArrayLike, positives: ArrayLike,
                        negatives: ArrayLike, *, delta: ArrayLike, alpha: ArrayLike = 0.05,
                        thresholds: ArrayLike = 1) -> Result:
    """The Gaussian-DP ε of TP of `positives` and FP of `negatives`, with confidence ≥ 1 − alpha.

    μ from the exact ends of `epsilon_clopper_pearson` (`gaussian_dp_mu`), converted at δ
    (`epsilon_of_gaussian_dp`).  A proof only when the mechanism's trade-off curve *is*
    Gaussian, i.e. full-batch DP-SGD (q = 1, μ = √steps/σ): then μ̂ ≤ μ at that confidence and ε
    grows with μ.  Subsampled DP-SGD's curve is not Gaussian (the CLT behind Gaussian DP
    under-states its ε, why `gdp` is refused as an accountant); there μ fitted at one point and
    converted at δ can land above the mechanism's ε: an estimate, never a violation flag.
    """
    scalar = is_scalar(tp, fp, positives, negatives, delta, alpha, thresholds)
    low, high, d = _rate_ends(tp, fp, positives, negatives, delta, alpha, thresholds)
    return out(np.asarray(epsilon_of_gaussian_dp(gaussian_dp_mu(low, high), d), float), scalar)


def _one_run_p_value(eps: float, correct: int, guesses: int, canaries: int, delta: float,
                     p: float) -> float:
    """P[Bin(r, q_ε) ≥ v] + 2mδ·max_{1≤i≤v} (P[Bin ≥ v − i] − P[Bin ≥ v])/i, capped at 1.

    The i-th difference is the pmf summed over [v − i, v − 1], so the max is the best mean of
    the pmf over windows ending at v − 1.  Only windows above `low` (40 sd + 40 under the mean)
    are summed; a longer window's mean is at most (their sum + P[Bin < low])/(v − low + 1),
    taken as one more candidate, so the cut can only raise the p-value (stay valid).
    """
    from scipy.special import bdtr, bdtrc, expit, gammaln, logit

    if correct == 0:
        return 1.0
    q = float(expit(eps + logit(p)))
    tail = float(bdtrc(correct - 1, guesses, q))
    if delta == 0.0:
        return tail
    mean, sd = guesses * q, math.sqrt(guesses * q * (1.0 - q))
    low = int(min(correct - 1, max(0.0, math.floor(mean - 40.0 * sd - 40.0))))
    j = np.arange(correct - 1, low - 1, -1, dtype=float)  # v − 1 down to low
    with np.errstate(divide="ignore", invalid="ignore"):
        log_pmf = (gammaln(guesses + 1.0) - gammaln(j + 1.0) - gammaln(guesses - j + 1.0)
                   + j * math.log(q) + (guesses - j) * math.log1p(-q))
    sums = np.cumsum(np.exp(np.nan_to_num(log_pmf, nan=-np.inf)))
    spread = float(np.max(sums / np.arange(1, len(j) + 1)))
    if low > 0:
        spread = max(spread, (float(sums[-1]) + float(bdtr(low - 1, guesses, q)))
                     / (correct - low + 1))
    return min(1.0, tail + 2.0 * canaries * delta * spread)


def _one_run_epsilon(correct: float, guesses: float, canaries: float, delta: float,
                     alpha: float, p: float) -> float:
    if p != 0.5 and delta > 0.0:
        return math.nan  # Steinke et al.'s δ-term is proven at p = 1/2 only
    from scipy.optimize import brentq

    v, r, m = int(correct), int(guesses), int(canaries)
    gap = lambda eps: _one_run_p_value(eps, v, r, m, delta, p) - alpha  # noqa: E731
    if r == 0 or gap(0.0) > 0.0:
        return 0.0
    low, high = 0.0, 1.0
    while gap(high) <= 0.0:  # ends: q_ε → 1 makes the p-value 1 > alpha
        low, high = high, 2.0 * high
    root = float(brentq(gap, low, high, xtol=1e-10, rtol=1e-12))
    return root if gap(root) <= 0.0 else max(low, root - 1e-9)


def epsilon_one_run(correct: ArrayLike, guesses: ArrayLike, canaries: ArrayLike, *,
                    delta: ArrayLike = 0.0, alpha: ArrayLike = 0.05,
                    p: ArrayLike = 0.5) -> Result:
    """Steinke, Nasr & Jagielski's one-run ε (2023, Thm 3.1/5.2), at inclusion probability p.

    m = `canaries`, each in the training set independently with probability p; the auditor
    guessed on `guesses` of them and `correct` were right.  Returns the largest ε whose p-value
    P[Bin(guesses, q_ε) ≥ correct] (+ the paper's δ-term 2mδ·max_i (P[Bin ≥ correct − i] −
    P[Bin ≥ correct])/i, the rule of google-deepmind/jax_privacy `auditing.py`) is ≤ alpha:
    that ε holds with confidence ≥ 1 − alpha.

    q_ε at p: guesses must all be "in" when p ≠ 1/2 (at p = 1/2 "in" and "out" mix freely;
    guesses all "out" at p are "in" at 1 − p, with the labels swapped).  Then
    q_ε = p·e^ε/(p·e^ε + 1 − p): conditioned on the output and on the canaries before it, ε-DP
    bounds the posterior odds that canary i is in by e^ε·p/(1 − p), so each "in" guess is right
    with probability ≤ q_ε whatever came before, and the count is dominated by Bin(guesses, q_ε)
    (the paper's coupling, with its prior 1/2 replaced by p; docs/auditing.md).  q_ε is U(ε, p)
    at δ = 0: the test asks whether the guesses' precision beats Thudi et al.'s bound.  The
    δ-term's proof is for p = 1/2 only, so δ > 0 at p ≠ 1/2 gives NaN.  0 without guesses.
    """
    scalar = is_scalar(correct, guesses, canaries, delta, alpha, p)
    v, r, m, d, level, prior = check_guesses(correct, guesses, canaries, delta, alpha, p)
    return out(np.vectorize(_one_run_epsilon, otypes=[float])(v, r, m, d, level, prior), scalar)


def one_run_guesses(scores: ArrayLike, included: ArrayLike, k_plus: int,
                    k_minus: int = 0) -> tuple[int, int]:
    """(correct, guesses): "in" on the `k_plus` highest scores, "out" on the `k_minus` lowest.

    Ties by a fixed rule, whatever order the canaries come in: where the k-th guess would split
    canaries of equal score, none of those is guessed (fewer guesses, all a function of the
    scores alone).  Breaking them by index made a pooled audit's ε depend on the order its rows
    were joined in (issue 50).  A NaN score ranks lowest (never guessed "in").
    """
    s = np.asarray(scores, dtype=float).ravel()
    member = np.asarray(included).ravel()
    if member.shape != s.shape:
        raise ValueError(f"included must have one entry per score; got {member.size} for "
                         f"{s.size} scores")
    if member.dtype != bool and not np.all((member == 0) | (member == 1)):
        raise ValueError("included must be booleans (or 0/1): True = the canary was trained on")
    plus, minus = int(check_counts("k_plus", k_plus)), int(check_counts("k_minus", k_minus))
    if plus + minus > s.size:
        raise ValueError(f"k_plus + k_minus must not exceed the canaries; got {plus} + {minus} "
                         f"> {s.size}")
    member = member.astype(bool)
    ranked = np.where(np.isnan(s), -np.inf, s)
    ordered = np.sort(ranked)
    # "in": strictly above the highest score left unguessed; "out": strictly below the lowest.
    guessed_in = (ranked > ordered[s.size - plus - 1] if plus < s.size else
                  np.ones(s.size, bool)) if plus else np.zeros(s.size, bool)
    guessed_out = (ranked < ordered[minus] if minus < s.size else
                   np.ones(s.size, bool)) if minus else np.zeros(s.size, bool)
    right = (member & guessed_in).sum() + (~member & guessed_out).sum()
    return int(right), int(guessed_in.sum() + guessed_out.sum())


#: Shares of the canaries guessed on by `best_one_run_epsilon` unless told otherwise.
ONE_RUN_SHARES = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5)


def best_one_run_epsilon(scores: ArrayLike, included: ArrayLike, *, delta: float = 0.0,
                         alpha: float = 0.05, p: float = 0.5,
                         ks: Sequence[int | tuple[int, int]] | None = None,
                         rule=None) -> float:
    """The best `epsilon_one_run` (or `rule`, which takes the same arguments: the f-DP
    `epsilon_one_run_fdp`) over several numbers of guesses, with confidence ≥ 1 − alpha.

    Each entry of `ks` is k₊ ("in" guesses) or (k₊, k₋); each is tested at alpha/len(ks)
    (Bonferroni: the best of several tests is a claim only at the corrected level).  Default:
    r = 1, 2, 5, 10, 20, 50 % of the canaries, split k₊ = ⌊r/2⌋, k₋ = r − k₊ at p = 1/2 (the
    paper's symmetric guesses) and all "in" otherwise.
    """
    m = np.asarray(scores).size
    if ks is None:
        totals = sorted({max(1, round(share * m)) for share in ONE_RUN_SHARES})
        ks = [(r // 2, r - r // 2) if p == 0.5 else (r, 0) for r in totals]
    pairs = [tuple(int(x) for x in k) if isinstance(k, tuple) else (int(k), 0) for k in ks]
    if not pairs:
        raise ValueError("ks must name at least one number of guesses")
    if p != 0.5 and any(minus for _, minus in pairs):
        raise ValueError(f"k_minus must be 0 at p != 0.5 (guesses all \"in\"); got p={p:g}")
    level = float(check_level(alpha)) / len(pairs)
    rule = rule or epsilon_one_run
    found = [float(rule(*one_run_guesses(scores, included, plus, minus), m,
                        delta=delta, alpha=level, p=p)) for plus, minus in pairs]
    return math.nan if any(math.isnan(e) for e in found) else max(found)


def one_run_ceiling(canaries: int, *, delta: float, alpha: float, p: float = 0.5,
                    rule=None) -> float:
    """What a perfect attack proves with `best_one_run_epsilon`'s guesses: every guess right,
    at each of its guess counts, the best after Bonferroni.  An audit that proves less than ε
    says nothing about a claim above this: "not flagged" means nothing beyond it."""
    m = int(check_counts("canaries", canaries))
    rule = rule or epsilon_one_run
    totals = sorted({max(1, round(share * m)) for share in ONE_RUN_SHARES})
    level = float(check_level(alpha)) / len(totals)
    found = [float(rule(r, r, m, delta=delta, alpha=level, p=p)) for r in totals]
    return math.nan if any(math.isnan(e) for e in found) else max(found)
