"""Attack scores against small cases worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from jobs.attacks.basic import always_member, loss_threshold
from jobs.attacks.contract import ATTACKS, AttackInputs, NoSettings
from jobs.attacks.lira import lira_offline, lira_online
from jobs.attacks.section import AttackSettings
from jobs.attacks.signals import logit_confidence


def own(attack: str, **changes):
    """The settings `attack` is handed: its own dataclass, from the config's `attack.*` defaults."""
    return ATTACKS[attack].settings_from(AttackSettings(**changes))


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
    scores = loss_threshold(AttackInputs(logits, np.array([0, 0])), own("loss"))
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
    score = lira_online(inputs, own("lira_online", lira_variance="per_record"))
    assert score == pytest.approx([9 / 4])


def standard_normal_log_cdf(z: float) -> float:
    return math.log(0.5 * math.erfc(-z / math.sqrt(2.0)))


def test_lira_offline_is_the_one_sided_test_against_out():
    logits, members = shadows_for([3.0, 5.0], [0.0, 2.0])
    inputs = AttackInputs(np.array([[4.0, 0.0]]), np.array([0]), logits, members)
    # z = (4 − 1) / √2; Carlini et al.'s one-sided score Φ(z), as a log; "zscore" gives z itself.
    z = 3 / math.sqrt(2)
    assert lira_offline(inputs, own("lira_offline", lira_variance="per_record")) == \
        pytest.approx([standard_normal_log_cdf(z)])
    assert lira_offline(inputs, own("lira_offline", lira_variance="per_record", lira_offline_combine="zscore")) == \
        pytest.approx([z])


def test_lira_per_record_variance_falls_back_to_the_global_one_below_two_shadows():
    # Four shadows, two records, label 0, logits (φ, 0).
    #   Record A: IN φ {3} (one shadow), OUT φ {0, 2, 4} (μ 2, σ² = (4 + 0 + 4)/2 = 4).
    #   Record B: IN φ {10, 14} (μ 12, σ² = 8), OUT φ {5, 7} (μ 6, σ² = 2).
    # A's IN side has one shadow: its σ is the global IN σ, residuals pooled over records and
    # divided by (IN count − 1): (0 + 4 + 4) / (3 − 1) = 4, σ = 2.
    # Target A φ 4: [−(1/2)(1/2)² − ln 2] − [−(1/2)(2/2)² − ln 2] = 1/2 − 1/8 = 3/8.
    # Target B φ 12: [−ln(2√2)] − [−(1/2)(6/√2)² − ln √2] = 9 − ln 2.
    phi = np.array([[3.0, 10.0], [0.0, 14.0], [2.0, 5.0], [4.0, 7.0]])
    members = np.array([[True, True], [False, True], [False, False], [False, False]])
    logits = np.stack([phi, np.zeros_like(phi)], axis=-1)
    inputs = AttackInputs(np.array([[4.0, 0.0], [12.0, 0.0]]), np.array([0, 0]), logits, members)
    scores = lira_online(inputs, own("lira_online", lira_variance="per_record"))
    assert scores == pytest.approx([3 / 8, 9 - math.log(2)])
    # The same for the OUT side: swap the roles, and A's single OUT shadow borrows the global σ.
    swapped = AttackInputs(inputs.target_logits, inputs.labels, logits, ~members)
    assert lira_offline(swapped, own("lira_offline", lira_variance="per_record", lira_offline_combine="zscore")) == \
        pytest.approx([(4 - 3) / 2, (12 - 12) / math.sqrt(8)])


def test_offline_lira_over_augmentations_averages_log_cdfs_or_z_scores():
    # One record, two augmentations.  Aug 0: OUT φ 0, 2 (μ 1, σ √2), target 4 → z = 3/√2.
    # Aug 1: OUT φ 1, 3 (μ 2, σ √2), target 2 → z = 0, log Φ(0) = −ln 2.
    def logits(values):
        return np.array([[[v, 0.0]] for v in values])

    shadow_query = np.stack([logits([9.0, 9.0]), logits([9.0, 9.0]), logits([0.0, 1.0]),
                             logits([2.0, 3.0])])  # (shadows, augmentations, 1, 2)
    members = np.array([[True], [True], [False], [False]])
    target_query = logits([4.0, 2.0])
    inputs = AttackInputs(target_query[0], np.array([0]), shadow_query[:, 0], members,
                          target_query=target_query, shadow_query=shadow_query)
    z = 3 / math.sqrt(2)
    log_cdf = lira_offline(inputs, own("lira_offline", lira_variance="per_record"))
    assert log_cdf == pytest.approx([(standard_normal_log_cdf(z) - math.log(2)) / 2])
    zscore = lira_offline(inputs, own("lira_offline", lira_variance="per_record", lira_offline_combine="zscore"))
    assert zscore == pytest.approx([z / 2])


def test_logit_confidence_matches_a_plain_formula_on_a_batch_of_shadows():
    # φ = logit_y − log Σ_{j≠y} exp(logit_j), written out in float64 with an explicit max
    # shift, on (shadows, augmentations, n, classes) logits with some huge margins.
    rng = np.random.default_rng(3)
    logits = rng.normal(0.0, 3.0, (5, 2, 400, 10)).astype(np.float32)
    labels = rng.integers(0, 10, 400)
    logits[..., :20, :] *= 100.0
    expected = np.empty(logits.shape[:-1])
    for index in np.ndindex(*logits.shape[:-1]):
        row = logits[index].astype(np.float64)
        y = labels[index[-1]]
        others = np.delete(row, y)
        top = others.max()
        expected[index] = row[y] - (top + math.log(np.exp(others - top).sum()))
    phi = logit_confidence(logits, labels)
    assert phi.shape == (5, 2, 400)
    assert np.allclose(phi, expected, rtol=1e-6, atol=4e-6)
    assert np.allclose(logit_confidence(logits[0, 0], labels), expected[0, 0], rtol=1e-6, atol=4e-6)


def test_lira_global_variance_pools_residuals_over_records():
    # Record A: OUT φ 0, 2 (mean 1); record B: OUT φ 10, 14 (mean 12). Residuals ±1, ±2:
    # pooled variance = (1+1+4+4)/(4−1) = 10/3.
    out_logits = np.array([[[0.0, 0.0], [10.0, 0.0]], [[2.0, 0.0], [14.0, 0.0]]])
    in_logits = out_logits + 100  # IN shadows irrelevant to the offline score
    logits = np.concatenate([out_logits, in_logits])
    members = np.array([[False, False], [False, False], [True, True], [True, True]])
    target = np.array([[3.0, 0.0], [12.0, 0.0]])
    inputs = AttackInputs(target, np.array([0, 0]), logits, members)
    scores = lira_offline(inputs, own("lira_offline", lira_variance="global", lira_offline_combine="zscore"))
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
        scores = lira_online(inputs, own("lira_online", lira_variance=variance))
        top = np.argsort(-scores)[: target_members.sum() // 2]
        assert target_members[top].mean() > 0.9


def test_always_member_scores_everyone_alike():
    scores = always_member(AttackInputs(np.zeros((5, 3)), np.zeros(5, dtype=int)), NoSettings())
    assert len(set(scores)) == 1 and len(scores) == 5


def test_holdout_scores_on_disjoint_shadow_data_use_the_shadows_own_labels():
    from jobs.attacks.contract import ATTACKS, holdout_scores
    # Two shadows answer on two records of their own, labelled 1 and 0; the target on one record
    # labelled 0.  Logits (ln 3, 0): p = 3/4 for label 0, 1/4 for label 1.  The loss attack's
    # holdout score is log p of each shadow record's own label: [log 1/4, log 3/4] per shadow.
    shadow_logits = np.tile([[math.log(3.0), 0.0]], (2, 2, 1))
    inputs = AttackInputs(np.array([[0.0, 0.0]]), np.array([0]), shadow_logits,
                          np.array([[True, False], [False, True]]), shadow_labels=np.array([1, 0]))
    expected = [math.log(0.25), math.log(0.75)]
    assert np.allclose(holdout_scores(ATTACKS["loss"], inputs, own("loss")), [expected] * 2)
    with pytest.raises(ValueError, match="disjoint shadow data"):
        lira_online(inputs, own("lira_online"))
