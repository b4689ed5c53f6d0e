"""The fault-injection fixtures themselves work: a real two-node Ray cluster that survives
losing its worker node, an MLflow server that restarts with its data, moto's S3 through
pyarrow, and finding / killing Ray workers and process trees."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

DRIVER = r"""
import json, os, sys, time
import ray

ray.init(address=ADDRESS, configure_logging=False, log_to_driver=False)

@ray.remote(num_cpus=1, scheduling_strategy="SPREAD")
def where():
    time.sleep(0.5)
    return ray.get_runtime_context().get_node_id()

def alive():
    return {n["NodeID"]: bool(n["Alive"]) for n in ray.nodes()}

print(json.dumps({"driver_node": ray.get_runtime_context().get_node_id(),
                  "task_nodes": sorted(set(ray.get([where.remote() for _ in range(6)]))),
                  "alive": alive()}), flush=True)

go = sys.argv[1]
while not os.path.exists(go):          # the test kills the worker node meanwhile
    time.sleep(0.05)
t0 = time.monotonic()
victim = open(go).read().strip()
while alive().get(victim, True):
    if time.monotonic() - t0 > 60:
        raise SystemExit("worker node still alive in ray.nodes() after 60 s")
    time.sleep(0.1)
dead_after = time.monotonic() - t0
after = ray.get(where.remote(), timeout=60)
print(json.dumps({"dead_after": dead_after, "task_node_after": after, "alive": alive()}),
      flush=True)
"""


def test_two_node_cluster_survives_losing_its_worker_node(two_node_cluster, procs, tmp_path):
    cluster = two_node_cluster
    head, worker = cluster.head_node_id, cluster.worker_node_id
    assert head and worker and head != worker
    assert cluster.address.startswith("127.0.0.1:")
    assert "RAY_ADDRESS" not in cluster.env and cluster.env["RAY_AUTH_MODE"] == "token"
    assert cluster.nodes() == {head: True, worker: True}
    # `ray start --temp-dir=...` writes its address file there, not /tmp/ray/ray_current_cluster
    assert (cluster.head.temp_dir / "ray_current_cluster").exists()

    go = tmp_path / "go"
    driver = procs.spawn([sys.executable, "-c", f"ADDRESS = {cluster.address!r}\n" + DRIVER, go],
                         env=cluster.env, name="driver")
    first = json.loads(procs.wait_for(lambda: _line(driver, 0), timeout=120,
                                      message="driver's first report"))
    assert first["driver_node"] == head          # a driver on the machine attaches to the head
    assert first["task_nodes"] == sorted([head, worker])
    assert first["alive"] == {head: True, worker: True}

    raylet = cluster.worker.raylet()
    head_raylet = cluster.head.raylet()
    head_pids = {p.pid for p in cluster.head.processes()}
    assert head_raylet.pid in head_pids and raylet.pid not in head_pids
    assert not head_pids & {p.pid for p in cluster.worker.processes()}
    killed = cluster.kill_worker_node()
    assert raylet.pid in {p.pid for p in killed}
    assert not cluster.worker.processes()
    assert head_raylet.is_running()                # only the worker node went
    go.write_text(worker)

    second = json.loads(procs.wait_for(lambda: _line(driver, 1), timeout=120,
                                       message="driver's report after the kill"))
    assert second["task_node_after"] == head
    assert second["alive"] == {head: True, worker: False}
    assert second["dead_after"] < 30
    assert driver.wait(timeout=60) == 0, procs.output(driver)
    assert cluster.wait_node_dead(worker, timeout=10) < 10

    # A replacement worker node joins under a new node id.
    replacement = cluster.start_worker_node().node_id
    assert replacement not in (head, worker) and cluster.worker_node_id == replacement
    assert cluster.nodes() == {head: True, worker: False, replacement: True}


def _line(popen, index):
    if popen.poll() not in (None, 0):
        out, err = Path(popen.stdout_path).read_text(), Path(popen.stderr_path).read_text()
        raise AssertionError(f"driver exited {popen.returncode}:\n{out}\n{err[-4000:]}")
    lines = [line for line in Path(popen.stdout_path).read_text().splitlines()
             if line.startswith("{")]
    return lines[index] if len(lines) > index else None


def test_mlflow_server_restarts_with_its_data(mlflow_server, monkeypatch):
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=mlflow_server.uri)
    experiment = client.create_experiment("faults")
    run = client.create_run(experiment)
    client.log_param(run.info.run_id, "epsilon", "4.0")
    client.log_metric(run.info.run_id, "auc", 0.75)
    client.log_text(run.info.run_id, "frontier", "frontier.csv")   # through the server

    mlflow_server.stop()
    assert not mlflow_server.running
    with monkeypatch.context() as env:
        env.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        env.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
        started = time.monotonic()
        with pytest.raises(MlflowException):
            client.get_run(run.info.run_id)
        assert time.monotonic() - started < 5

    mlflow_server.start()
    again = MlflowClient(tracking_uri=mlflow_server.uri).get_run(run.info.run_id)
    assert again.data.params == {"epsilon": "4.0"}
    assert again.data.metrics == {"auc": 0.75}
    assert [a.path for a in client.list_artifacts(run.info.run_id)] == ["frontier.csv"]
    assert list(mlflow_server.artifacts.rglob("frontier.csv"))
    assert mlflow_server.uri.endswith(f":{mlflow_server.port}")


def test_s3_server_through_pyarrow(s3_server, monkeypatch):
    from pyarrow import fs

    uri = s3_server.uri("sweeps/run1")
    assert uri == (f"s3://{s3_server.bucket}/sweeps/run1?endpoint_override="
                   f"{s3_server.endpoint}&scheme=http")
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN",
                "AWS_DEFAULT_REGION", "AWS_REGION"):
        monkeypatch.delenv(key, raising=False)

    # Credentials come from the environment (the URI has none, and moto enforces them).
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "not-a-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-a-secret")
    wrong, base = fs.FileSystem.from_uri(uri)
    with pytest.raises(OSError, match="INVALID_ACCESS_KEY_ID|AccessDenied|403"):
        with wrong.open_output_stream(f"{base}/x.bin") as stream:
            stream.write(b"x")

    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    s3, base = fs.FileSystem.from_uri(uri)
    assert base == f"{s3_server.bucket}/sweeps/run1"
    assert s3.region == "us-east-1"
    # a nested key, with no "directories" made first
    with s3.open_output_stream(f"{base}/cells/eps=4/part-0.parquet") as stream:
        stream.write(b"parquet bytes")
    with s3.open_output_stream(f"{base}/manifest.json") as stream:
        stream.write(b"{}")
    with s3.open_input_stream(f"{base}/cells/eps=4/part-0.parquet") as stream:
        assert stream.readall() == b"parquet bytes"
    listed = s3.get_file_info(fs.FileSelector(base, recursive=True))
    files = sorted(info.path for info in listed if info.type == fs.FileType.File)
    assert files == [f"{base}/cells/eps=4/part-0.parquet", f"{base}/manifest.json"]
    top = {info.base_name: info.type for info in s3.get_file_info(fs.FileSelector(base))}
    assert top == {"cells": fs.FileType.Directory, "manifest.json": fs.FileType.File}
    # the explicit filesystem agrees
    assert s3_server.filesystem().get_file_info(f"{base}/manifest.json").size == 2


def test_find_ray_workers_and_sigkill_one(ray_local, procs):
    ray = ray_local

    @ray.remote(max_retries=0)
    def sleepy(seconds):
        time.sleep(seconds)

    ref = sleepy.options(name="sleepy 123").remote(30)
    workers = procs.wait_for(lambda: procs.find_ray_workers("sleepy 123"), timeout=60,
                             message="a worker titled 'ray::sleepy 123'")
    assert len(workers) == 1
    assert procs.find_ray_workers("sleepy 123", scope=[workers[0].pid]) == workers
    started = time.monotonic()
    assert procs.sigkill(workers) == workers
    assert not procs.wait_gone(workers, timeout=10)
    with pytest.raises(ray.exceptions.WorkerCrashedError):
        ray.get(ref, timeout=60)
    assert time.monotonic() - started < 30

    # Without .options(name=...), the title is the function's name.
    ref = sleepy.remote(30)
    unnamed = procs.wait_for(lambda: procs.find_ray_workers("sleepy"), timeout=60)
    procs.sigkill(unnamed)
    with pytest.raises(ray.exceptions.WorkerCrashedError):
        ray.get(ref, timeout=60)


GRANDPARENT = r"""
import subprocess, sys, time
sleep = [sys.executable, "-c", "import time; time.sleep(120)"]
child = subprocess.Popen(sleep)                                        # an ordinary child
daemonize = ("import subprocess, sys; print(subprocess.Popen(" + repr(sleep) +
             ", start_new_session=True, stdout=subprocess.DEVNULL,"
             " stderr=subprocess.DEVNULL).pid)")
orphan = subprocess.run([sys.executable, "-c", daemonize], capture_output=True, text=True)
print(child.pid, int(orphan.stdout), flush=True)                      # reparented, own session
time.sleep(120)
"""


def test_kill_tree_reaches_daemonized_descendants(procs):
    import psutil

    parent = procs.spawn([sys.executable, "-c", GRANDPARENT], name="tree")
    pids = procs.wait_for(lambda: Path(parent.stdout_path).read_text().split(), timeout=60)
    child, orphan = (psutil.Process(int(pid)) for pid in pids)
    assert orphan.pid not in {p.pid for p in procs.descendants(parent)}
    assert os.getpgid(orphan.pid) != parent.pid
    killed = procs.kill_tree(parent)
    assert {parent.pid, child.pid, orphan.pid} <= {p.pid for p in killed}
    assert parent.returncode == -9
    assert not procs.wait_gone([child, orphan], timeout=5)


def test_run_sweep_cli_captures_output(procs):
    cli = procs.run_sweep_cli(["--help"])
    assert cli.wait(timeout=120) == 0, procs.output(cli)
    out, _ = procs.output(cli)
    assert "experiment" in out
