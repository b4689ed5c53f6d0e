"""Report name → the function that draws it: what an experiment's `report` may name.

Each report is a function (results table, output folder[, …]) → paths written, registered where
it is defined with `register_report` (the `jobs.registry.Registry` shape that attacks, policies
and queries use), saying whether it reads the per-record scores tables too.  Importing
`sweeper.reports` imports every report module and so fills `REPORTS`; `draw` runs the one an
experiment names, beside the frontier that every sweep draws anyway.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from jobs.registry import Registry
from sweeper.axes import swept


@dataclass(frozen=True)
class Report:
    """A registered report: its drawing function, whether it reads the scores tables, and
    whether it keeps a swept training setting's values apart itself."""

    draw: Callable[..., list[Path]]
    # Reads the per-record scores from the store (pass it `store_root=`), not only the cells.
    reads_scores: bool
    # Pools only trials on a table of several swept values (the frontier: a column and a panel
    # per value).  Any other report, handed such a table, refuses it rather than read the
    # values as trials: `draw` hands it one value at a time.
    keeps_swept_apart: bool = False

    def __call__(self, frame: pd.DataFrame, out_dir: Path, **context: Any) -> list[Path]:
        varied = [] if self.keeps_swept_apart else swept(frame)
        if varied:
            values = ", ".join(axis.format(value) for axis in varied
                               for value in sorted(frame[axis.name].dropna().unique()))
            raise ValueError(f"the table holds several values of a swept training setting "
                             f"({values}), which this report would pool as trials: draw it "
                             "through sweeper.reports.registry.draw, once per value")
        return self.draw(frame, out_dir, **context)


#: Every report, by the `report` name an experiment gives, in registration order.
REPORTS: Registry[Report] = Registry("report")


def register_report(name: str, *, reads_scores: bool = False,
                    keeps_swept_apart: bool = False) -> Callable:
    """Decorator: register the drawing function as report `name`."""
    def register(function: Callable[..., list[Path]]) -> Callable[..., list[Path]]:
        REPORTS.add(name, Report(function, reads_scores, keeps_swept_apart))
        return function
    return register


def draw(name: str, frame: pd.DataFrame, out_dir: Path, store_root: Path,
         echo: Callable[[str], Any] = print) -> list[Path]:
    """The experiment's own figures beside the frontier, or none with a note saying why.

    A report that cannot be drawn (a grid too small for its figure) must not cost the results.
    A sweep that varies a training setting (`sweeper.axes.swept`) gets the report once per
    combination of its values, each in its own folder (`C=0.5`): a report pools only trials.
    """
    report = REPORTS[name]
    if report.keeps_swept_apart:  # the frontier: every sweep draws it on the whole table
        return []
    context = {"store_root": store_root} if report.reads_scores else {}
    varied = swept(frame)  # training settings the sweep varies: one report per combination
    parts = ([(out_dir, frame)] if not varied else
             [(out_dir / " ".join(axis.format(value) for axis, value in zip(varied, key)), rows)
              for key, rows in frame.groupby([axis.name for axis in varied], sort=True,
                                             dropna=False)])
    written = []
    for where, rows in parts:
        try:
            written += report(rows, where, **context)
        except ValueError as error:
            echo(f"report '{name}' not drawn{'' if where == out_dir else f' for {where.name}'}: {error}")
    return written
