"""`scale=smoke`: any experiment, shrunk until it runs in seconds, with its structure intact.

Why.  Every experiment must be runnable end to end by the test suite, on a CPU, on synthetic data
of the right shape.  Shrinking keeps what makes the experiment itself — its datasets' shapes, its
model, every attack and policy, at least two values on each numeric axis so its report still has
lines to draw — and cuts only sizes: epochs, records, shadows, seeds, perturbations.
"""

from __future__ import annotations

import copy

from sweeper.config import SweepConfig

#: What `smoke` keeps of each size.
SMOKE_AXIS_VALUES = 2
SMOKE_POOL = 400
SMOKE_EVAL_RECORDS = 200
SMOKE_TEST_SIZE = 100
SMOKE_SHADOWS = 4  # the least that LiRA under the calibrated policy accepts


def scaled(cfg: SweepConfig) -> SweepConfig:
    """The configuration at its `scale`: unchanged at "full", shrunk at "smoke"."""
    if cfg.scale != "smoke":
        return cfg
    small = copy.deepcopy(cfg)
    for axis in ("epsilon", "delta", "p", "gamma", "precision_target", "trial"):
        setattr(small.grid, axis, list(getattr(small.grid, axis))[:SMOKE_AXIS_VALUES])
    small.train.epochs = 1
    small.train.batch_size = min(small.train.batch_size, 64)
    small.shadow.count = min(small.shadow.count, SMOKE_SHADOWS)
    data = small.dataset
    if data.members is not None:  # pools follow from members and p: keep them small too
        data.members = min(data.members, SMOKE_EVAL_RECORDS)
        data.eval_records = min(data.eval_records, data.members)
    else:
        data.pool_size = min(data.pool_size or SMOKE_POOL, SMOKE_POOL)
        data.eval_records = min(data.eval_records, SMOKE_EVAL_RECORDS, data.pool_size)
    data.test_size = min(data.test_size, SMOKE_TEST_SIZE)
    small.attack.pdtp_records = min(small.attack.pdtp_records, 2)
    small.attack.pdtp_seeds = min(small.attack.pdtp_seeds, 2)
    small.attack.merlin_perturbations = min(small.attack.merlin_perturbations, 10)
    small.attack.canary_input_count = min(small.attack.canary_input_count, 20)
    small.attack.canary_gradient_count = min(small.attack.canary_gradient_count, 200)
    return small
