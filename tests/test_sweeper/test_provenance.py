"""A sweep's provenance (`sweeper.provenance`): the commit and whether its tree was clean, read
from a real git checkout; the dataset's pinned files; each run kept, the oldest dropped past
`KEPT_RUNS`."""

from __future__ import annotations

import subprocess

from sweeper.provenance import KEPT_RUNS, code_state, dataset_record, record_run


def git(folder, *args: str) -> str:
    return subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_the_commit_and_whether_its_tree_was_clean(tmp_path):
    git(tmp_path, "init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    git(tmp_path, "add", "code.py")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    head = git(tmp_path, "rev-parse", "HEAD")
    assert code_state(tmp_path) == (head, True)
    (tmp_path / "notes.txt").write_text("untracked: not code that ran\n")
    assert code_state(tmp_path) == (head, True)
    (tmp_path / "code.py").write_text("x = 2\n")  # the bug planted: a change never committed
    assert code_state(tmp_path) == (head, False)
    bare = tmp_path.parent / f"{tmp_path.name}-plain"  # beside the checkout, in none
    bare.mkdir()
    assert code_state(bare) == (None, None)


def test_the_dataset_is_named_with_its_pinned_files_or_where_its_records_come_from():
    mnist = dataset_record({"dataset": {"name": "mnist"}})
    # torchvision's published MD5 of MNIST's training images (torchvision.datasets.MNIST.resources)
    assert {"name": "train-images-idx3-ubyte.gz",
            "md5": "f68b3c2dcbeaaa9fbdd348bbdeb94873"} in mnist["files"]
    shipped = dataset_record({"dataset": {"name": "mnist_subset"}})
    assert shipped["files"] == [] and "ship with an installed package" in shipped["source"]
    synthetic = dataset_record({"dataset": {"name": "mnist", "synthetic": True}, "seed": 7})
    assert synthetic["files"] == [] and "seed 7" in synthetic["source"]


def test_every_run_is_kept_until_the_oldest_must_go():
    record = None
    for number in range(KEPT_RUNS + 3):
        record = record_run(record, {"models_trained": number}, {"dataset": {"name": "digits"}})
    assert [run["models_trained"] for run in record["runs"]] == list(range(3, KEPT_RUNS + 3))
    assert record["dataset"]["name"] == "digits"
