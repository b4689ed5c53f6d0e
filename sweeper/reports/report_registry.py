"""Report name → the function that draws it: what an experiment's `report` may name.

Each report is a function (results table, output folder[, …]) → paths written, registered where
it is defined with `register_report` (the `jobs.registry.Registry` shape that attacks, policies
and queries use), saying whether it reads the per-record scores tables too.  Importing
`sweeper.reports` imports every report module and so fills `REPORTS`; `draw` runs the one an
experiment names, beside the frontier that every sweep draws anyway.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import pandas as pd

from jobs.registry import Registry
from sweeper.axes import swept


@dataclass(frozen=True)
class Report:
    """A registered report: its drawing function, whether it reads the scores tables, and
    whether every sweep draws it on its whole table."""

    draw: Callable[..., list[Path]]
    # Reads the per-record scores from the store (pass it `store_root=`), not only the cells.
    reads_scores: bool
    # Drawn by every sweep on its whole table (the frontier), so it keeps a swept training
    # setting's values apart itself (a column and a panel per value) and `draw` leaves it out.
    # Any other report, handed several swept values, refuses them rather than read them as
    # trials: `draw` hands it one value at a time.
    whole_table: bool = False
    # What a finished sweep prints of it under the frontier, from the paths it wrote (None:
    # nothing, or not among them): the figure a user reads off the terminal.
    summary: Optional[Callable[[list[Path]], Optional[str]]] = None

    def __call__(self, frame: pd.DataFrame, out_dir: Path, **context: Any) -> list[Path]:
        varied = [] if self.whole_table else swept(frame)
        if varied:
            values = ", ".join(axis.format(value) for axis in varied
                               for value in sorted(frame[axis.name].dropna().unique()))
            raise ValueError(f"the table holds several values of a swept training setting "
                             f"({values}), which this report would pool as trials: draw it "
                             "through sweeper.reports.report_registry.draw, once per value")
        return self.draw(frame, out_dir, **context)


#: Every report, by the `report` name an experiment gives, in registration order.
REPORTS: Registry[Report] = Registry("report")


def register_report(name: str, *, reads_scores: bool = False, whole_table: bool = False,
                    summary: Optional[Callable[[list[Path]], Optional[str]]] = None) -> Callable:
    """Decorator: register the drawing function as report `name` (with `summary`, what a sweep
    prints of it); the name it is defined under calls the registered report, so a direct call
    is guarded as `REPORTS[name]` is."""
    def register(function: Callable[..., list[Path]]) -> Callable[..., list[Path]]:
        report = Report(function, reads_scores, whole_table, summary)
        REPORTS.add(name, report)

        @functools.wraps(function)
        def guarded(frame: pd.DataFrame, out_dir: Path, **context: Any) -> list[Path]:
            return report(frame, out_dir, **context)
        return guarded
    return register


def summaries(paths: list[Path]) -> list[str]:
    """What the reports that wrote `paths` print under the frontier (`Report.summary`)."""
    said = (report.summary(paths) for report in REPORTS.values() if report.summary is not None)
    return [text for text in said if text]


def draw(name: str, frame: pd.DataFrame, out_dir: Path, store_root: str | Path,
         echo: Callable[[str], Any] = print) -> list[Path]:
    """The experiment's own figures beside the frontier, or none with a note saying why.

    A report that cannot be drawn (a grid too small for its figure) must not cost the results.
    A sweep that varies a training setting (`sweeper.axes.swept`) gets the report once per
    combination of its values, each in its own folder (`C=0.5`): a report pools only trials.
    """
    report = REPORTS[name]
    if report.whole_table:  # the frontier: every sweep draws it anyway
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
