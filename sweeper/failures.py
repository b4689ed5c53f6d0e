"""Sort a failed task's error: deterministic (a bug, bad data) or transient (a lost worker).

Ray already retried what can be retried by the time the driver sees an error: worker and node
deaths up to `max_retries` times, and the exceptions listed in `TRANSIENT_EXCEPTIONS` (memory,
store I/O) but a full disk or a symbolic link in the store (`Retryable`): a retry of a task that
found no space, or a link where it writes, would redo its work to fail at the same write, and
the sweep stops on either (`sweeper.runner`, `stopping_error`).  Any other
exception of the task's own (ValueError from bad data, a bug's TypeError) would fail the same
way again, so it is never retried: its traceback goes into the cell's failure record at once,
scrubbed of credentials (`sweeper.credentials.scrub`), since it is kept in the store and printed.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any, Optional

import torch

from sweeper.axes import BY_NAME
from sweeper.credentials import scrub
from sweeper.formats import format_epsilon
from sweeper.store.files import DiskFull, LinkInStore, disk_full, link_met
from sweeper.store.artifacts import CorruptArtifact

#: Exceptions raised inside a task that a retry can cure: memory that another task held, store
#: I/O (a throttled or reset connection to S3), an input read while a duplicate rewrote it.
TRANSIENT_EXCEPTIONS: tuple[type[BaseException], ...] = (
    MemoryError, torch.OutOfMemoryError, OSError, CorruptArtifact)


def retried(error: BaseException) -> bool:
    """Whether a retry can cure `error`: one of the `TRANSIENT_EXCEPTIONS`, but neither a full
    disk (`disk_full`) nor a symbolic link where the store writes (`link_met`)."""
    return (isinstance(error, TRANSIENT_EXCEPTIONS) and disk_full(error) is None
            and link_met(error) is None)


class _RetryableCheck(type):
    def __instancecheck__(cls, error: object) -> bool:
        return isinstance(error, BaseException) and retried(error)


class Retryable(Exception, metaclass=_RetryableCheck):
    """What Ray retries (a task's `retry_exceptions`, which Ray matches with `isinstance`):
    the errors `retried` says a retry can cure."""


def stopping_error(error: BaseException) -> Optional[DiskFull | LinkInStore]:
    """What stops the sweep when it is why the task behind `error` (as `ray.get` raised it)
    failed: a full disk (`DiskFull`, its path) or a symbolic link where the store writes
    (`LinkInStore`); else None.  Ray's copy of a task's error carries the task's own in
    `cause`."""
    from ray.exceptions import RayTaskError

    cause = getattr(error, "cause", None) if isinstance(error, RayTaskError) else None
    own = cause if isinstance(cause, BaseException) else error
    link = link_met(own)
    if link is not None:
        return LinkInStore(link.filename)
    where = disk_full(own)
    return None if where is None else DiskFull(where)


ANSI_CODES = re.compile(r"\x1b\[[0-9;]*m")
TASK_NAME = re.compile(r"ray::(.+?)\(\)")


@dataclass(frozen=True)
class Failure:
    kind: str  # "deterministic" or "transient"
    task: str  # the task that failed, as the Ray dashboard names it
    reason: str  # one line: the exception and its message
    traceback: str

    def record(self, cell_label: str, cell_key: str, coordinates: dict[str, Any]) -> dict[str, Any]:
        """What the store keeps for a failed cell until a rerun computes it."""
        return {"cell": cell_label, "cell_key": cell_key, "coordinates": coordinates, **asdict(self)}


def cell_label(cell: Any) -> str:
    """How a cell is named to a person: in its failure record, the summary's FAILED lines and
    the Ray dashboard's task names; with the value of each training setting the grid sweeps."""
    recipe = dict(cell.recipe)
    swept = "".join(f" {BY_NAME[name].format(recipe[name])}" for name in cell.swept)
    return (f"{cell.attack} ε={format_epsilon(cell.epsilon)} δ={cell.delta:g} p={cell.p:g}{swept} "
            f"trial={cell.trial}")


def classify(error: BaseException, retries: int, task: str = "") -> Failure:
    """The failure behind `error`, as `ray.get` raised it for the task named `task`, which was
    allowed `retries` retries."""
    from ray.exceptions import RayError, RayTaskError

    text = scrub(ANSI_CODES.sub("", str(error)))  # it is kept in the store and printed
    if isinstance(error, RayTaskError):
        # Ray raises a copy that is both a RayTaskError and the task's own exception; its text is
        # "ray::<task name>() (pid=…, ip=…)" and the traceback, nested for each task that waited
        # on the one that failed: the last name is the culprit's.
        cause = error.cause if isinstance(error.cause, BaseException) else error
        names = TASK_NAME.findall(text)
        # A task whose input was lost to a dead worker or node carries that system error.
        lost = isinstance(cause, RayError) and not isinstance(cause, RayTaskError)
        transient = isinstance(cause, TRANSIENT_EXCEPTIONS) or lost
        reason = _one_line(cause)
        if retried(cause) or lost:  # a full disk, a link in the store: never retried (`Retryable`)
            reason += f" (still failing after {retries} retries)"
        return Failure("transient" if transient else "deterministic",
                       names[-1] if names else task, reason, text)
    # Worker or node lost, object lost, out of memory as the raylet saw it: Ray retried it.
    return Failure("transient", task,
                   f"{_one_line(error)} (still failing after {retries} retries)", text)


def storing_failure(error: BaseException) -> Failure:
    """A row the driver could not store: the store's I/O (transient: a rerun retries it) or a
    row its schema refuses (deterministic: a bug in the row's code)."""
    import traceback

    kind = "transient" if isinstance(error, OSError) else "deterministic"
    return Failure(kind, "storing the row", f"storing the row: {_one_line(error)}",
                   "".join(traceback.format_exception(error)))


def _one_line(error: BaseException) -> str:
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    return scrub(f"{type(error).__name__}: {lines[0].strip() if lines else ''}".rstrip(": "))
