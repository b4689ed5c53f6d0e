"""Kills what a sweep's local Ray left behind once its driver is gone (run as a script).

Ray ties its GCS, raylet and dashboard to the driver with PR_SET_PDEATHSIG, but not the
raylet's own children: after a SIGKILL of the driver the DashboardAgent and RuntimeEnvAgent
(which watch the raylet but first try to report its death to the GCS, already dead) lived on
for minutes with parent 1, still listening.  This process outlives the driver on purpose: it
reads the driver's Ray processes ("PID STARTTIME" lines) from its stdin until EOF, which comes
when the driver exits for any reason, SIGKILL included, then SIGKILLs those still alive
(same start time: never a reused PID), every process whose environment carries the session's
marker (workers the raylet started later) and the descendants of both.

Standard library only, and started with `python -I`: it costs milliseconds and imports nothing
of the project.  It ignores SIGINT: Ctrl-C in a terminal reaches it with the driver, and it must
stay to clean up after the driver.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Optional

#: Passes over /proc: a raylet still alive during the first may start a worker before it dies.
PASSES = 5
PASS_INTERVAL_S = 0.2


def stat(pid: int) -> Optional[tuple[int, str]]:
    """(parent PID, start time in clock ticks since boot) of a process, None when it is gone
    (or a zombie: dead already, waiting for its parent to reap it)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()  # after "(comm)", which may hold spaces
    return None if fields[0] == "Z" else (int(fields[1]), fields[19])


def carries(pid: int, marker: bytes) -> bool:
    try:
        return marker in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def targets(reported: dict[int, str], marker: bytes) -> set[int]:
    """The reported processes still alive, the marked ones, and all their descendants."""
    me = os.getpid()
    table = {pid: info for pid in (int(name) for name in os.listdir("/proc") if name.isdigit())
             if pid != me and (info := stat(pid)) is not None}
    found = {pid for pid, start in reported.items() if table.get(pid, (0, None))[1] == start}
    found |= {pid for pid in table if carries(pid, marker)}
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    stack = list(found)
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def main(marker: str) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    reported: dict[int, str] = {}
    for line in sys.stdin:  # until EOF: the driver has exited, or closed it after ray.shutdown
        pid, start = line.split()
        reported[int(pid)] = start
    for _ in range(PASSES):
        left = targets(reported, marker.encode())
        if not left:
            return
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(PASS_INTERVAL_S)


if __name__ == "__main__":
    main(sys.argv[1])
