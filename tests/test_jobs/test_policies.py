"""Threshold policies: calibrated thresholds by hand, and proof that they ignore target labels."""

from __future__ import annotations

import math

import numpy as np
import pytest

from jobs.policies import CalibrationSettings, apply_policy, calibrated_point, calibrated_thresholds

# Two holdout models, four records each (scores, known membership).
HOLDOUT = np.array([[9.0, 8.0, 7.0, 1.0], [6.0, 5.0, 4.0, 0.0]])
HOLDOUT_MEMBERS = np.array([[True, True, False, False], [True, False, True, False]])
LABELS = np.array([0, 0, 1, 1])


def test_fpr_objective_takes_the_highest_tpr_within_the_fpr():
    # Pooled, by score: 9 M, 8 M, 7 N, 6 M, 5 N, 4 M, 1 N, 0 N (4 members, 4 non-members).
    # Threshold 8: TPR 2/4, FPR 0.  Threshold 7: FPR 1/4.  With FPR ≤ 0.2 the best is 8.
    settings = CalibrationSettings(objective="fpr", fpr=0.2)
    assert list(calibrated_thresholds(HOLDOUT, HOLDOUT_MEMBERS, LABELS, 0.5, 2, settings)) == [8.0, 8.0]
    # FPR ≤ 0.25 admits threshold 6 (TPR 3/4, FPR 1/4) and threshold 4 is past it (FPR 2/4).
    settings = CalibrationSettings(objective="fpr", fpr=0.25)
    assert calibrated_thresholds(HOLDOUT, HOLDOUT_MEMBERS, LABELS, 0.5, 2, settings)[0] == 6.0


def test_no_threshold_meets_an_impossible_fpr_so_nobody_is_accepted():
    # A non-member holds the top score: every threshold has FPR ≥ 1/4.
    holdout = np.array([[9.0, 1.0]])
    members = np.array([[False, True]])
    thresholds = calibrated_thresholds(holdout, members, np.array([0, 0]), 0.5, 1,
                                       CalibrationSettings(fpr=0.1))
    assert thresholds[0] == math.inf
    point = calibrated_point(np.array([5.0, 6.0]), np.array([True, True]), np.array([0, 0]), thresholds)
    assert (point.tp, point.fp) == (0, 0) and math.isnan(point.precision)


def test_ppv_objective_takes_the_best_likelihood_ratio_whatever_the_prior():
    # Rates per threshold (TPR, FPR): 9 → (1/4, 0), 8 → (2/4, 0), 7 → (2/4, 1/4), 6 → (3/4, 1/4),
    # 5 → (3/4, 2/4), 4 → (1, 2/4), 1 → (1, 3/4), 0 → (1, 1).
    # At p = 0.5: PPV = TPR/(TPR + FPR): 1, 1, 2/3, 3/4, 3/5, 2/3, 4/7, 1/2.  Two thresholds tie
    # at PPV 1; Jayaraman et al. (§5, Procedure 5.1) then maximise the members identified: 8.
    settings = CalibrationSettings(objective="ppv")
    assert calibrated_thresholds(HOLDOUT, HOLDOUT_MEMBERS, LABELS, 0.5, 2, settings)[0] == 8.0
    # No zero-FPR threshold: 7 → (0, 1/4), 6 → (1/2, 1/4), 5 → (1/2, 2/4), 4 → (1, 2/4),
    # 1 → (1, 3/4), 0 → (1, 1).  PPV = 1/(1 + (1−p)/p · FPR/TPR) ranks thresholds by TPR/FPR
    # (0, 2, 1, 2, 4/3, 1) at every prior; 6 and 4 tie at 2, and 4 finds every member (TPR 1),
    # so 4 wins at p = 0.1, 0.5 and 0.9.
    holdout = np.array([[7.0, 6.0, 5.0, 4.0, 1.0, 0.0]])
    members = np.array([[False, True, False, True, False, False]])
    for prior in (0.1, 0.5, 0.9):
        assert calibrated_thresholds(holdout, members, np.zeros(6, int), prior, 1, settings)[0] == 4.0


def test_ppv_ties_go_to_the_loosest_pure_threshold_so_the_target_accepts_someone():
    # The failure: the top holdout scores are all members.  Holdout (one model, 8
    # records): 10 M, 9 M, 8 M, 7 M, 6 N, 5 M, 4 N, 3 N.  Thresholds 10, 9, 8, 7 all have FPR 0,
    # PPV 1; the strictest (10) accepts one holdout record, the loosest (7) four of five members.
    holdout = np.array([[10.0, 9.0, 8.0, 7.0, 6.0, 5.0, 4.0, 3.0]])
    members = np.array([[True, True, True, True, False, True, False, False]])
    settings = CalibrationSettings(objective="ppv", min_tpr=0.0)
    threshold = calibrated_thresholds(holdout, members, np.zeros(8, int), 0.5, 1, settings)
    assert threshold[0] == 7.0
    # A target whose members score a little lower than the holdout's (9.5, 8.5, 7.5 and 2; a
    # non-member at 6.5): threshold 10 accepts nobody, 7 accepts the three high members.
    point = calibrated_point(np.array([9.5, 8.5, 7.5, 6.5, 2.0]),
                             np.array([True, True, True, False, True]), np.zeros(5, int), threshold)
    assert (point.tp, point.fp) == (3, 0)


def test_min_tpr_guard_skips_pure_cuts_that_find_too_few_members():
    # 10 M, 9 N, then 8…1 alternating M, N, M, N, …: rates per threshold with 5 members and 5
    # non-members: 10 → (1/5, 0) PPV 1, 9 → (1/5, 1/5), 8 → (2/5, 1/5) PPV 2/3, 7 → (2/5, 2/5),
    # 6 → (3/5, 2/5) PPV 3/5, …  With min_tpr 0.3 the cut at 10 (TPR 0.2) is out and 8 is best.
    holdout = np.array([[10.0, 9.0, 8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0]])
    members = np.array([[True, False, True, False, True, False, True, False, True, False]])
    labels = np.zeros(10, int)
    pick = lambda min_tpr: calibrated_thresholds(  # noqa: E731
        holdout, members, labels, 0.5, 1, CalibrationSettings(objective="ppv", min_tpr=min_tpr))[0]
    assert pick(0.0) == 10.0 and pick(0.2) == 10.0  # 1/5 meets a floor of exactly 0.2
    assert pick(0.3) == 8.0
    assert pick(0.9) == 2.0  # only "score ≥ 2" finds all 5 members (TPR 1 ≥ 0.9)
    # The guard is the one Morgan's search uses.
    from jobs.attacks.merlin import morgan_thresholds
    from jobs.metrics import reaches_min_tpr

    assert list(reaches_min_tpr(np.array([0.0, 0.2, 0.3]), 0.0)) == [False, True, True]
    assert list(reaches_min_tpr(np.array([0.0, 0.2, 0.3]), 0.25)) == [False, False, True]
    # Morgan on the same holdout (loss = −score, every Merlin ratio 1): a floor no box reaches
    # (every member, impossible within FPR 0.5: their span holds 4 of 5 non-members) leaves it
    # accepting nobody; a reachable one does not.
    loss, merlin = -holdout, np.ones_like(holdout)
    assert morgan_thresholds(loss, merlin, members, fpr=0.5, min_tpr=0.999).lower == math.inf
    assert morgan_thresholds(loss, merlin, members, fpr=0.5, min_tpr=0.3).lower < math.inf


def test_nan_holdout_and_target_scores_are_never_accepted():
    # Holdout: NaN members would be "accepted" at the bottom cut if NaN ranked as −∞: 2 M with a
    # real score 5, 3 M with NaN, 1 N at 1.  With fpr ≤ 0.5 the loosest allowed threshold is 5
    # (threshold 1 has FPR 1); no threshold is NaN or −∞.
    holdout = np.array([[5.0, 5.0, np.nan, np.nan, np.nan, 1.0]])
    members = np.array([[True, True, True, True, True, False]])
    thresholds = calibrated_thresholds(holdout, members, np.zeros(6, int), 0.5, 1,
                                       CalibrationSettings(objective="fpr", fpr=0.5))
    assert thresholds[0] == 5.0
    # The target: NaN members are rejected at any threshold, even −∞ (accept every scored record).
    scores = np.r_[np.full(30, np.nan), np.zeros(10)]
    target_members = np.r_[np.ones(30, bool), np.zeros(10, bool)]
    point = calibrated_point(scores, target_members, np.zeros(40, int), np.array([-np.inf]))
    assert (point.tp, point.fp) == (0, 10) and point.precision == 0.0


def test_per_class_thresholds_are_chosen_within_each_class():
    # Class 0 records (columns 0, 1): 9 M, 8 M, 6 M, 5 N → FPR ≤ 0.2 gives threshold 6 (TPR 1).
    # Class 1 records (columns 2, 3): 7 N, 4 M, 1 N, 0 N → any threshold ≤ 7 has FPR ≥ 1/3: +∞.
    settings = CalibrationSettings(objective="fpr", fpr=0.2, per_class=True)
    thresholds = calibrated_thresholds(HOLDOUT, HOLDOUT_MEMBERS, LABELS, 0.5, 2, settings)
    assert thresholds[0] == 6.0 and thresholds[1] == math.inf
    point = calibrated_point(np.array([7.0, 5.0, 9.0, 8.0]), np.array([True, False, True, True]),
                             LABELS, thresholds)
    assert (point.tp, point.fp) == (1, 0)  # only record 0 (class 0, 7 ≥ 6)
    assert math.isnan(point.threshold)  # no single threshold to report


def test_calibrated_never_reads_the_targets_labels():
    rng = np.random.default_rng(0)
    holdout = rng.normal(size=(4, 200)) + rng.random((4, 200)) * 2
    holdout_members = rng.random((4, 200)) < 0.5
    labels = rng.integers(0, 3, 200)
    scores = rng.normal(size=200)
    members = rng.random(200) < 0.3
    for settings in (CalibrationSettings(), CalibrationSettings(objective="ppv", per_class=True)):
        thresholds = calibrated_thresholds(holdout, holdout_members, labels, 0.3, 3, settings)
        true = apply_policy("calibrated", scores, members, labels, thresholds)
        shuffled = apply_policy("calibrated", scores, rng.permutation(members), labels, thresholds)
        # Same decisions whatever the target's membership: only the counting changes.
        assert true.accepted_fraction == shuffled.accepted_fraction
        assert true.tp + true.fp == shuffled.tp + shuffled.fp
    # The oracle, by contrast, moves its threshold with the labels.
    oracle = [apply_policy("quantile_max", scores, m, labels, None).threshold
              for m in (members, rng.permutation(members), rng.permutation(members))]
    assert len(set(oracle)) > 1


def test_calibrated_needs_thresholds():
    with pytest.raises(ValueError, match="holdout"):
        apply_policy("calibrated", np.ones(3), np.ones(3, bool), np.zeros(3, int), None)


def test_a_sweep_reports_both_policies_and_adding_an_attack_trains_nothing(
        ray_local, make_tiny_config, tmp_path):
    from sweeper.runner import run_sweep

    cfg = make_tiny_config(tmp_path)
    cfg.shadow.count = 4
    cfg.grid.epsilon = [math.inf]
    cfg.grid.attack = ["lira_online", "loss"]
    cfg.grid.policy = ["quantile_max", "calibrated"]
    cfg.calibration.fpr = 0.1
    first = run_sweep(cfg, progress=False)
    rows = first.results
    assert not first.failures and len(rows) == 2 * 2 * 2  # p × attack × policy
    calibrated = rows[rows.policy == "calibrated"]
    assert not calibrated.policy_uses_target_labels.any()
    assert rows[rows.policy == "quantile_max"].policy_uses_target_labels.all()
    # Each cell's advantage at its threshold and PPV at γ follow from its own rates; the
    # threshold-free advantage (the best threshold's) is never below it.
    for row in rows.to_dict("records"):
        assert row["advantage_at_threshold"] == pytest.approx(row["tpr"] - row["fpr"])
        assert row["advantage"] >= row["advantage_at_threshold"] - 1e-12
        gamma = (1 - row["p"]) / row["p"]
        if row["tpr"] > 0:
            assert row["ppv_at_gamma"] == pytest.approx(row["tpr"] / (row["tpr"] + gamma * row["fpr"]))
    # Adding an attack to the finished sweep scores it on the stored models: nothing is trained.
    cfg.grid.attack = ["lira_online", "loss", "lira_offline"]
    second = run_sweep(cfg, progress=False)
    assert second.models_trained == 0
    assert second.cells_computed == 2 * 2  # only the new attack's cells
    assert len(second.results) == 2 * 3 * 2
