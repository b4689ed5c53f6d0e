"""The user-facing commands, run as a person runs them: subprocesses where the process is the
point (the exit status, Hydra's own entry point, a crash's report, Ray's start), in this
process (`testkit.in_process`) where the command refuses its input before any work."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Optional

import yaml

from testkit.in_process import run_command

REPO = Path(__file__).resolve().parents[2]


def run(*args: str, cwd: Path, timeout: int = 120,
        env: Optional[dict[str, str]] = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_cifar10_without_data_stops_before_ray_with_the_files_to_place(tmp_path):
    data_dir = tmp_path / "data"
    # The experiment asks for a quarter GPU; without one, local Ray is refused that first.
    result = run("-m", "sweeper", "+experiment=cifar10_lira", f"dataset.data_dir={data_dir}",
                 f"store.root={tmp_path / 'runs'}", "resources.train.num_gpus=0", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    message = result.stderr
    assert "'cifar10'" in message
    assert str(data_dir / "cifar10" / "cifar-10-python.tar.gz") in message
    assert "c58f30108f718f92721af3b95e74349a" in message
    # Refused before any work: no Ray started, nothing written.
    assert "Ray dashboard" not in result.stdout
    assert not (tmp_path / "runs").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_bad_config_is_refused_with_every_problem_named(tmp_path):
    result, _ = run_command("sweeper", "grid.p=[0,1.5]", "grid.attack=[lira,loss]",
                            "shadow.count=3", f"store.root={tmp_path / 'runs'}", cwd=tmp_path)
    assert result.returncode == 2
    for fragment in ("grid.p: 0", "grid.p: 1.5", "'lira' is unknown", "shadow.count=3"):
        assert fragment in result.stderr
    assert not (tmp_path / "runs").exists()


def test_help_explains_the_command(tmp_path):
    result = run("-m", "sweeper", "--help", cwd=tmp_path)
    assert result.returncode == 0
    assert "+experiment=NAME" in result.stdout and "python -m sweeper.cli.frontier_command" in result.stdout
    frontier = run("-m", "sweeper.cli.frontier_command", "--help", cwd=tmp_path)
    assert frontier.returncode == 0 and "--run-dir" in frontier.stdout
    # Its config is what a bare `python -m sweeper` runs: the quickstart's grid, not the base's.
    shown = yaml.safe_load(result.stdout.split("Override anything in the config (foo.bar=value)")[1]
                           .split("Grid values")[0])
    quickstart = yaml.safe_load((REPO / "conf" / "experiment" / "quickstart.yaml").read_text())
    assert shown["name"] == quickstart["name"] == "quickstart"
    for axis in ("epsilon", "p", "trial", "attack"):
        assert shown["grid"][axis] == quickstart["grid"][axis], axis
    assert shown["shadow"]["count"] == quickstart["shadow"]["count"]


def rerun_listing_modules(args: list[str], cwd: Path, said: Optional[list] = None) -> set[str]:
    """Run `python -m sweeper ARGS`, which must succeed as a no-op; the top-level packages it
    had imported when it exited (listed by an atexit handler, which a fast exit still runs),
    and its stdout's lines appended to `said` when given."""
    listing = cwd / "modules.json"
    listing.unlink(missing_ok=True)
    code = "\n".join([
        "import atexit, json, runpy, sys",
        "def listed():",
        f"    with open({str(listing)!r}, 'w') as out:",
        "        json.dump(sorted(sys.modules), out)",
        "atexit.register(listed)",
        "sys.argv = ['sweeper', *sys.argv[1:]]",
        "runpy.run_module('sweeper', run_name='__main__', alter_sys=True)",
    ])
    result = run("-c", code, *args, cwd=cwd)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "trained 0 of" in result.stdout and "computed 0 of" in result.stdout
    assert "frontier plot:" in result.stdout  # the summary is whole
    if said is not None:
        said += result.stdout.splitlines()
    return {name.split(".")[0] for name in json.loads(listing.read_text())}


def test_noop_rerun_loads_no_mlflow_matplotlib_or_ray_yet_backfills_mlflow(tmp_path,
                                                                          make_tiny_overrides,
                                                                          ray_local):
    """The reruns are processes of their own (what one imports is the point); the first run,
    which only fills the store, runs in this process on the session's Ray (no Ray to start)."""
    from mlflow import MlflowClient

    from sweeper.tracking.recorder import CELL_KEY_TAG, PARENT_TAG

    root = tmp_path / "runs"
    args = make_tiny_overrides(root, name="again", **{
        "grid.epsilon": "[inf]", "grid.p": "[0.5]", "grid.attack": "[loss,always_member]"})
    first, _ = run_command("sweeper", *args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    # Its output is a log (a pipe, not a terminal): no bar redrawn with escape codes, one line
    # per tenth of each stage instead.
    assert "\x1b" not in first.stdout + first.stderr and "\r" not in first.stdout + first.stderr
    assert "cells computed: 2/2 (100 %)" in first.stdout.splitlines()
    assert re.search(r"^models trained: (\d+)/\1 \(100 %\)$", first.stdout, re.MULTILINE)
    png = root / "sweeps" / "again" / "frontier.png"
    drawn = png.stat().st_mtime_ns

    # Nothing to train, compute, log or redraw: none of the three is even imported.
    said: list[str] = []
    loaded = rerun_listing_modules(args, tmp_path, said)
    assert not loaded & {"mlflow", "matplotlib", "ray"}, loaded & {"mlflow", "matplotlib", "ray"}
    assert png.stat().st_mtime_ns == drawn  # its table is unchanged: not drawn again
    # Issue 43.1: it still says how to open MLflow, on the sweep's page, as the first run did:
    # the command, then the URL, each on a line of its own, naming one port.
    for lines in (first.stdout.splitlines(), said):
        command, url = lines[-2:]
        argv = shlex.split(command)
        assert argv[2].endswith("/mlflow") and argv[3:5] == ["ui", "--backend-store-uri"]
        port = argv[argv.index("--port") + 1]
        assert url.startswith(f"http://127.0.0.1:{port}/#/experiments/") and " " not in url
        assert "viewStateShareKey=again" not in url  # ε = ∞ alone: no frontier view, the runs
    assert first.stdout.splitlines()[-1].split("/#/")[1] == said[-1].split("/#/")[1]

    # MLflow lost a cell's run: the next rerun notices, opens MLflow and logs it again.
    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("sweeper").experiment_id

    def cell_runs():
        return [r for r in client.search_runs([experiment], max_results=100) if PARENT_TAG in r.data.tags]

    before = cell_runs()
    assert len(before) == 2
    client.delete_run(before[0].info.run_id)
    assert "mlflow" in rerun_listing_modules(args, tmp_path)
    after = cell_runs()
    assert sorted(r.data.tags[CELL_KEY_TAG] for r in after) == sorted(
        r.data.tags[CELL_KEY_TAG] for r in before)
    assert {r.info.status for r in after} == {"FINISHED"}

    # A figure gone from the folder is drawn again.
    png.unlink()
    assert "matplotlib" in rerun_listing_modules(args, tmp_path)
    assert png.is_file()


def test_data_too_small_for_the_plan_is_refused_with_nothing_written(tmp_path):
    # mnist_subset holds 5 000 pool records; a 100 000-record pool is refused once the data is
    # loaded (beside Ray's start), still with exit code 2, before the store or MLflow is written.
    result = run("-m", "sweeper", "dataset.members=null", "dataset.pool_size=100000", "grid.epsilon=[inf]",
                 "grid.p=[0.5]", "grid.attack=[loss]", "shadow.count=2", "cluster.num_cpus=1",
                 "cluster.include_dashboard=false", f"store.root={tmp_path / 'runs'}",
                 cwd=tmp_path, timeout=300)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "pool records" in result.stderr and "100000" in result.stderr
    assert not (tmp_path / "runs").exists()


def test_cfg_job_works_in_any_position_among_overrides(tmp_path):
    # Hydra's parser takes options before the overrides only; with the quickstart appended it
    # failed on `+experiment=quickstart`, an argument the user never typed.
    for args in (["grid.p=[0.5]", "--cfg", "job"], ["grid.p=[0.5]", "--cfg", "job", "seed=7"],
                 ["--cfg", "job", "grid.p=[0.5]", "seed=7"]):
        result = run("-m", "sweeper", *args, cwd=tmp_path)
        assert result.returncode == 0, (args, result.stderr[-2000:])
        printed = yaml.safe_load(result.stdout)
        assert printed["grid"]["p"] == [0.5] and printed["name"] == "quickstart", args
        assert printed["seed"] == (7 if "seed=7" in args else 0)
    assert list(tmp_path.iterdir()) == []


def test_yamls_inf_alone_in_grid_epsilon_reaches_hydra_as_infinity(tmp_path):
    # `--cfg job` goes through Hydra's own entry point, not the preflight.
    result = run("-m", "sweeper", "grid.epsilon=[.inf]", "--cfg", "job", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert yaml.safe_load(result.stdout)["grid"]["epsilon"] == [float("inf")]
    assert list(tmp_path.iterdir()) == []


def test_bounds_plot_into_an_unwritable_folder_is_one_error_line(tmp_path):
    result, _ = run_command("sweeper.cli.bounds_command", "plot", "--out", "/proc/sweeper-plots", cwd=tmp_path)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert "--out='/proc/sweeper-plots'" in last and "cannot be created" in last


def test_sync_refuses_credentials_and_names_that_leave_the_store(tmp_path):
    root = tmp_path / "runs"
    result, _ = run_command("sweeper.cli.sync_command", "--store-root", str(root), "--experiment", "x",
                            "--tracking-uri", "http://alice:hunter2@127.0.0.1:5000", cwd=tmp_path)
    assert result.returncode == 2
    assert "--tracking-uri='http://alice:***@127.0.0.1:5000'" in result.stderr
    assert "MLFLOW_TRACKING_PASSWORD" in result.stderr
    assert "hunter2" not in result.stdout + result.stderr

    # A sweep that logged to the default store; MLflow's variable now names a server with a
    # password in it: refused too, before MLflow is asked anything.
    sweep = root / "sweeps" / "x"
    sweep.mkdir(parents=True)
    (sweep / "sweep.json").write_text(json.dumps({
        "name": "x", "sweep_key": "k", "cells": [], "tracking_uri": "",
        "config": {"tracking": {"uri": None, "experiment": "sweeper"}}}))
    env_uri = {"MLFLOW_TRACKING_URI": "http://alice:hunter2@127.0.0.1:5000"}
    result, _ = run_command("sweeper.cli.sync_command", "--store-root", str(root), "--experiment", "x",
                            cwd=tmp_path, env=env_uri)
    assert result.returncode == 2, result.stderr
    assert "MLFLOW_TRACKING_URI='http://alice:***@127.0.0.1:5000'" in result.stderr
    assert "hunter2" not in result.stdout + result.stderr

    outside = tmp_path / "outside"
    (outside / "sweep.json").parent.mkdir()
    (outside / "sweep.json").write_text("{}")
    result, _ = run_command("sweeper.cli.sync_command", "--store-root", str(root), "--experiment",
                            "../../outside", cwd=tmp_path)
    assert result.returncode == 2
    assert "--experiment='../../outside'" in result.stderr and "no '/'" in result.stderr


def test_mlflow_variable_with_credentials_stops_the_sweep_before_ray(tmp_path):
    result, _ = run_command("sweeper", f"store.root={tmp_path / 'runs'}", cwd=tmp_path,
                            env={"MLFLOW_TRACKING_URI": "https://alice:hunter2@mlflow.example"})
    assert result.returncode == 2, result.stderr[-2000:]
    assert "MLFLOW_TRACKING_URI='https://alice:***@mlflow.example'" in result.stderr
    assert "hunter2" not in result.stdout + result.stderr
    assert "Ray dashboard" not in result.stdout and list(tmp_path.iterdir()) == []


CRASHING = "\n".join([
    "import runpy, sys",
    "import sweeper.runner",
    "def crash(cfg, *args, **kwargs):",
    "    raise RuntimeError('injected after validation, DB at postgresql://u:hunter2@db/x')",
    "sweeper.runner.run_sweep = crash",
    "sys.argv = ['sweeper', *sys.argv[1:]]",
    "runpy.run_module('sweeper', run_name='__main__', alter_sys=True)",
])


def test_a_crash_after_validation_is_reported_scrubbed(tmp_path):
    # A `hydra.*` override sends the command through Hydra's launcher, whose own report of a
    # crash was "Error executing job with overrides: [...]", every override as typed.
    for extra in (["hydra.job.name=crash"], []):
        result = run("-c", CRASHING, "+cluster.runtime_env.env_vars.SWEEPER_PROBE=hunter2",
                     f"store.root={tmp_path / 'runs'}", *extra, cwd=tmp_path)
        assert result.returncode == 1, (extra, result.stderr[-2000:])
        assert "error: the sweep stopped on an unexpected RuntimeError" in result.stderr
        assert "injected after validation, DB at postgresql://u:***@db/x" in result.stderr
        assert "Error executing job with overrides" not in result.stderr
        assert "hunter2" not in result.stdout + result.stderr, extra
