"""Expand a sweep config into content-keyed work: models to train, attacks to score, cells.

A key is a hash of exactly the settings that determine an artifact, so identical work is done
once per store.  Shadow models do not depend on the target's p, trial or attack, so each (ε, δ)
trains them once and every target shares them; at ε = ∞ δ plays no part, so it leaves the key.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Optional

from jobs.attacks.contract import (ATTACKS, GRADIENT_CANARIES, INPUT_CANARIES, RECORDS,
                                   TRAINING_RUNS, settings_items)
from jobs.attacks.queries import QUERIES
from jobs.datasets import ArrayDataset
from jobs.engine.canaries import CanaryDesign
from jobs.engine.training import TrainOptions, TrainSettings
from jobs.models import MEMBERSHIP_MECHANISM
from jobs.policies import POLICIES
from sweeper.bounds import epsilon_for_precision
from sweeper.config.schema import STAND_IN_POOL, SweepConfig, sampling_rates
from sweeper.formats import format_epsilon
from sweeper.grid.recipes import public_size_for, training_recipes
from sweeper.axes import COORDINATES, swept_in

#: Bump when the meaning of stored artifacts changes, so old ones are not reused.
#: 4: noise calibrated on the exact step count, independent random streams per purpose.
ARTIFACT_VERSION = 4



def content_key(kind: str, settings: dict[str, Any]) -> str:
    payload = json.dumps({"kind": kind, "version": ARTIFACT_VERSION, **settings}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:24]


def seed_from(*parts: Any) -> int:
    return int(hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:8], 16)


def target_mask_seed(cfg: SweepConfig, trial: int) -> int:
    """The seed of trial `trial`'s target mask: the same at every ε and p, so a trial's targets
    hold the same records wherever the pools overlap."""
    return seed_from(cfg.seed, "target", trial)


@dataclass(frozen=True)
class DataSpec:
    """The settings that decide which records a model can see (not where the files live).

    Synthetic stand-in data (`dataset.synthetic`) are other records than the real dataset's, so
    they carry their shape and classes into the key and never share artifacts with it.  A model
    draws from `pool_size` records starting at record `offset` of the sweep's pool: 0 for every
    target, past every target's records for disjoint shadows (`shadow.disjoint_data`).
    """

    name: str
    test_size: int
    pool_size: Optional[int]
    synthetic: bool = False
    input_shape: tuple[int, ...] = ()
    num_classes: int = 0
    offset: int = 0

    @property
    def records_needed(self) -> Optional[int]:
        """How many of the sweep's pool records this model's pool reaches (None: all)."""
        return None if self.pool_size is None else self.offset + self.pool_size

    def pool_of(self, data: ArrayDataset) -> ArrayDataset:
        """This model's pool within the sweep's data: `pool_size` records from `offset` on."""
        if self.offset == 0:
            return data.first_records(self.pool_size)
        end = self.records_needed
        if end is None or end > len(data.pool_y):
            raise ValueError(f"the pool holds {len(data.pool_y)} records; a model drawing from "
                             f"records {self.offset}..{end} does not fit")
        return dataclasses.replace(data, pool_x=data.pool_x[self.offset:end],
                                   pool_y=data.pool_y[self.offset:end])


def _without_default_offsets(settings: dict[str, Any]) -> dict[str, Any]:
    """Key settings with `offset` left out where it is 0, `precision` where it is fp32,
    `secure_noise` where it is off, `canaries` where there are none (the black-box runs' where
    there are none, their crafting where it is "decoy") and `public_size` where q
    comes from the private |D|, so keys from before each setting existed keep their form."""
    if settings["data"]["offset"] == 0:
        del settings["data"]["offset"]
    if settings["train"]["precision"] == "fp32":
        del settings["train"]["precision"]
    if not settings["train"]["secure_noise"]:
        del settings["train"]["secure_noise"]
    if settings["canaries"] is None:
        del settings["canaries"]
    elif not settings["canaries"]["final_runs"]:  # no black-box runs: keys as before them
        for name in ("final_runs", "final_label", "final_public_offset", "final_public_count",
                     "final_crafting", "final_pretrain_steps"):
            del settings["canaries"][name]
    elif settings["canaries"]["final_crafting"] == "decoy":  # keys as before the plain recipe
        for name in ("final_crafting", "final_pretrain_steps"):
            del settings["canaries"][name]
    if settings["public_size"] is None:
        del settings["public_size"]
    return settings


@dataclass(frozen=True)
class ModelSpec:
    role: str  # "target" or "shadow"
    data: DataSpec
    train: TrainSettings
    sample_rate: float  # p: each pool record is in the training set with this probability
    mask_seed: int
    mask_complement: bool
    index: int  # trial for targets, shadow index for shadows
    # The canaries it holds (`jobs.engine.canaries`), each in D with probability `sample_rate`.
    canaries: Optional[CanaryDesign] = None
    # The public size DP-SGD's rate and divisor come from (`public_size_for`); None: its |D|.
    public_size: Optional[int] = None

    @property
    def records_needed(self) -> Optional[int]:
        """How many of the sweep's pool records it reads (None: all): its pool's, and the
        mislabeled canaries' past every pool."""
        if self.data.records_needed is None:
            return None
        return max(self.data.records_needed,
                   self.canaries.records_needed if self.canaries is not None else 0)

    @functools.cached_property  # a pure function of the frozen fields, asked for ~40 times
    def key(self) -> str:
        settings = _without_default_offsets(dataclasses.asdict(self))
        del settings["role"], settings["index"]
        return content_key("model", settings)

    @property
    def description(self) -> str:
        """Which model this is, for people: role, data, ε, p and trial or shadow index."""
        who = f"trial={self.index}" if self.role == "target" else f"shadow={self.index}"
        return f"{self.role} {self.data.name} ε={format_epsilon(self.train.epsilon)} p={self.sample_rate:g} {who}"

    @property
    def label(self) -> str:
        """How its training task is named in the Ray dashboard and in logs."""
        return f"train {self.description}"


@dataclass(frozen=True)
class QuerySpec:
    """A question put to one stored model about the evaluation records (`jobs.attacks.queries`)."""

    kind: str
    model: str  # model key
    eval_records: int
    settings: tuple[tuple[str, Any], ...]

    @functools.cached_property
    def key(self) -> str:
        return content_key("query", dataclasses.asdict(self))


@dataclass(frozen=True)
class AttackSpec:
    attack: str
    target: str  # model key
    shadows: tuple[str, ...]  # model keys, in shadow-index order (empty if unused)
    eval_records: int
    # The attack's own settings (`jobs.attacks.contract.settings_items`): exactly what it reads.
    settings: tuple[tuple[str, Any], ...]
    queries: tuple[str, ...] = ()  # query keys for the target, then each shadow (or none)
    # Where the shadows' evaluation records start in the sweep's pool: 0 when they are the
    # target's; past every target's pool with disjoint shadow data (their own records).
    shadow_records_from: int = 0

    @functools.cached_property
    def key(self) -> str:
        settings = dataclasses.asdict(self)
        if settings["shadow_records_from"] == 0:  # shared-pool keys stay as they were
            del settings["shadow_records_from"]
        return content_key("scores", settings)


@dataclass(frozen=True)
class Cell:
    """One row of the results table."""

    dataset: str
    model: str
    epsilon: float
    delta: float
    p: float
    target_precision: float  # the fixed bound β this cell's ε was solved for (NaN: none)
    attack: str
    policy: str
    trial: int
    scores: AttackSpec
    tpr_floor: float
    bound_form: str
    violation_alpha: float
    calibration: tuple[tuple[str, Any], ...]  # CalibrationSettings items; empty unless calibrated
    audit_alpha: float = 0.05  # level of the one-sided epsilon_audit* claims (metrics.audit_alpha)
    # The value of each recipe axis its cell stands at (`sweeper.axes.RECIPE_AXES`), and which
    # of them the grid sweeps: their values enter the key, as they tell this cell from others.
    recipe: tuple[tuple[str, Any], ...] = ()
    swept: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return content_key("cell", {
            "scores": self.scores.key, "policy": self.policy, "tpr_floor": self.tpr_floor,
            "bound_form": self.bound_form, "violation_alpha": self.violation_alpha,
            "audit_alpha": self.audit_alpha, "calibration": self.calibration,
            "epsilon": self.epsilon, "delta": self.delta, "p": self.p,
            "target_precision": self.target_precision,
            # the swept recipe values: without DP a clip norm's cells share their scores
            **({"recipe": [item for item in self.recipe if item[0] in self.swept]}
               if self.swept else {}),
        })

    @property
    def coordinates(self) -> dict[str, Any]:
        """Every coordinate's value (`sweeper.axes.COORDINATES`), the recipe axes' included
        (None for a cell planned without them)."""
        recipe = dict(self.recipe)
        return {name: recipe[name] if name in recipe else getattr(self, name, None)
                for name in COORDINATES}


@dataclass(frozen=True)
class SweepPlan:
    config: SweepConfig
    models: dict[str, ModelSpec]
    queries: dict[str, QuerySpec]
    attacks: dict[str, AttackSpec]
    cells: tuple[Cell, ...]

    @property
    def key(self) -> str:
        return content_key("sweep", {"name": self.config.name, "cells": sorted(c.key for c in self.cells)})


def build_plan(cfg: SweepConfig) -> SweepPlan:
    """The sweep as content-keyed work: for each (ε, δ) and training recipe
    (`training_recipes`), its shadows; for each trial and p, a target; for each attack, its
    scores; for each policy, a cell."""
    plan = _Planner(cfg)
    by_privacy: dict[tuple[float, float], list[tuple[float, float]]] = defaultdict(list)
    for epsilon, delta, p, target_precision in operating_points(cfg):
        by_privacy[(epsilon, delta)].append((p, target_precision))
    for (epsilon, delta), settings in by_privacy.items():
        for train, recipe in training_recipes(cfg, epsilon, delta):
            shadows = plan.shadows(train)
            for trial in cfg.grid.trial:
                for p, target_precision in settings:
                    target = plan.model("target", train, p, trial)
                    for attack in cfg.grid.attack:
                        plan.score(attack, train, recipe, target, shadows,
                                   (delta, p, target_precision, trial))
    return SweepPlan(cfg, plan.models, plan.queries, plan.attacks, tuple(plan.cells))


class _Planner:
    """`build_plan`'s state: the work found so far, each piece once by its key."""

    def __init__(self, cfg: SweepConfig):
        self.cfg = cfg
        self.models: dict[str, ModelSpec] = {}
        self.queries: dict[str, QuerySpec] = {}
        self.attacks: dict[str, AttackSpec] = {}
        self.cells: list[Cell] = []
        # Does any policy pick its thresholds on labelled shadows?
        self.calibrating = any(POLICIES[policy].calibrates for policy in cfg.grid.policy)
        self.calibration = tuple(sorted(dataclasses.asdict(cfg.calibration).items()))
        self.shadow_offset = disjoint_shadow_offset(cfg, self.data_for)
        self.canaries = canary_design(cfg, self.data_for, self.shadow_offset)
        self.swept = swept_in(cfg.grid)

    def data_for(self, rate: float, offset: int = 0) -> DataSpec:
        cfg = self.cfg
        pool = pool_size_for(cfg, rate)
        if not cfg.dataset.synthetic:
            return DataSpec(cfg.dataset.name, cfg.dataset.test_size, pool, offset=offset)
        return DataSpec(cfg.dataset.name, cfg.dataset.test_size, pool or STAND_IN_POOL, True,
                        tuple(cfg.dataset.input_shape), cfg.dataset.num_classes, offset)

    def uses_shadows(self, attack: str) -> bool:
        """Attacks built on shadows, and every test whose threshold the shadows calibrate; a
        measure (PDTP) has no threshold."""
        return ATTACKS[attack].needs_shadows or (self.calibrating
                                                 and not ATTACKS[attack].measures_records)

    def model(self, role: str, train: TrainSettings, rate: float, index: int) -> str:
        """A target (trial `index`) or a shadow (`index`: complementary pairs), added once."""
        shadow = role == "shadow"
        data = self.data_for(rate, self.shadow_offset if shadow else 0)
        seed = seed_from(self.cfg.seed, "shadow-pair", index // 2) if shadow else \
            target_mask_seed(self.cfg, index)
        complement = shadow and index % 2 == 1
        spec = ModelSpec(role, data, train, rate, mask_seed=seed, mask_complement=complement,
                         index=index, canaries=self.canaries,
                         public_size=public_size_for(self.cfg, train, (data.pool_size, data.offset),
                                                     rate, complement))
        self.models.setdefault(spec.key, spec)
        return spec.key

    def shadows(self, train: TrainSettings) -> tuple[str, ...]:
        needed = any(self.uses_shadows(attack) for attack in self.cfg.grid.attack)
        return tuple(self.model("shadow", train, self.cfg.shadow.p, index)
                     for index in range(self.cfg.shadow.count if needed else 0))

    def score(self, attack: str, train: TrainSettings, recipe: tuple[tuple[str, Any], ...],
              target: str, shadows: tuple[str, ...], where: tuple[float, float, float, int]) -> None:
        """`attack`'s scores on `target` (added once) and a cell for each policy, at `where`:
        the cell's (δ, p, target precision, trial); its ε is the recipe's."""
        cfg = self.cfg
        delta, p, target_precision, trial = where
        with_shadows = shadows if self.uses_shadows(attack) else ()
        chosen = ATTACKS[attack].settings_from(cfg.attack)
        spec = AttackSpec(
            attack=attack, target=target, shadows=with_shadows,
            eval_records=evaluated_records(attack, cfg), settings=settings_items(chosen),
            queries=ask_models(ATTACKS[attack].query(chosen), (target, *with_shadows),
                               cfg.dataset.eval_records, self.queries),
            shadow_records_from=self.shadow_offset if with_shadows else 0,
        )
        self.attacks.setdefault(spec.key, spec)
        for policy in cfg.grid.policy:
            self.cells.append(Cell(
                dataset=cfg.dataset.name, model=train.model, epsilon=train.epsilon,
                delta=delta, p=p, target_precision=target_precision, attack=attack,
                policy=policy, trial=trial, scores=spec, tpr_floor=cfg.metrics.tpr_floor,
                bound_form=cfg.metrics.bound_form, violation_alpha=cfg.metrics.violation_alpha,
                calibration=self.calibration if POLICIES[policy].calibrates else (),
                audit_alpha=cfg.metrics.audit_alpha, recipe=recipe, swept=self.swept,
            ))


def evaluated_records(attack: str, cfg: SweepConfig) -> int:
    """How many records the attack scores: the pool's evaluation records, or its canaries."""
    evaluates = ATTACKS[attack].evaluates
    if evaluates == INPUT_CANARIES:
        return cfg.attack.canary_input_count
    if evaluates == GRADIENT_CANARIES:
        return cfg.attack.canary_gradient_count
    if evaluates == TRAINING_RUNS:
        return cfg.attack.canary_final_runs
    return cfg.dataset.eval_records


def canary_design(cfg: SweepConfig, data_for, shadow_offset: int) -> Optional[CanaryDesign]:
    """The canaries every model of the sweep holds, or None when no attack in the grid reads
    any: input canaries for the input-canary attacks, gradient canaries for the gradient ones.
    Mislabeled canaries are taken from the first pool records past every model's pool."""
    kinds = {ATTACKS[attack].evaluates for attack in cfg.grid.attack} - {RECORDS}
    if not kinds:
        return None
    settings, offset = cfg.attack, 0
    inputs = INPUT_CANARIES in kinds
    mislabeled = inputs and settings.canary_input_recipe == "mislabeled"
    runs = TRAINING_RUNS in kinds
    if mislabeled or runs:
        ends = [data_for(p).records_needed for _, _, p, _ in operating_points(cfg)]
        ends.append(data_for(cfg.shadow.p, shadow_offset).records_needed)
        if None in ends:
            raise ValueError("mislabeled canaries and crafted weights' public records need "
                             "dataset.members or dataset.pool_size: a model drawing from the "
                             "whole pool leaves no records for them")
        offset = max(ends)
    return CanaryDesign(
        input_count=settings.canary_input_count if inputs else 0,
        input_recipe=settings.canary_input_recipe if inputs else "",
        input_offset=offset,
        gradient_count=settings.canary_gradient_count if GRADIENT_CANARIES in kinds else 0,
        gradient_norm=float(settings.canary_gradient_norm) if GRADIENT_CANARIES in kinds else 0.0,
        seed=settings.canary_seed if kinds & {INPUT_CANARIES, GRADIENT_CANARIES} else 0,
        final_runs=settings.canary_final_runs if runs else 0,
        final_label=settings.canary_final_label if runs else 0,
        # past the mislabeled canaries, when both are planted
        final_public_offset=offset + (settings.canary_input_count if mislabeled else 0) if runs else 0,
        final_public_count=settings.canary_final_public if runs else 0,
        final_crafting=settings.canary_final_crafting if runs else "decoy",
        final_pretrain_steps=settings.canary_final_pretrain_steps
        if runs and settings.canary_final_crafting == "plain" else 0)


def train_options_of(cfg: SweepConfig) -> TrainOptions:
    """How the sweep's training tasks train (`jobs.engine.training.TrainOptions`): nothing of it is in
    a model's key."""
    train = cfg.train
    return TrainOptions(compile=train.compile, checkpoint_seconds=train.checkpoint_seconds,
                        channels_last=train.channels_last, tf32=train.tf32)


def models_per_task(cfg: SweepConfig, model: Optional[str] = None) -> int:
    """K, the models of architecture `model` (default `model.name`) one training task trains
    (`train.models_per_task`; "auto": by architecture and by whether training asks for a GPU,
    `jobs.engine.stacked.auto_models_per_task`)."""
    if cfg.train.models_per_task != "auto":
        return int(cfg.train.models_per_task)
    from jobs.engine.stacked import auto_models_per_task

    model = model or cfg.model.name
    if model == MEMBERSHIP_MECHANISM:
        return 1
    gpu = cfg.resources.train.num_gpus > 0 or cfg.train.device.startswith("cuda")
    shape, classes = tuple(cfg.dataset.input_shape), cfg.dataset.num_classes
    return auto_models_per_task(model, shape, classes, gpu)


def training_groups(specs: list[ModelSpec], k: int | Callable[[str], int]) -> list[list[ModelSpec]]:
    """The models to train, in tasks of at most `k` (or `k(architecture)`): only models with
    the same training settings (architecture, recipe, ε, δ) and the same pool (`DataSpec`)
    share a task, in the order given.  A model's key does not depend on the task it falls in."""
    by_setting: dict[tuple[DataSpec, TrainSettings], list[ModelSpec]] = defaultdict(list)
    for spec in specs:
        by_setting[(spec.data, spec.train)].append(spec)
    groups = []
    for members in by_setting.values():
        model = members[0].train.model
        size = 1 if model == MEMBERSHIP_MECHANISM else max(1, k if isinstance(k, int) else k(model))
        groups += [members[start:start + size] for start in range(0, len(members), size)]
    return groups


def group_resources(per_model: float, k: int, largest_node: float) -> float:
    """What a task of `k` models asks Ray for, of a resource each model asks `per_model` of:
    k·per_model, rounded up to a whole unit above 1 (Ray takes fractions only below 1), and
    capped at the largest node's amount, so that the group still fits on one node (its models
    then share what fits there)."""
    amount = per_model * k
    if amount > 1:
        amount = float(math.ceil(amount - 1e-9))
    if largest_node >= per_model:
        amount = min(amount, float(largest_node))
    return amount


def group_label(group: list[ModelSpec]) -> str:
    """How a training task of several models is named in the Ray dashboard and in logs."""
    if len(group) == 1:
        return group[0].label
    first = group[0]
    return (f"train {len(group)} models: {first.data.name} ε={format_epsilon(first.train.epsilon)} "
            f"({', '.join(f'{s.role[0]}{s.index}/p={s.sample_rate:g}' for s in group)})")


def disjoint_shadow_offset(cfg: SweepConfig, data_for) -> int:
    """Where shadow pools start: 0 (the target's pool, LiRA's setting), or with
    `shadow.disjoint_data` the first record past every target's pool, so shadows train on
    records no target can ever see (Jayaraman et al.'s disjoint shadow data)."""
    if not cfg.shadow.disjoint_data:
        return 0
    ends = [data_for(p).records_needed for _, _, p, _ in operating_points(cfg)]
    if not ends or None in ends:
        raise ValueError("shadow.disjoint_data needs dataset.members or dataset.pool_size: "
                         "a target drawing from the whole pool leaves no records for shadows")
    return max(ends)


def pool_size_for(cfg: SweepConfig, rate: float) -> Optional[int]:
    """How many pool records a model sampled at `rate` draws from (None: the whole pool).

    With `dataset.members` set, the pool holds members/rate records, so a Bernoulli(rate) sample
    has that many members on average: Jayaraman et al.'s fixed training-set size with γ
    non-members per member.  The evaluation records are the pools' common first records.
    """
    if cfg.dataset.members is None:
        return cfg.dataset.pool_size
    return int(round(cfg.dataset.members / rate))


def operating_points(cfg: SweepConfig) -> list[tuple[float, float, float, float]]:
    """Every (ε, δ, p, β) of the grid; β (the fixed bound) is NaN unless ε was solved from it.

    With `grid.precision_target` each p gets the ε whose bound U(ε, δ, p, tpr_floor) is β
    (Thudi et al.'s fixed-bound protocol); with `grid.gamma`, p = 1/(1 + γ).
    """
    points = []
    for delta in cfg.grid.delta:
        for p in sampling_rates(cfg.grid):
            if cfg.grid.precision_target:
                for target in cfg.grid.precision_target:
                    epsilon = epsilon_for_precision(target, p, delta, cfg.metrics.tpr_floor,
                                                    form=cfg.metrics.bound_form)
                    points.append((float(epsilon), float(delta), p, float(target)))
            else:
                points += [(float(e), float(delta), p, math.nan) for e in cfg.grid.epsilon]
    return points


def ask_models(question: Optional[tuple[str, dict[str, Any]]], model_keys: tuple[str, ...],
               eval_records: int, queries: dict[str, QuerySpec]) -> tuple[str, ...]:
    """Add the query `question` (kind, settings) for each model to `queries`; return the keys."""
    if question is None:
        return ()
    kind, settings = question
    covers = 0 if QUERIES[kind].whole_pool else eval_records  # not in the key when unread
    specs = [QuerySpec(kind, key, covers, tuple(sorted(settings.items()))) for key in model_keys]
    for spec in specs:
        queries.setdefault(spec.key, spec)
    return tuple(spec.key for spec in specs)
