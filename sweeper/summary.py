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
    threats = [Path(p) for p in result.report_paths if Path(p).name == THREAT_MODELS_CSV]
    if threats and threats[0].is_file():  # the audit report's ceilings and best audits
        print(threat_models_text(threats[0]))
        print()
    print(f"done in {result.seconds:.1f} s: trained {result.models_trained} of "
          f"{result.models_total} models, computed {result.cells_computed} of "
          f"{result.cells_total} cells")
    print(f"results (Parquet): {result.results_dir}  (sweep={result.name}; "
          "pandas.read_parquet reads it)")
    if result.plot_path is not None:
        print(f"frontier plot:     {result.plot_path}")
        print(f"frontier table:    {result.csv_path}")
    print(f"MLflow:            {_mlflow_line(result)}")
    from sweeper.frontier import violation_warning  # pandas and pyarrow: not for `--help`

    warning = violation_warning(result.results)
    if warning:
        print(warning, file=sys.stderr)
    for label, reason in result.failures:
        print(f"FAILED {label}: {reason}", file=sys.stderr)
    print(where_to_look(result))


#: The audit report's table of threat models (`sweeper.reports.audit.threat_model_table`).
THREAT_MODELS_CSV = "audit_threat_models.csv"


def threat_models_text(path: Path) -> str:
    """The audit report's threat-model table for the terminal: per (ε, δ, p) the accountant's
    ε, the last iterate's heuristic ε and the best valid audit of each threat model (and, where
    the black-box runs gave it, the paper's uncorrected estimate, labelled as one)."""
    import pandas as pd

    table = pd.read_csv(path)
    names = {"epsilon_spent_max": "ε accountant", "epsilon_last_iterate": "ε last iterate",
             "estimate_gdp_uncorrected": "estimate (uncorrected GDP, not a proof)"}
    shown = table.rename(columns={**names, **{
        column: "best valid " + column.removeprefix("best_audit_")
        for column in table if column.startswith("best_audit_")}})
    return ("best valid audit in each threat model (proofs at the audit level; trials pooled):\n"
            + shown.to_string(index=False, float_format=lambda v: f"{v:.3g}"))


def _mlflow_line(result) -> str:
    """How to open the sweep's runs; never an `mlflow ui` at a store that missed runs, or is gone."""
    from sweeper.store import split_sweep_location
    from sweeper.mlflow_ui import tracking_link

    if not result.tracking_warning:
        return tracking_link(result.tracking_uri, result.tracking_url)
    root, _ = split_sweep_location(result.sweep_dir)
    sync = shlex.join([sys.executable, "-m", "sweeper.sync", "--experiment", result.name,
                       "--store-root", root])
    return (f"tracking failed (warning above), the results are whole in Parquet; log them to "
            f"MLflow with: {sync}")


def where_to_look(result) -> str:
    """The last line of a sweep: where its results live once Ray (and its dashboard) is gone —
    the results, the figures, the command that prints the table and, last so that it can be
    copied to the end of the line, the one that opens MLflow (or backfills it)."""
    figures = [str(p) for p in (result.plot_path, *result.report_paths)
               if p is not None and Path(p).suffix == ".png"]
    parts = [f"results {result.sweep_dir}"]
    if figures:
        parts.append("figures " + ", ".join(figures))
    script = Path(sys.executable).parent / "sweeper"  # runnable as printed, as ui_command is
    frontier = [str(script), "frontier"] if script.exists() else [sys.executable, "-m", "sweeper.frontier"]
    parts += [f"table: {shlex.join([*frontier, '--run-dir', str(result.sweep_dir)])}",
              f"MLflow: {_mlflow_line(result)}"]
    return "where to look: " + " | ".join(parts)


