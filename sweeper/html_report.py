"""A sweep's self-contained HTML report, `report.html` beside its frontier.

Every sweep writes it at its end (`sweeper.listeners.publish_figures`, which also logs it to the
sweep's MLflow run as an artifact); `sweeper report` (`sweeper.cli.report_command`) writes it
again, or elsewhere (`--out`), from what the store holds.  The page itself is
`sweeper.reports.sweep_page` (pure: frames in, HTML out); here the store is read (`page_inputs`)
and the file written (`write_report`).
"""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Optional

import pandas as pd

from sweeper.reports.sweep_page import PageFigure, PageInputs, sweep_page
from sweeper.store.artifacts import ArtifactStore

#: The report's file name, in the sweep's figures folder beside frontier.png.
REPORT_FILE = "report.html"


def page_inputs(store: ArtifactStore, name: str) -> PageInputs:
    """What the report shows, read from the store: the results with their coverage, the
    configuration, the provenance record, the experiment's drawn report (its PNGs and CSVs, and
    the audit report's pooled audits) and the devices the target models trained on."""
    from sweeper.reports import frontier_title
    from sweeper.store.results import load_results, sort_frontier

    manifest = store.read_manifest(name)
    results = load_results(store, name)
    cells = sort_frontier(results.frame)
    config = manifest.get("config", {})
    drawn = store.figures_dir(name) / "report"
    figures = [PageFigure(f"{path.relative_to(drawn).as_posix()} (the experiment's report, "
                          f"{config.get('report', '')})", path.read_bytes())
               for path in sorted(drawn.rglob("*.png"))] if drawn.is_dir() else []
    tables = sorted(drawn.rglob("*.csv")) if drawn.is_dir() else []
    audits = [pd.read_csv(path) for path in tables if path.name == "audit_epsilon.csv"]
    shadows = config.get("shadow", {}).get("count") if isinstance(config, dict) else None
    return PageInputs(
        name=name, cells=cells, config=config,
        coverage=[*results.coverage.notes, results.coverage.summary()],
        complete=results.coverage.complete,
        audits=pd.concat(audits, ignore_index=True) if audits else None,
        figures=figures,
        data={"report_" + path.relative_to(drawn).as_posix().replace("/", "_"): path.read_bytes()
              for path in tables},
        provenance=store.read_provenance(name) or {}, devices=target_devices(store, cells),
        title_note=frontier_title(cells, name, shadows) if not cells.empty else "")


def target_devices(store: ArtifactStore, cells: pd.DataFrame) -> dict[str, int]:
    """How many of the cells' target models trained on each device (their `meta.json`)."""
    counts: collections.Counter[str] = collections.Counter()
    keys = cells["model_key"].dropna().unique() if "model_key" in cells else []
    for key in keys:
        try:
            counts[str(store.read_model_meta(key).get("device", "not recorded"))] += 1
        except (OSError, ValueError):
            counts["not in the store"] += 1
    return dict(counts)


def write_report(store: ArtifactStore, name: str, out: Optional[Path] = None) -> Path:
    """Write the sweep's report to `out` (default: `REPORT_FILE` in its figures folder, copied
    into a remote store) and return its path."""
    data = sweep_page(page_inputs(store, name)).encode()
    if out is None:
        return store.write_figure(name, REPORT_FILE, data)
    return store.write_output(out, data)
