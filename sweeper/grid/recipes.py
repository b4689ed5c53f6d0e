"""What each model of a sweep trains with: its recipe (`training_recipes`: the sweep's `train.*`
crossed with the recipe axes the grid sweeps, `sweeper.axes`) and the public size DP-SGD's rate
and divisor come from (`public_size_for`, `train.rate_from`)."""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any, Optional

from jobs.engine.training import TrainSettings
from jobs.models import MEMBERSHIP_MECHANISM
from sweeper.axes import BY_NAME, RECIPE_AXES, swept_in
from sweeper.config.problems import whole_pool
from sweeper.config.schema import SweepConfig


def training_recipes(cfg: SweepConfig, epsilon: float, delta: float
                     ) -> list[tuple[TrainSettings, tuple[tuple[str, Any], ...]]]:
    """The recipes a sweep trains at (ε, δ): `train.*`, once per combination of the values of
    every recipe axis the grid sweeps (`sweeper.axes.RECIPE_AXES`; none swept: one recipe),
    each with every recipe axis's value its cells record.  Without DP an axis only DP-SGD reads
    (`Axis.private_only`: the clip norm) leaves the recipe as `train.*` sets it, so one model
    serves each of its values."""
    base = TrainSettings(
        model=cfg.model.name, epochs=cfg.train.epochs, batch_size=cfg.train.batch_size,
        lr=cfg.train.lr, momentum=cfg.train.momentum, max_grad_norm=cfg.train.max_grad_norm,
        accountant=cfg.train.accountant, optimizer=cfg.train.optimizer,
        eval_every=cfg.train.eval_every, precision=cfg.train.precision,
        secure_noise=cfg.train.secure_noise,
        epsilon=epsilon, delta=delta if math.isfinite(epsilon) else None,
    )
    swept = [BY_NAME[name] for name in swept_in(cfg.grid)]
    recipes = []
    for values in itertools.product(*(getattr(cfg.grid, axis.name) for axis in swept)):
        chosen = {axis.name: axis.python_type(value) for axis, value in zip(swept, values)}
        trained = {name: value for name, value in chosen.items()
                   if math.isfinite(epsilon) or not BY_NAME[name].private_only}
        recipes.append((dataclasses.replace(base, **trained),
                        tuple((axis.name, chosen.get(axis.name, getattr(base, axis.name)))
                              for axis in RECIPE_AXES)))
    return recipes


def public_size_for(cfg: SweepConfig, train: TrainSettings, pool: tuple[Optional[int], int],
                    rate: float, complement: bool) -> Optional[int]:
    """The public size a DP model's rate and divisor come from (`train.rate_from`): its pool
    (`pool`: its size, None for the rest of the sweep's pool, and its offset) times its
    inclusion rate (expected), `train.public_size` (declared), or None: its private |D|
    (actual).  None for non-private training and exact mechanisms, which take no steps."""
    if not math.isfinite(train.epsilon) or train.model == MEMBERSHIP_MECHANISM \
            or cfg.train.rate_from == "actual":
        return None
    if cfg.train.rate_from == "declared":
        return cfg.train.public_size
    size, offset = pool
    whole = whole_pool(cfg)
    if size is None and whole is not None:
        size = whole - offset
    if size is None:
        raise ValueError(f"train.rate_from=expected: the pool of dataset {cfg.dataset.name!r} is "
                         "not known before loading it; declare train.public_size")
    return max(1, round(size * (1 - rate if complement else rate)))
