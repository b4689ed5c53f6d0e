"""What every attack receives and how it is registered: the contract between attacks and the planner.

An attack is a scoring function over `AttackInputs`, registered in `ATTACKS` with its own frozen
settings dataclass, each field a `jobs.settings.Setting` declared beside the attack (its default,
its rule, its meaning), and with what it needs declared on its `Attack` entry (shadows, a query,
a population, canaries, retraining, its threat model).  The `attack.*` config section and its
range checks derive from these (`jobs.attacks.section.AttackSettings`).  This module holds that contract
apart from the attacks themselves, so an attack defined in its own module (`jobs.attacks.rmia`) can
import it without importing every other attack.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass
from collections.abc import Collection
from typing import Any, Callable, Optional

import numpy as np

from jobs.registry import Registry
from jobs.settings import declared

#: What an attack scores (`Attack.evaluates`): the pool's evaluation records, canaries, or one
#: crafted canary's final loss in each of many training runs from crafted weights (`jobs.audits.blackbox`).
RECORDS, INPUT_CANARIES, GRADIENT_CANARIES = "records", "input_canaries", "gradient_canaries"
TRAINING_RUNS = "training_runs"
#: Which adversary a cell is (`Attack.threat_model`, the results' `threat_model` column): the
#: final model's outputs only, its weights, or every iterate of training.
THREAT_MODELS = ("black_box_final", "white_box_final", "white_box_iterates")


@dataclass(frozen=True)
class AttackInputs:
    """What an attack may look at: target logits, labels, and shadows with known membership."""

    target_logits: np.ndarray  # (n, classes)
    labels: np.ndarray  # (n,)
    shadow_logits: Optional[np.ndarray] = None  # (shadows, n, classes)
    shadow_members: Optional[np.ndarray] = None  # (shadows, n) bool
    # The answers of the attack's model query (`jobs.attacks.queries`), when it asks one: for the target
    # (augmented logits: (augmentations, n, classes); Merlin: (n,)) and stacked for the shadows.
    target_query: Optional[np.ndarray] = None
    shadow_query: Optional[np.ndarray] = None
    # Labels of the records the shadows were asked about, when those are not the target's:
    # disjoint shadow data (`shadow.disjoint_data`), where shadows answer on their own records.
    # None: the shadows' records are the target's, `labels`.
    shadow_labels: Optional[np.ndarray] = None
    # Gradient canaries' white-box statistics (`jobs.engine.canaries`): (n, 3) for the target and
    # (shadows, n, 3) for the shadows.
    observations: Optional[np.ndarray] = None
    shadow_observations: Optional[np.ndarray] = None
    # Population records (RMIA's z): held-out records, answered by the attack's held-out query
    # (`jobs.attacks.queries.QueryKind.held_out`).  The target's logits ([views,] m, classes), their
    # labels (m,), the shadows' logits (shadows, [views,] m, classes) and their membership
    # masks (shadows, m; None: no shadow trained on them).
    population_logits: Optional[np.ndarray] = None
    population_labels: Optional[np.ndarray] = None
    shadow_population_logits: Optional[np.ndarray] = None
    shadow_population_members: Optional[np.ndarray] = None

    @property
    def holdout_labels(self) -> np.ndarray:
        """Labels of the shadows' records: what calibration on the shadows sees."""
        return self.labels if self.shadow_labels is None else self.shadow_labels


@dataclass(frozen=True)
class Attack:
    """A registered attack: its scoring function and what the planner must know about it."""

    score: Callable[[AttackInputs, Any], np.ndarray]
    # Its frozen settings dataclass: exactly the `attack.*` settings score and query read.
    settings_type: type
    needs_shadows: bool
    # Scores a mechanism's release rather than a network's logits (its rates are then exact).
    reads_release: bool = False
    # The model query it needs, as (kind, settings), or None (`jobs.attacks.queries`).
    asks: Optional[Callable[[Any], Optional[tuple[str, dict]]]] = None
    # A per-record measure (PDTP), reported as its own figures rather than as a precision.
    measures_records: bool = False
    # What it scores: RECORDS, INPUT_CANARIES, GRADIENT_CANARIES or TRAINING_RUNS.
    evaluates: str = RECORDS
    threat_model: str = "black_box_final"
    # Fits IN/OUT statistics per record on shadows that hold or lack the target's own records
    # (LiRA, RMIA): disjoint shadow data cannot serve it, and leaving one shadow out (the
    # calibrated policy) needs at least 4.
    fits_per_record: bool = False
    # Its scores are its decisions (1: member, 0: not): every policy takes them as they are,
    # none chooses a threshold (the always-member baseline accepts everyone under each).
    decides: bool = False
    # Retrains each target without some of its members (PDTP): the name of its setting that
    # says how many, which every target must hold; None: it never retrains.
    retrains: Optional[str] = None
    # The fewest shadow models its settings need, and why: (count, reason); None: two (one pair).
    shadows_needed: Optional[Callable[[Any], tuple[int, str]]] = None
    # How many of the shadows it reads, from its settings (low-cost RMIA: its reference pairs);
    # None: every shadow of the sweep, if it needs shadows.  What `bench.attacks_priced` prices.
    shadows_read: Optional[Callable[[Any], int]] = None
    # Reads nothing of the model (the always-member baseline, a random guess): it applies to
    # any model, a network's or an exact mechanism's.
    reads_model: bool = True
    # The baseline, drawn as the grey line in every test's panel and charted last: its
    # precision is the share of members, the prior, because it says "member" for everyone.
    # Declared, not read off `reads_model`: a random guess reads no model either, yet its
    # precision is its own, a test's.  It must read no model and decide (`register_attack`).
    baseline: bool = False
    # B, the loss bound its scores divide by, from its settings (Yeom et al.'s Adversary 1: the
    # row's `loss_bound`); None: it has none.
    loss_bound: Optional[Callable[[Any], float]] = None
    # Its score is each record's −loss (Yeom et al.'s threshold adversary): the generalization
    # report reads its scores as losses.
    scores_losses: bool = False
    # Its score is each gradient canary's subsampled-Gaussian log-likelihood ratio summed over
    # the steps, at the training's σ and q (canary_gradient_iterates): a statistic whose law is
    # known for every noise level of DP-SGD's family (`sweeper.bounds.family_law_audit`).
    scores_likelihood_ratio: bool = False
    # Its score is each gradient canary's final displacement in units of the claimed step C/B
    # (canary_gradient_final): under SGD without momentum, c·Binomial(T, q) + N(0, T·σ′²) in and
    # N(0, T·σ′²) out, a law known for every clip and noise (`sweeper.bounds.final_law_audit`).
    scores_final_displacement: bool = False

    @property
    def independent(self) -> bool:
        """Its observations are independent trials of one mechanism: gradient canaries (each
        its own weight, noise and draws) or training runs (each its own noise), not records
        or input canaries of one model — what Clopper–Pearson and Gaussian DP count on."""
        return self.evaluates in (GRADIENT_CANARIES, TRAINING_RUNS)

    def settings_from(self, config: Any) -> Any:
        """Its settings, each field taken by name from the sweep's `attack.*` section."""
        return self.settings_type(**{field.name: getattr(config, field.name)
                                     for field in dataclasses.fields(self.settings_type)})

    def settings_of(self, items: tuple[tuple[str, Any], ...]) -> Any:
        """Its settings back from their key items (`settings_items`), as a task receives them."""
        return self.settings_type(**dict(items))

    def query(self, settings: Any) -> Optional[tuple[str, dict]]:
        return self.asks(settings) if self.asks is not None else None

    def shadows_it_reads(self, settings: Any, shadows: int) -> int:
        """How many of a sweep's `shadows` it reads with `settings`."""
        if not self.needs_shadows:
            return 0
        return min(shadows, self.shadows_read(settings)) if self.shadows_read is not None else shadows

    def fewest_shadows(self, settings: Any) -> tuple[int, str]:
        """The fewest shadow models it needs with `settings`, and why (two: one mask pair)."""
        return self.shadows_needed(settings) if self.shadows_needed is not None else (2, "")


def settings_items(settings: Any) -> tuple[tuple[str, Any], ...]:
    """An attack's settings as (name, value) pairs in field order: what its scores' key holds.

    The order is part of stored keys (they hash a list, not a mapping): the fields of each
    settings dataclass are declared in the order of the hand-kept tuples they replaced, so keys
    of scores stored before stay as they were.  Reordering fields re-keys that attack.
    """
    return tuple((field.name, getattr(settings, field.name)) for field in dataclasses.fields(settings))


#: Every attack, by its `grid.attack` name, in registration order.
ATTACKS: Registry[Attack] = Registry("attack")


def register_attack(name: str, settings_type: type, *, needs_shadows: bool,
                    **facts: Any) -> Callable[[Callable], Callable]:
    """Decorator: register the scoring function as attack `name`, reading `settings_type`,
    with what else it declares as `facts`: `Attack`'s fields by name (each declared, with its
    default and meaning, there alone).

    Raises:
        TypeError: the settings type is not a frozen dataclass whose every field is declared
            with `Setting(...).field()` (the attack is handed an instance of it and nothing
            else, so it can read no other setting); a fact `Attack` does not have; a threat
            model not in `THREAT_MODELS`; a baseline that reads the model or does not decide
            (its precision would not be the share of members).
    """
    params = getattr(settings_type, "__dataclass_params__", None)
    if params is None or not params.frozen:
        raise TypeError(f"attack {name!r}: settings {settings_type.__name__} must be a frozen dataclass")
    declared(settings_type)
    unknown = set(facts) - {spec.name for spec in dataclasses.fields(Attack)}
    if unknown:
        raise TypeError(f"attack {name!r}: {sorted(unknown)} are not facts an attack declares")
    if facts.get("threat_model", Attack.threat_model) not in THREAT_MODELS:
        raise TypeError(f"attack {name!r}: threat model {facts['threat_model']!r} is not one of "
                        f"{THREAT_MODELS}")
    if facts.get("baseline") and (facts.get("reads_model", True) or not facts.get("decides")):
        raise TypeError(f"attack {name!r}: a baseline reads no model (reads_model=False) and "
                        "decides (decides=True): its precision is then the share of members")

    def register(score: Callable) -> Callable:
        ATTACKS.add(name, Attack(score, settings_type, needs_shadows, **facts))
        return score
    return register


@dataclass(frozen=True)
class NoSettings:
    """For attacks that read no setting: their key holds none."""


def needs(attack: Attack, held_out_kinds: Collection[str]) -> list[str]:
    """What `attack` needs beyond the target's stored logits, in words, from its registration
    (`held_out_kinds`: the query kinds asked about held-out records, `jobs.attacks.queries`)."""
    found = []
    if attack.needs_shadows:
        found.append("shadows on the target's records" if attack.fits_per_record else "shadows")
    if attack.asks is not None and attack.retrains is None:
        asked_by_default = attack.query(attack.settings_type())
        if asked_by_default is not None and asked_by_default[0] in held_out_kinds:
            found.append("a query of the stored weights on held-out records")
        else:
            found.append("a query of the stored weights" + ("" if asked_by_default else
                                                            " (with query augmentations)"))
    if attack.retrains is not None:
        found.append("retraining")
    if attack.evaluates == INPUT_CANARIES:
        found.append("input canaries in every model")
    if attack.evaluates == GRADIENT_CANARIES:
        found.append("gradient canaries in every model (DP-SGD with SGD)")
    if attack.evaluates == TRAINING_RUNS:
        found.append("training runs from crafted weights in every model")
    if attack.reads_release:
        found.append("an exact mechanism's release")
    return found


def markdown_table(attacks: Registry[Attack], held_out_kinds: Collection[str]) -> str:
    """docs/attacks.md's attack table, from the registry: each `grid.attack` value, its scoring
    function's first paragraph, what it needs, its threat model and its `attack.*` settings."""
    lines = ["| grid value | attack | needs | threat model | settings |", "|---|---|---|---|---|"]
    for name, attack in attacks.items():
        doc = inspect.getdoc(attack.score)
        if doc is None:
            raise ValueError(f"attack {name!r}: its scoring function has no docstring for the table")
        summary = " ".join(doc.split("\n\n")[0].split())
        settings = ", ".join(f"`attack.{spec.name}`" for spec in dataclasses.fields(attack.settings_type))
        cells = [f"`{name}`", summary, ", ".join(needs(attack, held_out_kinds)) or "—",
                 f"`{attack.threat_model}`", settings or "—"]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines)


def holdout_scores(attack: Attack, inputs: AttackInputs, settings: Any) -> np.ndarray:
    """The attack's scores with each shadow model in turn in the target's place: (shadows, n).

    These are the labelled scores the `calibrated` policy picks its threshold on.  An attack that
    uses shadow models gets the *other* shadows, so no model ever scores against itself.  With
    disjoint shadow data they are scores on the shadows' own records (`holdout_labels`).
    `settings` are the attack's own (an `Attack.settings_type`).
    """
    if inputs.shadow_members is None:
        raise ValueError("holdout scores need shadow models")
    if attack.needs_shadows and inputs.shadow_logits is None:
        raise ValueError("holdout scores for an attack that reads shadow models need their logits")
    count = len(inputs.shadow_members)
    rows = []
    for index in range(count):
        others = np.arange(count) != index
        asked, logits = inputs.shadow_query, inputs.shadow_logits
        population: dict[str, Any] = {}
        if inputs.shadow_population_logits is not None:
            z_members = inputs.shadow_population_members
            population = dict(population_logits=inputs.shadow_population_logits[index],
                              population_labels=inputs.population_labels,
                              shadow_population_logits=inputs.shadow_population_logits[others],
                              shadow_population_members=None if z_members is None else z_members[others])
        rows.append(attack.score(AttackInputs(
            logits[index] if logits is not None else inputs.target_logits, inputs.holdout_labels,
            logits[others] if logits is not None and attack.needs_shadows else None,
            inputs.shadow_members[others] if attack.needs_shadows else None,
            target_query=asked[index] if asked is not None else None,
            shadow_query=asked[others] if asked is not None and attack.needs_shadows else None,
            observations=(inputs.shadow_observations[index]
                          if inputs.shadow_observations is not None else None),
            **population,
        ), settings))
    return np.stack(rows)
