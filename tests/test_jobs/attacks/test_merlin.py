"""Merlin ratios on models whose loss surface is known exactly; Morgan thresholds by hand."""

from __future__ import annotations

import inspect
import math

import numpy as np
import pytest
import torch

from jobs.attacks.merlin import (ACCEPT_NOBODY, MorganThresholds, merlin_ratio, morgan_decisions,
                                 morgan_thresholds)


class Bowl(torch.nn.Module):
    """Two classes, logits (−K·‖x − centre‖², 0).  For label 0 the loss is
    log(1 + exp(K·‖x − centre‖²)): log 2 at the centre and strictly larger anywhere else."""

    def __init__(self, centre: torch.Tensor, k: float = 100.0):
        super().__init__()
        self.register_buffer("centre", centre)
        self.k = k

    def forward(self, x):
        distance = ((x - self.centre) ** 2).flatten(1).sum(dim=1)
        return torch.stack([-self.k * distance, torch.zeros_like(distance)], dim=1)


class Constant(torch.nn.Module):
    """Ignores its input: every query gets the same logits, so the same loss."""

    def __init__(self):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.tensor([0.3, -0.2, 0.1]))

    def forward(self, x):
        return self.bias.expand(len(x), 3)


class Step(torch.nn.Module):
    """Logits (0, 5·[|x₀| > r]): for label 0 the loss jumps up once the first coordinate
    leaves [−r, r], in absolute units, whatever the other coordinates are."""

    def __init__(self, r: float):
        super().__init__()
        self.r = r

    def forward(self, x):
        jump = 5.0 * (x[:, 0].abs() > self.r).float()
        return torch.stack([torch.zeros_like(jump), jump], dim=1)


def mlp(seed: int = 0, inputs: int = 12, classes: int = 3) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(inputs, 16), torch.nn.Tanh(),
                               torch.nn.Linear(16, classes))


def records(n: int = 20, shape=(12,), seed: int = 1):
    rng = np.random.default_rng(seed)
    return rng.random((n, *shape), dtype=np.float32), rng.integers(0, 3, n)


def test_a_record_at_a_strict_minimum_has_ratio_one():
    # Records with several input dims (1×4×4), each at the bowl's centre.  A perturbation δ ≠ 0
    # (probability 1) makes K·‖δ‖² > 0, so the loss rises: ratio 1.  Here ‖x‖ = 4 (sixteen
    # ones), δ has std 0.04 per coordinate, K·‖δ‖² ≈ 100·16·0.0016 ≈ 2.6 — far above rounding.
    centre = torch.ones(1, 4, 4)
    x = np.ones((3, 1, 4, 4), dtype=np.float32)
    ratios = merlin_ratio(Bowl(centre), x, np.zeros(3, dtype=np.int64), perturbations=50)
    assert ratios.tolist() == [1.0, 1.0, 1.0]


def test_a_model_that_ignores_its_input_never_raises_the_loss():
    # Perturbed and clean losses are equal, and equality is not an increase: ratio 0, not 1.
    x, y = records(5)
    assert merlin_ratio(Constant(), x, y).tolist() == [0.0] * 5


def test_a_linear_loss_rises_for_about_half_the_perturbations():
    # Logits (w·x, 0), label 0: loss log(1 + exp(−w·x)) falls as w·x grows, so it rises iff
    # w·δ < 0, which has probability 1/2 for symmetric noise.  T = 2000: sd 0.011, bound 5 sd.
    model = torch.nn.Linear(12, 2)
    with torch.no_grad():
        model.weight.copy_(torch.stack([torch.linspace(-1, 1, 12), torch.zeros(12)]))
        model.bias.zero_()
    x, _ = records(4)
    ratios = merlin_ratio(model, x, np.zeros(4, dtype=np.int64), perturbations=2000)
    assert np.all(np.abs(ratios - 0.5) < 0.056)


def test_merlin_loss_is_clamped_at_p_y_one_in_a_million_as_the_reference():
    # The authors' rule (bargavj/EvaluatingDPML): loss = −log max(p_y, 1e-6), counted when the
    # perturbed loss is strictly larger.  Logits (w·x, 30), label 0: p_y = 1/(1 + e^(30 − w·x))
    # with |w·x| ≤ 1.2 here, so p_y < e^-28.8 ≈ 3e-13 < 1e-6 for the record and every
    # perturbation: all losses are −log 1e-6, none is larger, the ratio is 0.  Unclamped the loss
    # is linear in w·δ and rises for about half of them (the test above).
    model = torch.nn.Linear(12, 2)
    with torch.no_grad():
        model.weight.copy_(torch.stack([torch.linspace(-0.1, 0.1, 12), torch.zeros(12)]))
        model.bias.copy_(torch.tensor([0.0, 30.0]))
    x, _ = records(4)
    y = np.zeros(4, dtype=np.int64)
    assert merlin_ratio(model, x, y, perturbations=200).tolist() == [0.0] * 4
    unclamped = merlin_ratio(model, x, y, perturbations=200, loss_clamp=1e-30)
    assert np.all(np.abs(unclamped - 0.5) < 0.18)
    with pytest.raises(ValueError, match="loss_clamp"):
        merlin_ratio(model, x, y, loss_clamp=0.0)


def test_same_seed_same_ratios_and_another_seed_other_ratios():
    model, (x, y) = mlp(), records(30)
    first = merlin_ratio(model, x, y, perturbations=40, seed=3)
    assert np.array_equal(first, merlin_ratio(model, x, y, perturbations=40, seed=3))
    # 30 records with ratios strictly inside (0, 1): another seed moves at least one of them.
    assert not np.array_equal(first, merlin_ratio(model, x, y, perturbations=40, seed=4))


def test_chunking_does_not_change_the_ratios():
    # Noise is drawn per record from a seed derived from (seed, record index).
    model, (x, y) = mlp(), records(13)
    whole = merlin_ratio(model, x, y, perturbations=30, batch_records=256)
    assert np.array_equal(whole, merlin_ratio(model, x, y, perturbations=30, batch_records=1))
    assert np.array_equal(whole, merlin_ratio(model, x, y, perturbations=30, batch_records=5))
    # A record's ratio does not depend on the records around it either (same index, same noise).
    assert merlin_ratio(model, x[:1], y[:1], perturbations=30)[0] == whole[0]


def test_noise_scales_with_the_record_norm():
    # Step model, r = 0.05; both records have x₀ = 0, so the loss rises iff |δ₀| > 0.05.
    # Record A = (0, 1): ‖x‖ = 1, δ₀ ~ N(0, 0.01²), P(|δ₀| > 0.05) = P(|z| > 5) ≈ 6e-7 → 0.
    # Record B = (0, 100): ‖x‖ = 100, δ₀ ~ N(0, 1), P(|z| > 0.05) ≈ 0.96.
    # Unscaled noise (std 0.01 for both) would give ≈ 0 for both.
    x = np.array([[0.0, 1.0], [0.0, 100.0]], dtype=np.float32)
    ratios = merlin_ratio(Step(0.05), x, np.zeros(2, dtype=np.int64), perturbations=500)
    assert ratios[0] == 0.0
    assert ratios[1] == pytest.approx(0.96, abs=0.05)


def test_scaling_inputs_by_a_power_of_two_changes_nothing():
    # f(x) = g(x / 64) on 64·x: the noise is 64 times larger too (64·σ‖x‖·z), so g sees
    # x + σ‖x‖·z exactly (powers of two scale floats without rounding): identical ratios.
    # σ = 0.3 puts the MLP's curvature into play; at σ = 0.01 it is nearly linear over the
    # noise, the rise depends only on δ's direction, and unscaled noise would pass as well.
    inner, (x, y) = mlp(2), records(10)

    class Shrunk(torch.nn.Module):
        def forward(self, v):
            return inner(v / 64.0)

    plain = merlin_ratio(inner, x, y, perturbations=50, sigma=0.3)
    assert np.array_equal(plain, merlin_ratio(Shrunk(), 64.0 * x, y, perturbations=50, sigma=0.3))


def test_dropout_is_off_during_the_attack_and_the_mode_is_restored():
    # In eval mode Dropout → MLP is the MLP alone, so the ratios must match.
    linear = mlp(3)
    with_dropout = torch.nn.Sequential(torch.nn.Dropout(0.5), linear)
    with_dropout.train()
    x, y = records(8)
    assert np.array_equal(merlin_ratio(linear, x, y, perturbations=40),
                          merlin_ratio(with_dropout, x, y, perturbations=40))
    assert with_dropout.training


# Hand-made holdout, two models × four records (loss, merlin ratio, member?):
#   model 0: m1 (0.10, 0.90, M)  m2 (0.20, 0.80, M)  n1 (0.01, 0.99, N)  n2 (0.25, 0.50, N)
#   model 1: m3 (0.30, 0.95, M)  m4 (2.00, 0.20, M)  n3 (0.50, 0.90, N)  n4 (1.00, 0.10, N)
LOSS = np.array([[0.10, 0.20, 0.01, 0.25], [0.30, 2.00, 0.50, 1.00]])
MERLIN = np.array([[0.90, 0.80, 0.99, 0.50], [0.95, 0.20, 0.90, 0.10]])
MEMBERS = np.array([[True, True, False, False], [True, True, False, False]])


def test_morgan_picks_the_purest_widest_box_by_hand():
    # FPR ≤ 0.01 with 4 non-members means no non-member at all, so every feasible box has
    # PPV 1; the tie goes to the most members.  m1, m2, m3 fit together:
    #   exclude n1 (loss 0.01, ratio 0.99): φ_L > 0.01, and φ_L ≤ 0.10 keeps m1 → φ_L = 0.10;
    #   exclude n2 (0.25, 0.50): φ_M > 0.50, and φ_M ≤ 0.80 keeps m2 → φ_M = 0.80;
    #   exclude n3 (0.50, 0.90): φ_U < 0.50, and φ_U ≥ 0.30 keeps m3 → φ_U = 0.30.
    # m4 (2.00, 0.20) would need φ_U ≥ 2 and φ_M ≤ 0.2, which lets n3 in.  TPR 3/4, FPR 0.
    chosen = morgan_thresholds(LOSS, MERLIN, MEMBERS, fpr=0.01)
    assert chosen == MorganThresholds(0.10, 0.30, 0.80)
    decided = morgan_decisions(LOSS, MERLIN, chosen)
    assert decided.tolist() == [[True, True, False, False], [True, False, False, False]]
    assert (decided & ~MEMBERS).sum() / (~MEMBERS).sum() <= 0.01  # the FPR limit, on the holdout


def test_morgan_maximizes_ppv_not_tpr():
    # FPR ≤ 0.25 would allow one non-member, but any box with one has PPV < 1 at p = 0.5,
    # so the pure box above still wins.  The prior rescales PPV but never changes the ranking.
    for prior in (0.1, 0.5, 0.9):
        assert morgan_thresholds(LOSS, MERLIN, MEMBERS, fpr=0.25, prior=prior) == \
            MorganThresholds(0.10, 0.30, 0.80)


def test_the_fpr_limit_binds_before_ppv():
    # All ratios 1.0 (so φ_M = 1.0); losses: 0.1 holds 10 members + 2 non-members, 0.2 holds
    # 1 member + 1 non-member, 5.0 holds 7 non-members (11 members, 10 non-members).
    #   [0.1, 0.1]: TPR 10/11, FPR 0.2, PPV (10/11)/(10/11 + 0.2) ≈ 0.82 (the best PPV);
    #   [0.2, 0.2]: TPR 1/11,  FPR 0.1, PPV (1/11)/(1/11 + 0.1) ≈ 0.48;
    #   [0.1, 0.2]: TPR 1,     FPR 0.3; anything reaching 5.0 has FPR ≥ 0.7.
    loss = np.array([0.1] * 12 + [0.2] * 2 + [5.0] * 7)
    members = np.array([True] * 10 + [False] * 2 + [True, False] + [False] * 7)
    merlin = np.ones(len(loss))
    assert morgan_thresholds(loss, merlin, members, fpr=0.2) == MorganThresholds(0.1, 0.1, 1.0)
    assert morgan_thresholds(loss, merlin, members, fpr=0.1) == MorganThresholds(0.2, 0.2, 1.0)
    assert morgan_thresholds(loss, merlin, members, fpr=0.05) == ACCEPT_NOBODY


def test_morgan_flattens_models_and_ignores_nans():
    # The same eight records laid out (1, 8), plus a NaN member and a NaN non-member, which no
    # box can accept: the choice is unchanged (TPR is now 3/5, still the best).
    loss = np.r_[LOSS.ravel(), np.nan, 0.2]
    merlin = np.r_[MERLIN.ravel(), 0.9, np.nan]
    members = np.r_[MEMBERS.ravel(), True, False]
    assert morgan_thresholds(loss[None], merlin[None], members[None]) == \
        MorganThresholds(0.10, 0.30, 0.80)


def test_morgan_accepts_nobody_when_no_box_meets_the_fpr():
    # Each member has a non-member twin with the same (loss, ratio): any box holding a member
    # holds its twin, so FPR ≥ 1/2 > 0.01.
    loss, merlin = np.array([0.1, 0.2, 0.1, 0.2]), np.array([0.9, 0.8, 0.9, 0.8])
    chosen = morgan_thresholds(loss, merlin, np.array([True, True, False, False]))
    assert chosen == ACCEPT_NOBODY
    extremes = np.array([-np.inf, 0.0, 0.1, 1e9, np.inf, np.nan])
    assert not morgan_decisions(extremes, np.ones(6), chosen).any()


def test_morgan_decisions_are_inclusive_and_nan_is_never_a_member():
    t = MorganThresholds(0.1, 0.3, 0.8)
    loss = np.array([0.1, 0.3, 0.2, 0.09, 0.31, 0.2, np.nan, 0.2])
    merlin = np.array([0.8, 0.8, 1.0, 0.9, 0.9, 0.79, 0.9, np.nan])
    assert morgan_decisions(loss, merlin, t).tolist() == [True, True, True] + [False] * 5


def test_morgan_respects_the_fpr_limit_on_a_large_holdout():
    # 4 models × 2500 records; members have lower loss and higher ratio on average.
    rng = np.random.default_rng(0)
    members = rng.random((4, 2500)) < 0.5
    loss = rng.exponential(np.where(members, 0.3, 1.0))
    merlin = rng.binomial(100, np.where(members, 0.6, 0.5)) / 100
    for limit in (0.001, 0.01, 0.1):
        chosen = morgan_thresholds(loss, merlin, members, fpr=limit)
        decided = morgan_decisions(loss, merlin, chosen)
        assert decided.any() and (decided & ~members).sum() / (~members).sum() <= limit


def test_the_functions_never_take_target_membership():
    assert list(inspect.signature(morgan_decisions).parameters) == ["loss", "merlin", "thresholds"]
    assert list(inspect.signature(merlin_ratio).parameters)[:3] == ["model", "x", "y"]
    assert "member" not in " ".join(inspect.signature(merlin_ratio).parameters)
    assert math.isinf(ACCEPT_NOBODY.lower) and ACCEPT_NOBODY.lower > ACCEPT_NOBODY.upper


def test_morgan_min_tpr_rules_out_boxes_that_find_too_few_members():
    # Holdout: one member alone at loss 0.1 (a pure box of one), three members and one
    # non-member at loss 0.5, merlin 1 for all.  Without support the pure one-record box
    # [0.1, 0.1] has PPV 1; asking for TPR ≥ 1/2 forces the box to take in loss 0.5 too.
    loss = np.array([0.1, 0.5, 0.5, 0.5, 0.5])
    ratio = np.ones(5)
    members = np.array([True, True, True, True, False])
    free = morgan_thresholds(loss, ratio, members, fpr=1.0)
    assert (free.lower, free.upper) == (0.1, 0.1)
    held = morgan_thresholds(loss, ratio, members, fpr=1.0, min_tpr=0.5)
    assert held.lower == 0.1 and held.upper == 0.5  # all four members, PPV 4/5
