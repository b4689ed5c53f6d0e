"""A cell's results row, from its attack's operating point, scores and target: pure math.

Why apart from `sweeper.cluster.tasks`.  A task reads the store, computes and writes back; what a row
*says* — the precision next to U, the audits, the violation tests, the exact figures of a
mechanism of known privacy — is math over a plain cell description (`sweeper.grid.plan.Cell`), an
operating point (`jobs.metrics.OperatingPoint`), the scores and the target's metadata, so it is
testable without a store.

Contract: `cell_row(cell, point, scores, members, target_meta)` and `pdtp_row(cell, table,
target_meta)` give the row's columns (`sweeper.store.columns.CELL_COLUMNS`); `violation_test` and
`audited` say whether the data prove the claimed (ε, δ) wrong, and which test did.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from jobs.attacks.contract import ATTACKS
from jobs.attacks.pdtp import DTP_THRESHOLD
from jobs.audits.mechanisms import from_description, precision_at
from jobs.metrics import (OperatingPoint, clopper_pearson_lower, clopper_pearson_upper,
                          max_advantage, ppv, roc_auc, tpr_at_fpr)
from jobs.policies import POLICIES
from sweeper.bounds.audit_columns import (Training, audit_epsilons, claimed_noise_ruled_out,
                                          best_valid, final_law_departures_of, last_iterate,
                                          law_departures_of, profile_bound, valid_audits,
                                          violations)
from sweeper.bounds import epsilon_from_precision, epsilon_from_rates, precision_bound, \
    precision_lower_bound, tightest_bound
from sweeper.store.columns import RESULTS_SCHEMA_VERSION
from sweeper.grid.plan import Cell


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
        "threat_model": ATTACKS[cell.attack].threat_model,
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
        "loss_bound": _loss_bound(cell),
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
        **audited(point, scores, members, cell, target_meta),
        **exact_figures(target_meta, cell, point.threshold),
        **_model_columns(cell, target_meta),
    }


def _loss_bound(cell: Cell) -> float:
    """B, which Yeom et al.'s Theorem 2 line divides by: for an attack registered with one
    (`Attack.loss_bound`, Adversary 1's), from its settings; NaN otherwise."""
    attack = ATTACKS[cell.attack]
    return attack.loss_bound(attack.settings_of(cell.scores.settings)) if attack.loss_bound \
        else math.nan


def training_of(target_meta: dict[str, Any]) -> Training:
    """What the target's training publishes about its privacy (`sweeper.bounds.audit_columns.Training`)."""
    return Training(float(target_meta.get("noise_multiplier") or math.nan),
                    float(target_meta.get("dp_sample_rate", math.nan)),
                    int(target_meta.get("steps") or 0),
                    Training.sums_steps(target_meta.get("optimizer"),
                                        target_meta.get("momentum")))


def audited(point: OperatingPoint, scores: np.ndarray, members: np.ndarray, cell: Cell,
            target_meta: dict[str, Any]) -> dict[str, Any]:
    """The audit columns (`sweeper.bounds.audit_columns`) and `violation_test` extended by every audit valid
    for the training and the observations (at `audit_alpha` for the columns, at
    `violation_alpha` for the flag), and by the precision's lower end against `bound_profile`
    at the TPR's lower end ("profile")."""
    test = violation_test(point, cell)
    training = training_of(target_meta)
    attack = ATTACKS[cell.attack]
    ratio, final = attack.scores_likelihood_ratio, attack.scores_final_displacement
    valid = valid_audits(training, attack.independent, likelihood_ratio=ratio,
                         final_displacement=final)
    family = training if attack.independent else None  # the family audits read independent canaries
    claims = audit_epsilons(scores, members, p=cell.p, delta=cell.delta, alpha=cell.audit_alpha,
                            family=family, likelihood_ratio=ratio, final_displacement=final)
    fired = [reason for reason in test["violation_reason"].split("+") if reason]
    proven, departures = math.nan, []
    if math.isfinite(cell.epsilon):
        strict = audit_epsilons(scores, members, p=cell.p, delta=cell.delta,
                                alpha=cell.violation_alpha, family=family,
                                likelihood_ratio=ratio, final_displacement=final)
        fired += violations(strict, cell.epsilon, valid)
        # Its ε, read from the PRV's lower side, can stay under a claim the RDP accountant
        # made while the noise itself is proven short: the noise is what is tested.
        if "audit_family" not in fired and claimed_noise_ruled_out(scores, members, family,
                                                                    cell.violation_alpha):
            fired.append("audit_family")
        # An engine other than the one claimed (noise or clip norm) is a violation with its
        # evidence, whatever ε it is proven to spend.
        for read_by_law, reason, read in ((ratio, "audit_family_lr", law_departures_of),
                                          (final, "audit_final_law", final_law_departures_of)):
            found = read(scores, members, family, cell.violation_alpha) if read_by_law else []
            departures += found
            if found and reason not in fired:
                fired.append(reason)
        proven = best_valid(strict, valid)
        tpr_low, _ = rate_ends(point, cell.violation_alpha / (2 * point.candidates))
        profile_at_tpr_low = profile_bound(training, cell.p, floored(tpr_low, cell.tpr_floor),
                                           cell.bound_form)
        if test["precision_proven"] > profile_at_tpr_low:  # NaN (no DP-SGD) never fires
            fired.append("profile")
    if overspent(target_meta, cell.epsilon):
        fired.append("accounting")
    return {
        **claims, **test,
        "epsilon_proven_audit": proven, "violation": bool(fired),
        "violation_reason": "+".join(fired),
        "audit_departure": "; ".join(departures),
        "bound_profile": profile_bound(training, cell.p, cell.tpr_floor, cell.bound_form),
    }


def overspent(target_meta: dict[str, Any], epsilon: float) -> bool:
    """Whether the training's own accountant says it spent more than the claimed ε: a claim
    the accounting contradicts, whatever the attacks say (an accountant told another q, steps
    or σ than the training took: issue 29 measured a q/2 bug at ε 4.19 against ε = 2)."""
    spent = float(target_meta.get("epsilon_spent") or math.nan)
    return math.isfinite(epsilon) and spent > epsilon * (1 + ACCOUNTING_TOLERANCE)


def pdtp_row(cell: Cell, table: np.ndarray, target_meta: dict[str, Any]) -> dict[str, Any]:
    """A PDTP cell: Long et al.'s figures over the measured records, no precision (NaN).

    Three estimates are reported: the single-model PDTP (one pair of models, seed 0); the
    seed-averaged one (PDTP of the seed-averaged probabilities), which alone estimates the
    training algorithm's output distribution and so relates to ε; and the paper's own, the mean
    over seeds of per-seed PDTP values (`*_seed_mean`), which keeps the seed noise in and is the
    one to compare with Long et al.'s figures.  `pdtp_query_key` names the stored per-record
    table (`jobs.attacks.pdtp.pdtp_table`) the PDTP report reads the paper's per-record values from.
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
        "epsilon_last_iterate": last_iterate(training_of(target_meta), cell.delta),
        "noise_multiplier": target_meta["noise_multiplier"],
        "dp_sample_rate": float(target_meta.get("dp_sample_rate", math.nan)),
        "train_seconds": float(target_meta.get("train_seconds", math.nan)),
        "steps": target_meta["steps"],
        "optimizer": target_meta.get("optimizer"),
        "momentum": float(target_meta.get("momentum", math.nan)),
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


#: The tests behind `violation_reason` (the names of those that fired, joined by "+"; "" none):
#: `violation_test`'s two, then the audits' (`sweeper.bounds.audit_columns.violations`).
VIOLATION_TESTS = ("precision", "rates", "audit_cp", "audit_gdp", "audit_one_run",
                   "audit_one_run_fdp", "audit_family", "audit_family_lr", "audit_final_law",
                   "profile",
                   "accounting")

#: `epsilon_spent` above ε by more than this share is the accountant contradicting the claim
#: ("accounting"); the noise is calibrated so that spent ≤ ε, up to float rounding.
ACCOUNTING_TOLERANCE = 1e-6


def violation_test(point: OperatingPoint, cell: Cell) -> dict[str, Any]:
    """Do the data *prove*, at level `cell.violation_alpha`, that training was not (ε, δ)-DP?

    Two tests, either of which flags the cell (`violation_reason` says which fired; docs/choices.md, *What counts as a violation*):

    - precision: the precision's one-sided exact lower end against the bound at the TPR's lower
      end (a lower TPR only raises U, so this is the loosest bound the data allow);
    - rates: the ε that the TPR's lower and the FPR's upper one-sided ends prove
      (`epsilon_from_rates`, with the cell's δ) against the claimed ε.  It catches attacks the
      precision test cannot: at p = 0.5, ε = 1, TP 499 of 500 and FP 250 of 500 have precision
      0.666 < U = 0.731, yet 1 − FPR ≤ e^ε·(1 − TPR) + δ fails by far.

    A flag must mean a bug, so each test is a one-sided exact test, not the 95 % display
    interval, with each of its two ends at α/(2·candidates): Bonferroni over both ends and over
    every threshold the policy searched.  An attack that meets the guarantee exactly is then
    flagged by each test at most a fraction α of the time; with the audits `audited` adds, a
    correct engine is flagged by any of the k tests a cell runs at most k·α of the time (k ≤ 6;
    α = 0.001 by default).  Both tests count the evaluated records as independent trials.
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
