"""Walking an exception's chain: the errors an error came from, each once.

Every walk of `__cause__`/`__context__` in the sweep goes through `error_chain`: a library may
raise an error `from` itself (Ray's dashboard-port error does), and a walk without a memory of
what it saw would spin for ever on it (`disk_full`, the interrupt guards).
"""

from __future__ import annotations

from typing import Iterator


def error_chain(error: BaseException) -> Iterator[BaseException]:
    """`error` and the errors it came from (its causes and contexts), each once: a chain that
    points back at itself (Ray raises an error `from` itself) ends rather than loops."""
    pending, seen = [error], set()
    while pending:
        link = pending.pop()
        if link is None or id(link) in seen:
            continue
        seen.add(id(link))
        yield link
        pending += [link.__context__, link.__cause__]  # the cause first, as Python prints it
