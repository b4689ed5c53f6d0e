"""Ctrl-C and SIGTERM end a sweep with one line and the shell's codes (130, 143), not a traceback.

Both signals raise `Interrupted` (a KeyboardInterrupt, so every library unwinds as it does for
Ctrl-C): the sweep's blocks close on the way out (Ray shut down, the MLflow runs ended KILLED,
the sweep's lock released), and the command prints `interrupted: rerun the same command to
resume` and exits 128 + the signal's number.  What landed is kept: every file is written whole
or not at all, so the rerun resumes.  A second signal while that clean-up runs ends the process
at once, with the same line and code.

Two places cannot take the exception where the signal lands, so it is held and raised later:
a `deferred` block (a local database's write, which a signal mid-statement would leave locked
and half-done) raises it as the block ends; and where Python cannot raise at all (a `__del__`,
an `atexit` callback, which report it as "Exception ignored" and go on) it is kept silently for
`check` (the sweep's landing loop) and `received_code` (the command's exit).

Ray's `ray.init` sets SIGTERM handlers of its own (`sys.exit(15)`; its local head node's kills
its processes and exits 1), and its core worker's C++ failure handler turns SIGTERM into an
abort with stack dumps (exit 134): `kept_from_ray` keeps these out while Ray starts (only where
`install` set ours: a library caller keeps its own).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import traceback
from typing import Callable, Iterator, Optional, TypedDict

from sweeper.errors import error_chain

#: The line a stopped sweep ends with.
RESUME_LINE = "interrupted: rerun the same command to resume"

class _State(TypedDict):
    installed: bool
    signum: Optional[int]
    pending: bool
    deferring: int  # how many `deferred` blocks are open


#: signum: the signal received (the clean-up is running; a second one ends the process at once);
#: pending: received but not raised yet (deferred, or swallowed where Python could not raise it).
_state: _State = {"installed": False, "signum": None, "pending": False, "deferring": 0}


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived; `code` is the exit code the shell expects (128 + signal)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.code = 128 + signum


def exit_code(stop: KeyboardInterrupt) -> int:
    """130 for a plain Ctrl-C, 128 + the signal for an `Interrupted`."""
    return getattr(stop, "code", 128 + signal.SIGINT)


#: What must be undone even when the process ends at once (`os._exit`): the sweep's lock file.
_abort_hooks: list[Callable[[], None]] = []


@contextlib.contextmanager
def undone_on_abort(hook: Callable[[], None]) -> Iterator[None]:
    """Run `hook` if the process is ended at once (`run_abort_hooks`) while the block is open."""
    _abort_hooks.append(hook)
    try:
        yield
    finally:
        _abort_hooks.remove(hook)


def run_abort_hooks() -> None:
    """Before an `os._exit` (a second signal here, a connection bound in `sweeper.cluster.bounded_connect`)."""
    for hook in reversed(_abort_hooks):
        with contextlib.suppress(Exception):
            hook()


def raise_swallowed(error: BaseException, handling: Optional[BaseException] = None) -> None:
    """Raise again the `Interrupted` that a library turned into `error`, if any.

    A guard that keeps a library's failures from stopping the sweep (tracking) must not keep
    Ctrl-C from stopping it, and some libraries catch what a signal raised mid-call and raise
    their own error from it (MLflow's SQL session: an `OperationalError`, then an
    `MlflowException`).  Args: `error`, what the guard caught; `handling`, the exception being
    handled when the guarded call began (a clean-up after Ctrl-C), which is not raised again.
    """
    for link in error_chain(error):
        if isinstance(link, Interrupted) and link is not handling:
            release_unwound(error)
            raise link


def release_unwound(error: BaseException) -> None:
    """Let go of what the calls that `error` (and the errors it came from) unwound still hold.

    A traceback keeps its frames' locals alive, and a signal that lands while SQLite runs a
    statement leaves the statement's cursor among them: SQLAlchemy closes the connection, but
    SQLite keeps it, and its lock on the database, until the cursor is freed.  The clean-up
    after Ctrl-C (ending MLflow's runs KILLED) would wait on that lock, 20 s a write, and fail.
    Frames still running (the caller's) are left as they are.
    """
    for link in error_chain(error):
        traceback.clear_frames(link.__traceback__)


def _handle(signum: int, frame) -> None:
    if _state["signum"] is not None:  # the clean-up hangs or the user insists: end now
        run_abort_hooks()
        print(RESUME_LINE, file=sys.stderr, flush=True)
        os._exit(128 + signum)
    _state["signum"] = signum
    if _state["deferring"]:
        _state["pending"] = True
        return
    raise Interrupted(signum)


def _raise_pending() -> None:
    if _state["pending"]:
        _state["pending"] = False
        signum = _state["signum"]
        if signum is None:
            raise RuntimeError("an interrupt is pending, but no signal was received")
        raise Interrupted(signum)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM back while the block runs; the first one raises as it ends.

    Around each write to a database this process opens itself (MLflow's SQLite): a signal
    raised mid-statement leaves the write half-done and, through what the unwound statement
    still holds (SQLAlchemy's suspended result generators), SQLite's lock taken, so the
    clean-up's own writes wait 20 s each and fail.  The block must be short: a second signal
    still ends the process at once.  Without `install`'s handlers, it defers nothing.
    """
    _state["deferring"] += 1
    try:
        yield
    finally:
        _state["deferring"] -= 1
        if not _state["deferring"]:
            _raise_pending()


def check() -> None:
    """Raise the signal that arrived where Python could not raise it (`_unraisable`), if any:
    at the points of a long loop where stopping is safe."""
    if not _state["deferring"]:
        _raise_pending()


def received_code() -> Optional[int]:
    """128 + the signal received and never raised (`check` was not reached after it), or None."""
    signum = _state["signum"]
    return 128 + signum if _state["pending"] and signum is not None else None


def _unraisable(unraisable) -> None:
    """`sys.unraisablehook`: an `Interrupted` raised where Python cannot raise (a `__del__`, an
    `atexit` callback) is held for `check`, without the "Exception ignored" traceback."""
    if isinstance(unraisable.exc_value, Interrupted):
        _state["pending"] = True
        return
    sys.__unraisablehook__(unraisable)


def handles(signum: int) -> bool:
    """Whether `install`'s handler is the one set for `signum` now."""
    return signal.getsignal(signum) is _handle


def install() -> None:
    """Make SIGINT and SIGTERM raise `Interrupted` in this (main) thread."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _handle)
    sys.unraisablehook = _unraisable
    _state["installed"] = True


@contextlib.contextmanager
def kept_from_ray() -> Iterator[None]:
    """Around `ray.init`: when `install` has set these handlers, Ray's own SIGTERM handlers
    (its driver's `sys.exit(15)`, its local head node's) are not set, so a SIGTERM during the
    start-up ends as any other; on leaving, the handlers are set again at the C level, where
    Ray's core worker put its failure handler."""
    if not _state["installed"]:
        yield
        return
    from ray._private import utils as ray_utils  # the one function Ray sets SIGTERM through

    original = ray_utils.set_sigterm_handler
    ray_utils.set_sigterm_handler = lambda handler: None
    try:
        yield
    finally:
        ray_utils.set_sigterm_handler = original
        install()
