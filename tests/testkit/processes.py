"""Finding, spawning and SIGKILLing the processes fault tests start, theirs and nobody else's.

Nothing here runs ``ray stop`` (it stops every Ray on the machine, this pytest session's own
included).  Processes are found by a marker in their environment (SWEEPER_FAULTS_SESSION /
_NODE / _PROC, inherited through daemonizing and setsid), by their temp dir in the command
line and as descendants of those.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional

import psutil

REPO_ROOT = Path(__file__).resolve().parents[2]

#: Marks every process these helpers start, in its environment, which descendants inherit
#: (readable in /proc/PID/environ except for processes that rewrite their title, such as Ray
#: workers: those are found as descendants of a marked raylet).  Its value identifies this
#: pytest process, so `scope="mine"` never matches another pytest run on the machine.
SESSION_VAR = "SWEEPER_FAULTS_SESSION"
SESSION_TAG = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
#: Marks the processes of one Ray node (set only in that node's `ray start` environment).
NODE_VAR = "SWEEPER_FAULTS_NODE"
#: Marks the processes of one `Procs.spawn` / `Procs.run_sweep_cli` call.
PROC_VAR = "SWEEPER_FAULTS_PROC"


@contextlib.contextmanager
def held(port: int) -> Iterator[None]:
    """Listen on 127.0.0.1:`port` while open (if something else holds it already, so be it)."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen()
        except OSError as error:
            assert error.errno == errno.EADDRINUSE, error
        yield


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


def alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def title(proc: psutil.Process) -> str:
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
        return [p for p in _as_process(proc).children(recursive=True) if alive(p)]
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
        if _env_value(proc, var) == value and alive(proc):
            found.append(proc)
    return found


def unique(procs: Iterable[psutil.Process]) -> list[psutil.Process]:
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
            if alive(p):
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
        left = [p for p in procs if alive(p)]
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
        if needle in title(proc) and alive(proc):
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
    if root is not None and alive(root):
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
    victims = unique(victims)
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


def base_env() -> dict[str, str]:
    """The environment of the servers and Ray nodes started here: ours, without any Ray address
    or node marker, with token auth on and this session's marker."""
    env = dict(os.environ)
    for var in ("RAY_ADDRESS", NODE_VAR, PROC_VAR, "PYTEST_CURRENT_TEST"):
        env.pop(var, None)
    env["RAY_AUTH_MODE"] = "token"
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    env["PYTHONUNBUFFERED"] = "1"
    env[SESSION_VAR] = SESSION_TAG
    return env



def stop_group(popen: subprocess.Popen, sig=signal.SIGTERM, grace: float = 10.0) -> None:
    """Signal every process of a server started with start_new_session=True (its process
    group, plus descendants that left it), SIGKILL what is left after `grace` s, reap it.
    Group members must carry this session's marker, so a reused pgid never hits a stranger."""
    members = [p for p in psutil.process_iter()
               if _pgid(p) == popen.pid and _env_value(p, SESSION_VAR) == SESSION_TAG]
    if popen.poll() is None:
        members += [psutil.Process(popen.pid)] + descendants(popen)
    members = [p for p in unique(members) if alive(p)]
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


def http_ok(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        return s.connect_ex((host, port)) != 0

class Procs:
    """The process helpers a fault test gets as its ``procs`` fixture: this module's functions,
    and `spawn` / `run_sweep_cli`, whose processes `close()` kills with their whole tree."""

    find_ray_workers = staticmethod(find_ray_workers)
    sigkill = staticmethod(sigkill)
    wait_gone = staticmethod(wait_gone)
    wait_for = staticmethod(wait_for)
    descendants = staticmethod(descendants)
    kill_tree = staticmethod(kill_tree)
    processes_with_env = staticmethod(processes_with_env)
    free_port = staticmethod(free_port)

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.started: list[subprocess.Popen] = []
        self._counter = itertools.count()

    def spawn(self, argv: Iterable[str], env: Optional[dict] = None,
              cwd: Optional[os.PathLike] = None, name: str = "proc") -> subprocess.Popen:
        """Start `argv` in a new session with stdout/stderr to files under `log_dir`.  `env` is
        laid over os.environ (a value of None removes the variable; pass a cluster's `env` to
        use it whole).  The Popen gets `stdout_path`, `stderr_path` and `fault_tag` (an
        environment marker its descendants inherit, which kill_tree uses)."""
        n = next(self._counter)
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
        out_path, err_path = self.log_dir / f"{name}{n}.out", self.log_dir / f"{name}{n}.err"
        with open(out_path, "w") as out, open(err_path, "w") as err:
            popen = subprocess.Popen([str(a) for a in argv], env=full_env,
                                     cwd=str(cwd or REPO_ROOT), stdout=out, stderr=err,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        popen.stdout_path, popen.stderr_path, popen.fault_tag = out_path, err_path, tag
        self.started.append(popen)
        return popen

    def run_sweep_cli(self, args: Iterable[str] = (), env: Optional[dict] = None,
                      cwd: Optional[os.PathLike] = None) -> subprocess.Popen:
        """`python -m sweeper ARGS` via spawn (cwd defaults to the repo root)."""
        return self.spawn([sys.executable, "-m", "sweeper", *args], env=env, cwd=cwd,
                          name="sweep")

    @staticmethod
    def output(popen) -> tuple[str, str]:
        """(stdout, stderr) written so far by a spawned process."""
        return (Path(popen.stdout_path).read_text(errors="replace"),
                Path(popen.stderr_path).read_text(errors="replace"))

    def close(self) -> None:
        """Kill everything spawned, with its whole tree."""
        for popen in self.started:
            with contextlib.suppress(Exception):
                kill_tree(popen)
