"""A real two-node Ray cluster on this machine for fault tests, started with the `ray` CLI:
head (GCS) and worker node, each with its own short --temp-dir under /tmp, token auth on and
fast node-death detection (DEFAULT_HEALTH_CHECK); ~15 s to start on an idle 2-core machine,
30-40 s under load.

Why not ``ray.cluster_utils.Cluster``: it starts every node inside the calling process
(``ray._private.node.Node``), and these clusters must differ from that process in ways Ray fixes
per process.

* Token auth.  Ray reads the authentication mode only from ``RAY_AUTH_MODE`` in the environment,
  refuses it in ``_system_config``, and caches it with the rest of the process's RayConfig.  The
  pytest process already runs its own session Ray (``ray_local``); turning token auth on in it
  for a Cluster would change that Ray's clients too, and Cluster's own GCS client (which waits
  for each node) would have to speak token auth from a process that does not.
* One node's processes, and only those, must be found and SIGKILLed.  `ray start` runs each
  node in its own session with a marker in its environment (NODE_VAR), which its daemons
  inherit; Cluster's nodes are children of pytest with pytest's environment.
* The address file.  Cluster writes /tmp/ray/ray_current_cluster on start and deletes it on
  shutdown, whoever else on the machine wrote it; this launcher leaves other Rays' file alone.
* The sweep under test joins with ``python -m sweeper cluster=remote``, the way the deploy
  manifests run it against nodes that `ray start` brought up.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Optional

import psutil

from testkit.processes import (NODE_VAR, REPO_ROOT, SESSION_TAG, alive, base_env, descendants,
                               free_port, kill_tree, processes_with_env, sigkill, title, unique,
                               wait_gone)

BIN_DIR = Path(sys.executable).parent

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
        roots += [p for p in psutil.process_iter() if marker in title(p) + "/" and alive(p)]
        found = list(roots)
        for proc in roots:
            found += descendants(proc)
        return unique(found)

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
                               f"{[(p.pid, title(p)[:80]) for p in left]}")
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
        self.env = base_env()
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


def start_cluster(**options) -> RayCluster:
    """A started RayCluster (`options` as RayCluster takes them), tried twice: a free port can
    be taken before `ray start` binds it.  A failed attempt is shut down before the next."""
    for attempt in range(2):
        cluster = RayCluster(_short_tmp("rt"), **options)
        try:
            return cluster.start()
        except RuntimeError:
            cluster.shutdown()
            if attempt == 1:
                raise

