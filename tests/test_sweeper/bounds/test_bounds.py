"""The bound formulas, checked against values derived by hand from the papers' formulas.

References are computed here with `math` from the formula written in the comment, never by
calling the library; the property tests then sweep random grids.  Notation: e = exp(ε),
s = the attack's TPR P(S | x* ∈ D), U = Thudi et al.'s precision bound (2024, Theorem 3.3).
Two forms of U's δ-term: "derived" (the default), U = 1/(1 + e^-ε·(1−p)/p·(1 − δ/s)), and
"printed", U = 1/(1 + e^-ε·(1−p)/p − δ·e^-ε·(1−p)/s), the papers' formula.  Every value with δ > 0
is derived by hand for both.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import sweeper.bounds as b

# Every formula must keep its RuntimeWarnings (overflow, 0/0, log 0) to itself.
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")

E = math.e
INF = math.inf


def close(actual, expected, rel=1e-12, abs_=1e-15):
    return actual == pytest.approx(expected, rel=rel, abs=abs_)


# --------------------------------------------------------------------------- the papers' numbers


def test_u_at_eps2_p001_is_the_2022_papers_6_9_percent():
    # 2022 paper §5.1: "positive accuracy is bounded by 6.9% for ε = 2 and P(1) = 0.01".
    # δ = 0: U = p·e^ε / (p·e^ε + 1 − p) = 0.01·e² / (0.01·e² + 0.99) = 0.0738906 / 1.0638906
    expected = 0.01 * math.exp(2) / (0.01 * math.exp(2) + 0.99)
    assert close(expected, 0.0694532, rel=1e-5)
    assert close(b.precision_bound(2.0, 0.01), expected)
    assert round(b.precision_bound(2.0, 0.01), 3) == 0.069


@pytest.mark.parametrize("epsilon, printed, derived_u, printed_u", [
    (3.0, 0.953, 0.952619, 0.952597), (2.0, 0.881, 0.880902, 0.880850),
    (1.0, 0.731, 0.731255, 0.731157)])
def test_fixed_bound_targets_of_the_2024_paper(epsilon, printed, derived_u, printed_u):
    # 2024 paper §4.3 / Figs 5-6: targets = U at p = 0.5, δ = 1e-5, s = 0.01 for ε = 3, 2, 1.
    # printed, at p = 0.5: U = 1 / (1 + e^-ε·(0.5/0.5) − 1e-5·e^-ε·0.5/0.01)
    #                        = 1 / (1 + e^-ε·(1 − 5e-4)):
    #   ε=3: 1/(1 + 0.0497871·0.9995) = 1/1.0497622 = 0.952597 → 0.953
    #   ε=2: 1/(1 + 0.1353353·0.9995) = 1/1.1352676 = 0.880850 → 0.881
    #   ε=1: 1/(1 + 0.3678794·0.9995) = 1/1.3676955 = 0.731157 → 0.731
    # derived, at p = 0.5: U = 1 / (1 + e^-ε·(0.5/0.5)·(1 − 1e-5/0.01)) = 1 / (1 + e^-ε·0.999):
    #   ε=3: 1/(1 + 0.0497871·0.999) = 1/1.0497373 = 0.952619 → 0.953
    #   ε=2: 1/(1 + 0.1353353·0.999) = 1/1.1351999 = 0.880902 → 0.881
    #   ε=1: 1/(1 + 0.3678794·0.999) = 1/1.3675116 = 0.731255 → 0.731
    # The papers' rounded targets are the same under both forms.
    expected_printed = 1.0 / (1.0 + math.exp(-epsilon) * 1.0
                              - 1e-5 * math.exp(-epsilon) * 0.5 / 0.01)
    expected_derived = 1.0 / (1.0 + math.exp(-epsilon) * 1.0 * (1.0 - 1e-5 / 0.01))
    assert round(expected_printed, 3) == printed == round(expected_derived, 3)
    assert close(expected_printed, printed_u, rel=1e-6) and close(expected_derived, derived_u, rel=1e-6)
    got = b.precision_bound(epsilon, 0.5, 1e-5, b.DEFAULT_TPR_FLOOR)  # default: derived
    assert close(got, expected_derived)
    got = b.precision_bound(epsilon, 0.5, 1e-5, b.DEFAULT_TPR_FLOOR, form="printed")
    assert close(got, expected_printed)
    # ... and the planner recovers ε from the exact target, in either form:
    assert close(b.epsilon_for_precision(expected_derived, 0.5, 1e-5, 0.01), epsilon, rel=1e-10)
    assert close(b.epsilon_for_precision(expected_printed, 0.5, 1e-5, 0.01, form="printed"),
                 epsilon, rel=1e-10)


def test_planner_on_the_printed_targets():
    # printed: ε = ln[(1−p)·(1/p − δ/s) / (1/β − 1)]; at p = 0.5: ln[0.5·(2 − 1e-3)/(1/β − 1)]
    # derived: ε = ln[(1−p)/p·(1 − δ/s) / (1/β − 1)]; at p = 0.5: ln[0.999/(1/β − 1)]
    for beta in (0.953, 0.881, 0.731):
        expected = math.log(0.5 * (2.0 - 1e-3) / (1.0 / beta - 1.0))
        assert close(b.epsilon_for_precision(beta, 0.5, 1e-5, 0.01, form="printed"), expected)
        expected = math.log(1.0 * (1.0 - 1e-3) / (1.0 / beta - 1.0))
        assert close(b.epsilon_for_precision(beta, 0.5, 1e-5, 0.01), expected)
    # The rounded 0.953 asks for ε = ln(0.9995·0.953/0.047) = ln(20.2664) = 3.00897 (> 3) printed,
    # and ε = ln(0.999·0.953/0.047) = ln(20.2563) = 3.00847 derived (a slightly smaller budget).
    assert b.epsilon_for_precision(0.953, 0.5, 1e-5, 0.01, form="printed") == pytest.approx(
        3.00897, abs=1e-5)
    assert b.epsilon_for_precision(0.953, 0.5, 1e-5, 0.01) == pytest.approx(3.00847, abs=1e-5)


# --------------------------------------------------------------------------- the δ-term's two forms


def test_printed_form_fails_the_randomized_response_counterexample():
    # Randomized response on membership, ε = ln 3: keeps the bit w.p. q = 3/4.  Its privacy profile
    # at ε' = 0 is δ = q − (1 − q) = 1/2, so it is (0, 1/2)-DP.  p = 1/4, attack "output is 1":
    # s = q = 3/4, FPR = 1/4, precision = (1/4·3/4) / (1/4·3/4 + 3/4·1/4) = 1/2.
    # printed: e^-ε·(1−p)/p = 1·(3/4)/(1/4) = 3 and δ·e^-ε·(1−p)/s = (1/2)·1·(3/4)/(3/4) = 1/2,
    #   so U(0, 1/2, 1/4, 3/4) = 1/(1 + 3 − 1/2) = 1/3.5 = 2/7 < 1/2: the bound is undercut.
    # derived: U = 1/(1 + 3·(1 − (1/2)/(3/4))) = 1/(1 + 3·(1/3)) = 1/2: touched, not undercut.
    precision = (0.25 * 0.75) / (0.25 * 0.75 + 0.75 * 0.25)
    assert precision == 0.5
    printed = b.precision_bound(0.0, 0.25, 0.5, 0.75, form="printed")
    assert close(printed, 2.0 / 7.0) and printed < precision
    assert b.precision_bound(0.0, 0.25, 0.5, 0.75) == 0.5
    assert b.precision_bound(0.0, 0.25, 0.5, 0.75, form="derived") == 0.5


def test_forms_agree_when_delta_is_zero_or_p_is_one():
    # δ = 0: both are 1/(1 + e^-ε·(1−p)/p); ε = 1.5, p = 0.3 → 0.3e^1.5/(0.3e^1.5 + 0.7)
    e = math.exp(1.5)
    for form in b.BOUND_FORMS:
        assert close(b.precision_bound(1.5, 0.3, 0.0, 0.2, form=form), 0.3 * e / (0.3 * e + 0.7))
        # p = 1: the prior odds (1 − p)/p vanish, U = 1 in both
        assert b.precision_bound(1.5, 1.0, 0.1, 0.5, form=form) == 1.0
        # the negative mirror at p = 0 (prior 1 − p = 1): 1 in both
        assert b.negative_accuracy_bound(1.5, 0.0, 0.1, 0.5, form=form) == 1.0
    eps = np.linspace(0, 8, 17)[:, None]
    p = np.linspace(0, 1, 11)
    np.testing.assert_array_equal(b.precision_bound(eps, p, 0.0, 0.3),
                                  b.precision_bound(eps, p, 0.0, 0.3, form="printed"))
    np.testing.assert_array_equal(b.precision_bound(eps, 1.0, 1e-3, 0.3),
                                  b.precision_bound(eps, 1.0, 1e-3, 0.3, form="printed"))


def test_derived_is_the_delta_zero_bound_at_an_effective_epsilon():
    # 1 − δ/s = e^-(−ln(1 − δ/s)), so derived U(ε, δ, p, s) = U(ε_eff, 0, p), ε_eff = ε − ln(1 − δ/s).
    # Hand case: δ = 0.05, s = 0.1 → 1 − δ/s = 1/2, ε_eff = ε + ln 2; ε = 1, p = 0.2:
    #   U = 1/(1 + e^-1·4·(1/2)) = 1/(1 + 2/e) = e/(e + 2) = 0.576117
    assert close(b.precision_bound(1.0, 0.2, 0.05, 0.1), E / (E + 2.0))
    assert close(b.precision_bound(1.0 + math.log(2.0), 0.2), E / (E + 2.0))
    rng = np.random.default_rng(7)
    eps, p = rng.uniform(0, 8, 500), rng.uniform(0.001, 0.999, 500)
    s = rng.uniform(0.01, 1, 500)
    d = s * rng.uniform(0, 0.999, 500)  # δ < s
    eff = eps - np.log1p(-d / s)
    np.testing.assert_allclose(b.precision_bound(eps, p, d, s), b.precision_bound(eff, p),
                               rtol=1e-10)


def test_form_is_validated_everywhere():
    assert b.BOUND_FORMS == ("derived", "printed")
    calls = [
        lambda f: b.precision_bound(1.0, 0.5, 1e-5, 0.01, form=f),
        lambda f: b.negative_accuracy_bound(1.0, 0.5, 1e-5, 0.01, form=f),
        lambda f: b.positive_advantage_bound(1.0, 0.5, 1e-5, 0.01, form=f),
        lambda f: b.epsilon_for_precision(0.8, 0.5, 1e-5, 0.01, form=f),
        lambda f: b.max_sampling_rate(0.8, 1.0, 1e-5, 0.01, form=f),
    ]
    for call in calls:
        for bad in ("Derived", "corrected", "", None, 1):
            with pytest.raises(ValueError, match=r"\bform\b"):
                call(bad)
    with pytest.raises(TypeError):  # keyword-only
        b.precision_bound(1.0, 0.5, 1e-5, 0.01, "printed")


def test_balanced_prior_matches_mahloujifar_and_humphries():
    # 2022 paper §7.4: at p = 0.5, δ = 0, U = 1/(1 + e^-ε) = Mahloujifar = Humphries (accuracy).
    for eps in (0.1, 1.0, 2.5, 7.0):
        expected = 1.0 / (1.0 + math.exp(-eps))
        assert close(b.precision_bound(eps, 0.5), expected)
        assert close(b.mahloujifar_precision_bound(eps), expected)
        assert close(b.humphries_accuracy_bound(eps), expected)


# --------------------------------------------------------------------------- Thudi et al. formulas


def test_precision_bound_with_delta():
    # ε = 1, p = 0.2, δ = 1e-3, s = 0.05:
    # printed: U = 1 / (1 + e^-1·(0.8/0.2) − 1e-3·e^-1·0.8/0.05) = 1 / (1 + 4e^-1 − 0.016e^-1)
    #            = 1/(1 + 3.984/e) = 0.405576
    expected = 1.0 / (1.0 + 4.0 * math.exp(-1) - 0.016 * math.exp(-1))
    assert close(expected, 0.405576, rel=1e-5)
    assert close(b.precision_bound(1.0, 0.2, 1e-3, 0.05, form="printed"), expected)
    # derived: U = 1 / (1 + e^-1·(0.8/0.2)·(1 − 1e-3/0.05)) = 1 / (1 + 4·0.98·e^-1)
    #            = 1/(1 + 3.92/e) = 0.409486 (the δ-term is 1/p = 5 times the printed one)
    expected = 1.0 / (1.0 + 3.92 * math.exp(-1))
    assert close(expected, 0.409486, rel=1e-5)
    assert close(b.precision_bound(1.0, 0.2, 1e-3, 0.05), expected)


def test_precision_bound_delta_zero_closed_form():
    # δ = 0: U = p·e / (p·e + 1 − p); ε = 1.5, p = 0.3
    e = math.exp(1.5)
    assert close(b.precision_bound(1.5, 0.3), 0.3 * e / (0.3 * e + 0.7))


def test_precision_bound_vacuous_cases():
    # printed, ε = 0, p = 0.5, δ = 0.5, s = 0.1: denominator 1 + 1 − 0.5·1·0.5/0.1 = −0.5 ≤ 0
    assert 1.0 + 1.0 - 0.5 * 1.0 / 0.1 * 0.5 < 0
    assert b.precision_bound(0.0, 0.5, 0.5, 0.1, form="printed") == 1.0
    # printed, s = 0.2: denominator 1 + 1 − 0.5·0.5/0.2 = 0.75 > 0 but U = 1.33 > 1
    assert b.precision_bound(0.0, 0.5, 0.5, 0.2, form="printed") == 1.0
    # derived: 1 + e^-ε·(1−p)/p·(1 − δ/s) ≥ 1 while δ < s, so U ≤ 1; vacuous exactly when δ ≥ s:
    # δ = 0.5, s = 0.1 or 0.2: 1 − δ/s = −4, −1.5 ≤ 0 → 1.0; δ = s = 0.1: factor 0 → 1.0, any ε, p
    assert b.precision_bound(0.0, 0.5, 0.5, 0.1) == 1.0
    assert b.precision_bound(0.0, 0.5, 0.5, 0.2) == 1.0
    assert b.precision_bound(8.0, 0.01, 0.1, 0.1) == 1.0
    # just inside: δ = 0.09, s = 0.1 → factor 0.1; ε = 0, p = 0.5: 1/(1 + 0.1) = 10/11
    assert close(b.precision_bound(0.0, 0.5, 0.09, 0.1), 10.0 / 11.0)
    # printed at the same point: 1/(1 + 1 − 0.09·0.5/0.1) = 1/1.55 (looser δ-term, smaller U)
    assert close(b.precision_bound(0.0, 0.5, 0.09, 0.1, form="printed"), 1.0 / 1.55)


@pytest.mark.parametrize("form", ["derived", "printed"])
@pytest.mark.parametrize("delta, tpr", [(0.0, 1.0), (1e-5, 0.01), (0.3, 0.5), (0.5, 0.1)])
def test_precision_bound_edges(delta, tpr, form):
    f = dict(form=form)
    assert b.precision_bound(1.0, 0.0, delta, tpr, **f) == 0.0  # never sampled: never a member
    assert b.precision_bound(INF, 0.0, delta, tpr, **f) == 0.0
    assert b.precision_bound(1.0, 1.0, delta, tpr, **f) == 1.0  # always sampled: always a member
    assert b.precision_bound(INF, 0.3, delta, tpr, **f) == 1.0  # non-private: no bound
    assert b.precision_bound(0.0, 0.3, **f) == pytest.approx(0.3)  # ε = 0, δ = 0: the prior


def test_negative_accuracy_bound():
    # printed: 1 / (1 + e^-ε·p/(1−p) − δ·e^-ε·p/s'); ε = 1, p = 0.2, δ = 1e-3, s' = 0.05
    # = 1 / (1 + e^-1·0.25 − 1e-3·e^-1·0.2/0.05) = 1 / (1 + 0.25e^-1 − 0.004e^-1) = 0.917012
    expected = 1.0 / (1.0 + 0.25 * math.exp(-1) - 0.004 * math.exp(-1))
    assert close(expected, 0.917012, rel=1e-5)
    assert close(b.negative_accuracy_bound(1.0, 0.2, 1e-3, 0.05, form="printed"), expected)
    # derived: 1 / (1 + e^-ε·p/(1−p)·(1 − δ/s')) = 1 / (1 + e^-1·0.25·(1 − 0.02))
    #        = 1 / (1 + 0.245e^-1) = 0.917321
    expected = 1.0 / (1.0 + 0.245 * math.exp(-1))
    assert close(expected, 0.917321, rel=1e-5)
    assert close(b.negative_accuracy_bound(1.0, 0.2, 1e-3, 0.05), expected)
    for form in b.BOUND_FORMS:
        # always a member: "not a member" is never right
        assert b.negative_accuracy_bound(1.0, 1.0, form=form) == 0.0
        assert b.negative_accuracy_bound(1.0, 1.0, 1e-3, 0.05, form=form) == 0.0
        assert b.negative_accuracy_bound(1.0, 0.0, form=form) == 1.0
    # derived, δ ≥ s': vacuous: δ = 0.1 = s' → 1.0 (printed: 1/(1 + 0.25/e − 0.1·0.2/(0.1e)) < 1)
    assert b.negative_accuracy_bound(1.0, 0.2, 0.1, 0.1) == 1.0
    assert close(b.negative_accuracy_bound(1.0, 0.2, 0.1, 0.1, form="printed"),
                 1.0 / (1.0 + 0.05 * math.exp(-1)))


def test_precision_lower_bound():
    # 1 / (1 + e^ε·(1−p)/p); ε = 1, p = 0.2: 1 / (1 + 4e)
    assert close(b.precision_lower_bound(1.0, 0.2), 1.0 / (1.0 + 4.0 * E))
    assert b.precision_lower_bound(INF, 0.2) == 0.0
    assert b.precision_lower_bound(INF, 1.0) == 1.0
    assert b.precision_lower_bound(0.0, 0.2) == pytest.approx(0.2)


def test_positive_advantage_bound():
    # 2·(U − p); ε = 1, p = 0.2: U = 0.2e/(0.2e + 0.8)
    u = 0.2 * E / (0.2 * E + 0.8)
    assert close(b.positive_advantage_bound(1.0, 0.2), 2.0 * (u - 0.2))
    assert b.positive_advantage_bound(3.0, 0.0) == 0.0
    assert b.positive_advantage_bound(3.0, 1.0) == 0.0
    # with δ = 1e-3, s = 0.05 (same point as test_precision_bound_with_delta):
    # derived 2·(1/(1 + 3.92/e) − 0.2) = 2·(0.409486 − 0.2) = 0.418971;
    # printed 2·(1/(1 + 3.984/e) − 0.2) = 2·(0.405576 − 0.2) = 0.411151
    assert close(b.positive_advantage_bound(1.0, 0.2, 1e-3, 0.05),
                 2.0 * (1.0 / (1.0 + 3.92 / E) - 0.2))
    assert close(b.positive_advantage_bound(1.0, 0.2, 1e-3, 0.05, form="printed"),
                 2.0 * (1.0 / (1.0 + 3.984 / E) - 0.2))
    assert b.positive_advantage_bound(1.0, 0.2, 1e-3, 0.05) == pytest.approx(0.418971, abs=1e-6)
    assert b.positive_advantage_bound(1.0, 0.2, 1e-3, 0.05, form="printed") == pytest.approx(
        0.411151, abs=1e-6)


def test_group_precision_bound():
    # 1 − Π 1/(1 + e^ε·p/(1−p)); ε = 1, ps = (0.1, 0.2):
    # 1 − [1/(1 + e/9)]·[1/(1 + e/4)]
    expected = 1.0 - (1.0 / (1.0 + E / 9.0)) * (1.0 / (1.0 + E / 4.0))
    assert close(b.group_precision_bound(1.0, [0.1, 0.2]), expected)
    # A group of one is a single record: 1 − 1/(1 + e·p/(1−p)) = e·p/(1 − p + e·p) = U.
    assert close(b.group_precision_bound(1.0, [0.2]), 0.2 * E / (0.8 + 0.2 * E))
    assert b.group_precision_bound(1.0, []) == 0.0
    assert b.group_precision_bound(1.0, [0.1, 1.0]) == 1.0
    assert b.group_precision_bound(INF, [0.1]) == 1.0
    # 10 000 records at p = 1e-6: 1 − (1 + e·1e-6/(1 − 1e-6))^-10000, kept accurate by log1p.
    expected = -math.expm1(-10000 * math.log1p(E * 1e-6 / (1 - 1e-6)))
    assert close(b.group_precision_bound(1.0, np.full(10000, 1e-6)), expected, rel=1e-9)


def test_deletion_capacity():
    # 2024 Figure 7 setting: B = 0.8, N = 10 000, ε = 1, c = 1 → p = c/N = 1e-4.
    # L = 1/(1 + e·p/(1−p)) = 1/(1 + 2.71855e-4); ln L = −2.71818e-4; m = ln 0.8 / ln L = 820.93
    ln_l = -math.log(1.0 + E * 1e-4 / (1.0 - 1e-4))
    expected = math.log(0.8) / ln_l
    assert expected == pytest.approx(820.93, abs=0.01)
    assert close(b.deletion_capacity(1.0, 1e-4, 0.8), expected, rel=1e-10)
    # The printed corollary's L (e^-ε instead of e^ε) gives ln 0.8/ln(1/(1 + e^-1·1e-4/0.9999)) = 6065.2:
    # a capacity that grows with ε, contradicting "L = 1 − upper bound on positive accuracy".
    printed = math.log(0.8) / -math.log(1.0 + math.exp(-1) * 1e-4 / (1.0 - 1e-4))
    assert printed == pytest.approx(6065.18, abs=0.01)
    assert b.deletion_capacity(1.0, 1e-4, 0.8) < printed
    # L^m ≥ B ⇔ m ≤ ln B/ln L: at the returned m, L^m = B exactly.
    m = b.deletion_capacity(2.0, 0.01, 0.5)
    big_l = 1.0 / (1.0 + math.exp(2.0) * 0.01 / 0.99)
    assert close(big_l ** m, 0.5, rel=1e-10)


def test_deletion_capacity_edges_and_range_of_b():
    assert b.deletion_capacity(1.0, 0.0, 0.8) == INF  # nothing sampled: decline every request
    assert b.deletion_capacity(1.0, 1.0, 0.8) == 0.0
    assert b.deletion_capacity(INF, 0.1, 0.8) == 0.0
    for bad in (0.0, 1.0, 1.5, -0.2):
        with pytest.raises(ValueError, match=r"\bB\b"):
            b.deletion_capacity(1.0, 0.1, bad)


def test_generalization_gap_interval():
    # (1 + e^ε)^-1 ≤ (R/B + 1)/2 ≤ (1 + e^-ε)^-1; ε = 1: (0.268941, 0.731059), symmetric about 1/2
    low, high = b.generalization_gap_interval(1.0)
    assert close(low, 1.0 / (1.0 + E)) and close(high, 1.0 / (1.0 + 1.0 / E))
    assert close(low + high, 1.0)
    assert b.generalization_gap_interval(0.0) == pytest.approx((0.5, 0.5))
    assert b.generalization_gap_interval(INF) == (0.0, 1.0)
    lows, highs = b.generalization_gap_interval([0.5, 2.0])
    assert lows.shape == highs.shape == (2,)


# --------------------------------------------------------------------------- planning inverses


def test_epsilon_for_precision_values():
    # δ = 0, β = 0.8, p = 0.5: ε = ln[0.5·2/(1/0.8 − 1)] = ln(1/0.25) = ln 4
    assert close(b.epsilon_for_precision(0.8, 0.5), math.log(4.0))
    # printed, δ = 1e-5, s = 0.01, β = 0.8, p = 0.1: ε = ln[0.9·(10 − 1e-3)/0.25] = ln 35.9964
    #   = 3.58342
    expected = math.log(0.9 * (10.0 - 1e-3) / 0.25)
    assert close(expected, 3.58342, rel=1e-5)
    assert close(b.epsilon_for_precision(0.8, 0.1, 1e-5, 0.01, form="printed"), expected)
    # derived: ε = ln[(1−p)/p·(1 − δ/s)/(1/β − 1)] = ln[9·0.999/0.25] = ln 35.964 = 3.58252
    expected = math.log(9.0 * 0.999 / 0.25)
    assert close(expected, 3.58252, rel=1e-5)
    assert close(b.epsilon_for_precision(0.8, 0.1, 1e-5, 0.01), expected)
    # derived, δ = 0.05, s = 0.1 (factor 1/2), β = 0.8, p = 0.5: ε = ln[1·(1/2)/0.25] = ln 2
    assert close(b.epsilon_for_precision(0.8, 0.5, 0.05, 0.1), math.log(2.0))
    got = b.epsilon_for_precision(0.8, [0.1, 0.5], 0.0, 1.0)
    assert isinstance(got, np.ndarray) and got == pytest.approx([math.log(36.0), math.log(4.0)])


def test_epsilon_for_precision_edges():
    assert b.epsilon_for_precision(1.0, 0.7) == INF  # every ε keeps precision ≤ 1
    assert b.epsilon_for_precision(0.5, 0.0) == INF  # never sampled
    assert b.epsilon_for_precision(0.3, 0.3) == 0.0  # target = prior: only ε = 0


@pytest.mark.parametrize("target, p, delta, tpr, form, reason", [
    (0.3, 0.5, 0.0, 1.0, "derived", r"target precision 0\.3 is below the prior p=0\.5.*p ≤ 0\.3"),
    (0.3, 0.5, 0.0, 1.0, "printed", r"target precision 0\.3 is below the prior p=0\.5.*p ≤ 0\.3"),
    (0.3, 1.0, 0.0, 1.0, "derived", r"p=1"),
    (0.3, 1.0, 1e-5, 0.01, "printed", r"p=1"),
    # printed bound at ε = 0, p = 0.5: 1/(1 + 1 − 1e-5·0.5/0.01) = 1/1.9995 = 0.500125 → 0.5001
    (0.3, 0.5, 1e-5, 0.01, "printed", r"below 0\.5001, the bound at ε=0"),
    # derived bound at ε = 0, p = 0.5: 1/(1 + 1·(1 − 1e-5/0.01)) = 1/1.999 = 0.500250 → 0.5003
    (0.3, 0.5, 1e-5, 0.01, "derived", r"below 0\.5003, the bound at ε=0"),
    (0.9, 0.5, 0.5, 0.01, "printed", r"δ/s = 50 ≥ 1/p.*vacuous"),  # δp = 0.25 ≥ s
    (0.9, 0.5, 0.5, 0.01, "derived", r"δ = 0\.5 ≥ s = 0\.01.*vacuous for every ε and every p > 0"),
    # δ = s: derived factor 1 − δ/s = 0, vacuous; printed δp = 0.001 < s, reachable (below)
    (0.9, 0.1, 0.01, 0.01, "derived", r"vacuous"),
])
def test_epsilon_for_precision_impossible_targets(target, p, delta, tpr, form, reason):
    with pytest.raises(ValueError, match=reason):
        b.epsilon_for_precision(target, p, delta, tpr, form=form)


def test_epsilon_for_precision_where_only_the_printed_form_is_vacuous_or_not():
    # β = 0.9, p = 0.1, δ = s = 0.01: printed ε = ln[0.9·(10 − 1)/(1/0.9 − 1)] = ln(8.1·9) = ln 72.9
    assert close(b.epsilon_for_precision(0.9, 0.1, 0.01, 0.01, form="printed"), math.log(72.9))
    # p = 0: never sampled, every ε works in both forms, even when δ ≥ s
    assert b.epsilon_for_precision(0.9, 0.0, 0.5, 0.01) == INF
    assert b.epsilon_for_precision(0.9, 0.0, 0.5, 0.01, form="printed") == INF


def test_epsilon_for_precision_impossible_inside_an_array():
    with pytest.raises(ValueError, match=r"below the prior p=0\.9"):
        b.epsilon_for_precision(0.8, [0.1, 0.9])


def test_max_sampling_rate_values():
    # δ = 0: k = (1/β − 1)·e^ε, p = 1/(1 + k); β = 0.8, ε = 1: p = 1/(1 + 0.25e) = 0.595423
    for form in b.BOUND_FORMS:
        assert close(b.max_sampling_rate(0.8, 1.0, form=form), 1.0 / (1.0 + 0.25 * E))
    # printed, δ = 1e-5, s = 0.01, β = 0.8, ε = 3: smaller root of δp² − (δ + s + k·s)p + s = 0, by
    # the textbook formula p = [bq − sqrt(bq² − 4δs)] / (2δ), bq = δ + s + k·s.
    d, s, k = 1e-5, 0.01, 0.25 * math.exp(3.0)
    bq = d + s + k * s
    expected = (bq - math.sqrt(bq * bq - 4 * d * s)) / (2 * d)
    got = b.max_sampling_rate(0.8, 3.0, d, s, form="printed")
    assert close(got, expected, rel=1e-9)
    assert abs(d * got ** 2 - bq * got + s) < 1e-15
    assert close(b.precision_bound(3.0, got, d, s, form="printed"), 0.8, rel=1e-10)
    # derived, same point: (1−p)/p·(1 − δ/s) = k ⇔ p = 1/(1 + k/(1 − δ/s)), k = 0.25e³ = 5.021384:
    #   p = 1/(1 + 5.021384/0.999) = 0.999/6.020384 = 0.165936
    expected = 1.0 / (1.0 + k / (1.0 - d / s))
    assert close(expected, 0.165936, rel=1e-5)
    got = b.max_sampling_rate(0.8, 3.0, d, s)
    assert close(got, expected)
    assert close(b.precision_bound(3.0, got, d, s), 0.8, rel=1e-12)
    # derived, δ = 0.05, s = 0.1 (factor 1/2), β = 0.8, ε = ln 2: k = 0.25·2 = 1/2, p = 1/(1 + 1) = 1/2
    assert close(b.max_sampling_rate(0.8, math.log(2.0), 0.05, 0.1), 0.5)


@pytest.mark.parametrize("form", ["derived", "printed"])
def test_max_sampling_rate_edges(form):
    f = dict(form=form)
    assert b.max_sampling_rate(1.0, 5.0, **f) == 1.0
    assert b.max_sampling_rate(1.0, INF, **f) == 1.0
    assert b.max_sampling_rate(1.0, INF, 0.5, 0.1, **f) == 1.0
    assert b.max_sampling_rate(0.8, INF, **f) == 0.0
    assert b.max_sampling_rate(0.8, INF, 1e-5, 0.01, **f) == 0.0
    assert b.max_sampling_rate(0.4, 0.0, **f) == pytest.approx(0.4)  # at ε = 0, U = p


def test_max_sampling_rate_when_the_derived_bound_is_vacuous():
    # derived, δ ≥ s: U = 1 for every p > 0 and U = 0 at p = 0, so the largest p with U ≤ β < 1 is 0
    assert b.max_sampling_rate(0.9, 1.0, 0.01, 0.01) == 0.0  # δ = s
    assert b.max_sampling_rate(0.999, 0.0, 0.5, 0.1) == 0.0
    got = b.max_sampling_rate([0.5, 0.9, 1.0], 2.0, 0.2, [0.1, 0.2, 0.1])
    np.testing.assert_array_equal(got, [0.0, 0.0, 1.0])
    # printed at δ = s = 0.01, β = 0.9, ε = 1: k = e/9; root of 0.01p² − (0.02 + 0.01e/9)p + 0.01 = 0,
    # i.e. p² − (2 + e/9)p + 1 = 0, smaller root [(2 + e/9) − sqrt((2 + e/9)² − 4)]/2 > 0
    bq = 2.0 + E / 9.0
    assert close(b.max_sampling_rate(0.9, 1.0, 0.01, 0.01, form="printed"),
                 (bq - math.sqrt(bq * bq - 4.0)) / 2.0, rel=1e-9)


# --------------------------------------------------------------------------- earlier bounds


def test_yeom():
    # advantage ≤ e^ε − 1; accuracy = (1 + advantage)/2 = e^ε/2 (2022 Table 1), clipped to 1
    assert close(b.yeom_advantage_bound(0.5), math.exp(0.5) - 1.0)
    assert close(b.yeom_accuracy_bound(0.5), math.exp(0.5) / 2.0)
    assert b.yeom_accuracy_bound(1.0) == 1.0  # e/2 > 1: vacuous
    assert b.yeom_advantage_bound(1000.0) == 1.0
    assert b.yeom_accuracy_bound(0.0) == 0.5


def test_erlingsson():
    # advantage ≤ 1 − e^-ε + δ·e^-ε; ε = 1, δ = 1e-3
    adv = 1.0 - math.exp(-1) + 1e-3 * math.exp(-1)
    assert close(b.erlingsson_advantage_bound(1.0, 1e-3), adv)
    assert close(b.erlingsson_accuracy_bound(1.0, 1e-3), (1.0 + adv) / 2.0)
    # 2022 Table 1 at δ = 0: accuracy 1 − e^-ε/2
    assert close(b.erlingsson_accuracy_bound(2.0), 1.0 - math.exp(-2) / 2.0)
    assert b.erlingsson_accuracy_bound(INF, 0.1) == 1.0


def test_humphries():
    # advantage ≤ (e^ε − 1 + 2δ)/(e^ε + 1); accuracy (2e^ε + 2δ)/(2(e^ε + 1)); ε = 1, δ = 1e-3
    assert close(b.humphries_advantage_bound(1.0, 1e-3), (E - 1.0 + 2e-3) / (E + 1.0))
    assert close(b.humphries_accuracy_bound(1.0, 1e-3), (2 * E + 2e-3) / (2 * (E + 1.0)))
    assert b.humphries_advantage_bound(INF) == 1.0


def test_sablayrolles_and_mahloujifar():
    # p + ε/4: ε = 1, p = 0.3 → 0.55; ε = 4, p = 0.5 → 1.5, clipped to 1
    assert close(b.sablayrolles_precision_bound(1.0, 0.3), 0.55)
    assert b.sablayrolles_precision_bound(4.0, 0.5) == 1.0
    # 1/(1 + e^-ε): ε = 2 → 1/(1 + e^-2) = 0.880797
    assert close(b.mahloujifar_precision_bound(2.0), 1.0 / (1.0 + math.exp(-2)))


def test_jayaraman():
    # f(α) = max{0, 1 − δ − e^ε·α, e^-ε·(1 − δ − α)}
    # ε = 1, δ = 1e-5, α = 0.1: terms 0, 1 − 1e-5 − 0.271828 = 0.728162, e^-1·0.89999 = 0.331090
    f = max(0.0, 1 - 1e-5 - E * 0.1, math.exp(-1) * (1 - 1e-5 - 0.1))
    assert f == pytest.approx(0.728162, abs=1e-6)
    assert close(b.jayaraman_advantage_bound(1.0, 1e-5, 0.1), 1.0 - 0.1 - f)
    # PPV ≤ (1 − f)/(1 − f + γα), γ = 2
    assert close(b.jayaraman_ppv_bound(1.0, 1e-5, 0.1, 2.0), (1 - f) / (1 - f + 2.0 * 0.1))
    # α = 0.5: the second term is negative (1 − 1e-5 − 1.359), the third wins: e^-1·0.49999
    f = math.exp(-1) * (1 - 1e-5 - 0.5)
    assert close(b.jayaraman_advantage_bound(1.0, 1e-5, 0.5), 1.0 - 0.5 - f)
    assert close(b.jayaraman_ppv_bound(1.0, 1e-5, 0.5, 0.5), (1 - f) / (1 - f + 0.25))
    # Non-private (ε = ∞): f = 0, PPV ≤ 1/(1 + γα) (TPR can reach 1)
    assert close(b.jayaraman_ppv_bound(INF, 0.0, 0.1, 9.0), 1.0 / 1.9)
    # α = 0, δ = 0 is 0/0; its limit e^ε/(e^ε + γ): ε = 2, γ = 1 → 1/(1 + e^-2)
    assert close(b.jayaraman_ppv_bound(2.0, 0.0, 0.0, 1.0), 1.0 / (1.0 + math.exp(-2)))


# --------------------------------------------------------------------------- audit


def test_epsilon_from_precision():
    # ln[prec·(1−p) / (p·(1−prec))]: prec = 0.9, p = 0.5 → ln 9; prec = 0.2, p = 0.01 → ln 24.75
    assert close(b.epsilon_from_precision(0.9, 0.5), math.log(9.0))
    assert close(b.epsilon_from_precision(0.2, 0.01), math.log(0.2 * 0.99 / (0.01 * 0.8)))
    assert b.epsilon_from_precision(0.4, 0.5) == 0.0  # at or below the prior: nothing proven
    assert b.epsilon_from_precision(0.5, 0.5) == 0.0
    assert b.epsilon_from_precision(1.0, 0.5) == INF
    assert b.epsilon_from_precision(0.1, 0.0) == INF
    assert b.epsilon_from_precision(1.0, 1.0) == 0.0
    assert math.isnan(b.epsilon_from_precision(math.nan, 0.5))


def test_epsilon_from_rates():
    # max(ln((TPR − δ)/FPR), ln((1 − δ − FPR)/(1 − TPR)), 0)
    # TPR 0.5, FPR 0.1, δ 0: max(ln 5, ln(0.9/0.5)) = ln 5
    assert close(b.epsilon_from_rates(0.5, 0.1), math.log(5.0))
    # δ = 0.01: max(ln(0.49/0.1), ln(0.89/0.5)) = ln 4.9
    assert close(b.epsilon_from_rates(0.5, 0.1, 0.01), math.log(4.9))
    # TPR 0.99, FPR 0.5: max(ln 1.98, ln(0.5/0.01)) = ln 50 (the second inequality bites)
    assert close(b.epsilon_from_rates(0.99, 0.5), math.log(50.0))
    assert b.epsilon_from_rates(0.5, 0.0) == INF  # positives with no false positives
    assert b.epsilon_from_rates(1.0, 0.2) == INF  # no false negatives
    assert b.epsilon_from_rates(0.0, 0.0) == 0.0  # never fires: ln(1/1) = 0, first term unusable
    assert b.epsilon_from_rates(0.3, 0.3) == 0.0  # random guessing
    assert b.epsilon_from_rates(0.1, 0.6) == 0.0  # worse than random proves nothing (max with 0)
    assert b.epsilon_from_rates(0.005, 0.0, 0.01) == 0.0  # TPR ≤ δ: no evidence
    got = b.epsilon_from_rates([0.5, math.nan], [0.1, 0.1])
    assert got[0] == pytest.approx(math.log(5.0)) and math.isnan(got[1])


# --------------------------------------------------------------------------- validation & types


@pytest.mark.parametrize("call, name", [
    (lambda: b.precision_bound(-0.1, 0.5), "epsilon"),
    (lambda: b.precision_bound(math.nan, 0.5), "epsilon"),
    (lambda: b.precision_bound(1.0, 1.5), "p"),
    (lambda: b.precision_bound(1.0, [0.2, -0.1]), "p"),
    (lambda: b.precision_bound(1.0, 0.5, 1.0), "delta"),
    (lambda: b.precision_bound(1.0, 0.5, -1e-9), "delta"),
    (lambda: b.precision_bound(1.0, 0.5, 1e-5, 0.0), "tpr"),
    (lambda: b.precision_bound(1.0, 0.5, 1e-5, 1.2), "tpr"),
    (lambda: b.negative_accuracy_bound(1.0, 0.5, 1e-5, 0.0), "tnr"),
    (lambda: b.epsilon_for_precision(0.0, 0.5), "target"),
    (lambda: b.max_sampling_rate(1.2, 1.0), "target"),
    (lambda: b.group_precision_bound(1.0, [0.2, 2.0]), "ps"),
    (lambda: b.group_precision_bound(1.0, [[0.2]]), "ps"),
    (lambda: b.jayaraman_ppv_bound(1.0, 0.0, 1.5, 1.0), "fpr"),
    (lambda: b.jayaraman_ppv_bound(1.0, 0.0, 0.1, -1.0), "gamma"),
    (lambda: b.epsilon_from_precision(1.1, 0.5), "precision"),
    (lambda: b.epsilon_from_rates(0.5, -0.1), "fpr"),
])
def test_validation_names_the_argument(call, name):
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        call()


def test_scalars_give_floats_and_arrays_broadcast():
    assert type(b.precision_bound(1, 0.5)) is float
    assert type(b.deletion_capacity(1, 0.1, 0.5)) is float
    got = b.precision_bound([[0.5], [1.0]], [0.1, 0.2, 0.3], 1e-5, 0.01)
    assert isinstance(got, np.ndarray) and got.shape == (2, 3)
    assert got[1, 2] == pytest.approx(b.precision_bound(1.0, 0.3, 1e-5, 0.01))


def test_importing_the_formulas_does_not_pull_in_matplotlib():
    import subprocess
    import sys

    code = "import sys, sweeper.bounds; sys.exit('matplotlib' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


# --------------------------------------------------------------------------- properties


@pytest.fixture
def grid():
    """Random parameter points: ε in [0, 10], p in (0, 1), δ in [0, 1e-2], s in [0.01, 1]."""
    rng = np.random.default_rng(20240301)
    n = 4000
    return dict(eps=rng.uniform(0, 10, n), p=rng.uniform(1e-4, 1 - 1e-4, n),
                delta=rng.choice([0.0, 1e-5, 1e-3, 1e-2], n), s=rng.uniform(0.01, 1.0, n),
                rng=rng)


@pytest.mark.parametrize("form", ["derived", "printed"])
def test_u_increases_in_epsilon_and_p_and_decreases_in_tpr(grid, form):
    eps, p, d, s, rng = grid["eps"], grid["p"], grid["delta"], grid["s"], grid["rng"]
    u = b.precision_bound(eps, p, d, s, form=form)
    assert np.all(b.precision_bound(eps + rng.uniform(0, 2, eps.size), p, d, s, form=form)
                  >= u - 1e-12)
    assert np.all(b.precision_bound(eps, np.minimum(p + rng.uniform(0, 0.1, p.size), 1), d, s,
                                    form=form) >= u - 1e-12)
    assert np.all(b.precision_bound(eps, p, d, np.minimum(s * 1.5, 1.0), form=form) <= u + 1e-12)
    assert np.all(b.precision_bound(eps, p, 0.0, form=form) <= u + 1e-12)  # δ only loosens


def test_derived_never_below_printed(grid):
    # derived factor 1 − δ/s ≤ printed factor 1 − δp/s (p ≤ 1), and U falls as the factor grows.
    eps, p, d, s = grid["eps"], grid["p"], grid["delta"], grid["s"]
    big = np.minimum(s * grid["rng"].uniform(0, 1.5, d.size), 0.99)  # δ near and past s
    d = np.where(grid["rng"].random(d.size) < 0.2, big, d)
    for args in ((eps, p, d, s), (eps, 1.0 - p, d, s)):
        derived, printed = b.precision_bound(*args), b.precision_bound(*args, form="printed")
        assert np.all(derived >= printed)
        assert np.any(derived > printed + 1e-6)
        assert np.all(b.negative_accuracy_bound(*args) >=
                      b.negative_accuracy_bound(*args, form="printed"))
    # ... so for a target β the derived planner allows no more ε and no larger p.
    u = b.precision_bound(eps, p, d, s, form="printed")
    ok = (u < 1 - 1e-6) & (d < s * p) & (u > b.precision_bound(0.0, p, d, s) + 1e-6)
    assert ok.sum() > 500
    args = (u[ok], p[ok], d[ok], s[ok])
    assert np.all(b.epsilon_for_precision(*args)
                  <= b.epsilon_for_precision(*args, form="printed") + 1e-12)
    derived, printed = b.max_sampling_rate(u, eps, d, s), b.max_sampling_rate(u, eps, d, s,
                                                                              form="printed")
    assert np.all(derived <= printed * (1 + 1e-12))  # equal (to rounding) where δ = 0


def test_lower_le_prior_le_upper(grid):
    eps, p, d, s = grid["eps"], grid["p"], grid["delta"], grid["s"]
    lower = b.precision_lower_bound(eps, p)
    assert np.all(lower <= p + 1e-12)
    assert np.all(p <= b.precision_bound(eps, p) + 1e-12)
    assert np.all(lower <= b.precision_bound(eps, p, d, s))
    # mirror: at δ = 0 the negative-accuracy bound is 1 − the precision lower bound
    assert np.allclose(b.negative_accuracy_bound(eps, p), 1.0 - lower, atol=1e-12)


@pytest.mark.parametrize("form", ["derived", "printed"])
def test_inverses_round_trip(grid, form):
    eps, p, d, s = grid["eps"], grid["p"], grid["delta"], grid["s"]
    f = dict(form=form)
    u = b.precision_bound(eps, p, d, s, **f)
    ok = (u < 1 - 1e-6) & (u > b.precision_bound(0.0, p, d, s, **f) + 1e-6)
    assert ok.sum() > 1000
    assert np.allclose(b.epsilon_for_precision(u[ok], p[ok], d[ok], s[ok], **f), eps[ok],
                       rtol=1e-6, atol=1e-6)
    assert np.allclose(b.max_sampling_rate(u[ok], eps[ok], d[ok], s[ok], **f), p[ok], rtol=1e-6,
                       atol=1e-9)
    # and the other way: the bound at the planned ε (or p) is the target
    beta, q = u[ok], p[ok]
    assert np.allclose(b.precision_bound(b.epsilon_for_precision(beta, q, d[ok], s[ok], **f), q,
                                         d[ok], s[ok], **f), beta, rtol=1e-9)
    planned = b.max_sampling_rate(beta, eps[ok], d[ok], s[ok], **f)
    assert np.allclose(b.precision_bound(eps[ok], planned, d[ok], s[ok], **f), beta, rtol=1e-9)
    u0 = b.precision_bound(eps, p)
    ok0 = u0 < 1 - 1e-6
    assert np.allclose(b.epsilon_from_precision(u0[ok0], p[ok0]), eps[ok0], rtol=1e-6, atol=1e-6)


def test_jayaraman_ppv_meets_u_as_fpr_vanishes(grid):
    eps, p = grid["eps"], grid["p"]
    gamma = (1.0 - p) / p
    u = b.precision_bound(eps, p)
    for alpha in (1e-6, 1e-9, 1e-12, 0.0):
        assert np.allclose(b.jayaraman_ppv_bound(eps, 0.0, alpha, gamma), u, rtol=1e-9, atol=1e-12)
    # and it never exceeds U (Jayaraman's bound uses the FPR as extra information)
    assert np.all(b.jayaraman_ppv_bound(eps, 0.0, 0.05, gamma) <= u + 1e-12)


def test_u_minus_p_never_exceeds_tanh_eps_over_4():
    # Why Thudi beats Sablayrolles (2022 Fig. 12): with e = e^ε, U − p = p·e/(p(e−1) + 1) − p;
    # d/dp = e/(p(e−1) + 1)² − 1 = 0 at p* = 1/(√e + 1), where U = √e/(√e + 1), so
    # max (U − p) = (√e − 1)/(√e + 1) = tanh(ε/4) ≤ ε/4.
    p = np.linspace(0, 1, 200001)
    for eps in (0.1, 1.0, 3.0, 8.0):
        gap = b.precision_bound(eps, p) - p
        assert gap.max() == pytest.approx(math.tanh(eps / 4), abs=1e-9)
        p_star = 1.0 / (math.exp(eps / 2) + 1.0)
        assert b.precision_bound(eps, p_star) - p_star == pytest.approx(math.tanh(eps / 4))
        assert np.all(b.precision_bound(eps, p) <= b.sablayrolles_precision_bound(eps, p) + 1e-12)


def test_group_and_deletion_monotonicity(grid):
    eps, p, rng = grid["eps"], grid["p"], grid["rng"]
    for i in range(50):
        ps = rng.uniform(0, 0.5, rng.integers(1, 20))
        group = b.group_precision_bound(eps[i], ps)
        assert group >= b.precision_bound(eps[i], ps).max() - 1e-12
        assert b.group_precision_bound(eps[i], np.append(ps, 0.3)) >= group - 1e-12
    m = b.deletion_capacity(eps, p, 0.8)
    assert np.all(b.deletion_capacity(eps + 0.5, p, 0.8) <= m * (1 + 1e-12))
    assert np.all(b.deletion_capacity(eps, p * 0.5, 0.8) >= m * (1 - 1e-12))


def test_earlier_bounds_are_no_tighter_than_u_at_balanced_prior(grid):
    eps, d = grid["eps"], grid["delta"]
    u = b.precision_bound(eps, 0.5)
    for other in (b.humphries_accuracy_bound(eps), b.erlingsson_accuracy_bound(eps),
                  b.yeom_accuracy_bound(eps), b.sablayrolles_precision_bound(eps, 0.5),
                  b.mahloujifar_precision_bound(eps)):
        assert np.all(other >= u - 1e-12)
    # with δ: Humphries' accuracy (e^ε + δ)/(e^ε + 1) ≤ Erlingsson's 1 − (1 − δ)e^-ε/2
    assert np.all(b.humphries_accuracy_bound(eps, d) <= b.erlingsson_accuracy_bound(eps, d) + 1e-12)


def test_library_default_floor_is_the_products():
    """Issue 21, item 8: one default TPR floor.  U(3, 0.5, δ = 0.05) at s = 0.01 is vacuous
    (δ ≥ s), as the sweep's `bound` says, never the 0.955 of s = 1; at δ = 1e-3 it is, by hand,
    1/(1 + e^-3·(1 − 0.1))."""
    from sweeper.config import SweepConfig

    assert SweepConfig().metrics.tpr_floor == b.DEFAULT_TPR_FLOOR == 0.01
    assert b.precision_bound(3, 0.5, 0.05) == 1.0
    assert b.precision_bound(3, 0.5, 0.05, 1.0) == pytest.approx(1 / (1 + math.exp(-3) * 0.95))
    assert b.precision_bound(3, 0.5, 1e-3) == pytest.approx(1 / (1 + math.exp(-3) * 0.9))
    assert b.epsilon_for_precision(0.9, 0.5, 1e-3) == pytest.approx(math.log(0.9 / (1 / 0.9 - 1)))
