"""A cluster in a box: Ray nodes on this machine that share nothing a cluster's machines do not.

Every host of the box is a process tree in namespaces of its own:

* **network**: its own network namespace, one veth leg on a bridge that lives in the box's own
  namespace, an address on `SUBNET` (RFC 2544's benchmarking range: no route on this machine
  leads there) and a default route into that bridge, which has no other leg, so no packet leaves
  the box and the hosts reach each other only by their addresses, never by loopback;
* **disk**: its own mount namespace, with a private `/tmp`, `$HOME` and `/dev/shm`; `/tmp` and
  `$HOME` are folders of a tmpfs of the host's own (`HOST_DISK`), mounted under the box's root
  so a test reads what each host wrote, and sized apart from this machine's disk, however full
  that is; the checkout's working tree and
  any folder named in `hide` covered by an empty tmpfs; only the interpreter (the venv and the
  Python it was made from) stays visible, as on a machine where the image installed the
  project's dependencies;
* **processes**: its own PID namespace, so Ray's process scans find only that host's processes,
  and a SIGKILL of the namespace's first process (`Host.kill`) takes every process of the host
  with it, as a machine's power cut does.

`Box.start_ray()` brings up a head (no CPUs: it schedules, it does not train), worker nodes and
the driver's host, which joins as a node without CPUs (Ray runs a driver on a node: a process
that only knows the GCS address cannot reach the object store's socket) and from where
`Box.sweep()` runs `python -m sweeper cluster=remote …`.  Token authentication is on across
nodes: every host gets the same `RAY_AUTH_TOKEN`, as a secret mounted on each machine would.
`Box.start_services()` starts the shared services on hosts of their own: MLflow on PostgreSQL
and Redis (for GCS fault tolerance) on one, moto's S3 on another, so S3 can be cut off alone.

Needs root (`ip netns`, `unshare`, `nsenter`): `namespaces_problem()` says why not otherwise.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Optional

import psutil

from testkit.processes import REPO_ROOT, SESSION_TAG, SESSION_VAR

#: The box's subnet (/24): RFC 2544's benchmarking range, routed nowhere on this machine.
SUBNET = "198.18.0"
GCS_PORT = 6379
DASHBOARD_PORT = 8265
MLFLOW_PORT = 5000
S3_PORT = 9000
REDIS_PORT = 6380
#: Each node's object store (MiB): small, as Ray allows (its minimum is 75 MiB).
OBJECT_STORE_MB = 80
BUCKET = "sweeper-box"
#: Readiness limits (seconds) on 2 busy cores.
NODE_START_TIMEOUT_S = 180
SERVICES_START_TIMEOUT_S = 180
#: Each host's disk (its /tmp, $HOME and log): memory is used only as it fills.
HOST_DISK = "3g"
#: The GCS marks a SIGKILLed node dead after about period x threshold.
HEALTH_CHECK = {
    "RAY_health_check_initial_delay_ms": "1000",
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_timeout_ms": "3000",
    "RAY_health_check_failure_threshold": "4",
}

#: Run as the first process of a host's namespaces, before its command: what the host sees.
#: Everything named comes in the environment: BOX_KEEP (':'-separated folders that stay visible
#: at their paths), BOX_HIDE (folders covered by an empty tmpfs), BOX_TMP and BOX_HOME (the
#: host's own /tmp and $HOME, folders of the box).  Folders are staged under /mnt (a tmpfs of
#: the host's own) first, since covering /tmp or $HOME may cover where they are.
MOUNTS = r"""
set -eu
mount -t tmpfs -o size=1m,mode=755 box-stage /mnt
IFS=:
n=0
for p in $BOX_KEEP; do mkdir /mnt/keep$n; mount --rbind "$p" /mnt/keep$n; n=$((n+1)); done
mkdir /mnt/tmp /mnt/home
mount --bind "$BOX_TMP" /mnt/tmp
mount --bind "$BOX_HOME" /mnt/home
mount --bind /mnt/tmp /tmp
mount --bind /mnt/home "$HOME"
mount -t tmpfs -o size=4g,mode=1777 box-shm /dev/shm
for p in $BOX_HIDE; do if [ -d "$p" ]; then mount -t tmpfs -o size=1m,mode=755 box-hidden "$p"; fi; done
n=0
for p in $BOX_KEEP; do mkdir -p "$p"; mount --rbind /mnt/keep$n "$p"; n=$((n+1)); done
unset IFS
exec "$@"
"""


def namespaces_problem() -> Optional[str]:
    """Why no box can be made on this machine, or None when one can."""
    if os.geteuid() != 0:
        return "the cluster box needs root: network, mount and PID namespaces (ip netns, unshare)"
    for tool in ("ip", "unshare", "nsenter", "redis-server"):
        if shutil.which(tool) is None:
            return f"the cluster box needs `{tool}` (make install-system, or apt-get install it)"
    name = f"sbprobe{uuid.uuid4().hex[:6]}"
    try:
        _ip("netns", "add", name)
    except RuntimeError as error:
        return f"no network namespace can be made here: {error}"
    _ip("netns", "del", name)
    return None


def _ip(*args: str) -> None:
    _run("ip", *args)


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if done.returncode:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")


def _interpreter_folders() -> list[str]:
    """What a host must see to run this interpreter: the venv and the Python it was made from."""
    folders = {str(Path(sys.prefix).resolve()), str(Path(sys.base_prefix).resolve())}
    return sorted(folders)


def host_env(extra: Optional[dict[str, str]] = None) -> dict[str, str]:
    """The environment of a box host's processes: this one's, without anything that would point
    at this machine's Ray, its tests or its credentials, with token auth on."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("RAY_", "AWS_", "MLFLOW_", "PYTEST_", "SWEEPER_"))}
    env.update({"HOME": str(Path.home()), "PYTHONUNBUFFERED": "1", "RAY_AUTH_MODE": "token",
                "RAY_USAGE_STATS_ENABLED": "0", "OMP_NUM_THREADS": "1", SESSION_VAR: SESSION_TAG})
    env.pop("PYTHONPATH", None)
    env.update(extra or {})
    return env


class Host:
    """One machine of the box: its namespaces, its address, its own /tmp and $HOME (folders
    under `root`), and the first process of its namespaces (`start`), whose death ends them."""

    def __init__(self, box: "Box", name: str, ip: str, index: int):
        self.box, self.name, self.ip, self.index = box, name, ip, index
        self.netns = f"{box.tag}-{name}"
        self.root = box.root / name
        self.tmp, self.home = self.root / "tmp", self.root / "home"
        self.popen: Optional[subprocess.Popen] = None
        self.log = self.root / "host.log"

    # -- network ---------------------------------------------------------------------------
    def plug(self) -> None:
        """Give the host a disk of its own and create its network namespace, plugged into the
        box's bridge."""
        self.root.mkdir(parents=True, exist_ok=True)
        # A tmpfs, not a folder of this machine's disk: Ray's raylet measures its temp folder's
        # file system (refusing to spill above 95 % full), which must be the host's, not ours.
        _run("mount", "-t", "tmpfs", "-o", f"size={HOST_DISK}", "box-disk", str(self.root))
        for folder in (self.tmp, self.home):
            folder.mkdir(parents=True, exist_ok=True)
        self.tmp.chmod(0o1777)
        _ip("netns", "add", self.netns)
        leg = f"leg{self.index}"
        _ip("link", "add", leg, "netns", self.box.bridge_ns, "type", "veth",
            "peer", "name", "eth0", "netns", self.netns)
        _ip("-n", self.box.bridge_ns, "link", "set", leg, "master", "br0")
        _ip("-n", self.box.bridge_ns, "link", "set", leg, "up")
        _ip("-n", self.netns, "link", "set", "lo", "up")
        _ip("-n", self.netns, "addr", "add", f"{self.ip}/24", "dev", "eth0")
        _ip("-n", self.netns, "link", "set", "eth0", "up")
        # Ray finds a node's address by the route to a public one: it must lead into the box.
        _ip("-n", self.netns, "route", "add", "default", "dev", "eth0")

    def unplug(self) -> None:
        """Take the host off the bridge (its link down): nothing reaches it, nothing is lost."""
        _ip("-n", self.box.bridge_ns, "link", "set", f"leg{self.index}", "down")

    def replug(self) -> None:
        _ip("-n", self.box.bridge_ns, "link", "set", f"leg{self.index}", "up")

    # -- processes -------------------------------------------------------------------------
    def start(self, argv: list[str], env: dict[str, str], hide: tuple[str, ...] = (),
              keep: tuple[str, ...] = ()) -> subprocess.Popen:
        """Start the host's first process: `argv` in its namespaces, seeing what MOUNTS lets it.
        The checkout stays where it is unless `hide` names it: a clone under /tmp or $HOME,
        which every host covers with its own, must not vanish from the driver's and the
        services' hosts."""
        checkout = [] if str(REPO_ROOT) in hide else [str(REPO_ROOT)]
        mounts = dict(env, BOX_KEEP=":".join([*_interpreter_folders(), *checkout, *keep]),
                      BOX_HIDE=":".join(hide), BOX_TMP=str(self.tmp), BOX_HOME=str(self.home))
        command = ["ip", "netns", "exec", self.netns, "unshare", "--mount", "--pid", "--fork",
                   "--mount-proc", "--propagation", "private", "sh", "-c", MOUNTS, "box-host",
                   *argv]
        with open(self.log, "a") as out:
            out.write(f"==== {time.strftime('%X')} {shlex.join(argv)}\n")
            out.flush()
            self.popen = subprocess.Popen(command, env=mounts, stdout=out,
                                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          start_new_session=True)
        return self.popen

    @property
    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def init_pid(self, timeout: float = 30.0) -> int:
        """The pid (as this machine sees it) of the first process inside the host's PID
        namespace: the child `unshare --fork` made."""
        assert self.popen is not None, f"host {self.name} was never started"
        deadline = time.monotonic() + timeout
        while True:
            try:
                children = psutil.Process(self.popen.pid).children()
            except psutil.Error:
                children = []
            if children:
                return children[0].pid
            if self.popen.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"host {self.name}: its first process did not start:\n"
                                   + self.log.read_text()[-3000:])
            time.sleep(0.05)

    def enter(self, argv: list[str], cwd: Optional[str] = None) -> list[str]:
        """`argv` as run inside the host's namespaces (network, mounts, PIDs), from `cwd`."""
        return ["nsenter", "--target", str(self.init_pid()), "--net", "--mount", "--pid", "--",
                "env", f"--chdir={cwd or '/'}", *argv]

    def run(self, argv: list[str], env: dict[str, str], cwd: Optional[str] = None,
            timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(self.enter(argv, cwd), env=env, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)

    def spawn(self, argv: list[str], env: dict[str, str], name: str,
              cwd: Optional[str] = None) -> subprocess.Popen:
        """`argv` in the background inside the host; its output in root/NAME.out and .err."""
        out_path, err_path = self.root / f"{name}.out", self.root / f"{name}.err"
        with open(out_path, "w") as out, open(err_path, "w") as err:
            popen = subprocess.Popen(self.enter(argv, cwd), env=env, stdout=out, stderr=err,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        popen.stdout_path, popen.stderr_path = out_path, err_path  # type: ignore[attr-defined]
        return popen

    def pids(self) -> list[int]:
        """Every process in the host's network namespace (as this machine numbers them)."""
        done = subprocess.run(["ip", "netns", "pids", self.netns], capture_output=True,
                              text=True, timeout=30)
        return [int(pid) for pid in done.stdout.split()]

    def kill(self, timeout: float = 30.0) -> None:
        """SIGKILL the host's first process: the kernel kills every process of its PID
        namespace with it.  Returns once none is left."""
        if self.popen is None:
            return
        with contextlib.suppress(RuntimeError, psutil.Error, ProcessLookupError):
            os.kill(self.init_pid(timeout=1), signal.SIGKILL)
        deadline = time.monotonic() + timeout
        while self.pids():
            if time.monotonic() > deadline:
                for pid in self.pids():  # a process that entered by nsenter, outside its PIDs
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            if time.monotonic() > deadline + 10:
                raise RuntimeError(f"host {self.name}: processes survived: {self.pids()}")
            time.sleep(0.1)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=10)

    def files(self) -> list[str]:
        """What the host wrote to its own disk ($HOME and /tmp), as paths relative to them."""
        found = []
        for label, folder in (("~", self.home), ("/tmp", self.tmp)):
            for path in folder.rglob("*"):
                if path.is_file() and not path.is_symlink():
                    found.append(f"{label}/{path.relative_to(folder)}")
        return sorted(found)


class RayHost(Host):
    """A host running a Ray node (`ray start --block` as its first process)."""

    def start_node(self, args: list[str], env: dict[str, str], hide: tuple[str, ...] = ()
                   ) -> None:
        ray = str(Path(sys.executable).parent / "ray")
        self.start([ray, "start", "--block", f"--node-ip-address={self.ip}",
                    "--disable-usage-stats", "--log-style=record", "--log-color=false", *args],
                   env, hide=hide)

    def wait_started(self, timeout: float = NODE_START_TIMEOUT_S) -> None:
        """Until `ray start` says the node runs (it then blocks); raises with its log if it ends."""
        deadline = time.monotonic() + timeout
        while "Ray runtime started" not in self.log.read_text(errors="replace"):
            if not self.running or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"Ray node {self.name} did not start:\n"
                                   + self.log.read_text(errors="replace")[-4000:])
            time.sleep(0.2)


class Box:
    """The box: a bridge, the hosts plugged into it, and their teardown (`close`)."""

    def __init__(self, root: Path):
        self.root = root
        self.tag = f"sb{uuid.uuid4().hex[:6]}"
        self.bridge_ns = f"{self.tag}-bridge"
        self.hosts: dict[str, Host] = {}
        self.token = secrets.token_hex(32)
        self.services: dict[str, str] = {}
        self.object_store_mb, self.dashboard = OBJECT_STORE_MB, False
        self._next = 1
        _ip("netns", "add", self.bridge_ns)
        _ip("-n", self.bridge_ns, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.bridge_ns, "link", "set", "br0", "up")

    def add(self, name: str, kind: type = Host) -> Host:
        index = self._next
        self._next += 1
        host = kind(self, name, f"{SUBNET}.{index}", index)
        host.plug()
        self.hosts[name] = host
        return host

    # -- services --------------------------------------------------------------------------
    def start_services(self) -> dict[str, str]:
        """MLflow on PostgreSQL and Redis on host `services`, moto's S3 on host `s3`; returns
        (and keeps in `services`) their addresses and the S3 credentials."""
        hosts = {"services": self.add("services"), "s3": self.add("s3")}
        env = host_env({"PYTHONPATH": str(REPO_ROOT / "tests")})
        for role, host in hosts.items():
            host.start([sys.executable, "-m", "testkit.box_services", role, host.ip, "/tmp/ready.json"],
                       env)
        for role, host in hosts.items():
            ready = host.tmp / "ready.json"
            deadline = time.monotonic() + SERVICES_START_TIMEOUT_S
            while not ready.exists():
                if not host.running or time.monotonic() > deadline:
                    raise RuntimeError(f"box services on {role} did not start:\n"
                                       + host.log.read_text(errors="replace")[-4000:])
                time.sleep(0.2)
            self.services.update(json.loads(ready.read_text()))
        return self.services

    @property
    def s3_env(self) -> dict[str, str]:
        return {key: self.services[key] for key in
                ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_REGION",
                 "AWS_EC2_METADATA_DISABLED")}

    def store_uri(self, prefix: str) -> str:
        return (f"s3://{BUCKET}/{prefix}?endpoint_override={self.services['s3']}&scheme=http")

    # -- Ray -------------------------------------------------------------------------------
    @property
    def gcs_address(self) -> str:
        return f"{self.hosts['head'].ip}:{GCS_PORT}"

    def node_env(self, extra: Optional[dict[str, str]] = None) -> dict[str, str]:
        """A Ray node's environment: the cluster's token and the store's credentials, which a
        cluster's machines get from their own provisioning (never from the driver)."""
        return host_env({"RAY_AUTH_TOKEN": self.token, **self.s3_env, **HEALTH_CHECK,
                         **(extra or {})})

    def head_env(self) -> dict[str, str]:
        """The head's: GCS fault tolerance on, its state in the services' Redis, so a GCS that
        restarts finds the cluster as it was (Ray's `RAY_REDIS_ADDRESS`)."""
        return self.node_env({"RAY_REDIS_ADDRESS": self.services["redis"],
                              "RAY_external_storage_namespace": self.tag})

    def start_ray(self, workers: int = 2, worker_cpus: int = 1,
                  object_store_mb: int = OBJECT_STORE_MB, dashboard: bool = False) -> None:
        """The head (with Ray's dashboard on its address when `dashboard`), `workers` worker
        nodes and the driver's host, each a node of one cluster."""
        self.object_store_mb, self.dashboard = object_store_mb, dashboard
        self.start_head()
        started = [self.add_worker(cpus=worker_cpus, wait=False) for _ in range(workers)]
        driver = self.add("driver", RayHost)
        driver.start_node([f"--address={self.gcs_address}", "--num-cpus=0",
                           f"--object-store-memory={object_store_mb * 2**20}"], self.node_env())
        for host in [*started, driver]:
            host.wait_started()

    def start_head(self) -> RayHost:
        """Start the head (again, after `kill`: the same host, address and Redis state)."""
        head = self.hosts.get("head") or self.add("head", RayHost)
        assert isinstance(head, RayHost)
        dashboard = ([f"--dashboard-host={head.ip}", f"--dashboard-port={DASHBOARD_PORT}"]
                     if self.dashboard else ["--include-dashboard=false"])
        head.start_node(["--head", f"--port={GCS_PORT}", "--num-cpus=0", *dashboard,
                         f"--object-store-memory={self.object_store_mb * 2**20}"],
                        self.head_env(), hide=(str(REPO_ROOT),))
        head.wait_started()
        return head

    def add_worker(self, cpus: int = 1, wait: bool = True,
                   env: Optional[dict[str, str]] = None) -> RayHost:
        """A new worker node on a new host (a killed host is not reused: a new machine)."""
        name = f"worker{sum(n.startswith('worker') for n in self.hosts) + 1}"
        host = self.add(name, RayHost)
        assert isinstance(host, RayHost)
        host.start_node([f"--address={self.gcs_address}", f"--num-cpus={cpus}",
                         f"--object-store-memory={self.object_store_mb * 2**20}"],
                        self.node_env(env), hide=(str(REPO_ROOT),))
        if wait:
            host.wait_started()
        return host

    def workers(self) -> list[RayHost]:
        """The worker hosts whose node runs."""
        return [host for name, host in self.hosts.items()
                if name.startswith("worker") and isinstance(host, RayHost) and host.running]

    def driver_env(self, extra: Optional[dict[str, str]] = None) -> dict[str, str]:
        return host_env({"RAY_AUTH_TOKEN": self.token, **self.s3_env,
                         "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
                         "MLFLOW_HTTP_REQUEST_TIMEOUT": "10", **(extra or {})})

    def sweep_args(self, prefix: str, name: str, **overrides) -> list[str]:
        """`python -m sweeper` overrides for a tiny sweep across the box, stored under `prefix`."""
        values = self.sweep_overrides(prefix, name, **overrides)
        return [f"{key}={value}" for key, value in values.items()]

    def cluster_overrides(self, prefix: str) -> dict[str, object]:
        """Where a sweep runs in the box: its cluster, its store (under `prefix` in the bucket)
        and its MLflow server."""
        return {"cluster": "remote", "cluster.address": self.gcs_address,
                "cluster.connect_timeout_s": 60, "store.root": f"'{self.store_uri(prefix)}'",
                "tracking.uri": f"http://{self.services['mlflow']}"}

    def sweep_overrides(self, prefix: str, name: str, **overrides) -> dict[str, object]:
        """`sweep_args` as a mapping."""
        return {
            **self.cluster_overrides(prefix), "name": name, "dataset.members": "null",
            "dataset.pool_size": 240, "dataset.test_size": 200, "dataset.eval_records": 120,
            "train.epochs": 1, "train.batch_size": 64, "train.checkpoint_seconds": 0,
            "shadow.count": 2, "grid.epsilon": "[4,.inf]", "grid.delta": "[1e-5]",
            "grid.p": "[0.3,0.7]", "grid.attack": "[lira_online,loss]", "grid.trial": "[0,1]",
            **overrides,
        }

    def sweep(self, args: list[str], name: str = "sweep",
              env: Optional[dict[str, str]] = None) -> subprocess.Popen:
        """`python -m sweeper ARGS` on the driver's host, in the background, from a folder of
        the checkout (the driver's machine has the checkout)."""
        return self.hosts["driver"].spawn([sys.executable, "-m", "sweeper", *args],
                                          self.driver_env(env), name, cwd=str(REPO_ROOT))

    def driver_python(self, code: str, timeout: float = 300,
                      env: Optional[dict[str, str]] = None) -> str:
        """Run `code` with this interpreter on the driver's host; its stdout (raises on failure)."""
        return self.driver_python_argv(code, [], timeout, env)

    def driver_python_argv(self, code: str, argv: list[str], timeout: float = 300,
                           env: Optional[dict[str, str]] = None) -> str:
        """`driver_python` with `argv` as the code's sys.argv[1:]."""
        done = self.hosts["driver"].run([sys.executable, "-c", code, *argv],
                                        self.driver_env(env), cwd=str(REPO_ROOT), timeout=timeout)
        if done.returncode:
            raise AssertionError(f"driver code failed ({done.returncode}):\n{done.stdout[-3000:]}"
                                 f"\n{done.stderr[-5000:]}")
        return done.stdout

    # -- teardown --------------------------------------------------------------------------
    def close(self) -> None:
        errors = []
        for host in reversed(list(self.hosts.values())):
            try:
                host.kill()
            except Exception as error:  # keep tearing down the rest
                errors.append(error)
            with contextlib.suppress(RuntimeError):
                _ip("netns", "del", host.netns)
            with contextlib.suppress(RuntimeError):
                _run("umount", "--lazy", str(host.root))
        with contextlib.suppress(RuntimeError):
            _ip("netns", "del", self.bridge_ns)
        shutil.rmtree(self.root, ignore_errors=True)
        if errors:
            raise errors[0]

