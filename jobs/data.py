"""The dataset layer under its historical name: everything lives in the `jobs.datasets` package.

`from jobs.data import ArrayDataset, LOADERS, load_dataset, ...` keeps working.  The pinned files
(e.g. `CIFAR10_ARCHIVE`) are re-exported for reading; to replace one (in a test), patch the
module that uses it: `jobs.datasets.images`, `jobs.datasets.tabular`.
"""

from jobs.datasets import (AVAILABILITY_CHECKS, IMAGE_DATASETS, LOADERS, MEMBERSHIP_POOL,
                           ArrayDataset, DatasetUnavailable, LocalCopy, Loader, RemoteFile, fetch,
                           fetch_all, load_dataset, md5sum, pool_records, require_dataset,
                           shuffled_split, synthetic_dataset)
from jobs.datasets.images import CIFAR10_ARCHIVE, CIFAR10_BATCHES

__all__ = [
    "ArrayDataset", "AVAILABILITY_CHECKS", "CIFAR10_ARCHIVE", "CIFAR10_BATCHES", "DatasetUnavailable",
    "IMAGE_DATASETS", "LOADERS", "Loader", "LocalCopy", "MEMBERSHIP_POOL", "RemoteFile", "fetch",
    "fetch_all", "load_dataset", "md5sum", "pool_records", "require_dataset", "shuffled_split", "synthetic_dataset",
]
