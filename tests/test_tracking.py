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

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from mlflow import MlflowClient

from sweeper.runner import run_sweep
from sweeper.sync import sync
from sweeper.tracking import (CELL_KEY_TAG, EPSILON_INF_VALUE, PARENT_TAG, SWEEP_KEY_TAG,
                              SweepTracker, cell_metrics, score_metrics, ui_command)

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


# --- each cell run summarises its per-record scores ------------------------------------------

QUANTILES = {"q10": 0.1, "q25": 0.25, "q50": 0.5, "q75": 0.75, "q90": 0.9}


def expected_score_summary(scores: pd.DataFrame) -> dict[str, float]:
    """numpy's quantiles of one attack's stored scores, members and non-members apart."""
    expected = {}
    for group, rows in (("member", scores[scores.member]), ("nonmember", scores[~scores.member])):
        values = rows.score.dropna().to_numpy()
        for label, q in QUANTILES.items():
            expected[f"scores/{group}_{label}"] = float(np.quantile(values, q))
    return expected


def check_score_summaries(uri: str, experiment: str, results: pd.DataFrame, store_root: str,
                          sweep: str) -> None:
    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    runs = client.search_runs([found.experiment_id], max_results=1000)
    cells = {r.data.tags[CELL_KEY_TAG]: r for r in runs if PARENT_TAG in r.data.tags}
    # The scores as the readable dataset holds them: what a person would compute them from.
    scores = pd.read_parquet(Path(store_root) / "results" / "scores",
                             filters=[("sweep", "==", sweep)])
    assert len(cells) == len(results)
    for row in results.to_dict("records"):
        logged = {name: value for name, value in cells[row["cell_key"]].data.metrics.items()
                  if name.startswith("scores/")}
        expected = expected_score_summary(scores[scores.scores_key == row["scores_key"]])
        assert len(expected) == 10
        assert logged == pytest.approx(expected, rel=1e-12, abs=1e-12), row["attack"]


def test_each_cell_run_carries_its_score_quantiles(tracked_sweep):
    result, _, _, experiment, _, _ = tracked_sweep
    check_score_summaries(result.tracking_uri, experiment.name, result.results,
                          str(Path(result.results_dir).parents[1]), result.name)


def test_sync_logs_the_same_score_quantiles(tracked_sweep, tmp_path):
    result, _, _, experiment, _, _ = tracked_sweep
    store_root = str(Path(result.results_dir).parents[1])
    elsewhere = f"sqlite:///{tmp_path / 'backfill.db'}"  # a tracking store that holds nothing yet
    report = sync(store_root, result.name, tracking_uri=elsewhere)
    assert report.logged == len(result.results)
    check_score_summaries(elsewhere, experiment.name, result.results, store_root, result.name)


def test_score_summary_by_hand_leaves_out_records_without_a_score():
    scores = pa.table({"score": pa.array([0.0, None, 10.0, None], type=pa.float64()),
                       "member": [True, True, True, False]})
    # Members' scores 0 and 10: linear quantiles are 10 q.  Non-members have no score at all.
    assert dict(score_metrics(scores)) == {
        "scores/member_q10": 1.0, "scores/member_q25": 2.5, "scores/member_q50": 5.0,
        "scores/member_q75": 7.5, "scores/member_q90": 9.0}


# --- a rerun reopens the sweep's run without stretching its Duration ---------------------------

HOUR_MS = 3_600_000


def now_ms() -> int:
    return int(time.time() * 1000)


def earlier_sweep_run(client: MlflowClient, experiment_id: str, finished_after_ms: int = None):
    """A sweep run an earlier invocation opened an hour ago; finished `finished_after_ms` later
    (None: killed while it ran, so still RUNNING)."""
    start = now_ms() - HOUR_MS
    run = client.create_run(experiment_id, start_time=start, run_name="sweep",
                            tags={SWEEP_KEY_TAG: "plan", "sweeper.sweep": "sweep"})
    if finished_after_ms is not None:
        client.set_terminated(run.info.run_id, "FINISHED", end_time=start + finished_after_ms)
    return run.info.run_id, start


def cell_row(key: str) -> dict:
    return {"cell_key": key, "model_key": "m", "scores_key": "s", "dataset": "d", "model": "cnn",
            "epsilon": 4.0, "delta": 1e-5, "p": 0.5, "attack": "loss", "policy": "none",
            "trial": 0, "precision": 0.6, "bound": 0.9, "violation": False}


def reopen_and_finish(uri: str) -> tuple[SweepTracker, int, int]:
    opened = now_ms()
    tracker = SweepTracker(uri, "sweeps", "sweep", "plan", {}, None)
    tracker.finish(failed=False)
    return tracker, opened, now_ms()


def test_rerun_adds_its_own_time_to_a_finished_sweep_run(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    experiment_id = client.create_experiment("sweeps")
    run_id, start = earlier_sweep_run(client, experiment_id, finished_after_ms=60_000)

    tracker, opened, closed = reopen_and_finish(uri)
    assert tracker.run_id == run_id  # the same run, not a second one
    assert len(client.search_runs([experiment_id], f"tags.`{SWEEP_KEY_TAG}` = 'plan'")) == 1
    info = client.get_run(run_id).info
    assert info.status == "FINISHED" and info.start_time == start
    # 60 s before, plus this invocation's seconds; never the hour between the two.
    assert 60_000 <= info.end_time - start <= 60_000 + (closed - opened)


def test_rerun_after_a_killed_invocation_counts_it_until_its_last_cell(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    experiment_id = client.create_experiment("sweeps")
    run_id, start = earlier_sweep_run(client, experiment_id)  # killed: still RUNNING
    cell = client.create_run(experiment_id, start_time=start + 30_000,
                             tags={PARENT_TAG: run_id, CELL_KEY_TAG: "c1"})
    client.set_terminated(cell.info.run_id, "FINISHED", end_time=start + 40_000)

    # The second invocation logs one cell and is killed in turn; the third finishes.
    second_opened = now_ms()
    second = SweepTracker(uri, "sweeps", "sweep", "plan", {}, None)
    assert second.logged_cells == {"c1"}
    second.log_cell(cell_row("c2"))
    third, _, closed = reopen_and_finish(uri)
    assert third.logged_cells == {"c1", "c2"}  # nothing logged twice
    info = client.get_run(run_id).info
    assert info.status == "FINISHED" and info.start_time == start
    # 40 s of the first invocation (until its last cell), then the other two's seconds.
    assert 40_000 <= info.end_time - start <= 40_000 + (closed - second_opened)
