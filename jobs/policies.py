"""Threshold policies: how an attack's scores become "member" / "non-member" decisions.

Why two.  `quantile_max` (Thudi et al.) picks the best of 40 top-quantile thresholds *using the
evaluation labels*: an oracle, right for checking an upper bound, wrong as a claim about what an
attacker achieves.  `calibrated` (Jayaraman et al., Procedure 5.1) picks the threshold on holdout
models whose membership the attacker knows (our shadow models) and applies it unchanged to the
target: what a real attacker can do.  Its functions never receive the target's membership, so
they cannot read it.

Each policy registers itself in `POLICIES` where it is defined; code that must tell them apart
asks what a policy does (`Policy.calibrates`, `Policy.uses_target_labels`), not its name.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from jobs.metrics import OperatingPoint, operating_point, ppv, quantile_max, reaches_min_tpr
from jobs.registry import Registry
from jobs.settings import Between, OneOf, Setting

OBJECTIVES = ("fpr", "ppv")

#: The `grid.policy` names, for code that must name one (a default, a test).
QUANTILE_MAX = "quantile_max"
CALIBRATED = "calibrated"


@dataclass(frozen=True)
class Policy:
    """A registered threshold policy: how it reaches its operating point, and what it reads."""

    # (scores, members, labels, thresholds) → the cell's operating point; `thresholds` are the
    # calibrated ones (`calibrated_thresholds`), None for a policy that does not calibrate.
    point: Callable[[np.ndarray, np.ndarray, np.ndarray, Optional[np.ndarray]], OperatingPoint]
    # Picks its threshold with the evaluation records' membership: an oracle, not an attacker.
    uses_target_labels: bool
    # Picks its thresholds on labelled holdout (shadow) models, by `calibration.*`: the planner
    # then gives every test shadows and puts `calibration.*` into the cell's key.
    calibrates: bool


#: Every threshold policy, by its `grid.policy` name, in registration order.
POLICIES: Registry[Policy] = Registry("policy")


def register_policy(name: str, *, uses_target_labels: bool, calibrates: bool) -> Callable:
    """Decorator: register the operating-point function as policy `name`."""
    def register(point: Callable) -> Callable:
        POLICIES.add(name, Policy(point, uses_target_labels, calibrates))
        return point
    return register


@register_policy(QUANTILE_MAX, uses_target_labels=True, calibrates=False)
def _quantile_max_point(scores: np.ndarray, members: np.ndarray, labels: np.ndarray,
                        thresholds: Optional[np.ndarray]) -> OperatingPoint:
    """Thudi et al.'s oracle: the best of the top-quantile thresholds on the target's labels."""
    return quantile_max(scores, members)


@dataclass
class CalibrationSettings:
    """What `calibrated` optimizes on the holdout models (config `calibration.*`)."""

    objective: str = Setting(
        "fpr", OneOf(OBJECTIVES, "objectives"),
        '"fpr": the highest TPR whose FPR is at most `fpr`; "ppv": the highest PPV at the '
        "cell's p, ties to the higher TPR (Jayaraman et al.: then \"maximize the number of "
        'members identified").').field()
    fpr: float = Setting(0.01, Between(0, 1, low_open=True, high_open=True),
                         "The FPR limit of the \"fpr\" objective.").field()
    min_tpr: float = Setting(
        0.01, Between(0, 1, high_open=True),
        '"ppv" only: the chosen threshold must find at least this share of the holdout members '
        "(the guard Morgan's search uses too, `jobs.metrics.reaches_min_tpr`); none does: accept "
        "nobody.").field()
    # One threshold per class label (the label is public; membership is not).
    per_class: bool = False


def _best_threshold(scores: np.ndarray, members: np.ndarray, prior: float,
                    settings: CalibrationSettings) -> float:
    """The threshold "score ≥ t" that best meets the objective on labelled holdout scores.

    PPV is taken at the target's prior p from the holdout rates, p·TPR / (p·TPR + (1−p)·FPR), not
    from the holdout models' own member share (they were trained at p = 0.5).  It ranks
    thresholds by TPR/FPR at every prior, so p changes the PPV, never the choice.  Among
    thresholds tied at the best PPV the loosest wins (the highest TPR): the strictest would keep
    one pure holdout record when the top scores are all members, and accept nobody on the
    target; `settings.min_tpr` guards against the same for a pure cut that is merely small.
    Thresholds are real scores only; a NaN holdout score counts in the rates' denominators and
    is never accepted.  +∞ (accept nobody) when no threshold meets the FPR limit or the
    minimum TPR.
    """
    scored = ~np.isnan(scores)
    order = np.argsort(-scores[scored], kind="stable")
    ordered, is_member = scores[scored][order], members[scored][order]
    ends = np.flatnonzero(np.r_[ordered[1:] != ordered[:-1], True])  # whole ties per threshold
    tpr = np.cumsum(is_member)[ends] / max(int(members.sum()), 1)
    fpr = np.cumsum(~is_member)[ends] / max(int((~members).sum()), 1)
    thresholds = ordered[ends]
    if settings.objective == "fpr":
        allowed = np.flatnonzero(fpr <= settings.fpr + 1e-12)
        return float(thresholds[allowed[-1]]) if len(allowed) else np.inf
    allowed = np.flatnonzero(reaches_min_tpr(tpr, settings.min_tpr))
    if not len(allowed):
        return np.inf
    tpr, fpr = tpr[allowed], fpr[allowed]
    values = ppv(tpr, fpr, prior)  # tpr > 0: never NaN
    best = np.flatnonzero(values >= values.max() * (1.0 - 1e-12))  # equal PPVs, up to rounding
    return float(thresholds[allowed[best[np.argmax(tpr[best])]]])


def calibrated_thresholds(holdout_scores: np.ndarray, holdout_members: np.ndarray,
                          labels: np.ndarray, prior: float, num_classes: int,
                          settings: CalibrationSettings) -> np.ndarray:
    """One threshold per class label (all equal unless `per_class`), from holdout models only.

    holdout_scores and holdout_members are (models, n): the attack's scores of each holdout
    model on the n evaluation records, and that model's known membership; `labels` (n,) are the
    records' class labels.  A class with no holdout members or non-members uses the global one.
    """
    scores = np.asarray(holdout_scores, dtype=np.float64)
    members = np.asarray(holdout_members, dtype=bool)
    overall = _best_threshold(scores.ravel(), members.ravel(), prior, settings)
    thresholds = np.full(num_classes, overall)
    if settings.per_class:
        for label in range(num_classes):
            of_class = labels == label
            class_members = members[:, of_class]
            if class_members.any() and (~class_members).any():
                thresholds[label] = _best_threshold(scores[:, of_class].ravel(),
                                                    class_members.ravel(), prior, settings)
    return thresholds


def calibrated_point(scores: np.ndarray, members: np.ndarray, labels: np.ndarray,
                     thresholds: np.ndarray) -> OperatingPoint:
    """The target's figures at thresholds fixed beforehand: members are only counted, never used.

    A record is accepted iff its score is at least its class's threshold; a NaN score never is,
    and a +∞ threshold ("none met the objective") accepts nobody.
    """
    scores, cut = np.asarray(scores, dtype=np.float64), thresholds[labels]
    accepted = (scores >= cut) & (cut != np.inf)  # NaN ≥ t is False
    point = operating_point(accepted.astype(np.float64), members, 1.0)
    shared = float(thresholds[0]) if np.all(thresholds == thresholds[0]) else np.nan
    return dataclasses.replace(point, threshold=shared)  # NaN: one threshold per class


@register_policy(CALIBRATED, uses_target_labels=False, calibrates=True)
def _calibrated_point(scores: np.ndarray, members: np.ndarray, labels: np.ndarray,
                      thresholds: Optional[np.ndarray]) -> OperatingPoint:
    """Jayaraman et al.'s Procedure 5.1: thresholds fixed on holdout models, applied unchanged."""
    if thresholds is None:
        raise ValueError("the calibrated policy needs thresholds from holdout models")
    return calibrated_point(scores, members, labels, thresholds)


def apply_policy(policy: str, scores: np.ndarray, members: np.ndarray, labels: np.ndarray,
                 thresholds: np.ndarray | None) -> OperatingPoint:
    """The cell's operating point under `policy` (thresholds: from `calibrated_thresholds`)."""
    return POLICIES[policy].point(scores, members, labels, thresholds)
