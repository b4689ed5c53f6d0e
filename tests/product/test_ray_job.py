"""A sweep submitted as a Ray job (`ray job submit`) to a real local head: token auth on,
everything on 127.0.0.1.  The job's driver joins the head's cluster (its tasks, logs and progress
live in that dashboard, not in a Ray of its own that vanishes with it) and ends with the line
saying where its results are."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[2]
RAY = Path(sys.executable).parent / "ray"
MARKER = "SWEEPER_TEST_RAY_JOB"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def answers(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1.0)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def head_processes(tag: str) -> list[psutil.Process]:
    """The head's processes (they carry MARKER=tag in their environment) and their descendants
    (Ray's workers overwrite their environment's memory with their title)."""
    found: dict[int, psutil.Process] = {}
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(MARKER) == tag:
                found[proc.pid] = proc
                found.update({child.pid: child for child in proc.children(recursive=True)})
        except psutil.Error:
            continue
    return list(found.values())


@pytest.fixture
def ray_head():
    """`ray start --head --block` on loopback with token auth; every process of it killed after."""
    if not RAY.exists():
        pytest.skip("the `ray` script is not beside this interpreter")
    tag = uuid.uuid4().hex
    temp = tempfile.mkdtemp(prefix="rjob", dir="/tmp")  # Ray's socket paths must stay short
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PYTEST_CURRENT_TEST")}
    env.update({MARKER: tag, "RAY_AUTH_MODE": "token", "RAY_USAGE_STATS_ENABLED": "0",
                # Ray's single-machine switch: the node's address is 127.0.0.1, so it binds there
                "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"})
    subprocess.run([str(RAY), "get-auth-token", "--generate"], env=env, capture_output=True,
                   timeout=120, check=True)
    dashboard = free_port()
    head = subprocess.Popen(
        [str(RAY), "start", "--head", "--block", f"--port={free_port()}",
         "--node-ip-address=127.0.0.1", "--dashboard-host=127.0.0.1",
         f"--dashboard-port={dashboard}", "--include-dashboard=true", "--num-cpus=2",
         f"--temp-dir={temp}", "--disable-usage-stats", f"--ray-client-server-port={free_port()}",
         f"--dashboard-agent-listen-port={free_port()}"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while not answers(dashboard):
            assert head.poll() is None and time.monotonic() < deadline, "the Ray head did not start"
            time.sleep(0.5)
        yield f"http://127.0.0.1:{dashboard}", env
    finally:
        # Nothing of the head is kept, and `ray start --block` takes ~30 s to stop gracefully on
        # SIGTERM: its group is killed at once, then whatever of it left the group.
        os.killpg(head.pid, signal.SIGKILL)
        head.wait(timeout=30)
        for proc in head_processes(tag):
            try:
                proc.kill()
            except psutil.Error:
                pass


def test_a_sweep_runs_as_a_ray_job_on_a_local_head(ray_head, tmp_path):
    url, env = ray_head
    store = tmp_path / "runs"
    sweep = [sys.executable, "-m", "sweeper", "name=job", "dataset.synthetic=true",
             "dataset.members=null", "dataset.pool_size=240", "dataset.test_size=200",
             "dataset.eval_records=120", "train.epochs=1", "train.batch_size=64",
             "shadow.count=2", "grid.epsilon=[inf]", "grid.p=[0.5]",
             "grid.attack=[loss,always_member]", f"store.root={store}"]
    submission = f"sweeper-job-{uuid.uuid4().hex[:8]}"
    done = subprocess.run(
        [str(RAY), "job", "submit", "--address", url, "--submission-id", submission,
         "--metadata-json", '{"job_name": "sweeper job"}', "--", *sweep],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # The driver joined the head's cluster: the dashboard it names is the head's.
    assert f"Ray dashboard: {url}" in done.stdout
    lines = done.stdout.splitlines()
    last = [index for index, line in enumerate(lines) if line.startswith("where to look:")]
    assert last and f"results {store}/sweeps/job" in lines[last[0]]
    assert "frontier.png" in lines[last[0]]
    assert "mlflow ui --backend-store-uri sqlite:///" in lines[last[0] + 2]  # its own line
    assert (store / "sweeps" / "job" / "frontier.png").is_file()
    status = subprocess.run([str(RAY), "job", "status", "--address", url, submission], env=env,
                            capture_output=True, text=True, timeout=120)
    assert "succeeded" in (status.stdout + status.stderr).lower()
