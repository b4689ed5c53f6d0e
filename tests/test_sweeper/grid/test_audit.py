"""The audit columns and the violation flag, against values derived by hand.

Every expected confidence end here is solved by bisection on the binomial distribution summed
term by term (math.comb, log-space), never by the Beta quantiles the product uses.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom

from jobs.metrics import OperatingPoint
from sweeper.grid.plan import AttackSpec, Cell
from sweeper.grid.cells import (VIOLATION_TESTS, audit_from_precision, audit_from_rates,
                                violation_test)


def log_pmf(k: int, n: int, rate: float) -> float:
    if rate <= 0.0:
        return 0.0 if k == 0 else -math.inf
    if rate >= 1.0:
        return 0.0 if k == n else -math.inf
    return math.log(math.comb(n, k)) + k * math.log(rate) + (n - k) * math.log1p(-rate)


def tail_at_least(x: int, n: int, rate: float) -> float:
    return sum(math.exp(log_pmf(k, n, rate)) for k in range(x, n + 1))


def solve(increasing, target: float) -> float:
    """The rate in (0, 1) where the increasing function `increasing` equals `target`."""
    low, high = 0.0, 1.0
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if increasing(middle) < target else (low, middle)
    return (low + high) / 2


def lower_end(x: int, n: int, alpha: float) -> float:
    """One-sided exact lower end L: P(Bin(n, L) ≥ x) = alpha."""
    return solve(lambda rate: tail_at_least(x, n, rate), alpha)


def upper_end(x: int, n: int, alpha: float) -> float:
    """One-sided exact upper end U: P(Bin(n, U) ≤ x) = alpha, i.e. P(Bin(n, U) ≥ x + 1) = 1 − alpha."""
    return solve(lambda rate: tail_at_least(x + 1, n, rate), 1.0 - alpha)


def point(tp: int, members: int, fp: int, non_members: int, candidates: int = 1) -> OperatingPoint:
    accepted = tp + fp
    return OperatingPoint(threshold=1.0, tp=tp, fp=fp, members=members, non_members=non_members,
                          precision=tp / accepted if accepted else math.nan,
                          precision_ci_low=math.nan, precision_ci_high=math.nan,
                          candidates=candidates)


def cell(epsilon: float, p: float, delta: float = 0.0, violation_alpha: float = 0.001) -> Cell:
    scores = AttackSpec(attack="loss", target="t", shadows=(), eval_records=1000, settings=())
    return Cell(dataset="d", model="m", epsilon=epsilon, delta=delta, p=p,
                target_precision=math.nan, attack="loss", policy="calibrated", trial=0,
                scores=scores, tpr_floor=0.01, bound_form="derived",
                violation_alpha=violation_alpha, calibration=())


def test_rates_prove_a_violation_the_precision_test_cannot_see():
    # The example: ε = 1, p = 0.5, TP 499 of 500 members, FP 250 of 500 non-members.
    # Precision 499/749 = 0.666 < U = e/(1 + e) = 0.731: the precision test is silent.  But
    # (ε, δ)-DP needs 1 − FPR ≤ e^ε·(1 − TPR) + δ, and 0.5 ≤ e·0.002 fails by far.  At the
    # violation test's level, each end at α/(2·candidates) = 0.001/2:
    alpha = 0.001 / 2
    tpr_low, fpr_high = lower_end(499, 500, alpha), upper_end(250, 500, alpha)
    expected = max(math.log(tpr_low / fpr_high), math.log((1 - fpr_high) / (1 - tpr_low)))
    assert 0.97 < tpr_low < 0.99 and 0.55 < fpr_high < 0.60  # sanity of the bisection
    assert expected == pytest.approx(3.06, abs=0.02)  # = ln(0.426 / 0.0199), proves ε > 1
    got = violation_test(point(499, 500, 250, 500), cell(1.0, 0.5))
    assert got["epsilon_proven_rates"] == pytest.approx(expected, rel=1e-6)
    assert got["precision_proven"] < got["bound_at_tpr_low"]
    assert got["violation"] and got["violation_reason"] == "rates"
    # The same cell claiming ε = 4 is not refuted by either test.
    calm = violation_test(point(499, 500, 250, 500), cell(4.0, 0.5))
    assert not calm["violation"] and calm["violation_reason"] == ""


def test_the_reason_names_every_test_that_fired():
    # Both: 100 of 1000 members, no false positive (ε = 1, p = 0.5).  Precision 1 with its lower
    # end L^100 = 0.0005 → L = 0.0005^(1/100) = 0.927 > U(1, 0.5) = 0.731; the rates prove
    # ln(TPR_low / FPR_high) with FPR_high = 1 − 0.0005^(1/1000) = 0.0076: ln(0.075/0.0076) > 1.
    both = violation_test(point(100, 1000, 0, 1000), cell(1.0, 0.5))
    assert both["precision_proven"] == pytest.approx(0.0005 ** (1 / 100), rel=1e-9)
    assert both["violation_reason"] == "precision+rates"
    # Precision alone: the cell claims p = 0.1, but half the evaluated records are members (a
    # sampling bug).  A near-random attack (TPR 0.6, FPR 0.4) proves no ε from its rates, yet
    # precision 0.6 on 100 accepted records is far above U(1, 0.1) = 0.1e/(0.1e + 0.9) = 0.232.
    alone = violation_test(point(60, 100, 40, 100), cell(1.0, 0.1))
    assert alone["epsilon_proven_rates"] < 1.0 and alone["violation_reason"] == "precision"
    for reason in (both["violation_reason"], alone["violation_reason"]):
        assert set(filter(None, reason.split("+"))) <= set(VIOLATION_TESTS)
    # ε = ∞ claims nothing, so nothing refutes it; nobody accepted proves nothing.
    assert not violation_test(point(100, 1000, 0, 1000), cell(math.inf, 0.5))["violation"]
    assert not violation_test(point(0, 1000, 0, 1000), cell(1.0, 0.5))["violation"]


def test_audits_are_one_sided_and_corrected_for_the_thresholds_searched():
    # 40 of 50 accepted records are members, p = 0.5, the policy searched 40 thresholds, level
    # 0.05: the precision's lower end at 0.05/40, the rates' ends at 0.05/80 each.
    p, alpha, searched = 0.5, 0.05, 40
    low = lower_end(40, 50, alpha / searched)
    assert audit_from_precision(point(40, 400, 10, 400, searched), p, alpha) == pytest.approx(
        math.log(low / (1 - low)), rel=1e-6)
    # Rates: TP 200 of 400, FP 10 of 400; the first term ln(TPR_low/FPR_high) is the larger.
    tpr_low, fpr_high = lower_end(200, 400, alpha / 80), upper_end(10, 400, alpha / 80)
    assert math.log(tpr_low / fpr_high) > math.log((1 - fpr_high) / (1 - tpr_low)) > 0
    assert audit_from_rates(point(200, 400, 10, 400, searched), 0.0, alpha) == pytest.approx(
        math.log(tpr_low / fpr_high), rel=1e-6)
    # With δ, the first term is ln((TPR_low − δ)/FPR_high).
    assert audit_from_rates(point(200, 400, 10, 400, searched), 0.01, alpha) == pytest.approx(
        math.log((tpr_low - 0.01) / fpr_high), rel=1e-6)
    assert math.isnan(audit_from_precision(point(0, 400, 0, 400), p, alpha))


@pytest.mark.parametrize("alpha", [0.05, 0.001])
def test_randomized_response_at_epsilon_one_rarely_proves_more(alpha):
    """Randomized response on the membership bit at exactly ε = 1: "member" with probability
    TPR = e/(1 + e) for members and FPR = 1/(1 + e) for non-members (so TPR/FPR = e and
    (1 − FPR)/(1 − TPR) = e: both DP inequalities hold with equality, p = 0.5 gives precision
    U exactly).  Each audit is a level-α claim, so it may prove ε > 1 in at most a fraction α
    of runs.  The simulation is seeded (deterministic); had the true rate been exactly α, the
    assertion would fail with probability below 1e-6 (binomial tail of `runs` draws).  The old
    audit, a two-sided 95 % end whatever the level, proved ε > 1 in 0.75 % (precision) and
    1.0 % (rates) of these runs: under 5 %, but far over a stated level of 0.1 %.
    """
    rng = np.random.default_rng(20240517)
    runs, members, non_members = 4000, 500, 500
    tpr, fpr = math.e / (1 + math.e), 1 / (1 + math.e)
    tps, fps = rng.binomial(members, tpr, runs), rng.binomial(non_members, fpr, runs)
    proofs_precision = sum(audit_from_precision(point(a, members, b, non_members), 0.5, alpha) > 1.0
                           for a, b in zip(tps, fps))
    proofs_rates = sum(audit_from_rates(point(a, members, b, non_members), 0.0, alpha) > 1.0
                       for a, b in zip(tps, fps))
    allowed = int(binom.isf(1e-6, runs, alpha))  # P(Bin(runs, alpha) > allowed) ≤ 1e-6
    assert proofs_precision <= allowed and proofs_rates <= allowed
