"""A local Ray of the sweep's own: confined to loopback, dead with its driver, and given the
runtime environment's values through the environment its processes inherit.

* **Loopback**: local Ray binds its GCS, raylet, workers, the driver's gRPC, agents and metrics
  ports to the node's IP address, the machine's outward one, most on all interfaces.
  `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0` (read into
  `ray._private.ray_constants.ENABLE_RAY_CLUSTER` when `ray` is imported) makes
  `get_node_ip_address` answer 127.0.0.1, and every process binds there;
  `ray.init(_node_ip_address="127.0.0.1")` alone does not (`resolve_ip_for_localhost` turns it
  back into the outward address).  Set for local Ray only, in this process and the environment
  its Ray processes inherit, and undone after: a cluster's driver must advertise an address the
  nodes can reach.
* **Dies with its driver**: the Ray processes started here are found in `/proc` (this process's
  children that carry the session's marker, and their descendants) and handed to
  `sweeper.cluster.watchdog`, which kills what is left once the driver is gone.
* **Its agent's fixed port**: a second local Ray would meet the first's 52365
  (`dynamic_agent_port`).
* **Secrets**: `cluster.runtime_env.env_vars` reach a local Ray's workers through the environment
  its processes inherit (`environment`), never through Ray's runtime environment, whose agent
  writes them into a log every user can read.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional

@contextlib.contextmanager
def dynamic_agent_port() -> Iterator[None]:
    """While open, a local Ray started here lets its dashboard agent's HTTP server take any free
    port rather than Ray's fixed 52365 (`ray.init` has no option for it; `ray start` has
    --dashboard-agent-listen-port).  Two local Rays on one machine otherwise clash there: the
    second agent retries with backoff, then runs without its HTTP service."""
    from ray._private import parameter

    fixed = parameter.RayParams

    class DynamicAgentPort(fixed):  # type: ignore[valid-type]
        def __init__(self, *args, dashboard_agent_listen_port: Optional[int] = 0, **kwargs):
            super().__init__(*args, dashboard_agent_listen_port=dashboard_agent_listen_port,
                             **kwargs)

    parameter.RayParams = DynamicAgentPort
    try:
        yield
    finally:
        parameter.RayParams = fixed


@contextlib.contextmanager
def environment(variables: dict[str, str]) -> Iterator[None]:
    """`variables` set in this process while it is open: a local Ray's processes, started in it,
    inherit them, and so do the workers they start.  This is how `runtime_env.env_vars` reach a
    local Ray's workers without passing through Ray's runtime environment, which Ray's agent
    writes to `runtime_env_agent.log` (readable by every user) and its dashboard shows."""
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


#: Ray's own switch: "0" makes a single machine's Ray bind to loopback.
LOOPBACK_ONLY_VAR = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


#: Marks the environment of a local Ray's processes (and of the workers they start), for
#: `sweeper.cluster.watchdog`.
SESSION_MARKER_VAR = "SWEEPER_RAY_SESSION"


@dataclass(frozen=True)
class LocalRay:
    """What `local_ray_confined` yields: `adopt()` once `ray.init` has returned hands the Ray
    processes it started (this process's children and theirs) to the watchdog; `discard()`
    after a failed `ray.init` kills those it left."""

    adopt: Callable[[], None]
    discard: Callable[[], None]


@contextlib.contextmanager
def local_ray_confined() -> Iterator[LocalRay]:
    """While it is open, a local Ray started here listens on loopback only and dies with this
    process (`LocalRay`)."""
    import ray._private.ray_constants as ray_constants

    marker = f"{SESSION_MARKER_VAR}={uuid.uuid4().hex}"
    watchdog = subprocess.Popen(
        [sys.executable, "-I", str(Path(__file__).with_name("watchdog.py")), marker],
        stdin=subprocess.PIPE, text=True, close_fds=True)
    pipe = watchdog.stdin
    if pipe is None:  # stdin=PIPE gives one
        raise RuntimeError("the Ray watchdog started without a pipe to its stdin")
    saved = {name: os.environ.get(name) for name in (LOOPBACK_ONLY_VAR, SESSION_MARKER_VAR)}
    saved_flag = ray_constants.ENABLE_RAY_CLUSTER
    os.environ[LOOPBACK_ONLY_VAR] = "0"
    os.environ[SESSION_MARKER_VAR] = marker.split("=", 1)[1]
    ray_constants.ENABLE_RAY_CLUSTER = False  # `ray` may be imported already: read at import

    def adopt() -> None:
        for pid, start in _ray_processes(marker):
            pipe.write(f"{pid} {start}\n")
        pipe.flush()

    try:
        yield LocalRay(adopt, lambda: _kill(_ray_processes(marker)))
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved_flag
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        pipe.close()  # after ray.shutdown: the watchdog kills whatever it left
        with contextlib.suppress(subprocess.TimeoutExpired):
            watchdog.wait(timeout=10)


def _ray_processes(marker: str) -> list[tuple[int, str]]:
    """(PID, start time) of the processes `ray.init` started here: this process's children that
    carry `marker` in their environment, and all their descendants (the raylet's agents rewrite
    their title over their environment, so they are found as descendants)."""
    table: dict[int, tuple[int, str]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError):
                fields = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
                table[int(name)] = (int(fields[1]), fields[19])
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    stack = [pid for pid in children.get(os.getpid(), []) if _carries(pid, marker)]
    found = list(stack)
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return [(pid, table[pid][1]) for pid in found]


def _kill(processes: list[tuple[int, str]]) -> None:
    """SIGKILL `processes` (PID, start time), each still the process it was, and reap this
    process's children among them."""
    import signal

    for pid, start in processes:
        with contextlib.suppress(OSError, IndexError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            if fields[19] == start:
                os.kill(pid, signal.SIGKILL)
    for pid, _ in processes:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, 0)


def _carries(pid: int, marker: str) -> bool:
    try:
        return marker.encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
