"""Ray's dashboard as a sweep starts it: which port it is given, why it did not start, and how a
person gets into it.

* **Two local Rays** on one machine would meet at the dashboard's port: Ray's default one is left
  to Ray's own retries, another is taken when free (`dashboard_port`).
* **A dashboard that cannot start** says why in one line (`dashboard_failure`): a missing
  module by name (Ray's dashboard needs aiohttp_cors, opencensus, opentelemetry, pydantic, …),
  a taken port as such, else its log's last error line.
* **Its token**: the command that prints it, or a warning that anyone can get in (`auth_hint`).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import shlex
import socket
import sys
from pathlib import Path
from typing import Optional

logger = logging.getLogger(__name__)

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
