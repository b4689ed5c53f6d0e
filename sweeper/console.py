"""What a person sees of the sweeper's log: the one place that decides it.

The modules log as Ray and Opacus do, through `logging.getLogger(__name__)`, and never choose a
stream.  A command shows it (`shown`) while it works: status lines (INFO) then read as plain
lines on stdout, beside the command's own output, and problems (WARNING and above) on stderr,
prefixed with their level ("warning: …", "error: …").  Used as a library, the sweeper shows
nothing of its own accord (Python's default: warnings only, on stderr); `forwarded` hands the
lines to a callable as well, for callers that keep them (the load benchmark, tests).

Results a command prints (tables, the sweep's summary) are output, not log: the commands print
those themselves.

Progress (`Progress`) is a tqdm bar on a terminal only (tqdm's `disable=None`: off when its
stream is not a TTY); in a log (`make demo > log`, a Ray job's driver log) the bar's redraws would
be escape codes, so the same counts become status lines, one each `LOG_EVERY` of the way.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from typing import Callable, Iterator, Optional

#: The logger every sweeper module's logger sits under.
ROOT = "sweeper"
#: Off a terminal, a stage's progress is logged each time it crosses another tenth of its total.
LOG_EVERY = 0.1

logger = logging.getLogger(__name__)


class ConsoleFormatter(logging.Formatter):
    """A status line as it is; a problem prefixed with its level, lower case."""

    def format(self, record: logging.LogRecord) -> str:
        message = super().format(record)
        return message if record.levelno < logging.WARNING else f"{record.levelname.lower()}: {message}"


class ConsoleHandler(logging.Handler):
    """Status lines to stdout, problems to stderr; the streams looked up at each line, so a line
    lands where `print` would put it now (pytest's capture, a redirected stdout)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            stream = sys.stdout if record.levelno < logging.WARNING else sys.stderr
            stream.write(self.format(record) + "\n")
            stream.flush()
        except Exception:  # noqa: BLE001 - logging's own contract: report, never raise
            self.handleError(record)


class _Forwarder(logging.Handler):
    def __init__(self, echo: Callable[[str], None]) -> None:
        super().__init__(logging.INFO)
        self.echo = echo

    def emit(self, record: logging.LogRecord) -> None:
        self.echo(self.format(record))


@contextlib.contextmanager
def shown() -> Iterator[None]:
    """While open, the sweeper's log is shown on the terminal, as a command shows it: a command
    wraps its work in it, once.  The sweeper's records do not propagate to the root logger
    meanwhile, so a logging configuration made for other libraries (Hydra's job logging, on
    stdout) does not print them a second time; on leaving, the logger is as it was (a command
    called in-process, by a test, leaves no trace)."""
    logger = logging.getLogger(ROOT)
    handler = ConsoleHandler()
    handler.setFormatter(ConsoleFormatter())
    level, propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


@contextlib.contextmanager
def forwarded(echo: Optional[Callable[[str], None]]) -> Iterator[None]:
    """While open, every line the sweeper logs at INFO or above is also handed to `echo` (as
    the console writes it); nothing when `echo` is None."""
    if echo is None:
        yield
        return
    logger = logging.getLogger(ROOT)
    handler = _Forwarder(echo)
    handler.setFormatter(ConsoleFormatter())
    level = logger.level
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


class _OneLine(logging.Filter):
    """A library's record as its message's first line, passed through `clean`; no traceback."""

    def __init__(self, clean: Callable[[str], str]) -> None:
        super().__init__()
        self.clean = clean

    def filter(self, record: logging.LogRecord) -> bool:
        lines = record.getMessage().strip().splitlines()
        record.msg, record.args = self.clean(lines[0] if lines else ""), None
        record.exc_info = record.exc_text = record.stack_info = None
        return True


def one_line_records(library: logging.Logger, clean: Callable[[str], str]) -> None:
    """Each record the handlers of `library`'s logger write (a library that prints its own
    console lines, as MLflow does) becomes its first line, passed through `clean` (secrets
    masked), without the traceback its `logger.exception` would print.  Idempotent."""
    for handler in library.handlers:
        if not any(isinstance(each, _OneLine) for each in handler.filters):
            handler.addFilter(_OneLine(clean))


class Progress(contextlib.AbstractContextManager):
    """A stage's progress, `update(n)` as its items finish: a tqdm bar on a terminal; off one, a
    status line ("models trained: 21/84 (25 %)") each `LOG_EVERY` of the total and at its end;
    nothing at all when not `enabled` (a library call, a test)."""

    def __init__(self, total: int, desc: str, unit: str, enabled: bool = True) -> None:
        from tqdm.auto import tqdm

        self.total, self.desc, self.done, self._logged_step = total, desc, 0, 0
        self.bar = tqdm(total=total, desc=desc, unit=unit, disable=None if enabled else True)
        self.lines = bool(enabled and self.bar.disable and total > 0)

    def update(self, n: int = 1) -> None:
        self.bar.update(n)
        self.done += n
        step = int(self.done / self.total / LOG_EVERY + 1e-9) if self.lines else 0
        if step > self._logged_step:
            self._logged_step = step
            logger.info("%s: %d/%d (%d %%)", self.desc, self.done, self.total,
                        100 * self.done // self.total)

    def __exit__(self, *exc) -> None:
        self.bar.close()
