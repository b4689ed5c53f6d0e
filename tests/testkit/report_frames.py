"""Small results tables each report accepts, with the hand-chosen numbers their tests check.

Shared by tests/test_sweeper/reports/test_reports.py (each report's numbers) and tests/test_sweeper/reports/test_reports_per_value.py
(every report kept apart per swept value), so both draw the same tables.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import pandas as pd

from sweeper.store.artifacts import ArtifactStore

DELTA = 1e-5
FLOOR = 0.01


def derived_u(eps: float, p: float, delta: float = DELTA, s: float = FLOOR) -> float:
    """Thudi et al., Theorem 3.3, with the README's derived δ-term: 1/(1 + e^-ε·(1−p)/p·(1 − δ/s))."""
    return 1.0 / (1.0 + math.exp(-eps) * (1 - p) / p * (1 - delta / s))


def row(flagged: int = 100, **values):
    """A results row; TP and FP make its precision out of `flagged` accepted records."""
    base = dict(dataset="mnist", model="cnn", delta=DELTA, policy="quantile_max",
                policy_uses_target_labels=True, tpr_floor=FLOOR, bound_form="derived",
                violation=False, tpr=0.3, fpr=0.1, advantage=0.2, auc=0.6,
                bound_at_tpr=0.9, train_accuracy=0.9, test_accuracy=0.8, threshold=0.0)
    base.update(values)
    tp = round(base["precision"] * flagged)
    base.setdefault("tp", tp)
    base.setdefault("fp", flagged - tp)
    base.setdefault("gamma", (1 - base["p"]) / base["p"])
    base.setdefault("bound", derived_u(base["epsilon"], base["p"]))
    return base


# Hand-chosen precisions of lira_online: (ε, p) → [(precision, baseline, ci_low, ci_high), …];
# trial 0 flags 100 records, trial 1 flags 50 (`FLAGGED`), so pooling is not the trials' mean.
LIRA = {
    (1.0, 0.2): [(0.30, 0.21, 0.20, 0.40), (0.26, 0.19, 0.17, 0.36)],
    (1.0, 0.5): [(0.60, 0.50, 0.45, 0.74), (0.70, 0.52, 0.55, 0.82)],
    (8.0, 0.2): [(0.40, 0.20, 0.30, 0.50), (0.36, 0.22, 0.26, 0.47)],
    (8.0, 0.5): [(0.80, 0.49, 0.70, 0.88), (0.74, 0.51, 0.62, 0.84)],
}
FLAGGED = (100, 50)


def lira_frame() -> pd.DataFrame:
    """lira_online at `LIRA`'s precisions beside the always_member baseline, two trials."""
    rows = []
    for (eps, p), trials in LIRA.items():
        for trial, (prec, base, low, high) in enumerate(trials):
            rows.append(row(attack="lira_online", epsilon=eps, p=p, trial=trial, precision=prec,
                            baseline=base, precision_ci_low=low, precision_ci_high=high,
                            flagged=FLAGGED[trial]))
            rows.append(row(attack="always_member", epsilon=eps, p=p, trial=trial,
                            precision=base, baseline=base, precision_ci_low=base - 0.05,
                            precision_ci_high=base + 0.05, policy_uses_target_labels=False))
    return pd.DataFrame(rows)


#: (β, p) → [(best, final) test accuracy per trial] of the fixed-bound targets.
FIXED_BOUND_ACCURACY = {
    (0.953, 0.2): [(0.90, 0.88), (0.92, 0.89)],
    (0.953, 0.5): [(0.93, 0.91), (0.95, 0.92)],
    (0.731, 0.2): [(0.80, 0.75), (0.84, 0.79)],
    (0.731, 0.5): [(0.70, 0.66), (0.72, 0.64)],
}


def fixed_bound_frame(accuracy: dict = FIXED_BOUND_ACCURACY) -> pd.DataFrame:
    """Each target's accuracy repeated on every attack's and policy's row, as a sweep has it."""
    rows = []
    for (beta, p), trials in accuracy.items():
        for trial, (best, final) in enumerate(trials):
            for attack in ("loss", "always_member"):
                for policy in ("quantile_max", "calibrated"):
                    rows.append(dict(attack=attack, policy=policy, target_precision=beta, p=p,
                                     trial=trial, best_test_accuracy=best, test_accuracy=final,
                                     epsilon=1.5))
    return pd.DataFrame(rows)


#: p → per-trial precision of every attack in the PPV table.
PPV_PRECISIONS = {0.5: (0.70, 0.66), 0.1: (0.20, 0.24)}


def ppv_frame(precisions: dict = PPV_PRECISIONS) -> pd.DataFrame:
    """Three attacks under an oracle and a calibrated policy, at ε = 2 and FPR 0.2."""
    rows = []
    for policy, oracle in (("calibrated", False), ("quantile_max", True)):
        for p, values in precisions.items():
            for trial, prec in enumerate(values):
                for attack in ("loss", "merlin", "always_member"):
                    rows.append(row(attack=attack, policy=policy, policy_uses_target_labels=oracle,
                                    epsilon=2.0, p=p, trial=trial, precision=prec, baseline=p,
                                    precision_ci_low=prec - 0.1, precision_ci_high=prec + 0.1,
                                    fpr=0.2))
    return pd.DataFrame(rows)


#: Long et al.'s per-record PDTP (mean of per-seed PDTP) of record r on each target it is a
#: member of; record 4 on target 2 differs, so its value is a mean over targets.
PAPERS_PDTP = {1: 1.2, 2: 1.6, 3: 0.7, 4: 2.0}


def pdtp_inputs():
    """Four targets (trials) of one group, records 0–4 evaluated on each; a loss attack at the
    calibrated threshold 0.5; PDTP measured on each target's members.

    Record r is a member of targets 0…r−1 (record 0 of none, record 4 of all four).  The loss
    score is 1 everywhere ("member" at threshold 0.5), except record 3 on target 3: NaN, which
    must count as "non-member" (and is right: record 3 is not a member of target 3).  Returns
    the results table, the per-record scores (the pdtp score is our seed-averaged PDTP) and the
    per-record table of the paper's estimator (what `load_pdtp_values` reads from the store).
    """
    frame_rows, score_rows, value_rows = [], [], []
    for trial in range(4):
        key = f"target{trial}"
        common = dict(dataset="adult", model="mlp", epsilon=4.0, delta=DELTA, p=0.5, trial=trial,
                      model_key=key, policy="calibrated", policy_uses_target_labels=False)
        frame_rows.append({**common, "attack": "loss", "threshold": 0.5, "precision": 0.6})
        frame_rows.append({**common, "attack": "pdtp", "threshold": math.nan,
                           "precision": math.nan, "pdtp_query_key": f"query{trial}"})
        for record in range(5):
            member = record > trial
            score = math.nan if (record == 3 and trial == 3) else 1.0
            score_rows.append(dict(record_id=record, score=score, member=member, model_key=key,
                                   attack="loss"))
            pdtp = {0: math.nan, 1: 0.1, 2: 0.4, 3: 0.9, 4: 2.5}[record] if member else math.nan
            if record == 4 and trial == 1:  # measurements differ: the PDTP is their mean
                pdtp = 3.5
            score_rows.append(dict(record_id=record, score=pdtp, member=member, model_key=key,
                                   attack="pdtp"))
            if member:
                paper = 4.0 if (record == 4 and trial == 2) else PAPERS_PDTP[record]
                value_rows.append(dict(model_key=key, record_id=record, pdtp_seed_mean=paper))
    return pd.DataFrame(frame_rows), pd.DataFrame(score_rows), pd.DataFrame(value_rows)


#: Per target: (ε, train accuracy, test accuracy, member losses, non-member losses, the
#: loss_randomized decisions of members and of non-members, or None without that attack).
GENERALIZATION_TARGETS = {
    "A": (1.0, 0.9, 0.7, [0.1, 0.2, 0.3, 0.6], [0.25, 0.8, 1.5, 2.0], ([1, 1, 1, 0], [1, 0, 0, 0])),
    "B": (math.inf, 1.0, 0.6, [0.0, 0.0, 0.05, 0.1], [0.9, 1.0, 2.0, 3.0], None),
}


def generalization_inputs():
    """Rows of two targets (each under two policies, as a sweep has them) and their scores.

    The rows' `advantage` (the operating point of their policy) is deliberately wrong (0.05): the
    report must compute every figure from the per-record scores.
    """
    rows, scores = [], []
    for key, (eps, train, test, members, others, decisions) in GENERALIZATION_TARGETS.items():
        attacks = ["loss"] + (["loss_randomized"] if decisions else []) + ["always_member"]
        for attack in attacks:
            for policy in ("quantile_max", "calibrated"):
                rows.append(row(attack=attack, epsilon=eps, p=0.5, trial=0, policy=policy,
                                model_key=f"target{key}", scores_key=f"target{key}-{attack}",
                                train_accuracy=train, test_accuracy=test, advantage=0.05,
                                precision=0.6, baseline=0.5, precision_ci_low=0.5,
                                precision_ci_high=0.7))
        member = [True] * len(members) + [False] * len(others)
        losses = members + others
        scores += [dict(record_id=i, score=-loss, member=m, model_key=f"target{key}", attack="loss")
                   for i, (loss, m) in enumerate(zip(losses, member))]
        if decisions:
            scores += [dict(record_id=i, score=float(d), member=m, model_key=f"target{key}",
                            attack="loss_randomized")
                       for i, (d, m) in enumerate(zip(decisions[0] + decisions[1], member))]
    return pd.DataFrame(rows), pd.DataFrame(scores)


def store_scores(store: ArtifactStore, scores: pd.DataFrame) -> None:
    """Each (target, attack)'s per-record scores under the key `<model_key>-<attack>`."""
    for (key, attack), part in scores.groupby(["model_key", "attack"]):
        store.write_scores(f"{key}-{attack}", part.reset_index(drop=True))


def lira_table(store: ArtifactStore, variant: int) -> pd.DataFrame:
    frame = lira_frame()
    return frame.assign(precision=frame["precision"] - 0.1 * variant,
                        tp=frame["tp"] // (1 + variant))


def fixed_bound_table(store: ArtifactStore, variant: int) -> pd.DataFrame:
    return fixed_bound_frame(
        {key: [(best - 0.1 * variant, final - 0.1 * variant) for best, final in trials]
         for key, trials in FIXED_BOUND_ACCURACY.items()})


def ppv_table(store: ArtifactStore, variant: int) -> pd.DataFrame:
    return ppv_frame({p: tuple(v - 0.1 * variant for v in values)
                                    for p, values in PPV_PRECISIONS.items()})


def pdtp_table(store: ArtifactStore, variant: int) -> pd.DataFrame:
    """Each value's targets are its own models (other keys), with other PDTP values."""
    frame, scores, values = pdtp_inputs()
    prefix = f"C{variant}-"
    frame = frame.assign(model_key=prefix + frame["model_key"],
                         pdtp_query_key=prefix + frame["pdtp_query_key"])
    frame["scores_key"] = frame["model_key"] + "-" + frame["attack"]
    scores = scores.assign(model_key=prefix + scores["model_key"])
    scores.loc[scores["attack"] == "pdtp", "score"] *= 1 + variant
    store_scores(store, scores)
    for key, part in values.groupby("model_key"):
        ids = part["record_id"].to_numpy(float)  # the query answer's layout (`jobs.attacks.pdtp`)
        store.write_query(f"{prefix}query{key.removeprefix('target')}", np.column_stack(
            [ids, np.zeros_like(ids), np.zeros_like(ids),
             part["pdtp_seed_mean"].to_numpy() * (1 + variant)]))
    return frame


def generalization_table(store: ArtifactStore, variant: int) -> pd.DataFrame:
    frame, scores = generalization_inputs()
    prefix = f"C{variant}-"
    frame = frame.assign(model_key=prefix + frame["model_key"],
                         scores_key=prefix + frame["scores_key"],
                         train_accuracy=frame["train_accuracy"] - 0.05 * variant)
    scores = scores.assign(model_key=prefix + scores["model_key"])
    scores.loc[scores["attack"] == "loss", "score"] *= 1 + variant
    store_scores(store, scores)
    return frame


def audit_table(store: ArtifactStore, variant: int) -> pd.DataFrame:
    """Input-canary audits of two trials at two ε, 40 canaries a target, half of them members;
    the second value's scores separate members less."""
    rng = np.random.default_rng(variant)
    rows, scores = [], []
    tp, fp = 12 - 4 * variant, 4
    for eps in (1.0, 4.0):
        for trial in range(2):
            key = f"C{variant}-eps{eps:g}-t{trial}"
            member = np.arange(40) % 2 == 0
            scores.append(pd.DataFrame({
                "record_id": np.arange(40), "member": member, "model_key": key,
                "attack": "canary_input_loss",
                "score": rng.normal(size=40) + member * (2.0 - variant)}))
            rows.append(dict(attack="canary_input_loss", policy="calibrated", epsilon=eps,
                             delta=DELTA, p=0.5, trial=trial, threat_model="black_box_final",
                             tp=tp, fp=fp, precision=tp / (tp + fp),
                             audit_alpha=0.05, noise_multiplier=1.0, dp_sample_rate=0.1,
                             steps=100, epsilon_spent=eps, tpr_floor=FLOOR,
                             bound_form="derived", scores_key=f"{key}-canary_input_loss",
                             model_key=key))
    store_scores(store, pd.concat(scores, ignore_index=True))
    return pd.DataFrame(rows)


#: Report name → a results table it draws (and the scores it reads, written to the store), for
#: variant 0 or 1 of its numbers (tests/test_sweeper/reports/test_reports_per_value.py draws both, one per swept
#: value; tests/test_sweeper/test_figure_layout.py draws variant 0 and checks where its words sit).
REPORT_TABLES: dict[str, Callable[[ArtifactStore, int], pd.DataFrame]] = {
    "frontier": lira_table, "thudi_lira": lira_table, "fixed_bound": fixed_bound_table,
    "ppv": ppv_table, "pdtp": pdtp_table, "generalization": generalization_table,
    "audit": audit_table,
}
