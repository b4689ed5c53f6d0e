"""The content-addressed artifact store and the sweep's Parquet results.

Layout under `store.root`:

    models/<key>/            model.pt, pool_logits.npy, mask.npy, meta.json (with checksums)
    checkpoints/<key>.pt     per-epoch training state, deleted once the model is stored
    queries/<key>.npy        answers of model queries (augmented logits, Merlin), + .sha256
    scores/<key>.parquet     per-record attack scores (record_id, score, member)
    sweeps/<name>/cells/<cell key>.parquet   one results row per cell
    sweeps/<name>/sweep.json                 the cells of the latest run of that sweep
    mlflow.db                the default MLflow tracking store

Every write lands in a temporary name and is renamed into place, so a crash leaves either the
whole artifact or nothing; an artifact whose checksum does not match is treated as absent.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import torch

#: Version of the results table's columns; readers check it.
RESULTS_SCHEMA_VERSION = 2


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(partial, path)


def _npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def _parquet_bytes(frame: pd.DataFrame, metadata: dict[str, str] | None = None) -> bytes:
    table = pa.Table.from_pandas(frame, preserve_index=False)
    if metadata:
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), **metadata})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


class ArtifactStore:
    def __init__(self, root: str | Path):
        self.root = Path(root).expanduser().resolve()

    # --- models ------------------------------------------------------------------------------

    def model_dir(self, key: str) -> Path:
        return self.root / "models" / key

    def checkpoint_path(self, key: str) -> Path:
        return self.root / "checkpoints" / f"{key}.pt"

    def has_model(self, key: str) -> bool:
        meta = self.model_dir(key) / "meta.json"
        if not meta.exists():
            return False
        try:
            self._verified_files(key)
        except (OSError, ValueError):
            return False
        return True

    def write_model(self, key: str, state_dict: dict[str, torch.Tensor], pool_logits: np.ndarray,
                    mask: np.ndarray, meta: dict[str, Any]) -> None:
        buffer = io.BytesIO()
        torch.save(state_dict, buffer)
        files = {
            "model.pt": buffer.getvalue(),
            "pool_logits.npy": _npy_bytes(np.asarray(pool_logits, dtype=np.float32)),
            "mask.npy": _npy_bytes(np.asarray(mask, dtype=bool)),
        }
        meta = {**meta, "checksums": {name: _sha256(data) for name, data in files.items()}}
        files["meta.json"] = json.dumps(meta, indent=2, sort_keys=True).encode()
        final = self.model_dir(key)
        final.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{key}."))
        for name, data in files.items():
            (staging / name).write_bytes(data)
        if final.exists():  # a stale or corrupted copy: replace it whole
            shutil.rmtree(final)
        os.replace(staging, final)
        self.checkpoint_path(key).unlink(missing_ok=True)

    def _verified_files(self, key: str) -> dict[str, bytes]:
        directory = self.model_dir(key)
        meta = json.loads((directory / "meta.json").read_text())
        files = {}
        for name, expected in meta["checksums"].items():
            data = (directory / name).read_bytes()
            if _sha256(data) != expected:
                raise ValueError(f"checksum mismatch in {directory / name}")
            files[name] = data
        return files

    def read_model_meta(self, key: str) -> dict[str, Any]:
        return json.loads((self.model_dir(key) / "meta.json").read_text())

    def read_model_outputs(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        """(pool_logits, mask), checked against the stored checksums."""
        files = self._verified_files(key)
        logits = np.load(io.BytesIO(files["pool_logits.npy"]), allow_pickle=False)
        mask = np.load(io.BytesIO(files["mask.npy"]), allow_pickle=False)
        return logits, mask

    def read_state_dict(self, key: str) -> dict[str, torch.Tensor]:
        files = self._verified_files(key)
        return torch.load(io.BytesIO(files["model.pt"]), weights_only=True)

    # --- model queries (augmented logits, Merlin ratios) ------------------------------------

    def query_path(self, key: str) -> Path:
        return self.root / "queries" / f"{key}.npy"

    def has_query(self, key: str) -> bool:
        try:
            self.read_query(key)
        except (OSError, ValueError):
            return False
        return True

    def write_query(self, key: str, values: np.ndarray) -> None:
        data = _npy_bytes(np.asarray(values))
        atomic_write_bytes(self.query_path(key).with_suffix(".sha256"), _sha256(data).encode())
        atomic_write_bytes(self.query_path(key), data)

    def read_query(self, key: str) -> np.ndarray:
        """The stored answer, checked against its checksum (a mismatch reads as absent)."""
        data = self.query_path(key).read_bytes()
        if _sha256(data) != self.query_path(key).with_suffix(".sha256").read_text().strip():
            raise ValueError(f"checksum mismatch in {self.query_path(key)}")
        return np.load(io.BytesIO(data), allow_pickle=False)

    # --- per-record scores -------------------------------------------------------------------

    def scores_path(self, key: str) -> Path:
        return self.root / "scores" / f"{key}.parquet"

    def write_scores(self, key: str, frame: pd.DataFrame) -> None:
        atomic_write_bytes(self.scores_path(key), _parquet_bytes(frame))

    # --- results -----------------------------------------------------------------------------

    def sweep_dir(self, name: str) -> Path:
        return self.root / "sweeps" / name

    def cell_path(self, sweep: str, cell_key: str) -> Path:
        return self.sweep_dir(sweep) / "cells" / f"{cell_key}.parquet"

    def has_cell(self, sweep: str, cell_key: str) -> bool:
        return self.cell_path(sweep, cell_key).exists()

    def write_cell(self, sweep: str, cell_key: str, row: dict[str, Any]) -> None:
        frame = pd.DataFrame([row])
        metadata = {"sweeper.schema_version": str(RESULTS_SCHEMA_VERSION)}
        atomic_write_bytes(self.cell_path(sweep, cell_key), _parquet_bytes(frame, metadata))

    def write_manifest(self, sweep: str, manifest: dict[str, Any]) -> None:
        path = self.sweep_dir(sweep) / "sweep.json"
        atomic_write_bytes(path, json.dumps(manifest, indent=2, default=str).encode())



def read_results(sweep_dir: Path) -> pd.DataFrame:
    """The results rows of the latest run of the sweep stored in `sweep_dir`."""
    sweep_dir = Path(sweep_dir)
    manifest_path = sweep_dir / "sweep.json"
    if not manifest_path.exists():
        raise FileNotFoundError(f"no sweep results in {sweep_dir} (no sweep.json)")
    keys = json.loads(manifest_path.read_text())["cells"]
    paths = [sweep_dir / "cells" / f"{key}.parquet" for key in keys]
    frames = [pq.read_table(path).to_pandas() for path in paths if path.exists()]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
