"""SIGINT and SIGTERM where the command cannot take them at once: a deferred block, a `__del__`,
an `atexit` callback.  Each test sends a real signal to this process (or a child) with the
command's handlers set (`sweeper.interrupts.install`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from sweeper.interrupts import RESUME_LINE, Interrupted


def busy() -> None:
    """Some bytecode, where Python runs a signal handler that has arrived."""
    for _ in range(1000):
        pass


def test_a_signal_in_a_deferred_block_lets_it_finish_and_raises_as_it_ends(command_signal_handlers):
    interrupts = command_signal_handlers
    finished = []
    with pytest.raises(Interrupted) as stopped:
        with interrupts.deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            busy()
            with interrupts.deferred():  # nested: held until the outer block ends
                busy()
            finished.append("the block")
    assert finished == ["the block"] and stopped.value.code == 143
    with interrupts.deferred():  # raised once: the clean-up's own blocks are not stopped again
        finished.append("the clean-up")
    assert finished == ["the block", "the clean-up"]


def test_a_signal_a_del_swallowed_is_raised_at_the_next_check_without_a_traceback(
        command_signal_handlers, capfd):
    interrupts = command_signal_handlers

    class Finalized:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGINT)
            busy()  # the handler raises here, where Python can only report it

    Finalized()
    busy()
    assert interrupts.received_code() == 130
    with pytest.raises(Interrupted) as stopped:
        interrupts.check()
    assert stopped.value.code == 130 and interrupts.received_code() is None
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Exception ignored" not in err, err


def test_a_signal_during_the_exit_handlers_ends_the_command_with_the_resume_line(tmp_path):
    script = tmp_path / "exiting.py"
    script.write_text(textwrap.dedent("""
        import atexit, os, signal
        from sweeper import interrupts
        from sweeper.__main__ import exit_now

        def shut_down():  # as Ray's shutdown at exit, when SIGTERM lands in it
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):
                pass
            print("exit handler done", flush=True)

        interrupts.install()
        atexit.register(shut_down)
        print("sweep done", flush=True)
        exit_now()
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.stdout.splitlines()[0] == "sweep done"
    assert done.returncode == 143, (done.returncode, done.stderr)
    assert done.stderr.rstrip().splitlines()[-1] == RESUME_LINE and "Traceback" not in done.stderr


def _self_caused() -> RuntimeError:
    """An error raised `from` itself, as Ray raises its dashboard-port error."""
    try:
        raise RuntimeError("Failed to bind the dashboard port")
    except RuntimeError as error:
        error.__cause__ = error
        return error


def _ends_within(call, seconds: float = 10.0) -> None:
    import threading

    done = threading.Event()

    def target():
        call()
        done.set()

    threading.Thread(target=target, daemon=True).start()
    assert done.wait(seconds), f"{call} still walking a chain after {seconds} s"


def test_every_walk_of_an_error_chain_ends_on_a_chain_that_points_at_itself():
    """Issue 30.1: a self-caused error spun `disk_full` at 100 % CPU for ever; each walk of a
    chain (the disk-full test, the guards that find an interrupt and free unwound frames) ends,
    and still finds what stands further down a looping chain."""
    import errno as errnos

    from sweeper.errors import error_chain
    from sweeper.store.files import disk_full
    from sweeper.interrupts import Interrupted, raise_swallowed, release_unwound

    looping = _self_caused()
    _ends_within(lambda: list(error_chain(looping)))
    _ends_within(lambda: disk_full(looping))
    _ends_within(lambda: raise_swallowed(looping))
    _ends_within(lambda: release_unwound(looping))
    assert disk_full(looping) is None

    full = OSError(errnos.ENOSPC, "No space left on device", "/store/x")
    looping.__context__ = full
    full.__context__ = looping  # a loop through two errors
    assert disk_full(looping) == "/store/x"
    stop = Interrupted(15)
    full.__cause__ = stop
    with pytest.raises(Interrupted):
        raise_swallowed(looping)


def test_a_full_disk_that_names_no_file_is_said_with_what_it_said():
    """Issue 30.10: "error: disk full at ?".  SQLite's error names no file, and a library's bare
    ENOSPC none either: what the error said stands in for the path."""
    import errno as errnos
    import sqlite3

    from sweeper.store.files import DiskFull, disk_full

    bare = OSError(errnos.ENOSPC, "No space left on device")
    assert disk_full(bare) == "an unnamed file ([Errno 28] No space left on device)"
    try:
        try:
            raise sqlite3.OperationalError("database or disk is full")
        except sqlite3.OperationalError as error:
            raise RuntimeError("(sqlite3.OperationalError) database or disk is full") from error
    except RuntimeError as wrapped:
        assert disk_full(wrapped) == ("an unnamed file ((sqlite3.OperationalError) database or "
                                      "disk is full)")
    assert disk_full(DiskFull("/store/x")) == "/store/x"
    assert disk_full(ValueError("no")) is None


def test_a_full_disk_inside_an_exception_group_is_seen_as_one():
    """Issue 44.9: an ExceptionGroup (a TaskGroup's, a pool's gathered errors) holding ENOSPC was
    not seen as a full disk: the sweep printed a traceback instead of "disk full at …"."""
    import errno as errnos

    from sweeper.store.files import DiskFull, disk_full

    full = OSError(errnos.ENOSPC, "No space left on device", "/store/models/k/model.pt")
    group = ExceptionGroup("writes failed", [ValueError("another write"), full])
    assert disk_full(group) == "/store/models/k/model.pt"
    nested = BaseExceptionGroup("outer", [ExceptionGroup("inner", [DiskFull("/store/x")])])
    try:
        raise RuntimeError("the task failed") from nested
    except RuntimeError as wrapped:
        assert disk_full(wrapped) == "/store/x"
    assert disk_full(ExceptionGroup("not the disk", [ValueError("no"), KeyError("k")])) is None


def test_a_full_disk_met_in_a_ray_task_reaches_the_driver_with_its_path():
    """A DiskFull pickled across Ray came back as "UnserializableException" (its __init__ takes
    one argument, not OSError's three)."""
    import pickle

    from sweeper.store.files import DiskFull

    back = pickle.loads(pickle.dumps(DiskFull("/store/models/m/model.pt")))
    assert isinstance(back, DiskFull) and str(back) == "disk full at /store/models/m/model.pt"
