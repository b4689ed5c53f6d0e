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


def plan_of(box: Box, compose_config, overrides: dict):
    """The plan `python -m sweeper` makes of the box's sweep with `overrides`, composed here:
    where it runs (cluster, store, tracking) keys no model."""
    from sweeper.grid.plan import build_plan
    from sweeper.grid.scale import scaled

    values = box.sweep_overrides("unused", "plan", **overrides)
    return build_plan(scaled(compose_config("quickstart", [
        f"{key}={value}" for key, value in values.items()
        if not key.startswith(("cluster", "store", "tracking"))])))


def host_training(box: Box, label: str, timeout: float = 60) -> RayHost:
    """The worker host running the training task named `label` (Ray titles it `ray::LABEL`)."""
    import psutil

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for host in box.workers():
            for pid in host.pids():
                try:
                    if f"ray::{label}" in " ".join(psutil.Process(pid).cmdline()):
                        return host
                except psutil.Error:
                    continue
        time.sleep(0.1)
    raise AssertionError(f"no worker runs {label!r}")


#: One model a task, a few epochs of ~1 s: long enough to act while a model trains.
SLOW = {"train.models_per_task": 1, "train.epochs": 4, "dataset.pool_size": 600,
        "grid.epsilon": "[4]", "grid.p": "[0.5]", "grid.attack": "[loss]", "grid.trial": "[0,1]"}


def test_a_worker_node_killed_mid_training_the_sweep_completes_and_resumed_models_are_exact(
        box, compose_config, tmp_path):
    from sweeper.cluster.tasks import train_task
    from sweeper.grid.sweep_data import sweep_data
    from sweeper.store.artifacts import ArtifactStore

    plan = plan_of(box, compose_config, SLOW)
    sweep = box.sweep(box.sweep_args("killed", "killed", **SLOW), "killed")
    key = wait_for_training(box, "killed")
    victim = host_training(box, plan.models[key].label)
    victim.kill()  # every process of the node, raylet and workers, at once
    code, out, err = finish(sweep)
    assert code == 0, err[-4000:]
    trained, models, computed, cells = summary(out)
    assert trained == models and computed == cells

    metas = {meta["key"]: meta for meta in listing(box, "killed")["metas"]}
    resumed = metas[key]
    assert resumed["resumed_from"] and resumed["node_ip"] != victim.ip
    # The model resumed on another node equals the same model trained without a fault.
    root = tmp_path / "uninterrupted"
    root.mkdir()
    ArtifactStore(root).mark()
    data = sweep_data(plan, Path(plan.config.dataset.data_dir))
    train_task(plan.models[key], data, str(root), "cpu", 1)
    calm = ArtifactStore(root).read_model_meta(key)
    assert calm["resumed_from"] == []
    for figure in ("checksums", "epsilon_spent", "steps", "test_accuracy"):
        assert resumed[figure] == calm[figure], figure


def test_a_worker_that_joins_mid_sweep_receives_tasks(box):
    """Ten models of one task each wait on the workers there are; a worker that joins once
    the first has started training takes some of them.  Each model trains long enough (12
    epochs of a 4× larger pool) that the queue outlasts a node's start on a quiet machine too:
    with 3 epochs of 600 records the workers drained it before the newcomer registered (load
    ≈ 1), and 12 epochs alone failed 1 of 2 runs."""
    overrides = {**SLOW, "train.epochs": 12, "dataset.pool_size": 2400, "grid.p": "[0.3,0.7]",
                 "grid.trial": "[0,1,2,3,4]"}
    sweep = box.sweep(box.sweep_args("joined", "joined", **overrides), "joined")
    host_training(box, "train", timeout=300)
    newcomer = box.add_worker()
    code, out, err = finish(sweep)
    assert code == 0, err[-4000:]
    assert newcomer.ip in {meta["node_ip"] for meta in listing(box, "joined")["metas"]}


def test_an_object_store_too_small_for_the_data_spills_to_the_nodes_disk(box):
    """The pool (≈ 94 MiB of synthetic 28 × 28 images) is larger than every node's object store
    (`OBJECT_STORE_MB`): Ray keeps it on the node's own disk, in its temp folder, and the sweep
    completes."""
    overrides = {"dataset.synthetic": "true", "dataset.pool_size": 30000,
                 "model.name": "logistic_regression", "grid.epsilon": "[.inf]",
                 "grid.p": "[0.5]", "grid.attack": "[loss]", "grid.trial": "[0]"}
    code, out, err = run_sweep(box, box.sweep_args("spilled", "spilled", **overrides), "spilled")
    assert code == 0, err[-4000:]
    trained, models, computed, cells = summary(out)
    assert trained == models and computed == cells
    spilled = [host.name for host in [box.hosts["driver"], *box.workers()]
               if any("Spilled" in path.read_text(errors="replace") or "fallback" in
                      path.read_text(errors="replace").lower()
                      for path in host.tmp.glob("ray/session_*/logs/raylet.out"))]
    assert spilled, "no node's raylet spilled or fell back to its disk"


def test_the_s3_endpoint_cut_off_for_30_s_fails_transiently_and_a_rerun_completes(box):
    overrides = {**SLOW, "train.epochs": 2, "grid.trial": "[0,1,2]",
                 "resources.train.max_retries": 1}
    args = box.sweep_args("outage", "outage", **overrides)
    sweep = box.sweep(args, "outage")
    wait_for_training(box, "outage")
    box.hosts["s3"].unplug()
    try:
        time.sleep(30)
    finally:
        box.hosts["s3"].replug()
    code, out, err = finish(sweep)  # in bounded time, whatever it met
    assert "Traceback" not in err, err[-4000:]
    if code != 0:
        assert code == 1 and "OSError" in out + err, (out[-3000:], err[-3000:])
    code, out, err = run_sweep(box, args, "outage-again")
    assert code == 0, err[-4000:]
    trained, models, computed, cells = summary(out)
    stored = listing(box, "outage")
    assert len(stored["metas"]) == models
    assert sum(p.startswith("sweeps/outage/cells/") and p.endswith(".parquet")
               for p in stored["paths"]) == cells


def test_a_task_the_memory_monitor_kills_is_retried_to_its_bound_then_fails_as_transient(box):
    """A worker whose Ray memory threshold is below what the machine uses: its memory monitor
    kills every task it starts.  The grown sweep's new models fail as transient after
    `resources.train.max_retries`, in bounded time; the cells the first test landed stay."""
    normal = box.workers()
    for host in normal:
        host.kill()
    starved = box.add_worker(env={"RAY_memory_usage_threshold": "0.01",
                                  "RAY_memory_monitor_refresh_ms": "100"})
    try:
        args = box.sweep_args("across", "across", **{
            "grid.p": "[0.3,0.5,0.7]", "resources.train.max_retries": 1,
            "resources.attack.max_retries": 1})
        code, out, err = finish(box.sweep(args, "starved"), timeout=420)
        assert code == 1, (out[-3000:], err[-3000:])
        assert "OutOfMemoryError" in out + err and "still failing after 1 retries" in out + err
        trained, models, computed, cells = summary(out)
        assert trained == 0
        stored = listing(box, "across")
        assert sum(p.startswith("sweeps/across/cells/") and p.endswith(".parquet")
                   for p in stored["paths"]) == 16
    finally:
        starved.kill()
        for _ in normal:
            box.add_worker(wait=False)
        for host in box.workers():
            host.wait_started()


def test_the_heads_gcs_restarted_with_fault_tolerance_loses_no_finished_model(box):
    overrides = {**SLOW, "train.epochs": 3, "grid.trial": "[0,1,2]"}
    args = box.sweep_args("gcs", "gcs", **overrides)
    sweep = box.sweep(args, "gcs")
    wait_for_training(box, "gcs")
    workers = box.workers()
    box.hosts["head"].kill()  # the GCS, the head's raylet and all of its processes
    box.start_head()  # the same address; the cluster's tables come back from Redis
    code, out, err = finish(sweep)
    assert all(host.running for host in workers)  # the worker nodes kept their raylets
    print(f"GCS restarted: the driver {'completed the sweep' if code == 0 else 'ended'} "
          f"(exit {code})")
    if code != 0:  # Ray could not keep the driver: a rerun resumes, nothing retrained
        before = len(listing(box, "gcs")["metas"])
        code, out, err = run_sweep(box, args, "gcs-again")
        assert code == 0, err[-4000:]
        trained, models, computed, cells = summary(out)
        assert trained == models - before
    else:
        trained, models, computed, cells = summary(out)
        assert trained == models and computed == cells


def test_the_one_machine_scripts_forward_reaches_the_box_from_loopback(box):
    """deploy/cluster_on_one_machine.py's forward: 127.0.0.1 here to MLflow inside the box."""
    import importlib.util
    import urllib.request

    from testkit.processes import REPO_ROOT

    spec = importlib.util.spec_from_file_location(
        "cluster_on_one_machine", REPO_ROOT / "deploy" / "cluster_on_one_machine.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    host, port = box.services["mlflow"].split(":")
    local = script.forward(0, box.hosts["driver"].netns, (host, int(port)))
    with urllib.request.urlopen(f"http://127.0.0.1:{local}/health", timeout=30) as answer:
        assert answer.status == 200
