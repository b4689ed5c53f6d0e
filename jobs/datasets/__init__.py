"""Datasets as plain arrays, split into a record pool and a held-out test set.

Membership inference is defined over a *pool* of records from which each training set is
Bernoulli-sampled, so every loader returns the pool (the dataset's training split) and a test
split that no model ever trains on.  Arrays stay in NumPy so that one copy can be shared through
Ray's object store and sliced by membership masks without touching torch.

Loaders never download silently into an unchecked state: files are verified (by MD5 where one is
published), and when a file is missing and cannot be fetched, `DatasetUnavailable` says which
file to place where.

Modules: `core` (ArrayDataset, DatasetUnavailable), `files` (RemoteFile, md5sum, fetching),
`images`, `tabular`, `synthetic` (one per family); this one holds the registry and is the one
import path of the dataset layer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from jobs.datasets.core import ArrayDataset, DatasetUnavailable, shuffled_split
from jobs.datasets.files import LocalCopy, RemoteFile, fetch_all, md5sum
from jobs.datasets.images import (load_cifar10, load_cifar100, load_digits, load_fashion_mnist,
                                  load_mnist, load_mnist_subset, load_svhn, load_svhn_extended,
                                  require_cifar10, require_cifar100, require_fashion_mnist,
                                  require_mnist, require_svhn, require_svhn_extended)
from jobs.datasets.synthetic import (MEMBERSHIP_POOL, SYNTHETIC_POOL, load_membership_bits,
                                     load_synthetic, synthetic_dataset)
from jobs.datasets.tabular import (load_adult, load_purchase100, load_texas100, require_adult,
                                   require_purchase100, require_texas100)

Loader = Callable[[Path, bool, int], ArrayDataset]

LOADERS: dict[str, Loader] = {
    "mnist_subset": load_mnist_subset,
    "mnist": load_mnist,
    "fashion_mnist": load_fashion_mnist,
    "cifar10": load_cifar10,
    "cifar100": load_cifar100,
    "svhn": load_svhn,
    "svhn_extended": load_svhn_extended,
    "digits": load_digits,
    "purchase100": load_purchase100,
    "texas100": load_texas100,
    "adult": load_adult,
    "synthetic": load_synthetic,
    "membership_bits": load_membership_bits,
}

#: Datasets of images (n, channels, height, width): the ones query augmentations apply to.
IMAGE_DATASETS = ("mnist_subset", "mnist", "fashion_mnist", "cifar10", "cifar100", "svhn",
                  "svhn_extended", "digits", "synthetic")

#: Cheap checks that a dataset's files are present, run before any cluster starts.
AVAILABILITY_CHECKS: dict[str, Callable[[Path, bool], object]] = {
    "mnist": require_mnist,
    "fashion_mnist": require_fashion_mnist,
    "cifar10": require_cifar10,
    "cifar100": require_cifar100,
    "svhn": require_svhn,
    "svhn_extended": require_svhn_extended,
    "purchase100": require_purchase100,
    "texas100": require_texas100,
    "adult": require_adult,
}


#: Records in each dataset's pool that do not depend on `test_size`: the official training split
#: (MNIST, Fashion-MNIST: 60 000; CIFAR: 50 000; SVHN: 73 257 train, + 531 131 extra) or the
#: generated pool; and records shuffled into pool + test, whose pool is the rest after `test_size`.
FIXED_POOL = {"mnist": 60_000, "fashion_mnist": 60_000, "cifar10": 50_000, "cifar100": 50_000,
              "svhn": 73_257, "svhn_extended": 73_257 + 531_131, "synthetic": SYNTHETIC_POOL,
              "membership_bits": MEMBERSHIP_POOL}
SHUFFLED_RECORDS = {"mnist_subset": 5_000, "digits": 1_797, "purchase100": 197_324,
                    "texas100": 67_330, "adult": 48_842}


def pool_records(name: str, test_size: int) -> int | None:
    """How many records the pool of dataset `name` holds, known without loading it (None: not
    known), so that settings larger than the pool are refused before anything starts."""
    if name in FIXED_POOL:
        return FIXED_POOL[name]
    total = SHUFFLED_RECORDS.get(name)
    return None if total is None else max(total - test_size, 0)


def require_dataset(name: str, data_dir: Path, download: bool) -> None:
    """Raise `DatasetUnavailable` now, rather than inside a remote task, if files are missing."""
    check = AVAILABILITY_CHECKS.get(name)
    if check is not None:
        check(data_dir.expanduser(), download)


def load_dataset(name: str, data_dir: Path, download: bool, test_size: int) -> ArrayDataset:
    return LOADERS[name](data_dir.expanduser(), download, test_size)


__all__ = [
    "ArrayDataset", "AVAILABILITY_CHECKS", "DatasetUnavailable", "IMAGE_DATASETS", "LOADERS", "Loader",
    "LocalCopy", "MEMBERSHIP_POOL", "RemoteFile", "fetch_all", "load_dataset", "md5sum",
    "require_dataset", "shuffled_split", "synthetic_dataset",
]
