"""Exact-privacy mechanisms against the precision bound U (Thudi et al. 2024, Theorem 3.3).

References are derived by hand in the comments (Φ via math.erf where a number is needed), never
taken from the module's output.  Notation: q = e^ε/(1 + e^ε) (randomized response keeps the bit),
s = TPR, prior p; "derived U" (the library's default) keeps the proof's P(S, x* ∈ D) = p·s,
"printed U" (form="printed") is the papers' formula, which these mechanisms show to be invalid.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from jobs.audits.mechanisms import (GaussianMechanism, RandomizedResponse, describe, gaussian_delta,
                                    from_description, mechanism_for, precision_at,
                                    release_membership)
from sweeper.bounds import BOUND_FORMS, precision_bound, tightest_bound

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")

LN3 = math.log(3.0)


def phi(x: float) -> float:
    """Standard normal CDF from its definition, Φ(x) = (1 + erf(x/√2))/2."""
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def phi_inv(u: float) -> float:
    """Φ⁻¹ by bisection on `phi` (independent of scipy)."""
    lo, hi = -40.0, 40.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if phi(mid) < u else (lo, mid)
    return (lo + hi) / 2.0


# --------------------------------------------------------------------------- randomized response


def test_randomized_response_hand_values_at_ln3():
    # ε = ln 3: q = 3/(1+3) = 3/4.  Attack "output is 1": TPR = 3/4, FPR = 1/4.
    # p = 1/4: precision = (1/4·3/4) / (1/4·3/4 + 3/4·1/4) = 1/2;
    #          U = p·e/(p·e + 1 − p) = (3/4)/(3/4 + 3/4) = 1/2.
    rr = RandomizedResponse(LN3)
    assert rr.rates(1.0) == pytest.approx((0.75, 0.25), rel=1e-15)
    assert precision_at(rr, 1.0, 0.25) == pytest.approx(0.5, rel=1e-15)
    assert precision_bound(LN3, 0.25) == pytest.approx(0.5, rel=1e-15)


@pytest.mark.parametrize("epsilon", [0.0, 0.1, LN3, 1.0, 2.5, 7.0])
@pytest.mark.parametrize("p", [0.01, 0.25, 0.5, 0.9, 1.0])
def test_randomized_response_meets_u_exactly(epsilon, p):
    rr = RandomizedResponse(epsilon)
    e = math.exp(epsilon)
    tpr, fpr = rr.rates(1.0)
    assert tpr == pytest.approx(e / (1 + e), rel=1e-14)
    assert fpr == pytest.approx(1 / (1 + e), rel=1e-14)
    # p·q / (p·q + (1−p)(1−q)) = p·e / (p·e + 1 − p): U at δ = 0, met with equality.
    assert precision_at(rr, 1.0, p) == pytest.approx(p * e / (p * e + 1 - p), rel=1e-12)
    assert precision_at(rr, 1.0, p) == pytest.approx(precision_bound(epsilon, p), rel=1e-12)
    # Its whole profile (δ(ε') > 0 below ε) does not beat δ = 0 at ε' = ε (derived U):
    # δ(ε') = q(1 − e^(ε'−ε)) and s = q give 1 − δ/s = e^(ε'−ε), i.e. ε_eff = ε for every ε' < ε.
    assert tightest_bound(rr, p, tpr) == pytest.approx(precision_bound(epsilon, p), rel=1e-12)
    assert tightest_bound(rr, p, tpr, form="derived") == pytest.approx(
        precision_bound(epsilon, p), rel=1e-12)


def test_randomized_response_other_thresholds_and_vectorized():
    rr = RandomizedResponse(LN3)
    tpr, fpr = rr.rates(np.array([-1.0, 0.0, 0.5, 1.0, 1.5]))
    # t ≤ 0 accepts everything, t ∈ (0, 1] accepts the output 1, t > 1 accepts nothing.
    np.testing.assert_allclose(tpr, [1, 1, 0.75, 0.75, 0], rtol=1e-15)
    np.testing.assert_allclose(fpr, [1, 1, 0.25, 0.25, 0], rtol=1e-15)
    prec = precision_at(rr, np.array([0.0, 2.0]), 0.3)
    assert prec[0] == pytest.approx(0.3)  # accept all: precision = prior
    assert np.isnan(prec[1])  # never fires


def test_randomized_response_privacy_profile_by_hand():
    # δ(ε') = max_S P[M(1)∈S] − e^ε'·P[M(0)∈S]; best S = {1}:
    #   q − e^ε'(1 − q) = (e^ε − e^ε')/(1 + e^ε).
    # ε = ln 3: δ(0) = 2/4 = 1/2 (the total variation), δ(ln 2) = 1/4, δ(ε' ≥ ln 3) = 0.
    rr = RandomizedResponse(LN3)
    np.testing.assert_allclose(rr.delta_at([0.0, math.log(2.0), LN3, 5.0, math.inf]),
                               [0.5, 0.25, 0.0, 0.0, 0.0], rtol=1e-14, atol=1e-16)
    assert RandomizedResponse(0.0).delta_at(0.0) == 0.0


def test_randomized_response_infinite_epsilon_releases_the_bit():
    rr = RandomizedResponse(math.inf)
    members = np.array([True, False, True, False, False])
    np.testing.assert_array_equal(rr.release(members, np.random.default_rng(0)),
                                  [1.0, 0.0, 1.0, 0.0, 0.0])
    assert rr.rates(1.0) == (1.0, 0.0)
    assert precision_at(rr, 1.0, 0.2) == 1.0 == precision_bound(math.inf, 0.2)
    assert rr.delta_at(3.0) == 1.0 and rr.delta_at(math.inf) == 0.0  # (e^∞ − e^3)/(1 + e^∞) → 1
    assert tightest_bound(rr, 0.2, 1.0) == 1.0


# --------------------------------------------------------------------------- Gaussian


def test_gaussian_profile_hand_values():
    # μ = 1, ε = 0: δ = Φ(1/2) − Φ(−1/2) = 2Φ(0.5) − 1 = 2·0.6914624613 − 1 = 0.3829249225.
    g = GaussianMechanism(1.0)
    assert 2 * phi(0.5) - 1 == pytest.approx(0.3829249225, abs=1e-10)
    assert g.delta_at(0.0) == pytest.approx(2 * phi(0.5) - 1, rel=1e-12)
    # μ = 1, ε = 1/2: δ = Φ(0) − e^½·Φ(−1) = 0.5 − 1.6487212707·0.1586552539 = 0.2384217081.
    assert g.delta_at(0.5) == pytest.approx(0.5 - math.exp(0.5) * phi(-1.0), rel=1e-12)
    assert g.delta_at(0.5) == pytest.approx(0.2384217081, abs=1e-10)
    assert g.delta_at(math.inf) == 0.0
    # TPR = Φ(μ − t), FPR = Φ(−t): at t = 1, (Φ(0), Φ(−1)) = (0.5, 0.1586552539).
    assert g.rates(1.0) == pytest.approx((0.5, phi(-1.0)), rel=1e-12)


def test_the_root_finders_profile_is_the_mechanisms_bit_for_bit():
    """`gaussian_delta`, the root finders' unchecked profile at one ε, takes each of
    `delta_at`'s branches alone: the same value on each an ε ≥ 0 reaches (the interval below 0
    and straddling it; ε = 0 and ∞; μ tiny and large), and the hand values above."""
    assert gaussian_delta(0.0, 1.0) == pytest.approx(0.3829249225, abs=1e-10)
    assert gaussian_delta(0.5, 1.0) == pytest.approx(0.2384217081, abs=1e-10)
    rng = np.random.default_rng(0)
    epsilons = np.r_[0.0, math.inf, 5e-324, 10 ** rng.uniform(-8, 2.5, 3000)]
    mus = np.r_[1.0, 1.0, 1.0, 10 ** rng.uniform(-6, 2.2, 3000)]
    a = -epsilons / mus + mus / 2
    assert (a <= 0).any() and (a > 0).any()
    for epsilon, mu in zip(epsilons, mus):
        assert gaussian_delta(float(epsilon), float(mu)) == GaussianMechanism(mu).delta_at(epsilon)


@pytest.mark.parametrize("epsilon", [0.0, 0.3, 1.0, 3.0, 8.0])
@pytest.mark.parametrize("delta", [1e-10, 1e-5, 1e-3, 0.1, 0.5])
def test_gaussian_calibration_round_trips(epsilon, delta):
    g = GaussianMechanism.calibrated(epsilon, delta)
    assert g.delta_at(epsilon) == pytest.approx(delta, rel=1e-9)
    # Smallest μ: δ(ε; μ) rises with μ, so a slightly smaller μ meets δ strictly.
    assert GaussianMechanism(g.mu * (1 - 1e-6)).delta_at(epsilon) < delta


def test_gaussian_calibration_at_zero_epsilon_by_hand_and_monotone():
    # ε = 0: δ = 2Φ(μ/2) − 1, so δ = 2Φ(0.5) − 1 gives μ = 1 exactly.
    assert GaussianMechanism.calibrated(0.0, 2 * phi(0.5) - 1).mu == pytest.approx(1.0, rel=1e-9)
    mus_eps = [GaussianMechanism.calibrated(e, 1e-5).mu for e in (0.1, 0.5, 1.0, 2.0, 4.0, 8.0)]
    mus_delta = [GaussianMechanism.calibrated(1.0, d).mu for d in (1e-9, 1e-6, 1e-3, 0.1, 0.4)]
    assert np.all(np.diff(mus_eps) > 0) and np.all(np.diff(mus_delta) > 0)


@pytest.mark.parametrize("mu", [0.5, 1.0, 2.0, 4.0])
@pytest.mark.parametrize("p", [0.05, 0.25, 0.5, 0.9])
def test_gaussian_never_above_derived_u_and_touches_it(mu, p):
    g = GaussianMechanism(mu)
    grid = np.linspace(0.0, 20.0, 401)
    for t in np.linspace(mu / 2, mu + 3.0, 13):  # ε'(t) = μt − μ²/2 ≥ 0 ⇔ t ≥ μ/2
        s, f = phi(mu - t), phi(-t)
        exact = p * s / (p * s + (1 - p) * f)
        assert precision_at(g, t, p) == pytest.approx(exact, rel=1e-9)
        u = precision_bound(grid, p, g.delta_at(grid), s)  # default form: derived
        assert np.all(u >= exact * (1 - 1e-12))  # never above U, at any ε'
        at = mu * t - mu ** 2 / 2  # where the likelihood ratio e^{μx − μ²/2} equals e^ε'
        assert precision_bound(at, p, g.delta_at(at), s) == pytest.approx(exact, rel=1e-9)
        tight = tightest_bound(g, p, s)
        assert tight == pytest.approx(exact, rel=1e-9)
        assert g.tight_epsilon(s) == pytest.approx(at, rel=1e-9, abs=1e-12)


def test_gaussian_below_half_mu_is_not_touched():
    # t < μ/2 means ε'(t) < 0, outside the profile's domain: the bound is strictly loose there.
    g, p, t = GaussianMechanism(2.0), 0.3, 0.2
    s = phi(2.0 - t)
    assert tightest_bound(g, p, s) > precision_at(g, t, p) + 1e-3


def test_exact_minimum_matches_a_fine_grid_for_both_readings():
    g = GaussianMechanism(1.5)
    grid = np.linspace(0.0, 15.0, 30001)
    for form in BOUND_FORMS:
        for p in (0.1, 0.5, 0.8):
            for s in (0.01, 0.3, 0.9):
                exact = tightest_bound(g, p, s, form=form)
                brute = tightest_bound(g, p, s, grid, form=form)
                assert exact <= brute + 1e-12 and exact == pytest.approx(brute, rel=1e-6)
    out = tightest_bound(g, np.array([0.1, 0.5]), np.array([[0.3], [0.9]]))
    assert out.shape == (2, 2)


def test_derived_bound_on_the_hand_counterexample():
    # Randomized response, ε = ln 3, is (0, 1/2)-DP (δ(0) above).  p = 1/4, attack "output 1":
    # s = 3/4, precision 1/2.
    # derived: 1/(1 + e^0·(3/4)/(1/4)·(1 − (1/2)/(3/4))) = 1/(1 + 3·1/3) = 1/2: touched.
    assert precision_bound(0.0, 0.25, 0.5, 0.75) == pytest.approx(0.5, rel=1e-15)
    rr = RandomizedResponse(LN3)
    assert precision_at(rr, 1.0, 0.25) == pytest.approx(0.5, rel=1e-15)
    assert tightest_bound(rr, 0.25, 0.75) == pytest.approx(0.5, rel=1e-12)
    # δ = 0 and p = 1: the two forms agree.
    assert precision_bound(2.0, 0.3, 0.0, 0.5) == precision_bound(2.0, 0.3, 0.0, 0.5, form="printed")
    assert precision_bound(2.0, 1.0, 0.1, 0.5) == precision_bound(2.0, 1.0, 0.1, 0.5, form="printed")


def test_printed_bound_is_exceeded_by_randomized_response():
    # Same (0, 1/2)-DP case: printed U(0, δ=1/2, p=1/4, s=3/4) = 1/(1 + 3 − (1/2)·(3/4)/(3/4))
    # = 1/3.5 = 2/7, below the exact precision 1/2 of the attack "output 1".
    rr = RandomizedResponse(LN3)
    exact = precision_at(rr, 1.0, 0.25)
    printed = precision_bound(0.0, 0.25, 0.5, 0.75, form="printed")
    assert printed == pytest.approx(2 / 7, rel=1e-15) and printed < exact - 0.2
    assert tightest_bound(rr, 0.25, 0.75, form="printed") <= 2 / 7 + 1e-15


def test_gaussian_touches_derived_and_exceeds_printed_at_mu1_t1_p_half():
    # μ = 1, t = 1, p = 1/2.  s = TPR = Φ(μ − t) = Φ(0) = 1/2, FPR = Φ(−1) = 0.1586552539;
    # precision = (1/2·1/2)/(1/2·1/2 + 1/2·Φ(−1)) = 1/(1 + 2Φ(−1)) = 1/1.3173105 = 0.7591225.
    # The LR test there has ε' = μt − μ²/2 = 1/2 and δ(1/2) = Φ(0) − e^½·Φ(−1) = 0.2384217081.
    # derived: e^-½·(1 − δ/s) = e^-½·(1 − 2·(1/2 − e^½Φ(−1))) = e^-½·2e^½Φ(−1) = 2Φ(−1), so
    #   U = 1/(1 + 2Φ(−1)) = precision exactly: touched at the Neyman–Pearson threshold.
    # printed: (1−p)/p = 1 and δ·e^-½·(1−p)/s = δ·e^-½·(1/2)/(1/2) = δ·e^-½, so
    #   U = 1/(1 + e^-½ − δ·e^-½) = 1/(1 + 0.6065307·0.7615783) = 1/1.4619206 = 0.684032
    #   < 0.7591225: exceeded.
    g, p, t = GaussianMechanism(1.0), 0.5, 1.0
    s, fpr = phi(0.0), phi(-1.0)
    exact = 1.0 / (1.0 + 2.0 * fpr)
    assert exact == pytest.approx(0.7591225, abs=1e-7)
    assert precision_at(g, t, p) == pytest.approx(exact, rel=1e-12)
    d = 0.5 - math.exp(0.5) * fpr
    assert g.delta_at(0.5) == pytest.approx(d, rel=1e-12)
    assert precision_bound(0.5, p, d, s) == pytest.approx(exact, abs=1e-9)
    assert tightest_bound(g, p, s) == pytest.approx(exact, abs=1e-9)
    printed = 1.0 / (1.0 + math.exp(-0.5) * (1.0 - d))
    assert printed == pytest.approx(0.684032, abs=1e-6)
    assert precision_bound(0.5, p, d, s, form="printed") == pytest.approx(printed, rel=1e-12)
    assert printed < exact - 0.07  # the printed bound IS exceeded, by 0.075
    # its tightest value over the whole profile is lower still: the printed form is the derived
    # one at TPR s/p = 1, whose optimum is ε' = 0 (h(ε') = e^-ε'·(1 − δ(ε')) only falls), where
    # δ = 2Φ(1/2) − 1 and U = 1/(1 + 1·(1 − δ)) = 1/(3 − 2Φ(1/2)) = 1/1.6170751 = 0.618400
    at_zero = 1.0 / (3.0 - 2.0 * phi(0.5))
    assert tightest_bound(g, p, s, form="printed") == pytest.approx(at_zero, rel=1e-9)
    assert at_zero == pytest.approx(0.618400, abs=1e-6)


@pytest.mark.parametrize("mu", [0.5, 1.0, 2.0])
@pytest.mark.parametrize("p", [0.05, 0.25, 0.5, 0.9])
def test_printed_bound_is_exceeded_across_lr_thresholds(mu, p):
    # At every LR threshold t > μ/2 (ε' = μt − μ²/2 > 0, δ(ε') > 0) and p < 1 the derived bound is
    # met with equality, so the printed one, smaller wherever δ > 0 and p < 1, is exceeded.
    g = GaussianMechanism(mu)
    for t in np.linspace(mu / 2 + 0.1, mu + 2.0, 8):
        s, at = phi(mu - t), mu * t - mu ** 2 / 2
        exact = precision_at(g, t, p)
        assert precision_bound(at, p, g.delta_at(at), s) == pytest.approx(exact, abs=1e-9)
        assert precision_bound(at, p, g.delta_at(at), s, form="printed") < exact - 1e-9


# --------------------------------------------------------------------------- for the sweep


def test_mechanism_for_picks_pure_dp_when_delta_is_zero_or_epsilon_infinite():
    for eps in (0.0, 0.5, LN3, 8.0, math.inf):
        m = mechanism_for(eps, 0.0)
        assert isinstance(m, RandomizedResponse) and m.epsilon == eps
        assert m.delta_at(eps) == 0.0  # exactly (ε, 0)-DP
    m = mechanism_for(math.inf, 1e-5)  # no Gaussian has ε = ∞; releasing the bit is ∞-DP
    assert isinstance(m, RandomizedResponse) and m.epsilon == math.inf


def test_mechanism_for_calibrates_a_gaussian_when_delta_is_positive():
    # ε = 0: δ(0; μ) = 2Φ(μ/2) − 1, so δ = 2Φ(1/2) − 1 = 0.3829249 gives μ = 1 exactly.
    m = mechanism_for(0.0, 2 * phi(0.5) - 1)
    assert isinstance(m, GaussianMechanism) and m.mu == pytest.approx(1.0, rel=1e-9)
    # ε = 1/2, δ = Φ(0) − e^½·Φ(−1) = 0.2384217 is μ = 1's profile at 1/2 (see above): μ = 1.
    m = mechanism_for(0.5, 0.5 - math.exp(0.5) * phi(-1.0))
    assert isinstance(m, GaussianMechanism) and m.mu == pytest.approx(1.0, rel=1e-9)
    for eps, delta in ((1.0, 1e-5), (3.0, 1e-5), (8.0, 1e-9)):
        m = mechanism_for(eps, delta)
        assert isinstance(m, GaussianMechanism)
        assert m.mu == GaussianMechanism.calibrated(eps, delta).mu
        assert m.delta_at(eps) == pytest.approx(delta, rel=1e-9)


@pytest.mark.parametrize("mechanism, expected", [
    (RandomizedResponse(LN3), {"kind": "randomized_response", "epsilon": LN3}),
    (RandomizedResponse(0.0), {"kind": "randomized_response", "epsilon": 0.0}),
    (RandomizedResponse(math.inf), {"kind": "randomized_response", "epsilon": "inf"}),
    (GaussianMechanism(1.0), {"kind": "gaussian", "mu": 1.0}),
    (GaussianMechanism(0.1 + 0.2), {"kind": "gaussian", "mu": 0.1 + 0.2}),
])
def test_describe_round_trips_through_json(mechanism, expected):
    d = describe(mechanism)
    assert d == expected
    text = json.dumps(d, allow_nan=False)  # plain JSON: no Infinity token
    back = from_description(json.loads(text))
    assert type(back) is type(mechanism) and describe(back) == d
    for name in ("epsilon", "mu"):
        if hasattr(mechanism, name):
            assert getattr(back, name) == getattr(mechanism, name)  # bit-for-bit
    assert back.rates(1.0) == mechanism.rates(1.0)
    assert back.delta_at(0.3) == mechanism.delta_at(0.3)


def test_describe_the_sweeps_mechanisms():
    for eps, delta in ((1.0, 0.0), (math.inf, 0.0), (2.0, 1e-5), (math.inf, 1e-5)):
        m = mechanism_for(eps, delta)
        assert describe(from_description(json.loads(json.dumps(describe(m))))) == describe(m)
    assert from_description({"kind": "randomized_response", "epsilon": math.inf}).epsilon == math.inf
    assert from_description({"kind": "gaussian", "mu": 2}).mu == 2.0  # an int from JSON is fine


def test_a_release_is_one_output_per_pool_record_and_trains_nothing():
    mask = np.arange(10) % 3 == 0
    for mechanism, noise in ((RandomizedResponse(1.0), math.nan), (GaussianMechanism(2.0), 0.5)):
        release = release_membership(mechanism, 1.5, mask, seed=7)
        again = release_membership(mechanism, 1.5, mask, seed=7)
        np.testing.assert_array_equal(release.outputs, again.outputs)  # the seed fixes it
        assert release.pool_logits.shape == (10, 1) and release.pool_logits.dtype == np.float32
        np.testing.assert_array_equal(release.pool_logits[:, 0], release.outputs.astype(np.float32))
        assert release.epsilon == 1.5 and release.members == 4
        assert release.noise_multiplier == noise or (math.isnan(noise) and
                                                     math.isnan(release.noise_multiplier))


# --------------------------------------------------------------------------- simulation


@pytest.mark.parametrize("mechanism, threshold", [
    (RandomizedResponse(1.0), 1.0), (RandomizedResponse(0.2), 0.5),
    (GaussianMechanism(1.5), 0.5), (GaussianMechanism(1.5), 1.0), (GaussianMechanism(0.7), 2.0)])
def test_simulated_rates_within_five_standard_errors(mechanism, threshold):
    rng = np.random.default_rng(20240611)
    members = rng.random(200_000) < 0.3
    accepted = mechanism.release(members, rng) >= threshold
    tpr, fpr = mechanism.rates(threshold)
    for rate, group in ((tpr, members), (fpr, ~members)):
        n = group.sum()
        assert abs(accepted[group].mean() - rate) <= 5 * math.sqrt(rate * (1 - rate) / n)


# --------------------------------------------------------------------------- bad inputs


@pytest.mark.parametrize("call, name", [
    (lambda: RandomizedResponse(-0.1), "epsilon"),
    (lambda: RandomizedResponse(math.nan), "epsilon"),
    (lambda: GaussianMechanism(0.0), "mu"),
    (lambda: GaussianMechanism(math.inf), "mu"),
    (lambda: GaussianMechanism.calibrated(math.inf, 1e-5), "epsilon"),
    (lambda: GaussianMechanism.calibrated(-1.0, 1e-5), "epsilon"),
    (lambda: GaussianMechanism.calibrated(1.0, 0.0), "delta"),
    (lambda: GaussianMechanism.calibrated(1.0, 1.0), "delta"),
    (lambda: GaussianMechanism(1.0).delta_at(-0.5), "epsilon_prime"),
    (lambda: RandomizedResponse(1.0).delta_at([0.0, -1.0]), "epsilon_prime"),
    (lambda: precision_at(GaussianMechanism(1.0), 0.0, 1.5), "p"),
    (lambda: GaussianMechanism(1.0).rates(math.nan), "threshold"),
    (lambda: tightest_bound(GaussianMechanism(1.0), 0.5, 0.0), "tpr"),
    (lambda: tightest_bound(GaussianMechanism(1.0), -0.5, 0.5), "p"),
    (lambda: tightest_bound(GaussianMechanism(1.0), 0.5, 0.5, [-1.0]), "epsilons"),
    (lambda: tightest_bound(GaussianMechanism(1.0), 0.5, 0.5, form="corrected"), "form"),
    (lambda: mechanism_for(-1.0, 0.0), "epsilon"),
    (lambda: mechanism_for(1.0, 1.0), "delta"),
    (lambda: mechanism_for(1.0, -1e-9), "delta"),
    (lambda: describe("gaussian"), "mechanism"),
    (lambda: from_description({"kind": "laplace", "b": 1.0}), "kind"),
    (lambda: from_description(["gaussian", 1.0]), "kind"),
    (lambda: from_description({"kind": "gaussian", "mu": "1"}), "mu"),
    (lambda: from_description({"kind": "gaussian", "mu": 0.0}), "mu"),
    (lambda: from_description({"kind": "gaussian"}), "mu"),
    (lambda: from_description({"kind": "randomized_response", "epsilon": -1.0}), "epsilon"),
    (lambda: from_description({"kind": "randomized_response", "epsilon": None}), "epsilon"),
    (lambda: RandomizedResponse(1.0).release(np.array([0, 2]), np.random.default_rng(0)),
     "members"),
])
def test_bad_inputs_name_the_argument(call, name):
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        call()
