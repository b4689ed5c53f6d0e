"""A local Ray beside other programs (issue 13, items 2 and 6): the runtime environment's
variables reach the tasks but no file of Ray's session, and ports another Ray (or anything
else) holds do not stop the sweep.

One real local Ray, started by `sweeper.cluster.start.ray_session` in a child process (this test
session's own Ray is already running, and `ray_session` would join it), with the dashboard's
configured port and Ray's fixed dashboard-agent port 52365 both held by this test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from sweeper.store.artifacts import ArtifactStore
from testkit.processes import held

REPO = Path(__file__).resolve().parents[2]

#: Ray's fixed port for the dashboard agent's HTTP server (`ray start --dashboard-agent-listen-port`).
RAY_AGENT_PORT = 52365

CHILD = """
import json, os, sys
import ray
from sweeper.config import SweepConfig
from sweeper.cluster.start import ray_session

cfg = SweepConfig()
cfg.cluster.num_cpus = 1
cfg.cluster.dashboard_port = int(sys.argv[1])
cfg.cluster.runtime_env = {"env_vars": {"SWEEPER_PROBE": sys.argv[2]}}
with ray_session(cfg) as url:
    seen = ray.get(ray.remote(lambda: os.environ.get("SWEEPER_PROBE")).remote())
    session = ray._private.worker._global_node.get_session_dir_path()
print(json.dumps({"url": url, "seen": seen, "session": session, "driver_env":
                  os.environ.get("SWEEPER_PROBE")}))
"""


@pytest.mark.serial  # holds Ray's fixed agent port 52365: no other test's Ray may start meanwhile
def test_env_vars_reach_tasks_not_ray_logs_and_taken_ports_are_avoided(procs):
    secret = f"s3cr3t-{uuid.uuid4().hex}"  # a value no name would flag
    dashboard_port = procs.free_port()
    with held(dashboard_port), held(RAY_AGENT_PORT):
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        env.pop("RAY_ADDRESS", None)
        child = subprocess.run([sys.executable, "-c", CHILD, str(dashboard_port), secret],
                               env=env, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert child.returncode == 0, child.stderr[-3000:]
    found = json.loads(child.stdout.strip().splitlines()[-1])

    # The variable reached the task, and the driver's environment is as it was.
    assert found["seen"] == secret and found["driver_env"] is None
    # The dashboard's port was taken: another free one was used, and the warning says so.
    assert found["url"] and not found["url"].endswith(f":{dashboard_port}"), found["url"]
    assert f"127.0.0.1:{dashboard_port} is taken" in child.stderr
    assert "cluster.dashboard_port" in child.stderr

    session = Path(found["session"])
    logs = [path for path in session.rglob("*") if path.is_file()]
    assert any(path.name == "runtime_env_agent.log" for path in logs)
    # No file of Ray's session holds the value: not the runtime_env agent's log (0644, in a
    # folder every user can read), nor any other.
    leaked = [str(path) for path in logs if secret.encode() in path.read_bytes()]
    assert not leaked, leaked
    # The dashboard agent took a free port rather than retrying the held 52365 and giving up
    # its HTTP service.
    agent_log = (session / "logs" / "dashboard_agent.log").read_text(errors="replace")
    assert f"Failed to bind to port {RAY_AGENT_PORT}" not in agent_log
    assert "HTTP service will be disabled" not in agent_log


RACE_CHILD = """
import sys
import ray
import sweeper.cluster.dashboard as ray_dashboard
from sweeper.cluster.start import ray_session
from sweeper.config import SweepConfig

# Another sweep took the port between this one's probe and its Ray's bind: the probe said free.
ray_dashboard.free_dashboard_port = lambda host, port: port
cfg = SweepConfig()
cfg.cluster.num_cpus = 1
cfg.cluster.include_dashboard = sys.argv[1] == "true"
with ray_session(cfg) as url:
    print("up", url, ray.get(ray.remote(lambda: 7).remote()))
"""


@pytest.mark.parametrize("dashboard", [
    "true",
    # Ray's dashboard agent binds the default port with or without the dashboard (7 s).
    "false"])
@pytest.mark.serial  # holds Ray's default dashboard port 8265: no other test's Ray may take it
def test_a_sweep_whose_default_dashboard_port_is_taken_as_it_starts_still_starts(dashboard):
    """Issue 30.2: two sweeps starting Ray at the same moment both found 8265 free; the loser's
    dashboard could not bind it and no raylet started.  On Ray's default port the dashboard now
    tries the next ports itself, and the sweep warns that it is taken; without a dashboard
    nothing is said of its port at all."""
    with held(8265):
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        env.pop("RAY_ADDRESS", None)
        child = subprocess.run([sys.executable, "-c", RACE_CHILD, dashboard], env=env,
                               capture_output=True, text=True, timeout=180, cwd=REPO)
    assert child.returncode == 0, child.stderr[-3000:]
    (line,) = [line for line in child.stdout.splitlines() if line.startswith("up ")]
    url = line.split()[1]
    assert line.endswith(" 7") and (url == "None" if dashboard == "false" else
                                    not url.endswith(":8265"))
    assert "Failed" not in child.stderr and "occupied" not in child.stderr, child.stderr[-3000:]
    # Issue 51: the docs say a taken default port is warned about; without a dashboard, silence
    assert ("port 127.0.0.1:8265 is taken" in child.stderr) == (dashboard == "true"), child.stderr[-3000:]


#: Ray's own words (`ray._private.node.Node.__init__`) when the raylet did not register in 30 s.
TIMED_OUT = ("The current node timed out during startup. This could happen because some of the "
             "raylet failed to startup or the GCS has become overloaded.")

TIMEOUT_CHILD = """
import json, os, sys
import psutil
import ray._private.node as node

# The node Ray starts times out during startup (as two sweeps starting local Ray with their
# dashboards at once on a loaded machine did): its processes start, then Ray raises its bare
# Exception.  The first `failing` starts do; the others are Ray's own.
real_init, failing, starts = node.Node.__init__, int(sys.argv[1]), []

def raylets():
    return [p for p in psutil.Process().children(recursive=True) if p.name() == "raylet"]

def timing_out(self, *args, **kwargs):
    starts.append(len(raylets()))  # those of an earlier start still running
    real_init(self, *args, **kwargs)
    if len(starts) <= failing:
        raise Exception(%r)

node.Node.__init__ = timing_out
sys.path.insert(0, "tests")
from conftest import build_tiny_config
from pathlib import Path
from sweeper.__main__ import run

cfg = build_tiny_config(Path(sys.argv[2]))
cfg.grid.epsilon, cfg.grid.p, cfg.grid.attack = [4.0], [0.5], ["loss"]  # one model: Ray's start is the test
cfg.cluster.include_dashboard = True
cfg.cluster.num_cpus = 1
code = run(cfg)
print(json.dumps({"raylets_at_each_start": starts, "raylets_left": len(raylets())}))
sys.exit(code)
""" % TIMED_OUT


def _timing_out_sweep(failing: int, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("RAY_ADDRESS", None)
    return subprocess.run([sys.executable, "-c", TIMEOUT_CHILD, str(failing), str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=400, cwd=REPO)


def test_a_local_ray_that_timed_out_during_startup_is_started_once_more(tmp_path):
    """Issue 44.8: Ray's raw "timed out during startup" traceback.  The first start times out: a
    fresh session starts, the first one's processes are gone, the sweep runs."""
    child = _timing_out_sweep(1, tmp_path)
    assert child.returncode == 0, child.stderr[-3000:]
    found = json.loads(child.stdout.strip().splitlines()[-1])
    assert found == {"raylets_at_each_start": [0, 0], "raylets_left": 0}, found
    assert child.stderr.count("starting it once more in a fresh session") == 1, child.stderr[-3000:]
    assert "Traceback" not in child.stderr, child.stderr[-3000:]
    assert ArtifactStore(tmp_path / "runs").read_manifest("tiny")


def test_a_local_ray_that_never_starts_is_said_in_one_line(tmp_path):
    """Both starts time out: one line saying what to do, exit 1 (an outage, not a configuration
    error), no traceback, nothing in the store."""
    child = _timing_out_sweep(2, tmp_path)
    assert child.returncode == 1, child.stderr[-3000:]
    found = json.loads(child.stdout.strip().splitlines()[-1])
    assert found == {"raylets_at_each_start": [0, 0], "raylets_left": 0}, found
    last = child.stderr.rstrip().splitlines()[-1]
    assert last.startswith("error: local Ray did not start, tried 2 times (The current node timed "
                           "out during startup") and "rerun the same command" in last, last
    assert "Traceback" not in child.stderr, child.stderr[-3000:]
    assert not (tmp_path / "runs" / "sweeps" / "tiny" / "sweep.json").exists()
