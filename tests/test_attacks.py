"""Attack scores against small cases worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from jobs.attacks import AttackInputs, AttackSettings, always_member, lira_offline, lira_online, \
    logit_confidence, loss_threshold


def test_logit_confidence_is_log_odds_of_the_true_class():
    logits = np.array([[2.0, 0.0, -1.0], [0.0, 0.0, 0.0]])
    labels = np.array([0, 2])
    # Row 0: p_y = e^2 / (e^2 + 1 + e^-1); log(p/(1-p)) = 2 - log(1 + e^-1).
    # Row 1: p_y = 1/3; log((1/3)/(2/3)) = -log 2.
    expected = [2 - math.log(1 + math.exp(-1)), -math.log(2)]
    assert logit_confidence(logits, labels) == pytest.approx(expected)


def test_logit_confidence_is_stable_for_huge_logits():
    phi = logit_confidence(np.array([[1000.0, 0.0], [0.0, 1000.0]]), np.array([0, 0]))
    assert phi == pytest.approx([1000.0, -1000.0])


def test_loss_threshold_is_clamped_log_probability():
    logits = np.array([[math.log(3.0), 0.0], [0.0, 100.0]])
    # Row 0: p_y = 3/4 → score log(3/4). Row 1: p_y ≈ e^-100 < 1e-6 → clamped to log(1e-6).
    scores = loss_threshold(AttackInputs(logits, np.array([0, 0])), AttackSettings())
    assert scores == pytest.approx([math.log(0.75), math.log(1e-6)])


def shadows_for(phi_in: list[float], phi_out: list[float]):
    """Two-class logits whose φ (label 0) are the given numbers: logits (φ, 0)."""
    values = phi_in + phi_out
    logits = np.array([[[v, 0.0]] for v in values])  # (shadows, 1 record, 2 classes)
    members = np.array([[True]] * len(phi_in) + [[False]] * len(phi_out))
    return logits, members


def test_lira_online_per_record_matches_the_gaussian_likelihood_ratio():
    # IN φ: 3, 5 → μ=4, σ=√2 (n−1); OUT φ: 0, 2 → μ=1, σ=√2. Target φ = 4.
    # log N(4;4,√2) − log N(4;1,√2) = 0 − (−(3²)/(2·2)) = 9/4.
    logits, members = shadows_for([3.0, 5.0], [0.0, 2.0])
    inputs = AttackInputs(np.array([[4.0, 0.0]]), np.array([0]), logits, members)
    score = lira_online(inputs, AttackSettings(lira_variance="per_record"))
    assert score == pytest.approx([9 / 4])


def test_lira_offline_is_the_standardized_distance_from_out():
    logits, members = shadows_for([3.0, 5.0], [0.0, 2.0])
    inputs = AttackInputs(np.array([[4.0, 0.0]]), np.array([0]), logits, members)
    # (4 − 1) / √2
    assert lira_offline(inputs, AttackSettings(lira_variance="per_record")) == pytest.approx([3 / math.sqrt(2)])


def test_lira_global_variance_pools_residuals_over_records():
    # Record A: OUT φ 0, 2 (mean 1); record B: OUT φ 10, 14 (mean 12). Residuals ±1, ±2:
    # pooled variance = (1+1+4+4)/(4−1) = 10/3.
    out_logits = np.array([[[0.0, 0.0], [10.0, 0.0]], [[2.0, 0.0], [14.0, 0.0]]])
    in_logits = out_logits + 100  # IN shadows irrelevant to the offline score
    logits = np.concatenate([out_logits, in_logits])
    members = np.array([[False, False], [False, False], [True, True], [True, True]])
    target = np.array([[3.0, 0.0], [12.0, 0.0]])
    inputs = AttackInputs(target, np.array([0, 0]), logits, members)
    scores = lira_offline(inputs, AttackSettings(lira_variance="global"))
    assert scores == pytest.approx([2 / math.sqrt(10 / 3), 0.0])


def test_lira_ranks_members_first_on_separable_shadows():
    rng = np.random.default_rng(0)
    n, shadows = 200, 16
    members = np.zeros((shadows, n), dtype=bool)
    members[::2] = rng.random(n) < 0.5
    members[1::2] = ~members[::2]
    phi = rng.normal(0, 1, (shadows, n)) + 3 * members
    logits = np.stack([phi, np.zeros_like(phi)], axis=-1)
    target_members = rng.random(n) < 0.5
    target = np.stack([rng.normal(0, 1, n) + 3 * target_members, np.zeros(n)], axis=-1)
    inputs = AttackInputs(target, np.zeros(n, dtype=int), logits, members)
    for variance in ("global", "per_record"):
        scores = lira_online(inputs, AttackSettings(lira_variance=variance))
        top = np.argsort(-scores)[: target_members.sum() // 2]
        assert target_members[top].mean() > 0.9


def test_always_member_scores_everyone_alike():
    scores = always_member(AttackInputs(np.zeros((5, 3)), np.zeros(5, dtype=int)), AttackSettings())
    assert len(set(scores)) == 1 and len(scores) == 5
