"""What the sweep knows of a dataset without loading it: one `DatasetSpec` per name, in `DATASETS`.

Why one entry rather than parallel tables.  A dataset's loader, the check that its files are
there, its record shape and classes, its pool size and whether it holds images used to sit in
five dicts and tuples of `jobs.datasets` plus `conf/dataset/<name>.yaml`, each kept in step by
hand.  `register_dataset` records them once, on the loader where it is defined (`images`,
`tabular`, `synthetic`); `jobs.datasets` derives its exports from `DATASETS`, and the sweep's
config takes `dataset.input_shape` / `dataset.num_classes` from the spec unless a user sets them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

from jobs.datasets.core import ArrayDataset
from jobs.datasets.pinned_files import RemoteFile
from jobs.registry import Registry

#: `loader(data_dir, download, test_size)`: the pool and the first `test_size` test records.
Loader = Callable[[Path, bool, int], ArrayDataset]
#: `require(data_dir, download)`: raises `DatasetUnavailable` when the files are not there.
Require = Callable[[Path, bool], object]


@dataclass(frozen=True)
class DatasetSpec:
    """One dataset: how it loads and the facts checked before anything loads.

    Attributes:
        name: `dataset.name` in the config.
        loader: builds the `ArrayDataset` (see `Loader`).
        input_shape: one record's shape: (channels, height, width) for images, (features,) else.
        num_classes: labels are 0 … num_classes − 1.
        fixed_pool: records in the pool whatever `test_size` is (an official training split, or
            a generated pool); None when `shuffled_records` is given.
        shuffled_records: records shuffled into pool + test (no official split): the pool is
            what is left after `test_size`; None when `fixed_pool` is given.
        require: cheap check that the files are present (run before any cluster starts); None:
            nothing to check (the data ships with a dependency or is generated).
        files: the files `require` and the loader read, with URL and checksum.
    """

    name: str
    loader: Loader
    input_shape: tuple[int, ...]
    num_classes: int
    fixed_pool: Optional[int] = None
    shuffled_records: Optional[int] = None
    require: Optional[Require] = None
    files: tuple[RemoteFile, ...] = ()

    def __post_init__(self) -> None:
        problems = []
        if not self.name:
            problems.append("an empty name")
        if not self.input_shape or any(not isinstance(d, int) or d < 1 for d in self.input_shape):
            problems.append(f"input_shape={self.input_shape}: give one or more sizes, each ≥ 1")
        if not isinstance(self.num_classes, int) or self.num_classes < 1:
            problems.append(f"num_classes={self.num_classes}: must be an integer ≥ 1")
        if (self.fixed_pool is None) == (self.shuffled_records is None):
            problems.append(f"fixed_pool={self.fixed_pool}, shuffled_records={self.shuffled_records}: "
                            "give exactly one (a pool of fixed size, or records shuffled into "
                            "pool + test)")
        for key, size in (("fixed_pool", self.fixed_pool), ("shuffled_records", self.shuffled_records)):
            if size is not None and (not isinstance(size, int) or size < 1):
                problems.append(f"{key}={size}: must be an integer ≥ 1")
        if any(not isinstance(f, RemoteFile) for f in self.files):
            problems.append("files: each must be a RemoteFile")
        if problems:
            raise ValueError(f"dataset {self.name!r} cannot be registered: " + "; ".join(problems))

    @property
    def image(self) -> bool:
        """Whether records are images (C×H×W, the `ArrayDataset` contract): query augmentations
        (mirror, shifts) apply only to those."""
        return len(self.input_shape) == 3

    def pool_records(self, test_size: int) -> int:
        """Records in the pool once `test_size` are held out, known without loading."""
        if self.fixed_pool is not None:
            return self.fixed_pool
        assert self.shuffled_records is not None  # __post_init__: exactly one is set
        return max(self.shuffled_records - test_size, 0)


#: Every dataset, by `dataset.name`, in registration order.
DATASETS: Registry[DatasetSpec] = Registry("dataset")


def register_dataset(name: str, *, input_shape: Sequence[int], num_classes: int,
                     fixed_pool: Optional[int] = None, shuffled_records: Optional[int] = None,
                     require: Optional[Require] = None,
                     files: Sequence[RemoteFile] = ()) -> Callable[[Loader], Loader]:
    """Decorator: register the loader as dataset `name` with its facts (see `DatasetSpec`).

    Raises:
        ValueError: `name` is taken, or the facts are malformed (both or neither pool fact,
            a size < 1), at import, before any sweep starts.
    """
    def register(loader: Loader) -> Loader:
        DATASETS.add(name, DatasetSpec(name, loader, tuple(input_shape), num_classes, fixed_pool,
                                       shuffled_records, require, tuple(files)))
        return loader
    return register
