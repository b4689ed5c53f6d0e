"""Shokri et al. (2017): one attack classifier per class, trained on shadow models' softmax vectors.

The paper trains its attack models on shadow outputs labelled IN/OUT; here the shadows' logits
and membership masks come from the store, so only the attack classifiers are fitted. Choices
where the paper leaves room:

* Classifier: L2-regularized logistic regression (L-BFGS-B, deterministic) instead of the
  paper's neural networks, so an attack over a finished sweep costs seconds.
* Features: the full softmax vector in class order (the classifier is per class, so position
  carries meaning), by default as log-probabilities clipped at log(1e-6), so the linear
  classifier works on the logit scale (differences of log p are logit margins) and no
  feature's variance collapses as confidences near 1. ``log_features=False`` gives the raw
  softmax; on the synthetic data of tests/test_jobs/attacks/test_shokri.py both rank records the same.
* IN and OUT rows are weighted to count equally, whatever the shadow inclusion rate.
* At most ``ROW_CAP`` (shadow, record) rows per classifier (half IN, half OUT), drawn with a
  fixed seed: beyond that the ~11 parameters are already pinned down, and the fit stays fast at
  64 shadows × 50 000 records.
* A class whose shadow rows are all IN or all OUT (or, with disjoint shadow data, that no
  shadow record has) cannot train its own classifier; its records are scored by one pooled
  classifier trained on the rows of all classes.
* The shadows' records are the target's, or with disjoint shadow data their own records
  (`AttackInputs.shadow_labels`), as in the paper, whose shadows never see the target's data.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit, logsumexp

from jobs.attacks.contract import AttackInputs, NoSettings, register_attack

ROW_CAP = 20_000
SEED = 20170522  # fixed: scores must not depend on anything but the inputs
LOG_FLOOR = np.log(1e-6)
L2_PENALTY = 1e-3  # keeps weights finite when a class's IN and OUT rows separate perfectly
MAX_ITER = 500


def _features(logits: np.ndarray, log_features: bool) -> np.ndarray:
    logits = np.asarray(logits, dtype=np.float64)
    log_p = logits - logsumexp(logits, axis=-1, keepdims=True)
    return np.maximum(log_p, LOG_FLOOR) if log_features else np.exp(log_p)


class _Logistic:
    """Class-balanced logistic regression; `log_odds` is the attack score."""

    def __init__(self, x: np.ndarray, member: np.ndarray):
        # Standardizing only conditions L-BFGS; the returned log-odds are in original units.
        self.mean = x.mean(axis=0)
        scale = x.std(axis=0)
        self.scale = np.where(scale > 1e-12, scale, 1.0)
        z = (x - self.mean) / self.scale
        weight = np.where(member, 0.5 / member.sum(), 0.5 / (~member).sum())
        sign = np.where(member, 1.0, -1.0)

        def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
            w, b = theta[:-1], theta[-1]
            margin = sign * (z @ w + b)
            value = weight @ np.logaddexp(0.0, -margin) + 0.5 * L2_PENALTY * (w @ w)
            d_margin = -weight * expit(-margin) * sign
            grad = np.append(z.T @ d_margin + L2_PENALTY * w, d_margin.sum())
            return value, grad

        theta0 = np.zeros(x.shape[1] + 1)
        fit = minimize(loss, theta0, jac=True, method="L-BFGS-B", options={"maxiter": MAX_ITER})
        self.w, self.b = fit.x[:-1], fit.x[-1]

    def log_odds(self, x: np.ndarray) -> np.ndarray:
        return ((x - self.mean) / self.scale) @ self.w + self.b


def _training_rows(
    shadow_logits: np.ndarray, members: np.ndarray, records: np.ndarray, seed: list[int],
    log_features: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """Features and IN/OUT labels of (shadow, record) pairs over `records`.

    IN and OUT pairs are each capped at ROW_CAP / 2, so a rare side is never lost to sampling.
    """
    member = members[:, records].ravel()  # pair index = shadow * len(records) + position
    rng = np.random.default_rng(seed)
    chosen = []
    for side in (np.flatnonzero(member), np.flatnonzero(~member)):
        if len(side) > ROW_CAP // 2:
            side = rng.choice(side, ROW_CAP // 2, replace=False)
        chosen.append(side)
    flat = np.sort(np.concatenate(chosen))
    shadow, position = np.divmod(flat, len(records))
    return _features(shadow_logits[shadow, records[position]], log_features), member[flat]


def _validate(inputs: AttackInputs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if inputs.shadow_logits is None or inputs.shadow_members is None:
        raise ValueError("the Shokri attack needs shadow models (shadow_logits and shadow_members)")
    target = np.asarray(inputs.target_logits)
    shadow_logits = np.asarray(inputs.shadow_logits)
    members = np.asarray(inputs.shadow_members, dtype=bool)
    if shadow_logits.ndim != 3 or len(shadow_logits) == 0:
        raise ValueError("the Shokri attack needs at least one shadow model, "
                         f"got shadow_logits of shape {shadow_logits.shape}")
    if shadow_logits.shape[2:] != target.shape[1:] or members.shape != shadow_logits.shape[:2] \
            or shadow_logits.shape[1] != len(inputs.holdout_labels):
        raise ValueError(f"shadow_logits {shadow_logits.shape} and shadow_members {members.shape} "
                         f"do not match target_logits {target.shape} and the shadows' labels")
    return target, shadow_logits, members


@register_attack("shokri", NoSettings, needs_shadows=True)
def shokri(inputs: AttackInputs, settings: NoSettings, *, log_features: bool = True) -> np.ndarray:
    """Shokri et al. 2017: the log-odds of "member" from the attack classifier of the record's
    class, trained on the shadows' softmax vectors."""
    target, shadow_logits, members = _validate(inputs)
    labels, shadow_labels = np.asarray(inputs.labels), np.asarray(inputs.holdout_labels)
    features = _features(target, log_features)
    scores = np.empty(len(labels))
    pooled: _Logistic | None = None
    for y in np.unique(labels):
        records = np.flatnonzero(labels == y)
        # Seeded per class, so a class's sample does not depend on which other classes exist.
        x, member = _training_rows(shadow_logits, members, np.flatnonzero(shadow_labels == y),
                                   [SEED, 0, int(y)], log_features)
        if member.all() or not member.any():
            if pooled is None:
                everyone = np.arange(len(shadow_labels))
                x_all, member_all = _training_rows(shadow_logits, members, everyone, [SEED, 1],
                                                   log_features)
                if member_all.all() or not member_all.any():
                    raise ValueError("the Shokri attack needs both IN and OUT shadow rows")
                pooled = _Logistic(x_all, member_all)
            model = pooled
        else:
            model = _Logistic(x, member)
        scores[records] = model.log_odds(features[records])
    return scores
