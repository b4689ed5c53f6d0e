"""Precision, its Clopper–Pearson interval, the quantile policy, TPR at FPR and AUC, by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from jobs.metrics import (clopper_pearson, clopper_pearson_lower, clopper_pearson_upper,
                          max_advantage, operating_point, quantile_max, quantile_thresholds,
                          roc_auc, roc_curve, tpr_at_fpr)


def binomial_tail_at_least(x: int, n: int, rate: float) -> float:
    return sum(math.comb(n, k) * rate**k * (1 - rate) ** (n - k) for k in range(x, n + 1))


def test_clopper_pearson_extremes_have_closed_forms():
    # 0 of 10: the upper end solves (1 − u)^10 = 0.025, so u = 1 − 0.025^(1/10) ≈ 0.3085.
    low, high = clopper_pearson(0, 10)
    assert low == 0.0 and high == pytest.approx(1 - 0.025 ** 0.1)
    assert high == pytest.approx(0.30850, abs=1e-5)
    # 10 of 10: the lower end solves l^10 = 0.025.
    low, high = clopper_pearson(10, 10)
    assert high == 1.0 and low == pytest.approx(0.025 ** 0.1)


def test_clopper_pearson_ends_are_the_exact_binomial_tails():
    # The lower end L of x successes in n makes P(Bin(n, L) ≥ x) = 2.5 %; the upper end U makes
    # P(Bin(n, U) ≤ x) = 2.5 %.  Checked by summing the binomial pmf directly.
    x, n = 7, 20
    low, high = clopper_pearson(x, n)
    assert binomial_tail_at_least(x, n, low) == pytest.approx(0.025, abs=1e-9)
    assert 1 - binomial_tail_at_least(x + 1, n, high) == pytest.approx(0.025, abs=1e-9)
    assert low < x / n < high


def test_clopper_pearson_with_no_trials_is_undefined():
    assert all(math.isnan(v) for v in clopper_pearson(0, 0))


def test_operating_point_counts_and_nan_scores_are_non_members():
    scores = np.array([0.9, 0.8, np.nan, 0.2, 0.8])
    members = np.array([True, False, True, True, True])
    point = operating_point(scores, members, threshold=0.8)
    # Accepted: 0.9 (member), 0.8 (non-member), 0.8 (member); NaN never accepted.
    assert (point.tp, point.fp) == (2, 1)
    assert point.precision == pytest.approx(2 / 3)
    assert point.tpr == pytest.approx(2 / 4) and point.fpr == pytest.approx(1.0)
    assert point.accepted_fraction == pytest.approx(3 / 5)


def test_quantile_thresholds_step_by_two_and_a_half_percent():
    scores = np.arange(1.0, 41.0)  # 40 records: each 2.5 % step adds exactly one record
    thresholds = quantile_thresholds(scores)
    assert len(thresholds) == 40
    assert thresholds[0] == 40.0 and thresholds[-1] == 1.0
    assert list(thresholds) == list(np.arange(40.0, 0.0, -1.0))


def test_quantile_max_picks_the_best_precision_among_the_quantiles():
    scores = np.arange(8.0, 0.0, -1.0)  # 8, 7, …, 1
    members = np.array([0, 1, 1, 1, 0, 1, 0, 0], dtype=bool)
    # Accepting the top k: precision 0/1, 1/2, 2/3, 3/4, 3/5, 4/6, 4/7, 4/8 → best 3/4 at k = 4.
    point = quantile_max(scores, members)
    assert (point.tp, point.fp) == (3, 1)
    assert point.threshold == 5.0
    assert point.precision == pytest.approx(0.75)
    assert (point.precision_ci_low, point.precision_ci_high) == pytest.approx(clopper_pearson(3, 4))


def test_quantile_max_of_a_constant_score_is_the_member_share():
    members = np.array([1, 0, 0, 1, 0], dtype=bool)
    point = quantile_max(np.ones(5), members)
    assert (point.tp, point.fp) == (2, 3) and point.precision == pytest.approx(0.4)


def test_tpr_at_fpr_takes_the_best_threshold_within_the_fpr():
    scores = np.array([5.0, 4.0, 2.0, 3.0, 1.0, 0.0])
    members = np.array([1, 1, 1, 0, 0, 0], dtype=bool)
    # Threshold 4: TPR 2/3 at FPR 0; threshold 2: TPR 1 at FPR 1/3.
    assert tpr_at_fpr(scores, members, 0.0) == pytest.approx(2 / 3)
    assert tpr_at_fpr(scores, members, 0.2) == pytest.approx(2 / 3)
    assert tpr_at_fpr(scores, members, 0.34) == pytest.approx(1.0)


def test_tpr_at_fpr_never_splits_a_tie():
    # Member and non-member tie at the top: any threshold that takes the member takes the
    # non-member too, so at FPR 0 the TPR is 0.
    scores = np.array([1.0, 1.0, 0.0])
    members = np.array([True, False, False])
    assert tpr_at_fpr(scores, members, 0.0) == 0.0
    assert tpr_at_fpr(scores, members, 0.5) == 1.0


def test_auc_is_the_share_of_correctly_ordered_pairs():
    # Members 3, 1; non-members 2, 0: pairs (3>2, 3>0, 1<2, 1>0) → 3/4.
    assert roc_auc(np.array([3.0, 1.0, 2.0, 0.0]), np.array([1, 1, 0, 0], dtype=bool)) == pytest.approx(0.75)
    # A tie counts one half: member 2 vs non-members 2 and 1 → (0.5 + 1)/2.
    assert roc_auc(np.array([2.0, 2.0, 1.0]), np.array([1, 0, 0], dtype=bool)) == pytest.approx(0.75)
    assert math.isnan(roc_auc(np.ones(3), np.ones(3, dtype=bool)))


def test_one_sided_lower_bound_is_the_exact_upper_tail():
    # P(Bin(50, L) ≥ 30) = 0.001 defines the one-sided 99.9 % lower bound L.
    low = clopper_pearson_lower(30, 50, 0.001)
    assert binomial_tail_at_least(30, 50, low) == pytest.approx(0.001, abs=1e-12)
    assert low < clopper_pearson(30, 50)[0]  # stricter than the two-sided 95 % end
    assert clopper_pearson_lower(0, 50, 0.001) == 0.0
    assert math.isnan(clopper_pearson_lower(0, 0, 0.001))


def test_quantile_max_says_how_many_thresholds_it_searched():
    assert quantile_max(np.arange(8.0, 0.0, -1.0), np.ones(8, dtype=bool)).candidates == 8
    assert quantile_max(np.ones(5), np.ones(5, dtype=bool)).candidates == 1


def test_a_tie_at_the_cut_stays_out_so_decisions_are_measured_on_what_they_accept():
    # 200 decisions: 2 records called members (score 1, both members), 198 rejected (score 0).
    # The top 2.5 % is 5 records; "score ≥ 1" takes 2 ≤ 5, "score ≥ 0" takes all 200.
    scores = np.r_[np.ones(2), np.zeros(198)]
    members = np.r_[True, True, np.arange(198) % 2 == 0]
    assert sorted(set(quantile_thresholds(scores))) == [0.0, 1.0]
    point = quantile_max(scores, members)
    assert (point.tp, point.fp) == (2, 0) and point.threshold == 1.0
    # A tie at the very top wider than a cut has no threshold for that cut: 3 tied of 4 records.
    # Cuts are ⌈0.1·i⌉ records: 1 (i = 1…10) and 2 (i = 11…20) are skipped, 3 (i = 21…30) gives
    # threshold 5, 4 (i = 31…40) gives 1.
    assert list(quantile_thresholds(np.array([5.0, 5.0, 5.0, 1.0]))) == [5.0] * 10 + [1.0] * 10


def test_the_bound_is_taken_at_the_floor_when_there_is_no_tpr():
    from sweeper.grid.cells import floored

    assert floored(float("nan"), 0.01) == 0.01
    assert floored(0.002, 0.01) == 0.01 and floored(0.3, 0.01) == 0.3


def test_ppv_at_gamma_by_hand():
    from sweeper.grid.cells import ppv_at_gamma

    # TPR 0.5, FPR 0.1, nine non-members per member: 0.5 / (0.5 + 9 · 0.1) = 0.5 / 1.4.
    assert ppv_at_gamma(0.5, 0.1, 9.0) == pytest.approx(5 / 14)
    assert math.isnan(ppv_at_gamma(0.0, 0.0, 1.0))  # nobody accepted: no PPV


def test_nan_scores_are_non_members_even_at_the_hundred_percent_cut():
    # The example: 30 members without a score (NaN), 10 scored non-members.  Every cut,
    # the top 100 % included, accepts only scored records, so precision is 0/k at each: 0.
    # (NaN as −∞ made the last cut "score ≥ −∞" accept all 40: precision 30/40 = 0.75.)
    scores = np.r_[np.full(30, np.nan), np.linspace(1.0, 10.0, 10)]
    members = np.r_[np.ones(30, bool), np.zeros(10, bool)]
    point = quantile_max(scores, members)
    assert point.tp == 0 and point.fp > 0 and point.precision == 0.0
    assert not np.isnan(quantile_thresholds(scores)).any()
    assert quantile_thresholds(scores).min() == 1.0  # the lowest real score, never −∞
    assert operating_point(scores, members, -np.inf).tp == 0
    # The ROC never reaches TPR > 0 and TPR at any FPR is 0; AUC: every member is outscored.
    false_rates, true_rates = roc_curve(scores, members)
    assert true_rates.max() == 0.0 and false_rates.max() == 1.0
    assert tpr_at_fpr(scores, members, 0.5) == 0.0
    assert roc_auc(scores, members) == 0.0
    # Nothing scored at all: nobody is accepted, so there is no precision.
    nothing = quantile_max(np.full(4, np.nan), np.array([True, False, True, False]))
    assert (nothing.tp, nothing.fp) == (0, 0) and math.isnan(nothing.precision)


def test_nan_scores_rank_below_minus_infinity_in_the_auc():
    # Members: −∞ and 1; non-members: NaN and 0.  Pairs (−∞ vs NaN: member wins, −∞ vs 0: loses,
    # 1 vs NaN: wins, 1 vs 0: wins) → 3/4.  As −∞, the NaN would tie the first pair: 2.5/4.
    scores = np.array([-np.inf, 1.0, np.nan, 0.0])
    assert roc_auc(scores, np.array([1, 1, 0, 0], dtype=bool)) == pytest.approx(0.75)
    # Two NaNs tie: one member and one non-member, both unscored → 1/2.
    assert roc_auc(np.array([np.nan, np.nan]), np.array([True, False])) == pytest.approx(0.5)


def test_advantage_is_the_best_threshold_not_the_chosen_one():
    # Scores 6…1, members 6, 5, 3 (3 members, 3 non-members).  TPR − FPR per threshold:
    # 6 → 1/3, 5 → 2/3, 4 → 2/3 − 1/3, 3 → 1 − 1/3, 2 → 1 − 2/3, 1 → 0; the best is 2/3, at 5
    # (and 3), while quantile_max's best precision (1, at 6 and 5) ties to 5 here, and the
    # strictest threshold (6) would give 1/3.
    scores = np.arange(6.0, 0.0, -1.0)
    members = np.array([1, 1, 0, 1, 0, 0], dtype=bool)
    assert max_advantage(scores, members) == pytest.approx(2 / 3)
    at_six = operating_point(scores, members, 6.0)
    assert at_six.tpr - at_six.fpr == pytest.approx(1 / 3)
    # Worse than chance everywhere: accepting nobody (TPR = FPR = 0) is still a threshold.
    assert max_advantage(-scores, members) == pytest.approx(0.0)
    assert math.isnan(max_advantage(scores, np.ones(6, dtype=bool)))
    # NaN members are rejected at every threshold: 1 member scored 2, 1 NaN, non-members 1 and 3.
    assert max_advantage(np.array([2.0, np.nan, 1.0, 3.0]),
                         np.array([True, True, False, False])) == pytest.approx(0.0)


def test_one_sided_upper_bound_is_the_exact_lower_tail():
    # P(Bin(50, U) ≤ 20) = 0.001 defines the one-sided 99.9 % upper bound U.
    high = clopper_pearson_upper(20, 50, 0.001)
    assert 1 - binomial_tail_at_least(21, 50, high) == pytest.approx(0.001, abs=1e-12)
    # 0 of 10 at 0.025 is the closed form 1 − 0.025^(1/10); 10 of 10 is 1; no trials is NaN.
    assert clopper_pearson_upper(0, 10, 0.025) == pytest.approx(1 - 0.025 ** 0.1)
    assert clopper_pearson_upper(10, 10, 0.001) == 1.0
    assert math.isnan(clopper_pearson_upper(0, 0, 0.001))


def test_hand_written_metrics_agree_with_scipy_and_sklearn_where_those_apply():
    """jobs.metrics keeps its own Clopper–Pearson (binomtest is 27x slower) and ROC (sklearn
    refuses NaN and ±inf scores): on what the libraries take, the numbers are theirs."""
    from scipy.stats import binomtest
    from sklearn import metrics as sk

    for k, n in ((0, 10), (3, 7), (30, 50), (10, 10), (4999, 10000)):
        ci = binomtest(k, n).proportion_ci(0.95, method="exact")
        assert clopper_pearson(k, n) == pytest.approx((ci.low, ci.high), rel=1e-12, abs=1e-15)
    rng = np.random.default_rng(0)
    for ties in (False, True):
        scores = rng.normal(size=300)
        scores = np.round(scores, 1) if ties else scores
        members = rng.random(300) < 0.4
        fpr, tpr, _ = sk.roc_curve(members, scores, drop_intermediate=False)
        ours = roc_curve(scores, members)
        assert np.allclose(ours[0], fpr, rtol=0, atol=1e-15)
        assert np.allclose(ours[1], tpr, rtol=0, atol=1e-15)
        assert roc_auc(scores, members) == pytest.approx(sk.roc_auc_score(members, scores),
                                                         rel=0, abs=1e-15)
