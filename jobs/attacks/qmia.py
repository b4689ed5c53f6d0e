"""Quantile-regression membership inference (Bertran et al., NeurIPS 2023): no shadow models.

Why it is cheap.  LiRA and RMIA learn what each record's score looks like when it is not a
member from shadow models trained without it.  QMIA learns it from the record itself: one
regressor, fit on public records that no model trained on (the held-out split, as RMIA's
population), predicts from a record's input the (1 − α)-quantile of the target's score on
non-members like it.  A record is called a member when the target's score exceeds its predicted
quantile: at every record the false-positive rate is then about α, whatever its difficulty.

The rule is the authors' (amazon-science/quantile-mia, image_QMIA): the score is the hinge
z_y − max_{y'≠y} z_{y'} of the target's logits, the regressor minimises the pinball loss at
level 1 − α, and "member" is score ≥ predicted quantile.  Two choices the paper leaves open,
documented in docs/attacks.md: the continuous score is score − predicted quantile (so every
threshold policy applies to it; at threshold 0 it is the paper's decision), and the regressor is
scikit-learn's histogram gradient boosting with the quantile (pinball) loss on the flattened
input and the one-hot label — CPU-cheap, and the authors' tabular code (CatBoost) shows a
boosted regressor is within the paper's rule — rather than the authors' ResNet on images.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from jobs.attacks.contract import AttackInputs, register_attack
from jobs.settings import AtLeast, Between, Setting

if TYPE_CHECKING:
    from sklearn.ensemble import HistGradientBoostingRegressor

log = logging.getLogger(__name__)

#: The query QMIA asks (`jobs.attacks.queries`): each record's logits followed by its flattened
#: input, for the evaluation records and then the held-out records.
QUERY_KIND = "held_out_logits_and_inputs"


@dataclass(frozen=True)
class QmiaSettings:
    """What QMIA reads: α, how many public records train its regressor, and the regressor's size."""

    qmia_alpha: float = Setting(0.05, Between(0, 1, low_open=True, high_open=True),
                                "QMIA (Bertran et al.): the target false-positive rate α; the "
                                "regressor predicts each record's (1 − α)-quantile.").field()
    qmia_public: int = Setting(5000, AtLeast(2), "QMIA: the regressor trains on at most this "
                               "many records of the held-out split (public non-members).",
                               smoke=200).field()
    qmia_iterations: int = Setting(100, AtLeast(1), "QMIA: boosting iterations of the quantile "
                                   "regressor (scikit-learn's HistGradientBoostingRegressor).",
                                   smoke=10).field()


def held_out_inputs_query(settings: QmiaSettings) -> tuple[str, dict]:
    """QMIA's query: the evaluation records and at most `qmia_public` held-out records."""
    return QUERY_KIND, {"held_out": settings.qmia_public}


def hinge_score(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """The authors' score z_y − max_{y'≠y} z_{y'}, per record (float64)."""
    logits = np.asarray(logits, dtype=np.float64)
    records = np.arange(len(labels))
    true_logit = logits[records, labels]
    others = logits.copy()
    others[records, labels] = -np.inf
    return true_logit - others.max(axis=1)


def pinball_loss(target: np.ndarray, predicted: np.ndarray, level: float) -> np.ndarray:
    """Per-record pinball loss at quantile `level`: what the regressor minimises."""
    delta = np.asarray(target) - np.asarray(predicted)
    return np.maximum(level * delta, (level - 1.0) * delta)


def regressor_features(inputs: np.ndarray, labels: np.ndarray, classes: int) -> np.ndarray:
    """The regressor's input: the flattened record and its one-hot label (never the target's
    outputs, which would let it predict the score itself)."""
    return np.hstack([np.asarray(inputs, dtype=np.float32).reshape(len(labels), -1),
                      np.eye(classes, dtype=np.float32)[labels]])


def fit_quantile_regressor(features: np.ndarray, scores: np.ndarray, level: float,
                           iterations: int) -> HistGradientBoostingRegressor:
    """Gradient boosting with the pinball loss at `level`, deterministic (no early stopping).
    scikit-learn's ensembles are imported here, by the one attack that needs them, not by every
    process that loads the attack registry (0.5–0.9 s each)."""
    from sklearn.ensemble import HistGradientBoostingRegressor

    regressor = HistGradientBoostingRegressor(loss="quantile", quantile=level, max_iter=iterations,
                                              early_stopping=False, random_state=0)
    return regressor.fit(features, scores)


@register_attack("qmia", QmiaSettings, needs_shadows=False, asks=held_out_inputs_query)
def quantile_regression(inputs: AttackInputs, settings: QmiaSettings) -> np.ndarray:
    """QMIA (Bertran et al. 2023): the target's hinge score minus its (1 − α)-quantile on
    non-members, predicted from the record by a regressor fit on held-out records; no shadows.

    "Member" at threshold 0 is the paper's decision (false-positive rate ≈ α); the policies
    choose their own threshold on the difference."""
    if inputs.target_query is None or inputs.population_logits is None \
            or inputs.population_labels is None or inputs.population_logits.shape[-2] < 2:
        raise ValueError("QMIA needs public non-members: held-out records the target was asked "
                         f"about (the {QUERY_KIND} query)")
    classes = inputs.target_logits.shape[1]
    evaluated, public = inputs.target_query[0], inputs.population_logits[0]
    public_labels = inputs.population_labels[:len(public)]
    level = 1.0 - settings.qmia_alpha
    regressor = fit_quantile_regressor(
        regressor_features(public[:, classes:], public_labels, classes),
        hinge_score(public[:, :classes], public_labels), level, settings.qmia_iterations)
    thresholds = regressor.predict(regressor_features(evaluated[:, classes:], inputs.labels, classes))
    log.info("QMIA: regressor on %d public records, level %.3f", len(public), level)
    return hinge_score(evaluated[:, :classes], inputs.labels) - thresholds
