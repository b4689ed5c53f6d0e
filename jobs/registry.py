"""One shape for every family of named implementations: attacks, threshold policies, queries,
reports, datasets.

Why a registry rather than a dict literal.  A dict written out in one place has to be kept in
step by hand with the code it names, far from it; an implementation that registers itself where
it is defined (as Opacus's `register_grad_sampler` does for per-layer gradient samplers) cannot
be forgotten, and a second registration under one name fails at import instead of silently
replacing the first.

A `Registry` is a read-only mapping from name to entry, so it reads as the dict it replaces:
``name in REGISTRY``, ``REGISTRY[name]``, ``list(REGISTRY)``, ``REGISTRY.items()``.  What an
entry is belongs to its family (an `jobs.attacks.contract.Attack`, a `jobs.policies.Policy`, a
`jobs.attacks.queries.QueryKind`, a `sweeper.reports.report_registry.Report`, a `jobs.datasets.DatasetSpec`); the
registry only names them.  Each family gives a `register_*` decorator that builds its entry around
the decorated function and calls `add` (`register_attack`, `register_policy`, `register_query`,
`register_report`, `register_dataset`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Generic, TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")


class Registry(Mapping[str, T], Generic[T]):
    """Named entries of one family, in registration order; each name registered once."""

    def __init__(self, family: str):
        self.family = family  # what an entry is, for error messages ("attack", "policy", …)
        self._entries: dict[str, T] = {}

    def add(self, name: str, entry: T) -> T:
        """Register `entry` under `name` and return it; a name already taken is an error."""
        if name in self._entries:
            raise ValueError(f"{self.family} {name!r} is registered twice")
        self._entries[name] = entry
        logger.debug("registered %s %r", self.family, name)
        return entry

    def __getitem__(self, name: str) -> T:
        try:
            return self._entries[name]
        except KeyError:
            raise KeyError(f"unknown {self.family} {name!r}; known: {list(self._entries)}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.family!r}: {list(self._entries)})"
