"""Long et al.: the `pdtp` report, per-record PDTP against per-record attack accuracy.

Writes the PNG and, next to it, CSVs with exactly the points drawn and each panel's correlations.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import pandas as pd

from sweeper.figures import panel_grid, policy_label, save_figure
from sweeper.formats import format_epsilon
from sweeper.reports.loading import (
    PDTP_VALUES_COLUMNS,
    SCORES_COLUMNS,
    load_pdtp_values,
    load_scores,
)
from sweeper.reports.report_registry import register_report
from sweeper.reports.stats import correlations, per_record_accuracy
from sweeper.reports.tables import (
    groups,
    is_oracle,
    matching,
    measure_attacks,
    not_tests,
    require,
    write_csv,
)

PDTP_FRAME_COLUMNS = ["model_key", "attack", "policy", "epsilon", "delta", "p", "threshold"]


def _cell_scores(frame: pd.DataFrame, scores: pd.DataFrame) -> pd.DataFrame:
    """Scores with each cell's coordinates and operating threshold joined from the results table.

    The join is on (model_key, attack) and, when the scores carry it, policy: a target's scores
    for one attack are shared by every policy's cell, which differ only in their threshold.
    """
    keys = ["model_key", "attack"] + (["policy"] if "policy" in scores.columns else [])
    group = [c for c in ("dataset", "model") if c in frame.columns]
    cell_columns = list(dict.fromkeys(keys + group + ["policy", "epsilon", "delta", "p",
                                                      "threshold"]
                                      + (["trial"] if "trial" in frame.columns else [])))
    cells = frame[cell_columns].drop_duplicates(subset=list(dict.fromkeys(keys + ["policy"])))
    left = scores.drop(columns=[c for c in cell_columns if c in scores.columns and c not in keys])
    return left.merge(cells, on=keys, how="inner")


@register_report("pdtp", reads_scores=True)
def pdtp_report(frame: pd.DataFrame, out_dir: Path, *, scores: Optional[pd.DataFrame] = None,
                pdtp_values: Optional[pd.DataFrame] = None,
                store_root: Optional[str | Path] = None) -> list[Path]:
    """Long et al.: do records that move the model most (high PDTP) fall to attacks most often?

    Records are compared within a *group* — one training distribution: (dataset, model, ε, δ, p)
    — across that group's targets (trials), as Long et al. compare a record across their repeated
    partitions.  A record's PDTP, as the paper measures it, is the mean of its PDTP measurements:
    per target, the mean over seeds of per-seed PDTP (`pdtp_values`, see `load_pdtp_values`),
    then the mean over the targets in which it was measured (`pdtp_seed_mean`).  That is the y
    axis, the DTP-1 line (PDTP = 1) is drawn against it, and `pearson`/`spearman` are taken on
    it, so the figure compares with the paper's.  Our seed-averaged PDTP (the pdtp cells'
    per-record `score`, which relates to ε) is drawn beside it in grey, with its own
    correlations (`*_seed_averaged`).  Its attack accuracy is `per_record_accuracy`, per
    (attack, policy).  Only records with a PDTP appear (measured members).  One panel per
    (group, attack, policy).  `scores` and `pdtp_values` are read from `store_root` when not given.
    """
    require(frame, PDTP_FRAME_COLUMNS, "pdtp")
    if scores is None or pdtp_values is None:
        if store_root is None:
            raise ValueError("pdtp report: needs the per-record scores and PDTP tables: pass "
                             "scores= (see load_scores) and pdtp_values= (see load_pdtp_values), "
                             "or store_root=")
        scores = load_scores(frame, store_root) if scores is None else scores
        pdtp_values = load_pdtp_values(frame, store_root) if pdtp_values is None else pdtp_values
    require(scores, SCORES_COLUMNS, "pdtp", what="scores table")
    require(pdtp_values, PDTP_VALUES_COLUMNS, "pdtp", what="per-record PDTP table")
    out_dir = Path(out_dir)
    joined = _cell_scores(frame, scores)
    group = [c for c in ("dataset", "model") if c in joined.columns] + ["epsilon", "delta", "p"]
    measured = joined[joined["attack"].isin(measure_attacks()) & joined["score"].notna()]
    if measured.empty:
        raise ValueError("pdtp report: no per-record PDTP scores (no pdtp cells in the sweep)")
    measured = measured.drop_duplicates(subset=["model_key", "record_id"])  # one per target
    ours = (measured.groupby(group + ["record_id"], sort=True)["score"]
            .agg(pdtp_seed_averaged="mean", pdtp_measurements="count").reset_index())
    targets = measured[group + ["model_key"]].drop_duplicates()
    papers = (pdtp_values.merge(targets, on="model_key", how="inner")
              .groupby(group + ["record_id"], sort=True)["pdtp_seed_mean"].mean().reset_index())
    attacked = joined[~joined["attack"].isin(not_tests())]
    accuracy = per_record_accuracy(attacked, group + ["attack", "policy"])
    points = (accuracy.merge(papers, on=group + ["record_id"], how="inner")
              .merge(ours, on=group + ["record_id"], how="inner"))
    if points.empty:
        raise ValueError("pdtp report: no record has both a PDTP and an attack decision "
                         "(are the attacks' thresholds all NaN?)")
    panel_keys = group + ["attack", "policy"]
    oracle = {pol: is_oracle(frame[frame["policy"] == pol]) for pol in points["policy"].unique()}
    summaries = []
    for key, rows in groups(points, panel_keys):
        accuracy_values = rows["accuracy"].to_numpy(float)
        r, rho = correlations(accuracy_values, rows["pdtp_seed_mean"].to_numpy(float))
        r_ours, rho_ours = correlations(accuracy_values, rows["pdtp_seed_averaged"].to_numpy(float))
        summaries.append({**dict(zip(panel_keys, key)), "records": len(rows), "pearson": r,
                          "spearman": rho,
                          "dtp1_share_seed_mean": float((rows["pdtp_seed_mean"] > 1.0).mean()),
                          "pearson_seed_averaged": r_ours, "spearman_seed_averaged": rho_ours,
                          "dtp1_share_seed_averaged":
                              float((rows["pdtp_seed_averaged"] > 1.0).mean())})
    summary = pd.DataFrame(summaries)
    points = points.merge(summary[panel_keys + ["pearson", "spearman"]], on=panel_keys, how="left")

    fig, axes = panel_grid(len(summary), width=4.6, height=4.2)
    for ax, summary_row in zip(axes, summary.to_dict("records")):
        match = matching(points, {k: summary_row[k] for k in panel_keys})
        rows = points[match]
        ax.scatter(rows["accuracy"], rows["pdtp_seed_averaged"], s=14, facecolors="none",
                   edgecolors="grey", label="seed-averaged PDTP (ours: relates to ε)")
        ax.scatter(rows["accuracy"], rows["pdtp_seed_mean"], s=14, alpha=0.7, color="C0",
                   label="mean of per-seed PDTP (Long et al.)")
        ax.axhline(1.0, color="red", lw=0.8, ls="--",
                   label="DTP-1 threshold (Long et al.'s PDTP = 1)")
        where = " · ".join(str(summary_row[c]) for c in group if c in ("dataset", "model"))
        head = (f"{summary_row['attack']}, "
                f"{policy_label(summary_row['policy'], oracle[summary_row['policy']])}\n"
                f"ε={format_epsilon(summary_row['epsilon'])}, p={summary_row['p']:g}"
                + (f", {where}" if where else "")
                + f"\nPearson r={summary_row['pearson']:.3f}, Spearman ρ={summary_row['spearman']:.3f}"
                  f", n={summary_row['records']}")
        ax.set(title=head, xlabel="per-record attack accuracy (share of targets right)",
               ylabel="PDTP (mean over seeds and targets)", xlim=(-0.02, 1.02))
        ax.title.set_fontsize(8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="upper left")
    fig.suptitle("Per-record PDTP against per-record attack accuracy\n(Long et al.)",
                 fontsize=10)
    return [save_figure(fig, out_dir / "pdtp_vs_accuracy.png"),
            write_csv(points, out_dir / "pdtp_vs_accuracy.csv"),
            write_csv(summary, out_dir / "pdtp_correlations.csv")]
