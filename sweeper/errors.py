"""Walking an exception's chain: the errors an error came from, each once.

Every walk of `__cause__`/`__context__` in the sweep goes through `error_chain`: a library may
raise an error `from` itself (Ray's dashboard-port error does), and a walk without a memory of
what it saw would spin for ever on it (`disk_full`, the interrupt guards).  An exception group
(`asyncio.TaskGroup`, a thread pool's gathered errors) is walked into as well: a full disk or a
Ctrl-C one of its members holds is what stopped the work.

The project's own exceptions, and what each command makes of them::

    KeyboardInterrupt
     └── sweeper.interrupts.Interrupted        SIGINT/SIGTERM as one line, exit 130 / 143
    ValueError                                 refused input: exit 2, one line, no traceback
     ├── sweeper.config.problems.ConfigError   every problem of a configuration at once
     │    └── sweeper.claim.SweepRefused       a sweep's name held, or its cells at stake
     ├── sweeper.tracking.sync.SyncRefused              a `sweeper sync` command line
     ├── sweeper.store.columns.SchemaError           a row or table that does not fit its columns
     ├── sweeper.store.artifacts.ManifestError           an unreadable `sweep.json`
     └── sweeper.store.files.CorruptArtifact         a file failing its checksum: quarantined, redone
    OSError
     ├── sweeper.store.files.DiskFull                a write the disk refused: the sweep stops, resumable
     └── sweeper.store.files.LinkInStore             a symbolic link where a store writes: refused,
                                                     never retried; mid-sweep the sweep stops
    ConnectionError
     └── sweeper.tracking.sync.Unreachable              an MLflow server that did not answer (exit 1)
    RuntimeError
     ├── jobs.datasets.DatasetUnavailable      a dataset's files missing: named with URL and MD5
     └── sweeper.cluster.start.RayStartFailed      local Ray did not start, twice: one line, exit 1
    Exception
     └── sweeper.listeners.NotLanded           a cell a listener could not land (its failure record)
"""

from __future__ import annotations

from typing import Iterator


def error_chain(error: BaseException) -> Iterator[BaseException]:
    """`error` and the errors it came from (its causes and contexts, and the members of an
    exception group), each once: a chain that points back at itself (Ray raises an error `from`
    itself) ends rather than loops."""
    pending: list[BaseException | None] = [error]
    seen: set[int] = set()
    while pending:
        link = pending.pop()
        if link is None or id(link) in seen:
            continue
        seen.add(id(link))
        yield link
        pending += [link.__context__, link.__cause__]  # the cause first, as Python prints it
        if isinstance(link, BaseExceptionGroup):
            pending += reversed(link.exceptions)  # the first member first
