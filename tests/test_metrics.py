"""Precision, its Clopper–Pearson interval, the quantile policy, TPR at FPR and AUC, by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from jobs.metrics import clopper_pearson, clopper_pearson_lower, operating_point, quantile_max, quantile_thresholds, \
    roc_auc, tpr_at_fpr


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
    from sweeper.tasks import floored

    assert floored(float("nan"), 0.01) == 0.01
    assert floored(0.002, 0.01) == 0.01 and floored(0.3, 0.01) == 0.3


def test_ppv_at_gamma_by_hand():
    from sweeper.tasks import ppv_at_gamma

    # TPR 0.5, FPR 0.1, nine non-members per member: 0.5 / (0.5 + 9 · 0.1) = 0.5 / 1.4.
    assert ppv_at_gamma(0.5, 0.1, 9.0) == pytest.approx(5 / 14)
    assert math.isnan(ppv_at_gamma(0.0, 0.0, 1.0))  # nobody accepted: no PPV
