"""Report name → the function that draws it: what an experiment's `report` may name.

Each report is a function (results table, output folder[, …]) → paths written; `draw` runs the
one an experiment names, beside the frontier that every sweep draws anyway.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pandas as pd

from sweeper.reports.frontier import frontier_report
from sweeper.reports.jayaraman import ppv_report
from sweeper.reports.long import pdtp_report
from sweeper.reports.thudi import fixed_bound_report, thudi_lira_report
from sweeper.reports.yeom import generalization_report

#: Reports that read the per-record scores tables too (pass them `store_root=`).
READS_SCORES = ("pdtp", "generalization")

REPORTS: dict[str, Callable[..., list[Path]]] = {
    "frontier": frontier_report,
    "thudi_lira": thudi_lira_report,
    "fixed_bound": fixed_bound_report,
    "ppv": ppv_report,
    "pdtp": pdtp_report,
    "generalization": generalization_report,
}


def draw(name: str, frame: pd.DataFrame, out_dir: Path, store_root: Path,
         echo: Callable[[str], Any] = print) -> list[Path]:
    """The experiment's own figures beside the frontier, or none with a note saying why.

    A report that cannot be drawn (a grid too small for its figure) must not cost the results.
    """
    if name == "frontier":
        return []
    try:
        context = {"store_root": store_root} if name in READS_SCORES else {}
        return REPORTS[name](frame, out_dir, **context)
    except ValueError as error:
        echo(f"report '{name}' not drawn: {error}")
        return []
