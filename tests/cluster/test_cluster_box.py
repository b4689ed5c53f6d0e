"""The real command, `python -m sweeper cluster=remote …`, across the cluster in a box
(`testkit.cluster_box`): Ray nodes that share no disk, home, /tmp, process table or address with
each other or with the driver, S3 and MLflow on PostgreSQL reached over the box's subnet, and
the faults a cluster user meets (docs/cluster.md names each test here beside its fault).

The tests share one box and run in this file's order; each one that breaks a node leaves as many
live workers as it found.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest

from testkit.cluster_box import BUCKET, Box, RayHost

SWEEP_TIMEOUT_S = 600
SUMMARY = re.compile(r"trained (\d+) of (\d+) models, computed (\d+) of (\d+) cells")

#: Run on the driver's host: every object under a store prefix, and each model's metadata.
LISTING = """
import json, sys
from pyarrow import fs
prefix = sys.argv[1]
s3 = fs.S3FileSystem(endpoint_override=sys.argv[2], scheme="http", region="us-east-1")
infos = s3.get_file_info(fs.FileSelector(f"{BUCKET}/{prefix}", recursive=True, allow_not_found=True))
paths = sorted(i.path[len(BUCKET) + len(prefix) + 2:] for i in infos if i.type == fs.FileType.File)
metas = [json.loads(s3.open_input_stream(f"{BUCKET}/{prefix}/{p}").readall())
         for p in paths if p.startswith("models/") and p.endswith("/meta.json")]
print(json.dumps({"paths": paths, "metas": metas}))
"""

#: Run on the driver's host: the MLflow runs of a sweep (its run, named by the sweep, in the
#: `sweeper` experiment) and of its cells (the sweep run's children), as "sweeps cells".
MLFLOW_RUNS = """
import sys
from mlflow import MlflowClient
client = MlflowClient(sys.argv[1])
experiment = client.get_experiment_by_name("sweeper")
runs = client.search_runs([experiment.experiment_id], max_results=5000) if experiment else []
sweeps = [r.info.run_id for r in runs
          if r.info.run_name == sys.argv[2] and "mlflow.parentRunId" not in r.data.tags]
cells = [r for r in runs if r.data.tags.get("mlflow.parentRunId") in sweeps]
print(len(sweeps), len(cells))
"""


def finish(popen: subprocess.Popen, timeout: float = SWEEP_TIMEOUT_S) -> tuple[int, str, str]:
    try:
        code = popen.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        popen.kill()
        raise
    return (code, Path(popen.stdout_path).read_text(errors="replace"),  # type: ignore[attr-defined]
            Path(popen.stderr_path).read_text(errors="replace"))  # type: ignore[attr-defined]


def summary(out: str) -> tuple[int, int, int, int]:
    found = SUMMARY.search(out)
    assert found, out[-3000:]
    trained, models, computed, cells = (int(group) for group in found.groups())
    return trained, models, computed, cells


def listing(box: Box, prefix: str) -> dict:
    code = LISTING.replace("BUCKET", repr(BUCKET))
    return json.loads(box.driver_python_argv(code, [prefix, box.services["s3"]]))


def run_sweep(box: Box, args: list[str], name: str, **env) -> tuple[int, str, str]:
    return finish(box.sweep(args, name, env=env or None))


def wait_for_training(box: Box, prefix: str, timeout: float = 300) -> str:
    """Block until a model's checkpoint (an epoch done, the model not finished) is in the store;
    its key."""
    code = f"""
import sys, time
from pyarrow import fs
s3 = fs.S3FileSystem(endpoint_override={box.services['s3']!r}, scheme="http", region="us-east-1")
deadline = time.monotonic() + {timeout}
while time.monotonic() < deadline:
    infos = s3.get_file_info(fs.FileSelector("{BUCKET}/{prefix}/checkpoints", allow_not_found=True))
    found = [i.base_name for i in infos if i.base_name.endswith(".pt")]
    if found:
        print(found[0][:-3]); sys.exit(0)
    time.sleep(0.2)
sys.exit("no checkpoint appeared")
"""
    return box.driver_python(code, timeout=timeout + 60).strip().splitlines()[-1]


def training_hosts(box: Box) -> list[RayHost]:
    """The worker hosts with a training task running."""
    import psutil

    found = []
    for host in box.workers():
        for pid in host.pids():
            try:
                if psutil.Process(pid).cmdline()[:1] and "ray::train" in " ".join(
                        psutil.Process(pid).cmdline()):
                    found.append(host)
                    break
            except psutil.Error:
                continue
    return found


def test_a_sweep_across_nodes_that_share_nothing_lands_everything_in_s3_and_mlflow(box):
    args = box.sweep_args("across", "across")
    code, out, err = run_sweep(box, args, "across")
    assert code == 0, err[-4000:]
    trained, models, computed, cells = summary(out)
    assert trained == models > 0 and computed == cells > 0

    stored = listing(box, "across")
    paths = stored["paths"]
    assert len(stored["metas"]) == models
    assert sum(p.startswith("sweeps/across/cells/") and p.endswith(".parquet") for p in paths) == cells
    assert sum(p.startswith("scores/") and p.endswith(".parquet") for p in paths) > 0
    assert any(p.startswith("results/cells/sweep=across/") for p in paths)
    assert "sweeps/across/frontier.png" in paths
    # Tasks ran on both workers, each model's metadata names the node that trained it.
    workers = {host.ip for host in box.workers()}
    assert {meta["node_ip"] for meta in stored["metas"]} == workers
    # MLflow on PostgreSQL holds a run per cell and the sweep's; its figure went to the server.
    runs = box.driver_python_argv(MLFLOW_RUNS, [f"http://{box.services['mlflow']}", "across"])
    assert runs.split() == ["1", str(cells)], runs
    assert list(box.hosts["services"].tmp.rglob("frontier.png"))
    # Nothing of the sweep on any Ray node's own disk but Ray's temp folder.
    for host in [box.hosts["head"], *box.workers()]:
        assert [f for f in host.files() if not f.startswith("/tmp/ray/")] == [], host.name

    code, out, err = run_sweep(box, args, "across-again")
    assert code == 0, err[-4000:]
    assert summary(out)[:3] == (0, models, 0), out[-2000:]


def test_a_local_store_the_nodes_cannot_see_is_refused_before_training(box):
    """The driver's own folder as store.root: every worker has its own /tmp, so none sees it."""
    args = box.sweep_args("unused", "local", **{"store.root": "/tmp/driver-store"})
    code, out, err = run_sweep(box, args, "local")
    assert code == 2, (out[-2000:], err[-3000:])
    assert err.startswith("error: ") and "Traceback" not in err, err[-3000:]
    assert "store.root='/tmp/driver-store': the cluster's nodes do not share this folder" in err
    for host in box.workers():
        assert host.ip in err
        assert not (host.tmp / "driver-store").exists()
    assert "s3://" in err
    driver_store = box.hosts["driver"].tmp / "driver-store"
    assert not (driver_store / "models").exists()
    assert not list(driver_store.glob(".sweeper-reach-*"))
