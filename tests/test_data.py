"""Dataset loaders: real offline data, checksums, and the message for a missing file."""

from __future__ import annotations

import io
import pickle
import tarfile

import numpy as np
import pytest

import jobs.data as data
from jobs.data import DatasetUnavailable, RemoteFile, load_dataset, md5sum, require_dataset


def test_mnist_subset_is_real_balanced_and_split(tmp_path):
    digits = load_dataset("mnist_subset", tmp_path, download=False, test_size=1000)
    assert digits.pool_x.shape == (4000, 1, 28, 28) and digits.test_x.shape == (1000, 1, 28, 28)
    assert digits.pool_x.dtype == np.float32 and 0 <= digits.pool_x.min() and digits.pool_x.max() <= 1
    # Shuffled once: any prefix of the pool holds every class.
    assert set(np.unique(digits.pool_y[:200])) == set(range(10))
    assert np.bincount(np.concatenate([digits.pool_y, digits.test_y])).tolist() == [500] * 10


def fake_cifar_archive(path, images_per_batch=4):
    """A tar.gz laid out like CIFAR-10's, with tiny made-up batches."""
    rng = np.random.default_rng(0)
    with tarfile.open(path, "w:gz") as tar:
        for name in [*data.CIFAR10_BATCHES, "test_batch"]:
            raw = {"data": rng.integers(0, 256, (images_per_batch, 3072), dtype=np.uint8),
                   "labels": rng.integers(0, 10, images_per_batch).tolist()}
            payload = pickle.dumps(raw)
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))


def test_cifar10_loads_a_verified_offline_copy(tmp_path, monkeypatch):
    archive = tmp_path / "cifar10" / "cifar-10-python.tar.gz"
    archive.parent.mkdir()
    fake_cifar_archive(archive)
    monkeypatch.setattr(data, "CIFAR10_ARCHIVE", RemoteFile(archive.name, "https://invalid.example/x",
                                                            md5sum(archive)))
    cifar = load_dataset("cifar10", tmp_path, download=False, test_size=3)
    assert cifar.pool_x.shape == (20, 3, 32, 32) and cifar.test_x.shape == (3, 3, 32, 32)
    assert cifar.pool_x.max() <= 1.0


def test_missing_file_names_dataset_directory_file_and_checksum(tmp_path):
    with pytest.raises(DatasetUnavailable) as caught:
        require_dataset("cifar10", tmp_path, download=False)
    message = str(caught.value)
    assert "'cifar10'" in message
    assert str(tmp_path / "cifar10" / "cifar-10-python.tar.gz") in message
    assert data.CIFAR10_ARCHIVE.md5 in message and data.CIFAR10_ARCHIVE.url in message


def test_corrupted_file_is_refused_not_used(tmp_path):
    archive = tmp_path / "cifar10" / "cifar-10-python.tar.gz"
    archive.parent.mkdir()
    archive.write_bytes(b"not the real archive")
    with pytest.raises(DatasetUnavailable, match="wrong checksum"):
        require_dataset("cifar10", tmp_path, download=False)


def test_failed_download_leaves_no_partial_file(tmp_path, monkeypatch):
    # No network here: the download fails, and the message says so.
    monkeypatch.setattr(data, "CIFAR10_ARCHIVE",
                        RemoteFile("cifar-10-python.tar.gz", "http://127.0.0.1:9/nothing", "0" * 32))
    with pytest.raises(DatasetUnavailable, match="download from http://127.0.0.1:9/nothing failed"):
        require_dataset("cifar10", tmp_path, download=True)
    assert not (tmp_path / "cifar10").exists()  # not even an empty folder
