"""Ray as a neighbour on the network and in the process table (issue 13, items 3-5): a local
Ray listens on loopback only and dies with its driver; a cluster address where nothing listens
is refused in bounded time."""

from __future__ import annotations

import contextlib
import ipaddress
import sys
import time

import psutil

from testkit.processes import alive

SMOKE = ["dataset.synthetic=true", "scale=smoke", "cluster.include_dashboard=false"]


def test_unreachable_cluster_address_is_refused_within_connect_timeout(procs, tmp_path):
    """Nothing listens on port 1: before the fix `ray.init` retried "Failed to connect to GCS"
    without end (the wait below ran out).  Now: exit 2 within cluster.connect_timeout_s, a message
    naming the address and the setting, and nothing written."""
    root = tmp_path / "runs"
    driver = procs.run_sweep_cli([*SMOKE, f"store.root='{root}'", "cluster.address=127.0.0.1:1",
                                  "cluster.connect_timeout_s=3"], cwd=tmp_path)
    code = driver.wait(timeout=120)
    _, err = procs.output(driver)
    assert code == 2, err[-2000:]
    assert "cluster.address='127.0.0.1:1'" in err and "cluster.connect_timeout_s=3" in err, err
    assert "Traceback" not in err
    assert not root.exists()


def _listeners(root: psutil.Process) -> set[tuple[str, int, str]]:
    """(address, port, process name) of every listening TCP socket of `root` and its descendants."""
    try:
        tree = {root.pid: root, **{p.pid: p for p in root.children(recursive=True)}}
    except psutil.Error:
        return set()
    found = set()
    for conn in psutil.net_connections("inet"):
        if conn.status == psutil.CONN_LISTEN and conn.pid in tree:
            with contextlib.suppress(psutil.Error):
                found.add((conn.laddr.ip, conn.laddr.port, tree[conn.pid].name()))
    return found


def _loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    return ip.is_loopback or bool(getattr(ip, "ipv4_mapped", None) and ip.ipv4_mapped.is_loopback)


def test_local_sweep_listens_on_loopback_only(procs, tmp_path):
    """Before the fix the GCS, raylets, workers, the driver's gRPC and the agents listened on all
    interfaces (`*:PORT`, `0.0.0.0:PORT`) or the machine's address.  Every listener of the sweep's
    process tree, sampled until it exits, must be on loopback."""
    root = tmp_path / "runs"
    driver = procs.run_sweep_cli([*SMOKE[:2], f"store.root='{root}'", "cluster.num_cpus=2",
                                  "cluster.include_dashboard=true", "cluster.dashboard_port=0"],
                                 cwd=tmp_path)
    tree, seen = psutil.Process(driver.pid), set()
    while driver.poll() is None:
        seen |= _listeners(tree)
        time.sleep(0.2)  # sampling interval, not a measurement
    assert driver.returncode == 0, procs.output(driver)[1][-3000:]
    names = {name for _, _, name in seen}
    assert {"gcs_server", "raylet"} <= names, seen  # the sampling saw Ray running
    assert all(_loopback(address) for address, _, _ in seen), sorted(seen)


DRIVER = """
import os, time
import ray
from sweeper.config import SweepConfig
from sweeper.cluster.start import ray_session

cfg = SweepConfig()
cfg.cluster.num_cpus, cfg.cluster.dashboard_port = 1, 0
with ray_session(cfg):
    ray.get(ray.remote(lambda: os.getpid()).remote())
    print("READY", flush=True)
    time.sleep(600)
"""


def test_local_ray_dies_with_its_sigkilled_driver(procs, tmp_path):
    """Before the fix the raylet's DashboardAgent and RuntimeEnvAgent outlived a SIGKILLed driver
    for minutes with parent 1, still listening.  Now every process the driver's Ray started is
    gone within the bounded wait."""
    driver = procs.spawn([sys.executable, "-c", DRIVER], cwd=tmp_path, name="driver")
    procs.wait_for(lambda: "READY" in procs.output(driver)[0] or driver.poll() is not None,
                   timeout=300, message="local Ray started")
    assert driver.poll() is None, procs.output(driver)[1][-3000:]
    ray_processes = psutil.Process(driver.pid).children(recursive=True)
    assert any(p.name() == "raylet" for p in ray_processes)
    assert any("Agent" in p.name() for p in ray_processes)  # what used to be left behind
    procs.sigkill([driver])
    procs.wait_for(lambda: not any(alive(p) for p in ray_processes), timeout=60,
                   message="the driver's Ray gone")
