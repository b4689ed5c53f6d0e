"""Model queries: the augmentations by hand, LiRA over augmentations, and queries in a sweep."""

from __future__ import annotations

import math

import numpy as np
import pytest

from jobs.attacks.basic import loss_randomized

from jobs.attacks.contract import ATTACKS, AttackInputs

from jobs.attacks.lira import lira_online
from jobs.attacks.queries import image_augmentations
from jobs.attacks.section import AttackSettings


def own(attack: str, **changes):
    """The settings `attack` is handed: its own dataclass, from the config's `attack.*` defaults."""
    return ATTACKS[attack].settings_from(AttackSettings(**changes))


def test_augmentations_are_the_reference_grid_of_reflect_padded_shifts():
    # The rule of Carlini et al.'s inference script: pad height and width by `shift` in
    # "reflect" mode (the edge is not repeated), then cut every 3×3 window, row offset outer,
    # column offset inner, for the image and then its mirror.  By hand for shift 1:
    #   rows 0..2 = [0 1 2], [3 4 5], [6 7 8]; reflected rows: r1 r0 r1 r2 r1; in each row
    #   [a b c] → [b a b c b].  Padded: [4 3 4 5 4] / [1 0 1 2 1] / [4 3 4 5 4] / [7 6 7 8 7] /
    #   [4 3 4 5 4].
    image = np.arange(9.0).reshape(1, 1, 3, 3)
    views = image_augmentations(image, flip=True, shift=1)
    assert len(views) == 2 * 3 * 3
    assert views[0].tolist() == [[[[4, 3, 4], [1, 0, 1], [4, 3, 4]]]]  # offset (0, 0)
    assert views[1].tolist() == [[[[3, 4, 5], [0, 1, 2], [3, 4, 5]]]]  # (0, 1): one row down
    assert views[4].tolist() == [[[[0, 1, 2], [3, 4, 5], [6, 7, 8]]]]  # (1, 1): the image
    assert views[5].tolist() == [[[[1, 2, 1], [4, 5, 4], [7, 8, 7]]]]  # (1, 2): one column left
    assert views[8].tolist() == [[[[4, 5, 4], [7, 8, 7], [4, 5, 4]]]]  # (2, 2)
    # The mirror [2 1 0] / [5 4 3] / [8 7 6], padded the same way; (0, 0) and its centre.
    assert views[9].tolist() == [[[[4, 5, 4], [1, 2, 1], [4, 5, 4]]]]
    assert views[13].tolist() == [[[[2, 1, 0], [5, 4, 3], [8, 7, 6]]]]
    # Diagonal shifts are there: (0, 2) moves the image down and to the left at once.
    assert views[2].tolist() == [[[[4, 5, 4], [1, 2, 1], [4, 5, 4]]]]
    assert len(image_augmentations(image, flip=False, shift=2)) == 25
    assert [v.tolist() for v in image_augmentations(image, flip=True, shift=0)] == \
        [image.tolist(), image[..., ::-1].tolist()]
    with pytest.raises(ValueError, match="channels, height, width"):
        image_augmentations(np.zeros((3, 4)), flip=True, shift=0)
    with pytest.raises(ValueError, match="shift 3"):
        image_augmentations(image, flip=False, shift=3)


def test_lira_over_augmentations_averages_the_per_augmentation_ratios():
    # One record, label 0, two classes: logits (φ, 0) give φ exactly.  Augmentation 0 repeats
    # the hand case of test_attacks (IN 3, 5; OUT 0, 2; target 4 → 9/4).  Augmentation 1:
    # IN 1, 3 (μ 2, σ √2), OUT 1, 3 (μ 2, σ √2), target 2 → ratio 0.  Mean: 9/8.
    def logits(values):
        return np.array([[[v, 0.0]] for v in values])

    shadow_query = np.stack([logits([3.0, 1.0]), logits([5.0, 3.0]), logits([0.0, 1.0]),
                             logits([2.0, 3.0])])  # (shadows, augmentations, 1, 2)
    members = np.array([[True], [True], [False], [False]])
    target_query = logits([4.0, 2.0])  # (augmentations, 1, 2)
    inputs = AttackInputs(target_query[0], np.array([0]), shadow_query[:, 0], members,
                          target_query=target_query, shadow_query=shadow_query)
    score = lira_online(inputs, own("lira_online", lira_variance="per_record"))
    assert score == pytest.approx([9 / 8])


def test_yeom_adversary_one_flips_coins_with_probability_one_minus_loss_over_b():
    # Loss of p_y = e^-1 is 1; with B = 4 the member probability is 3/4.  Over 40 000 records
    # the share of "member" decisions is 3/4 within 5 standard errors (√(3/16/40000) ≈ 0.0022).
    n = 40_000
    logits = np.tile([[0.0, math.log(math.e - 1.0)]], (n, 1))  # p_y = 1/(1 + e − 1) = 1/e
    decisions = loss_randomized(AttackInputs(logits, np.zeros(n, int)), own("loss_randomized", loss_bound=4.0))
    assert set(np.unique(decisions)) == {0.0, 1.0}
    assert abs(decisions.mean() - 0.75) < 5 * math.sqrt(0.75 * 0.25 / n)
    # A loss at or above B is never called a member; loss 0 always is.
    sure = np.array([[100.0, 0.0], [0.0, 100.0]])
    assert loss_randomized(AttackInputs(sure, np.array([0, 0])), own("loss_randomized", loss_bound=4.0)).tolist() == [1.0, 0.0]


def test_augmented_lira_in_a_sweep_queries_each_model_once(ray_local, make_tiny_config, tmp_path):
    from sweeper.grid.plan import build_plan
    from sweeper.runner import run_sweep
    from sweeper.store.artifacts import ArtifactStore

    cfg = make_tiny_config(tmp_path)
    cfg.grid.epsilon = [math.inf]
    cfg.grid.p = [0.5]
    cfg.grid.attack = ["lira_online", "lira_offline", "loss"]
    cfg.attack.augment_flip = True
    cfg.attack.augment_shift = 1
    result = run_sweep(cfg, progress=False)
    assert not result.failures and len(result.results) == 3
    plan = build_plan(cfg)
    # Both LiRA variants share one query per model (target + 2 shadows); loss asks none.
    assert len(plan.queries) == 3
    store = ArtifactStore(cfg.store.root)
    for key in plan.queries:
        assert store.read_query(key).shape == (2 * 3 * 3, cfg.dataset.eval_records, 10)
    # Augmentation settings change LiRA's scores key, not the loss attack's.
    plain = make_tiny_config(tmp_path)
    plain.grid.epsilon, plain.grid.p, plain.grid.attack = [math.inf], [0.5], ["lira_online", "loss"]
    keys = {spec.attack: key for key, spec in build_plan(plain).attacks.items()}
    augmented = {spec.attack: key for key, spec in plan.attacks.items()}
    assert keys["loss"] == augmented["loss"] and keys["lira_online"] != augmented["lira_online"]
