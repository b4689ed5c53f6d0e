"""The bound formulas, checked against values derived by hand from the papers' formulas.

References are computed here with `math` from the formula written in the comment, never by
calling the library; the property tests then sweep random grids.  Notation: e = exp(ε),
s = the attack's TPR P(S | x* ∈ D), U = Thudi et al.'s precision bound (2024, Theorem 3.3).
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


@pytest.mark.parametrize("epsilon, printed", [(3.0, 0.953), (2.0, 0.881), (1.0, 0.731)])
def test_fixed_bound_targets_of_the_2024_paper(epsilon, printed):
    # 2024 paper §4.3 / Figs 5-6: targets = U at p = 0.5, δ = 1e-5, s = 0.01 for ε = 3, 2, 1.
    # At p = 0.5: U = 1 / (1 + e^-ε·(0.5/0.5) − 1e-5·e^-ε·0.5/0.01) = 1 / (1 + e^-ε·(1 − 5e-4)):
    #   ε=3: 1/(1 + 0.0497871·0.9995) = 1/1.0497622 = 0.952597 → 0.953
    #   ε=2: 1/(1 + 0.1353353·0.9995) = 1/1.1352676 = 0.880850 → 0.881
    #   ε=1: 1/(1 + 0.3678794·0.9995) = 1/1.3676955 = 0.731157 → 0.731
    expected = 1.0 / (1.0 + math.exp(-epsilon) * 1.0 - 1e-5 * math.exp(-epsilon) * 0.5 / 0.01)
    assert round(expected, 3) == printed
    got = b.precision_bound(epsilon, 0.5, 1e-5, b.DEFAULT_TPR_FLOOR)
    assert close(got, expected)
    # ... and the planner recovers ε from the exact target:
    assert close(b.epsilon_for_precision(expected, 0.5, 1e-5, 0.01), epsilon, rel=1e-10)


def test_planner_on_the_printed_targets():
    # ε = ln[(1−p)·(1/p − δ/s) / (1/β − 1)]; at p = 0.5: ln[0.5·(2 − 1e-3)/(1/β − 1)]
    for beta in (0.953, 0.881, 0.731):
        expected = math.log(0.5 * (2.0 - 1e-3) / (1.0 / beta - 1.0))
        assert close(b.epsilon_for_precision(beta, 0.5, 1e-5, 0.01), expected)
    # The rounded 0.953 asks for ε = ln(0.9995·0.953/0.047) = ln(20.2664) = 3.00897 (> 3).
    assert b.epsilon_for_precision(0.953, 0.5, 1e-5, 0.01) == pytest.approx(3.00897, abs=1e-5)


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
    # U = 1 / (1 + e^-1·(0.8/0.2) − 1e-3·e^-1·0.8/0.05) = 1 / (1 + 4e^-1 − 0.016e^-1)
    expected = 1.0 / (1.0 + 4.0 * math.exp(-1) - 0.016 * math.exp(-1))
    assert close(b.precision_bound(1.0, 0.2, 1e-3, 0.05), expected)


def test_precision_bound_delta_zero_closed_form():
    # δ = 0: U = p·e / (p·e + 1 − p); ε = 1.5, p = 0.3
    e = math.exp(1.5)
    assert close(b.precision_bound(1.5, 0.3), 0.3 * e / (0.3 * e + 0.7))


def test_precision_bound_vacuous_cases():
    # ε = 0, p = 0.5, δ = 0.5, s = 0.1: denominator 1 + 1 − 0.5·1·0.5/0.1... = 1 + 1 − 5·0.5 = −0.5 ≤ 0
    assert 1.0 + 1.0 - 0.5 * 1.0 / 0.1 * 0.5 < 0
    assert b.precision_bound(0.0, 0.5, 0.5, 0.1) == 1.0
    # ε = 0, p = 0.5, δ = 0.5, s = 0.2: denominator 1 + 1 − 0.5·0.5/0.2 = 0.75 > 0 but U = 1.33 > 1
    assert b.precision_bound(0.0, 0.5, 0.5, 0.2) == 1.0


@pytest.mark.parametrize("delta, tpr", [(0.0, 1.0), (1e-5, 0.01), (0.3, 0.5)])
def test_precision_bound_edges(delta, tpr):
    assert b.precision_bound(1.0, 0.0, delta, tpr) == 0.0  # never sampled: never a member
    assert b.precision_bound(INF, 0.0, delta, tpr) == 0.0
    assert b.precision_bound(1.0, 1.0, delta, tpr) == 1.0  # always sampled: always a member
    assert b.precision_bound(INF, 0.3, delta, tpr) == 1.0  # non-private: no bound
    assert b.precision_bound(0.0, 0.3) == pytest.approx(0.3)  # ε = 0, δ = 0: the prior


def test_negative_accuracy_bound():
    # 1 / (1 + e^-ε·p/(1−p) − δ·e^-ε·p/s'); ε = 1, p = 0.2, δ = 1e-3, s' = 0.05
    # = 1 / (1 + e^-1·0.25 − 1e-3·e^-1·0.2/0.05) = 1 / (1 + 0.25e^-1 − 0.004e^-1)
    expected = 1.0 / (1.0 + 0.25 * math.exp(-1) - 0.004 * math.exp(-1))
    assert close(b.negative_accuracy_bound(1.0, 0.2, 1e-3, 0.05), expected)
    assert b.negative_accuracy_bound(1.0, 1.0) == 0.0  # always a member: "not a member" is never right
    assert b.negative_accuracy_bound(1.0, 0.0) == 1.0


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
    # δ = 1e-5, s = 0.01, β = 0.8, p = 0.1: ε = ln[0.9·(10 − 1e-3)/0.25] = ln 35.9964 = 3.58342
    expected = math.log(0.9 * (10.0 - 1e-3) / 0.25)
    assert close(b.epsilon_for_precision(0.8, 0.1, 1e-5, 0.01), expected)
    got = b.epsilon_for_precision(0.8, [0.1, 0.5], 0.0, 1.0)
    assert isinstance(got, np.ndarray) and got == pytest.approx([math.log(36.0), math.log(4.0)])


def test_epsilon_for_precision_edges():
    assert b.epsilon_for_precision(1.0, 0.7) == INF  # every ε keeps precision ≤ 1
    assert b.epsilon_for_precision(0.5, 0.0) == INF  # never sampled
    assert b.epsilon_for_precision(0.3, 0.3) == 0.0  # target = prior: only ε = 0


@pytest.mark.parametrize("target, p, delta, tpr, reason", [
    (0.3, 0.5, 0.0, 1.0, r"target precision 0\.3 is below the prior p=0\.5.*p ≤ 0\.3"),
    (0.3, 1.0, 0.0, 1.0, r"p=1"),
    (0.3, 0.5, 1e-5, 0.01, r"below 0\.5001, the bound at ε=0"),
    (0.9, 0.5, 0.5, 0.01, r"vacuous"),
])
def test_epsilon_for_precision_impossible_targets(target, p, delta, tpr, reason):
    with pytest.raises(ValueError, match=reason):
        b.epsilon_for_precision(target, p, delta, tpr)


def test_epsilon_for_precision_impossible_inside_an_array():
    with pytest.raises(ValueError, match=r"below the prior p=0\.9"):
        b.epsilon_for_precision(0.8, [0.1, 0.9])


def test_max_sampling_rate_values():
    # δ = 0: k = (1/β − 1)·e^ε, p = 1/(1 + k); β = 0.8, ε = 1: p = 1/(1 + 0.25e) = 0.595423
    assert close(b.max_sampling_rate(0.8, 1.0), 1.0 / (1.0 + 0.25 * E))
    # δ = 1e-5, s = 0.01, β = 0.8, ε = 3: smaller root of δp² − (δ + s + k·s)p + s = 0, by the
    # textbook formula p = [bq − sqrt(bq² − 4δs)] / (2δ), bq = δ + s + k·s.
    d, s, k = 1e-5, 0.01, 0.25 * math.exp(3.0)
    bq = d + s + k * s
    expected = (bq - math.sqrt(bq * bq - 4 * d * s)) / (2 * d)
    got = b.max_sampling_rate(0.8, 3.0, d, s)
    assert close(got, expected, rel=1e-9)
    assert abs(d * got ** 2 - bq * got + s) < 1e-15
    assert close(b.precision_bound(3.0, got, d, s), 0.8, rel=1e-10)


def test_max_sampling_rate_edges():
    assert b.max_sampling_rate(1.0, 5.0) == 1.0
    assert b.max_sampling_rate(1.0, INF) == 1.0
    assert b.max_sampling_rate(0.8, INF) == 0.0
    assert b.max_sampling_rate(0.4, 0.0) == pytest.approx(0.4)  # at ε = 0, U = p


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


def test_u_increases_in_epsilon_and_p_and_decreases_in_tpr(grid):
    eps, p, d, s, rng = grid["eps"], grid["p"], grid["delta"], grid["s"], grid["rng"]
    u = b.precision_bound(eps, p, d, s)
    assert np.all(b.precision_bound(eps + rng.uniform(0, 2, eps.size), p, d, s) >= u - 1e-12)
    assert np.all(b.precision_bound(eps, np.minimum(p + rng.uniform(0, 0.1, p.size), 1), d, s)
                  >= u - 1e-12)
    assert np.all(b.precision_bound(eps, p, d, np.minimum(s * 1.5, 1.0)) <= u + 1e-12)
    assert np.all(b.precision_bound(eps, p, 0.0) <= u + 1e-12)  # δ only loosens


def test_lower_le_prior_le_upper(grid):
    eps, p, d, s = grid["eps"], grid["p"], grid["delta"], grid["s"]
    lower = b.precision_lower_bound(eps, p)
    assert np.all(lower <= p + 1e-12)
    assert np.all(p <= b.precision_bound(eps, p) + 1e-12)
    assert np.all(lower <= b.precision_bound(eps, p, d, s))
    # mirror: at δ = 0 the negative-accuracy bound is 1 − the precision lower bound
    assert np.allclose(b.negative_accuracy_bound(eps, p), 1.0 - lower, atol=1e-12)


def test_inverses_round_trip(grid):
    eps, p, d, s = grid["eps"], grid["p"], grid["delta"], grid["s"]
    u = b.precision_bound(eps, p, d, s)
    ok = (u < 1 - 1e-6) & (u > b.precision_bound(0.0, p, d, s) + 1e-6)
    assert ok.sum() > 1000
    assert np.allclose(b.epsilon_for_precision(u[ok], p[ok], d[ok], s[ok]), eps[ok], rtol=1e-6,
                       atol=1e-6)
    assert np.allclose(b.max_sampling_rate(u[ok], eps[ok], d[ok], s[ok]), p[ok], rtol=1e-6,
                       atol=1e-9)
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
