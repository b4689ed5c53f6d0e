"""How the sweep meets Ray (`ray_session`): a local Ray confined to loopback that dies with its
driver, shares the machine with other Rays and keeps the runtime environment's values out of
Ray's files; a cluster that does not answer refused in bounded time.  (docs/mlflow-and-ray.md
and docs/confinement.md.)

* **Loopback**: local Ray binds its GCS, raylet, workers, the driver's gRPC, agents and metrics
  ports to the node's IP address, the machine's outward one, most on all interfaces.
  `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0` (read into
  `ray._private.ray_constants.ENABLE_RAY_CLUSTER` when `ray` is imported) makes
  `get_node_ip_address` answer 127.0.0.1, and every process binds there;
  `ray.init(_node_ip_address="127.0.0.1")` alone does not (`resolve_ip_for_localhost` turns it
  back into the outward address).  Set for local Ray only, in this process and the environment
  its Ray processes inherit, and undone after: a cluster's driver must advertise an address the
  nodes can reach.
* **Bounded connect**: `ray.init(address=HOST:PORT)` with nothing there retries "Failed to
  connect to GCS" in practice for ever; the address is probed first, until
  `cluster.connect_timeout_s`, and refused if it never answers (exit 2, nothing written).
* **Two local Rays**: the second would meet the first's fixed ports, the dashboard's
  (`dashboard_port`: Ray's own retries, or another free port) and its agent's 52365
  (`dynamic_agent_port`).  Two starting at the same moment on a loaded machine can miss Ray's
  30 s for the node to register ("The current node timed out during startup"): the start is
  tried once more in a fresh session, the first one's processes killed, then refused in one
  line (`RayStartFailed`).
* **A dashboard that cannot start** says why in one line (`dashboard_failure`): a missing
  module by name (Ray's dashboard needs aiohttp_cors, opencensus, opentelemetry, pydantic, …),
  a taken port as such, else its log's last error line.
* **Secrets**: `cluster.runtime_env.env_vars` reach a local Ray's workers through the environment
  its processes inherit (`environment`), never through Ray's runtime environment, whose agent
  writes them into a log every user can read.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import shlex
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import jobs
import sweeper
from sweeper import interrupts
from sweeper.config import ConfigError, SweepConfig
from sweeper.checks.infrastructure import JOB_CONFIG_VARIABLE

logger = logging.getLogger(__name__)

#: How long to wait between two probes of an address that refused the connection.
PROBE_INTERVAL_S = 0.5


def bootstrap_address(address: str) -> Optional[tuple[str, int]]:
    """(host, port) that `cluster.address` makes Ray connect to first, or None when it names
    none (a malformed address: Ray itself says why).  "auto" is RAY_ADDRESS or the cluster
    `ray start` recorded on this machine (`resolved_address`)."""
    if address == "auto":
        address = resolved_address(address)
    if "://" in address:
        address = address.split("://", 1)[1]
    address = address.split("/", 1)[0]
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def resolved_address(address: str) -> str:
    """`address` as `ray.init` is to be given it: "auto" becomes RAY_ADDRESS or the address `ray
    start` recorded on this machine, never "any Ray process found here" (Ray's own fallback for
    "auto", which would join another sweep's private local Ray).  Raises ConfigError when
    "auto" finds neither."""
    if address != "auto":
        return address
    found = os.environ.get("RAY_ADDRESS") or _recorded_cluster()
    if found and found != "auto":
        return found
    raise ConfigError([
        "cluster.address='auto': no Ray cluster is running here: RAY_ADDRESS is not set and "
        "`ray start` recorded none on this machine. Start one (`ray start --head`), give its "
        "address (cluster.address=HOST:6379 or ray://HOST:10001), or use cluster.address=null "
        "(cluster=local) for a Ray of this sweep's own"])


def submitted_job_address() -> Optional[str]:
    """The cluster that runs this process as a Ray job (`ray job submit -- sweeper …`), else None.

    Ray's job supervisor starts the driver with the job's config and RAY_ADDRESS, the cluster's
    GCS.  A sweep started that way joins that cluster rather than starting a Ray of its own, so its
    tasks, logs and progress live in the dashboard the job was submitted to."""
    if JOB_CONFIG_VARIABLE not in os.environ:
        return None
    return os.environ.get("RAY_ADDRESS") or "auto"


def joins_cluster(cfg: SweepConfig) -> bool:
    """Whether the sweep runs on a Ray cluster it does not start (`cluster.address`, or a Ray
    job's), whose nodes may be other machines, rather than on a local Ray of its own."""
    return cfg.cluster.address is not None or submitted_job_address() is not None


#: Ray retries a task its memory monitor killed without end unless its owner (this driver) sets
#: a bound: `RAY_task_oom_retries`, read once as the driver's Ray starts (default -1: for ever).
OOM_RETRIES_VARIABLE = "RAY_task_oom_retries"


def oom_retries(cfg: SweepConfig) -> dict[str, str]:
    """The variable that bounds the retries of tasks Ray's memory monitor kills by the sweep's
    own bound (the larger of `resources.train.max_retries` and `resources.attack.max_retries`),
    set while Ray starts (`environment`) unless the environment sets one: each is then retried
    that often, then fails as transient with its reason, instead of again and again."""
    if OOM_RETRIES_VARIABLE in os.environ:
        return {}
    return {OOM_RETRIES_VARIABLE: str(max(cfg.resources.train.max_retries,
                                          cfg.resources.attack.max_retries))}


def require_token_auth(allow_no_auth: bool) -> None:
    """Refuse (ConfigError, before local Ray starts) an environment that turns Ray's token
    authentication off (RAY_AUTH_MODE other than token; unset, Ray turns it on for a cluster it
    starts), unless `cluster.allow_no_auth` says so: the dashboard and the job API would run
    code for anyone who reaches them."""
    mode = os.environ.get("RAY_AUTH_MODE")
    if mode is None or mode.lower() == "token" or allow_no_auth:
        return
    raise ConfigError([f"RAY_AUTH_MODE={mode} in the environment turns off the token "
                       "authentication of the Ray this sweep starts: its dashboard and job API "
                       "would run code for anyone who reaches them. Unset it (or set it to "
                       "token), or accept that with cluster.allow_no_auth=true"])


def _recorded_cluster() -> Optional[str]:
    """The address the last `ray start` on this machine recorded (in Ray's temp folder), if any."""
    from ray._private.utils import read_ray_address

    return read_ray_address() or None


def require_reachable(address: str, timeout_s: float) -> str:
    """Refuse `cluster.address` unless the cluster answers within `timeout_s` seconds; return
    the address to give `ray.init` (`resolved_address`).

    Ray dials the machine's own address for 127.0.0.1/localhost, and that is what is probed.
    A TCP connection is retried (a head node still starting refuses them for a few seconds),
    then a GCS address (not ray://) must answer gRPC's health check as Ray's GCS does: a port
    that accepts connections but is not Ray's would leave `ray.init` waiting for ever.  Raises
    ConfigError otherwise.
    """
    address = resolved_address(address)
    target = bootstrap_address(address)
    if target is None:
        return address
    host, port = target
    client = address.startswith("ray://")
    if not client:
        from ray._private.services import resolve_ip_for_localhost

        host = resolve_ip_for_localhost(host)
    dialed = f"{host}:{port}" + ("" if host == target[0] else
                                 f" (Ray dials this machine's address for {target[0]})")
    deadline = time.monotonic() + timeout_s
    last_error: Optional[BaseException] = None
    while True:
        remaining = deadline - time.monotonic()
        try:
            with socket.create_connection((host, port), timeout=max(remaining, 0.1)):
                break
        except OSError as error:
            last_error = error
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ConfigError([
                f"cluster.address={address!r}: nothing answered at {dialed} within "
                f"cluster.connect_timeout_s={timeout_s:g} s "
                f"({getattr(last_error, 'strerror', None) or last_error}). Check that the cluster's "
                "head is running (`ray status` on it), that the port is its GCS port (6379 by "
                "default; 10001 for ray://), that no firewall between here and there drops it, or "
                "raise cluster.connect_timeout_s for a head still starting"])
        time.sleep(min(PROBE_INTERVAL_S, remaining))
    if not client:
        reason = gcs_health(f"{host}:{port}", max(deadline - time.monotonic(), 1.0))
        if reason is not None:
            raise ConfigError([
                f"cluster.address={address!r}: {dialed} accepts connections but is not a Ray "
                f"cluster's GCS ({reason}); give the head's GCS port (6379 by default, "
                "`ray start --head --port`), or ray://HOST:10001 for Ray Client"])
    return address


#: gRPC's standard health check, which Ray's GCS server answers (its default health service).
HEALTH_CHECK_METHOD = "/grpc.health.v1.Health/Check"
#: HealthCheckResponse{status: SERVING} as protobuf bytes (field 1, varint 1).
SERVING = b"\x08\x01"


def gcs_health(target: str, timeout_s: float) -> Optional[str]:
    """None when `target` (host:port) answers gRPC's health check SERVING within `timeout_s`,
    else why not, in words."""
    import grpc

    with grpc.insecure_channel(target) as channel:
        check = channel.unary_unary(HEALTH_CHECK_METHOD, request_serializer=lambda raw: raw,
                                    response_deserializer=lambda raw: raw)
        try:
            answer = check(b"", timeout=timeout_s)
        except grpc.RpcError as error:
            code = error.code()
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                return f"no gRPC answer within {timeout_s:.3g} s"
            return f"gRPC {code.name}: {(error.details() or '').splitlines()[0][:160]}"
    return None if answer == SERVING else f"its health check answered {answer!r}, not SERVING"


@contextlib.contextmanager
def bounded(address: str, timeout_s: float) -> Iterator[None]:
    """`ray.init(address=…)` bounded: while it is open, the command ends within `timeout_s`
    seconds (exit 2, one line), and at once on SIGTERM (143) or SIGINT (130).

    Ray's connection retries run in C++ with the interpreter waiting on them, so neither a
    Python exception nor a Python signal handler (Ray's own SIGTERM handler included) can end
    them.  A signal's wake-up byte (`signal.set_wakeup_fd`, written by the interpreter's C
    handler) and the deadline are watched from a thread, which ends the process with
    `os._exit`: nothing has been written yet (listeners start only after Ray has).
    """
    import select
    import signal

    if threading.current_thread() is not threading.main_thread():  # only it may set the fd
        yield
        return
    done = threading.Event()
    read_end, write_end = socket.socketpair()
    read_end.setblocking(False)
    write_end.setblocking(False)
    installed = {}
    for signum in (signal.SIGTERM, signal.SIGINT):  # a C handler must exist to write the byte
        # (the command's own, `sweeper.interrupts`, steps aside: the watcher says what ended)
        if signal.getsignal(signum) in (signal.SIG_DFL, None) or interrupts.handles(signum):
            installed[signum] = (signal.signal(signum, _noted), _noted)
    previous = signal.set_wakeup_fd(write_end.fileno(), warn_on_full_buffer=False)

    def watch() -> None:
        deadline = time.monotonic() + timeout_s
        while not done.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                _end(2, f"error: invalid configuration:\n  - cluster.address={address!r}: Ray did "
                        f"not connect within cluster.connect_timeout_s={timeout_s:g} s; check "
                        "that it is the head's GCS address and that this machine can reach "
                        "every node (Ray dials the nodes' own addresses), or raise "
                        "cluster.connect_timeout_s")
            ready, _, _ = select.select([read_end], [], [], min(remaining, 0.2))
            if ready and not done.is_set():
                try:
                    data = read_end.recv(16)
                except BlockingIOError:
                    continue
                for signum in data:
                    if signum in (signal.SIGTERM, signal.SIGINT):
                        _end(128 + signum, f"interrupted while connecting to cluster.address="
                                           f"{address!r}; nothing was written")

    watcher = threading.Thread(target=watch, name="sweeper-connect-bound", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        signal.set_wakeup_fd(previous)
        for signum, (before, ours) in installed.items():
            if signal.getsignal(signum) is ours:  # else Ray's own handler replaced it: kept
                signal.signal(signum, before)
        watcher.join()
        read_end.close()
        write_end.close()


def _noted(signum: int, frame: object) -> None:
    """A signal's Python handler while `bounded` is open: its watcher acts on the signal."""


def _end(code: int, message: str) -> None:
    """Say `message` and end the process at once (`bounded`'s watcher, off the main thread),
    after what must be undone even so (`interrupts.run_abort_hooks`: the sweep's lock file)."""
    try:
        interrupts.run_abort_hooks()
        sys.stderr.write(message + "\n")
        sys.stderr.flush()
    finally:
        os._exit(code)


#: Ray's own dashboard port, `cluster.dashboard_port`'s default.
DEFAULT_DASHBOARD_PORT = 8265


def dashboard_port(host: str, port: int, include_dashboard: bool) -> Optional[int]:
    """What `ray.init` is given for `cluster.dashboard_port`: None for Ray's default port (and
    for any port without a dashboard, whose API server Ray starts all the same), so that the
    dashboard tries 8265 and the next 50 ports itself (two sweeps starting at once both saw 8265
    free; given explicitly, the loser's dashboard could not bind it and no raylet started);
    another port is the user's choice, taken when free (`free_dashboard_port`).  Either way a
    port that is taken is said: the URL printed below is then another."""
    if not include_dashboard:
        return None
    if port == DEFAULT_DASHBOARD_PORT:
        if port_taken(host, port):
            logger.warning("The Ray dashboard's port %s:%d is taken (another sweep's Ray?): Ray "
                           "tries the ports after it, and the one it takes is printed below; "
                           "set cluster.dashboard_port to choose one.", host, port)
        return None
    return free_dashboard_port(host, port)


def port_taken(host: str, port: int) -> bool:
    """Whether `port` on `host` is in use (binding it fails with EADDRINUSE)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        try:
            probe.bind((host, port))
        except OSError as error:
            return error.errno == errno.EADDRINUSE
    return False


def free_dashboard_port(host: str, port: int) -> int:
    """`port` when it can be bound on `host`, else 0 (Ray then picks a free one), with a warning:
    two sweeps at once on one machine is normal use, and the second must not die on Ray's
    "Failed to bind ... already occupied" traceback."""
    if port == 0:
        return 0
    if port_taken(host, port):  # any other failure is not ours to judge: Ray says what is wrong
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


@contextlib.contextmanager
def ray_session(cfg: SweepConfig) -> Iterator[Optional[str]]:
    """Join the Ray this process already runs (tests), connect to `cluster.address` (refused
    after `cluster.connect_timeout_s` when nothing answers) or to the cluster running this process
    as a Ray job (`ray job submit`, `submitted_job_address`), or start a new local Ray ("local":
    never a stale cluster found on the machine) that listens on loopback only and dies with this
    process (`local_ray_confined`).

    The driver's job carries the sweep's name as `job_name` metadata, the column the Ray
    dashboard's Jobs page shows, so the sweep is found by name there (a `ray job submit
    --metadata-json` job_name wins)."""
    import ray
    from ray.job_config import JobConfig

    if ray.is_initialized():
        yield None
        return
    runtime_env = runtime_environment(cfg)
    job = JobConfig(metadata={"job_name": f"sweeper {cfg.name}", "sweeper_sweep": cfg.name})
    address = cfg.cluster.address or submitted_job_address()
    with contextlib.ExitStack() as stack:
        stack.enter_context(environment(oom_retries(cfg)))
        if address is None:
            require_token_auth(cfg.cluster.allow_no_auth)
            local = stack.enter_context(local_ray_confined())
            # Workers inherit the variables from the Ray processes started here: kept out of
            # Ray's runtime environment, so out of its agent's log and its dashboard.
            variables = (runtime_env or {}).pop("env_vars", {})
            with environment(variables), dynamic_agent_port(), interrupts.kept_from_ray():
                for attempt in range(1, START_ATTEMPTS + 1):
                    try:
                        context = ray.init(
                            address="local", num_cpus=cfg.cluster.num_cpus,
                            runtime_env=runtime_env or None,
                            include_dashboard=cfg.cluster.include_dashboard,
                            dashboard_host=cfg.cluster.dashboard_host,
                            dashboard_port=dashboard_port(cfg.cluster.dashboard_host,
                                                          cfg.cluster.dashboard_port,
                                                          cfg.cluster.include_dashboard),
                            logging_level=logging.WARNING, job_config=job)
                        break
                    except Exception as error:  # noqa: BLE001 - Ray raises a bare Exception here
                        _start_failed(error, attempt, cfg, local)
            local.adopt()
        else:
            timeout = cfg.cluster.connect_timeout_s
            address = require_reachable(address, timeout)
            with bounded(address, timeout), interrupts.kept_from_ray():
                try:
                    context = ray.init(address=address, runtime_env=runtime_env,
                                       logging_level=logging.WARNING, job_config=job)
                except (ConnectionError, RuntimeError, ValueError) as error:
                    raise ConfigError([f"cluster.address={address!r}: Ray could not connect "
                                       f"({str(error).strip().splitlines()[0]})"]) from None
        stack.callback(ray.shutdown)
        url = context.dashboard_url
        yield f"http://{url}" if url else None


#: How many times a local Ray's start is tried when its node timed out during startup.
START_ATTEMPTS = 2
#: What Ray's `Node` raises when the raylet did not register in time (a bare Exception).
STARTUP_TIMEOUT = "timed out during startup"


class RayStartFailed(RuntimeError):
    """A local Ray that did not start, tried `START_ATTEMPTS` times: an outage of this machine
    (one line, exit 1), not a configuration error."""


def _start_failed(error: Exception, attempt: int, cfg: SweepConfig, local: LocalRay) -> None:
    """After `ray.init` raised `error` on try `attempt`: a dashboard that could not start is a
    ConfigError; a node that timed out during startup is tried again in a fresh session (the
    processes of this try killed) and, the last time, `RayStartFailed`; anything else is
    raised as it is."""
    import ray

    said = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if STARTUP_TIMEOUT not in said:
        if "dashboard" not in str(error).lower():
            raise error
        raise ConfigError([dashboard_failure(str(error), cfg.cluster.dashboard_port)]) from None
    ray.shutdown()
    local.discard()
    if attempt < START_ATTEMPTS:
        logger.warning("local Ray did not start (%s); starting it once more in a fresh session",
                       said)
        return
    raise RayStartFailed(
        f"local Ray did not start, tried {START_ATTEMPTS} times ({said}): this machine was too "
        "loaded for its node to register in time, e.g. another sweep starting its Ray at the "
        "same moment; rerun the same command, start such sweeps one after the other, or set "
        "cluster.include_dashboard=false") from None


#: What Ray's driver raises when its own import of the dashboard's dependencies failed
#: (`ray._private.services.start_api_server`); the module is in the import's error.
MISSING_PACKAGES = "Cannot include dashboard with missing packages"
#: How an import that failed names its module, in the error or in the dashboard's log.
_NO_MODULE = re.compile(r"No module named '([\w.]+)'|cannot import name '\w+' from '([\w.]+)'")
#: The words of a port already taken: Ray's own bind check, the dashboard's retries, the OS.
_PORT_TAKEN = ("already occupied", "failed to find a valid port", "address already in use",
               "errno 98")
#: How Ray's error names the dashboard log it quotes the last lines of.
_QUOTED_LOG = re.compile(r"The last \d+ lines of (\S+)")
#: A log line that says what went wrong: "ModuleNotFoundError: …", "OSError: [Errno 98] …".
_ERROR_LINE = re.compile(r"^\s*(?:\w+\.)*\w*(?:Error|Exception)\b.*")


def dashboard_failure(said: str, port: int) -> str:
    """Why Ray's dashboard did not start, in one line with what to do, from what Ray raised
    (`said`): a missing Python module named as such (Ray's own check in this process names
    none, so it is asked again; a dashboard process that died on an import left it in its
    log), a port already taken as such, else the dashboard log's last error line."""
    text = said
    if MISSING_PACKAGES in said:
        from ray._private.utils import get_dashboard_dependency_error

        text = f"{said} {get_dashboard_dependency_error() or ''}"
    quoted = _QUOTED_LOG.search(said)
    logs = Path(quoted.group(1)).parent if quoted else None
    if logs is not None:  # the dashboard's stderr too: a crash before its logger says it there
        with contextlib.suppress(OSError):
            text += "\n" + (logs / "dashboard.err").read_text(errors="replace")[-20000:]
    missing = _NO_MODULE.search(text)
    where = f" (its log: {logs})" if logs is not None else ""
    if missing:
        module = missing.group(1) or missing.group(2)
        return (f"cluster.include_dashboard=true: Ray's dashboard could not start: the Python "
                f"module {module!r} it needs is missing here{where}; install Ray's dashboard "
                "dependencies (pip install 'ray[default]'), or set cluster.include_dashboard=false")
    if any(words in text.lower() for words in _PORT_TAKEN):
        ports = (f"{port} and the next ports Ray tried are" if port == DEFAULT_DASHBOARD_PORT
                 else f"{port} is")
        return (f"cluster.dashboard_port={port}: Ray's dashboard could not start: port {ports} "
                "taken (another process took it as this sweep started?); rerun, or set "
                "cluster.dashboard_port=0 for any free port, or cluster.include_dashboard=false")
    errors = [line.strip() for line in text.splitlines() if _ERROR_LINE.match(line)]
    reason = errors[-1] if errors else said.strip().splitlines()[-1] if said.strip() else "no reason given"
    return (f"cluster.include_dashboard=true: Ray's dashboard could not start ({reason[:300]})"
            f"{where}; set cluster.include_dashboard=false to run without it")


def runtime_environment(cfg: SweepConfig) -> Optional[dict[str, Any]]:
    """`cluster.runtime_env`, plus this checkout's packages when `cluster.ship_project` asks
    (workers of a cluster without the project installed then import the driver's code)."""
    env = dict(cfg.cluster.runtime_env)
    if cfg.cluster.ship_project:
        env["py_modules"] = [*env.get("py_modules", []), *(str(Path(module.__path__[0]))
                                                          for module in (sweeper, jobs))]
    return env or None


def ray_cli() -> list[str]:
    """Ray's command line, runnable as printed with no activated venv: the `ray` script beside
    this interpreter, else Ray's CLI module run by it."""
    script = Path(sys.executable).parent / "ray"
    return [str(script)] if script.exists() else [sys.executable, "-m", "ray.scripts.scripts"]


def auth_hint() -> str:
    """How to get into the dashboard: the command that prints its token when Ray's token
    authentication is on (Ray sets RAY_AUTH_MODE=token for a cluster it starts with it), else a
    warning that anyone can."""
    mode = os.environ.get("RAY_AUTH_MODE", "")
    if mode.lower() == "token":
        return f"its token: {shlex.join([*ray_cli(), 'get-auth-token'])}"
    return f"no token authentication (RAY_AUTH_MODE={mode or 'unset'}): anyone who reaches it can run code"


