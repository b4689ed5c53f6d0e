"""BASE (Lassila et al., NeurIPS 2025, "Practical Bayes-Optimal Membership Inference Attacks").

Why it is here.  BASE approximates Sablayrolles et al.'s Bayes-optimal rule with one ratio per
record: log Pr(x|θ) against the log of Pr(x|θ') averaged over reference (shadow) models.  It needs
no population z and no per-record distribution fit, so it reads only each model's stored logits
(no query), and it equals RMIA at one setting of RMIA's threshold (the paper's Section 5).  It
still needs reference models: it is cheap per model, not free of them.

The rule is the authors' code's (MarcusLassila/MIA-audit-GNN, src/attacks.py, class BASE):
log softmax_y(θ)(x) − c·(logsumexp_j log softmax_y(θ_j)(x) − log K) over the K references (every
shadow online; the OUT shadows of each record offline), c the threshold scale (1 by default).
The authors return the logistic of this log-odds; the logistic is monotone, so we keep the
log-odds, whose float64 values never saturate at 1 (docs/attacks.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import log_softmax, logsumexp

from jobs.attacks.contract import AttackInputs, register_attack
from jobs.settings import Between, Setting


@dataclass(frozen=True)
class BaseSettings:
    """What BASE reads: which references average Pr(x|θ'), and the threshold's scale."""

    base_offline: bool = Setting(False, None, "BASE (Lassila et al.): average Pr(x|θ') over the "
                                 "shadows that lack x only (the authors' offline), else over "
                                 "every shadow.").field()
    base_threshold_scale: float = Setting(1.0, Between(0), "BASE: c in log Pr(x|θ) − "
                                          "c·log mean_j Pr(x|θ_j) (the authors' "
                                          "threshold_scale_factor; 1 by default).").field()


def label_log_probability(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """log softmax at each record's label, for any leading batch shape: (..., n)."""
    log_probs = log_softmax(np.asarray(logits, dtype=np.float64), axis=-1)
    return np.take_along_axis(log_probs, np.broadcast_to(labels, log_probs.shape[:-1])[..., None],
                              axis=-1)[..., 0]


def base_scores(target_logits: np.ndarray, shadow_logits: np.ndarray, shadow_members: np.ndarray,
                labels: np.ndarray, offline: bool, scale: float) -> np.ndarray:
    """BASE's log-odds per record: target (n, classes), shadows (K, n, classes), masks (K, n)."""
    references = label_log_probability(shadow_logits, labels)  # (K, n)
    use = ~np.asarray(shadow_members, dtype=bool) if offline else np.ones(references.shape, bool)
    lacking = int((use.sum(axis=0) == 0).sum())
    if lacking:
        raise ValueError(f"offline BASE: {lacking} records have no OUT reference model (every "
                         "shadow trained on them); use complementary shadow pairs")
    log_mean = logsumexp(np.where(use, references, -np.inf), axis=0) - np.log(use.sum(axis=0))
    return label_log_probability(target_logits, labels) - scale * log_mean


@register_attack("base", BaseSettings, needs_shadows=True, fits_per_record=True)
def bayes_optimal(inputs: AttackInputs, settings: BaseSettings) -> np.ndarray:
    """BASE (Lassila et al. 2025): log Pr(x|θ) minus c times the log of its mean over the
    shadows (offline: those that lack x); reads stored logits only, no population."""
    if inputs.shadow_logits is None or inputs.shadow_members is None:
        raise ValueError("BASE needs reference (shadow) models")
    if inputs.shadow_labels is not None:
        raise ValueError("BASE averages shadows on the target's own records; disjoint shadow "
                         "data (shadow.disjoint_data) has none")
    return base_scores(inputs.target_logits, inputs.shadow_logits, inputs.shadow_members,
                       inputs.labels, settings.base_offline, settings.base_threshold_scale)
