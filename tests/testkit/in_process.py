"""A command run in this process as a shell runs it: `python -m MODULE args` from a folder, with
an environment, giving its exit code and what it printed (`run_command`).

Why in process: a refusal is decided before any work, so what a subprocess adds is an
interpreter's start and its imports (seconds each, minutes at load), not anything the refusal
does.  The process boundary itself (the exit status a shell sees, a traceback that escapes,
the real interpreter's exit) keeps a handful of real subprocess runs (tests/README.md).  What
the command changes in this process is put back: the working folder, the environment,
`sys.argv`, signal handlers (`sweeper.interrupts.install`), logging, Hydra's global state.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import logging
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional
from unittest import mock


@dataclass(frozen=True)
class Ran:
    """What `subprocess.run(..., capture_output=True, text=True)` would have returned."""

    returncode: int
    stdout: str
    stderr: str


def _end_here(code: int = 0) -> None:
    """`sweeper.__main__.exit_now` ends the interpreter (`os._exit`): here, the command ends."""
    raise SystemExit(code)


@contextlib.contextmanager
def _process_state_kept():
    """Whatever a command sets for its process, as it was before, after it."""
    from sweeper import interrupts

    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    hook, state, argv = sys.unraisablehook, dict(interrupts._state), list(sys.argv)
    root = logging.getLogger()
    loggers = {name: (lg.disabled, lg.level, list(lg.handlers), lg.propagate)
               for name, lg in logging.Logger.manager.loggerDict.items()
               if isinstance(lg, logging.Logger)}
    root_kept = (root.level, list(root.handlers))
    try:
        yield
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        sys.unraisablehook, sys.argv = hook, argv
        interrupts._state.clear()
        interrupts._state.update(state)
        root.setLevel(root_kept[0])
        root.handlers[:] = root_kept[1]
        for name, (disabled, level, handlers_, propagate) in loggers.items():
            lg = logging.getLogger(name)
            lg.disabled, lg.propagate = disabled, propagate
            lg.setLevel(level)
            lg.handlers[:] = handlers_
        from hydra.core.global_hydra import GlobalHydra

        GlobalHydra.instance().clear()


def run_command(module: str, *args: str, cwd: Path, env: Optional[dict[str, str]] = None,
                unset: tuple[str, ...] = ()) -> tuple[Ran, float]:
    """`python -m module args` in `cwd` with `env` added and `unset` removed: (what it returned,
    the seconds it took).  `sweeper` runs its command line (`sweeper.__main__.cli`), any other
    module its `main(argv)`."""
    import sweeper.__main__ as command

    out, err = io.StringIO(), io.StringIO()
    found = importlib.import_module(module)
    if not hasattr(found, "main"):  # a package: `python -m` runs its __main__
        found = importlib.import_module(f"{module}.__main__")
    entry = command.cli if module == "sweeper" else found.main
    changed = {**{name: "" for name in unset if name in os.environ}, **(env or {})}
    started = time.monotonic()
    with _process_state_kept(), contextlib.chdir(cwd), \
            mock.patch.dict(os.environ, changed), mock.patch.object(command, "exit_now", _end_here), \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        for name in unset:
            os.environ.pop(name, None)
        sys.argv = [f"{module.replace('.', '/')}/__main__.py"]
        try:
            code = entry(list(args))
        except SystemExit as exit_:
            code = exit_.code
    if code is None:
        code = 0
    elif not isinstance(code, int):  # sys.exit("message"): Python prints it and exits 1
        err.write(f"{code}\n")
        code = 1
    return Ran(code, out.getvalue(), err.getvalue()), time.monotonic() - started
