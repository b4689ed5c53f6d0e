"""The canary audit estimators of `sweeper.bounds.proven`, against their authors' rules re-derived
here, cases solved by hand, and mechanisms whose privacy is known exactly.

The rules re-implemented independently: Clopper–Pearson from `scipy.stats.beta.ppf`; the Gaussian
DP profile δ_μ(ε) from its formula (Dong, Roth & Su 2022) and the root search of jax_privacy's
`epsilon_from_gdp`; the one-run p-value as google-deepmind/jax_privacy `auditing.py` writes it
(binomial tails summed with `scipy.stats.binom.sf`, one per i).  The Monte Carlo runs are seeded,
and each allowance is a binomial tail at 1e-6 (a correct estimator fails it once in a million).
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.special import expit, logit
from scipy.stats import beta, binom, norm

from jobs.audits.mechanisms import GaussianMechanism, RandomizedResponse
from jobs.metrics import OperatingPoint
from sweeper.bounds import (bound_profile, best_one_run_epsilon, dpsgd_privacy_profile,
                            epsilon_clopper_pearson, epsilon_gaussian_dp, epsilon_of_gaussian_dp,
                            epsilon_one_run, epsilon_one_run_fdp, gaussian_dp_mu, one_run_guesses, precision_bound,
                            tightest_bound)
from sweeper.bounds.profile import _PrvProfile
from sweeper.grid.cells import audit_from_rates

# --------------------------------------------------------------------------- references


def cp_epsilon(tp, fp, positives, negatives, delta, level):
    """Clopper–Pearson ends straight from the Beta quantiles, then both DP inequalities."""
    tpr_low = beta.ppf(level, tp, positives - tp + 1) if tp else 0.0
    fpr_high = beta.ppf(1 - level, fp + 1, negatives - fp) if fp < negatives else 1.0
    terms = [0.0]
    if tpr_low - delta > 0:
        terms.append(math.log((tpr_low - delta) / fpr_high))
    if 1 - delta - fpr_high > 0:
        terms.append(math.log((1 - delta - fpr_high) / (1 - tpr_low)))
    return max(terms)


def gdp_delta(eps, mu):
    """δ_μ(ε) = Φ(−ε/μ + μ/2) − e^ε·Φ(−ε/μ − μ/2), as printed."""
    return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2)


def jax_gdp_epsilon(mu, delta):
    """jax_privacy's conversion: the log-domain gap log δ_μ(ε) − log δ, brentq on [0, 100]."""
    def gap(eps):
        a, b = norm.logcdf(-eps / mu + mu / 2), eps + norm.logcdf(-eps / mu - mu / 2)
        return a + math.log1p(-math.exp(b - a)) - math.log(delta)
    return 0.0 if gap(0.0) <= 0 else brentq(gap, 0.0, 100.0, xtol=1e-10)


def jax_one_run_p_value(m, r, v, eps, delta):
    """jax_privacy `_one_run_p_value`: tails by `binom.sf`, the δ-term's max over i = 1 … v."""
    q = expit(eps)
    tail = binom.sf(v - 1, r, q)
    if delta == 0:
        return tail
    i = np.arange(1, v + 1)
    spread = np.max((binom.sf(v - i - 1, r, q) - tail) / i, initial=0)
    return min(tail + spread * delta * 2 * m, 1)


def jax_one_run_epsilon(m, r, v, alpha, delta):
    """jax_privacy `_epsilon_one_run` from eps_lo = 0: doubling bracket, then brentq."""
    return jax_largest_rejected(lambda eps: alpha - jax_one_run_p_value(m, r, v, eps, delta))


def jax_largest_rejected(objective):
    """jax_privacy's search from eps_lo = 0: the objective is positive while ε is rejected;
    a doubling bracket, then brentq."""
    if objective(0.0) <= 0:
        return 0.0
    low, high = 0.0, 1.0
    while objective(high) > 0:
        low, high = high, 2 * high
    return brentq(objective, low, high, xtol=1e-9)


def allowed(runs: int, alpha: float) -> int:
    """Exceedances a level-alpha claim may show in `runs` runs: P(Bin(runs, alpha) > it) ≤ 1e-6."""
    return int(binom.isf(1e-6, runs, alpha))


# --------------------------------------------------------------------------- Clopper–Pearson


@pytest.mark.parametrize("tp,fp,delta", [(200, 10, 0.0), (200, 10, 0.01), (399, 200, 0.0),
                                         (0, 5, 0.0), (400, 0, 1e-5), (400, 400, 0.0)])
def test_clopper_pearson_is_the_beta_quantile_rule_and_the_sweeps_audit(tp, fp, delta):
    """Each end at alpha/(2·thresholds); (399, 200) is decided by the mirrored term."""
    alpha, searched = 0.05, 40
    expected = cp_epsilon(tp, fp, 400, 400, delta, alpha / (2 * searched))
    got = epsilon_clopper_pearson(tp, fp, 400, 400, delta=delta, alpha=alpha, thresholds=searched)
    assert type(got) is float and got == pytest.approx(expected, rel=1e-9, abs=1e-12)
    point = OperatingPoint(threshold=0.0, tp=tp, fp=fp, members=400, non_members=400,
                           precision=math.nan, precision_ci_low=math.nan,
                           precision_ci_high=math.nan, candidates=searched)
    assert got == audit_from_rates(point, delta, alpha)


def test_clopper_pearson_all_right_has_a_closed_form():
    """TP = n and FP = 0: P(Bin(n, L) ≥ n) = L^n = a gives L = a^(1/n), and the FPR's upper end
    is 1 − a^(1/n) by symmetry, so ε = ln(a^(1/n) / (1 − a^(1/n))), a = alpha/2."""
    n, alpha = 50, 0.05
    low = (alpha / 2) ** (1 / n)
    assert epsilon_clopper_pearson(n, 0, n, n, alpha=alpha) == pytest.approx(
        math.log(low / (1 - low)), rel=1e-9)


def test_clopper_pearson_broadcasts_and_grows_with_evidence():
    got = epsilon_clopper_pearson([[100], [200], [300]], [10, 40], 400, 400)
    assert got.shape == (3, 2)
    assert np.all(np.diff(got, axis=0) > 0) and np.all(np.diff(got, axis=1) < 0)
    # Larger alpha (less confidence) proves more; δ > 0 and more thresholds searched prove less.
    base = epsilon_clopper_pearson(200, 10, 400, 400)
    assert epsilon_clopper_pearson(200, 10, 400, 400, alpha=0.2) > base
    assert epsilon_clopper_pearson(200, 10, 400, 400, delta=0.05) < base
    assert epsilon_clopper_pearson(200, 10, 400, 400, thresholds=40) < base
    assert math.isnan(epsilon_clopper_pearson(0, 10, 0, 400))  # no positives: nothing to read


# --------------------------------------------------------------------------- Gaussian DP


def test_gaussian_dp_mu_recovers_the_mechanisms_mu_at_every_threshold():
    mechanism = GaussianMechanism(1.3)
    tpr, fpr = mechanism.rates(np.array([-1.0, 0.0, 0.65, 2.0]))
    assert gaussian_dp_mu(tpr, fpr) == pytest.approx(np.full(4, 1.3), rel=1e-9)
    assert gaussian_dp_mu(norm.cdf(1.0), norm.cdf(-0.5)) == pytest.approx(1.5)
    assert gaussian_dp_mu(0.3, 0.3) == 0.0 and gaussian_dp_mu(0.2, 0.4) == 0.0
    assert gaussian_dp_mu(1.0, 0.5) == math.inf and gaussian_dp_mu(0.5, 0.0) == math.inf
    assert math.isnan(gaussian_dp_mu(math.nan, 0.1))


@pytest.mark.parametrize("mu,delta", [(0.3, 1e-5), (1.0, 1e-5), (2.5, 1e-3), (1.0, 1e-9)])
def test_epsilon_of_gaussian_dp_solves_the_printed_profile(mu, delta):
    eps = epsilon_of_gaussian_dp(mu, delta)
    assert gdp_delta(eps, mu) == pytest.approx(delta, rel=1e-6)
    assert float(GaussianMechanism(mu).delta_at(eps)) == pytest.approx(delta, rel=1e-6)
    assert eps == pytest.approx(jax_gdp_epsilon(mu, delta), abs=1e-8)


@pytest.mark.parametrize("epsilon,delta", [(1.0, 1e-5), (4.0, 1e-5), (8.0, 1e-6)])
def test_epsilon_of_gaussian_dp_inverts_the_calibrated_mechanism(epsilon, delta):
    mu = GaussianMechanism.calibrated(epsilon, delta).mu
    assert epsilon_of_gaussian_dp(mu, delta) == pytest.approx(epsilon, rel=1e-8)


def test_epsilon_of_gaussian_dp_limits():
    assert epsilon_of_gaussian_dp(0.0, 1e-5) == 0.0
    assert epsilon_of_gaussian_dp(math.inf, 1e-5) == math.inf
    assert math.isnan(epsilon_of_gaussian_dp(1.0, 0.0))  # μ-GDP is ε-DP for no finite ε
    assert math.isnan(epsilon_of_gaussian_dp(math.nan, 1e-5))
    # δ at or above δ_μ(0) = 2Φ(μ/2) − 1 is met at ε = 0.
    assert epsilon_of_gaussian_dp(0.5, 2 * norm.cdf(0.25) - 1) == 0.0
    got = epsilon_of_gaussian_dp([0.5, 1.0, 2.0], [[1e-5], [1e-3]])
    assert got.shape == (2, 3) and np.all(np.diff(got, axis=1) > 0) and np.all(got[0] > got[1])


def test_epsilon_gaussian_dp_is_the_mu_of_the_exact_ends():
    tp, fp, n, level = 300, 40, 500, 0.05 / 2
    tpr_low, fpr_high = beta.ppf(level, tp, n - tp + 1), beta.ppf(1 - level, fp + 1, n - fp)
    mu = norm.ppf(tpr_low) - norm.ppf(fpr_high)
    got = epsilon_gaussian_dp(tp, fp, n, n, delta=1e-5)
    assert got == pytest.approx(jax_gdp_epsilon(mu, 1e-5), abs=1e-8)
    assert epsilon_gaussian_dp(tp, fp, n, n, delta=1e-5, alpha=0.2) > got
    assert epsilon_gaussian_dp(tp, fp, n, n, delta=1e-3) < got


# --------------------------------------------------------------------------- one run


@pytest.mark.parametrize("m,r,v,delta", [(1000, 100, 90, 0.0), (1000, 100, 90, 1e-5),
                                         (200, 50, 40, 1e-3), (10_000, 1000, 700, 1e-5),
                                         (1000, 500, 300, 1e-6), (100, 20, 20, 1e-4)])
def test_one_run_is_jax_privacys_rule_at_half(m, r, v, delta):
    expected = jax_one_run_epsilon(m, r, v, 0.05, delta)
    assert expected > 0
    assert epsilon_one_run(v, r, m, delta=delta, alpha=0.05) == pytest.approx(expected, abs=1e-7)


def test_one_run_all_right_has_a_closed_form_at_any_p():
    """δ = 0, every guess right: the p-value is q_ε^r, so q_ε = alpha^(1/r) and
    ε = logit(alpha^(1/r)) − logit(p), q_ε = p·e^ε/(p·e^ε + 1 − p) being expit(ε + logit p)."""
    r, alpha = 30, 0.05
    for p in (0.5, 0.2, 0.8):
        expected = logit(alpha ** (1 / r)) - logit(p)
        assert epsilon_one_run(r, r, 100, alpha=alpha, p=p) == pytest.approx(expected, abs=1e-8)


def test_one_run_p_value_rises_with_epsilon():
    """So the root found is the least ε whose claim survives: every smaller ε is rejected."""
    from sweeper.bounds.proven import _one_run_p_value

    grid = np.linspace(0.0, 6.0, 121)
    for m, r, v, delta in [(10_000, 1000, 700, 1e-5), (1000, 100, 90, 1e-4), (400, 200, 150, 1e-3)]:
        values = [_one_run_p_value(e, v, r, m, delta, 0.5) for e in grid]
        assert np.all(np.diff(values) >= -1e-15)


def test_one_run_monotone_limits_and_nan():
    base = epsilon_one_run(80, 100, 1000)
    assert epsilon_one_run(90, 100, 1000) > base > epsilon_one_run(70, 100, 1000)
    assert epsilon_one_run(80, 100, 1000, alpha=0.2) > base
    assert epsilon_one_run(80, 100, 1000, delta=1e-4) < base
    assert epsilon_one_run(0, 0, 1000) == 0.0 and epsilon_one_run(50, 100, 1000) == 0.0
    # p ≠ 1/2 with δ > 0: the δ-term is proven at p = 1/2 only.
    assert math.isnan(epsilon_one_run(80, 100, 1000, delta=1e-5, p=0.2))
    # A rarer member makes the same count of right "in" guesses stronger evidence.
    assert epsilon_one_run(80, 100, 1000, p=0.2) > base > epsilon_one_run(80, 100, 1000, p=0.7)
    assert epsilon_one_run([80, 90], 100, 1000, p=[[0.5], [0.2]]).shape == (2, 2)


def test_one_run_guesses_by_hand():
    scores = [5.0, 4.0, 3.0, 2.0, 1.0, 0.0]
    included = [1, 1, 0, 1, 0, 0]
    assert one_run_guesses(scores, included, 2, 2) == (4, 4)  # 0, 1 in; 4, 5 out: all right
    assert one_run_guesses(scores, included, 3, 0) == (2, 3)  # 2 is out
    assert one_run_guesses(scores, included, 0, 3) == (2, 3)  # 3 is in
    # A tie the k-th guess would split is not guessed at all; NaN ranks lowest.
    assert one_run_guesses([1.0, 1.0, math.nan], [False, True, True], 1) == (0, 0)
    assert one_run_guesses([1.0, 1.0, math.nan], [False, True, True], 0, 1) == (0, 1)
    assert one_run_guesses([1.0, 1.0, 0.0], [False, True, True], 2) == (1, 2)  # tie unsplit
    assert one_run_guesses([3.0, 2.0, 2.0, 2.0, 1.0], [1, 0, 1, 1, 0], 2, 2) == (2, 2)


def test_a_pooled_audit_does_not_depend_on_the_order_of_its_rows():
    """Issue 50: trials pooled in another order gave another one-run ε where scores tie (ties
    went by index).  Scores rounded to a few values, rows permuted: one ε, both readings."""
    rng = np.random.default_rng(5)
    included = rng.random(2000) < 0.5
    scores = np.round(GaussianMechanism(2.0).release(included, rng), 0)
    found = set()
    for _ in range(5):
        order = rng.permutation(included.size)
        found.add((best_one_run_epsilon(scores[order], included[order], delta=1e-5),
                   best_one_run_epsilon(scores[order], included[order], delta=1e-5,
                                        rule=epsilon_one_run_fdp)))
    assert len(found) == 1 and min(found.pop()) > 0


def test_best_one_run_is_bonferroni_over_the_ks():
    rng = np.random.default_rng(7)
    included = rng.random(2000) < 0.5
    scores = GaussianMechanism(2.0).release(included, rng)
    ks = [20, (25, 25), 200]
    expected = max(epsilon_one_run(*one_run_guesses(scores, included, *(k if isinstance(k, tuple)
                                                                          else (k, 0))), 2000,
                                   alpha=0.05 / 3) for k in ks)
    assert best_one_run_epsilon(scores, included, ks=ks) == expected > 0
    assert best_one_run_epsilon(scores, included, ks=[200]) == epsilon_one_run(
        *one_run_guesses(scores, included, 200), 2000)


# --------------------------------------------------------------------------- Monte Carlo


@pytest.mark.parametrize("p", [0.5, 0.2, 0.8])
def test_one_run_at_any_p_is_valid_and_tight_on_randomized_response(p):
    """Randomized response at exactly ε = 1: given output 1, a canary is in with probability
    exactly p·e/(p·e + 1 − p) = q_ε, so guessing "in" on every output 1 is right ~ Bin(ones,
    q_ε): the estimate exceeds ε = 1 in about a fraction alpha of runs and no more.  The paper's
    rule at 1/2 (q = e/(1 + e)) is wrong at p = 0.8, where it claims ε > 1 nearly always."""
    rng = np.random.default_rng(int(p * 100))
    runs, m, alpha, mechanism = 300, 500, 0.05, RandomizedResponse(1.0)
    included = rng.random((runs, m)) < p
    ones = mechanism.release(included, rng) == 1.0
    guesses, correct = ones.sum(1), (ones & included).sum(1)
    proven = epsilon_one_run(correct, guesses, m, alpha=alpha, p=p)
    assert np.sum(proven > 1.0) <= allowed(runs, alpha)
    assert np.sum(proven > 1.0) >= 1  # tight: the level is used, not wasted
    naive = epsilon_one_run(correct, guesses, m, alpha=alpha, p=0.5)
    if p == 0.8:
        assert np.mean(naive > 1.0) > 0.9


def test_estimates_on_an_exact_gaussian_mechanism_never_exceed_its_epsilon():
    """Gaussian mechanism calibrated to exactly (ε = 2, δ = 1e-5): at a fixed threshold the
    Clopper–Pearson and Gaussian-DP estimates, and the one-run estimate at p = 1/2 (guesses by
    score), exceed ε = 2 in at most a fraction alpha of 200 runs."""
    rng = np.random.default_rng(2024)
    epsilon, delta, alpha, runs, n = 2.0, 1e-5, 0.05, 200, 2000
    mechanism = GaussianMechanism.calibrated(epsilon, delta)
    tpr, fpr = mechanism.rates(1.5)
    tp, fp = rng.binomial(n, tpr, runs), rng.binomial(n, fpr, runs)
    rigorous = epsilon_clopper_pearson(tp, fp, n, n, delta=delta, alpha=alpha)
    gaussian = epsilon_gaussian_dp(tp, fp, n, n, delta=delta, alpha=alpha)
    assert np.all(rigorous <= gaussian + 1e-12)  # the Gaussian curve is the tighter reading
    assert np.sum(gaussian > epsilon) <= allowed(runs, alpha)
    assert np.sum(rigorous > epsilon) <= allowed(runs, alpha)
    one_run = []
    for _ in range(runs):
        included = rng.random(n) < 0.5
        scores = mechanism.release(included, rng)
        one_run.append(epsilon_one_run(*one_run_guesses(scores, included, 100, 100), n,
                                       delta=delta, alpha=alpha))
    assert np.sum(np.array(one_run) > epsilon) <= allowed(runs, alpha)


def test_gaussian_dp_comes_close_with_many_observations():
    """10⁵ members and 10⁵ non-members of the exact mechanism at ε = 2: within 10 % of ε."""
    rng = np.random.default_rng(5)
    mechanism, n = GaussianMechanism.calibrated(2.0, 1e-5), 100_000
    members = np.r_[np.ones(n, bool), np.zeros(n, bool)]
    scores = mechanism.release(members, rng)
    tp, fp = int(np.sum(scores[:n] >= 0.5)), int(np.sum(scores[n:] >= 0.5))
    assert 1.8 <= epsilon_gaussian_dp(tp, fp, n, n, delta=1e-5) <= 2.0


def test_a_mechanism_twice_too_loud_is_caught():
    """The detector: μ twice what (ε = 2, δ = 1e-7) allows (its true ε at that δ is 4.27).
    Clopper–Pearson at a fixed threshold on 2·10⁵ + 2·10⁵ records, and one run on 10⁵ canaries
    at p = 1/2, each prove more than the claimed ε = 2."""
    rng = np.random.default_rng(11)
    epsilon, delta = 2.0, 1e-7
    loud = GaussianMechanism(2 * GaussianMechanism.calibrated(epsilon, delta).mu)
    n = 200_000
    members = np.r_[np.ones(n, bool), np.zeros(n, bool)]
    scores = loud.release(members, rng)
    tp, fp = int(np.sum(scores[:n] >= 3.0)), int(np.sum(scores[n:] >= 3.0))
    assert epsilon_clopper_pearson(tp, fp, n, n, delta=delta) > epsilon
    m = 100_000
    included = rng.random(m) < 0.5
    canary_scores = loud.release(included, rng)
    assert best_one_run_epsilon(canary_scores, included, delta=delta,
                                ks=[(m // 200, m // 200), (m // 100, m // 100)]) > epsilon


# --------------------------------------------------------------------------- DP-SGD's profile


def test_full_batch_dpsgd_is_the_gaussian_mechanism():
    profile = dpsgd_privacy_profile(2.0, 1.0, 16)
    assert isinstance(profile, GaussianMechanism) and profile.mu == pytest.approx(2.0)
    assert dpsgd_privacy_profile(2.0, 1.0, 16) is profile  # cached
    assert bound_profile(2.0, 1.0, 16, 0.3, 0.4) == tightest_bound(GaussianMechanism(2.0), 0.3,
                                                                  0.4)


def test_the_prv_profile_is_an_upper_bound_and_close():
    """Opacus's PRV at q = 1 is the Gaussian mechanism μ = √16/2 = 2, whose δ(ε') is exact: the
    upper side never falls below it and stays within eps_error's shift of it."""
    prv, exact = _PrvProfile(2.0, 1.0, 16, 0.01, 1e-10), GaussianMechanism(2.0)
    grid = np.linspace(0.0, 8.0, 41)
    upper, truth = prv.delta_at(grid), exact.delta_at(grid)
    assert np.all(upper >= truth)
    assert np.all(upper[1:] <= exact.delta_at(grid[1:] - 0.03) + 1e-9)
    assert prv.tight_epsilon(0.5) == pytest.approx(exact.tight_epsilon(0.5), abs=0.02)


SLOW = pytest.mark.slow  # Opacus's noise search takes 2–8 s here on a busy 2-core machine


@pytest.mark.parametrize("accountant,epsilon,sample_rate", [
    ("rdp", 4.0, 0.25), ("rdp", 2.0, 1.0), ("prv", 2.0, 1.0),
    pytest.param("rdp", 1.0, 0.25, marks=SLOW), pytest.param("prv", 1.0, 0.25, marks=SLOW),
    pytest.param("prv", 4.0, 0.25, marks=SLOW)])
def test_bound_profile_is_below_the_bound_the_noise_was_calibrated_to(accountant, epsilon,
                                                                      sample_rate):
    """σ from the training's own calibration (`jobs.engine.accounting.calibrate_noise`), over steps that
    are exactly epochs/q: the whole profile's least bound is at most U at the calibrated (ε, δ)."""
    from jobs.engine.accounting import calibrate_noise
    from jobs.engine.training import TrainSettings

    delta, epochs = 1e-5, 2
    settings = TrainSettings(model="m", epochs=epochs, batch_size=1, lr=0.1, momentum=0.0,
                             max_grad_norm=1.0, accountant=accountant, epsilon=epsilon,
                             delta=delta)
    sigma = calibrate_noise(settings, sample_rate)
    steps = round(epochs / sample_rate)
    p, tpr = np.array([[0.1], [0.5]]), np.array([0.01, 0.3, 0.9])
    tight = bound_profile(sigma, sample_rate, steps, p, tpr)
    assert tight.shape == (2, 3)
    assert np.all(tight <= precision_bound(epsilon, p, delta, tpr) + 1e-12)
    # Subsampling only helps: the same σ and steps at q = 1 allow more.
    if sample_rate < 1.0:
        assert np.all(tight <= bound_profile(sigma, 1.0, steps, p, tpr) + 1e-12)


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("call,name", [
    (lambda: epsilon_clopper_pearson(5, 1, 4, 10), "tp"),
    (lambda: epsilon_clopper_pearson(1, 11, 4, 10), "fp"),
    (lambda: epsilon_clopper_pearson(-1, 1, 4, 10), "tp"),
    (lambda: epsilon_clopper_pearson(1.5, 1, 4, 10), "tp"),
    (lambda: epsilon_clopper_pearson(1, 1, 4, 10, alpha=0.0), "alpha"),
    (lambda: epsilon_clopper_pearson(1, 1, 4, 10, thresholds=0), "thresholds"),
    (lambda: epsilon_clopper_pearson(1, 1, 4, 10, delta=1.0), "delta"),
    (lambda: epsilon_gaussian_dp(1, 1, 4, 10, delta=-1e-5), "delta"),
    (lambda: gaussian_dp_mu(1.2, 0.1), "tpr"),
    (lambda: epsilon_of_gaussian_dp(-0.1, 1e-5), "mu"),
    (lambda: epsilon_one_run(11, 10, 100), "correct"),
    (lambda: epsilon_one_run(5, 101, 100), "guesses"),
    (lambda: epsilon_one_run(5, 10, 100, p=1.0), "p"),
    (lambda: epsilon_one_run(5, 10, 100, alpha=1.0), "alpha"),
    (lambda: one_run_guesses([1.0, 2.0], [True], 1), "included"),
    (lambda: one_run_guesses([1.0, 2.0], [2, 0], 1), "included"),
    (lambda: one_run_guesses([1.0, 2.0], [1, 0], 2, 1), "k_plus + k_minus"),
    (lambda: best_one_run_epsilon([1.0, 2.0], [1, 0], p=0.2, ks=[(1, 1)]), "k_minus"),
    (lambda: dpsgd_privacy_profile(0.0, 0.1, 10), "noise_multiplier"),
    (lambda: dpsgd_privacy_profile(1.0, 0.0, 10), "sample_rate"),
    (lambda: dpsgd_privacy_profile(1.0, 0.1, 0), "steps"),
    (lambda: bound_profile(1.0, 1.0, 10, 0.5, 0.5, form="typo"), "form"),
])
def test_out_of_domain_input_names_the_argument(call, name):
    with pytest.raises(ValueError, match=re.escape(name)):
        call()


def test_importing_the_package_stays_numpy_only():
    import subprocess
    import sys

    code = ("import sys, sweeper.bounds; "
            "print(sorted(m for m in ('scipy', 'opacus', 'torch', 'jobs') if m in sys.modules))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "[]"


# --------------------------------------------------------------------------- one run, f-DP


def gaussian_sigma(eps, delta):
    """The Gaussian mechanism's σ (sensitivity 1) that is exactly (ε, δ)-DP, from Balle & Wang's
    analytic formula δ(ε) = Φ(1/(2σ) − εσ) − e^ε·Φ(−1/(2σ) − εσ): the σ jax_privacy takes from
    `dp_accounting.get_sigma_gaussian` (δ falls as σ grows)."""
    def gap(sigma):
        return (norm.cdf(1 / (2 * sigma) - eps * sigma)
                - math.exp(eps) * norm.cdf(-1 / (2 * sigma) - eps * sigma) - delta)
    high = 1.0
    while gap(high) > 0:
        high *= 2
    return brentq(gap, 1e-9, high, xtol=1e-14, rtol=1e-14)


def jax_one_run_fdp_epsilon(m, guesses, correct, alpha, delta):
    """jax_privacy `_epsilon_one_run_fdp` from eps_lo = 0, as it writes the recursion."""
    def objective(eps):
        sigma = gaussian_sigma(eps, delta)
        inverse = lambda x: norm.cdf(norm.ppf(x) - 1 / sigma)  # noqa: E731
        r, h = alpha * correct / m, alpha * (guesses - correct) / m
        for i in range(correct - 1, -1, -1):
            h_new = max(h, inverse(r))
            if h == h_new:
                break
            r, h = min(r + (i / (guesses - i)) * (h_new - h), 1.0), h_new
        return r + h - guesses / m
    return jax_largest_rejected(objective)


@pytest.mark.parametrize("m,guesses,correct,delta", [
    (1000, 100, 90, 1e-5), (20_000, 1000, 900, 1e-6), (2000, 200, 150, 1e-5),
    (10_000, 1000, 700, 1e-5), (400, 40, 40, 1e-3), (5000, 2500, 1800, 1e-6)])
def test_one_run_fdp_is_jax_privacys_rule(m, guesses, correct, delta):
    from sweeper.bounds.one_run_fdp import epsilon_one_run_fdp

    expected = jax_one_run_fdp_epsilon(m, guesses, correct, 0.05, delta)
    assert expected > 0
    assert epsilon_one_run_fdp(correct, guesses, m, delta=delta, alpha=0.05) == pytest.approx(
        expected, abs=2e-6)


def jax_pareto(points):
    """jax_privacy `_pareto_frontier`: drop the points their neighbours dominate, until none."""
    index = np.arange(len(points))
    while len(index) > 2:
        step = np.diff(points[index], axis=0)
        dominated = step[:-1, 1] * step[1:, 0] - step[1:, 1] * step[:-1, 0] <= 0
        if not dominated.any():
            break
        index = index[np.r_[True, ~dominated, True]]
    return index


def jax_auditor_one_run_fdp(inside, outside, alpha, delta, epsilon_at):
    """jax_privacy `CanaryScoreAuditor.epsilon_one_run_fdp` (Bonferroni over its frontier's
    thresholds, search by decreasing precision bound), with `epsilon_at(m, guesses, correct,
    level, δ)` the core rule under test."""
    thresholds = np.concatenate((np.union1d(inside, outside), [np.inf]))
    fn = np.searchsorted(np.sort(inside), thresholds, "left")
    tn = np.searchsorted(np.sort(outside), thresholds, "left")
    keep = jax_pareto(np.stack([fn, tn], axis=1))
    fn, tn = fn[keep], tn[keep]
    level = alpha / len(fn)
    tp, fp = fn[-1] - fn, tn[-1] - tn
    total = tp + fp
    bound = 1 - np.where(fp < total, beta.ppf(1 - level, fp + 1, total - fp), 1.0)
    best, best_q = 0.0, 0.5
    for index in np.argsort(-bound):
        if total[index] == 0 or tp[index] / total[index] <= best_q:
            continue
        found = epsilon_at(fn[-1] + tn[-1], int(total[index]), int(tp[index]), level, delta)
        if found > best:
            best, best_q = found, expit(found)
    return best


@pytest.mark.parametrize("shift,published", [(1, 2.164749), (2, 4.7218075), (4, 9.133752)])
def test_one_run_fdp_gives_jax_privacys_published_values(shift, published):
    """jax_privacy's test: 10 000 canaries in and 10 000 out at the normal quantiles
    Φ⁻¹((i + ½)/n), those in shifted by 1, 2, 4; α = 0.05, δ = 1e-6."""
    from sweeper.bounds.one_run_fdp import epsilon_one_run_fdp

    n = 10_000
    outside = norm.ppf((np.arange(n) + 0.5) / n)

    def ours(m, guesses, correct, level, delta):
        return float(epsilon_one_run_fdp(correct, guesses, m, delta=delta, alpha=level))

    found = jax_auditor_one_run_fdp(outside + shift, outside, 0.05, 1e-6, ours)
    assert found == pytest.approx(published, abs=2e-6)


def test_one_run_fdp_proves_more_than_steinke_from_the_same_guesses_and_says_where_it_cannot():
    """Issue 29: 1.25–2× Steinke et al.'s ε from the same guesses at the sweep's δ; NaN at
    p ≠ 1/2 (the derivation's) and at δ = 0 (μ-GDP is no ε-DP); a rule that never claims more
    than the mechanism: the (ε, δ) curve's own μ is the claim it tests."""
    from sweeper.bounds.one_run_fdp import epsilon_one_run_fdp, gaussian_dp_mu_of

    for m, guesses, correct in [(2000, 200, 190), (20_000, 2000, 1700), (2000, 100, 100)]:
        steinke = epsilon_one_run(correct, guesses, m, delta=1e-5, alpha=0.05)
        fdp = epsilon_one_run_fdp(correct, guesses, m, delta=1e-5, alpha=0.05)
        assert 1.2 * steinke < fdp
    assert math.isnan(epsilon_one_run_fdp(90, 100, 1000, delta=1e-5, p=0.2))
    assert math.isnan(epsilon_one_run_fdp(90, 100, 1000, delta=0.0))
    assert epsilon_one_run_fdp(0, 100, 1000, delta=1e-5) == 0.0
    for eps, delta in [(1.0, 1e-5), (4.0, 1e-6), (0.3, 1e-3)]:
        mu = gaussian_dp_mu_of(eps, delta)
        assert mu == pytest.approx(1 / gaussian_sigma(eps, delta), rel=1e-8)
        assert epsilon_of_gaussian_dp(mu, delta) == pytest.approx(eps, abs=1e-8)


# --------------------------------------------------------------------------- DP-SGD's family


def subsampled_gaussian_llr(included, q, sigma, steps, rng, noise=None):
    """White-box canary statistics of the exact mechanism: per step z = B + N(0, σ²) with
    B ~ Bernoulli(q) for a canary in D (0 out of it), then the subsampled Gaussian's likelihood
    ratio Σ_t log(1 − q + q·e^{(2z − 1)/(2σ²)}) (`jobs.engine.canaries`), the noise of `noise`·σ."""
    noise = sigma if noise is None else noise
    drawn = (rng.random((len(included), steps)) < q) & included[:, None]
    z = drawn + rng.normal(0.0, noise, (len(included), steps))
    return np.logaddexp(math.log1p(-q), math.log(q) + (2 * z - 1) / (2 * sigma ** 2)).sum(1)


def test_the_family_audit_rules_out_a_correct_mechanism_at_most_alpha_of_the_time():
    """Issue 29.2, validity on the exact mechanism: 1 000 audits of 600 canaries (q = 0.2,
    σ = 1, 20 steps) whose observations are exactly DP-SGD's at the claimed noise.  A level-α
    claim may be wrong in α of them (a binomial tail at 1e-6 allows more); the Bonferroni ends
    make it far rarer.  With half the noise it is ruled out nearly always."""
    from sweeper.bounds.audit_columns import threshold_counts
    from sweeper.bounds import noise_ruled_out

    rng = np.random.default_rng(29)
    q, sigma, steps, alpha, runs = 0.2, 1.0, 20, 0.05, 1000

    def ruled(noise: float) -> bool:
        included = rng.random(600) < 0.5
        scores = subsampled_gaussian_llr(included, q, sigma, steps, rng, noise=noise)
        tp, fp = threshold_counts(scores, included)
        return noise_ruled_out(tp, fp, int(included.sum()), int((~included).sum()),
                               noise_multiplier=sigma, sample_rate=q, steps=steps, alpha=alpha)

    assert sum(ruled(sigma) for _ in range(runs)) <= allowed(runs, alpha)
    assert sum(ruled(sigma / 2) for _ in range(50)) >= 45


def test_the_family_audit_proves_no_more_than_the_mechanism_spends():
    """The ε it proves on the exact mechanism (q = 0.1, 100 steps: the `dpsgd_audit` arm's)
    stays under the mechanism's own (PRV) ε at δ, and is a fair share of it."""
    from opacus.accountants import PRVAccountant

    from sweeper.bounds.audit_columns import threshold_counts
    from sweeper.bounds import family_audit, noise_ruled_out

    rng = np.random.default_rng(30)
    q, sigma, steps = 0.1, 1.2, 100
    accountant = PRVAccountant()
    accountant.history = [(sigma, q, steps)]
    spent = accountant.get_epsilon(delta=1e-5)
    included = rng.random(4000) < 0.5
    tp, fp = threshold_counts(subsampled_gaussian_llr(included, q, sigma, steps, rng), included)
    counts = dict(positives=int(included.sum()), negatives=int((~included).sum()))
    training = dict(noise_multiplier=sigma, sample_rate=q, steps=steps)
    proven = family_audit(tp, fp, **counts, **training, delta=1e-5, alpha=0.05)
    assert not noise_ruled_out(tp, fp, **counts, **training, alpha=0.05)
    assert 0.4 * spent < proven <= spent
