"""QMIA, BASE and low-cost RMIA against their authors' rules, re-implemented here (read, not copied).

* QMIA (amazon-science/quantile-mia, image_QMIA/train_utils.py and analysis_utils.py): the score
  is the hinge z_y − max_{y'≠y} z_{y'} (`label_logit_and_hinge_scoring_fn`), the regressor
  minimises relu(t − s)·q + relu(s − t)·(1 − q) (`pinball_loss_fn`), and "member" is
  score ≥ threshold (`get_rates`).
* BASE (MarcusLassila/MIA-audit-GNN, src/attacks.py, class BASE): the logistic of
  log p_y(θ) − c·(logsumexp_j log p_y(θ_j) − log K); offline over each record's OUT references.
* Low-cost RMIA (privacytrustlab/ml_privacy_meter, attacks.py): `get_rmia_out_signals` keeps the
  first 2k models other than the target and its pair and, per record, its k OUT signals;
  `run_rmia` scores the share of z with ratio(x)/ratio(z) > 1 under
  Pr = ½((1 + a)·mean_OUT + (1 − a)); `tune_offline_a` picks the a of 0, 0.1, …, 1 under which
  the target's pair is best attacked (AUC, first maximum) with one reference.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy.special import expit, log_softmax, logsumexp, softmax
from sklearn.metrics import auc, roc_curve

from jobs.attacks.bayes_optimal import base_scores
from jobs.attacks.contract import ATTACKS, AttackInputs
from jobs.attacks.qmia import QUERY_KIND, fit_quantile_regressor, hinge_score, pinball_loss
from jobs.attacks.rmia import relative_scores, search_offline_a, true_class_probability
from jobs.attacks.section import AttackSettings
from jobs.metrics import roc_auc
from sweeper.config import SweepConfig
from sweeper.grid.plan import build_plan

RNG = np.random.default_rng(52)


def own(attack: str, **changes):
    return ATTACKS[attack].settings_from(AttackSettings(**changes))


def complementary_masks(pairs: int, n: int) -> np.ndarray:
    halves = RNG.random((pairs, n)) < 0.5
    return np.stack([mask for half in halves for mask in (half, ~half)])


# --- QMIA -------------------------------------------------------------------------------------

def authors_hinge(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    onehot = np.eye(logits.shape[1], dtype=bool)[labels]
    return logits[onehot] - logits[~onehot].reshape(len(labels), -1).max(axis=1)


def authors_pinball(score: np.ndarray, target: np.ndarray, quantile: float) -> np.ndarray:
    delta = target.reshape(-1, 1) - score
    return np.maximum(delta, 0) * quantile + np.maximum(-delta, 0) * (1 - quantile)


def test_qmia_score_and_loss_are_the_authors():
    logits, labels = RNG.normal(size=(300, 10)) * 4, RNG.integers(0, 10, 300)
    np.testing.assert_allclose(hinge_score(logits, labels), authors_hinge(logits, labels), atol=1e-6)
    target, predicted = RNG.normal(size=300), RNG.normal(size=(300, 1))
    np.testing.assert_allclose(pinball_loss(target, predicted[:, 0], 0.95),
                               authors_pinball(predicted, target, 0.95)[:, 0], atol=1e-12)


def test_qmia_regressor_without_features_predicts_the_pinball_minimiser():
    """With nothing to tell records apart, the regressor's one threshold is the value that
    minimises the authors' pinball loss over the public scores: their empirical quantile."""
    scores = RNG.normal(size=201)
    for level in (0.5, 0.9, 0.99):
        predicted = fit_quantile_regressor(np.zeros((201, 1), np.float32), scores, level, 5).predict(
            np.zeros((1, 1), np.float32))[0]
        candidates = np.sort(scores)
        losses = authors_pinball(candidates[None, :], scores, level).mean(axis=0)
        assert predicted == pytest.approx(candidates[np.argmin(losses)], abs=1e-6), level


def qmia_inputs(difficulty: np.ndarray, member: np.ndarray, public_difficulty: np.ndarray):
    """Two-class records whose non-member hinge is centred at 6·difficulty (the feature the
    regressor sees) and whose members score 1.5 higher; the public records are non-members."""
    def logits(d: np.ndarray, bump: np.ndarray) -> np.ndarray:
        hinge = 6 * d + bump + RNG.normal(size=len(d))
        return np.stack([hinge, np.zeros(len(d))], axis=1)

    def answered(d: np.ndarray, bump: np.ndarray) -> np.ndarray:
        return np.hstack([logits(d, bump), d[:, None]])[None]  # logits, then the input
    evaluated = answered(difficulty, 1.5 * member)
    public = answered(public_difficulty, np.zeros(len(public_difficulty)))
    return AttackInputs(evaluated[0, :, :2], np.zeros(len(difficulty), np.int64),
                        target_query=evaluated, population_logits=public,
                        population_labels=np.zeros(len(public_difficulty), np.int64))


def test_qmia_thresholds_each_record_by_its_difficulty():
    """Easy and hard records mixed: one global threshold (the raw hinge) confuses hard
    non-members with easy members; the per-record quantile does not.  A regressor that ignored
    the record (its features zeroed: the planted bug) falls back to the raw hinge's AUC."""
    difficulty, member = RNG.integers(0, 2, 2000).astype(float), RNG.random(2000) < 0.5
    inputs = qmia_inputs(difficulty, member, RNG.integers(0, 2, 2000).astype(float))
    qmia = ATTACKS["qmia"]
    scores = qmia.score(inputs, own("qmia"))
    raw = roc_auc(hinge_score(inputs.target_logits, inputs.labels), member)
    assert roc_auc(scores, member) > raw + 0.15
    # The paper's decision at threshold 0: about α of the non-members are called members.
    assert abs((scores[~member] >= 0).mean() - 0.05) < 0.03
    blind = AttackInputs(inputs.target_logits, inputs.labels,
                         target_query=inputs.target_query * np.array([1, 1, 0]),
                         population_logits=inputs.population_logits * np.array([1, 1, 0]),
                         population_labels=inputs.population_labels)
    assert roc_auc(qmia.score(blind, own("qmia")), member) == pytest.approx(raw, abs=0.02)


def test_qmia_needs_public_records_and_no_shadows():
    qmia = ATTACKS["qmia"]
    assert not qmia.needs_shadows and qmia.query(own("qmia")) == (QUERY_KIND, {"held_out": 5000})
    with pytest.raises(ValueError, match="public non-members"):
        qmia.score(AttackInputs(np.zeros((3, 2)), np.zeros(3, np.int64)), own("qmia"))


# --- BASE -------------------------------------------------------------------------------------

def authors_base(target: np.ndarray, shadows: np.ndarray, members: np.ndarray, labels: np.ndarray,
                 offline: bool, scale: float) -> np.ndarray:
    records = np.arange(len(labels))
    log_conf = log_softmax(target, axis=1)[records, labels]
    log_conf_shadow = np.stack([log_softmax(s, axis=1)[records, labels] for s in shadows]).T
    if offline:  # each record's OUT references, half of them with complementary pairs
        log_conf_shadow = log_conf_shadow[~members.T].reshape(-1, len(shadows) // 2)
    threshold = logsumexp(log_conf_shadow, axis=1) - np.log(log_conf_shadow.shape[1])
    return expit(log_conf - scale * threshold)


@pytest.mark.parametrize("offline", [False, True])
@pytest.mark.parametrize("scale", [1.0, 0.7])
def test_base_is_the_authors_rule(offline, scale):
    n, classes = 400, 10
    target, shadows = RNG.normal(size=(n, classes)) * 3, RNG.normal(size=(8, n, classes)) * 3
    labels, members = RNG.integers(0, classes, n), complementary_masks(4, n)
    inputs = AttackInputs(target, labels, shadows, members)
    ours = ATTACKS["base"].score(inputs, own("base", base_offline=offline, base_threshold_scale=scale))
    np.testing.assert_allclose(expit(ours), authors_base(target, shadows, members, labels, offline, scale),
                               atol=1e-6)
    assert not np.allclose(ours, base_scores(target, shadows, members, labels, not offline, scale))


def test_base_ranks_as_rmia_does_at_the_papers_setting():
    """The paper's equivalence: with c = 1, T = 1, no trimming, RMIA's score is the share of z
    below BASE's ratio, a monotone function of it."""
    n, classes = 300, 10
    target, shadows = RNG.normal(size=(n, classes)) * 3, RNG.normal(size=(4, n, classes)) * 3
    z_target, z_shadows = RNG.normal(size=(1, 200, classes)) * 3, RNG.normal(size=(4, 1, 200, classes)) * 3
    labels, z_labels = RNG.integers(0, classes, n), RNG.integers(0, classes, 200)
    inputs = AttackInputs(target, labels, shadows, complementary_masks(2, n),
                          population_logits=z_target, population_labels=z_labels,
                          shadow_population_logits=z_shadows)
    rmia = ATTACKS["rmia"].score(inputs, own("rmia", rmia_temperature=1.0, rmia_trim=0.0))
    base = ATTACKS["base"].score(inputs, own("base"))
    ratio_z = (true_class_probability(z_target[0], z_labels, 1.0)
               / true_class_probability(z_shadows[:, 0], z_labels, 1.0).mean(axis=0))
    np.testing.assert_allclose(rmia, relative_scores(np.exp(base), ratio_z, 1.0), atol=1e-12)


# --- low-cost RMIA ----------------------------------------------------------------------------

def authors_run_rmia(target_idx, all_signals, population_signals, all_memberships, k, a):
    paired = target_idx + 1 if target_idx % 2 == 0 else target_idx - 1

    def out_signals(signals, memberships):
        columns = [i for i in range(signals.shape[1]) if i not in (target_idx, paired)][:2 * k]
        kept = signals[:, columns] * ~memberships[:, columns]
        return -np.sort(-kept, axis=1)[:, :k]
    mean_x = (1 + a) / 2 * out_signals(all_signals, all_memberships).mean(axis=1) + (1 - a) / 2
    ratio_x = all_signals[:, target_idx] / mean_x
    mean_z = ((1 + a) / 2 * out_signals(population_signals, np.zeros_like(population_signals, bool))
              .mean(axis=1) + (1 - a) / 2)
    ratio_z = population_signals[:, target_idx] / mean_z
    return ((ratio_x[:, None] / ratio_z) > 1.0).mean(axis=1)


def authors_tune_a(target_idx, all_signals, population_signals, all_memberships):
    paired = target_idx + 1 if target_idx % 2 == 0 else target_idx - 1
    best, best_auc = 0.0, 0.0
    for a in np.arange(0, 1.1, 0.1):
        scores = authors_run_rmia(paired, all_signals, population_signals, all_memberships, 1, a)
        false, true, _ = roc_curve(all_memberships[:, paired], scores)
        if auc(false, true) > best_auc:
            best, best_auc = a, auc(false, true)
    return best


@pytest.mark.parametrize("references", [1, 2])
def test_low_cost_rmia_is_ml_privacy_meters_rule(references):
    """The authors' models in their order: [target, its pair, shadow 0, shadow 1, …]; the
    target's pair is never read, so it is random here.

    One difference, chosen (docs/attacks.md): for z, which every reference lacks, their sort
    keeps the k *largest* of the 2k OUT signals; we average all 2k, as the paper's Pr(z) over
    OUT models reads.  So the references agree on z here, where both rules give one value."""
    n, m, classes, temperature = 300, 150, 10, 2.0
    shadows = RNG.normal(size=(6, n, classes)) * 3
    z_shadows = np.repeat(RNG.normal(size=(1, 1, m, classes)) * 3, 6, axis=0)
    target, z_target = RNG.normal(size=(n, classes)) * 3, RNG.normal(size=(1, m, classes)) * 3
    labels, z_labels, members = RNG.integers(0, classes, n), RNG.integers(0, classes, m), complementary_masks(3, n)
    for shadow in range(0, 6, 2):  # a model fits its members better: a searched a depends on it
        shadows[shadow][members[shadow], labels[members[shadow]]] += 2
    inputs = AttackInputs(target, labels, shadows, members, population_logits=z_target,
                          population_labels=z_labels, shadow_population_logits=z_shadows)

    def signals(logits, y):
        return softmax(logits / temperature, axis=-1)[..., np.arange(len(y)), y]
    all_signals = np.stack([signals(target, labels), signals(RNG.normal(size=(n, classes)), labels),
                            *[signals(s, labels) for s in shadows]], axis=1)
    population = np.stack([signals(z_target[0], z_labels), signals(RNG.normal(size=(m, classes)), z_labels),
                           *[signals(s[0], z_labels) for s in z_shadows]], axis=1)
    memberships = np.concatenate([np.zeros((n, 2), bool), members.T], axis=1)
    settings = own("rmia_low_cost", rmia_references=references, rmia_offline_a=0.3)
    np.testing.assert_allclose(ATTACKS["rmia_low_cost"].score(inputs, settings),
                               authors_run_rmia(0, all_signals, population, memberships, references, 0.3),
                               atol=1e-6)
    # a searched: the authors attack their target's pair with the first other pair as its one
    # reference.  Their first other pair would be the target and its own pair, whose masks they
    # know; ours are not the attacker's to read, so the target is left out of their models here
    # and shadow 0 (their "pair" of shadow 1) is attacked with shadows 2 and 3.
    searched = search_offline_a(inputs, settings, references=slice(2, 4))
    assert searched == pytest.approx(authors_tune_a(1, all_signals[:, 2:], population[:, 2:],
                                                    memberships[:, 2:]), abs=1e-9)
    # Their z rule on references that disagree: the k largest, not the mean (the difference).
    apart = dataclasses.replace(inputs, shadow_population_logits=RNG.normal(size=(6, 1, m, classes)) * 3)
    assert not np.allclose(ATTACKS["rmia_low_cost"].score(apart, settings),
                           authors_run_rmia(0, all_signals, population, memberships, references, 0.3))


def test_low_cost_rmia_declares_the_shadows_it_reads():
    low_cost = ATTACKS["rmia_low_cost"]
    assert low_cost.fewest_shadows(own("rmia_low_cost", rmia_references=2, rmia_offline_a=0.3))[0] == 4
    assert low_cost.fewest_shadows(own("rmia_low_cost", rmia_references=1, rmia_offline_a=0.3))[0] == 2
    assert low_cost.fewest_shadows(own("rmia_low_cost", rmia_references=1, rmia_offline_a=None))[0] == 4


# --- the plan ---------------------------------------------------------------------------------

def test_a_sweep_of_shadow_free_attacks_trains_no_shadow():
    """Decided by each attack's declaration (`needs_shadows`), not by its name."""
    cfg = SweepConfig()
    cfg.grid.attack = ["qmia", "loss"]
    plan = build_plan(cfg)
    assert not [m for m in plan.models.values() if m.role == "shadow"]
    assert {c.attack for c in plan.cells} == {"qmia", "loss"}
    cfg.grid.attack = ["qmia", "base"]
    shadows = [m for m in build_plan(cfg).models.values() if m.role == "shadow"]
    assert len(shadows) == cfg.shadow.count * len(cfg.grid.epsilon)


def test_each_attack_says_how_many_shadows_it_reads():
    """What bench.attacks_priced prices: none, its reference pairs, or every shadow."""
    assert ATTACKS["qmia"].shadows_it_reads(own("qmia"), 16) == 0
    assert ATTACKS["base"].shadows_it_reads(own("base"), 16) == 16
    low_cost = ATTACKS["rmia_low_cost"]
    assert low_cost.shadows_it_reads(own("rmia_low_cost", rmia_references=2), 16) == 4
    assert low_cost.shadows_it_reads(own("rmia_low_cost", rmia_offline_a=None), 16) == 4
