"""The content-addressed artifact store and the sweep's Parquet results.

`store.root` is a local folder or a URI that pyarrow's filesystems understand (`s3://bucket/prefix`,
`gs://…`; credentials come from the environment, never from the URI).  Layout under it:

    models/<key>/            model.pt, pool_logits.npy, mask.npy, meta.json (with checksums)
    checkpoints/<key>.pt     per-epoch training state (checksummed), deleted once the model is stored
    queries/<key>.npy        answers of model queries (augmented logits, Merlin), + .sha256
    scores/<key>.parquet     per-record attack scores (record_id, score, member), + .sha256
    results/cells/sweep=<name>/part-0.parquet    the readable results: one row per cell of the
    results/scores/sweep=<name>/part-0.parquet   sweep's latest run, and its per-record scores
                             (hive-partitioned datasets, compacted by `sweeper.store.results`)
    sweeps/<name>/cells/<cell key>.parquet   the landing zone: one row per cell as it finishes,
                                             + .sha256 (readers are pointed at results/ instead)
    sweeps/<name>/failures/<cell key>.json   why a cell failed (its traceback), until it succeeds
    sweeps/<name>/sweep.json                 the cells of the latest run of that sweep
    sweeps/<name>/results.json               the checksums of the sweep's compacted results
    sweeps/<name>/tracked.json               what MLflow holds of the sweep (`tracking_stamp`)
    sweeps/<name>/provenance.json            each run's code, packages, machine (`sweeper.provenance`)
    mlflow.db                the default MLflow tracking store (local stores only)
    .sweeper-store           says the folder is a store (local stores; `store_root_problem`)

* **Atomic**: the bytes (folders, object stores, atomic writes, checkpoints) are
  `sweeper.store.files`'s — a temporary name renamed into place locally, a single PUT on an object
  store — so a crash leaves the whole file or nothing.
* **Checked**: every artifact a result is computed from (model files, query answers, scores, cell
  rows, checkpoints) is read back against its SHA-256; a truncated or altered one reads as absent
  and is recomputed.  The JSON records (meta, manifest, failures, tracked) are written whole and
  parsed, not checksummed.
* **Never loaded unsafely**: a model or checkpoint that passes its checksum but does not load as
  plain tensors (torch's `weights_only`) is moved under `quarantine/` and recomputed.
* **Only its own folder**: a local store is made in a new or empty folder, or one that holds a
  store already (its `.sweeper-store`, written as its first sweep claims its name; a store made
  before that file existed by holding only what a store writes, with a file at a path only a
  store writes among it: `EARLIER_FILES`); any other folder (`/`, `/etc`, a home or project
  folder) is refused before anything is written, unless `store.adopt=true` makes it a store on
  purpose (`store_root_problem`).  Nothing is written or deleted through a symbolic link below the
  root (`sweeper.store.files.inside`; `links_in` finds those a sweep would meet before it starts).
* **Full disks** raise `sweeper.store.files.DiskFull` ("disk full at <path>") and leave no partial
  file; partial files a killed process left are swept up by the next sweep
  (`sweeper.store.files.sweep_stale_parts`).
* **torch** is imported only by the methods that read or write model weights: the commands that
  only read results (`sweeper.frontier`, `sweeper.tracking.sync`) never load it.
"""

from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence
from urllib.parse import urlparse, urlsplit, urlunsplit

import numpy as np
import pandas as pd
import pyarrow as pa

from sweeper.store.columns import CELLS_SCHEMA, SCORES_SCHEMA, conform, row_table
from sweeper.store.files import (PUBLIC_MODE, CorruptArtifact, LinkInStore, LocalFiles,
                                 ObjectFiles, StoredCheckpoint, StoredNoiseCache,
                                 atomic_write_bytes, inside, is_uri, npy_bytes, parquet_bytes,
                                 quarantine, read_parquet, sha256_hex)
from sweeper.paths import NAME_PATTERN, name_problem

if TYPE_CHECKING:
    import torch


#: Stored canary outputs are the model's files named canary_<name>.npy.
CANARY_PREFIX = "canary_"


#: The results datasets (hive-partitioned by sweep, compacted by `sweeper.store.results`).
CELLS_DATASET = "results/cells"
SCORES_DATASET = "results/scores"
#: What a local store writes directly under its root: its folders, MLflow's (the default
#: tracking store and its artifacts) and its marker.
ENTRIES = ("models", "checkpoints", "queries", "scores", "calibration", "quarantine", "results",
           "sweeps", "mlflow.db", "mlartifacts")
#: The file a local store writes into its root at its first sweep: this folder is a store.
MARKER = ".sweeper-store"
MARKER_TEXT = ("This folder is a sweeper store (store.root): its sweeps' models, scores and "
               "results. Sweeps write here without asking.\n")
#: Entries a folder holds from its file system rather than its user (a new disk's root).
NOT_CONTENT = ("lost+found",)


#: What a store of an earlier version (before `MARKER`) surely wrote, as paths under its root:
#: a sweep's manifest, a stored model's meta.json, a checkpoint, a checksummed query or score, a
#: noise calibration, a partition of the results datasets.  Files at these exact paths, not a
#: folder's name: a project's `results/` or `models/` holds none of them.
EARLIER_FILES = tuple(re.compile(pattern) for pattern in (
    rf"sweeps/{NAME_PATTERN.pattern[1:-1]}/sweep\.json",
    r"models/[0-9a-f]{24}/meta\.json",
    r"checkpoints/[0-9a-f]{24}\.pt",
    r"(queries/[0-9a-f]{24}\.npy|scores/[0-9a-f]{24}\.parquet)\.sha256",
    r"calibration/[0-9a-f]{64}\.json",
    rf"results/(cells|scores)/sweep={NAME_PATTERN.pattern[1:-1]}/part-0\.parquet",
))
#: How deep those files lie below the root.
EARLIER_DEPTH = 4


def earlier_store(root: Path) -> bool:
    """Whether the folder `root` holds a file an earlier version's store wrote (`EARLIER_FILES`),
    looked for without following links and stopping at the first."""
    def found(folder: Path, rel: str, depth: int) -> bool:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            return False
        for entry in entries:
            path = f"{rel}{entry.name}"
            if entry.is_file(follow_symlinks=False):
                if any(pattern.fullmatch(path) for pattern in EARLIER_FILES):
                    return True
            elif (depth > 1 and entry.is_dir(follow_symlinks=False)
                  and found(Path(entry.path), f"{path}/", depth - 1)):
                return True
        return False

    return any(found(root / entry, f"{entry}/", EARLIER_DEPTH - 1) for entry in ENTRIES
               if (root / entry).is_dir() and not (root / entry).is_symlink())


def store_root_problem(root: os.PathLike | str, adopt: bool = False) -> Optional[str]:
    """Why the local folder `root` may not become a store, in words, or None.

    Fine: a folder that is absent or empty (the store makes it its own), one that holds a store
    (its `MARKER`; from before the marker, nothing but the store's `ENTRIES` with a file an
    earlier version wrote among them, `earlier_store`), or any folder when `adopt`
    (`store.adopt=true`, the boolean itself) says to make it a store on purpose.  Anything else
    (`/`, `/etc`, a home or project folder, one holding only a `results/` or a `models/` of its
    own) would get the store's folders written among its files.  Reads only: nothing is
    written before a refusal.  A folder that cannot be listed is
    `sweeper.paths.folder_problem`'s to name."""
    root = Path(root)
    try:
        names = {entry.name for entry in os.scandir(root)} - set(NOT_CONTENT)
    except OSError:
        return None
    if (adopt is True or not names or MARKER in names
            or (names <= set(ENTRIES) and earlier_store(root))):
        return None
    shown = ", ".join(sorted(names)[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return (f"{root} already holds files ({shown}) but no sweeper store (no {MARKER} file, nor "
            f"what an earlier version's store wrote): a sweep would write its folders "
            f"({', '.join(f'{entry}/' for entry in ENTRIES[:4])} …) among them; give a new or "
            "empty folder, or store.adopt=true to make this one a store on purpose")


#: What MLflow writes into a local store, beside its database (SQLite's journals) and its
#: artifacts folder: no sweeper write path reaches these, so they are checked before MLflow opens.
MLFLOW_WRITES = ("mlflow.db", "mlflow.db-journal", "mlflow.db-wal", "mlflow.db-shm", "mlartifacts")


def links_in(root: os.PathLike | str, sweep: str) -> list[Path]:
    """The symbolic links a sweep named `sweep` would meet where it writes in the local store at
    `root`, found before it starts (`sweeper.store.files.inside` refuses each when it is met): at the
    store's entries, what MLflow writes (`MLFLOW_WRITES`), its results datasets' partitions of the
    sweep, and the sweep's folder and anything in it (its landing zone, lock, failures,
    figures) and in MLflow's artifacts folder."""
    return links_on_the_way(root, [*ENTRIES, MARKER, *MLFLOW_WRITES, f"sweeps/{sweep}",
                                   *(f"{dataset}/sweep={sweep}"
                                     for dataset in (CELLS_DATASET, SCORES_DATASET))],
                            [f"sweeps/{sweep}", "mlartifacts"])


def links_on_the_way(root: os.PathLike | str, rels: Sequence[str],
                     walked: Sequence[str] = ()) -> list[Path]:
    """The symbolic links on the way to each path `rels` under the local store `root` (the
    folders on the way, the path itself: `sweeper.store.files.inside`'s check, made before a
    command writes) and anywhere inside the folders `walked`."""
    root = Path(root)
    found = set()
    for rel in rels:
        try:
            inside(root, rel)
        except LinkInStore as link:
            found.add(Path(link.filename))
    for top in walked if not found else ():
        for folder, folders, files in os.walk(root / top):
            found.update(Path(folder) / name for name in folders + files
                         if os.path.islink(os.path.join(folder, name)))
    return sorted(found)


def links_refusal(links: Sequence[Path], what: str) -> str:
    """The refusal of `what` (a sweep, a command) for the links `links_on_the_way` found."""
    return (f"{', '.join(str(link) for link in links[:3])}{' and more' if len(links) > 3 else ''} "
            f"{'is a symbolic link' if len(links) == 1 else 'are symbolic links'} where {what} "
            "writes; a store writes only into its own folders, never through a link: remove "
            f"{'it' if len(links) == 1 else 'them'} once you know what "
            f"{'it is' if len(links) == 1 else 'they are'}")


def check_sweep_name(name: str) -> str:
    """`name`, when it is safe to use as a folder under the store; ValueError otherwise."""
    problem = name_problem("sweep name", name)
    if problem:
        raise ValueError(problem)
    return name


class ManifestError(ValueError):
    """A sweep's sweep.json that cannot be read as a manifest (not JSON, or no `cells` list)."""


class StoreUnreachable(Exception):
    """A task found no store at its local `store.root`: the folder is another machine's (the
    driver's), so whatever it wrote would land where the sweep never reads it.  Not an OSError:
    a retry on the same node would find the same, so Ray does not retry it
    (`sweeper.failures.Retryable`)."""

    def __init__(self, root: os.PathLike | str) -> None:
        import socket

        self.root = str(root)
        self.host = socket.gethostname()
        super().__init__(str(self))

    def __str__(self) -> str:
        return (f"store.root {self.root} is not a store on this machine ({self.host}): its "
                f"{MARKER} is not there, so the folder is another machine's; nothing was "
                "written. Use an object store every node reaches (s3://…) or a folder mounted at "
                "the same path on every node")

    def __reduce__(self):  # raised in a Ray task, it reaches the driver whole
        return (_store_unreachable, (self.root, self.host))


def _store_unreachable(root: str, host: str) -> StoreUnreachable:
    error = StoreUnreachable.__new__(StoreUnreachable)
    error.root, error.host = root, host
    Exception.__init__(error, str(error))
    return error


class ArtifactStore:
    def __init__(self, root: str | Path):
        root = str(root)
        if is_uri(root) and urlparse(root).scheme != "file":
            self.uri = root
            self.local_root: Optional[Path] = None
            self.given_root: Optional[Path] = None
            self.files: ObjectFiles | LocalFiles = ObjectFiles(root)
        else:
            path = urlparse(root).path if root.startswith("file://") else root
            self.given_root = Path(os.path.abspath(os.path.expanduser(path)))
            self.local_root = Path(path).expanduser().resolve()
            self.uri = str(self.local_root)
            self.files = LocalFiles(self.local_root)

    @property
    def is_local(self) -> bool:
        return self.local_root is not None

    def mark(self) -> bool:
        """Write the store's marker (`MARKER`) into a local root that lacks it: from now on the
        folder is a store (`store_root_problem`).  Whether it was written now."""
        if self.local_root is None or (self.local_root / MARKER).is_file():
            return False
        self.files.write(MARKER, MARKER_TEXT.encode(), public=True)
        return True

    def require_here(self) -> "ArtifactStore":
        """This store, once its local root is one on this machine (its `MARKER`, which the
        sweep's driver writes before any task starts); StoreUnreachable otherwise, before
        anything is written: a task on a node that does not share the driver's folder must fail
        loudly, not write its work to a folder of its own."""
        if self.local_root is not None and not (self.local_root / MARKER).is_file():
            raise StoreUnreachable(self.local_root)
        return self

    def unmark(self) -> None:
        """Remove the marker when the local store holds none of its entries (a sweep refused
        before it wrote anything): nothing left behind, and the folder is what it was."""
        if self.local_root is not None and not any((self.local_root / entry).exists()
                                                   for entry in ENTRIES):
            self.files.delete(MARKER)

    def _write_checked(self, rel: str, data: bytes) -> None:
        """The checksum first, then the data: a crash between them reads as a mismatch."""
        self.files.write(rel + ".sha256", sha256_hex(data).encode())
        self.files.write(rel, data)

    def _read_checked(self, rel: str) -> bytes:
        """The file's bytes; FileNotFoundError when it is absent, CorruptArtifact when they do not
        match their checksum or the checksum is lost."""
        data = self.files.read(rel)
        try:
            expected = self.files.read(rel + ".sha256").decode(errors="replace").strip()
        except FileNotFoundError:
            raise CorruptArtifact(f"no checksum for {self.uri}/{rel}") from None
        if sha256_hex(data) != expected:
            raise CorruptArtifact(f"checksum mismatch in {self.uri}/{rel}")
        return data

    def _has_checked(self, rel: str) -> bool:
        try:
            self._read_checked(rel)
        except (OSError, ValueError):
            return False
        return True

    # --- models ------------------------------------------------------------------------------

    def has_model(self, key: str) -> bool:
        try:
            self._verified_model_files(key)
        except (OSError, ValueError, KeyError):
            return False
        return True

    def checkpoint(self, key: str) -> StoredCheckpoint:
        return StoredCheckpoint(self.files, f"checkpoints/{key}.pt")

    def noise_cache(self) -> StoredNoiseCache:
        return StoredNoiseCache(self.files)

    def write_model(self, key: str, state_dict: dict[str, torch.Tensor], pool_logits: np.ndarray,
                    mask: np.ndarray, meta: dict[str, Any],
                    canaries: Optional[dict[str, np.ndarray]] = None) -> None:
        """The files (with the model's canary outputs, `canary_<name>.npy`, when it holds
        canaries), then meta.json with their checksums: no meta, or a mismatch, means absent.
        A model already stored whole is left alone: a retry or an orphaned worker that finishes
        the same training second never rewrites files another task may be reading."""
        if self.has_model(key):
            self.checkpoint(key).delete()
            return
        import torch

        buffer = io.BytesIO()
        torch.save(state_dict, buffer)
        files = {
            "model.pt": buffer.getvalue(),
            "pool_logits.npy": npy_bytes(np.asarray(pool_logits, dtype=np.float32)),
            "mask.npy": npy_bytes(np.asarray(mask, dtype=bool)),
            **{f"{CANARY_PREFIX}{name}.npy": npy_bytes(np.asarray(values))
               for name, values in (canaries or {}).items()},
        }
        meta = {**meta, "checksums": {name: sha256_hex(data) for name, data in files.items()}}
        for name, data in files.items():
            self.files.write(f"models/{key}/{name}", data)
        self.files.write(f"models/{key}/meta.json", json.dumps(meta, indent=2, sort_keys=True).encode())
        self.checkpoint(key).delete()

    def _verified_model_files(self, key: str) -> dict[str, bytes]:
        meta = json.loads(self.files.read(f"models/{key}/meta.json"))
        files = {}
        for name, expected in meta["checksums"].items():
            data = self.files.read(f"models/{key}/{name}")
            if sha256_hex(data) != expected:
                raise CorruptArtifact(f"checksum mismatch in {self.uri}/models/{key}/{name}")
            files[name] = data
        return files

    def read_model_meta(self, key: str) -> dict[str, Any]:
        return json.loads(self.files.read(f"models/{key}/meta.json"))

    def read_model_outputs(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        """(pool_logits, mask), checked against the stored checksums."""
        files = self._verified_model_files(key)
        logits = np.load(io.BytesIO(files["pool_logits.npy"]), allow_pickle=False)
        mask = np.load(io.BytesIO(files["mask.npy"]), allow_pickle=False)
        return logits, mask

    def read_canaries(self, key: str) -> dict[str, np.ndarray]:
        """The model's canary outputs by name (`jobs.engine.training.canary_outputs`), checked."""
        return {name[len(CANARY_PREFIX):-len(".npy")]: np.load(io.BytesIO(data), allow_pickle=False)
                for name, data in self._verified_model_files(key).items()
                if name.startswith(CANARY_PREFIX)}

    def read_state_dict(self, key: str) -> dict[str, torch.Tensor]:
        import torch

        files = self._verified_model_files(key)
        try:
            return torch.load(io.BytesIO(files["model.pt"]), weights_only=True)
        except Exception as error:  # noqa: BLE001 - whatever refused it; torch's text suggests unsafe loading
            names = ["meta.json", *(name for name in files if name != "meta.json")]
            where = quarantine(self.files, [f"models/{key}/{name}" for name in names])
            raise CorruptArtifact(
                f"model {key}: its weights do not load as plain tensors (weights_only refused "
                f"them: {type(error).__name__}), so they are corrupt or malicious: moved to "
                f"{self.location(where)}; a rerun trains the model again") from None

    # --- model queries (augmented logits, Merlin ratios) ------------------------------------

    def has_query(self, key: str) -> bool:
        return self._has_checked(f"queries/{key}.npy")

    def write_query(self, key: str, values: np.ndarray) -> None:
        self._write_checked(f"queries/{key}.npy", npy_bytes(np.asarray(values)))

    def read_query(self, key: str) -> np.ndarray:
        """The stored answer, checked against its checksum."""
        return np.load(io.BytesIO(self._read_checked(f"queries/{key}.npy")), allow_pickle=False)

    # --- per-record scores -------------------------------------------------------------------

    def write_scores(self, key: str, frame: pd.DataFrame) -> None:
        """Validated against `SCORES_SCHEMA` (SchemaError before anything is written)."""
        table = conform(pa.Table.from_pandas(frame, preserve_index=False), SCORES_SCHEMA,
                        f"scores {key}")
        self._write_checked(f"scores/{key}.parquet", parquet_bytes(table))

    def scores_state(self, key: str) -> str:
        """"present", "missing" or "corrupt", as `cell_state` says it of a cell."""
        return self._state(f"scores/{key}.parquet")

    def read_scores_table(self, key: str) -> pa.Table:
        rel = f"scores/{key}.parquet"
        return conform(read_parquet(self._read_checked(rel), rel), SCORES_SCHEMA, rel)

    def read_scores(self, key: str) -> pd.DataFrame:
        return self.read_scores_table(key).to_pandas()

    # --- results -----------------------------------------------------------------------------

    def sweep_uri(self, name: str) -> str:
        """The sweep's own folder (landing zone, manifests, figures): a folder or a URI."""
        return self.location(f"sweeps/{name}")

    def location(self, rel: str) -> str:
        """A path under the store as people reach it: a local path, or the store's URI + rel."""
        if self.local_root is not None:
            return str(self.local_root / rel)
        parts = urlsplit(self.uri)
        return urlunsplit(parts._replace(path=f"{parts.path.rstrip('/')}/{rel}"))

    def cell_state(self, sweep: str, cell_key: str) -> str:
        """"present", "missing" (or unreadable) or "corrupt" (its file failed its checksum): a
        cell to compute unless present."""
        return self._state(f"sweeps/{sweep}/cells/{cell_key}.parquet")

    def _state(self, rel: str) -> str:
        try:
            self._read_checked(rel)
        except ValueError:  # CorruptArtifact
            return "corrupt"
        except OSError:  # absent, or unreachable right now: computed again either way
            return "missing"
        return "present"

    def write_cell(self, sweep: str, cell_key: str, row: dict[str, Any]) -> None:
        """Land one cell's row, validated against `CELLS_SCHEMA` (SchemaError before anything is
        written), and drop the cell's failure record."""
        data = parquet_bytes(row_table(row))
        self._write_checked(f"sweeps/{sweep}/cells/{cell_key}.parquet", data)
        self.files.delete(f"sweeps/{sweep}/failures/{cell_key}.json")

    def cell_checksum(self, sweep: str, cell_key: str) -> Optional[str]:
        """The checksum a landed cell was written with (its .sha256), None when there is none."""
        try:
            return self.files.read(f"sweeps/{sweep}/cells/{cell_key}.parquet.sha256").decode(
                errors="replace").strip()
        except OSError:
            return None

    def read_cell_bytes(self, sweep: str, cell_key: str) -> bytes:
        """A landed cell's file, checked; FileNotFoundError or CorruptArtifact."""
        return self._read_checked(f"sweeps/{sweep}/cells/{cell_key}.parquet")

    @staticmethod
    def cell_table(data: bytes, where: str) -> pa.Table:
        """A landed cell's row in the current schema; CorruptArtifact for a row that no version of
        the schema wrote."""
        try:
            return conform(read_parquet(data, where), CELLS_SCHEMA, where)
        except ValueError as error:
            raise CorruptArtifact(str(error)) from None

    def read_cell_table(self, sweep: str, cell_key: str) -> pa.Table:
        return self.cell_table(self.read_cell_bytes(sweep, cell_key), f"{sweep}/{cell_key}")

    def write_public(self, rel: str, data: bytes) -> None:
        """A file people read (the results datasets): mode 0644 on a local store."""
        self.files.write(rel, data, public=True)

    def read_with_checksum(self, rel: str, expected: str) -> bytes:
        """A file checked against the checksum a manifest holds for it."""
        data = self.files.read(rel)
        if sha256_hex(data) != expected:
            raise CorruptArtifact(f"checksum mismatch in {self.uri}/{rel}")
        return data

    def write_failure(self, sweep: str, cell_key: str, record: dict[str, Any]) -> None:
        self.files.write(f"sweeps/{sweep}/failures/{cell_key}.json",
                         json.dumps(record, indent=2, default=str).encode())

    def read_failures(self, sweep: str, cell_keys: Optional[list[str]] = None) -> list[dict[str, Any]]:
        """The failure records of the sweep's cells (of `cell_keys` only, when given)."""
        names = self.files.names(f"sweeps/{sweep}/failures")
        wanted = None if cell_keys is None else {f"{key}.json" for key in cell_keys}
        records = []
        for name in names:
            if name.endswith(".json") and (wanted is None or name in wanted):
                try:  # a rerun deletes the record of a cell it computes, maybe right now
                    records.append(json.loads(self.files.read(f"sweeps/{sweep}/failures/{name}")))
                except FileNotFoundError:
                    continue
        return records

    def write_manifest(self, sweep: str, manifest: dict[str, Any]) -> None:
        self.files.write(f"sweeps/{sweep}/sweep.json", json.dumps(manifest, indent=2, default=str).encode())

    def read_manifest(self, sweep: str) -> dict[str, Any]:
        """The sweep's sweep.json; FileNotFoundError, or ManifestError (one line) when it is not
        JSON or lists no cells."""
        rel = f"sweeps/{sweep}/sweep.json"
        try:
            manifest = json.loads(self.files.read(rel))
        except FileNotFoundError:
            if isinstance(self.files, ObjectFiles):  # not local
                self.files.require_bucket()
            raise FileNotFoundError(f"no sweep results in {self.sweep_uri(sweep)} (no sweep.json)") from None
        except ValueError as error:
            raise ManifestError(f"{self.location(rel)} is corrupt (not JSON: {error}); rerun the "
                                "sweep to rewrite it") from None
        cells = manifest.get("cells") if isinstance(manifest, dict) else None
        if not isinstance(cells, list) or not all(isinstance(key, str) for key in cells):
            raise ManifestError(f"{self.location(rel)} has no `cells` list of cell keys; rerun the "
                                "sweep to rewrite it")
        return manifest

    def sweep_names(self) -> list[str]:
        """The sweeps this store holds: folders under `sweeps/` with a sweep.json."""
        return [name for name in self.files.folders("sweeps")
                if "sweep.json" in self.files.names(f"sweeps/{name}")]

    def write_results_manifest(self, sweep: str, manifest: dict[str, Any]) -> None:
        self.files.write(f"sweeps/{sweep}/results.json",
                         json.dumps(manifest, indent=1, sort_keys=True).encode())

    def read_results_manifest(self, sweep: str) -> Optional[dict[str, Any]]:
        """What the sweep's compacted results hold (`sweeper.store.results`), or None when there is none
        or it is unreadable."""
        try:
            manifest = json.loads(self.files.read(f"sweeps/{sweep}/results.json"))
        except (OSError, ValueError):
            return None
        return manifest if isinstance(manifest, dict) else None

    def write_tracking_stamp(self, sweep: str, stamp: dict[str, Any]) -> None:
        self.files.write(f"sweeps/{sweep}/tracked.json", json.dumps(stamp, sort_keys=True).encode())

    def read_tracking_stamp(self, sweep: str) -> Optional[dict[str, Any]]:
        """The stamp of the sweep's last whole MLflow logging, or None (none yet, or unreadable)."""
        try:
            return json.loads(self.files.read(f"sweeps/{sweep}/tracked.json"))
        except (OSError, ValueError):
            return None

    def write_provenance(self, sweep: str, record: dict[str, Any]) -> None:
        """The sweep's runs and dataset (`sweeper.provenance`), which its report lists."""
        self.files.write(f"sweeps/{sweep}/provenance.json",
                         json.dumps(record, indent=1, sort_keys=True).encode())

    def read_provenance(self, sweep: str) -> Optional[dict[str, Any]]:
        """The sweep's provenance record, or None (none yet: a sweep from before it, or unreadable)."""
        try:
            record = json.loads(self.files.read(f"sweeps/{sweep}/provenance.json"))
        except (OSError, ValueError):
            return None
        return record if isinstance(record, dict) else None

    def figures_dir(self, sweep: str) -> Path:
        """Where this machine reads a sweep's figures: the sweep's folder when the store is local,
        else a local copy of them (`write_figure`)."""
        if self.local_root is not None:
            return inside(self.local_root, f"sweeps/{sweep}")
        return Path("~/.cache/sweeper/figures").expanduser() / sha256_hex(self.uri.encode())[:12] / sweep

    def write_figure(self, sweep: str, rel: str, data: bytes) -> Path:
        """Keep a file drawn for the sweep (a figure, its CSV, their stamp) at
        `sweeps/<sweep>/<rel>`, through the store's one write path (never through a symbolic
        link: `LinkInStore`); the path this machine reads it at: in the store when it is local,
        else its local copy under `figures_dir` (MLflow attaches local files), written alike."""
        self.files.write(f"sweeps/{sweep}/{rel}", data, public=True)
        if self.local_root is not None:
            return self.local_root / "sweeps" / sweep / rel
        copy = self.figures_dir(sweep)
        LocalFiles(copy).write(rel, data, public=True)
        return copy / rel

    def keep_figures(self, sweep: str, drawn: Path, paths: Sequence[Path]) -> list[Path]:
        """`write_figure` for each file `paths` drawn under the private folder `drawn` (a
        temporary folder no one else writes into), at its path below it; where each is read."""
        return [self.write_figure(sweep, Path(path).relative_to(drawn).as_posix(),
                                  Path(path).read_bytes()) for path in paths]

    def write_output(self, path: os.PathLike | str, data: bytes) -> Path:
        """A file a command was asked for at `path` (--csv, --plot, --out): through the store's
        write path when it lies inside this local store (never through a link there), else
        whole at `path`, its folder made; the path."""
        rel = self.rel_of(path)
        if rel is not None:
            self.files.write(rel, data, public=True)
        else:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(Path(path), data, PUBLIC_MODE)
        return Path(path)

    def rel_of(self, path: os.PathLike | str) -> Optional[str]:
        """`path` (a command's output file) as a path under this local store's root, as given or
        resolved, or None when it lies outside (or the store is remote): an output inside the
        store is written through the store's write path."""
        if self.local_root is None:
            return None
        target = Path(os.path.abspath(os.path.expanduser(os.fspath(path))))
        for root in (self.given_root, self.local_root):
            if root is not None and target.is_relative_to(root) and target != root:
                return target.relative_to(root).as_posix()
        return None


def split_sweep_location(location: str | Path) -> tuple[str, str]:
    """(store root, sweep name) of a sweep's folder or URI, `<store.root>/sweeps/<name>`; a URI's
    query (`?endpoint_override=…`) stays with the root."""
    if not is_uri(str(location)):
        path = Path(location)
        if path.parent.name != "sweeps" or not path.name:
            raise FileNotFoundError(f"{location} is not a sweep folder (<store.root>/sweeps/<name>)")
        return str(path.parent.parent), path.name
    parts = urlsplit(str(location))
    root, _, name = parts.path.rstrip("/").rpartition("/")
    parent, _, sweeps = root.rpartition("/")
    if sweeps != "sweeps" or not name:
        raise FileNotFoundError(f"{location} is not a sweep folder (<store.root>/sweeps/<name>)")
    return urlunsplit(parts._replace(path=parent)), name
