"""Shokri et al. on synthetic logits whose membership signal is known by construction."""

from __future__ import annotations

import numpy as np
import pytest

from jobs.attacks.contract import AttackInputs, NoSettings
from jobs.attacks.shokri import shokri


def auc(scores: np.ndarray, member: np.ndarray) -> float:
    """Share of (member, non-member) pairs ranked correctly, ties counting half."""
    s_in, s_out = scores[member][:, None], scores[~member][None, :]
    return float(np.mean((s_in > s_out) + 0.5 * (s_in == s_out)))


def synthetic(seed: int, n: int, classes: int, shadows: int, shift, noise: float = 0.5):
    """Target + shadow logits: true-class logit 3, others 0, plus noise; `shift(logits, labels,
    member)` adds the membership effect in place. Every model draws its own p = 0.5 mask."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n)
    member = rng.random((shadows + 1, n)) < 0.5
    logits = rng.normal(0.0, noise, (shadows + 1, n, classes))
    logits[:, np.arange(n), labels] += 3.0
    shift(logits, labels, member)
    inputs = AttackInputs(logits[0], labels, shadow_logits=logits[1:], shadow_members=member[1:])
    return inputs, member[0]


def more_confident(logits, labels, member):
    n = len(labels)
    logits[:, np.arange(n), labels] += 1.5 * member


def test_members_more_confident_in_their_class_rank_above_non_members():
    inputs, member = synthetic(0, 2000, 10, 16, more_confident)
    assert auc(shokri(inputs, NoSettings()), member) >= 0.8


def test_no_membership_effect_gives_chance_ranking():
    inputs, member = synthetic(1, 4000, 10, 16, lambda *_: None)
    assert abs(auc(shokri(inputs, NoSettings()), member) - 0.5) < 0.05


def opposite_by_class(logits, labels, member):
    """Membership moves the class-2 logit: up for class 0 (members less confident in class 0),
    down for class 1 (members more confident in class 1). In the softmax vector both effects
    lie along the same direction with opposite signs, so no single linear classifier fits both."""
    n = len(labels)
    sign = np.where(labels == 0, 1.5, np.where(labels == 1, -1.5, 0.0))
    logits[:, np.arange(n), 2] += sign * member


def test_per_class_classifiers_rank_both_classes_when_effects_are_opposite():
    inputs, member = synthetic(2, 3000, 3, 16, opposite_by_class)
    labels = inputs.labels
    confidence = np.exp(inputs.target_logits - np.logaddexp.reduce(inputs.target_logits, axis=1,
                                                                   keepdims=True))
    p_true = confidence[np.arange(len(labels)), labels]
    # The data is what the test claims: class 0 members less, class 1 members more confident.
    assert p_true[(labels == 0) & member].mean() < p_true[(labels == 0) & ~member].mean()
    assert p_true[(labels == 1) & member].mean() > p_true[(labels == 1) & ~member].mean()

    scores = shokri(inputs, NoSettings())
    for y in (0, 1):
        assert auc(scores[labels == y], member[labels == y]) >= 0.8

    # One pooled classifier (every record given the same label) cannot rank both classes.
    pooled = shokri(AttackInputs(inputs.target_logits, np.zeros_like(labels),
                                 inputs.shadow_logits, inputs.shadow_members), NoSettings())
    assert min(auc(pooled[labels == y], member[labels == y]) for y in (0, 1)) < 0.6


def test_disjoint_shadow_data_trains_each_class_on_the_shadows_own_records():
    # Shadows answer on 2500 records of their own, the target on 3000 others (Jayaraman et al.'s
    # disjoint shadow data): the attack model of class y must learn from the shadow records
    # labelled y, the shadows' labels, and score the target's records of class y.  The effects
    # are opposite by class, so rows grouped by any other labels could not rank both classes.
    shadow_side, _ = synthetic(3, 2500, 3, 16, opposite_by_class)
    target_side, member = synthetic(4, 3000, 3, 0, opposite_by_class)
    inputs = AttackInputs(target_side.target_logits, target_side.labels,
                          shadow_logits=shadow_side.shadow_logits,
                          shadow_members=shadow_side.shadow_members,
                          shadow_labels=shadow_side.labels)
    scores = shokri(inputs, NoSettings())
    for y in (0, 1):
        of_class = target_side.labels == y
        assert auc(scores[of_class], member[of_class]) >= 0.8
    with pytest.raises(ValueError, match="shadows' labels"):
        shokri(AttackInputs(inputs.target_logits, inputs.labels, inputs.shadow_logits,
                            inputs.shadow_members, shadow_labels=inputs.labels), NoSettings())


def test_class_without_out_shadow_rows_falls_back_to_pooled_classifier():
    inputs, member = synthetic(3, 600, 3, 8, more_confident)
    shadow_members = inputs.shadow_members.copy()
    shadow_members[:, inputs.labels == 2] = True  # class 2: no OUT rows in any shadow
    inputs = AttackInputs(inputs.target_logits, inputs.labels, inputs.shadow_logits,
                          shadow_members)
    scores = shokri(inputs, NoSettings())
    assert np.isfinite(scores).all()
    # Class 2 is scored by the classifier trained on all rows (few enough that none are dropped).
    pooled = shokri(AttackInputs(inputs.target_logits, np.zeros_like(inputs.labels),
                                 inputs.shadow_logits, shadow_members), NoSettings())
    np.testing.assert_allclose(scores[inputs.labels == 2], pooled[inputs.labels == 2])
    assert not np.allclose(scores[inputs.labels == 0], pooled[inputs.labels == 0])


def test_no_out_rows_anywhere_raises():
    inputs, _ = synthetic(4, 100, 3, 4, more_confident)
    all_in = np.ones_like(inputs.shadow_members)
    with pytest.raises(ValueError, match="both IN and OUT"):
        shokri(AttackInputs(inputs.target_logits, inputs.labels, inputs.shadow_logits, all_in),
               NoSettings())


def test_same_inputs_give_identical_scores_even_when_rows_are_subsampled():
    # 2 classes × ~2000 records × 16 shadows: ~16 000 IN pairs per class, over the cap.
    inputs, _ = synthetic(5, 4000, 2, 16, more_confident)
    first = shokri(inputs, NoSettings())
    second = shokri(AttackInputs(inputs.target_logits.copy(), inputs.labels.copy(),
                                 inputs.shadow_logits.copy(), inputs.shadow_members.copy()),
                    NoSettings())
    np.testing.assert_array_equal(first, second)


@pytest.mark.parametrize("missing", ["shadow_logits", "shadow_members", "both"])
def test_missing_shadows_raise(missing):
    inputs, _ = synthetic(6, 50, 3, 2, more_confident)
    kept = {
        "shadow_logits": None if missing in ("shadow_logits", "both") else inputs.shadow_logits,
        "shadow_members": None if missing in ("shadow_members", "both") else inputs.shadow_members,
    }
    with pytest.raises(ValueError, match="needs shadow models"):
        shokri(AttackInputs(inputs.target_logits, inputs.labels, **kept), NoSettings())


def test_zero_shadow_models_raise():
    inputs, _ = synthetic(7, 50, 3, 2, more_confident)
    with pytest.raises(ValueError, match="at least one shadow model"):
        shokri(AttackInputs(inputs.target_logits, inputs.labels, inputs.shadow_logits[:0],
                            inputs.shadow_members[:0]), NoSettings())


def test_in_and_out_count_equally_whatever_the_shadow_inclusion_rate():
    # No membership effect, but shadows include class-0 records 90% and class-1 records 10% of
    # the time: unweighted, the log-odds would be ≈ ±log 9 and class alone would rank records.
    inputs, _ = synthetic(8, 2000, 2, 16, lambda *_: None)
    rate = np.where(inputs.labels == 0, 0.9, 0.1)
    shadow_members = np.random.default_rng(9).random(inputs.shadow_members.shape) < rate
    scores = shokri(AttackInputs(inputs.target_logits, inputs.labels, inputs.shadow_logits,
                                 shadow_members), NoSettings())
    for y in (0, 1):
        assert abs(scores[inputs.labels == y].mean()) < 0.2
