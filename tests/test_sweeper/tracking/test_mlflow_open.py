"""What a sweep prints to open MLflow works when pasted (issue 43.1): the `mlflow ui` command on a
line of its own, started by a real bash exactly as printed, answers at the URL on the next line
(same port) with the sweep's experiment; the Ray token hint runs with no venv on PATH.  The
store is real (MLflow on SQLite, written by the tracker); the sweep's run is not (no Ray)."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest

from sweeper.tracking.ui import DEFAULT_UI_PORT, experiment_page, open_lines
from sweeper.cluster.dashboard import auth_hint
from sweeper.runner import SweepResult
from sweeper.summary import where_to_look
from sweeper.tracking.recorder import SweepTracker

#: No venv on it: what a new shell has.
BARE_PATH = "/usr/bin:/bin"


def bare_environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONHOME", "PYTHONPATH", "MLFLOW_TRACKING_URI")}
    env["PATH"] = BARE_PATH
    return env


def frontier_cells() -> pd.DataFrame:
    return pd.DataFrame([
        {"dataset": "digits", "model": "mlp", "attack": "loss", "policy": "quantile_max",
         "epsilon": e, "delta": 1e-5, "p": p, "trial": 0, "precision": 0.6, "tp": 3, "fp": 2,
         "violation": False, "bound": 0.9} for e in (1.0, 4.0) for p in (0.2, 0.5)])


@pytest.fixture
def logged(tmp_path) -> tuple[SweepResult, str]:
    """A sweep's run in a real SQLite store under a folder with a space in its name, its
    frontier logged (so the page opens its saved view), and the result a sweep would print."""
    root = tmp_path / "a store"
    root.mkdir()
    uri = f"sqlite:///{root / 'mlflow.db'}"
    tracker = SweepTracker(uri, "sweeper", "pasted", "key", {}, (root / "mlartifacts").as_uri())
    tracker.log_frontier_table(frontier_cells())
    tracker.terminate(failed=False)
    result = SweepResult(name="pasted", results=frontier_cells(), sweep_dir=str(root / "sweeps" / "pasted"),
                         results_dir=str(root / "results"), tracking_uri=uri, models_total=0,
                         models_trained=0, cells_total=4, cells_computed=4, seconds=1.0,
                         tracking_page=tracker.page())
    return result, tracker.experiment_id


def answer(url: str, deadline: float) -> bytes:
    """`url`'s body once the server answers it (polled until `deadline`, monotonic)."""
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return response.read()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_the_printed_lines_start_the_ui_and_open_the_sweep_when_pasted(logged):
    """With MLflow's default port held (by another MLflow, say): the command names another, and
    the URL that port."""
    result, experiment_id = logged
    with contextlib.closing(socket.socket()) as holder:
        with contextlib.suppress(OSError):  # held already: by someone else
            holder.bind(("127.0.0.1", DEFAULT_UI_PORT))
            holder.listen()
        lines = where_to_look(result).splitlines()
    command, url = lines[-2:]
    assert url.startswith("http://127.0.0.1:") and "&compareRunsMode=CHART&" in url
    assert " " not in url and "mlflow ui" not in url  # nothing but the URL on its line
    assert url.endswith("/" + experiment_page(experiment_id, "pasted"))
    argv = shlex.split(command)
    port = argv[argv.index("--port") + 1]
    assert port != str(DEFAULT_UI_PORT)
    base = f"http://127.0.0.1:{port}"
    assert url.startswith(base + "/#/")  # the port the command listens on
    # The line as pasted into a new shell: bash, no venv on PATH, in the folder the user is in.
    server = subprocess.Popen(["bash", "-c", command], env=bare_environment(), cwd="/",
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              start_new_session=True)
    try:
        page = answer(url, time.monotonic() + 120)  # the page the URL names (its #… is the browser's)
        assert b"<html" in page.lower() or b"<!doctype html" in page.lower()
        asked = f"{base}/ajax-api/2.0/mlflow/experiments/get?experiment_id={experiment_id}"
        experiment = json.loads(answer(asked, time.monotonic() + 30))["experiment"]
        assert experiment["name"] == "sweeper"  # this store's, not another MLflow's
        tags = {tag["key"]: tag["value"] for tag in experiment.get("tags", [])}
        assert "mlflow.sharedViewState.pasted" in tags  # the view the URL opens
        assert server.poll() is None
        # Issue 51: a rerun while this UI serves the store points at it, not at a second UI;
        # a UI there that serves another store (its experiment 1 elsewhere) is not this one.
        page = result.tracking_page
        assert open_lines(result.tracking_uri, page, ui_ports=(int(port),)) == [url]
        other = result.sweep_dir.replace("a store", "another store")
        Path(other).parent.parent.mkdir(parents=True)
        elsewhere = f"sqlite:///{Path(other).parent.parent / 'mlflow.db'}"
        again = SweepTracker(elsewhere, "sweeper", "pasted", "key", {},
                             (Path(other).parent.parent / "mlartifacts").as_uri())
        again.terminate(failed=False)
        assert again.experiment_id == experiment_id  # the same id, in another store
        assert "mlflow ui" in open_lines(elsewhere, page, ui_ports=(int(port),))[0]
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # bash, the CLI and its uvicorn
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=30)
        server.stderr.close()


def test_the_ray_token_hint_runs_without_the_venv(monkeypatch):
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    hint = auth_hint()
    assert hint.startswith("its token: ")
    argv = shlex.split(hint.removeprefix("its token: "))
    assert argv[-1] == "get-auth-token" and Path(argv[0]).is_absolute()
    shown = subprocess.run([*argv, "--help"], env=bare_environment(), capture_output=True,
                           text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "authentication token" in shown.stdout
