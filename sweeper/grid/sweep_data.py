"""The records a sweep trains on, loaded once by the driver: the real dataset cut to what the
plan reaches, or synthetic records of its shape, refused before any work when they cannot
carry the plan (too few pool records, no room for gradient canaries).
"""

from __future__ import annotations

from pathlib import Path

from jobs.datasets import load_dataset, synthetic_dataset
from sweeper.config import ConfigError
from sweeper.grid.plan import SweepPlan


def sweep_data(plan: SweepPlan, data_dir: Path):
    """The pool and test split the sweep trains on: the real dataset, or synthetic data of its shape.

    Refuses (before anything is written) a plan whose models need more pool records than the
    data holds.
    """
    cfg, data = plan.config, plan.config.dataset
    sizes = [spec.records_needed for spec in plan.models.values()]
    known = [size for size in sizes if size is not None]
    needed = max(known) if known and len(known) == len(sizes) else None  # None: one reads all
    if data.synthetic:  # the plan gives synthetic models a pool size
        if needed is None:
            raise ValueError("synthetic data is drawn to the plan's pool size; the plan has none")
        loaded = synthetic_dataset(data.name, data.input_shape, data.num_classes, needed,
                                   data.test_size, seed=cfg.seed)
    else:
        loaded = load_dataset(data.name, data_dir, data.download, data.test_size)
    if needed is not None and needed > len(loaded.pool_y):
        raise ConfigError([f"dataset {data.name!r} has {len(loaded.pool_y)} pool records, but the "
                           f"grid needs {needed} (dataset.pool_size / dataset.members ÷ the smallest "
                           "p, plus the shadows' pool past it with shadow.disjoint_data, plus "
                           "mislabeled canaries past every pool)"])
    loaded = loaded.first_records(needed)
    check_canary_room(plan, loaded)
    return loaded


def check_canary_room(plan: SweepPlan, data) -> None:
    """Refuse (ConfigError) gradient canaries the data leave no room for: each needs a
    first-layer weight whose input feature is zero in every record (`jobs.engine.canaries`)."""
    from jobs.engine.canaries import canary_set
    from jobs.models import build_model

    spec = next((s for s in plan.models.values()
                 if s.canaries is not None and s.canaries.gradient_count), None)
    if spec is None or spec.canaries is None:
        return
    model = build_model(spec.train.model, data.input_shape, data.num_classes)
    try:
        canary_set(spec.canaries, data.pool_x, data.pool_y, data.test_x, data.num_classes, model,
                   spec.sample_rate, spec.mask_seed, spec.mask_complement)
    except ValueError as error:
        raise ConfigError([f"attack.canary_gradient_count={spec.canaries.gradient_count} on "
                           f"dataset {data.name!r}: {error} (input features zero in every record "
                           "× the layer's outputs); lower attack.canary_gradient_count"]) from None
