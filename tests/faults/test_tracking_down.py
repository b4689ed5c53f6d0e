"""Fault 4: the MLflow tracking server (a real `mlflow server` on 127.0.0.1) is stopped
mid-sweep.  The sweep completes with its Parquet results whole and warns what was not logged;
`sweeper sync` fills MLflow in once the server is back, and a second sync adds nothing.
The same when the SQLite tracking file is deleted mid-sweep: the summary's last line says how to
backfill, never `mlflow ui` on the deleted file."""

from __future__ import annotations

import contextlib
import logging
import shlex
import sqlite3
import subprocess
import threading
from pathlib import Path
from typing import Callable

from mlflow import MlflowClient

from sweeper.summary import print_summary
from sweeper.runner import run_sweep
from sweeper.cli.sync_command import main as sync_main
from sweeper.tracking.sync import sync
from sweeper.tracking.recorder import CELL_KEY_TAG, PARENT_TAG


def cell_runs(uri: str, experiment: str) -> list:
    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return []
    runs = client.search_runs([found.experiment_id], max_results=5000)
    return [r for r in runs if PARENT_TAG in r.data.tags]


def tracked_config(make_tiny_config, tmp_path, name: str):
    cfg = make_tiny_config(tmp_path)
    cfg.name = name
    cfg.grid.attack = ["loss", "lira_offline", "always_member"]
    return cfg


def sweep_with_tracking_fault(cfg, procs, caplog, fault: Callable[[], None]):
    """Run the sweep while `fault` breaks its tracking once two cells are stored; the sweep
    must warn, naming `sweeper sync`.  Returns (result, number of cells planned)."""
    cells_dir = Path(cfg.store.root) / "sweeps" / cfg.name / "cells"

    def after_first_cells():
        procs.wait_for(lambda: len(list(cells_dir.glob("*.parquet"))) >= 2, timeout=300,
                       interval=0.05)
        fault()

    breaker = threading.Thread(target=after_first_cells, daemon=True)
    breaker.start()
    with caplog.at_level(logging.WARNING, logger="sweeper"):
        result = run_sweep(cfg, progress=False)
    assert any("sweeper sync" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    breaker.join(timeout=30)
    return result, len(cfg.grid.epsilon) * len(cfg.grid.p) * len(cfg.grid.attack)


def test_server_stopped_mid_sweep_loses_nothing_and_sync_fills_in(
        ray_local, make_tiny_config, tmp_path, mlflow_server, procs, monkeypatch, capsys, caplog):
    # One failed request must cost seconds, not MLflow's default minutes of backoff.
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    cfg = tracked_config(make_tiny_config, tmp_path, "tracked")
    cfg.grid.epsilon = [4.0, 8.0]
    cfg.tracking.uri = mlflow_server.uri
    cfg.tracking.experiment = "faults"
    result, planned = sweep_with_tracking_fault(cfg, procs, caplog, mlflow_server.stop)
    assert not mlflow_server.running
    # MLflow's own "View run … at: URL" lines (two per cell run ended) are not printed.
    assert "View run" not in capsys.readouterr().out

    assert not result.failures
    assert len(result.results) == planned and result.results.cell_key.is_unique
    assert result.tracking_warning is not None
    assert "not logged" in result.tracking_warning

    # While the server is down, sync says so and changes nothing.
    assert sync_main(["--store-root", cfg.store.root, "--experiment", cfg.name]) == 1
    said = capsys.readouterr().err  # one bounded probe, not MLflow's minutes of retries
    assert "does not answer" in said and "nothing was logged" in said

    mlflow_server.start()
    # A run the stop caught half-logged (created, no metrics yet) does not count: sync redoes it.
    logged_before = [r for r in cell_runs(mlflow_server.uri, "faults") if r.info.status == "FINISHED"]
    assert len(logged_before) < planned  # the stop cost some runs …
    report = sync(cfg.store.root, cfg.name)
    assert report.logged == planned - len(logged_before)  # … and sync logged exactly those
    runs = cell_runs(mlflow_server.uri, "faults")
    assert len(runs) == planned and {r.info.status for r in runs} == {"FINISHED"}
    assert {r.data.tags[CELL_KEY_TAG] for r in runs} == set(result.results.cell_key)

    assert sync_main(["--store-root", cfg.store.root, "--experiment", cfg.name]) == 0
    assert "0 logged now" in capsys.readouterr().out
    assert len(cell_runs(mlflow_server.uri, "faults")) == planned


def test_database_deleted_mid_sweep_ends_with_how_to_backfill(ray_local, make_tiny_config,
                                                               tmp_path, procs, capsys, caplog):
    cfg = tracked_config(make_tiny_config, tmp_path, "dbgone")
    database = Path(cfg.store.root) / "mlflow.db"  # the default: SQLite beside the results
    result, planned = sweep_with_tracking_fault(cfg, procs, caplog, database.unlink)
    assert not result.failures and len(result.results) == planned
    assert result.tracking_warning is not None

    capsys.readouterr()
    print_summary(result)
    said, last = capsys.readouterr().out.strip().splitlines()[-2:]
    assert "mlflow ui" not in said + last and "tracking failed" in said, said
    # The last line, run as printed, backfills MLflow: every cell has its run again.
    command = shlex.split(last)
    # The `sweeper` script beside the sweep's Python: runnable with no venv activated.
    assert Path(command[0]).name == "sweeper" and command[1:3] == ["sync", "--experiment"]
    synced = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert synced.returncode == 0, synced.stderr[-2000:]
    # Read the new file itself: this process's MLflow still holds an engine on the deleted one.
    with contextlib.closing(sqlite3.connect(database)) as db:
        (finished,) = db.execute(
            "SELECT count(*) FROM runs JOIN tags ON tags.run_uuid = runs.run_uuid WHERE "
            "tags.key = 'mlflow.parentRunId' AND runs.status = 'FINISHED'").fetchone()
    assert finished == planned
