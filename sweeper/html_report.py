"""`sweeper report`: a sweep's self-contained HTML report, `report.html` beside its frontier.

Every sweep writes it at its end (`sweeper.listeners.publish_figures`, which also logs it to the
sweep's MLflow run as an artifact); this command writes it again, or elsewhere (`--out`), from
what the store holds.  The page itself is `sweeper.reports.sweep_page` (pure: frames in, HTML
out); here the store is read (`page_inputs`) and the file written (`write_report`).

Command line: `sweeper report --help`; exit codes in `EXIT_CODES` (those of `sweeper frontier`).
"""

from __future__ import annotations

import argparse
import collections
import logging
import sys
from pathlib import Path
from typing import Optional, Sequence

import pandas as pd

from sweeper import VERSION_TEXT
from sweeper.paths import file_problem
from sweeper.reports.sweep_page import PageFigure, PageInputs, sweep_page
from sweeper.store.artifacts import ArtifactStore, ManifestError

logger = logging.getLogger(__name__)

#: The report's file name, in the sweep's figures folder beside frontier.png.
REPORT_FILE = "report.html"
EXIT_OK, EXIT_REFUSED, EXIT_INCOMPLETE = 0, 2, 3
EXIT_CODES = {EXIT_OK: "the report was written and every cell of the sweep is present",
              EXIT_REFUSED: "bad arguments, no such sweep, an unreadable store or sweep.json",
              EXIT_INCOMPLETE: "the report was written, but some cells are missing, failed or "
                               "corrupt (the report says which; --allow-partial exits 0)"}


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


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Write a sweep's report: one self-contained HTML file (figures inline, "
                    "its data downloadable from the page, no request to any other address) "
                    "with the claim, the frontier, the audits by threat model, the controls, "
                    "provenance and limits.  Every sweep writes it beside its frontier; this "
                    "writes it again from the store.")
    parser.add_argument("--experiment", default="quickstart",
                        help="sweep name, i.e. the experiment's `name` (default: quickstart)")
    parser.add_argument("--store-root", default="runs",
                        help="the sweep's store.root, a folder or a URI such as s3://bucket/prefix "
                             "(default: runs)")
    parser.add_argument("--run-dir", help="a sweep folder or URI (<store.root>/sweeps/<name>); "
                                          "overrides --experiment and --store-root")
    parser.add_argument("--out", metavar="PATH",
                        help=f"where to write it (default: <run dir>/{REPORT_FILE}, for a remote "
                             "store a local cache and the store)")
    parser.add_argument("--allow-partial", action="store_true",
                        help=f"exit {EXIT_OK} even when some of the sweep's cells are missing")
    parser.add_argument("--version", action="version", version=VERSION_TEXT)
    parser.epilog = "exit codes: " + "; ".join(f"{code}: {text}" for code, text in EXIT_CODES.items())
    return parser


def main(argv: Optional[Sequence[str]] = None, prog: str = "python -m sweeper.html_report") -> int:
    from sweeper.frontier import one_line, open_sweep, store_root_problem, sweep_location, sweeps_held

    args = _parser(prog).parse_args(argv)
    if args.out is not None and file_problem("--out", args.out):
        print(f"error: {file_problem('--out', args.out)}", file=sys.stderr)
        return EXIT_REFUSED
    root: Optional[str] = None if args.run_dir else args.store_root
    try:
        root, name = sweep_location(args.experiment, args.store_root, args.run_dir)
        where = store_root_problem(root)
        if where:
            raise ValueError(where)
        store, results = open_sweep(root, name)
        store.read_manifest(name)
    except FileNotFoundError as error:
        print(f"error: {error}. {sweeps_held(root)}", file=sys.stderr)
        return EXIT_REFUSED
    except (ManifestError, ValueError, OSError) as error:
        print(f"error: {one_line(error)}", file=sys.stderr)
        return EXIT_REFUSED
    path = write_report(store, name, Path(args.out).expanduser() if args.out else None)
    print(f"report: {path}")
    if results.coverage.complete or args.allow_partial:
        return EXIT_OK
    print(f"INCOMPLETE {results.coverage.summary()} (the report says which cells)", file=sys.stderr)
    return EXIT_INCOMPLETE


if __name__ == "__main__":
    sys.exit(main())
