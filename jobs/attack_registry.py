"""What every attack receives and how it is registered: the contract between attacks and the planner.

An attack is a scoring function over `AttackInputs`, registered in `ATTACKS` with its own frozen
settings dataclass whose fields are a subset of `AttackSettings` (the `attack.*` config section).
This module holds that contract apart from the attacks themselves, so an attack defined in its
own module (`jobs.shokri`) can import it without importing every other attack.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

from jobs.registry import Registry


@dataclass(frozen=True)
class AttackInputs:
    """What an attack may look at: target logits, labels, and shadows with known membership."""

    target_logits: np.ndarray  # (n, classes)
    labels: np.ndarray  # (n,)
    shadow_logits: Optional[np.ndarray] = None  # (shadows, n, classes)
    shadow_members: Optional[np.ndarray] = None  # (shadows, n) bool
    # The answers of the attack's model query (`jobs.queries`), when it asks one: for the target
    # (augmented logits: (augmentations, n, classes); Merlin: (n,)) and stacked for the shadows.
    target_query: Optional[np.ndarray] = None
    shadow_query: Optional[np.ndarray] = None
    # Labels of the records the shadows were asked about, when those are not the target's:
    # disjoint shadow data (`shadow.disjoint_data`), where shadows answer on their own records.
    # None: the shadows' records are the target's, `labels`.
    shadow_labels: Optional[np.ndarray] = None

    @property
    def holdout_labels(self) -> np.ndarray:
        """Labels of the shadows' records: what calibration on the shadows sees."""
        return self.labels if self.shadow_labels is None else self.shadow_labels


@dataclass
class AttackSettings:
    """Attack knobs that are part of the sweep config (`attack.*`).

    The config's schema only: an attack never sees it whole, but the fields its own settings
    dataclass names (`Attack.settings_from`).  Every field here is read by some attack
    (tests/test_attack_keys.py holds that).
    """

    # LiRA: one variance for all records ("global") or one per record; "auto" uses the global
    # one below GLOBAL_VARIANCE_BELOW shadow models, as Carlini et al. recommend for few shadows.
    lira_variance: str = "auto"
    # Loss attack and Merlin's loss: p_y is clamped here before the log, so a confident miss does
    # not give -inf and (Merlin, as Jayaraman et al.'s code) every p_y below it has one loss.
    loss_clamp: float = 1e-6
    # LiRA query augmentations (images only): the mirror image and the (2·shift + 1)² grid of
    # translations by up to ± augment_shift pixels, reflect-padded (`jobs.queries`).
    augment_flip: bool = False
    augment_shift: int = 0
    # Offline LiRA over augmentations: "log_cdf" averages the one-sided log Φ(z) per augmentation
    # (Carlini et al.'s test), "zscore" averages z (`lira_offline`).
    lira_offline_combine: str = "log_cdf"
    # Yeom et al.'s Adversary 1 says "member" with probability 1 − loss/B; null: B = −ln(loss_clamp),
    # the largest clamped loss.  Its coin flips are drawn from `seed`.
    loss_bound: Optional[float] = None
    seed: int = 0
    # Merlin (Jayaraman et al.): T Gaussian perturbations of σ relative to each input's L2 norm.
    merlin_perturbations: int = 100
    merlin_sigma: float = 0.01
    merlin_seed: int = 0
    # Morgan: its loss and Merlin thresholds are chosen on the shadows for this FPR.
    morgan_fpr: float = 0.01
    # ... and must find at least this share of the shadows' members (no one-record boxes).
    morgan_min_tpr: float = 0.01
    # PDTP: the first this-many members of each target are left out, once per training seed.
    pdtp_records: int = 10
    pdtp_seeds: int = 3


@dataclass(frozen=True)
class Attack:
    """A registered attack: its scoring function and what the planner must know about it."""

    score: Callable[[AttackInputs, Any], np.ndarray]
    # Its frozen settings dataclass: exactly the `attack.*` settings score and query read.
    settings_type: type
    needs_shadows: bool
    # Scores a mechanism's release rather than a network's logits (its rates are then exact).
    reads_release: bool = False
    # The model query it needs, as (kind, settings), or None (`jobs.queries`).
    asks: Optional[Callable[[Any], Optional[tuple[str, dict]]]] = None
    # A per-record measure (PDTP), reported as its own figures rather than as a precision.
    measures_records: bool = False

    def settings_from(self, config: AttackSettings) -> Any:
        """Its settings, each field taken by name from the sweep's `attack.*` section."""
        return self.settings_type(**{field.name: getattr(config, field.name)
                                     for field in dataclasses.fields(self.settings_type)})

    def settings_of(self, items: tuple[tuple[str, Any], ...]) -> Any:
        """Its settings back from their key items (`settings_items`), as a task receives them."""
        return self.settings_type(**dict(items))

    def query(self, settings: Any) -> Optional[tuple[str, dict]]:
        return self.asks(settings) if self.asks is not None else None


def settings_items(settings: Any) -> tuple[tuple[str, Any], ...]:
    """An attack's settings as (name, value) pairs in field order: what its scores' key holds.

    The order is part of stored keys (they hash a list, not a mapping): the fields of each
    settings dataclass are declared in the order of the hand-kept tuples they replaced, so keys
    of scores stored before stay as they were.  Reordering fields re-keys that attack.
    """
    return tuple((field.name, getattr(settings, field.name)) for field in dataclasses.fields(settings))


#: Every attack, by its `grid.attack` name, in registration order.
ATTACKS: Registry[Attack] = Registry("attack")


def register_attack(name: str, settings_type: type, *, needs_shadows: bool, reads_release: bool = False,
                    asks: Optional[Callable[[Any], Optional[tuple[str, dict]]]] = None,
                    measures_records: bool = False) -> Callable[[Callable], Callable]:
    """Decorator: register the scoring function as attack `name`, reading `settings_type`.

    The settings type must be a frozen dataclass whose fields are `AttackSettings` fields: the
    attack is handed an instance of it and nothing else, so it can read no other setting.
    """
    params = getattr(settings_type, "__dataclass_params__", None)
    if params is None or not params.frozen:
        raise TypeError(f"attack {name!r}: settings {settings_type.__name__} must be a frozen dataclass")
    unknown = {f.name for f in dataclasses.fields(settings_type)} - \
        {f.name for f in dataclasses.fields(AttackSettings)}
    if unknown:
        raise TypeError(f"attack {name!r} reads {sorted(unknown)}, which are not attack.* settings")

    def register(score: Callable) -> Callable:
        ATTACKS.add(name, Attack(score, settings_type, needs_shadows, reads_release, asks,
                                 measures_records))
        return score
    return register


@dataclass(frozen=True)
class NoSettings:
    """For attacks that read no setting: their key holds none."""
