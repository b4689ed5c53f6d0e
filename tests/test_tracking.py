"""What a sweep leaves in MLflow reads like a training experiment: a tiny sweep on real Ray and a
real MLflow SQLite store, then MLflow's own client reads back tags, timestamps and metrics."""

from __future__ import annotations

import getpass
import math
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient

from sweeper.runner import run_sweep
from sweeper.tracking import (CELL_KEY_TAG, EPSILON_INF_VALUE, PARENT_TAG, SWEEP_KEY_TAG,
                              cell_metrics, ui_command)

CHECKOUT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tracked_sweep(ray_local, make_tiny_config, tmp_path_factory):
    """One sweep, with the wall-clock window (ms since the epoch) it ran in."""
    cfg = make_tiny_config(tmp_path_factory.mktemp("tracked"))
    cfg.grid.attack = ["loss", "always_member"]
    started_ms = time.time() * 1000
    result = run_sweep(cfg, progress=False)
    ended_ms = time.time() * 1000
    client = MlflowClient(tracking_uri=result.tracking_uri)
    experiment = client.get_experiment_by_name(cfg.tracking.experiment)
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    sweep_run = next(r for r in runs if SWEEP_KEY_TAG in r.data.tags)
    cells = {r.data.tags[CELL_KEY_TAG]: r for r in runs if PARENT_TAG in r.data.tags}
    return result, (started_ms, ended_ms), client, experiment, sweep_run, cells


def test_every_metric_is_stamped_within_the_sweeps_wall_clock(tracked_sweep):
    result, (started, ended), client, _, sweep_run, cells = tracked_sweep
    assert len(cells) == len(result.results)
    for run in [sweep_run, *cells.values()]:
        for name in run.data.metrics:
            for point in client.get_metric_history(run.info.run_id, name):
                assert started <= point.timestamp <= ended, (name, point.timestamp)
    for run in cells.values():
        assert started <= run.info.start_time <= run.info.end_time <= ended


def test_experiment_opens_as_model_training(tracked_sweep):
    _, _, _, experiment, _, _ = tracked_sweep
    # MLflow 3's UI (server/js ExperimentKind) reads this tag; without it it may open as GenAI.
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"


def test_sweep_run_has_mlflows_standard_tags(tracked_sweep):
    _, _, _, _, sweep_run, _ = tracked_sweep
    tags = sweep_run.data.tags
    head = subprocess.run(["git", "-C", str(CHECKOUT), "rev-parse", "HEAD"],
                          capture_output=True, text=True)
    if head.returncode == 0:  # the tests run from a git checkout of sweeper
        assert tags["mlflow.source.git.commit"] == head.stdout.strip()
    assert tags["mlflow.source.type"] == "LOCAL"
    assert tags["mlflow.source.name"] == str(Path(sys.argv[0]).resolve())
    assert tags["mlflow.user"] == getpass.getuser()


def test_sweep_run_summarises_the_sweep(tracked_sweep):
    result, (started, ended), _, _, sweep_run, _ = tracked_sweep
    metrics, rows = sweep_run.data.metrics, result.results
    assert metrics["cells"] == len(rows) == result.cells_total
    assert metrics["violations"] == int(rows.violation.sum())
    assert metrics["models_trained"] == result.models_trained > 0
    assert 0 < metrics["wall_seconds"] <= (ended - started) / 1000
    margins = {name: value for name, value in metrics.items()
               if name.startswith("max_precision_minus_bound/")}
    expected = {}
    for row in rows.to_dict("records"):  # the largest precision − bound of each ε, by hand
        label = "inf" if math.isinf(row["epsilon"]) else f"{row['epsilon']:g}"
        name = f"max_precision_minus_bound/epsilon_{label}"
        expected[name] = max(expected.get(name, -math.inf), row["precision"] - row["bound"])
    assert set(margins) == {"max_precision_minus_bound/epsilon_4",
                            "max_precision_minus_bound/epsilon_inf"}
    assert margins == pytest.approx(expected)


def test_epsilon_is_a_plottable_metric(tracked_sweep):
    result, _, _, _, _, cells = tracked_sweep
    seen = set()
    for row in result.results.to_dict("records"):
        metrics = cells[row["cell_key"]].data.metrics
        assert metrics["epsilon_value"] == (EPSILON_INF_VALUE if math.isinf(row["epsilon"])
                                            else row["epsilon"])
        assert metrics["violation"] == float(row["violation"])
        seen.add(metrics["epsilon_value"])
    assert seen == {4.0, 1e9}


def test_key_metrics_come_first_and_nan_is_left_out():
    row = {"cell_key": "k", "model_key": "m", "dataset": "d", "model": "cnn", "epsilon": math.inf,
           "delta": 1e-5, "p": 0.5, "attack": "loss", "policy": "none", "trial": 0,
           "eval_records": 120, "tp": 3, "fp": 1, "epsilon_spent": math.nan,
           "violation": False, "bound": 1.0, "precision": 0.75}
    names = [name for name, _ in cell_metrics(row)]
    assert names[:4] == ["precision", "bound", "violation", "epsilon_value"]
    assert set(names[4:]) == {"eval_records", "tp", "fp"}  # no NaN, no coordinate
    assert dict(cell_metrics(row))["epsilon_value"] == 1e9


def test_mlflow_ui_hint_works_without_an_activated_venv(tmp_path):
    uri = f"sqlite:///{tmp_path / 'a folder' / 'mlflow.db'}"
    argv = shlex.split(ui_command(uri))
    assert argv[1:] == ["ui", "--backend-store-uri", uri, "--host", "127.0.0.1"]
    program = Path(argv[0])
    assert program.is_absolute() and os.access(program, os.X_OK)
    bare = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME")}
    bare["PATH"] = "/usr/bin:/bin"  # no venv on it
    shown = subprocess.run([*argv, "--help"], env=bare, capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert "--backend-store-uri" in shown.stdout
