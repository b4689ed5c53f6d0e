"""RMIA (Zarifzadeh, Liu, Mahloujifar, Shokri, ICML 2024): a likelihood ratio taken *relative*
to population records z, the strong attack when reference (shadow) models are few.

For a record x and the target θ, with Pr(x|θ) the softmax probability of x's label at
temperature T (`rmia_temperature`) and Pr(x) its mean over the reference models:

    ratio(x) = Pr(x|θ) / Pr(x),    LR(x, z) = ratio(x) / ratio(z),
    score(x) = share of population records z with LR(x, z) > γ    (`rmia_gamma`).

* Online (`rmia`): Pr(x) averages every shadow; complementary shadow pairs make that half IN,
  half OUT for every record, as the paper's balanced reference set.
* Offline (`rmia_offline`): only OUT shadows, with the paper's linear approximation
  Pr(x) = ½((1 + a)·Pr_OUT(x) + (1 − a)) (`rmia_offline_a`; null searches a on the shadows).
* Population z: up to `rmia_population` pool records past the evaluation set, which every model
  of the attack holds logits for (`AttackInputs.population_logits`); their Pr(z) is computed
  the same way (offline: their OUT shadows).
* The means over references are trimmed (`rmia_trim`, as `scipy.stats.trim_mean`: the lowest
  and highest int(trim · count) values of each record cut; no cut below 1/trim references).

Vectorised: the signal is LiRA's class-first pass over (references, records, classes); the
score sorts the population's ratios once and counts, per record, the z below ratio(x)/γ with
one binary search, so no records × population matrix is formed.

The three public versions disagree; the choices, and which one each default follows, are in
the README (section "RMIA").
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Optional

import numpy as np
from scipy.special import expit

from jobs.attack_registry import AttackInputs
from jobs.settings import AtLeast, Between, Setting
from jobs.signals import logit_confidence

log = logging.getLogger(__name__)

#: The a values searched when `rmia_offline_a` is null (ML Privacy Meter's library grid).
OFFLINE_A_GRID = tuple(round(0.1 * step, 1) for step in range(11))


@dataclass(frozen=True)
class RmiaSettings:
    """What online RMIA reads: γ, the signal's temperature, the trimmed mean, the population."""

    rmia_gamma: float = Setting(2.0, Between(0, low_open=True), "RMIA (Zarifzadeh et al.): z "
                                "counts when Pr(x|θ)/Pr(x) over Pr(z|θ)/Pr(z) exceeds γ.").field()
    rmia_temperature: float = Setting(2.0, Between(0, low_open=True), "RMIA: Pr(·|θ) is the "
                                      "softmax of the label at this temperature.").field()
    rmia_trim: float = Setting(0.2, Between(0, 0.5, high_open=True), "RMIA: Pr(·) is the mean "
                               "over reference models with this share cut at each end (scipy's "
                               "trim_mean).").field()
    rmia_population: int = Setting(10000, AtLeast(1), "RMIA: z are at most this many pool records "
                                   "past the evaluation set.").field()


@dataclass(frozen=True)
class RmiaOfflineSettings(RmiaSettings):
    """What offline RMIA reads: online RMIA's settings and a (null: searched on the shadows)."""

    rmia_offline_a: Optional[float] = Setting(
        0.33, Between(0, 1, nullable=True, null_means="searched"),
        "Offline RMIA: Pr(x) = ½((1 + a)·Pr_OUT(x) + (1 − a)); null: a searched on the "
        "shadows.").field()


def offline_shadows_needed(settings: RmiaOfflineSettings) -> tuple[int, str]:
    """With a searched (null), a is fit by attacking one shadow with the others: four shadows,
    so that each search still has a pair of references."""
    if settings.rmia_offline_a is not None:
        return 2, ""
    return 4, ("attack.rmia_offline_a=null: a is searched by attacking a shadow with the others; "
               "or set a (0.33: the paper's code)")


def true_class_probability(logits: np.ndarray, labels: np.ndarray, temperature: float) -> np.ndarray:
    """softmax(logits / T) at each record's label, for any leading batch shape: (..., n).

    The logistic of LiRA's φ = log p − log(1 − p) at the tempered logits: φ's class-first pass
    (`jobs.signals.logit_confidence`) is the fast one, and the logistic in float64 keeps p
    exact down to ~1e-308 (floored at the smallest normal float, so no ratio is 0/0).
    """

    logits = np.asarray(logits)
    if temperature != 1:
        logits = np.divide(logits, temperature, dtype=np.float32 if logits.dtype == np.float32 else None)
    return np.maximum(expit(logit_confidence(logits, labels)), np.finfo(np.float64).tiny)


def trimmed_mean(values: np.ndarray, use: Optional[np.ndarray], trim: float) -> np.ndarray:
    """Per record (column), the mean of the references (rows) that `use` marks, with the lowest
    and highest int(trim · count) of them cut, as `scipy.stats.trim_mean` cuts (NaN: none used)."""
    if use is None:
        use = np.ones(values.shape, dtype=bool)
    ordered = np.sort(np.where(use, values, np.inf), axis=0)  # unused references sort last
    count = use.sum(axis=0)
    cut = np.floor(trim * count).astype(np.int64)
    sums = np.vstack([np.zeros(values.shape[1]), np.cumsum(np.where(np.isinf(ordered), 0.0, ordered), axis=0)])
    columns = np.arange(values.shape[1])
    with np.errstate(invalid="ignore", divide="ignore"):
        return (sums[count - cut, columns] - sums[cut, columns]) / (count - 2 * cut)


def _marginal(signals: np.ndarray, members: np.ndarray, trim: float, offline_a: Optional[float],
              what: str) -> np.ndarray:
    """Pr(·) of each record over the references: all of them (online), or its OUT references
    through ½((1 + a)·Pr_OUT + (1 − a)) (offline, `offline_a` not None)."""
    if offline_a is None:
        return trimmed_mean(signals, None, trim)
    out = ~np.asarray(members, dtype=bool)
    lacking = int((out.sum(axis=0) == 0).sum())
    if lacking:
        raise ValueError(f"offline RMIA: {lacking} {what} have no OUT reference model (every "
                         "shadow trained on them); use complementary shadow pairs")
    return 0.5 * ((1.0 + offline_a) * trimmed_mean(signals, out, trim) + (1.0 - offline_a))


def relative_scores(ratio_x: np.ndarray, ratio_z: np.ndarray, gamma: float) -> np.ndarray:
    """Share of z with ratio(x)/ratio(z) > γ, for each x: the z whose ratio is below ratio(x)/γ,
    counted by binary search in the sorted population (ratios are positive)."""
    ordered = np.sort(ratio_z)
    return np.searchsorted(ordered, ratio_x / gamma, side="left") / len(ordered)


def _population(inputs: AttackInputs, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The first `size` population records: target logits, labels, shadow logits and masks."""
    if inputs.population_logits is None or inputs.shadow_population_logits is None \
            or len(inputs.population_logits) == 0:
        raise ValueError("RMIA needs population records: pool records past the evaluation set "
                         "that the target and every shadow hold")
    members = inputs.shadow_population_members
    if members is None:
        members = np.zeros(inputs.shadow_population_logits.shape[:2], dtype=bool)
    return (inputs.population_logits[:size], inputs.population_labels[:size],
            inputs.shadow_population_logits[:, :size], members[:, :size])


def _rmia(inputs: AttackInputs, settings: RmiaSettings, offline_a: Optional[float]) -> np.ndarray:
    """RMIA's scores with `offline_a` (None: online)."""
    if inputs.shadow_logits is None or inputs.shadow_members is None:
        raise ValueError("RMIA needs shadow models")
    if inputs.shadow_labels is not None:
        raise ValueError("RMIA averages shadows on the target's own records; disjoint shadow "
                         "data (shadow.disjoint_data) has none")
    z_logits, z_labels, z_shadow_logits, z_members = _population(inputs, settings.rmia_population)
    temperature, trim = settings.rmia_temperature, settings.rmia_trim
    x_marginal = _marginal(true_class_probability(inputs.shadow_logits, inputs.labels, temperature),
                           inputs.shadow_members, trim, offline_a, "evaluation records")
    z_marginal = _marginal(true_class_probability(z_shadow_logits, z_labels, temperature),
                           z_members, trim, offline_a, "population records")
    ratio_x = true_class_probability(inputs.target_logits, inputs.labels, temperature) / x_marginal
    ratio_z = true_class_probability(z_logits, z_labels, temperature) / z_marginal
    return relative_scores(ratio_x, ratio_z, settings.rmia_gamma)


def rmia_online(inputs: AttackInputs, settings: RmiaSettings) -> np.ndarray:
    """RMIA online (Zarifzadeh et al. 2024): the target's Pr(x|θ)/Pr(x) against that of
    population records z, Pr(x) over every shadow (half IN, half OUT per record)."""
    return _rmia(inputs, settings, None)


def search_offline_a(inputs: AttackInputs, settings: RmiaOfflineSettings) -> float:
    """The a of `OFFLINE_A_GRID` under which offline RMIA best attacks (AUC) the first shadow,
    with the other shadows as its references: ML Privacy Meter's library tunes a this way on a
    model whose membership it knows; the target's membership is never read."""
    from jobs.metrics import roc_auc

    if inputs.shadow_logits is None or inputs.shadow_members is None:
        raise ValueError("RMIA needs shadow models")
    _, z_labels, z_shadow_logits, z_members = _population(inputs, settings.rmia_population)
    held_out = AttackInputs(
        inputs.shadow_logits[0], inputs.labels, inputs.shadow_logits[1:], inputs.shadow_members[1:],
        population_logits=z_shadow_logits[0], population_labels=z_labels,
        shadow_population_logits=z_shadow_logits[1:], shadow_population_members=z_members[1:])
    aucs = [roc_auc(_rmia(held_out, settings, a), inputs.shadow_members[0]) for a in OFFLINE_A_GRID]
    best = OFFLINE_A_GRID[int(np.argmax(aucs))]  # the smallest a among equal AUCs
    log.info("offline RMIA: a = %.1f (AUC %.4f on the first shadow; searched %s)", best, max(aucs),
             ", ".join(f"{a:.1f}: {auc:.3f}" for a, auc in zip(OFFLINE_A_GRID, aucs)))
    return best


def rmia_offline(inputs: AttackInputs, settings: RmiaOfflineSettings) -> np.ndarray:
    """RMIA offline: Pr(x) from OUT shadows only, through the linear approximation in a."""
    offline_a = settings.rmia_offline_a
    if offline_a is None:
        offline_a = search_offline_a(inputs, settings)
    return _rmia(inputs, settings, offline_a)
