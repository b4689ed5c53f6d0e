"""How the sweep meets Ray: a local Ray confined to loopback that dies with its driver, that
shares the machine with other Rays and keeps the runtime environment's values out of Ray's
files, and a cluster that does not answer refused in bounded time.

Local Ray binds its GCS, raylet, workers, the driver's gRPC, agents and metrics ports to the
node's IP address, which Ray picks as the machine's outward address, on all interfaces for most
of them.  Ray's one lever is `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0` (read into
`ray._private.ray_constants.ENABLE_RAY_CLUSTER` when `ray` is imported): `get_node_ip_address`
then answers 127.0.0.1, and every process binds there.  (`ray.init(_node_ip_address="127.0.0.1")`
alone does not: `resolve_ip_for_localhost` turns 127.0.0.1 back into the outward address.)  It is
set for local Ray only, in this process and the environment its Ray processes inherit, and
undone after: a driver of a real cluster must advertise an address the nodes can reach.

`ray.init(address=HOST:PORT)` with nothing at that address retries "Failed to connect to GCS"
for as long as Ray's own timeouts allow, which in practice hangs the command.  Before Ray is
asked, the address is probed with plain TCP connections until `cluster.connect_timeout_s`; one
that never answers is a refused configuration (exit 2, nothing written), naming the address and
what to check.

A second local Ray on the machine (another sweep) would meet the first one's fixed ports: the
dashboard's (`free_dashboard_port` takes another) and its agent's 52365 (`dynamic_agent_port`).
The variables of `cluster.runtime_env.env_vars` reach a local Ray's workers through the
environment its processes inherit (`environment`), never through Ray's runtime environment,
whose agent writes them into a log every user can read.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Callable, Iterator, Optional

from sweeper.config import ConfigError

logger = logging.getLogger(__name__)

#: How long to wait between two probes of an address that refused the connection.
PROBE_INTERVAL_S = 0.5


def bootstrap_address(address: str) -> Optional[tuple[str, int]]:
    """(host, port) that `cluster.address` makes Ray connect to first, or None when it cannot be
    known here ("auto" with no running cluster recorded: Ray itself says so at once)."""
    if address == "auto":
        address = os.environ.get("RAY_ADDRESS") or _recorded_cluster()
        if address is None:
            return None
    if "://" in address:
        address = address.split("://", 1)[1]
    address = address.split("/", 1)[0]
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


#: Set by Ray's job supervisor in the environment of a job's driver (with RAY_ADDRESS).
JOB_CONFIG_VARIABLE = "RAY_JOB_CONFIG_JSON_ENV_VAR"


def submitted_job_address() -> Optional[str]:
    """The cluster that runs this process as a Ray job (`ray job submit -- sweeper …`), else None.

    Ray's job supervisor starts the driver with the job's config and RAY_ADDRESS, the cluster's
    GCS.  A sweep started that way joins that cluster rather than starting a Ray of its own, so its
    tasks, logs and progress live in the dashboard the job was submitted to."""
    if JOB_CONFIG_VARIABLE not in os.environ:
        return None
    return os.environ.get("RAY_ADDRESS") or "auto"


def _recorded_cluster() -> Optional[str]:
    """The address `ray start` recorded on this machine (what Ray's "auto" reads), if any."""
    from ray._private.services import get_ray_address_from_environment

    return get_ray_address_from_environment("auto", None)


def require_reachable(address: str, timeout_s: float) -> None:
    """Refuse `cluster.address` unless a TCP connection to it opens within `timeout_s` seconds.

    Connections are retried (a head node still starting refuses them for a few seconds), so a
    cluster that comes up within the timeout is joined.  Raises ConfigError otherwise.
    """
    target = bootstrap_address(address)
    if target is None:
        return
    host, port = target
    deadline = time.monotonic() + timeout_s
    while True:
        remaining = deadline - time.monotonic()
        try:
            with socket.create_connection((host, port), timeout=max(remaining, 0.1)):
                return
        except OSError as error:
            last_error = error
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        time.sleep(min(PROBE_INTERVAL_S, remaining))
    raise ConfigError([
        f"cluster.address={address!r}: nothing answered at {host}:{port} within "
        f"cluster.connect_timeout_s={timeout_s:g} s ({last_error.strerror or last_error}). "
        "Check that the cluster's head is running (`ray status` on it), that the port is its GCS "
        "port (6379 by default; 10001 for ray://), that no firewall between here and there drops "
        "it, or raise cluster.connect_timeout_s for a head still starting"])


def free_dashboard_port(host: str, port: int) -> int:
    """`port` when it can be bound on `host`, else 0 (Ray then picks a free one), with a warning:
    two sweeps at once on one machine is normal use, and the second must not die on Ray's
    "Failed to bind ... already occupied" traceback."""
    if port == 0:
        return 0
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        try:
            probe.bind((host, port))
        except OSError as error:
            if error.errno != errno.EADDRINUSE:  # not ours to judge: Ray says what is wrong
                return port
            logger.warning("The Ray dashboard's port %s:%d is taken (another sweep's Ray?): this "
                           "sweep's dashboard gets a free port, printed below; set "
                           "cluster.dashboard_port to choose one.", host, port)
            return 0
    return port


@contextlib.contextmanager
def dynamic_agent_port() -> Iterator[None]:
    """While open, a local Ray started here lets its dashboard agent's HTTP server take any free
    port rather than Ray's fixed 52365 (`ray.init` has no option for it; `ray start` has
    --dashboard-agent-listen-port).  Two local Rays on one machine otherwise clash there: the
    second agent retries with backoff, then runs without its HTTP service."""
    from ray._private import parameter

    fixed = parameter.RayParams

    class DynamicAgentPort(fixed):  # type: ignore[misc, valid-type]
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
#: `sweeper.ray_watchdog`.
SESSION_MARKER_VAR = "SWEEPER_RAY_SESSION"


@contextlib.contextmanager
def local_ray_confined() -> Iterator[Callable[[], None]]:
    """While it is open, a local Ray started here listens on loopback only and dies with this
    process.  Yields `adopt`: call it once `ray.init` has returned, to hand the Ray processes
    it started (this process's children and theirs) to the watchdog."""
    import ray._private.ray_constants as ray_constants

    marker = f"{SESSION_MARKER_VAR}={uuid.uuid4().hex}"
    watchdog = subprocess.Popen(
        [sys.executable, "-I", str(Path(__file__).with_name("ray_watchdog.py")), marker],
        stdin=subprocess.PIPE, text=True, close_fds=True)
    saved = {name: os.environ.get(name) for name in (LOOPBACK_ONLY_VAR, SESSION_MARKER_VAR)}
    saved_flag = ray_constants.ENABLE_RAY_CLUSTER
    os.environ[LOOPBACK_ONLY_VAR] = "0"
    os.environ[SESSION_MARKER_VAR] = marker.split("=", 1)[1]
    ray_constants.ENABLE_RAY_CLUSTER = False  # `ray` may be imported already: read at import

    def adopt() -> None:
        for pid, start in _ray_processes(marker):
            watchdog.stdin.write(f"{pid} {start}\n")
        watchdog.stdin.flush()

    try:
        yield adopt
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved_flag
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        watchdog.stdin.close()  # after ray.shutdown: the watchdog kills whatever it left
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


def _carries(pid: int, marker: str) -> bool:
    try:
        return marker.encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
