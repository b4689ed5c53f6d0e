"""Membership-inference attacks as vectorized scoring functions over stored logits.

Every attack maps the target model's logits on the evaluation records (and, for attacks that
need them, the logits and membership masks of shadow models) to one score per record, higher
meaning "more likely a member".  Attacks never train: models come from the content-keyed store,
so adding an attack to a finished sweep costs only scoring.

Each attack registers itself in `ATTACKS` where it is defined (`register_attack`), with its own
frozen settings dataclass: the fields are exactly the `attack.*` settings it reads (its model
query's included), each declared once with its default, rule and meaning (`jobs.settings`), and
the attack is handed only that object.  Its scores' content key is derived from those fields
(`settings_items`), so a setting it reads cannot be left out of the key, and a setting it does
not read cannot split the store.  This module holds the attacks that need no module of their
own: the loss attacks, the baselines, the scoring of PDTP's and Merlin's query answers, and the
canary attacks.  LiRA, RMIA and Shokri et al.'s attack are in `jobs.attacks.lira`,
`jobs.attacks.rmia` and `jobs.attacks.shokri`; the contract they all import is
`jobs.attacks.contract`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
from scipy.special import logsumexp

from jobs.attacks.contract import (GRADIENT_CANARIES, INPUT_CANARIES, TRAINING_RUNS, AttackInputs,
                                   NoSettings, register_attack)
from jobs.attacks.lira import LIRA_VARIANCE, online_ratio
from jobs.attacks.merlin import morgan_decisions, morgan_thresholds
from jobs.engine.canary_columns import CRAFTINGS, FINAL, INPUT_RECIPES, ITERATE_LIKELIHOOD_RATIO
from jobs.settings import AtLeast, Between, OneOf, Setting


def clamped_log_p(logits: np.ndarray, labels: np.ndarray, clamp: float) -> np.ndarray:
    """log p_y of each record's label, clamped below at log(clamp): −(the clamped loss)."""
    logits = np.asarray(logits, dtype=np.float64)
    log_probs = logits - logsumexp(logits, axis=-1, keepdims=True)
    log_p_true = np.take_along_axis(log_probs, labels[:, None], axis=-1)[:, 0]
    return np.maximum(log_p_true, np.log(clamp))


LOSS_CLAMP = Setting(1e-6, Between(0, 1, low_open=True, high_open=True),
                     "Loss attack and Merlin's loss: p_y is clamped here before the log, so a "
                     "confident miss does not give -inf and (Merlin, as Jayaraman et al.'s code) "
                     "every p_y below it has one loss.")


@dataclass(frozen=True)
class LossSettings:
    """What the loss attack reads: the clamp on p_y."""

    loss_clamp: float = LOSS_CLAMP.field()


@register_attack("loss", LossSettings, needs_shadows=False, scores_losses=True)
def loss_threshold(inputs: AttackInputs, settings: LossSettings) -> np.ndarray:
    """Yeom et al.: members have low loss; score = −cross-entropy with p_y clamped."""
    return clamped_log_p(inputs.target_logits, inputs.labels, settings.loss_clamp)


@dataclass(frozen=True)
class LossRandomizedSettings(LossSettings):
    """What Adversary 1 reads: the loss clamp, the bound B and the seed of its coin flips."""

    loss_bound: Optional[float] = Setting(
        None, Between(0, low_open=True, nullable=True, null_means="−ln(loss_clamp)"),
        "Yeom et al.'s Adversary 1 says member with probability 1 − loss/B; null: B = "
        "−ln(loss_clamp), the largest clamped loss.").field()
    seed: int = Setting(0, AtLeast(0), "The seed of Adversary 1's coin flips.").field()


def yeom_loss_bound(settings: Any) -> float:
    """B of Yeom et al.'s Adversary 1: `loss_bound`, else −ln(loss_clamp), the largest loss the
    clamp lets through."""
    return float(settings.loss_bound if settings.loss_bound is not None
                 else -np.log(settings.loss_clamp))


@register_attack("loss_randomized", LossRandomizedSettings, needs_shadows=False,
                 loss_bound=yeom_loss_bound)
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


@register_attack("always_member", NoSettings, needs_shadows=False, decides=True, reads_model=False,
                 baseline=True)
def always_member(inputs: AttackInputs, settings: NoSettings) -> np.ndarray:
    """The baseline: say "member" for everyone; its precision is the share of members, under
    every policy (its scores are its decisions: no threshold is chosen over them)."""
    return np.ones(len(inputs.labels))


@register_attack("output_threshold", NoSettings, needs_shadows=False, reads_release=True)
def output_threshold(inputs: AttackInputs, settings: NoSettings) -> np.ndarray:
    """Say "member" when the released output is high: the optimal test against the exact
    mechanism of `+experiment=bound_check`.

    The mechanism releases a noisy copy of the membership bit, stored in the first logit column.
    """
    return np.asarray(inputs.target_logits, dtype=np.float64)[:, 0]


@dataclass(frozen=True)
class PdtpSettings:
    """What PDTP reads: how many members are left out, and over how many training seeds."""

    pdtp_records: int = Setting(10, AtLeast(1), "PDTP: the first this-many members of each "
                                "target are left out, once per training seed.", smoke=2).field()
    pdtp_seeds: int = Setting(3, AtLeast(1), "PDTP: the training seeds each leave-one-out "
                              "model is averaged over.", smoke=2).field()


def _pdtp_query(settings: PdtpSettings) -> tuple[str, dict]:
    return "pdtp", {"records": settings.pdtp_records, "seeds": settings.pdtp_seeds}


@register_attack("pdtp", PdtpSettings, needs_shadows=False, asks=_pdtp_query, measures_records=True,
                 retrains="pdtp_records")
def pdtp_scores(inputs: AttackInputs, settings: PdtpSettings) -> np.ndarray:
    """PDTP (Long et al.): the seed-averaged leave-one-out PDTP of each measured record (NaN
    for the others).

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

    merlin_perturbations: int = Setting(100, AtLeast(1), "Merlin (Jayaraman et al.): T Gaussian "
                                        "perturbations of each input.", smoke=10).field()
    merlin_sigma: float = Setting(0.01, Between(0, low_open=True), "Merlin: the perturbations' σ, "
                                  "relative to each input's L2 norm.").field()
    merlin_seed: int = Setting(0, AtLeast(0), "Merlin: the seed of its perturbations.").field()
    loss_clamp: float = LOSS_CLAMP.field()


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

    morgan_fpr: float = Setting(0.01, Between(0, 1, low_open=True, high_open=True),
                                "Morgan: its loss and Merlin thresholds are chosen on the shadows "
                                "for this FPR.").field()
    morgan_min_tpr: float = Setting(0.01, Between(0, 1, high_open=True), "Morgan: ... and must find "
                                    "at least this share of the shadows' members (no one-record "
                                    "boxes).").field()


@register_attack("morgan", MorganSettings, needs_shadows=True, asks=_merlin_query)
def morgan(inputs: AttackInputs, settings: MorganSettings) -> np.ndarray:
    """Jayaraman et al.'s Morgan: member iff φ_L ≤ loss ≤ φ_U and merlin ≥ φ_M (1 or 0).

    The three thresholds are chosen on the shadow models, whose membership is known, for the
    highest PPV within `morgan_fpr`; the target's membership is never read.
    """
    if (inputs.shadow_logits is None or inputs.shadow_members is None or inputs.shadow_query is None
            or inputs.target_query is None):
        raise ValueError("Morgan needs shadow models and the merlin query of target and shadows")
    shadow_loss = -np.stack([clamped_log_p(logits, inputs.holdout_labels, settings.loss_clamp)
                             for logits in inputs.shadow_logits])
    thresholds = morgan_thresholds(shadow_loss, inputs.shadow_query, inputs.shadow_members,
                                   fpr=settings.morgan_fpr, min_tpr=settings.morgan_min_tpr)
    loss = -clamped_log_p(inputs.target_logits, inputs.labels, settings.loss_clamp)
    return morgan_decisions(loss, inputs.target_query, thresholds).astype(np.float64)


CANARY_INPUT_COUNT = Setting(100, AtLeast(1), "Input canaries every model holds, each in D "
                             "with the model's p (`jobs.engine.canaries`).", smoke=20)
CANARY_INPUT_RECIPE = Setting("mislabeled", OneOf(INPUT_RECIPES, "recipes"),
                              "How input canaries are made: mislabeled pool records past every "
                              "pool, or noise inputs with random labels.")
CANARY_SEED = Setting(0, AtLeast(0), "The seed of the canaries' choice (part of every model's key "
                      "when a canary attack is in the grid).")


@dataclass(frozen=True)
class CanaryInputSettings:
    """What the input-canary loss attack reads: the loss clamp and which canaries are planted."""

    loss_clamp: float = LOSS_CLAMP.field()
    canary_input_count: int = CANARY_INPUT_COUNT.field()
    canary_input_recipe: str = CANARY_INPUT_RECIPE.field()
    canary_seed: int = CANARY_SEED.field()


@register_attack("canary_input_loss", CanaryInputSettings, needs_shadows=False,
                 evaluates=INPUT_CANARIES)
def canary_input_loss(inputs: AttackInputs, settings: CanaryInputSettings) -> np.ndarray:
    """The loss attack on the input canaries (`jobs.engine.canaries`): the final model's −loss."""
    return clamped_log_p(inputs.target_logits, inputs.labels, settings.loss_clamp)


@dataclass(frozen=True)
class CanaryLiraSettings:
    """What LiRA on input canaries reads: its variance fit and which canaries are planted."""

    lira_variance: str = LIRA_VARIANCE.field()
    canary_input_count: int = CANARY_INPUT_COUNT.field()
    canary_input_recipe: str = CANARY_INPUT_RECIPE.field()
    canary_seed: int = CANARY_SEED.field()


@register_attack("canary_input_lira", CanaryLiraSettings, needs_shadows=True,
                 evaluates=INPUT_CANARIES, fits_per_record=True)
def canary_input_lira(inputs: AttackInputs, settings: CanaryLiraSettings) -> np.ndarray:
    """Online LiRA on the input canaries, with shadows that hold or lack each canary by their
    own canary masks (no query augmentations: canaries are scored from stored logits)."""
    return online_ratio(inputs, settings.lira_variance)


@dataclass(frozen=True)
class CanaryGradientSettings:
    """What the gradient-canary attacks read: which canaries are planted."""

    canary_gradient_count: int = Setting(1000, AtLeast(1), "Gradient canaries every model holds, "
                                         "each in D with the model's p.", smoke=200).field()
    canary_gradient_norm: float = Setting(1000.0, Between(1), "A gradient canary's norm in "
                                          "multiples of train.max_grad_norm, so clipping brings "
                                          "it to C.").field()
    canary_seed: int = CANARY_SEED.field()


@register_attack("canary_gradient_final", CanaryGradientSettings, needs_shadows=False,
                 evaluates=GRADIENT_CANARIES, threat_model="white_box_final",
                 scores_final_displacement=True)
def canary_gradient_final(inputs: AttackInputs, settings: CanaryGradientSettings) -> np.ndarray:
    """Nasr et al.'s white-box adversary with the final weights: how far each canary's weight
    moved against its planted gradient, (θ0 − θT)_j (the initial weights are public)."""
    return np.asarray(inputs.observations, dtype=np.float64)[:, FINAL]


@register_attack("canary_gradient_iterates", CanaryGradientSettings, needs_shadows=False,
                 evaluates=GRADIENT_CANARIES, threat_model="white_box_iterates",
                 scores_likelihood_ratio=True)
def canary_gradient_iterates(inputs: AttackInputs,
                             settings: CanaryGradientSettings) -> np.ndarray:
    """Nasr et al.'s adversary that sees every iterate: the subsampled Gaussian's log-likelihood
    ratio of each step's recovered gradient at the canary's weight, summed over the steps.

    The Neyman–Pearson test for one canary; at q = 1 the plain sum ranks the same.
    """
    return np.asarray(inputs.observations, dtype=np.float64)[:, ITERATE_LIKELIHOOD_RATIO]


#: The most black-box runs one model's audit trains: 500 times the paper's 200, days of training
#: already (each run is a whole training), and what one task holds (every run's logits) stays small.
FINAL_RUNS_CAP = 100_000


@dataclass(frozen=True)
class CanaryFinalSettings:
    """What the black-box final-model audit reads: how many runs, its canary, and how its
    initial weights are crafted."""

    canary_final_runs: int = Setting(200, Between(2, FINAL_RUNS_CAP, integer=True),
                                     "Training runs from crafted weights per model, each holding "
                                     "the blank canary with the model's p (`jobs.audits.blackbox`): "
                                     "the audit's observations.", smoke=16).field()
    canary_final_label: int = Setting(9, AtLeast(0), "The blank canary's label (Annamalai & De "
                                      "Cristofaro's 9).").field()
    canary_final_public: int = Setting(1000, AtLeast(1), "Public pool records past every "
                                       "model's pool that the crafted weights are pre-trained on.",
                                       smoke=200).field()
    canary_final_crafting: str = Setting("decoy", OneOf(CRAFTINGS, "recipes"), "How the crafted "
                                         "weights are pre-trained on the public records: "
                                         "\"decoy\" (with blank images under another label, "
                                         "full-batch Adam) or \"plain\" (the paper's notebook: "
                                         "SGD on the public records alone).").field()
    canary_final_pretrain_steps: int = Setting(4690, AtLeast(1), "SGD steps of the \"plain\" "
                                               "crafting, batches of 32 (the paper's: 5 epochs "
                                               "of 30 000 records).", smoke=100).field()


@register_attack("canary_crafted_final", CanaryFinalSettings, needs_shadows=False,
                 evaluates=TRAINING_RUNS)
def canary_crafted_final(inputs: AttackInputs, settings: CanaryFinalSettings) -> np.ndarray:
    """Annamalai & De Cristofaro's black-box audit: each run's final model's −loss on a blank
    canary, the runs trained from crafted worst-case weights (`jobs.audits.blackbox`); unclamped, as
    the canary's probability starts far below any clamp."""
    logits = np.asarray(inputs.target_logits, dtype=np.float64)
    log_probs = logits - logsumexp(logits, axis=-1, keepdims=True)
    return np.take_along_axis(log_probs, inputs.labels[:, None], axis=-1)[:, 0]
