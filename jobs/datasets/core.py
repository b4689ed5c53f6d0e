"""The shape every loader returns, and the error it raises when its files are not there."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np


class DatasetUnavailable(RuntimeError):
    """The dataset's files are neither in `data_dir` nor downloadable from here."""


@dataclass(frozen=True)
class ArrayDataset:
    """Pool and test split; images are float32 N×C×H×W in [0, 1], tabular data float32 N×d,
    labels int64."""

    name: str
    pool_x: np.ndarray
    pool_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    num_classes: int

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.pool_x.shape[1:])

    def first_records(self, pool_size: int | None) -> "ArrayDataset":
        """The same data with the pool cut to its first `pool_size` records (None: all)."""
        if pool_size is None or pool_size >= len(self.pool_y):
            return self
        return dataclasses.replace(self, pool_x=self.pool_x[:pool_size], pool_y=self.pool_y[:pool_size])


def shuffled_split(name: str, x: np.ndarray, y: np.ndarray, test_size: int, num_classes: int,
                   seed: int) -> ArrayDataset:
    """Pool and test split of a dataset that has no official split (or whose file is sorted).

    A fixed permutation (`seed`, one per dataset, never the sweep's) makes every prefix of the
    pool a uniform sample — the pool is cut by prefix (`dataset.pool_size`, `eval_records`) —
    and the last `test_size` records of it are the test set.
    """
    if not 0 < test_size < len(y):
        raise ValueError(f"dataset {name!r} holds {len(y)} records: dataset.test_size={test_size} "
                         f"must leave a pool (0 < test_size < {len(y)})")
    order = np.random.default_rng(seed).permutation(len(y))
    x, y = x[order], y[order].astype(np.int64)
    cut = len(y) - test_size
    return ArrayDataset(name, x[:cut], y[:cut], x[cut:], y[cut:], num_classes=num_classes)
