"""LiRA (Carlini et al. 2022, "Membership Inference Attacks From First Principles"): each record's
confidence φ under Gaussian fits of the shadows that held it (IN) and did not (OUT).

- `lira_online`, `lira_global`, `lira_offline`: the grid's three LiRA attacks, registered here
  with their settings (each declared once: `jobs.settings`).
- `online_ratio`: online LiRA's mean log-likelihood ratio, which LiRA on input canaries
  (`jobs.attacks.basic.canary_input_lira`) shares.
- Query augmentations (`augment_flip`, `augment_shift`): the record's mirror and shifted copies,
  asked of each stored model once (`jobs.attacks.queries`), with one fit per augmentation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
from scipy.special import log_ndtr

from jobs.attacks.contract import AttackInputs, register_attack
from jobs.attacks.signals import logit_confidence
from jobs.settings import AtLeast, OneOf, Setting


#: Below this many shadow models, per-record variances are too noisy (Carlini et al. §4.2).
GLOBAL_VARIANCE_BELOW = 64


def _gaussian_log_pdf(x: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    return -0.5 * ((x - mean) / std) ** 2 - np.log(std)


def _confidences(inputs: AttackInputs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """φ of the target (augmentations, n) and of the shadows (shadows, augmentations, n), and the
    shadows' membership (shadows, n), which LiRA needs.

    Without query augmentations there is one "augmentation", the record itself.
    """
    if inputs.shadow_logits is None or inputs.shadow_members is None:
        raise ValueError("LiRA needs shadow models")
    if inputs.shadow_labels is not None:
        raise ValueError("LiRA fits IN/OUT shadows on the target's own records; disjoint shadow "
                         "data (shadow.disjoint_data) has none")
    if inputs.target_query is not None and inputs.shadow_query is not None:
        return (logit_confidence(inputs.target_query, inputs.labels),
                logit_confidence(inputs.shadow_query, inputs.labels), inputs.shadow_members)
    return (logit_confidence(inputs.target_logits, inputs.labels)[None],
            logit_confidence(inputs.shadow_logits, inputs.labels)[:, None], inputs.shadow_members)


def _shadow_statistics(
    shadow_phi: np.ndarray, shadow_members: np.ndarray, variance: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Mean and std of φ over IN and OUT shadows, per augmentation and record (NaN where none).

    The global variance pools residuals over every record (per augmentation): with few shadows
    per-record variances are too noisy to trust (Carlini et al. §4.2).  A per-record variance
    needs at least two shadows on that side; a record with fewer (one IN shadow: a residual of
    0 and σ at the 1e-30 floor, a score of ~1e59) falls back to the global variance of its side.
    """
    use_global = variance == "global" or (variance == "auto" and len(shadow_phi) < GLOBAL_VARIANCE_BELOW)
    # Masked sums as contractions: no (shadows, augmentations, n) temporaries per group.
    inside = np.asarray(shadow_members, dtype=np.float64)
    total, total_sq = shadow_phi.sum(axis=0), np.einsum("san,san->an", shadow_phi, shadow_phi)
    in_sum = np.einsum("san,sn->an", shadow_phi, inside)
    in_sq = np.einsum("san,sn->an", shadow_phi ** 2, inside)
    in_count = inside.sum(axis=0)

    def fit(count: np.ndarray, total: np.ndarray, squares: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = total / count
            residual = np.maximum(squares - count * mean ** 2, 0.0)  # Σ (φ − μ)² per record
            pooled = np.nansum(residual, axis=1) / max(count.sum() - 1, 1)  # per augmentation
            std = np.broadcast_to(np.sqrt(pooled)[:, None], mean.shape)
            if not use_global:
                std = np.where(count >= 2, np.sqrt(residual / np.maximum(count - 1, 1)), std)
        return mean, np.maximum(std, 1e-30)

    mean_in, std_in = fit(in_count, in_sum, in_sq)
    mean_out, std_out = fit(len(inside) - in_count, total - in_sum, total_sq - in_sq)
    return mean_in, std_in, mean_out, std_out


def augmentation_query(settings: Any) -> Optional[tuple[str, dict]]:
    """LiRA's query: the logits of augmented copies, when `augment_flip` or `augment_shift` ask."""
    if not settings.augment_flip and settings.augment_shift == 0:
        return None
    asked: dict[str, Any] = {"flip": settings.augment_flip, "shift": settings.augment_shift}
    if settings.augment_shift > 0:  # shifts were once axis-only with zero fill: not the same views
        asked["shifts"] = "grid_reflect"
    return "augmented_logits", asked


def online_ratio(inputs: AttackInputs, variance: str) -> np.ndarray:
    """Online LiRA's mean log-likelihood ratio, with `variance` as `lira_variance` says."""
    target_phi, shadow_phi, shadow_members = _confidences(inputs)
    mean_in, std_in, mean_out, std_out = _shadow_statistics(shadow_phi, shadow_members, variance)
    ratio = _gaussian_log_pdf(target_phi, mean_in, std_in) - _gaussian_log_pdf(target_phi, mean_out, std_out)
    return ratio.mean(axis=0)


LIRA_VARIANCE = Setting("auto", OneOf(("auto", "global", "per_record"), "variances"),
                        "LiRA: one variance for all records (global) or one per record; auto "
                        "takes the global one below GLOBAL_VARIANCE_BELOW shadow models, as "
                        "Carlini et al. recommend for few shadows.")
AUGMENT_FLIP = Setting(False, doc="LiRA's and RMIA's query augmentations (images only): the "
                       "mirror image too.")
AUGMENT_SHIFT = Setting(0, AtLeast(0), "LiRA's and RMIA's query augmentations (images only): the "
                        "(2·shift + 1)² translations by up to ± this many pixels, reflect-padded.")


@dataclass(frozen=True)
class LiraOnlineSettings:
    """What online LiRA reads: its variance fit and its query augmentations."""

    lira_variance: str = LIRA_VARIANCE.field()
    augment_flip: bool = AUGMENT_FLIP.field()
    augment_shift: int = AUGMENT_SHIFT.field()


@register_attack("lira_online", LiraOnlineSettings, needs_shadows=True, asks=augmentation_query,
                 fits_per_record=True)
def lira_online(inputs: AttackInputs, settings: LiraOnlineSettings) -> np.ndarray:
    """LiRA online (Carlini et al. 2022, Algorithm 1): the log-likelihood ratio of the target's
    φ under IN vs OUT fits.

    With query augmentations each augmentation gets its own fits and the log-ratios are averaged
    (Carlini et al. fit one Gaussian per augmentation with diagonal covariance, which is the sum;
    the mean ranks records identically and keeps scores comparable across augmentation counts).
    """
    return online_ratio(inputs, settings.lira_variance)


@dataclass(frozen=True)
class LiraGlobalSettings:
    """What global-variance LiRA reads: only its query augmentations (its variance is fixed)."""

    augment_flip: bool = AUGMENT_FLIP.field()
    augment_shift: int = AUGMENT_SHIFT.field()


@register_attack("lira_global", LiraGlobalSettings, needs_shadows=True, asks=augmentation_query,
                 fits_per_record=True)
def lira_global(inputs: AttackInputs, settings: LiraGlobalSettings) -> np.ndarray:
    """LiRA online with one variance pooled over all records, whatever `lira_variance` says.

    Carlini et al.'s variant for few shadow models, as its own grid value so that a sweep can
    set it beside the per-record fit.
    """
    return online_ratio(inputs, "global")


LIRA_OFFLINE_COMBINE = Setting("log_cdf", OneOf(("log_cdf", "zscore"), "combinations"),
                               "Offline LiRA over augmentations: log_cdf averages the one-sided "
                               "log Φ(z) (Carlini et al.'s test), zscore averages z.")


@dataclass(frozen=True)
class LiraOfflineSettings(LiraOnlineSettings):
    """What offline LiRA reads: online LiRA's settings and how augmentations are combined."""

    lira_offline_combine: str = LIRA_OFFLINE_COMBINE.field()


@register_attack("lira_offline", LiraOfflineSettings, needs_shadows=True, asks=augmentation_query,
                 fits_per_record=True)
def lira_offline(inputs: AttackInputs, settings: LiraOfflineSettings) -> np.ndarray:
    """LiRA offline (Carlini et al. 2022): how far above the OUT distribution the target's φ
    lies (one-sided).

    Carlini et al. score with the one-sided Φ((φ − μ_out)/σ_out).  How query augmentations
    are combined is `lira_offline_combine`:

    * "log_cdf" (default): the mean over augmentations of log Φ(z_a), the log of the joint
      one-sided probability under OUT fits with diagonal covariance, as the online attack
      combines its per-augmentation likelihoods.  log Φ(z) rounds to 0 above z ≈ 38, so the
      most extreme records tie there.
    * "zscore": the mean standardized distance z̄ (Stouffer's combination); it keeps full
      resolution in the upper tail.

    With one query (no augmentations) both rank records identically.  The authors' plotting
    code scores offline with the two-sided log-density instead, which also flags records far
    *below* the OUT mean; we keep the paper's one-sided test.
    """
    target_phi, shadow_phi, shadow_members = _confidences(inputs)
    _, _, mean_out, std_out = _shadow_statistics(shadow_phi, shadow_members, settings.lira_variance)
    z = (target_phi - mean_out) / std_out
    if settings.lira_offline_combine == "zscore":
        return z.mean(axis=0)
    return log_ndtr(z).mean(axis=0)
