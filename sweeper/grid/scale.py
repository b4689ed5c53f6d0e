"""`scale=smoke`: any experiment, shrunk until it runs in seconds, with its structure intact.

Why.  Every experiment must be runnable end to end by the test suite, on a CPU, on synthetic data
of the right shape.  Shrinking keeps what makes the experiment itself — its datasets' shapes, its
model, every attack and policy, at least two values on each numeric axis so its report still has
lines to draw — and cuts only sizes: epochs, records, shadows, seeds, perturbations.
"""

from __future__ import annotations

import copy
import math
from typing import Optional

from jobs.settings import smoke_caps
from sweeper.axes import GRID_AXES
from sweeper.config import SweepConfig
from sweeper.config.schema import sampling_rates

#: What `smoke` keeps of each size (of each axis's values: as the axis declares, `Axis.smoke`).
SMOKE_POOL = 400
SMOKE_EVAL_RECORDS = 200
SMOKE_TEST_SIZE = 100
SMOKE_SHADOWS = 4  # the least that LiRA under the calibrated policy accepts


def scaled(cfg: SweepConfig) -> SweepConfig:
    """The configuration at its `scale`: unchanged at "full", shrunk at "smoke"; a sequential
    sweep's `sequential.max_trials` given as its trials (`sequential_trials`) first."""
    cfg = sequential_trials(cfg)
    if cfg.scale != "smoke":
        return cfg
    small = copy.deepcopy(cfg)
    for axis in GRID_AXES:  # each axis as it declares (every attack and policy kept)
        setattr(small.grid, axis.name, axis.smoke(getattr(small.grid, axis.name)))
        if axis.alternative is not None:
            name = axis.alternative.name
            setattr(small.grid, name, axis.smoke(getattr(small.grid, name)))
    small.train.epochs = 1
    if not full_batch(cfg):  # full-batch DP-SGD (q = 1) is the experiment's structure: kept
        small.train.batch_size = min(small.train.batch_size, 64)
    small.shadow.count = min(small.shadow.count, SMOKE_SHADOWS)
    if small.train.public_size is not None:  # a declared size, no larger than the smoke pool
        small.train.public_size = min(small.train.public_size, SMOKE_POOL)
    data = small.dataset
    if data.members is not None:  # pools follow from members and p: keep them small too
        data.members = min(data.members, SMOKE_EVAL_RECORDS)
        data.eval_records = min(data.eval_records, data.members)
    else:
        data.pool_size = min(data.pool_size or SMOKE_POOL, SMOKE_POOL)
        data.eval_records = min(data.eval_records, SMOKE_EVAL_RECORDS, data.pool_size)
    data.test_size = min(data.test_size, SMOKE_TEST_SIZE)
    for name, cap in smoke_caps(small.attack).items():  # each attack size, as declared
        setattr(small.attack, name, min(getattr(small.attack, name), cap))
    if isinstance(small.sequential.min_trials, int):  # no more first trials than smoke keeps
        small.sequential.min_trials = max(1, min(small.sequential.min_trials, len(small.grid.trial)))
    return small


def full_batch(cfg: SweepConfig) -> bool:
    """Whether every step takes a model's whole training set (q = 1: the black-box audits'
    recipe): the batch holds the whole pool its training set is drawn from (members ÷ the
    smallest p, or the pool size), so no draw of the training set can exceed it."""
    data = cfg.dataset
    rates = sampling_rates(cfg.grid)
    records: Optional[int]
    if data.members is not None and rates and min(rates) > 0:
        records = math.ceil(data.members / min(rates))
    else:
        records = data.pool_size
    return records is not None and cfg.train.batch_size >= records


def sequential_trials(cfg: SweepConfig) -> SweepConfig:
    """With `sequential.enabled` and `sequential.max_trials` set, the grid's trials are 0 …
    max_trials − 1 (grid.trial's are replaced: the sequential frontier looks at them in that
    order); any other configuration is returned as it is."""
    sequential = cfg.sequential
    if not sequential.enabled or not isinstance(sequential.max_trials, int) \
            or sequential.max_trials < 1:
        return cfg
    planned = copy.deepcopy(cfg)
    planned.grid.trial = list(range(sequential.max_trials))
    return planned
