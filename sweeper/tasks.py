"""The bodies of the sweep's remote tasks: read inputs from the store, do the work, write back.

They are plain functions so tests can call them without Ray; `sweeper.runner` wraps them as
Ray tasks.  Only the driver writes results rows and MLflow runs; tasks write content-keyed
artifacts, which are safe to write twice.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import torch

from jobs.attacks import ATTACKS, AttackInputs, holdout_scores, yeom_loss_bound
from jobs.datasets import ArrayDataset
from jobs.mechanisms import Mechanism, MembershipRelease, describe, from_description, mechanism_for, \
    precision_at, release_membership
from jobs.metrics import OperatingPoint, clopper_pearson_lower, clopper_pearson_upper, max_advantage, \
    ppv, roc_auc, tpr_at_fpr
from jobs.models import MEMBERSHIP_MECHANISM, build_model
from jobs.pdtp import DTP_THRESHOLD, pdtp_table
from jobs.policies import POLICIES, CalibrationSettings, apply_policy, calibrated_thresholds
from jobs.queries import PDTP_QUERY, answer
from jobs.stacked import Member, train_models
from jobs.training import TrainedModel, draw_mask, resolve_device, train_model
from sweeper.bounds import epsilon_from_precision, epsilon_from_rates, precision_bound, \
    precision_lower_bound, tightest_bound
from sweeper.plan import AttackSpec, Cell, ModelSpec, QuerySpec
from sweeper.schema import RESULTS_SCHEMA_VERSION
from sweeper.store import ArtifactStore


def train_task(spec: ModelSpec, data: ArrayDataset, store_root: str, device: str,
               num_threads: int, compile_model: bool = False) -> dict[str, Any]:
    """Train the model `spec` describes (resuming from its checkpoint) and store it.

    `data` is the sweep's whole pool; the model draws from its own part (`DataSpec.pool_of`).
    """
    torch.set_num_threads(max(1, num_threads))
    store = ArtifactStore(store_root)
    key = spec.key
    if store.has_model(key):  # a retry after the artifact landed, or a concurrent duplicate
        return store.read_model_meta(key)
    data = spec.data.pool_of(data)
    mask = draw_mask(len(data.pool_y), spec.sample_rate, spec.mask_seed, spec.mask_complement)
    if spec.train.model == MEMBERSHIP_MECHANISM:
        mechanism = mechanism_for(spec.train.epsilon, spec.train.delta or 0.0)
        release = release_membership(mechanism, spec.train.epsilon, mask, seed=int(key[:8], 16))
        return _store_release(store, spec, mechanism, release, mask)
    trained = train_model(spec.train, data, mask, seed=int(key[:8], 16),
                          device=resolve_device(device), checkpoint=store.checkpoint(key),
                          noise_cache=store.noise_cache(), compile_model=compile_model)
    return _store_trained(store, spec, trained, mask)


def train_group_task(specs: list[ModelSpec], data: ArrayDataset, store_root: str, device: str,
                     num_threads: int, compile_model: bool = False) -> tuple[dict[str, Any], ...]:
    """Train several models of one group (`sweeper.plan.training_groups`: one architecture,
    recipe and pool) in this one task (`jobs.stacked.train_models`), storing each the moment
    it is done; returns each model's metadata, in the order of `specs`.

    Models already in the store are not trained again; the others each resume from their own
    checkpoint, so a retried group costs at most one epoch of each model.
    """
    torch.set_num_threads(max(1, num_threads))
    store = ArtifactStore(store_root)
    metas: dict[int, dict[str, Any]] = {index: store.read_model_meta(spec.key)
                                        for index, spec in enumerate(specs)
                                        if store.has_model(spec.key)}
    todo = [index for index in range(len(specs)) if index not in metas]
    if todo:
        first = specs[todo[0]]
        pool = first.data.pool_of(data)  # one group, one pool
        masks = {index: draw_mask(len(pool.pool_y), specs[index].sample_rate,
                                  specs[index].mask_seed, specs[index].mask_complement)
                 for index in todo}
        members = [Member(masks[index], int(specs[index].key[:8], 16),
                          store.checkpoint(specs[index].key)) for index in todo]
        for position, trained in train_models(first.train, pool, members, resolve_device(device),
                                              store.noise_cache(), compile_model):
            index = todo[position]
            metas[index] = _store_trained(store, specs[index], trained, masks[index])
    return tuple(metas[index] for index in range(len(specs)))


def _model_meta(spec: ModelSpec, **figures: Any) -> dict[str, Any]:
    """The metadata stored with a model (or a release): who it is, what it reports, its budget."""
    return {"key": spec.key, "role": spec.role, "label": spec.label, "sample_rate": spec.sample_rate,
            **figures, "epsilon": spec.train.epsilon, "delta": spec.train.delta}


def _store_trained(store: ArtifactStore, spec: ModelSpec, trained: TrainedModel,
                   mask: np.ndarray) -> dict[str, Any]:
    """Write one trained model with its metadata; return the metadata."""
    meta = _model_meta(
        spec, test_accuracy=trained.test_accuracy, train_accuracy=trained.train_accuracy,
        best_test_accuracy=trained.best_test_accuracy,
        noise_multiplier=trained.noise_multiplier, steps=trained.steps,
        epsilon_spent=trained.epsilon_spent, train_size=trained.train_size,
        resumed_from=list(trained.resumed_from))
    store.write_model(spec.key, trained.state_dict, trained.pool_logits, mask, meta)
    return meta


def _store_release(store: ArtifactStore, spec: ModelSpec, mechanism: Mechanism,
                   release: MembershipRelease, mask: np.ndarray) -> dict[str, Any]:
    """Write an exact mechanism's release where a model would go, so the attack tasks and the
    results rows read it like a network's outputs; return the metadata.

    It has no weights (an empty state dict), no test set (NaN accuracies) and took no steps; the
    description of the mechanism goes with it, for the closed forms (`exact_figures`).
    """
    meta = _model_meta(
        spec, mechanism=describe(mechanism), test_accuracy=math.nan, train_accuracy=math.nan,
        best_test_accuracy=math.nan, noise_multiplier=release.noise_multiplier, steps=0,
        epsilon_spent=release.epsilon, train_size=release.members, resumed_from=[])
    store.write_model(spec.key, {}, release.pool_logits, mask, meta)
    return meta


def query_task(spec: QuerySpec, model_spec: ModelSpec, data: ArrayDataset, store_root: str,
               device: str, num_threads: int) -> None:
    """Store a model's answer to one query: loaded from its weights, or (PDTP) retrained."""
    torch.set_num_threads(max(1, num_threads))
    store = ArtifactStore(store_root)
    if store.has_query(spec.key):
        return
    settings, n = dict(spec.settings), spec.eval_records
    data = model_spec.data.pool_of(data)
    if spec.kind == PDTP_QUERY:
        _, mask = store.read_model_outputs(spec.model)
        values = pdtp_table(model_spec.train, data, mask, settings["records"], settings["seeds"],
                            resolve_device(device))
    else:
        model = build_model(model_spec.train.model, data.input_shape, data.num_classes)
        model.load_state_dict(store.read_state_dict(spec.model))
        values = answer(spec.kind, settings, model, data.pool_x[:n], data.pool_y[:n],
                        resolve_device(device))
    store.write_query(spec.key, values)


def attack_task(spec: AttackSpec, cells: list[Cell], labels: np.ndarray,
                store_root: str) -> list[dict[str, Any]]:
    """Score one attack on one target, store per-record scores, and return its cells' rows."""
    store = ArtifactStore(store_root)
    n, start = spec.eval_records, spec.shadow_records_from
    shadow_labels = labels[start:start + n] if start else None  # disjoint shadows' own records
    labels = labels[:n]
    target_logits, target_mask = store.read_model_outputs(spec.target)
    members = target_mask[:n]
    shadow_logits = shadow_members = None
    if spec.shadows:
        outputs = [store.read_model_outputs(key) for key in spec.shadows]
        shadow_logits = np.stack([logits[:n] for logits, _ in outputs])
        shadow_members = np.stack([mask[:n] for _, mask in outputs])
    answers = [store.read_query(key) for key in spec.queries]
    inputs = AttackInputs(target_logits[:n], labels, shadow_logits, shadow_members,
                          target_query=answers[0] if answers else None,
                          shadow_query=np.stack(answers[1:]) if len(answers) > 1 else None,
                          shadow_labels=shadow_labels)
    attack = ATTACKS[spec.attack]
    settings = attack.settings_of(spec.settings)  # all it may read: its own settings, from its key
    scores = attack.score(inputs, settings)
    store.write_scores(spec.key, pd.DataFrame({
        "record_id": np.arange(n), "score": scores, "member": members,
        "model_key": spec.target, "attack": spec.attack,
    }))
    target_meta = store.read_model_meta(spec.target)
    if attack.measures_records:  # PDTP has no threshold, so no policy applies
        return [pdtp_row(cell, answers[0], target_meta) for cell in cells]
    holdout = (holdout_scores(attack, inputs, settings)
               if any(POLICIES[cell.policy].calibrates for cell in cells) else None)
    rows = []
    for cell in cells:
        thresholds = None
        if POLICIES[cell.policy].calibrates:  # chosen on the shadows: the target's mask is not passed
            thresholds = calibrated_thresholds(holdout, shadow_members, inputs.holdout_labels, cell.p,
                                               target_logits.shape[1],
                                               CalibrationSettings(**dict(cell.calibration)))
        point = apply_policy(cell.policy, scores, members, labels, thresholds)
        rows.append(cell_row(cell, point, scores, members, target_meta))
    return rows


def cell_row(cell: Cell, point: OperatingPoint, scores: np.ndarray, members: np.ndarray,
             target_meta: dict[str, Any]) -> dict[str, Any]:
    """Everything the frontier shows for one cell: measured precision next to the bound.

    `point` is the attack at the threshold the cell's policy chose; the threshold-free figures
    (TPR at low FPR, AUC, the advantage) come from all the scores.
    """
    floor, form = cell.tpr_floor, cell.bound_form
    bound = precision_bound(cell.epsilon, cell.p, cell.delta, floor, form=form)
    bound_at_tpr = precision_bound(cell.epsilon, cell.p, cell.delta, floored(point.tpr, floor),
                                   form=form)
    return {
        **cell.coordinates,
        "policy_uses_target_labels": POLICIES[cell.policy].uses_target_labels,
        "eval_records": int(len(members)),
        "members": int(members.sum()),
        "baseline": float(members.mean()),
        "precision": point.precision,
        "precision_ci_low": point.precision_ci_low,
        "precision_ci_high": point.precision_ci_high,
        "tp": int(point.tp),
        "fp": int(point.fp),
        "threshold": float(point.threshold),
        "accepted_fraction": float(point.accepted_fraction),
        "tpr": point.tpr,
        "fpr": point.fpr,
        "tpr_at_fpr_0.001": tpr_at_fpr(scores, members, 0.001),
        "tpr_at_fpr_0.01": tpr_at_fpr(scores, members, 0.01),
        "auc": roc_auc(scores, members),
        # Yeom et al.'s membership advantage (max over thresholds of TPR − FPR), the same at the
        # chosen threshold, and the precision the chosen rates give with γ = (1 − p)/p
        # non-members per member (Jayaraman et al.'s PPV).
        "advantage": max_advantage(scores, members),
        "advantage_at_threshold": point.tpr - point.fpr,
        # B of Adversary 1 (`loss_randomized`), which its Theorem 2 line divides by; NaN otherwise.
        "loss_bound": (yeom_loss_bound(ATTACKS[cell.attack].settings_of(cell.scores.settings))
                       if cell.attack == "loss_randomized" else math.nan),
        "gamma": (1.0 - cell.p) / cell.p,
        "ppv_at_gamma": ppv_at_gamma(point.tpr, point.fpr, (1.0 - cell.p) / cell.p),
        "tpr_floor": floor,
        "bound_form": form,
        "bound": float(bound),
        "bound_at_tpr": float(bound_at_tpr),
        "bound_lower": float(precision_lower_bound(cell.epsilon, cell.p)),
        "audit_alpha": cell.audit_alpha,
        "epsilon_audit": audit_from_precision(point, cell.p, cell.audit_alpha),
        "epsilon_audit_rates": audit_from_rates(point, cell.delta, cell.audit_alpha),
        **violation_test(point, cell),
        **exact_figures(target_meta, cell, point.threshold),
        **_model_columns(cell, target_meta),
    }


def pdtp_row(cell: Cell, table: np.ndarray, target_meta: dict[str, Any]) -> dict[str, Any]:
    """A PDTP cell: Long et al.'s figures over the measured records, no precision (NaN).

    Three estimates are reported: the single-model PDTP (one pair of models, seed 0); the
    seed-averaged one (PDTP of the seed-averaged probabilities), which alone estimates the
    training algorithm's output distribution and so relates to ε; and the paper's own, the mean
    over seeds of per-seed PDTP values (`*_seed_mean`), which keeps the seed noise in and is the
    one to compare with Long et al.'s figures.  `pdtp_query_key` names the stored per-record
    table (`jobs.pdtp.pdtp_table`) the PDTP report reads the paper's per-record values from.
    """
    single, averaged, seed_mean = table[:, 1], table[:, 2], table[:, 3]
    return {
        **cell.coordinates,
        "policy_uses_target_labels": False,
        "precision": math.nan, "precision_ci_low": math.nan, "precision_ci_high": math.nan,
        "tp": 0, "fp": 0, "violation": False,
        "pdtp_records": int(len(table)),
        "pdtp_mean_single": float(single.mean()),
        "pdtp_mean_averaged": float(averaged.mean()),
        "pdtp_max_averaged": float(averaged.max()),
        "dtp1_share_single": float((single > DTP_THRESHOLD).mean()),
        "dtp1_share_averaged": float((averaged > DTP_THRESHOLD).mean()),
        "pdtp_seed_mean": float(seed_mean.mean()),
        "dtp1_share_seed_mean": float((seed_mean > DTP_THRESHOLD).mean()),
        "pdtp_query_key": cell.scores.queries[0],
        "bound": float(precision_bound(cell.epsilon, cell.p, cell.delta, cell.tpr_floor,
                                       form=cell.bound_form)),
        **_model_columns(cell, target_meta),
    }


def _model_columns(cell: Cell, target_meta: dict[str, Any]) -> dict[str, Any]:
    """What every row says about its target model and its keys."""
    return {
        "test_accuracy": target_meta["test_accuracy"],
        "best_test_accuracy": target_meta["best_test_accuracy"],
        "train_accuracy": target_meta["train_accuracy"],
        "epsilon_spent": target_meta["epsilon_spent"],
        "noise_multiplier": target_meta["noise_multiplier"],
        "steps": target_meta["steps"],
        "train_size": target_meta["train_size"],
        "model_key": cell.scores.target,
        "scores_key": cell.scores.key,
        "cell_key": cell.key,
        "schema_version": RESULTS_SCHEMA_VERSION,
    }


def ppv_at_gamma(tpr: float, fpr: float, gamma: float) -> float:
    """The precision (`jobs.metrics.ppv`) of these rates when non-members outnumber members γ to 1."""
    return ppv(tpr, fpr, 1.0 / (1.0 + gamma))


def audit_from_precision(point: OperatingPoint, p: float, alpha: float) -> float:
    """The ε the precision proves (δ = 0) with confidence 1 − alpha, whichever threshold the
    policy picked: its one-sided exact lower end at alpha/candidates (Bonferroni over the
    thresholds searched), so chance makes it exceed the true ε in at most a fraction alpha of
    sweeps.  NaN when nobody was accepted."""
    low = clopper_pearson_lower(point.tp, point.tp + point.fp, alpha / point.candidates)
    return float(epsilon_from_precision(low, p))


def audit_from_rates(point: OperatingPoint, delta: float, alpha: float) -> float:
    """The ε the attack's (TPR, FPR) prove with confidence 1 − alpha: the TPR's lower and the
    FPR's upper one-sided exact ends, each at alpha/(2·candidates) (Bonferroni over the two ends
    and the thresholds searched); both terms of `epsilon_from_rates` only fall as the TPR falls
    and the FPR rises, so these ends make the claim hold.  NaN without members or non-members."""
    if point.members == 0 or point.non_members == 0:
        return math.nan
    return float(epsilon_from_rates(*rate_ends(point, alpha / (2 * point.candidates)), delta))


def rate_ends(point: OperatingPoint, alpha: float) -> tuple[float, float]:
    """The TPR's one-sided lower and the FPR's one-sided upper exact end, each at level alpha."""
    return (clopper_pearson_lower(point.tp, point.members, alpha),
            clopper_pearson_upper(point.fp, point.non_members, alpha))


def floored(tpr: float, floor: float) -> float:
    """The TPR the bound is taken at: at least the floor, and the floor when there is no TPR
    (an evaluation set without members)."""
    return floor if math.isnan(tpr) else max(tpr, floor)


#: `violation_reason` values: which test proved the claimed (ε, δ) wrong ("" when none did).
VIOLATION_REASONS = ("", "precision", "rates", "precision+rates")


def violation_test(point: OperatingPoint, cell: Cell) -> dict[str, Any]:
    """Do the data *prove*, at level `cell.violation_alpha`, that training was not (ε, δ)-DP?

    Two tests, either of which flags the cell (`violation_reason` says which fired; README, *What counts as a violation*):

    - precision: the precision's one-sided exact lower end against the bound at the TPR's lower
      end (a lower TPR only raises U, so this is the loosest bound the data allow);
    - rates: the ε that the TPR's lower and the FPR's upper one-sided ends prove
      (`epsilon_from_rates`, with the cell's δ) against the claimed ε.  It catches attacks the
      precision test cannot: at p = 0.5, ε = 1, TP 499 of 500 and FP 250 of 500 have precision
      0.666 < U = 0.731, yet 1 − FPR ≤ e^ε·(1 − TPR) + δ fails by far.

    A flag must mean a bug, so each test is a one-sided exact test, not the 95 % display
    interval, with each of its two ends at α/(2·candidates): Bonferroni over both ends and over
    every threshold the policy searched.  An attack that meets the guarantee exactly is then
    flagged by each test at most a fraction α of the time (2α for the two together).
    """
    alpha = cell.violation_alpha / (2 * point.candidates)
    precision_proven = clopper_pearson_lower(point.tp, point.tp + point.fp, alpha)
    tpr_low, fpr_high = rate_ends(point, alpha)
    bound_at_tpr_low = float(precision_bound(cell.epsilon, cell.p, cell.delta,
                                             floored(tpr_low, cell.tpr_floor), form=cell.bound_form))
    epsilon_proven = (math.nan if math.isnan(tpr_low) or math.isnan(fpr_high)
                      else float(epsilon_from_rates(tpr_low, fpr_high, cell.delta)))
    fired = [name for name, proven in (("precision", precision_proven > bound_at_tpr_low),
                                       ("rates", epsilon_proven > cell.epsilon)) if proven]
    return {
        "precision_proven": precision_proven,
        "bound_at_tpr_low": bound_at_tpr_low,
        "epsilon_proven_rates": epsilon_proven,
        "violation": bool(fired),
        "violation_reason": "+".join(fired),
    }


def exact_figures(target_meta: dict[str, Any], cell: Cell, threshold: float) -> dict[str, float]:
    """For a target whose privacy is known exactly (the bound's self-check), the closed form.

    `tpr_exact` and `precision_exact` are what the threshold attack has in expectation, `bound_tight` the
    least bound over the mechanism's whole privacy profile at the threshold's exact TPR; the
    self-check passes when the first never exceeds the second and touches it.  NaN for trained
    networks, whose privacy is only bounded, not known, and for attacks that ignore the release.
    """
    if ("mechanism" not in target_meta or not ATTACKS[cell.attack].reads_release
            or math.isnan(threshold)):  # per-class thresholds have no single closed form
        return {"tpr_exact": math.nan, "precision_exact": math.nan, "bound_tight": math.nan}
    mechanism = from_description(target_meta["mechanism"])
    tpr, _ = mechanism.rates(threshold)
    return {
        "tpr_exact": float(tpr),
        "precision_exact": float(precision_at(mechanism, threshold, cell.p)),
        "bound_tight": float(tightest_bound(mechanism, cell.p, float(tpr), form=cell.bound_form)),
    }
