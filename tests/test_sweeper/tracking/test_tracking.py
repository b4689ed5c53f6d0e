"""What a sweep leaves in MLflow reads like a training experiment: a tiny sweep on real Ray and a
real MLflow SQLite store, then MLflow's own client reads back tags, timestamps and metrics."""

from __future__ import annotations

import getpass
import json
import math
import os
import shlex
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from mlflow import MlflowClient
from mlflow.entities import ViewType

from sweeper.runner import run_sweep
from sweeper.tracking.sync import sync
from sweeper.tracking.run_records import (CELL_METRICS, EPSILON_INF_VALUE, cell_metrics,
                                          score_quantiles)
from sweeper.tracking.ui import ui_command
from sweeper.tracking.recorder import (CELL_KEY_TAG, FRONTIER_TABLE, PARENT_TAG, SCORE_TABLE,
                                       SWEEP_KEY_TAG, SweepTracker)

CHECKOUT = Path(__file__).resolve().parents[3]


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


def test_each_cell_says_what_it_cost(tracked_sweep):
    """A cell run's Duration is only its logging time: what the cell cost is two metrics and
    two columns, the target's training (its share of the task) and the attack task's seconds."""
    result, (started, ended), _, _, _, cells = tracked_sweep
    window = (ended - started) / 1000
    for column in ("train_seconds", "attack_seconds"):
        assert result.results[column].between(0, window, inclusive="neither").all(), column
    for row in result.results.itertuples():
        metrics = cells[row.cell_key].data.metrics
        assert metrics["train_seconds"] == pytest.approx(row.train_seconds)
        assert metrics["attack_seconds"] == pytest.approx(row.attack_seconds)


def test_experiment_opens_as_model_training(tracked_sweep):
    _, _, _, experiment, _, _ = tracked_sweep
    # MLflow's ExperimentKind tag: 3.17's UI picks its mode by URL or a browser switch instead
    # (README), but an MLflow that reads the tag opens the experiment as model training.
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"


def test_sweep_run_has_mlflows_standard_tags(tracked_sweep):
    _, _, _, _, sweep_run, _ = tracked_sweep
    tags = sweep_run.data.tags
    head = subprocess.run(["git", "-C", str(CHECKOUT), "rev-parse", "HEAD"],
                          capture_output=True, text=True)
    if head.returncode == 0:  # the tests run from a git checkout of sweeper
        assert tags["mlflow.source.git.commit"] == head.stdout.strip()
    assert tags["mlflow.source.type"] == "LOCAL"
    # The program that ran: its file, resolved; a program that is no file is named as it was
    # (pytest-xdist's workers run as `python -c`).
    program = Path(sys.argv[0])
    assert tags["mlflow.source.name"] == (str(program.resolve()) if program.exists()
                                          else sys.argv[0])
    assert tags["mlflow.user"] == getpass.getuser()


def test_sweep_run_summarises_the_sweep(tracked_sweep):
    result, (started, ended), _, _, sweep_run, _ = tracked_sweep
    metrics, rows = sweep_run.data.metrics, result.results
    assert metrics["cells"] == len(rows) == result.cells_total
    assert metrics["violations"] == int(rows.violation.sum())
    assert metrics["models_trained"] == result.models_trained > 0
    assert 0 < metrics["wall_seconds"] <= (ended - started) / 1000
    margins = {name: value for name, value in metrics.items() if name.startswith("headroom/")}
    expected = {}
    for row in rows.to_dict("records"):  # the least bound − precision per ε, where U < 0.99
        if row["bound"] < 0.99:
            name = f"headroom/epsilon_{row['epsilon']:g}"
            expected[name] = min(expected.get(name, math.inf), row["bound"] - row["precision"])
    # U(4, 0.3) = 1/(1 + e^-4·(0.7/0.3)·(1 − 1e-5/0.01)) = 0.959 bounds something; U(4, 0.7) =
    # 0.992 and U(∞, ·) = 1 do not: no gap of +3e-8 that nobody can act on.
    assert set(margins) == {"headroom/epsilon_4"}
    assert margins == pytest.approx(expected)
    # Issue 43.2: the summary first (MLflow's run page lists metrics as first logged), with the
    # largest precision − bound over the same cells: what is left of the least headroom.
    order = [metric.key for metric in sweep_run.to_proto().data.metrics]
    assert order[:3] == ["cells", "violations", "max precision - bound"], order[:5]
    assert metrics["max precision - bound"] == pytest.approx(-min(expected.values()))
    # The frontier figure is a logged image, the first card of the sweep's view.
    client = MlflowClient(result.tracking_uri)
    images = [item.path for item in client.list_artifacts(sweep_run.info.run_id, "images")]
    assert sorted(path.rsplit(".", 1)[1] for path in images) == ["png", "webp"]


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


def test_a_cell_logs_what_a_reader_compares_first_and_little_else():
    row = {"cell_key": "k", "model_key": "m", "dataset": "d", "model": "cnn", "epsilon": math.inf,
           "delta": 1e-5, "p": 0.5, "attack": "loss", "policy": "none", "trial": 0,
           "eval_records": 120, "tp": 3, "fp": 1, "epsilon_spent": math.nan, "auc": 0.61,
           "violation": False, "bound": 1.0, "precision": 0.75, "precision_ci_low": 0.3,
           "precision_ci_high": 0.95, "bound_tight": math.nan, "threshold": 0.2}
    # In CELL_METRICS' order; no NaN (ε spent at ε = ∞, no tightest bound), no count, no
    # threshold: those stay in Parquet.
    assert [name for name, _ in cell_metrics(row)] == [
        "precision", "precision_ci_low", "precision_ci_high", "bound", "violation", "auc",
        "epsilon_value"]
    assert dict(cell_metrics(row))["epsilon_value"] == 1e9


def test_the_ui_opens_on_a_described_experiment_and_a_readable_sweep(tracked_sweep, capsys):
    """What MLflow's UI shows first, read through MLflow's client: a described experiment, a
    parent run with its dataset and its frontier table, cell runs named by their policy too and
    logging only `CELL_METRICS`; the sweep's last line opens the experiment's page."""
    from sweeper.summary import print_summary

    result, _, client, experiment, sweep_run, cells = tracked_sweep
    assert "Thudi et al." in experiment.tags["mlflow.note.content"]
    assert "child run per cell" in sweep_run.data.tags["mlflow.note.content"]
    (dataset,) = client.get_run(sweep_run.info.run_id).inputs.dataset_inputs
    assert dataset.dataset.name == "mnist_subset" and len(dataset.dataset.digest) == 8
    assert '"pool_size": 240' in dataset.dataset.profile
    for row in result.results.to_dict("records"):
        run = cells[row["cell_key"]]
        eps = "∞" if math.isinf(row["epsilon"]) else f"{row['epsilon']:g}"
        assert run.info.run_name.startswith(f"ε={eps} p={row['p']:g} t{row['trial']} · ")
        assert f" · {row['attack']} {row['policy']} δ=" in run.info.run_name
        assert set(run.data.metrics) <= set(CELL_METRICS)
    # The frontier, trials pooled: one trial here, so each row's precision is its cell's.
    table = logged_table(client, sweep_run.info.run_id, FRONTIER_TABLE)
    assert len(table) == len(result.results)
    assert list(table.columns[:6]) == ["attack", "epsilon", "p", "precision", "bound", "violations"]
    merged = table.merge(result.results, on=["attack", "policy", "p", "delta"],
                         suffixes=("", "_cell"))
    merged = merged[merged["epsilon"].astype(str) == merged["epsilon_cell"].map(
        lambda e: "inf" if math.isinf(e) else str(e))]
    assert len(merged) == len(table)
    assert np.allclose(merged["precision"], merged["precision_cell"], equal_nan=True)
    url = (f"#/experiments/{experiment.experiment_id}/runs?viewStateShareKey=tiny"
           "&compareRunsMode=CHART&workflowType=machine_learning")
    assert result.tracking_page == url
    print_summary(result)
    command, last = capsys.readouterr().out.strip().splitlines()[-2:]
    port = shlex.split(command)[shlex.split(command).index("--port") + 1]
    assert last == f"http://127.0.0.1:{port}/" + url  # the URL alone on the last line


def test_the_frontier_is_drawn_by_mlflows_own_charts(tracked_sweep):
    """Issue 32.3: on the sweep's run, per attack and p, the pooled precision and the bound as
    series whose steps pair with the ε series; the experiment holds the sweep's saved view."""
    import base64
    import zlib

    from sweeper.tracking.ui import view_tag

    result, _, client, experiment, sweep_run, _ = tracked_sweep
    history = {name: sorted((m.step, m.value) for m in client.get_metric_history(
        sweep_run.info.run_id, name)) for name in sweep_run.data.metrics}
    assert history["frontier epsilon"] == [(4000, 4.0)]  # ε in thousandths; ∞ has no axis
    finite = result.results[result.results["epsilon"] == 4.0]
    for row in finite.to_dict("records"):  # one trial: the pooled precision is the cell's
        chart = f"{row['attack']} frontier"
        assert history[f"{chart}/precision p {row['p']:g}"] == [(4000, pytest.approx(row["precision"]))]
        assert history[f"{chart}/bound p {row['p']:g}"] == [(4000, pytest.approx(row["bound"]))]
    envelope = json.loads(experiment.tags[view_tag("tiny")])
    state = json.loads(zlib.decompress(base64.b64decode(envelope["state"].split(";", 1)[1])))
    charted = {key for card in state["compareRunCharts"] if not card["deleted"]
               for key in card.get("selectedMetricKeys", [])}
    assert charted == {name for name in history if " frontier/" in name}
    assert state["compareRunCharts"][0]["imageKeys"] == ["frontier"]  # the figure first
    assert len(charted) == 2 * 2 * 2  # loss and always_member × 2 p × (precision, bound)


def frontier_cells(epsilons=(1.0, 4.0)) -> pd.DataFrame:
    return pd.DataFrame([
        {"dataset": "digits", "model": "mlp", "attack": "loss", "policy": "quantile_max",
         "epsilon": e, "delta": 1e-5, "p": p, "trial": 0, "precision": 0.6, "tp": 3, "fp": 2,
         "violation": False, "bound": 0.9} for e in epsilons for p in (0.2, 0.5)])


def test_only_a_complete_frontier_is_charted_and_a_view_too_big_is_never_a_failure(
        tmp_path, monkeypatch):
    """MLflow keeps every point: a sweep with failed cells logs its table, not its series.  A
    view over MLflow's tag limit loses its hidden cards, then is left out; tracking goes on."""
    import sweeper.tracking.recorder as tracking
    from sweeper.tracking.ui import view_tag

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"

    def logged(name: str, complete: bool) -> tuple[SweepTracker, set, dict]:
        tracker = SweepTracker(uri, "frontiers", name, f"key-{name}", {},
                               (tmp_path / "mlartifacts").as_uri())  # not ./mlruns
        tracker.log_frontier_table(frontier_cells(), complete=complete)
        client = MlflowClient(uri)
        metrics = set(client.get_run(tracker.run_id).data.metrics)
        return tracker, metrics, client.get_experiment(tracker.experiment_id).tags

    partial, metrics, tags = logged("partial", complete=False)
    assert "frontier epsilon" not in metrics and view_tag("partial") not in tags
    assert partial.failure is None and partial.view is None
    whole, metrics, tags = logged("whole", complete=True)
    assert "loss frontier/precision p 0.2" in metrics and view_tag("whole") in tags
    assert whole.page().endswith("viewStateShareKey=whole&compareRunsMode=CHART"
                                 "&workflowType=machine_learning")
    full = len(tags[view_tag("whole")])
    monkeypatch.setattr(tracking, "MAX_TAG_VALUE", full - 1)  # fits without its hidden cards
    smaller, _, tags = logged("smaller", complete=True)
    state_len = len(tags[view_tag("smaller")])
    assert smaller.view == "smaller" and state_len < full
    monkeypatch.setattr(tracking, "MAX_TAG_VALUE", 10)  # fits in no way
    none, metrics, tags = logged("none", complete=True)
    assert "frontier epsilon" in metrics and view_tag("none") not in tags
    assert none.failure is None and none.view is None


def test_the_dataset_profile_says_the_pool_it_drew_from_and_nothing_unset():
    """Issue 32.4: the quickstart's profile said `pool_size: null` (no cut: the whole pool)."""
    import json

    from sweeper.tracking.run_records import dataset_input

    settings = {"dataset.name": "digits", "dataset.test_size": 297, "dataset.pool_size": None,
                "dataset.members": None, "dataset.eval_records": 100, "dataset.synthetic": False}
    profile = json.loads(dataset_input(settings).dataset.profile)
    assert profile == {"pool_size": 1797 - 297, "eval_records": 100, "test_size": 297}
    stand_in = json.loads(dataset_input({**settings, "dataset.synthetic": True}).dataset.profile)
    assert stand_in["pool_size"] == 2000  # the stand-in pool (STAND_IN_POOL)
    cut = json.loads(dataset_input({**settings, "dataset.members": 400}).dataset.profile)
    assert cut == {"members": 400, "eval_records": 100, "test_size": 297}


def test_mlflow_ui_hint_works_without_an_activated_venv(tmp_path):
    uri = f"sqlite:///{tmp_path / 'a folder' / 'mlflow.db'}"
    from mlflow.environment_variables import MLFLOW_SERVER_ENABLE_JOB_EXECUTION

    argv = shlex.split(ui_command(uri, 5123))
    # Light (issue 32.4): MLflow's own switch for its job consumers off, one uvicorn worker.
    assert argv[:2] == ["env", f"{MLFLOW_SERVER_ENABLE_JOB_EXECUTION.name}=false"]
    assert argv[3:] == ["ui", "--backend-store-uri", uri, "--host", "127.0.0.1", "--port", "5123",
                        "--workers", "1"]
    program = Path(argv[2])
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
            expected[f"{group}_{label}"] = float(np.quantile(values, q))
    return expected


def logged_table(client: MlflowClient, run_id: str, name: str) -> pd.DataFrame:
    """A table `log_table` wrote on a run, read back as the UI reads it: its JSON artifact."""
    with open(client.download_artifacts(run_id, name)) as handle:
        stored = json.load(handle)
    return pd.DataFrame(stored["data"], columns=stored["columns"])


def test_a_rerun_replaces_the_frontier_table_rather_than_appending_to_it(tracked_sweep, tmp_path):
    # MLflow's `log_table` appends to a table the run has already: each rerun that tracked
    # (failed cells retried, a grid grown, a backfill) repeated every row of the frontier.
    result, _, client, _, _, _ = tracked_sweep
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tables = []
    for _ in range(2):  # the first invocation and a rerun, on one sweep run
        tracker = SweepTracker(uri, "sweeps", "sweep", "plan", {}, (tmp_path / "art").as_uri())
        tracker.log_frontier_table(result.results)
        tracker.finish(failed=False)
        assert tracker.failure is None, tracker.failure
        reader = MlflowClient(tracking_uri=uri)
        tables.append(logged_table(reader, tracker.run_id, FRONTIER_TABLE))
    assert len(tables[0]) == len(result.results)
    pd.testing.assert_frame_equal(tables[1], tables[0])
    # Still a table to the UI's table view (the run's tag that lists its tables).
    listed = reader.get_run(tracker.run_id).data.tags["mlflow.loggedArtifacts"]
    assert {"path": FRONTIER_TABLE, "type": "table"} in json.loads(listed)


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
        run = cells[row["cell_key"]]
        assert not any(name.startswith("scores/") for name in run.data.metrics)  # a table now
        table = logged_table(client, run.info.run_id, SCORE_TABLE).set_index("records")
        logged = {f"{group}_{label}": table.loc[group, label]
                  for group in ("member", "nonmember") for label in QUANTILES}
        expected = expected_score_summary(scores[scores.scores_key == row["scores_key"]])
        assert len(expected) == 10
        # MLflow's table artifact is pandas JSON: 10 significant digits.
        assert logged == pytest.approx(expected, rel=1e-9, abs=1e-9), row["attack"]


def test_a_grown_sweep_keeps_its_one_run_and_logs_each_cell_once(ray_local, make_tiny_config,
                                                                 tmp_path):
    """Issue 30.11: another attack on the same name made a second sweep run and logged the
    finished cells again under it.  Grown twice (an attack, then a p), then synced: one run
    for the sweep, carrying the last plan's key, and one run per cell."""
    cfg = make_tiny_config(tmp_path)
    cfg.grid.epsilon, cfg.grid.p, cfg.grid.attack = [math.inf], [0.3], ["loss"]
    grown = [{}, {"attack": ["loss", "always_member"]}, {"p": [0.3, 0.7]}]
    for change in grown:
        for axis, values in change.items():
            setattr(cfg.grid, axis, values)
        result = run_sweep(cfg, progress=False)
        assert not result.failures
    report = sync(cfg.store.root, cfg.name)
    assert report.logged == 0
    client = MlflowClient(tracking_uri=result.tracking_uri)
    experiment = client.get_experiment_by_name(cfg.tracking.experiment)
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    sweep_runs = [r for r in runs if SWEEP_KEY_TAG in r.data.tags]
    cell_keys = [r.data.tags[CELL_KEY_TAG] for r in runs if PARENT_TAG in r.data.tags]
    manifest = json.loads((Path(cfg.store.root) / "sweeps" / cfg.name / "sweep.json").read_text())
    assert len(sweep_runs) == 1
    assert sweep_runs[0].data.tags[SWEEP_KEY_TAG] == manifest["sweep_key"]
    assert len(manifest["earlier_keys"]) == 2
    assert sorted(cell_keys) == sorted(manifest["cells"]) and len(cell_keys) == 4


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
    assert score_quantiles(scores).to_dict("records") == [
        {"records": "member", "count": 2, "q10": 1.0, "q25": 2.5, "q50": 5.0, "q75": 7.5,
         "q90": 9.0}]


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


def mlflow_turns_into_its_own_error(stop: BaseException):
    """What MLflow's SQL session does with a signal raised mid-query (CI saw it): the session's
    clean-up fails in turn, and MLflow raises its own error from that one."""
    from mlflow.exceptions import MlflowException

    def call(*args, **kwargs):
        try:
            raise stop
        except BaseException:
            try:
                raise RuntimeError("(sqlite3.OperationalError) database is locked")
            except RuntimeError as locked:
                raise MlflowException("database is locked") from locked
    return call


def test_ctrl_c_that_mlflow_turns_into_its_own_error_still_stops_the_sweep(tmp_path):
    import signal

    from sweeper.interrupts import Interrupted

    tracker = SweepTracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "sweeps", "sweep", "plan", {},
                           None)
    stop = Interrupted(signal.SIGTERM)
    tracker.client.create_run = mlflow_turns_into_its_own_error(stop)
    with pytest.raises(Interrupted) as raised:
        tracker.log_cell(cell_row("c1"))
    assert raised.value is stop
    # A plain MLflow failure is still only a tracking failure: the sweep goes on.
    tracker.client.create_run = mlflow_turns_into_its_own_error(ValueError("server error"))
    tracker.log_cell(cell_row("c2"))
    assert tracker.failure and tracker.missed_cells == {"c2"}


def test_the_clean_up_after_ctrl_c_survives_a_failing_mlflow(tmp_path):
    import signal

    from sweeper.interrupts import Interrupted

    tracker = SweepTracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "sweeps", "sweep", "plan", {},
                           None)
    try:
        raise Interrupted(signal.SIGINT)
    except Interrupted as stop:  # the runner closes its sinks while this is handled
        tracker.client.create_run = mlflow_turns_into_its_own_error(stop)
        tracker.log_cell(cell_row("c1"))  # does not raise the Ctrl-C a second time
    assert tracker.missed_cells == {"c1"}


def test_a_signal_between_mlflow_creating_a_cell_run_and_returning_it_leaves_nothing_running(
        tmp_path):
    # One way a cell run was left RUNNING: the signal lands after MLflow committed the new run
    # and before `create_run` returned its id, so the tracker did not know the run to end.
    import signal

    from sweeper.interrupts import Interrupted

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = SweepTracker(uri, "sweeps", "sweep", "plan", {}, None)
    tracker.log_cell(cell_row("c1"))
    create_run = tracker.client.create_run

    def created_then_stopped(*args, **kwargs):
        create_run(*args, **kwargs)
        raise Interrupted(signal.SIGTERM)
    tracker.client.create_run = created_then_stopped
    with pytest.raises(Interrupted):
        tracker.log_cell(cell_row("c2"))
    tracker.interrupt()  # what the runner's clean-up calls
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([tracker.experiment_id], run_view_type=ViewType.ALL)
    assert sorted(r.info.status for r in runs) == ["FINISHED", "KILLED", "KILLED"]
    # The rerun reuses the killed cell run: one run per cell.
    rerun = SweepTracker(uri, "sweeps", "sweep", "plan", {}, None)
    assert rerun.logged_cells == {"c1"} and set(rerun.orphans) == {"c2"}
    rerun.log_cell(cell_row("c2"))
    rerun.finish(failed=False)
    runs = client.search_runs([tracker.experiment_id], run_view_type=ViewType.ALL)
    assert sorted(r.info.status for r in runs) == ["FINISHED"] * 3


def interrupt_mid_statement(tmp_path: Path, statement: str, land) -> tuple[SweepTracker, list, float]:
    """Log a cell, calling `land()` (the signal) as SQLite returns from the first statement that
    starts with `statement`, then clean up as the runner does, while the interrupt is handled.
    Returns the tracker, every run and the clean-up's seconds; fails if logging did not stop."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    from sweeper.interrupts import Interrupted

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = SweepTracker(uri, "sweeps", "sweep", "plan", {}, None)
    tracker.log_cell(cell_row("c1"))
    running = [""]

    def note(conn, cursor, sql, *args):
        running[0] = sql

    def signal_lands(frame, what, call):
        if what == "c_return" and getattr(call, "__self__", None).__class__ is sqlite3.Cursor \
                and running[0].startswith(statement):
            sys.setprofile(None)
            land()
    took = None
    event.listen(Engine, "before_cursor_execute", note)
    sys.setprofile(signal_lands)
    try:
        tracker.log_cell(cell_row("c2"))
    except Interrupted:  # the runner's clean-up runs while the signal's exception is handled
        sys.setprofile(None)
        started = time.monotonic()
        tracker.interrupt()
        took = time.monotonic() - started
    finally:
        sys.setprofile(None)
        event.remove(Engine, "before_cursor_execute", note)
    assert took is not None, "the signal did not stop the logging"
    runs = MlflowClient(tracking_uri=uri).search_runs([tracker.experiment_id],
                                                      run_view_type=ViewType.ALL)
    return tracker, runs, took


@pytest.mark.parametrize("statement", ["INSERT INTO params", "INSERT INTO metrics"])
def test_a_signal_mid_statement_leaves_mlflows_database_unlocked_for_the_clean_up(tmp_path,
                                                                               statement):
    # CI saw the clean-up's writes wait on a lock the interrupted statement kept ("database is
    # locked" after 20 s each) and leave runs RUNNING.  The signal is raised where Python runs
    # a signal handler that arrived while SQLite ran the statement: as the C call returns.
    import signal

    from sweeper.interrupts import Interrupted

    def land():
        raise Interrupted(signal.SIGTERM)

    tracker, runs, took = interrupt_mid_statement(tmp_path, statement, land)
    assert took < 10 and tracker.failure is None, (took, tracker.failure)
    assert "RUNNING" not in {r.info.status for r in runs}


@pytest.mark.parametrize("statement", ["INSERT INTO runs", "INSERT INTO params",
                                       "INSERT INTO metrics", "SELECT"])
def test_the_commands_signal_mid_statement_waits_for_the_cell_to_be_logged(
        tmp_path, statement, command_signal_handlers):
    # CI again: with the command's handlers, SIGTERM landing in a statement still left the
    # clean-up locked out 20 s (SQLAlchemy's suspended result generators held the statement).
    # Now the tracker's calls on SQLite finish first (`sweeper.interrupts.deferred`).
    import signal

    tracker, runs, took = interrupt_mid_statement(  # a real SIGTERM to this process
        tmp_path, statement, lambda: os.kill(os.getpid(), signal.SIGTERM))
    assert took < 10 and tracker.failure is None, (took, tracker.failure)
    cells = {r.data.tags.get(CELL_KEY_TAG): r.info.status for r in runs if PARENT_TAG in r.data.tags}
    assert cells == {"c1": "FINISHED", "c2": "FINISHED"}  # logged whole before it stopped
    assert {r.info.status for r in runs if PARENT_TAG not in r.data.tags} == {"KILLED"}


def test_mlflow_console_lines_are_one_line_without_traceback_or_secret(tmp_path, capfd):
    import logging

    from sweeper.tracking.recorder import open_tracker

    assert open_tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "sweeps", "sweep", "plan", {}, None)
    try:
        raise RuntimeError("boom")
    except RuntimeError:  # MLflow's SQL session logs what it caught so (`_logger.exception`)
        logging.getLogger("mlflow.store.db.utils").exception(
            "SQLAlchemy database error. The following exception is caught.\n%s",
            "postgresql://sweeper:hunter2secret@db/mlflow: database is locked")
    err = capfd.readouterr().err
    assert "SQLAlchemy database error" in err
    assert "Traceback" not in err and "boom" not in err and "hunter2secret" not in err
