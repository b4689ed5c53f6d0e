"""`python -m bench.results`: reading a sweep's results, one file per cell against the dataset.

Synthesises `--cells` cell rows (every column of the declared schema filled) through the store's
own write path, compacts them into the readable dataset as a finished sweep does (and again, as a
rerun with nothing to do does), then times in
interleaved rounds in this one process (medians; the machines are shared, so compare the ratio):

  per-cell files   what `load_frontier` did before the dataset: every landed cell file read and
                   checked against its .sha256, then concatenated (the code as it was)
  load_frontier    today's: the compacted dataset, checked against its manifest's checksum
  pandas           `pd.read_parquet("<store>/results/cells")`, every sweep of the store at once

`--root` keeps the store (default: a temporary folder), e.g. to point DuckDB at it afterwards.
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from sweeper.store.columns import CELL_COLUMNS, RESULTS_SCHEMA_VERSION
from sweeper.store.results import CELLS_DATASET, compact
from sweeper.store.artifacts import ArtifactStore

SWEEP = "bench_results"


def synthetic_row(i: int) -> dict:
    """A row with a value in every column of the schema, distinct per cell."""
    row: dict[str, float | int | bool | str] = {}
    for column in CELL_COLUMNS:
        if pa.types.is_floating(column.type):
            row[column.name] = (i % 97) / 97.0
        elif pa.types.is_integer(column.type):
            row[column.name] = i
        elif pa.types.is_boolean(column.type):
            row[column.name] = bool(i % 2)
        else:
            row[column.name] = f"{column.name}-{i:06d}"
    row.update(epsilon=[1.0, 4.0, math.inf][i % 3], schema_version=RESULTS_SCHEMA_VERSION,
               cell_key=f"cell{i:06d}")
    return row


def land(store: ArtifactStore, cells: int) -> list[str]:
    keys = [f"cell{i:06d}" for i in range(cells)]
    store.write_manifest(SWEEP, {"name": SWEEP, "cells": keys})
    for i, key in enumerate(keys):
        store.write_cell(SWEEP, key, synthetic_row(i))
    return keys


def read_per_cell(store: ArtifactStore, keys: list[str]) -> pd.DataFrame:
    """The results as a sweep read them before the dataset existed: one file per cell."""
    frames = []
    for key in keys:
        data = store._read_checked(f"sweeps/{SWEEP}/cells/{key}.parquet")  # noqa: SLF001 - the old path
        frames.append(pq.read_table(pa.BufferReader(data)).to_pandas())
    return pd.concat(frames, ignore_index=True)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.results", description=__doc__.split("\n")[0])
    parser.add_argument("--cells", type=int, default=2000, help="cells in the sweep (default 2000)")
    parser.add_argument("--repeat", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--root", type=Path, help="store root to keep (default: a temporary folder)")
    args = parser.parse_args()
    from sweeper.frontier import load_frontier

    with tempfile.TemporaryDirectory() as scratch:
        store = ArtifactStore(args.root or scratch)
        start = time.perf_counter()
        keys = land(store, args.cells)
        landed = time.perf_counter() - start
        start = time.perf_counter()
        compact(store, SWEEP, keys)
        compacted = time.perf_counter() - start
        start = time.perf_counter()
        compact(store, SWEEP, keys)  # a rerun with nothing new: checksums compared, nothing rebuilt
        recompacted = time.perf_counter() - start
        readers = {
            "per-cell files": lambda: read_per_cell(store, keys),
            "load_frontier": lambda: load_frontier(SWEEP, store.uri),
            "pandas": lambda: pd.read_parquet(store.location(CELLS_DATASET)),
        }
        times: dict[str, list[float]] = {name: [] for name in readers}
        for _ in range(args.repeat):
            for name, read in readers.items():
                begun = time.perf_counter()
                frame = read()
                times[name].append(time.perf_counter() - begun)
                assert len(frame) == args.cells, (name, len(frame))
        print(f"{args.cells} cells: landed one file each in {landed:.1f} s, compacted in "
              f"{compacted:.2f} s (again, with nothing new: {recompacted:.2f} s); reading them, "
              f"median of {args.repeat}:")
        before = statistics.median(times["per-cell files"])
        for name, seconds in times.items():
            median = statistics.median(seconds)
            print(f"  {name:<15} {median:8.3f} s   ({before / median:6.1f}× faster than per-cell files)")


if __name__ == "__main__":
    main()
