"""The bound-vs-attack frontier: measured precision next to the Thudi et al. bound, per cell.

`load_frontier` returns it as a pandas DataFrame (one row per cell); `plot_frontier` draws
precision against p, one colour per ε, with each ε's bound and the always-member baseline, and
marks every cell whose precision interval lies wholly above the bound: such a cell means a bug
in training or accounting and must never be hidden.

Command line: `python -m sweeper.frontier --help`.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from sweeper import VERSION_TEXT
from sweeper.bounds import precision_bound
from sweeper.formats import format_epsilon, jsonable
from sweeper.store import ArtifactStore, split_sweep_location

BASELINE_ATTACK = "always_member"
SORT_ORDER = ["dataset", "attack", "policy", "epsilon", "delta", "p", "trial"]


def load_frontier(experiment: str = "quickstart", store_root: str | Path = "runs",
                  run_dir: Optional[str | Path] = None) -> pd.DataFrame:
    """One row per cell of the latest run of `experiment` (or of the sweep at `run_dir`, a folder
    or URI `<store.root>/sweeps/<name>`)."""
    root, name = split_sweep_location(run_dir) if run_dir is not None else (str(store_root), experiment)
    return sort_frontier(ArtifactStore(root).read_results(name))


def sort_frontier(frame: pd.DataFrame) -> pd.DataFrame:
    return frame if frame.empty else frame.sort_values(SORT_ORDER, ignore_index=True)


#: Columns the table reads; a sweep without some of them (no exact mechanism, only PDTP) shows NaN.
TABLE_COLUMNS = ["precision_exact", "bound_tight", "tpr_at_fpr_0.01", "auc", "test_accuracy",
                 "baseline", "bound_at_tpr"]


def format_table(frame: pd.DataFrame) -> str:
    """A fixed-width table a person can read: one line per cell, violations flagged.

    Sweeps over exact mechanisms (`bound_check`) also show the closed form: the attack's exact
    precision and the tightest bound over the mechanism's privacy profile.
    """
    if frame.empty:
        return "(no cells)"
    measures = frame[frame["precision"].isna() & frame.get("pdtp_records", pd.Series(dtype=float)).notna()] \
        if "pdtp_records" in frame else frame.iloc[:0]
    frame = frame.drop(measures.index).reindex(columns=frame.columns.union(TABLE_COLUMNS))
    exact = frame["precision_exact"].notna().any()
    header = (f"{'attack':<16} {'ε':>5} {'δ':>7} {'p':>5} {'trial':>5}  {'precision [95% CI]':<22} "
              f"{'TP':>5} {'FP':>5} {'baseline':>8} {'bound':>6} {'bound@TPR':>9} "
              + (f"{'exact':>6} {'tightest':>8} " if exact else
                 f"{'TPR@1%':>6} {'AUC':>5} {'test acc':>8} ") + " flag")
    lines = [header, "-" * len(header)]
    for row in frame.to_dict("records"):
        interval = (f"{row['precision']:.3f} [{row['precision_ci_low']:.3f}, "
                    f"{row['precision_ci_high']:.3f}]")
        flag = f"VIOLATION ({row.get('violation_reason') or 'precision'})" if row["violation"] else ""
        tail = (f"{row['precision_exact']:>6.3f} {row['bound_tight']:>8.3f} " if exact else
                f"{row['tpr_at_fpr_0.01']:>6.3f} {row['auc']:>5.3f} {row['test_accuracy']:>8.3f} ")
        lines.append(
            f"{row['attack']:<16} {format_epsilon(row['epsilon']):>5} {row['delta']:>7.0e} {row['p']:>5.2f} "
            f"{row['trial']:>5}  {interval:<22} {row['tp']:>5} {row['fp']:>5} {row['baseline']:>8.3f} "
            f"{row['bound']:>6.3f} {row['bound_at_tpr']:>9.3f} " + tail + f" {flag}"
        )
    parts = ["\n".join(lines)] if not frame.empty else []
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


def plot_frontier(frame: pd.DataFrame, path: str | Path, title: str = "") -> Path:
    """Precision against p: one panel per attack, one colour per ε, bound dashed, baseline grey."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    frame = frame[frame["precision"].notna() | (frame["attack"] == BASELINE_ATTACK)]  # not PDTP
    attacks = [a for a in dict.fromkeys(frame["attack"]) if a != BASELINE_ATTACK] or [BASELINE_ATTACK]
    epsilons = sorted(frame["epsilon"].unique())
    delta = float(frame["delta"].max())  # the loosest bound of the grid
    floor = float(frame["tpr_floor"].max())
    form = str(frame["bound_form"].iloc[0])
    colours = plt.get_cmap("viridis")(np.linspace(0, 0.9, len(epsilons)))
    grid = np.linspace(0.01, 0.99, 197)
    fig, axes = plt.subplots(1, len(attacks), figsize=(4.6 * len(attacks), 4.2), squeeze=False,
                             sharey=True)
    baseline = frame[frame["attack"] == BASELINE_ATTACK].groupby("p")["precision"].mean()
    for axis, attack in zip(axes[0], attacks):
        cells = frame[frame["attack"] == attack]
        for colour, eps in zip(colours, epsilons):
            bound = precision_bound(eps, grid, delta, floor, form=form)
            axis.plot(grid, bound, "--", color=colour, lw=1.2)
            at_eps = cells[cells["epsilon"] == eps].groupby("p").agg(
                precision=("precision", "mean"), low=("precision_ci_low", "mean"),
                high=("precision_ci_high", "mean"), violation=("violation", "any"))
            if at_eps.empty:
                continue
            axis.errorbar(at_eps.index, at_eps["precision"],
                          yerr=[at_eps["precision"] - at_eps["low"], at_eps["high"] - at_eps["precision"]],
                          fmt="o-", color=colour, capsize=3, label=f"ε={format_epsilon(eps)}")
            bad = at_eps[at_eps["violation"]]
            axis.scatter(bad.index, bad["precision"], marker="X", s=140, color="red", zorder=5,
                         label="violation" if not bad.empty else None)
        if not baseline.empty:
            axis.plot(baseline.index, baseline.values, "s:", color="grey", label="always member")
        axis.plot(grid, grid, color="lightgrey", lw=0.8)
        axis.set_title(attack)
        axis.set_xlabel("p = P(x* sampled into D)")
        axis.set_xlim(0, 1)
        axis.set_ylim(0, 1.02)
        axis.grid(alpha=0.3)
    axes[0][0].set_ylabel("attack precision (best quantile, oracle)")
    axes[0][-1].legend(loc="lower right", fontsize=8, title=f"dashed: bound U, δ={delta:g}")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _parser(prog: str = "python -m sweeper.frontier") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Print the bound-vs-attack frontier of a finished (or running) sweep: for "
                    "every cell, the attack's best precision with its 95%% Clopper-Pearson interval "
                    "next to the Thudi et al. bound U, and draw it as a PNG.",
    )
    parser.add_argument("--experiment", default="quickstart",
                        help="sweep name, i.e. the experiment's `name` (default: quickstart)")
    parser.add_argument("--store-root", default="runs",
                        help="the sweep's store.root, a folder or a URI such as s3://bucket/prefix "
                             "(default: runs)")
    parser.add_argument("--run-dir", help="a sweep folder or URI (<store.root>/sweeps/<name>); "
                                          "overrides --experiment and --store-root")
    parser.add_argument("--json", action="store_true", help="print the table as JSON records")
    parser.add_argument("--csv", metavar="PATH", help="also write the table as CSV to PATH")
    parser.add_argument("--plot", metavar="PATH", help="PNG path (default: <run dir>/frontier.png; "
                                                       "for a remote store, a local cache)")
    parser.add_argument("--no-plot", action="store_true", help="do not draw the PNG")
    parser.add_argument("--version", action="version", version=VERSION_TEXT)
    return parser


def main(argv: Optional[Sequence[str]] = None, prog: str = "python -m sweeper.frontier") -> int:
    args = _parser(prog).parse_args(argv)
    try:
        root, name = (split_sweep_location(args.run_dir) if args.run_dir
                      else (args.store_root, args.experiment))
        store = ArtifactStore(root)
        frame = sort_frontier(store.read_results(name))
    except FileNotFoundError as error:
        print(f"error: {error}. Run `python -m sweeper` first, or pass --run-dir.", file=sys.stderr)
        return 2
    notes = sys.stderr if args.json else sys.stdout
    if args.json:
        print(json.dumps(jsonable(frame.to_dict("records")), indent=1))  # ∞ as "inf", NaN null
    else:
        print(format_table(frame))
    if args.csv:
        frame.to_csv(args.csv, index=False)
        print(f"CSV: {args.csv}", file=notes)
    if not args.no_plot and not frame.empty:
        png = plot_frontier(frame, args.plot or store.figures_dir(name) / "frontier.png", title=name)
        print(f"plot: {png}", file=notes)
        for path in experiment_report(store, name, frame):
            print(f"report: {path}", file=notes)
    violations = int(frame["violation"].sum()) if not frame.empty else 0
    if violations:
        print(f"WARNING: {violations} cell(s) prove a precision above the bound or an ε above the "
              "claimed one (column violation_reason): a bug in training or accounting.",
              file=sys.stderr)
    failures = store.read_failures(name, store.read_manifest(name)["cells"])
    for failure in failures:
        print(f"FAILED {failure['cell']}: {failure['reason']}", file=sys.stderr)
    return 0


def experiment_report(store: ArtifactStore, name: str, frame: pd.DataFrame) -> list[Path]:
    """Redraw the figures of the sweep's experiment (its `report`) into its figures folder."""
    from sweeper.reports import draw  # reports draw the frontier too

    config = store.read_manifest(name).get("config", {})
    return draw(config.get("report", "frontier"), frame, store.figures_dir(name) / "report",
                store.uri, echo=lambda line: print(line, file=sys.stderr))


if __name__ == "__main__":
    sys.exit(main())
