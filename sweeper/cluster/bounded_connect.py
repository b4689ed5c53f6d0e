"""`ray.init(address=…)` bounded in time and ended by a signal (`bounded`).

Ray's connection retries run in C++ with the interpreter waiting on them, so neither a Python
exception nor a Python signal handler can end them: a thread watches the deadline and the
signals' wake-up bytes, and ends the process itself.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
import time
from typing import Iterator

from sweeper import interrupts

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
