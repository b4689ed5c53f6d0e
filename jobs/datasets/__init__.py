"""Datasets as plain arrays, split into a record pool and a held-out test set.

Membership inference is defined over a *pool* of records from which each training set is
Bernoulli-sampled, so every loader returns the pool (the dataset's training split) and a test
split that no model ever trains on.  Arrays stay in NumPy so that one copy can be shared through
Ray's object store and sliced by membership masks without touching torch.

Loaders never download silently into an unchecked state: files are verified (by MD5 where one is
published), and when a file is missing and cannot be fetched, `DatasetUnavailable` says which
file to place where.

Modules: `core` (ArrayDataset, DatasetUnavailable), `files` (RemoteFile, md5sum, fetching),
`registry` (DatasetSpec, DATASETS, register_dataset), `images`, `tabular`, `synthetic` (one per
family, each registering its loaders where they are defined).  This one is the one import path of
the dataset layer: what it exports besides is derived from `DATASETS`, never kept by hand.
"""

from __future__ import annotations

from pathlib import Path

# The family modules register their datasets on import: imported here, every name is in DATASETS.
from jobs.datasets import images, synthetic, tabular
from jobs.datasets.core import ArrayDataset, DatasetUnavailable, shuffled_split
from jobs.datasets.pinned_files import LocalCopy, RemoteFile, fetch_all, md5sum
from jobs.datasets.dataset_registry import DATASETS, DatasetSpec, Loader, register_dataset
from jobs.datasets.synthetic import MEMBERSHIP_POOL, synthetic_dataset

def pool_records(name: str, test_size: int) -> int | None:
    """How many records the pool of dataset `name` holds, known without loading it (None: no
    such dataset), so that settings larger than the pool are refused before anything starts."""
    return DATASETS[name].pool_records(test_size) if name in DATASETS else None


def require_dataset(name: str, data_dir: Path, download: bool) -> None:
    """Raise `DatasetUnavailable` now, rather than inside a remote task, if files are missing."""
    check = DATASETS[name].require
    if check is not None:
        check(data_dir.expanduser(), download)


def load_dataset(name: str, data_dir: Path, download: bool, test_size: int) -> ArrayDataset:
    """Dataset `name`'s pool and its first `test_size` test records, from `data_dir`."""
    return DATASETS[name].loader(data_dir.expanduser(), download, test_size)


__all__ = [
    "ArrayDataset", "DATASETS", "DatasetSpec", "DatasetUnavailable",
    "Loader", "LocalCopy", "MEMBERSHIP_POOL", "RemoteFile", "fetch_all",
    "images", "load_dataset", "md5sum", "pool_records", "register_dataset", "require_dataset",
    "shuffled_split", "synthetic", "synthetic_dataset", "tabular",
]
