"""Membership-inference attacks as vectorized scoring functions over stored logits.

Every attack maps the target model's logits on the evaluation records (and, for attacks that
need them, the logits and membership masks of shadow models) to one score per record, higher
meaning "more likely a member".  Attacks never train: models come from the content-keyed store,
so adding an attack to a finished sweep costs only scoring.

Each attack registers itself in `ATTACKS` where it is defined (`register_attack`), with its own
frozen settings dataclass: the fields are exactly the `attack.*` settings it reads (its model
query's included), and the attack is handed only that object.  Its scores' content key is
derived from those fields (`settings_items`), so a setting it reads cannot be left out of the
key, and a setting it does not read cannot split the store.  (Shokri et al.'s attack is
defined in `jobs.shokri`; it is registered here, in its place in the registration order.)  What
every attack receives, the settings schema and the registry itself are in `jobs.attack_registry`,
which both import.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
from scipy.special import log_ndtr, logsumexp

from jobs.attack_registry import ATTACKS, Attack, AttackInputs, AttackSettings, NoSettings, \
    register_attack, settings_items
from jobs.merlin import morgan_decisions, morgan_thresholds
from jobs.shokri import shokri

# The registry's names are re-exported: importing this module is what fills `ATTACKS`.
__all__ = [
    "ATTACKS", "Attack", "AttackInputs", "AttackSettings", "NoSettings", "register_attack",
    "settings_items", "GLOBAL_VARIANCE_BELOW", "logit_confidence", "LiraOnlineSettings",
    "lira_online", "LiraGlobalSettings", "lira_global", "LiraOfflineSettings", "lira_offline",
    "clamped_log_p", "LossSettings", "loss_threshold", "LossRandomizedSettings",
    "yeom_loss_bound", "loss_randomized", "always_member", "output_threshold", "PdtpSettings",
    "pdtp_scores", "MerlinSettings", "merlin", "MorganSettings", "morgan", "holdout_scores",
]

#: Below this many shadow models, per-record variances are too noisy (Carlini et al. §4.2).
GLOBAL_VARIANCE_BELOW = 64


def logit_confidence(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """LiRA's φ = log p_y − log(1 − p_y), computed stably as logit_y − logsumexp(other logits).

    Works on any leading batch shape: logits (..., n, classes), labels (n,); returns (..., n).
    One (n, classes) slice at a time is turned class-first: reducing over the short class axis
    of a (n, classes) array runs one strided pass per record, while the same reduction over
    the rows of a (classes, n) copy is a few contiguous vector operations (about 7× faster at
    64 shadows × 2 augmentations × 50 000 records × 10 classes, `python -m bench`).
    """
    logits, labels = np.asarray(logits), np.asarray(labels)
    phi = np.empty(logits.shape[:-1])
    for index in np.ndindex(*logits.shape[:-2]):  # no reshape: it would copy a strided batch
        phi[index] = _class_first_confidence(logits[index], labels)
    return phi


def _class_first_confidence(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """φ of one (n, classes) slice, computed on a float32 (classes, n) copy.

    float32 like the stored logits (within 1e-6 of float64 here); the true logit and the
    log-sum are combined in float64.
    """
    columns = np.array(logits.T, dtype=np.float32, order="C")  # (classes, n), our own copy
    records = np.arange(columns.shape[1])
    true_logit = columns[labels, records].astype(np.float64)
    columns[labels, records] = -np.inf  # logsumexp over the other classes only
    top = columns.max(axis=0)
    columns -= top
    np.exp(columns, out=columns)
    others_lse = top.astype(np.float64) + np.log(columns.sum(axis=0), dtype=np.float64)
    return true_logit - others_lse


def _gaussian_log_pdf(x: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    return -0.5 * ((x - mean) / std) ** 2 - np.log(std)


def _confidences(inputs: AttackInputs) -> tuple[np.ndarray, np.ndarray]:
    """φ of the target (augmentations, n) and of the shadows (shadows, augmentations, n).

    Without query augmentations there is one "augmentation", the record itself.
    """
    if inputs.shadow_logits is None or inputs.shadow_members is None:
        raise ValueError("LiRA needs shadow models")
    if inputs.shadow_labels is not None:
        raise ValueError("LiRA fits IN/OUT shadows on the target's own records; disjoint shadow "
                         "data (shadow.disjoint_data) has none")
    if inputs.target_query is not None and inputs.shadow_query is not None:
        return (logit_confidence(inputs.target_query, inputs.labels),
                logit_confidence(inputs.shadow_query, inputs.labels))
    return (logit_confidence(inputs.target_logits, inputs.labels)[None],
            logit_confidence(inputs.shadow_logits, inputs.labels)[:, None])


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


def _augmentation_query(settings: Any) -> Optional[tuple[str, dict]]:
    """LiRA's query: the logits of augmented copies, when `augment_flip` or `augment_shift` ask."""
    if not settings.augment_flip and settings.augment_shift == 0:
        return None
    asked: dict[str, Any] = {"flip": settings.augment_flip, "shift": settings.augment_shift}
    if settings.augment_shift > 0:  # shifts were once axis-only with zero fill: not the same views
        asked["shifts"] = "grid_reflect"
    return "augmented_logits", asked


def _online_ratio(inputs: AttackInputs, variance: str) -> np.ndarray:
    """Online LiRA's mean log-likelihood ratio, with `variance` as `lira_variance` says."""
    target_phi, shadow_phi = _confidences(inputs)
    mean_in, std_in, mean_out, std_out = _shadow_statistics(shadow_phi, inputs.shadow_members, variance)
    ratio = _gaussian_log_pdf(target_phi, mean_in, std_in) - _gaussian_log_pdf(target_phi, mean_out, std_out)
    return ratio.mean(axis=0)


@dataclass(frozen=True)
class LiraOnlineSettings:
    """What online LiRA reads: its variance fit and its query augmentations."""

    lira_variance: str
    augment_flip: bool
    augment_shift: int


@register_attack("lira_online", LiraOnlineSettings, needs_shadows=True, asks=_augmentation_query)
def lira_online(inputs: AttackInputs, settings: LiraOnlineSettings) -> np.ndarray:
    """Carlini et al. Algorithm 1: log-likelihood ratio of the target's φ under IN vs OUT fits.

    With query augmentations each augmentation gets its own fits and the log-ratios are averaged
    (Carlini et al. fit one Gaussian per augmentation with diagonal covariance, which is the sum;
    the mean ranks records identically and keeps scores comparable across augmentation counts).
    """
    return _online_ratio(inputs, settings.lira_variance)


@dataclass(frozen=True)
class LiraGlobalSettings:
    """What global-variance LiRA reads: only its query augmentations (its variance is fixed)."""

    augment_flip: bool
    augment_shift: int


@register_attack("lira_global", LiraGlobalSettings, needs_shadows=True, asks=_augmentation_query)
def lira_global(inputs: AttackInputs, settings: LiraGlobalSettings) -> np.ndarray:
    """Online LiRA with one variance pooled over all records, whatever `lira_variance` says.

    Carlini et al.'s variant for few shadow models, as its own grid value so that a sweep can
    set it beside the per-record fit.
    """
    return _online_ratio(inputs, "global")


@dataclass(frozen=True)
class LiraOfflineSettings:
    """What offline LiRA reads: online LiRA's settings and how augmentations are combined."""

    lira_variance: str
    augment_flip: bool
    augment_shift: int
    lira_offline_combine: str


@register_attack("lira_offline", LiraOfflineSettings, needs_shadows=True, asks=_augmentation_query)
def lira_offline(inputs: AttackInputs, settings: LiraOfflineSettings) -> np.ndarray:
    """Offline LiRA: how far above the OUT distribution the target's φ lies (one-sided).

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
    target_phi, shadow_phi = _confidences(inputs)
    _, _, mean_out, std_out = _shadow_statistics(shadow_phi, inputs.shadow_members, settings.lira_variance)
    z = (target_phi - mean_out) / std_out
    if settings.lira_offline_combine == "zscore":
        return z.mean(axis=0)
    return log_ndtr(z).mean(axis=0)


def clamped_log_p(logits: np.ndarray, labels: np.ndarray, clamp: float) -> np.ndarray:
    """log p_y of each record's label, clamped below at log(clamp): −(the clamped loss)."""
    logits = np.asarray(logits, dtype=np.float64)
    log_probs = logits - logsumexp(logits, axis=-1, keepdims=True)
    log_p_true = np.take_along_axis(log_probs, labels[:, None], axis=-1)[:, 0]
    return np.maximum(log_p_true, np.log(clamp))


@dataclass(frozen=True)
class LossSettings:
    """What the loss attack reads: the clamp on p_y."""

    loss_clamp: float


@register_attack("loss", LossSettings, needs_shadows=False)
def loss_threshold(inputs: AttackInputs, settings: LossSettings) -> np.ndarray:
    """Yeom et al.: members have low loss; score = −cross-entropy with p_y clamped."""
    return clamped_log_p(inputs.target_logits, inputs.labels, settings.loss_clamp)


@dataclass(frozen=True)
class LossRandomizedSettings(LossSettings):
    """What Adversary 1 reads: the loss clamp, the bound B and the seed of its coin flips."""

    loss_bound: Optional[float]
    seed: int


def yeom_loss_bound(settings: LossRandomizedSettings | AttackSettings) -> float:
    """B of Yeom et al.'s Adversary 1: `loss_bound`, else −ln(loss_clamp), the largest loss the
    clamp lets through."""
    return float(settings.loss_bound if settings.loss_bound is not None
                 else -np.log(settings.loss_clamp))


@register_attack("loss_randomized", LossRandomizedSettings, needs_shadows=False)
def loss_randomized(inputs: AttackInputs, settings: LossRandomizedSettings) -> np.ndarray:
    """Yeom et al.'s Adversary 1: say "member" with probability 1 − loss/B, for a loss bounded by B.

    A randomized decision, not a ranking: the score is the decision itself (1 member, 0 not), so
    every policy measures the precision of the coin flips Yeom et al. analyse.
    """
    loss = -loss_threshold(inputs, settings)
    bound = yeom_loss_bound(settings)
    member_probability = 1.0 - np.minimum(loss, bound) / bound
    coins = np.random.default_rng(settings.seed).random(len(loss))
    return (coins < member_probability).astype(np.float64)


@register_attack("always_member", NoSettings, needs_shadows=False)
def always_member(inputs: AttackInputs, settings: NoSettings) -> np.ndarray:
    """The baseline: say "member" for everyone; its precision is the share of members."""
    return np.ones(len(inputs.labels))


@register_attack("output_threshold", NoSettings, needs_shadows=False, reads_release=True)
def output_threshold(inputs: AttackInputs, settings: NoSettings) -> np.ndarray:
    """Say "member" when the released output is high: the optimal test against a mechanism that
    releases a noisy copy of the membership bit (`+experiment=bound_check`), whose one output
    is stored in the first logit column."""
    return np.asarray(inputs.target_logits, dtype=np.float64)[:, 0]


# Defined in `jobs.shokri`; registered here to keep its place in the registration order.
register_attack("shokri", NoSettings, needs_shadows=True)(shokri)


@dataclass(frozen=True)
class PdtpSettings:
    """What PDTP reads: how many members are left out, and over how many training seeds."""

    pdtp_records: int
    pdtp_seeds: int


def _pdtp_query(settings: PdtpSettings) -> tuple[str, dict]:
    return "pdtp", {"records": settings.pdtp_records, "seeds": settings.pdtp_seeds}


@register_attack("pdtp", PdtpSettings, needs_shadows=False, asks=_pdtp_query, measures_records=True)
def pdtp_scores(inputs: AttackInputs, settings: PdtpSettings) -> np.ndarray:
    """Long et al.'s seed-averaged PDTP of each measured record (NaN for the others).

    PDTP measures how much each *training* record moves the model; it is a per-record privacy
    measure rather than a test, so its cell reports PDTP figures instead of a precision.
    """
    if inputs.target_query is None:
        raise ValueError("PDTP needs the target's pdtp query")
    scores = np.full(len(inputs.labels), np.nan)
    ids = inputs.target_query[:, 0].astype(np.int64)
    inside = ids < len(scores)
    scores[ids[inside]] = inputs.target_query[inside, 2]
    return scores


@dataclass(frozen=True)
class MerlinSettings:
    """What Merlin reads: its query's perturbations, their scale and seed, and the loss clamp."""

    merlin_perturbations: int
    merlin_sigma: float
    merlin_seed: int
    loss_clamp: float


def _merlin_query(settings: MerlinSettings) -> tuple[str, dict]:
    return "merlin", {"perturbations": settings.merlin_perturbations,
                      "sigma": settings.merlin_sigma, "seed": settings.merlin_seed,
                      "loss_clamp": settings.loss_clamp}


@register_attack("merlin", MerlinSettings, needs_shadows=False, asks=_merlin_query)
def merlin(inputs: AttackInputs, settings: MerlinSettings) -> np.ndarray:
    """Jayaraman et al.'s Merlin: the share of small input perturbations that raise the loss.

    A member sits near a loss minimum the model was fitted to, so noise tends to raise its loss.
    The ratios are the answer of the model's "merlin" query.
    """
    if inputs.target_query is None:
        raise ValueError("Merlin needs the target's merlin query")
    return np.asarray(inputs.target_query, dtype=np.float64)


@dataclass(frozen=True)
class MorganSettings(MerlinSettings):
    """What Morgan reads: Merlin's settings and the FPR and least TPR its thresholds are fit for."""

    morgan_fpr: float
    morgan_min_tpr: float


@register_attack("morgan", MorganSettings, needs_shadows=True, asks=_merlin_query)
def morgan(inputs: AttackInputs, settings: MorganSettings) -> np.ndarray:
    """Jayaraman et al.'s Morgan: member iff φ_L ≤ loss ≤ φ_U and merlin ≥ φ_M (1 or 0).

    The three thresholds are chosen on the shadow models, whose membership is known, for the
    highest PPV within `morgan_fpr`; the target's membership is never read.
    """
    if inputs.shadow_logits is None or inputs.shadow_query is None or inputs.target_query is None:
        raise ValueError("Morgan needs shadow models and the merlin query of target and shadows")
    shadow_loss = -np.stack([clamped_log_p(logits, inputs.holdout_labels, settings.loss_clamp)
                             for logits in inputs.shadow_logits])
    thresholds = morgan_thresholds(shadow_loss, inputs.shadow_query, inputs.shadow_members,
                                   fpr=settings.morgan_fpr, min_tpr=settings.morgan_min_tpr)
    loss = -clamped_log_p(inputs.target_logits, inputs.labels, settings.loss_clamp)
    return morgan_decisions(loss, inputs.target_query, thresholds).astype(np.float64)


def holdout_scores(attack: Attack, inputs: AttackInputs, settings: Any) -> np.ndarray:
    """The attack's scores with each shadow model in turn in the target's place: (shadows, n).

    These are the labelled scores the `calibrated` policy picks its threshold on.  An attack that
    uses shadow models gets the *other* shadows, so no model ever scores against itself.  With
    disjoint shadow data they are scores on the shadows' own records (`holdout_labels`).
    `settings` are the attack's own (an `Attack.settings_type`).
    """
    if inputs.shadow_logits is None or inputs.shadow_members is None:
        raise ValueError("holdout scores need shadow models")
    count = len(inputs.shadow_logits)
    rows = []
    for index in range(count):
        others = np.arange(count) != index
        asked = inputs.shadow_query
        rows.append(attack.score(AttackInputs(
            inputs.shadow_logits[index], inputs.holdout_labels,
            inputs.shadow_logits[others] if attack.needs_shadows else None,
            inputs.shadow_members[others] if attack.needs_shadows else None,
            target_query=asked[index] if asked is not None else None,
            shadow_query=asked[others] if asked is not None and attack.needs_shadows else None,
        ), settings))
    return np.stack(rows)
