"""The readable results: one hive-partitioned Parquet dataset per store, and how whole it is.

Cells land one file each in `sweeps/<name>/cells/` while a sweep runs (crash-safe, checksummed);
nobody reads those directly.  When the sweep ends (also on a rerun or a resume) `compact` writes
the rows of exactly the cells of its latest run into

    <store.root>/results/cells/sweep=<name>/part-0.parquet    one row per cell (`CELLS_SCHEMA`)
    <store.root>/results/scores/sweep=<name>/part-0.parquet   one row per record and attack
                                                             (`SCORES_DATASET_SCHEMA`)

so pandas, pyarrow.dataset, polars and DuckDB read every sweep of a store in one call from
`results/cells` (the `sweep` column comes from the folder name), a cell left over from an earlier
run with more cells is gone from it, and cells join their scores on (`sweep`, `scores_key`).
The files' checksums live in `sweeps/<name>/results.json`, outside the dataset, where no reader
trips on them; the schema version is in each file's footer.

`load_results` reads the dataset back, checks it, adds cells that landed after it was written
(a sweep still running, or killed before compacting) from the landing zone, and says how many of
the sweep's cells are present, failed (with the failure records' reasons), corrupt or missing.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sweeper.axes import SORT_ORDER
from sweeper.store.columns import (CELLS_SCHEMA, RESULTS_SCHEMA_VERSION, SCORES_DATASET_SCHEMA,
                                   conform)
from sweeper.store.files import disk_full, link_met, parquet_bytes, sha256_hex
from sweeper.store.artifacts import CELLS_DATASET, SCORES_DATASET, ArtifactStore

logger = logging.getLogger(__name__)

PART = "part-0.parquet"


def part_path(dataset: str, sweep: str) -> str:
    return f"{dataset}/sweep={sweep}/{PART}"


@dataclass
class Coverage:
    """How many of a sweep's cells the results hold, and why the others are not there."""

    total: int
    present: int = 0
    failed: dict[str, str] = field(default_factory=dict)  # cell key -> "label: reason"
    corrupt: list[str] = field(default_factory=list)  # landed, but failed their checksum
    missing: list[str] = field(default_factory=list)  # neither landed nor failed
    notes: list[str] = field(default_factory=list)  # where the rows came from, when not whole
    # a finished sequential sweep's cells past each decision (`needed_cells`): not in `total`
    not_needed: int = 0

    @property
    def complete(self) -> bool:
        return self.present == self.total

    def summary(self) -> str:
        """One line: e.g. "cells: 2 of 4 present, 1 failed, 1 corrupt, 0 missing"."""
        return (f"cells: {self.present} of {self.total} present, {len(self.failed)} failed, "
                f"{len(self.corrupt)} corrupt (failed their checksum), {len(self.missing)} missing "
                "(never stored)" + (f"; {self.not_needed} more of the fixed grid's not needed "
                                    "(sequential: their cells were decided)"
                                    if self.not_needed else ""))


@dataclass
class Results:
    frame: pd.DataFrame  # one row per present cell
    coverage: Coverage


def compact(store: ArtifactStore, sweep: str, cell_keys: list[str]) -> Results:
    """Write the sweep's readable results from the cells in the landing zone and return them.
    Cells not landed are left out and counted.

    When the dataset was built from exactly the cells landed now (the same checksums: a rerun
    with nothing to do), it is read rather than rebuilt: only the cells' checksum files are read,
    not each cell's Parquet."""
    sidecars = {key: store.cell_checksum(sweep, key) for key in cell_keys}
    previous = store.read_results_manifest(sweep) or {}
    if (previous.get("cells") == {key: value for key, value in sidecars.items() if value}
            and _verified(store, previous)):
        return load_results(store, sweep, cell_keys)
    tables, checksums, coverage = [], {}, Coverage(total=len(cell_keys))
    for key in cell_keys:
        try:
            data = store.read_cell_bytes(sweep, key)
            tables.append(store.cell_table(data, f"{sweep}/{key}"))
        except ValueError:  # CorruptArtifact
            coverage.corrupt.append(key)
            continue
        except OSError:
            coverage.missing.append(key)
            continue
        checksums[key] = sha256_hex(data)
    coverage.present = len(tables)
    _sort_out_failures(store, sweep, coverage)
    cells = pa.concat_tables(tables) if tables else CELLS_SCHEMA.empty_table()
    scores_keys = sorted(set(cells["scores_key"].to_pylist()))
    earlier = functools.cache(lambda: _compacted_scores(store, sweep, previous))
    scores_data, kept, lost = _scores_file(store, scores_keys, earlier)
    if kept:
        logger.warning("%d attack(s)' per-record scores are missing or failed their checksum (%s): "
                       "kept from the results dataset compacted before; a rerun recomputes them",
                       len(kept), ", ".join(kept[:3]))
    if lost:
        logger.warning("the scores dataset lacks %d attack(s) whose per-record scores are "
                       "missing or failed their checksum (%s)", len(lost), ", ".join(lost[:3]))
    files = {part_path(SCORES_DATASET, sweep): scores_data,
             part_path(CELLS_DATASET, sweep): parquet_bytes(cells)}
    try:  # the data first: a crash before the manifest leaves files that fail its checksums
        for rel, data in files.items():
            store.write_public(rel, data)
        store.write_results_manifest(sweep, {
            "cells": checksums, "scores": scores_keys, "schema_version": RESULTS_SCHEMA_VERSION,
            "files": {rel: sha256_hex(data) for rel, data in files.items()}})
    except OSError as error:  # the rows are safe in the landing zone; readers fall back to it
        if disk_full(error) is not None or link_met(error) is not None:
            raise  # the sweep stops on these: every write after would fail alike
        logger.warning("the results dataset was not written (%s); the frontier reads the "
                       "cells' own files until a rerun writes it", error)
    return Results(cells.to_pandas(), coverage)


def needed_cells(manifest: dict[str, Any]) -> list[str]:
    """The cells a sweep's results should hold: its manifest's, but for those a finished
    sequential sweep did not need (`sweeper.sequential`: trials past each cell's decision)."""
    skipped = set(manifest.get("sequential", {}).get("skipped", ()))
    return [key for key in manifest["cells"] if key not in skipped]


def load_results(store: ArtifactStore, sweep: str, cell_keys: Optional[list[str]] = None) -> Results:
    """The rows of the latest run of `sweep` (of `cell_keys`, when given): the compacted dataset
    when it is there and whole, plus any cell that landed after it (read from the landing zone,
    and said so); cells neither holds are counted as failed, corrupt or missing.  Raises
    FileNotFoundError (no sweep) or `ManifestError` (an unreadable sweep.json)."""
    not_needed = 0
    if cell_keys is None:
        manifest = store.read_manifest(sweep)
        keys = needed_cells(manifest)
        not_needed = len(manifest["cells"]) - len(keys)
    else:
        keys = cell_keys
    wanted = set(keys)
    coverage = Coverage(total=len(keys), not_needed=not_needed)
    tables = []
    compacted = store.read_results_manifest(sweep)
    rel = part_path(CELLS_DATASET, sweep)
    if compacted is None or rel not in compacted.get("files", {}):
        coverage.notes.append("no compacted results dataset yet (the sweep is running, or stopped "
                              "before it ended): read the cells' own files")
    else:
        try:
            data = store.read_with_checksum(rel, compacted["files"][rel])
            # Conformed: a dataset compacted before a column was added reads with it (null).
            table = conform(pq.read_table(pa.BufferReader(data)), CELLS_SCHEMA, "the results dataset")
        except FileNotFoundError:
            coverage.notes.append(f"{store.location(rel)} is missing: read the cells' own files")
        except (OSError, ValueError, pa.ArrowException):
            coverage.notes.append(f"{store.location(rel)} failed its checksum: read the cells' own "
                                  "files (a rerun rewrites it)")
        else:
            mask = pc.is_in(table["cell_key"], value_set=pa.array(sorted(wanted)))
            tables.append(table.filter(mask))
    found = set(tables[0]["cell_key"].to_pylist()) if tables else set()
    landed = 0
    for key in keys:
        if key in found:
            continue
        try:
            tables.append(store.read_cell_table(sweep, key))
            landed += 1
        except ValueError:  # CorruptArtifact
            coverage.corrupt.append(key)
        except OSError:
            coverage.missing.append(key)
    if landed and found:
        coverage.notes.append(f"{landed} cell(s) landed after the results dataset was compacted "
                              "(the sweep is running, or stopped before it ended): read from their "
                              "own files")
    coverage.present = len(found) + landed
    _sort_out_failures(store, sweep, coverage)
    cells = pa.concat_tables(tables) if tables else CELLS_SCHEMA.empty_table()
    return Results(cells.to_pandas(), coverage)


def _sort_out_failures(store: ArtifactStore, sweep: str, coverage: Coverage) -> None:
    """Move the absent cells that have a failure record from missing/corrupt to failed."""
    absent = coverage.missing + coverage.corrupt
    for record in store.read_failures(sweep, absent):
        key = record.get("cell_key")
        if key in absent:
            coverage.failed[key] = f"{record.get('cell', key)}: {record.get('reason', 'unknown')}"
    coverage.missing = [key for key in coverage.missing if key not in coverage.failed]
    coverage.corrupt = [key for key in coverage.corrupt if key not in coverage.failed]


def _verified(store: ArtifactStore, manifest: dict) -> bool:
    """Every file the results manifest lists is there with its checksum."""
    try:
        for rel, digest in manifest.get("files", {}).items():
            store.read_with_checksum(rel, digest)
    except (OSError, ValueError):
        return False
    return bool(manifest.get("files"))


def _scores_file(store: ArtifactStore, keys: list[str], earlier: Callable[[], Optional[pa.Table]]
                 ) -> tuple[bytes, list[str], list[str]]:
    """The per-record scores of `keys` as one Parquet file (one row group per attack, written as
    it is read); an attack whose scores file cannot be read keeps its rows from the `earlier`
    dataset (the one compacted before) when that holds them.  With the keys kept that way and
    the keys whose scores neither holds."""
    sink, kept, lost = pa.BufferOutputStream(), [], []
    with pq.ParquetWriter(sink, SCORES_DATASET_SCHEMA) as writer:
        for key in keys:
            try:
                table = store.read_scores_table(key)
                column = pa.array([key] * len(table), type=pa.string())
                table = table.add_column(0, "scores_key", column)
            except (OSError, ValueError):
                held = earlier()
                table = None if held is None else held.filter(pc.equal(held["scores_key"], key))
                if table is None or not len(table):
                    lost.append(key)
                    continue
                kept.append(key)
            writer.write_table(table.cast(SCORES_DATASET_SCHEMA))
    return sink.getvalue().to_pybytes(), kept, lost


def _compacted_scores(store: ArtifactStore, sweep: str, manifest: dict) -> Optional[pa.Table]:
    """The scores dataset the sweep's last compaction wrote, checked against the checksum its
    results manifest holds; None when there is none or it fails."""
    rel = part_path(SCORES_DATASET, sweep)
    digest = manifest.get("files", {}).get(rel)
    if digest is None:
        return None
    try:
        return conform(pq.read_table(pa.BufferReader(store.read_with_checksum(rel, digest))),
                       SCORES_DATASET_SCHEMA, rel)
    except (OSError, ValueError, pa.ArrowException):
        return None


def sort_frontier(frame: pd.DataFrame) -> pd.DataFrame:
    """The results in the axes' order (`sweeper.axes.SORT_ORDER`), as every table and command
    shows them."""
    order = [name for name in SORT_ORDER if name in frame]
    return frame if frame.empty else frame.sort_values(order, ignore_index=True)
