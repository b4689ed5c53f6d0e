"""RMIA (Zarifzadeh, Liu, Mahloujifar, Shokri, ICML 2024): a likelihood ratio taken *relative*
to population records z, the strong attack when reference (shadow) models are few.

For a record x and the target θ, with Pr(x|θ) the signal of x's label (`rmia_signal`) and Pr(x)
its mean over the reference models:

    ratio(x) = Pr(x|θ) / Pr(x),    LR(x, z) = ratio(x) / ratio(z),
    score(x) = share of population records z with LR(x, z) > γ    (`rmia_gamma`).

* Signal: the softmax of the label at temperature T (`rmia_temperature`), or the authors'
  Taylor soft-margin softmax (`taylor_soft_margin`: `rmia_taylor_m`, `rmia_taylor_n`).
* Online (`rmia`): Pr(x) averages every shadow; complementary shadow pairs make that half IN,
  half OUT for every record, as the paper's balanced reference set.
* Offline (`rmia_offline`): only OUT shadows, with the paper's linear approximation
  Pr(x) = ½((1 + a)·Pr_OUT(x) + (1 − a)) (`rmia_offline_a`; null searches a on the shadows).
* Population z: up to `rmia_population` records of the dataset's held-out split, which neither
  the target nor any reference trained on, answered by each model's `held_out_logits` query
  (`jobs.attacks.queries`); their Pr(z) is computed the same way.
* Query augmentations (`augment_flip`, `augment_shift`): each view gets its own ratios, and a
  pair (x, z) counts when a strict majority of the views has LR > γ (the authors' vote).
* The means over references are trimmed (`rmia_trim`, as `scipy.stats.trim_mean`: the lowest
  and highest int(trim · count) values of each record cut; no cut below 1/trim references).

Vectorised: the softmax signal is LiRA's class-first pass over (references, records, classes);
with one view the score sorts the population's ratios once and counts, per record, the z below
ratio(x)/γ with one binary search, so no records × population matrix is formed (the vote forms
it in blocks of records).

The three public versions disagree; the choices, and which one each default follows, are in
docs/choices.md (section "RMIA").
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
from scipy.special import expit

from jobs.attacks.contract import AttackInputs, register_attack
from jobs.attacks.lira import AUGMENT_FLIP, AUGMENT_SHIFT
from jobs.attacks.signals import logit_confidence
from jobs.settings import AtLeast, Between, OneOf, Setting

log = logging.getLogger(__name__)

#: The a values searched when `rmia_offline_a` is null (ML Privacy Meter's library grid).
OFFLINE_A_GRID = tuple(round(0.1 * step, 1) for step in range(11))
#: Pr(x|θ): the tempered softmax, or the authors' Taylor soft-margin softmax.
SIGNALS = ("softmax", "taylor_soft_margin")
#: Cells of the (records × population) vote formed at once, so memory stays bounded.
VOTE_BLOCK = 1 << 24


@dataclass(frozen=True)
class RmiaSettings:
    """What online RMIA reads: γ, the signal, the trimmed mean, the population, the views."""

    rmia_gamma: float = Setting(1.0, Between(0, low_open=True), "RMIA (Zarifzadeh et al.): z "
                                "counts when Pr(x|θ)/Pr(x) over Pr(z|θ)/Pr(z) exceeds γ.").field()
    rmia_temperature: float = Setting(2.0, Between(0, low_open=True), "RMIA: Pr(·|θ) is the "
                                      "softmax of the label at this temperature.").field()
    rmia_trim: float = Setting(0.2, Between(0, 0.5, high_open=True), "RMIA: Pr(·) is the mean "
                               "over reference models with this share cut at each end (scipy's "
                               "trim_mean).").field()
    rmia_population: int = Setting(10000, AtLeast(1), "RMIA: z are at most this many records of "
                                   "the held-out split, which no model trained on.").field()
    rmia_signal: str = Setting("softmax", OneOf(SIGNALS, "signals"), "RMIA: Pr(x|θ) as the "
                               "tempered softmax of the label, or the authors' Taylor "
                               "soft-margin softmax.").field()
    rmia_taylor_m: float = Setting(0.6, Between(0), "RMIA's taylor_soft_margin: the margin "
                                   "taken off the label's tempered logit.").field()
    rmia_taylor_n: int = Setting(4, AtLeast(1), "RMIA's taylor_soft_margin: terms of e^v's "
                                 "Taylor series kept, 1 + v + … + v^(n−1)/(n−1)!, as the "
                                 "authors' code counts them.").field()
    augment_flip: bool = AUGMENT_FLIP.field()
    augment_shift: int = AUGMENT_SHIFT.field()


@dataclass(frozen=True)
class RmiaOfflineSettings(RmiaSettings):
    """What offline RMIA reads: online RMIA's settings and a (null: searched on the shadows)."""

    rmia_offline_a: Optional[float] = Setting(
        0.3, Between(0, 1, nullable=True, null_means="searched"),
        "Offline RMIA: Pr(x) = ½((1 + a)·Pr_OUT(x) + (1 − a)); null: a searched on the "
        "shadows.").field()


def offline_shadows_needed(settings: RmiaOfflineSettings) -> tuple[int, str]:
    """With a searched (null), a is fit by attacking one shadow with the others: four shadows,
    so that each search still has a pair of references."""
    if settings.rmia_offline_a is not None:
        return 2, ""
    return 4, ("attack.rmia_offline_a=null: a is searched by attacking a shadow with the others; "
               "or set a (0.3: the paper's ICML configurations)")


def held_out_query(settings: RmiaSettings) -> tuple[str, dict]:
    """RMIA's query (`jobs.attacks.queries` answers it): the evaluation records and at most
    `rmia_population` held-out records, in the views `augment_flip` and `augment_shift` ask for."""
    asked: dict[str, Any] = {"held_out": settings.rmia_population}
    if not settings.augment_flip and settings.augment_shift == 0:
        return "held_out_logits", asked
    return "held_out_augmented_logits", {**asked, "flip": settings.augment_flip,
                                         "shift": settings.augment_shift}


def true_class_probability(logits: np.ndarray, labels: np.ndarray, temperature: float) -> np.ndarray:
    """softmax(logits / T) at each record's label, for any leading batch shape: (..., n).

    The logistic of LiRA's φ = log p − log(1 − p) at the tempered logits: φ's class-first pass
    (`jobs.attacks.signals.logit_confidence`) is the fast one, and the logistic in float64 keeps p
    exact down to ~1e-308 (floored at the smallest normal float, so no ratio is 0/0).
    """

    logits = np.asarray(logits)
    if temperature != 1:
        logits = np.divide(logits, temperature, dtype=np.float32 if logits.dtype == np.float32 else None)
    return np.maximum(expit(logit_confidence(logits, labels)), np.finfo(np.float64).tiny)


def taylor_soft_margin(logits: np.ndarray, labels: np.ndarray, temperature: float, margin: float,
                       terms: int) -> np.ndarray:
    """The authors' Taylor soft-margin softmax at each record's label, for any leading batch
    shape: with v = logits / T and t(v) = Σ_{i<terms} vⁱ/i!, t(v_y − m) / (t(v_y − m) + Σ_{j≠y} t(v_j)),
    floored at the smallest normal float."""
    scaled = np.asarray(logits, dtype=np.float64) / temperature

    def series(values: np.ndarray) -> np.ndarray:
        total, power = np.ones_like(values), np.ones_like(values)
        for order in range(1, terms):
            power = power * values / order
            total = total + power
        return total

    label_logit = np.take_along_axis(scaled, np.broadcast_to(labels, scaled.shape[:-1])[..., None],
                                     axis=-1)[..., 0]
    label_term = series(label_logit - margin)
    # With an even number of terms the series is of odd degree and goes negative (v < −1.6 at
    # 4 terms), which the authors' code lets through; floored as the softmax signal is, so no
    # ratio changes sign.
    return np.maximum(label_term / (series(scaled).sum(axis=-1) - series(label_logit) + label_term),
                      np.finfo(np.float64).tiny)


def signal(logits: np.ndarray, labels: np.ndarray, settings: RmiaSettings) -> np.ndarray:
    """Pr(x|θ) under `rmia_signal`, for any leading batch shape: (..., n)."""
    if settings.rmia_signal == "taylor_soft_margin":
        return taylor_soft_margin(logits, labels, settings.rmia_temperature, settings.rmia_taylor_m,
                                  settings.rmia_taylor_n)
    return true_class_probability(logits, labels, settings.rmia_temperature)


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


def voted_scores(ratio_x: np.ndarray, ratio_z: np.ndarray, gamma: float) -> np.ndarray:
    """Share of z for which a strict majority of the views has ratio(x)/ratio(z) > γ, for each
    x: ratios of shape (views, records) and (views, population).  One view: `relative_scores`."""
    views, population = ratio_z.shape
    if views == 1:
        return relative_scores(ratio_x[0], ratio_z[0], gamma)
    block = max(1, VOTE_BLOCK // (views * population))
    scores = np.empty(ratio_x.shape[1])
    for start in range(0, ratio_x.shape[1], block):
        votes = (ratio_x[:, start:start + block, None] > gamma * ratio_z[:, None, :]).sum(axis=0)
        scores[start:start + block] = (2 * votes > views).mean(axis=1)
    return scores


def _views(values: np.ndarray, batch_dims: int) -> np.ndarray:
    """`values` with a views axis after its `batch_dims` leading axes (one view if it has none)."""
    return values if values.ndim == batch_dims + 3 else np.expand_dims(values, batch_dims)


def _population(inputs: AttackInputs, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The first `size` population records, each with a views axis: target logits (views, z,
    classes), labels, shadow logits (shadows, views, z, classes) and masks (shadows, z)."""
    if inputs.population_logits is None or inputs.shadow_population_logits is None \
            or inputs.population_labels is None or inputs.population_logits.shape[-2] == 0:
        raise ValueError("RMIA needs population records: held-out records that the target and "
                         "every shadow were asked about (the held_out_logits query)")
    logits, shadow_logits = _views(inputs.population_logits, 0), _views(inputs.shadow_population_logits, 1)
    members = inputs.shadow_population_members
    if members is None:
        members = np.zeros((shadow_logits.shape[0], shadow_logits.shape[2]), dtype=bool)
    return (logits[:, :size], inputs.population_labels[:size], shadow_logits[:, :, :size],
            members[:, :size])


def _ratios(target: np.ndarray, shadows: np.ndarray, labels: np.ndarray, members: np.ndarray,
            settings: RmiaSettings, offline_a: Optional[float], what: str) -> np.ndarray:
    """Pr(·|θ)/Pr(·) per view and record, (views, records): target logits (views, records,
    classes), shadow logits (shadows, views, records, classes), masks (shadows, records)."""
    count, views, records = shadows.shape[:3]
    marginal = _marginal(signal(shadows, labels, settings).reshape(count, views * records),
                         np.tile(members, (1, views)), settings.rmia_trim, offline_a, what)
    return signal(target, labels, settings) / marginal.reshape(views, records)


def _rmia(inputs: AttackInputs, settings: RmiaSettings, offline_a: Optional[float]) -> np.ndarray:
    """RMIA's scores with `offline_a` (None: online).  The evaluation records' views come from
    the query when it was asked (`target_query`, `shadow_query`), else from their logits."""
    if inputs.shadow_logits is None or inputs.shadow_members is None:
        raise ValueError("RMIA needs shadow models")
    if inputs.shadow_labels is not None:
        raise ValueError("RMIA averages shadows on the target's own records; disjoint shadow "
                         "data (shadow.disjoint_data) has none")
    z_logits, z_labels, z_shadow_logits, z_members = _population(inputs, settings.rmia_population)
    if inputs.target_query is not None and inputs.shadow_query is not None:  # asked
        x_logits, x_shadow_logits = inputs.target_query, inputs.shadow_query
    else:
        x_logits, x_shadow_logits = _views(inputs.target_logits, 0), _views(inputs.shadow_logits, 1)
    ratio_x = _ratios(x_logits, x_shadow_logits, inputs.labels, inputs.shadow_members, settings,
                      offline_a, "evaluation records")
    ratio_z = _ratios(z_logits, z_shadow_logits, z_labels, z_members, settings, offline_a,
                      "population records")
    return voted_scores(ratio_x, ratio_z, settings.rmia_gamma)


@register_attack("rmia", RmiaSettings, needs_shadows=True, asks=held_out_query,
                 fits_per_record=True)
def rmia_online(inputs: AttackInputs, settings: RmiaSettings) -> np.ndarray:
    """RMIA online (Zarifzadeh et al. 2024): the target's Pr(x|θ)/Pr(x) against that of
    population records z, Pr(x) over every shadow (half IN, half OUT per record)."""
    return _rmia(inputs, settings, None)


def search_offline_a(inputs: AttackInputs, settings: RmiaOfflineSettings,
                     references: slice = slice(1, None)) -> float:
    """The a of `OFFLINE_A_GRID` under which offline RMIA best attacks (AUC) the first shadow,
    with the shadows `references` picks as its references (by default all the others): ML
    Privacy Meter tunes a this way on a model whose membership it knows; the target's
    membership is never read."""
    from jobs.metrics import roc_auc

    if inputs.shadow_logits is None or inputs.shadow_members is None:
        raise ValueError("RMIA needs shadow models")
    _, z_labels, z_shadow_logits, z_members = _population(inputs, settings.rmia_population)
    asked = inputs.shadow_query
    held_out = AttackInputs(
        inputs.shadow_logits[0], inputs.labels, inputs.shadow_logits[references],
        inputs.shadow_members[references],
        target_query=None if asked is None else asked[0],
        shadow_query=None if asked is None else asked[references],
        population_logits=z_shadow_logits[0], population_labels=z_labels,
        shadow_population_logits=z_shadow_logits[references],
        shadow_population_members=z_members[references])
    aucs = [roc_auc(_rmia(held_out, settings, a), inputs.shadow_members[0]) for a in OFFLINE_A_GRID]
    best = OFFLINE_A_GRID[int(np.argmax(aucs))]  # the smallest a among equal AUCs
    log.info("offline RMIA: a = %.1f (AUC %.4f on the first shadow; searched %s)", best, max(aucs),
             ", ".join(f"{a:.1f}: {auc:.3f}" for a, auc in zip(OFFLINE_A_GRID, aucs)))
    return best


@register_attack("rmia_offline", RmiaOfflineSettings, needs_shadows=True, asks=held_out_query,
                 fits_per_record=True, shadows_needed=offline_shadows_needed)
def rmia_offline(inputs: AttackInputs, settings: RmiaOfflineSettings) -> np.ndarray:
    """RMIA offline: Pr(x) from OUT shadows only, through the linear approximation in a."""
    offline_a = settings.rmia_offline_a
    if offline_a is None:
        offline_a = search_offline_a(inputs, settings)
    return _rmia(inputs, settings, offline_a)


@dataclass(frozen=True)
class RmiaLowCostSettings(RmiaOfflineSettings):
    """What low-cost RMIA reads: offline RMIA's settings and how many reference pairs."""

    rmia_references: int = Setting(1, AtLeast(1), "Low-cost RMIA: the OUT reference models "
                                   "of each record (the paper's 1 or 2): the first this many "
                                   "complementary shadow pairs are read, no other.").field()


def low_cost_shadows_needed(settings: RmiaLowCostSettings) -> tuple[int, str]:
    """Its reference pairs, and with a searched (null) the pair after the first too: a is fit
    by attacking shadow 0 with one OUT reference of another pair, as ML Privacy Meter does."""
    pairs = 2 * settings.rmia_references
    if settings.rmia_offline_a is not None:
        return pairs, f"attack.rmia_references={settings.rmia_references} reads that many shadow pairs"
    return max(pairs, 4), ("attack.rmia_offline_a=null: a is searched by attacking shadow 0 "
                           "with the next shadow pair; or set a (0.3: the paper's ICML configurations)")


def first_references(inputs: AttackInputs, count: int) -> AttackInputs:
    """`inputs` in which each evaluation record keeps only its first `count` OUT shadows and each
    population record (which every shadow lacks) the first 2·`count` shadows: the others are
    marked IN, which offline RMIA never reads.  With complementary pairs in order that is the
    first `count` pairs; with one shadow held out (the calibrated policy) the next OUT ones."""
    if inputs.shadow_members is None or inputs.shadow_logits is None:
        raise ValueError("RMIA needs shadow models")
    out = ~np.asarray(inputs.shadow_members, dtype=bool)
    kept = out & (np.cumsum(out, axis=0) <= count)
    population: dict[str, Any] = {}
    if inputs.shadow_population_logits is not None:
        shadows, size = inputs.shadow_population_logits.shape[0], inputs.shadow_population_logits.shape[-2]
        z_out = np.ones((shadows, size), dtype=bool)
        if inputs.shadow_population_members is not None:
            z_out = ~np.asarray(inputs.shadow_population_members, dtype=bool)
        z_kept = z_out & (np.cumsum(z_out, axis=0) <= 2 * count)
        population = dict(shadow_population_members=~z_kept)
    return dataclasses.replace(inputs, shadow_members=~kept, **population)


@register_attack("rmia_low_cost", RmiaLowCostSettings, needs_shadows=True, asks=held_out_query,
                 fits_per_record=True, shadows_needed=low_cost_shadows_needed,
                 shadows_read=lambda settings: low_cost_shadows_needed(settings)[0])
def rmia_low_cost(inputs: AttackInputs, settings: RmiaLowCostSettings) -> np.ndarray:
    """RMIA offline with 1 or 2 OUT references per record (`rmia_references` shadow pairs), a
    fixed or searched by attacking shadow 0 with one reference of the next pair (the paper's
    low-cost setting).

    Pr(z) averages the 2k references, all OUT for z; ML Privacy Meter's code keeps the k largest
    of them (a side effect of its sort), which we do not (docs/attacks.md)."""
    offline_a = settings.rmia_offline_a
    if offline_a is None:
        offline_a = search_offline_a(inputs, settings, references=slice(2, 4))
    return _rmia(first_references(inputs, settings.rmia_references), settings, offline_a)
