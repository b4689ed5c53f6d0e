"""The bound-vs-attack frontier: measured precision next to the Thudi et al. bound, per cell.

`load_frontier` returns it as a pandas DataFrame (one row per cell), `summarize_frontier` pools
each coordinate's trials into one row (the precision over trials, ΣTP/(ΣTP+ΣFP), with its exact
Clopper–Pearson interval: the figures' rule), and `format_summary` / `format_table` print those
as text a person reads; the figure is the frontier report's (`sweeper.reports.frontier_chart`), which
this command draws beside the experiment's own report.

Both read the sweep's compacted results dataset (`sweeper.store.results`), adding cells that landed
after it, and say how many of the sweep's cells are missing and why: a gap is never silent.

The command that prints it, `sweeper frontier`, is `sweeper.cli.frontier_command`: nothing here
parses a command line, so a notebook imports this as it is.
"""

from __future__ import annotations

import logging
import math
import numbers
import sys
import textwrap
from pathlib import Path
from typing import Any, Optional, Sequence

import pandas as pd

from sweeper.axes import pooling_keys, swept
from sweeper.formats import format_epsilon
from sweeper.store.results import Results, load_results, sort_frontier
from sweeper.store.artifacts import ArtifactStore, check_sweep_name, split_sweep_location

logger = logging.getLogger(__name__)


def load_frontier(experiment: str = "quickstart", store_root: str | Path = "runs",
                  run_dir: Optional[str | Path] = None) -> pd.DataFrame:
    """A sweep's results as a DataFrame: one row per cell of the latest run of `experiment`.

    Read from the sweep's Parquet results dataset; cells that are not there, and rows read
    from the cells' own files (a sweep still running has no dataset yet), are logged as
    warnings rather than raised, so a partial sweep can still be read.

    Args:
        experiment: the sweep's name (`+experiment=NAME`, `quickstart` by default).
        store_root: the sweep's `store.root`, a folder or a URI such as `s3://bucket/prefix`.
        run_dir: instead of both, the sweep's own folder or URI, `<store.root>/sweeps/<name>`.

    Returns:
        One row per (dataset, model, attack, policy, ε, δ, p, trial) cell,
            sorted as `sweeper frontier --trials` prints them, with every column of
            `CELL_COLUMNS` (precision, its exact interval, the bound U, violation, …);
            `summarize_frontier` pools its trials as the table and figure do.

    Raises:
        ValueError: `experiment` is not a valid sweep name (it becomes a path).
        FileNotFoundError: the store holds no such sweep.
        sweeper.store.artifacts.ManifestError: its `sweep.json` cannot be read (a ValueError).

    Example:
        ```python
        from sweeper.frontier import load_frontier, summarize_frontier
        cells = load_frontier("quickstart", "runs")
        cells[cells["violation"]]                 # cells whose precision is above U
        summarize_frontier(cells)                 # the table `sweeper frontier` prints
        ```
    """
    results = open_sweep(*sweep_location(experiment, store_root, run_dir))[1]
    for line in [*results.coverage.notes,
                 *([] if results.coverage.complete else [results.coverage.summary()])]:
        logger.warning("%s", line)
    return sort_frontier(results.frame)


def sweep_location(experiment: str, store_root: str | Path,
                   run_dir: Optional[str | Path]) -> tuple[str, str]:
    """(store root, sweep name), the name checked like `name` is: it becomes a path."""
    root, name = split_sweep_location(run_dir) if run_dir is not None else (str(store_root), experiment)
    return root, check_sweep_name(name)


def open_sweep(root: str, name: str) -> tuple[ArtifactStore, Results]:
    """The sweep's store and results; a sequential sweep's rows carry their cells' decisions
    (`sweeper.sequential.with_decisions`)."""
    from sweeper.decisions import with_decisions

    store = ArtifactStore(root)
    results = load_results(store, name)
    results.frame = with_decisions(results.frame, store.read_manifest(name).get("config", {}))
    return store, results


#: Columns a summary row averages over its trials.
SUMMARY_MEANS = ["baseline", "bound", "bound_at_tpr", "bound_profile", "tpr_at_fpr_0.01", "auc",
                 "test_accuracy", "precision_exact", "bound_tight", "epsilon_last_iterate"]


def summarize_frontier(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per coordinate but the trial (`sweeper.axes.pooling_keys`: dataset, model,
    attack, policy, ε, δ, p and the recipe axes): its trials pooled, as every figure
    draws them (`sweeper.reports.stats.pooled_table`: `precision` = ΣTP/(ΣTP+ΣFP) with its exact
    95 % interval, `mean_precision` the trials' mean, `n_trials`, `violations` the flagged
    trials) and the trials' mean of `SUMMARY_MEANS`.  PDTP cells, which have no precision, are
    left out (`format_table` lists them per trial)."""
    from sweeper.reports.stats import pooled_table

    cells = frame.drop(pdtp_rows(frame).index)
    keys = pooling_keys(cells)
    summary = pooled_table(cells, keys, SUMMARY_MEANS)
    if "decision" not in cells or summary.empty:
        return summary
    # a sequential sweep's: its decision, and the anytime interval in place of the fixed one
    decided = cells.groupby(keys, sort=True, dropna=False)[SEQUENTIAL_COLUMNS].first()
    summary = summary.drop(columns=["precision_ci_low", "precision_ci_high"]).merge(
        decided.reset_index(), on=keys, how="left")
    return summary.rename(columns={"sequential_low": "precision_ci_low",
                                   "sequential_high": "precision_ci_high"})


#: A sequential sweep's columns (`sweeper.sequential.frontier_decisions`), kept per pooled row.
SEQUENTIAL_COLUMNS = ["decision", "decided_at", "sequential_low", "sequential_high"]


def pdtp_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Long et al.'s PDTP cells: a measure per record, no precision."""
    if "pdtp_records" not in frame:
        return frame.iloc[:0]
    return frame[frame["precision"].isna() & frame["pdtp_records"].notna()]


def format_summary(frame: pd.DataFrame) -> str:
    """`summarize_frontier` as a fixed-width table (pandas lays it out): one line per
    coordinate, its trials pooled, and a flag naming how many of them are violations."""
    summary = summarize_frontier(frame)
    if summary.empty:
        return "(no cells)" if frame.empty else _format_pdtp(pdtp_rows(frame))
    flags = [f"VIOLATION ({n} of {k} trials)" if n else ""
             for n, k in zip(summary["violations"], summary["n_trials"])]
    text = _layout(summary, {"trials": summary["n_trials"]}, "pooled precision [95% CI]", flags,
                   FLAG_LEGEND_POOLED)
    pdtp = pdtp_rows(frame)
    return text if pdtp.empty else text + "\n\n" + _format_pdtp(pdtp)


#: What the `flag` column says, printed under the table (`format_summary`, `format_table`).
FLAG_LEGEND_POOLED = ("flag: VIOLATION (k of n trials): k of the coordinate's n trials prove, at "
                      "level metrics.violation_alpha, a precision above U or an ε above the "
                      "claimed one (`--trials` names the test that fired); blank: none does")
FLAG_LEGEND_TRIALS = ("flag: VIOLATION (tests): the trial's data prove, at level "
                      "metrics.violation_alpha, that training was not (ε, δ)-DP; the tests that "
                      "fired (column violation_reason): precision above U (precision) or the "
                      "training's profile bound (profile), an ε above the claim from the rates "
                      "(rates) or an audit (audit_*), ε spent above it (accounting); blank: none")
#: `bound@TPR` is shown only where it differs from `bound` at the table's three decimals: U
#: depends on the TPR s only through δ/s, so at δ ≪ s (every sweep's default) the two agree.
BOUND_AT_TPR_LEGEND = ("bound@TPR: U at the attack's own TPR (at least metrics.tpr_floor), shown "
                       "only where it differs from bound, which holds for every TPR at or above "
                       "the floor; U depends on the TPR only through δ/TPR")
#: The legend's lines wrap at this width, continuations indented.
LEGEND_WIDTH = 100
BOUND_AT_TPR_SAME = ("bound@TPR (U at the attack's own TPR) equals bound in every row: U depends "
                     "on the TPR only through δ/TPR")


def table_rows(frame: pd.DataFrame, trials: bool) -> pd.DataFrame:
    """The rows a table shows, as data (`--json`, `--csv`): the pooled summary
    (`summarize_frontier`) and the PDTP cells, or with `trials` every cell."""
    if trials:
        return frame
    pdtp = pdtp_rows(frame)
    summary = summarize_frontier(frame)
    return summary if pdtp.empty else pd.concat([summary, pdtp], ignore_index=True)


def _layout(rows: pd.DataFrame, counted: dict[str, pd.Series], precision_label: str,
            flags: Sequence[str], flag_legend: str) -> str:
    """The frontier's one layout, pooled (`format_summary`) or per trial (`format_table`): the
    coordinates, `counted` (trials or the trial), the precision with its interval, TP and FP, the
    baseline and the bounds (`bound@TPR` only where it differs from `bound`), then the closed
    form (exact mechanisms) or the attack's other measures, the final model's heuristic ε where
    training is DP-SGD, and the flag; pandas pads the columns, text left and numbers right.
    Under it, what the flag and bound@TPR say."""
    rows = rows.reindex(columns=rows.columns.union([*SUMMARY_MEANS, "policy"], sort=False))
    exact = rows["precision_exact"].notna().any()
    shown = pd.DataFrame({
        "attack": rows["attack"],
        **({"policy": rows["policy"]} if rows["policy"].nunique() > 1 else {}),
        "ε": rows["epsilon"].map(format_epsilon), "δ": rows["delta"].map("{:.0e}".format),
        "p": rows["p"].map("{:.2f}".format),
        **{axis.label: rows[axis.name].map(axis.text) for axis in swept(rows)}, **counted,
        precision_label: [
            f"{v:.3f} [{lo:.3f}, {hi:.3f}]" for v, lo, hi in
            zip(rows["precision"], rows["precision_ci_low"], rows["precision_ci_high"])],
        "TP": rows["tp"], "FP": rows["fp"]})
    averaged = (("exact", "precision_exact"), ("tightest", "bound_tight")) if exact else \
        (("TPR@1%", "tpr_at_fpr_0.01"), ("AUC", "auc"), ("test acc", "test_accuracy"))
    for label, column in (("baseline", "baseline"), ("bound", "bound"),
                          ("bound@TPR", "bound_at_tpr"), *averaged):
        shown[label] = rows[column].map("{:.3f}".format)
    differs = shown["bound@TPR"] != shown["bound"]
    if differs.any():
        shown["bound@TPR"] = shown["bound@TPR"].where(differs, "")
    else:
        shown = shown.drop(columns="bound@TPR")
    if rows["epsilon_last_iterate"].notna().any():  # the final model's heuristic ε (DP-SGD)
        shown["ε last iterate"] = rows["epsilon_last_iterate"].map(
            lambda value: "" if math.isnan(value) else format_epsilon(round(value, 2)))
    if "decision" in rows:  # a sequential sweep's pooled rows
        shown["decision"] = [decision_text(d, at) for d, at in zip(rows["decision"], rows["decided_at"])]
    shown["flag"] = list(flags)
    for column in ("attack", "policy", precision_label, "bound@TPR", "decision", "flag"):  # text: left
        if column in shown:
            width = max(len(column), *shown[column].map(len))
            shown[column] = shown[column].map(lambda text, w=width: text.ljust(w))
            shown = shown.rename(columns={column: column.ljust(width)})
    table = [line.rstrip() for line in shown.to_string(index=False).splitlines()]
    legend = [textwrap.fill(text, LEGEND_WIDTH, subsequent_indent="  ") for text in
              (BOUND_AT_TPR_LEGEND if differs.any() else BOUND_AT_TPR_SAME, flag_legend,
               *([DECISION_LEGEND] if "decision" in rows else []))]
    return "\n".join([*table, "", *legend])


def decision_text(decision: Any, decided_at: Any) -> str:
    """A sequential cell's decision as the table says it: "width @3" (decided by its goal's
    width at its 3rd trial), "below @1", "violation @2", or "undecided" / "running"."""
    if not isinstance(decision, str):
        return ""
    return f"{decision} @{int(decided_at)}" if decided_at == decided_at else decision


#: What a sequential sweep's `decision` column says, under its table.
DECISION_LEGEND = ("decision (sequential): how the cell's anytime-valid interval met its goal and "
                   "at which trial (width: narrower than sequential.width; below: wholly below "
                   "U − sequential.margin; violation: wholly above U), or undecided at "
                   "sequential.max_trials / max_models; the interval shown is the anytime one")


def select(frame: pd.DataFrame, attacks: Sequence[str] = (), epsilons: Sequence[float] = (),
           ps: Sequence[float] = (), recipe: Optional[dict[str, Sequence[float]]] = None
           ) -> pd.DataFrame:
    """The rows of the given attacks, ε, p and values of the other grid axes (`recipe`, by axis
    name; each axis: all when none is given; numbers matched to 1e-9, so `--p 0.2` finds 0.2
    however it was written; names exactly)."""
    keep = pd.Series(True, index=frame.index)
    if attacks:
        keep &= frame["attack"].isin(list(attacks))
    for column, values in (("epsilon", epsilons), ("p", ps), *(recipe or {}).items()):
        if values and column not in frame:  # a store from before the axis: no value matches
            keep &= False
        elif values:
            keep &= frame[column].apply(lambda v, values=values: any(_same(v, w) for w in values))
    return frame[keep]


def _same(value: Any, wanted: Any) -> bool:
    """A filter's value against a cell's: numbers to 1e-9 relative, anything else exactly."""
    numeric = all(isinstance(x, numbers.Real) and not isinstance(x, bool) for x in (value, wanted))
    return value == wanted or (numeric and math.isclose(value, wanted, rel_tol=1e-9))


def format_table(frame: pd.DataFrame) -> str:
    """One line per cell (every trial), in `format_summary`'s layout with the trial in place of
    the trial count, each violation flagged with its reason.  Sweeps over exact mechanisms
    (`bound_check`) also show the closed form: the attack's exact precision and the tightest
    bound over the mechanism's privacy profile."""
    if frame.empty:
        return "(no cells)"
    measures = pdtp_rows(frame)
    cells = frame.drop(measures.index)
    parts = []
    if not cells.empty:
        reasons = cells.get("violation_reason", pd.Series("", index=cells.index)).fillna("")
        flags = [f"VIOLATION ({reason or 'precision'})" if flagged else ""
                 for flagged, reason in zip(cells["violation"], reasons)]
        parts.append(_layout(cells, {"trial": cells["trial"]}, "precision [95% CI]", flags,
                             FLAG_LEGEND_TRIALS))
    if not measures.empty:
        parts.append(_format_pdtp(measures))
    return "\n\n".join(parts)


def _format_pdtp(frame: pd.DataFrame) -> str:
    """Long et al.'s PDTP per cell, with the DTP-1 share (> 1): single-model, seed-averaged (avg,
    ours) and the paper's mean of per-seed PDTP (seed-mean; NaN in tables older than it)."""
    header = (f"{'PDTP':<16} {'ε':>5} {'δ':>7} {'p':>5} {'trial':>5} {'records':>7} "
              f"{'mean single':>11} {'mean avg':>8} {'max avg':>7} {'mean seed-mean':>14} "
              f"{'DTP-1 single':>12} {'DTP-1 avg':>9} {'DTP-1 seed-mean':>15}")
    lines = [header, "-" * len(header)]
    for row in frame.to_dict("records"):
        lines.append(
            f"{row['attack']:<16} {format_epsilon(row['epsilon']):>5} {row['delta']:>7.0e} {row['p']:>5.2f} "
            f"{row['trial']:>5} {row['pdtp_records']:>7.0f} {row['pdtp_mean_single']:>11.3f} "
            f"{row['pdtp_mean_averaged']:>8.3f} {row['pdtp_max_averaged']:>7.3f} "
            f"{row.get('pdtp_seed_mean', math.nan):>14.3f} {row['dtp1_share_single']:>12.2f} "
            f"{row['dtp1_share_averaged']:>9.2f} {row.get('dtp1_share_seed_mean', math.nan):>15.2f}")
    return "\n".join(lines)


def violation_warning(frame: pd.DataFrame) -> Optional[str]:
    """The warning for cells whose data prove the guarantee wrong, or None: a sweep's last lines
    and the frontier command both print it."""
    violations = int(frame["violation"].sum()) if not frame.empty else 0
    if not violations:
        return None
    return (f"WARNING: {violations} cell(s) prove a precision above the bound or an ε above the "
            "claimed one (column violation_reason): a bug in training or accounting.")


def draw_figures(store: ArtifactStore, name: str, frame: pd.DataFrame,
                 plot: Optional[str]) -> list[str]:
    """Draw the frontier (at `plot`, else into the sweep's folder) and the experiment's report
    (into the sweep's folder), in a private folder first, then kept by the store's write path
    (`ArtifactStore.keep_figures`); the lines that say where they are."""
    import tempfile

    from sweeper.reports import draw, plot_frontier  # drawing code only when drawing

    config = store.read_manifest(name).get("config", {})
    shadows = config.get("shadow", {}).get("count")
    with tempfile.TemporaryDirectory(prefix="sweeper-figures-") as private:
        staging = Path(private)
        png = plot_frontier(frame, staging / "frontier.png", title=name, shadows=shadows)
        if plot:
            store.write_output(plot, png.read_bytes())
            lines = [f"plot: {plot}"]
        else:
            lines = [f"plot: {store.keep_figures(name, staging, [png])[0]}"]
        reports = draw(config.get("report", "frontier"), frame, staging / "report", store.uri,
                       echo=lambda line: print(line, file=sys.stderr))
        return lines + [f"report: {path}" for path in store.keep_figures(name, staging, reports)]
