"""What a finished sweep prints: its frontier table, counts, where its results and figures are,
the failures, and the commands that open them once Ray (and its dashboard) is gone."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path


def print_summary(result) -> None:
    """The sweep's summary on stdout (its frontier with the trials pooled, one line per
    coordinate: `sweeper frontier --trials` prints every cell); its violations and failed cells
    on stderr."""
    from sweeper.frontier import format_summary

    print()
    print(format_summary(result.results))
    print()
    if result.report_paths:  # what the experiment's report has to say (`Report.summary`)
        from sweeper.reports import summaries  # every report module: the registry filled

        for text in summaries(result.report_paths):
            print(text)
            print()
    print(f"done in {result.seconds:.1f} s: trained {result.models_trained} of "
          f"{result.models_total} models, computed {result.cells_computed} of "
          f"{result.cells_total} cells")
    if result.sequential is not None:
        from sweeper.decisions import summary_line

        print(summary_line(result.sequential))
    if any(kind.tasks for kind in result.task_times.values()):  # a rerun that ran no task: none
        from sweeper.task_times import wall_split_line

        print(wall_split_line(result.task_times))
    print(f"results (Parquet): {result.results_dir}  (sweep={result.name}; "
          "pandas.read_parquet reads it)")
    if result.plot_path is not None:
        print(f"frontier plot:     {result.plot_path}")
        print(f"frontier table:    {result.csv_path}")
    if result.html_report is not None:
        print(f"report (HTML):     {result.html_report}  (one file: figures and data inside)")
    from sweeper.frontier import violation_warning  # pandas and pyarrow: not for `--help`

    warning = violation_warning(result.results)
    if warning:
        print(warning, file=sys.stderr)
    for label, reason in result.failures:
        print(f"FAILED {label}: {reason}", file=sys.stderr)
    print(where_to_look(result))


def sweeper_command(tool: str) -> list[str]:
    """`sweeper TOOL` runnable as printed: the `sweeper` script beside this interpreter (no
    activated venv needed), or this interpreter's `-m sweeper.cli.TOOL_command` where no script was
    installed (a bare checkout on PYTHONPATH)."""
    script = Path(sys.executable).parent / "sweeper"
    return [str(script), tool] if script.is_file() else [sys.executable, "-m", f"sweeper.cli.{tool}_command"]


def mlflow_lines(result) -> list[str]:
    """How to open the sweep's runs, each thing to paste on a line of its own (a shell runs a
    line's first `&` in the background): for a local store the `mlflow ui` command, then the
    URL of the sweep's page at the port the command names (`open_lines`), or the URL alone when
    an MLflow UI already serves the store; for a server, the URL.  Never an `mlflow ui` at a
    store that missed runs, or is gone: the backfill command."""
    from sweeper.store.artifacts import split_sweep_location
    from sweeper.tracking.ui import open_lines, tracking_server

    if result.tracking_warning:
        root, _ = split_sweep_location(result.sweep_dir)
        sync = shlex.join([*sweeper_command("sync"), "--experiment", result.name,
                           "--store-root", root])
        return ["MLflow: tracking failed (warning above), the results are whole in Parquet; log "
                "them to MLflow with:", sync]
    lines = open_lines(result.tracking_uri, result.tracking_page)
    if tracking_server(result.tracking_uri):
        return ["MLflow: open", *lines]
    if lines[0].startswith("http"):  # an MLflow UI already serves the store (`serving_port`)
        return ["MLflow: its UI is already running on this store; open", *lines]
    said = ("MLflow: start its UI with the command below, then open the URL under it "
            "(Ctrl-C stops the UI):" if len(lines) > 1 else "MLflow: start its UI with:")
    return [said, *lines]


def where_to_look(result) -> str:
    """The last lines of a sweep: where its results live once Ray (and its dashboard) is gone —
    the results, the figures, the command that prints the table and, each on a line of its own
    so that it can be pasted, how to open MLflow (or backfill it: `mlflow_lines`)."""
    figures = [str(p) for p in (result.plot_path, *result.report_paths)
               if p is not None and Path(p).suffix == ".png"]
    parts = [f"results {result.sweep_dir}"]
    if figures:
        parts.append("figures " + ", ".join(figures))
    frontier = sweeper_command("frontier")  # runnable as printed, as ui_command is
    parts.append(f"table: {shlex.join([*frontier, '--run-dir', str(result.sweep_dir)])}")
    return "\n".join(["where to look: " + " | ".join(parts), *mlflow_lines(result)])
