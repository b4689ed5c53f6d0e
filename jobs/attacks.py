"""Membership-inference attacks as vectorized scoring functions over stored logits.

Every attack maps the target model's logits on the evaluation records (and, for attacks that
need them, the logits and membership masks of shadow models) to one score per record, higher
meaning "more likely a member".  Attacks never train: models come from the content-keyed store,
so adding an attack to a finished sweep costs only scoring.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
from scipy.special import logsumexp

from jobs.shokri import shokri

#: Below this many shadow models, per-record variances are too noisy (Carlini et al. §4.2).
GLOBAL_VARIANCE_BELOW = 64


@dataclass(frozen=True)
class AttackInputs:
    """What an attack may look at: target logits, labels, and shadows with known membership."""

    target_logits: np.ndarray  # (n, classes)
    labels: np.ndarray  # (n,)
    shadow_logits: Optional[np.ndarray] = None  # (shadows, n, classes)
    shadow_members: Optional[np.ndarray] = None  # (shadows, n) bool


@dataclass
class AttackSettings:
    """Attack knobs that are part of the sweep config (`attack.*`)."""

    # LiRA: one variance for all records ("global") or one per record; "auto" uses the global
    # one below GLOBAL_VARIANCE_BELOW shadow models, as Carlini et al. recommend for few shadows.
    lira_variance: str = "auto"
    # Loss attack: p_y is clamped here before the log so a confident miss does not give -inf.
    loss_clamp: float = 1e-6


def logit_confidence(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """LiRA's φ = log p_y − log(1 − p_y), computed stably as logit_y − logsumexp(other logits).

    Works on any leading batch shape: logits (..., n, classes), labels (n,).
    """
    logits = np.asarray(logits, dtype=np.float64)
    index = np.broadcast_to(labels[:, None], logits.shape[:-1] + (1,))
    true_logit = np.take_along_axis(logits, index, axis=-1)[..., 0]
    others = logits.copy()
    np.put_along_axis(others, index, -np.inf, axis=-1)
    return true_logit - logsumexp(others, axis=-1)


def _gaussian_log_pdf(x: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    return -0.5 * ((x - mean) / std) ** 2 - np.log(std)


def _shadow_statistics(
    inputs: AttackInputs, variance: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per-record mean and std of φ over IN and OUT shadows (NaN where a record has none)."""
    if inputs.shadow_logits is None or inputs.shadow_members is None:
        raise ValueError("LiRA needs shadow models")
    phi = logit_confidence(inputs.shadow_logits, inputs.labels)  # (shadows, n)
    members = np.asarray(inputs.shadow_members, dtype=bool)
    use_global = variance == "global" or (variance == "auto" and len(phi) < GLOBAL_VARIANCE_BELOW)

    def fit(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        count = mask.sum(axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(mask, phi, 0.0).sum(axis=0) / count
            residual = np.where(mask, phi - mean, 0.0)
            if use_global:
                std = np.full(mean.shape, np.sqrt((residual**2).sum() / max(count.sum() - 1, 1)))
            else:
                std = np.sqrt((residual**2).sum(axis=0) / np.maximum(count - 1, 1))
        return mean, np.maximum(std, 1e-30)

    mean_in, std_in = fit(members)
    mean_out, std_out = fit(~members)
    return mean_in, std_in, mean_out, std_out


def lira_online(inputs: AttackInputs, settings: AttackSettings) -> np.ndarray:
    """Carlini et al. Algorithm 1: log-likelihood ratio of the target's φ under IN vs OUT fits."""
    mean_in, std_in, mean_out, std_out = _shadow_statistics(inputs, settings.lira_variance)
    phi = logit_confidence(inputs.target_logits, inputs.labels)
    return _gaussian_log_pdf(phi, mean_in, std_in) - _gaussian_log_pdf(phi, mean_out, std_out)


def lira_offline(inputs: AttackInputs, settings: AttackSettings) -> np.ndarray:
    """Offline LiRA: how far above the OUT distribution the target's φ lies.

    Carlini et al. score with the one-sided CDF Φ((φ − μ_out)/σ_out); the standardized value is
    a monotone transform of it, so it ranks records identically and keeps resolution in the tail.
    """
    _, _, mean_out, std_out = _shadow_statistics(inputs, settings.lira_variance)
    phi = logit_confidence(inputs.target_logits, inputs.labels)
    return (phi - mean_out) / std_out


def loss_threshold(inputs: AttackInputs, settings: AttackSettings) -> np.ndarray:
    """Yeom et al.: members have low loss; score = −cross-entropy with p_y clamped."""
    logits = np.asarray(inputs.target_logits, dtype=np.float64)
    log_probs = logits - logsumexp(logits, axis=-1, keepdims=True)
    log_p_true = np.take_along_axis(log_probs, inputs.labels[:, None], axis=-1)[:, 0]
    return np.maximum(log_p_true, np.log(settings.loss_clamp))


def always_member(inputs: AttackInputs, settings: AttackSettings) -> np.ndarray:
    """The baseline: say "member" for everyone; its precision is the share of members."""
    return np.ones(len(inputs.labels))


def output_threshold(inputs: AttackInputs, settings: AttackSettings) -> np.ndarray:
    """Say "member" when the released output is high: the optimal test against a mechanism that
    releases a noisy copy of the membership bit (`+experiment=bound_check`), whose one output
    is stored in the first logit column."""
    return np.asarray(inputs.target_logits, dtype=np.float64)[:, 0]


@dataclass(frozen=True)
class Attack:
    score: Callable[[AttackInputs, AttackSettings], np.ndarray]
    needs_shadows: bool
    # Scores a mechanism's release rather than a network's logits (its rates are then exact).
    reads_release: bool = False


ATTACKS: dict[str, Attack] = {
    "lira_online": Attack(lira_online, needs_shadows=True),
    "lira_offline": Attack(lira_offline, needs_shadows=True),
    "loss": Attack(loss_threshold, needs_shadows=False),
    "always_member": Attack(always_member, needs_shadows=False),
    "output_threshold": Attack(output_threshold, needs_shadows=False, reads_release=True),
    "shokri": Attack(shokri, needs_shadows=True),
}


def holdout_scores(attack: Attack, inputs: AttackInputs, settings: AttackSettings) -> np.ndarray:
    """The attack's scores with each shadow model in turn in the target's place: (shadows, n).

    These are the labelled scores the `calibrated` policy picks its threshold on.  An attack that
    uses shadow models gets the *other* shadows, so no model ever scores against itself.
    """
    if inputs.shadow_logits is None or inputs.shadow_members is None:
        raise ValueError("holdout scores need shadow models")
    count = len(inputs.shadow_logits)
    rows = []
    for index in range(count):
        others = np.arange(count) != index
        rows.append(attack.score(AttackInputs(
            inputs.shadow_logits[index], inputs.labels,
            inputs.shadow_logits[others] if attack.needs_shadows else None,
            inputs.shadow_members[others] if attack.needs_shadows else None), settings))
    return np.stack(rows)
