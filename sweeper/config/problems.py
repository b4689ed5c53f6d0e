"""What every configuration check shares: how a check reports a problem, how problems are
refused together (`ConfigError`), and the wording of the common ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Optional

from jobs.datasets import pool_records
from jobs.settings import did_you_mean
from sweeper.config.schema import STAND_IN_POOL, SweepConfig


class ConfigError(ValueError):
    """Every problem found in a configuration, one per line."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("invalid configuration:\n" + "\n".join(f"  - {p}" for p in problems))


#: How a check reports: `check(ok, message)` records `message` when `ok` is false.
Check = Callable[[bool, str], None]


def unknown(field_name: str, value: object, known: Iterable[str], what: str) -> str:
    known = list(known)
    return f"{field_name}={value!r}: unknown; known {what} are {known}{did_you_mean(value, known)}"


def whole_pool(cfg: SweepConfig) -> Optional[int]:
    """Records in the pool when neither dataset.pool_size nor dataset.members cuts it: the
    synthetic stand-in's, or the dataset's (None when it is not known without loading it)."""
    return pool_without_cut(cfg.dataset.name, cfg.dataset.test_size, cfg.dataset.synthetic)


def pool_without_cut(name: str, test_size: int, synthetic: bool) -> Optional[int]:
    """`whole_pool` from the dataset's settings alone (a sweep's MLflow params carry them)."""
    return STAND_IN_POOL if synthetic else pool_records(name, test_size)


def local_accelerator(kind: str) -> bool:
    import torch

    if kind == "cuda":
        return bool(torch.cuda.is_available())
    return bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())
