"""RMIA against a case worked out by hand and against its authors' rule re-implemented here.

The authors' rule (privacytrustlab/ml_privacy_meter, research/2023_rmia/main.py, read, not
copied): signals p = softmax(logits / T) at the label; Pr(x) and Pr(z) are
`scipy.stats.trim_mean` over the reference models (offline: over each record's OUT models, then
½((1 + a)·mean + (1 − a))); the score is the row mean of the records × population matrix
[p(x|θ)/Pr(x)] · [Pr(z)/p(z|θ)] > γ.  `authors_rule` below forms that whole matrix, as they do.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.special import softmax
from scipy.stats import spearmanr, trim_mean

from jobs.attacks.contract import ATTACKS, AttackInputs, holdout_scores

import jobs.attacks.rmia
from jobs.attacks.rmia import (OFFLINE_A_GRID, search_offline_a, taylor_soft_margin, trimmed_mean,
                               true_class_probability, voted_scores)
from jobs.attacks.section import AttackSettings
from jobs.metrics import roc_auc
from sweeper.config import SweepConfig
from sweeper.checks.validation import find_problems


def own(attack: str, **changes):
    """The settings `attack` is handed: its own dataclass, from the config's `attack.*` defaults."""
    return ATTACKS[attack].settings_from(AttackSettings(**changes))


def logits_for(p: np.ndarray, temperature: float) -> np.ndarray:
    """Two-class logits whose softmax at `temperature` gives class 0 probability p: the log-odds
    times T in column 0, zero in column 1."""
    p = np.asarray(p, dtype=np.float64)
    return np.stack([temperature * np.log(p / (1 - p)), np.zeros_like(p)], axis=-1)


# The hand-worked case: 3 evaluation records x, 3 population records z, 2 complementary shadows.
T = 2.0
TARGET_X, TARGET_Z = [0.9, 0.5, 0.9], [0.6, 0.75, 0.2]
SHADOW_X = [[0.75, 0.5, 0.25], [0.25, 0.5, 0.25]]  # shadow 0, shadow 1 on x1, x2, x3
SHADOW_Z = [[0.5, 0.9, 0.75], [0.5, 0.9, 0.25]]
MEMBERS_X = np.array([[True, False, True], [False, True, False]])  # complementary pair
MEMBERS_Z = np.array([[False, True, False], [True, False, True]])


def hand_case() -> AttackInputs:
    return AttackInputs(
        logits_for(TARGET_X, T), np.zeros(3, int), logits_for(SHADOW_X, T), MEMBERS_X,
        population_logits=logits_for(TARGET_Z, T), population_labels=np.zeros(3, int),
        shadow_population_logits=logits_for(SHADOW_Z, T), shadow_population_members=MEMBERS_Z)


def test_online_rmia_on_a_case_worked_by_hand():
    # Pr(x) = mean of the two shadows: 0.5, 0.5, 0.25 → ratio(x) = 1.8, 1.0, 3.6.
    # Pr(z) = 0.5, 0.9, 0.5 → ratio(z) = 1.2, 0.8333, 0.4.
    # γ = 2: count z with ratio(z) < ratio(x)/2 = 0.9, 0.5, 1.8 → 2, 1, 3 of 3.
    scores = ATTACKS["rmia"].score(hand_case(), own("rmia", rmia_gamma=2.0, rmia_temperature=T))
    assert scores == pytest.approx([2 / 3, 1 / 3, 1.0])
    # γ = 1: ratio(z) < 1.8, 1.0, 3.6 → 3, 2, 3 of 3.
    scores = ATTACKS["rmia"].score(hand_case(), own("rmia", rmia_gamma=1.0, rmia_temperature=T))
    assert scores == pytest.approx([1.0, 2 / 3, 1.0])


def test_offline_rmia_on_a_case_worked_by_hand():
    # a = 0.5: Pr = 0.75·Pr_OUT + 0.25.  OUT shadow of x1, x2, x3 is shadow 1: Pr_OUT = 0.25, 0.5,
    # 0.25 → Pr(x) = 0.4375, 0.625, 0.4375 → ratio(x) = 2.0571, 0.8, 2.0571.
    # z1, z3 are OUT of shadow 0, z2 of shadow 1: Pr_OUT = 0.5, 0.9, 0.75 → Pr(z) = 0.625, 0.925,
    # 0.8125 → ratio(z) = 0.96, 0.8108, 0.2462.
    # γ = 2: ratio(z) < 1.0286, 0.4, 1.0286 → 3, 1, 3 of 3.
    settings = own("rmia_offline", rmia_gamma=2.0, rmia_temperature=T, rmia_offline_a=0.5)
    assert ATTACKS["rmia_offline"].score(hand_case(), settings) == pytest.approx([1.0, 1 / 3, 1.0])
    # a = 1: Pr = Pr_OUT, ratio(x) = 3.6, 1.0, 3.6; ratio(z) = 1.2, 0.8333, 0.2667.
    # γ = 2: ratio(z) < 1.8, 0.5, 1.8 → 3, 1, 3.
    settings = own("rmia_offline", rmia_gamma=2.0, rmia_temperature=T, rmia_offline_a=1.0)
    assert ATTACKS["rmia_offline"].score(hand_case(), settings) == pytest.approx([1.0, 1 / 3, 1.0])


def test_the_signal_is_the_tempered_softmax_of_the_label():
    logits = np.array([[2.0, 0.0, -1.0], [1000.0, 0.0, 0.0]])
    # Row 0 at T = 2: e^1 / (e^1 + 1 + e^-0.5); row 1: 1 up to e^-500.
    expected = [math.e / (math.e + 1 + math.exp(-0.5)), 1.0]
    assert true_class_probability(logits, np.array([0, 0]), 2.0) == pytest.approx(expected)
    # Far below the label: floored at the smallest normal float, never 0 (no 0/0 ratios).
    assert true_class_probability(np.array([[0.0, 2000.0]]), np.array([0]), 1.0)[0] > 0


def test_masked_trimmed_mean_is_scipys_over_each_records_references():
    rng = np.random.default_rng(3)
    values, use = rng.random((9, 40)), rng.random((9, 40)) < 0.6
    use[:2] = True
    for trim in (0.0, 0.1, 0.2, 0.34):
        expected = [trim_mean(values[use[:, j], j], trim) for j in range(40)]
        assert trimmed_mean(values, use, trim) == pytest.approx(expected)
        assert trimmed_mean(values, None, trim) == pytest.approx(trim_mean(values, trim, axis=0))


def authors_rule(inputs: AttackInputs, gamma: float, temperature: float, trim: float,
                 offline_a: float | None, ratios: bool = False):
    """The rule of research/2023_rmia/main.py, written out for this test (see the docstring)."""
    def signal(logits, labels):
        probs = softmax(np.asarray(logits, np.float64) / temperature, axis=-1)
        return np.take_along_axis(probs, labels[..., None], axis=-1)[..., 0]

    def marginal(ref_signals, members):
        if offline_a is None:
            return trim_mean(ref_signals, trim, axis=0)
        out = np.array([trim_mean(ref_signals[~members[:, j], j], trim)
                        for j in range(ref_signals.shape[1])])
        return (1 + offline_a) / 2 * out + (1 - offline_a) / 2

    labels_x = np.broadcast_to(inputs.labels, inputs.shadow_logits.shape[:2])
    labels_z = np.broadcast_to(inputs.population_labels, inputs.shadow_population_logits.shape[:2])
    ratio_x = signal(inputs.target_logits, inputs.labels) / marginal(
        signal(inputs.shadow_logits, labels_x), inputs.shadow_members)
    ratio_z_rev = marginal(signal(inputs.shadow_population_logits, labels_z),
                           inputs.shadow_population_members) / signal(inputs.population_logits,
                                                                      inputs.population_labels)
    if ratios:
        return ratio_x, 1 / ratio_z_rev
    return (np.outer(ratio_x, ratio_z_rev) > gamma).mean(axis=1)


def random_case(n=300, m=200, shadows=8, classes=10, seed=0) -> tuple[AttackInputs, np.ndarray]:
    """Inputs and the target's membership of the evaluation records: members are more confident
    by a margin over a record-specific hardness; complementary shadow pairs."""
    rng = np.random.default_rng(seed)
    labels, z_labels = rng.integers(0, classes, n), rng.integers(0, classes, m)
    hardness = rng.normal(0, 1.5, n + m)
    pairs = rng.random((shadows // 2, n + m)) < 0.5
    members = np.empty((shadows, n + m), bool)
    members[0::2], members[1::2] = pairs, ~pairs
    target = rng.random(n + m) < 0.5

    def logits(mask):
        out = rng.normal(0, 1, mask.shape + (classes,))
        true = 2.0 + hardness + 1.0 * mask + rng.normal(0, 0.3, mask.shape)
        np.put_along_axis(out, np.broadcast_to(np.concatenate([labels, z_labels]), mask.shape)[..., None],
                          true[..., None], axis=-1)
        return out

    t, s = logits(target), logits(members)
    return AttackInputs(t[:n], labels, s[:, :n], members[:, :n], population_logits=t[n:],
                        population_labels=z_labels, shadow_population_logits=s[:, n:],
                        shadow_population_members=members[:, n:]), target[:n]


@pytest.mark.parametrize("attack, offline_a", [("rmia", None), ("rmia_offline", 0.33),
                                               ("rmia_offline", 0.0)])
@pytest.mark.parametrize("gamma, trim", [(2.0, 0.2), (1.0, 0.0)])
def test_scores_equal_the_authors_rule_on_the_same_logits(attack, offline_a, gamma, trim):
    inputs, _ = random_case()
    changes = dict(rmia_gamma=gamma, rmia_temperature=2.0, rmia_trim=trim)
    if offline_a is not None:
        changes["rmia_offline_a"] = offline_a
    ours = ATTACKS[attack].score(inputs, own(attack, **changes))
    theirs = authors_rule(inputs, gamma, 2.0, trim, offline_a)
    assert spearmanr(ours, theirs).statistic == pytest.approx(1.0)
    np.testing.assert_allclose(ours, theirs, atol=1e-12)


def test_rmia_finds_members_and_takes_the_first_population_records():
    inputs, members = random_case(seed=1)
    for attack in ("rmia", "rmia_offline"):
        assert roc_auc(ATTACKS[attack].score(inputs, own(attack)), members) > 0.6
    few = ATTACKS["rmia"].score(inputs, own("rmia", rmia_population=50))
    assert set(np.unique(few * 50).round(9)) <= set(range(51))  # shares of 50 records


def test_searched_a_is_the_grid_value_that_best_attacks_the_first_shadow():
    inputs, _ = random_case(seed=2)
    settings = own("rmia_offline", rmia_offline_a=None)
    held_out = AttackInputs(
        inputs.shadow_logits[0], inputs.labels, inputs.shadow_logits[1:], inputs.shadow_members[1:],
        population_logits=inputs.shadow_population_logits[0], population_labels=inputs.population_labels,
        shadow_population_logits=inputs.shadow_population_logits[1:],
        shadow_population_members=inputs.shadow_population_members[1:])
    aucs = [roc_auc(ATTACKS["rmia_offline"].score(held_out, own("rmia_offline", rmia_offline_a=a)),
                    inputs.shadow_members[0]) for a in OFFLINE_A_GRID]
    best = search_offline_a(inputs, settings)
    assert aucs[OFFLINE_A_GRID.index(best)] == max(aucs)
    fixed = ATTACKS["rmia_offline"].score(inputs, own("rmia_offline", rmia_offline_a=best))
    assert np.array_equal(ATTACKS["rmia_offline"].score(inputs, settings), fixed)


def test_holdout_scores_give_each_shadow_its_own_population_logits():
    inputs, _ = random_case(shadows=4, seed=4)
    settings = own("rmia_offline")
    rows = holdout_scores(ATTACKS["rmia_offline"], inputs, settings)
    first = AttackInputs(
        inputs.shadow_logits[0], inputs.labels, inputs.shadow_logits[1:], inputs.shadow_members[1:],
        population_logits=inputs.shadow_population_logits[0], population_labels=inputs.population_labels,
        shadow_population_logits=inputs.shadow_population_logits[1:],
        shadow_population_members=inputs.shadow_population_members[1:])
    assert rows.shape == (4, 300)
    np.testing.assert_array_equal(rows[0], ATTACKS["rmia_offline"].score(first, settings))


def test_missing_population_or_out_shadows_is_one_clear_error():
    inputs = hand_case()
    bare = AttackInputs(inputs.target_logits, inputs.labels, inputs.shadow_logits, inputs.shadow_members)
    with pytest.raises(ValueError, match="population records"):
        ATTACKS["rmia"].score(bare, own("rmia"))
    all_in = AttackInputs(inputs.target_logits, inputs.labels, inputs.shadow_logits,
                          np.ones_like(MEMBERS_X), population_logits=inputs.population_logits,
                          population_labels=inputs.population_labels,
                          shadow_population_logits=inputs.shadow_population_logits,
                          shadow_population_members=MEMBERS_Z)
    with pytest.raises(ValueError, match="3 evaluation records have no OUT reference"):
        ATTACKS["rmia_offline"].score(all_in, own("rmia_offline"))


def test_config_checks_name_every_bad_rmia_setting():
    cfg = SweepConfig()
    cfg.attack.rmia_gamma, cfg.attack.rmia_temperature, cfg.attack.rmia_trim = 0.0, -1.0, 0.5
    cfg.attack.rmia_population, cfg.attack.rmia_offline_a = 0, 1.5
    found = " | ".join(find_problems(cfg))
    for key in ("rmia_gamma=0.0", "rmia_temperature=-1.0", "rmia_trim=0.5", "rmia_population=0",
                "rmia_offline_a=1.5"):
        assert f"attack.{key}" in found


def test_offline_a_search_needs_four_shadows():
    cfg = SweepConfig()
    cfg.grid.attack = ["rmia", "rmia_offline"]
    cfg.attack.rmia_offline_a, cfg.shadow.count = None, 2
    assert any("rmia_offline_a=null" in p for p in find_problems(cfg))


def authors_taylor_soft_margin(logits, label, temperature, margin, terms):
    """signals.py's 'taylor-soft-margin' for one record, term by term: get_taylor(v, n) is
    1 + v + Σ_{i=2}^{n-1} vⁱ/i!, applied to every tempered logit, and to the label's less m."""
    def taylor(v):
        return 1.0 + v + sum(v ** i / math.factorial(i) for i in range(2, terms))

    scaled = [value / temperature for value in logits]
    label_term = taylor(scaled[label] - margin)
    others = sum(taylor(v) for j, v in enumerate(scaled) if j != label)
    return label_term / (others + label_term)


TINY = np.finfo(np.float64).tiny


@pytest.mark.parametrize("margin, terms, temperature", [(0.6, 4, 2.0), (0.0, 6, 1.0), (1.5, 2, 3.0)])
def test_the_taylor_soft_margin_signal_is_the_authors_rule(margin, terms, temperature):
    rng = np.random.default_rng(5)
    logits, labels = rng.normal(0, 2, (3, 20, 5)), rng.integers(0, 5, 20)
    ours = taylor_soft_margin(logits, labels, temperature, margin, terms)
    theirs = np.array([[authors_taylor_soft_margin(list(logits[k, i]), labels[i], temperature,
                                                    margin, terms) for i in range(20)]
                       for k in range(3)])
    # Theirs where it is a probability; where their odd-degree series went negative, ours is
    # floored (the softmax signal's floor) rather than flipping the ratio's sign.
    np.testing.assert_allclose(ours, np.maximum(theirs, TINY), rtol=1e-12)
    if terms == 4:
        assert (theirs < 0).any() and (ours > 0).all()
    # Many terms and no margin: e^v itself, so the softmax.
    softmax_at_label = np.take_along_axis(softmax(logits, axis=-1),
                                          np.broadcast_to(labels, (3, 20))[..., None], axis=-1)[..., 0]
    np.testing.assert_allclose(taylor_soft_margin(logits, labels, 1.0, 0.0, 40), softmax_at_label,
                               rtol=1e-9)


def test_the_augmentation_vote_counts_a_z_where_most_views_agree():
    # 3 views, 1 record x, 2 population records.  ratio(x) per view: 4, 1, 4;
    # ratio(z1) = 1 in every view → LR = 4, 1, 4 > γ = 2 in 2 of 3 views: counted;
    # ratio(z2) = 3 in every view → LR = 1.33, 0.33, 1.33: in none.  Score ½.
    ratio_x, ratio_z = np.array([[4.0], [1.0], [4.0]]), np.array([[1.0, 3.0]] * 3)
    assert voted_scores(ratio_x, ratio_z, 2.0).tolist() == [0.5]
    # Two views, split 1–1: no strict majority, as torch.mode's tie (the smaller value, False).
    assert voted_scores(ratio_x[:2], ratio_z[:2], 2.0).tolist() == [0.0]


def authors_vote(ratio_x, ratio_z, gamma):
    """main.py's augmented branch: per view the (x, z) matrix ratio(x)·(1/ratio(z)) > γ, the
    mode over views (ties: False), the mean over z."""
    votes = np.stack([np.outer(ratio_x[k], 1 / ratio_z[k]) > gamma for k in range(len(ratio_x))])
    return (votes.sum(axis=0) > len(votes) / 2).mean(axis=1)


@pytest.mark.parametrize("views", [1, 3, 18])
def test_voted_scores_equal_the_authors_rule_in_blocks(views, monkeypatch):
    rng = np.random.default_rng(views)
    ratio_x, ratio_z = rng.lognormal(0, 1, (views, 300)), rng.lognormal(0, 1, (views, 70))
    monkeypatch.setattr(jobs.attacks.rmia, "VOTE_BLOCK", 70 * views * 7)  # blocks of 7 records
    np.testing.assert_allclose(voted_scores(ratio_x, ratio_z, 1.5),
                               authors_vote(ratio_x, ratio_z, 1.5), atol=1e-12)


def test_rmia_with_views_scores_each_view_then_votes():
    # The query's views of x and z: each view's own ratios (Pr(·) per view), then the vote.
    inputs, members = random_case(seed=6)
    rng = np.random.default_rng(6)
    jitter = rng.normal(0, 0.2, (3,) + inputs.target_logits.shape)
    views_x = inputs.target_logits[None] + jitter
    shadow_views_x = inputs.shadow_logits[:, None] + rng.normal(0, 0.2, (8, 3) + inputs.target_logits.shape)
    views_z = inputs.population_logits[None] + rng.normal(0, 0.2, (3,) + inputs.population_logits.shape)
    shadow_views_z = inputs.shadow_population_logits[:, None] + rng.normal(
        0, 0.2, (8, 3) + inputs.population_logits.shape)
    viewed = dataclasses.replace(inputs, target_query=views_x, shadow_query=shadow_views_x,
                                 population_logits=views_z, shadow_population_logits=shadow_views_z)
    settings = own("rmia", augment_flip=True)
    per_view = [authors_rule(dataclasses.replace(
        inputs, target_logits=views_x[k], shadow_logits=shadow_views_x[:, k],
        population_logits=views_z[k], shadow_population_logits=shadow_views_z[:, k]),
        settings.rmia_gamma, settings.rmia_temperature, settings.rmia_trim, None, ratios=True)
        for k in range(3)]
    expected = authors_vote(np.stack([r[0] for r in per_view]), np.stack([r[1] for r in per_view]),
                            settings.rmia_gamma)
    np.testing.assert_allclose(ATTACKS["rmia"].score(viewed, settings), expected, atol=1e-12)
    assert roc_auc(expected, members) > 0.6


def test_rmia_in_a_sweep_takes_its_population_from_the_held_out_split(ray_local, make_tiny_config,
                                                                     tmp_path):
    # z are test records, which no model of any sweep trains on; each model answers for the
    # evaluation records and then min(rmia_population, test_size) held-out records.
    import torch

    from jobs.datasets import load_dataset
    from jobs.engine.training import predict_logits
    from jobs.models import build_model
    from sweeper.grid.plan import build_plan
    from sweeper.runner import run_sweep
    from sweeper.store.artifacts import ArtifactStore

    cfg = make_tiny_config(tmp_path)
    cfg.grid.epsilon, cfg.grid.p = [math.inf], [0.5]
    cfg.grid.attack = ["rmia", "rmia_offline", "loss"]
    cfg.attack.rmia_population = 150  # of the 200 held-out records
    cfg.train.epochs, cfg.attack.rmia_gamma = 6, 1.0  # a model that tells members apart a little
    result = run_sweep(cfg, progress=False)
    assert not result.failures and len(result.results) == 3
    plan = build_plan(cfg)
    assert len(plan.queries) == 1 + cfg.shadow.count  # one per model, shared by both RMIAs
    store = ArtifactStore(cfg.store.root)
    data = load_dataset(cfg.dataset.name, Path(cfg.dataset.data_dir), False, cfg.dataset.test_size)
    n = cfg.dataset.eval_records
    for key, query in plan.queries.items():
        answer = store.read_query(key)
        assert answer.shape == (1, n + 150, 10)
        spec = plan.models[query.model]
        model = build_model(spec.train.model, data.input_shape, data.num_classes)
        model.load_state_dict(store.read_state_dict(query.model))
        np.testing.assert_allclose(answer[0, n:], predict_logits(model, data.test_x[:150],
                                                                 torch.device("cpu")), atol=1e-5)
        np.testing.assert_allclose(answer[0, :n], store.read_model_outputs(query.model)[0][:n],
                                   atol=1e-4)
    auc = result.results.set_index("attack")["auc"]
    assert auc["rmia"] > 0.55 and auc["rmia_offline"] > 0.55, auc
    # With query augmentations every model answers each view of both sets, and RMIA votes.
    cfg.attack.augment_flip, cfg.grid.attack, cfg.name = True, ["rmia"], "tiny_voted"
    voted = run_sweep(cfg, progress=False)
    assert not voted.failures and voted.results["auc"].item() > 0.5
    for key in build_plan(cfg).queries:
        assert store.read_query(key).shape == (2, n + 150, 10)
