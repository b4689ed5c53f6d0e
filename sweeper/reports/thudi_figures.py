"""Thudi et al. (TMLR 2024): the reports of their Figures 3–4 (`thudi_lira`) and 5–6 (`fixed_bound`).

- ``thudi_lira``: precision against p per ε, with U and the always-member baseline (Figure 3),
  and the improvement over that baseline with 95 % intervals (Figure 4);
- ``fixed_bound``: best and final test accuracy against p at a fixed bound U = β (Figures 5–6).

Each writes PNGs and, next to each, a CSV with exactly the numbers drawn (long format: a
``series`` column says which line a row belongs to), so a figure can be checked or redrawn
without this code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from sweeper.bounds import precision_bound
from sweeper.figures import (DODGE, colours, dodge, errorbar, legend_below, panel_grid,
                             policy_label, save_figure, wrap)
from sweeper.reports.report_registry import register_report
from sweeper.reports.stats import (IMPROVEMENT_TEXT, POOLED_TEXT, improvement_interval,
                                   mean_interval, pooled_precision)
from sweeper.reports.tables import (
    baseline_attacks,
    bound_settings,
    groups,
    is_oracle,
    matching,
    not_tests,
    p_grid,
    panel_columns,
    privacy_keys,
    privacy_label,
    require,
    write_csv,
)

THUDI_COLUMNS = ["attack", "policy", "epsilon", "delta", "p", "trial", "precision", "tp", "fp",
                 "precision_ci_low", "precision_ci_high", "baseline", "tpr_floor", "bound_form"]


def _thudi_tables(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The numbers of Figures 3 and 4, long format, one row per plotted point."""
    attacks = frame[~frame["attack"].isin(not_tests())]
    if attacks.empty:
        raise ValueError("thudi_lira report: the results table has no attack rows besides "
                         f"{', '.join(not_tests())}")
    panels = panel_columns(frame, ["attack", "policy"])
    several_deltas = frame["delta"].nunique() > 1
    fig3, fig4 = [], []
    for key, rows in groups(attacks, panels):
        panel = dict(zip(panels, key))
        panel["oracle"] = is_oracle(rows)
        floor, form = bound_settings(rows)
        for eps, delta in privacy_keys(rows):
            at = rows[(rows["epsilon"] == eps) & (rows["delta"] == delta)]
            label = privacy_label(eps, delta, several_deltas)
            for p, cell in at.groupby("p", sort=True):
                spread = pooled_precision(cell)
                fig3.append({**panel, "series": "precision", "label": label, "epsilon": eps,
                             "delta": delta, "p": float(p), **spread})
                mean, low, high, n = improvement_interval(
                    cell["precision"], cell["baseline"], cell["precision_ci_low"],
                    cell["precision_ci_high"])
                fig4.append({**panel, "series": "improvement", "label": label, "epsilon": eps,
                             "delta": delta, "p": float(p), "value": mean, "low": low,
                             "high": high, "n_trials": n,
                             "interval": "clopper-pearson" if n == 1 else "student t over trials"})
            for p in p_grid(at["p"]):
                fig3.append({**panel, "series": "bound U", "label": f"U, {label}", "epsilon": eps,
                             "delta": delta, "p": float(p), "tpr_floor": floor, "bound_form": form,
                             "value": float(precision_bound(eps, p, delta, floor, form=form))})
        for p, cell in rows.groupby("p", sort=True):
            fig3.append({**panel, "series": "always-member baseline", "label": "always member",
                         "p": float(p), "value": float(cell["baseline"].mean()),
                         "n_trials": int(cell["baseline"].notna().sum())})
            if len(privacy_keys(rows)) > 1:  # the paper's Figure 4: pooled over ε and trials
                mean, low, high, n = improvement_interval(
                    cell["precision"], cell["baseline"], cell["precision_ci_low"],
                    cell["precision_ci_high"])
                fig4.append({**panel, "series": "improvement, all ε pooled", "label": "all ε",
                             "p": float(p), "value": mean, "low": low, "high": high,
                             "n_trials": n,
                             "interval": "clopper-pearson" if n == 1 else "student t over trials"})
    return pd.DataFrame(fig3), pd.DataFrame(fig4)


def _panel_title(panel: dict[str, Any], panels: Sequence[str]) -> str:
    parts = [str(panel[c]) for c in panels if c not in ("policy",)]
    if "policy" in panels:
        parts.append(policy_label(panel["policy"], panel.get("oracle", False)))
    return "\n".join([" · ".join(parts[:-1]), parts[-1]]) if len(parts) > 1 else parts[0]


@register_report("thudi_lira")
def thudi_lira_report(frame: pd.DataFrame, out_dir: Path) -> list[Path]:
    """Thudi et al. (2024) Figures 3 and 4: sampling, more than ε, limits what an attack gains.

    Figure 3 puts each attack's precision (pooled over trials, with its exact Clopper–Pearson
    interval: `pooled_precision`) next to U for every ε and the always-member baseline, so
    the reader sees how close real attacks come to the bound.  Figure 4 plots the gain over the
    baseline alone (see `improvement_interval`), where the paper's point — little gain at low and
    high p — is visible; it adds the paper's own curve, pooled over ε and trials, when the sweep
    has several ε.  One panel per attack and policy; the oracle policy is labelled as such.
    """
    require(frame, THUDI_COLUMNS, "thudi_lira")
    out_dir = Path(out_dir)
    figure3, fig3, figure4, fig4 = thudi_lira_figures(frame)
    return [save_figure(figure3, out_dir / "thudi_lira_precision.png", layout=False),
            write_csv(fig3, out_dir / "thudi_lira_precision.csv"),
            save_figure(figure4, out_dir / "thudi_lira_improvement.png", layout=False),
            write_csv(fig4, out_dir / "thudi_lira_improvement.csv")]


def thudi_lira_figures(frame: pd.DataFrame):
    """Figures 3 and 4 (matplotlib Figures, laid out, not saved), each with its table."""
    fig3, fig4 = _thudi_tables(frame)
    panels = panel_columns(frame, ["attack", "policy"])
    keys = [k for k, _ in groups(fig4, panels)]
    eps_keys = sorted({(e, d) for e, d in fig4[["epsilon", "delta"]].dropna().itertuples(index=False)})
    colour = dict(zip(eps_keys, colours(len(eps_keys))))

    figure3, axes3 = panel_grid(len(keys))
    figure4, axes4 = panel_grid(len(keys), sharey=True)
    for key, ax3, ax4 in zip(keys, axes3, axes4):
        match3 = matching(fig3, dict(zip(panels, key)))
        match4 = matching(fig4, dict(zip(panels, key)))
        rows3, rows4 = fig3[match3], fig4[match4]
        panel = {**dict(zip(panels, key)), "oracle": bool(rows3["oracle"].iloc[0])}
        for rank, ((eps, delta), c) in enumerate(colour.items()):
            bound = rows3[(rows3["series"] == "bound U") & (rows3["epsilon"] == eps)
                          & (rows3["delta"] == delta)]
            if not bound.empty:
                ax3.plot(bound["p"], bound["value"], "--", color=c, lw=1.1)
            points = rows3[(rows3["series"] == "precision") & (rows3["epsilon"] == eps)
                           & (rows3["delta"] == delta)].dropna(subset=["value"])
            if not points.empty:
                # measurements at a few p: points (U is the curve), ε apart so bars stay apart
                errorbar(ax3, points["p"].to_numpy() + dodge(rank, len(colour)),
                         points["value"].to_numpy(), points["low"].to_numpy(float),
                         points["high"].to_numpy(float), fmt="o", linestyle="none", color=c,
                         label=points["label"].iloc[0])
            gain = rows4[(rows4["series"] == "improvement") & (rows4["epsilon"] == eps)
                         & (rows4["delta"] == delta)].dropna(subset=["value"])
            if not gain.empty:  # measurements at a few p: points, ε apart, never joined
                errorbar(ax4, gain["p"].to_numpy() + dodge(rank, len(colour)),
                         gain["value"].to_numpy(), gain["low"].to_numpy(float),
                         gain["high"].to_numpy(float), fmt="o", linestyle="none", color=c,
                         label=gain["label"].iloc[0])
        base = rows3[rows3["series"] == "always-member baseline"]
        ax3.plot(base["p"], base["value"], "s:", color="grey", label="always member (baseline)")
        pooled = rows4[rows4["series"] == "improvement, all ε pooled"].dropna(subset=["value"])
        if not pooled.empty:
            errorbar(ax4, pooled["p"].to_numpy(), pooled["value"].to_numpy(),
                     pooled["low"].to_numpy(float), pooled["high"].to_numpy(float),
                     fmt="D", linestyle="none", color="black", ms=6,
                     label="all ε pooled (paper's Fig. 4)")
        ax4.axhline(0.0, color="grey", lw=0.8)
        title = _panel_title(panel, panels)
        for ax in (ax3, ax4):
            ax.set_title(title, fontsize=9)
        ax3.set(xlabel="sampling probability p = P(x* ∈ D)",
                ylabel="attack precision (pooled over trials)", xlim=(0, 1), ylim=(0, 1.02))
        ax4.set(xlabel="sampling probability p = P(x* ∈ D)",
                ylabel="precision − always-member baseline", xlim=(0, 1))
        for ax in (ax3, ax4):
            ax.grid(alpha=0.3)
    figure3.suptitle("Attack precision against sampling probability p, per ε,\n"
                     "with the bound U (Thudi et al. 2024, Fig. 3)", fontsize=10)
    figure4.suptitle("Attack precision minus the always-member baseline\n"
                     "(Thudi et al. 2024, Fig. 4)", fontsize=10)
    for figure in (figure3, figure4):
        figure.tight_layout()
    legend_below(figure3, wrap(f"dashed: bound U per ε · {POOLED_TEXT} · points of "
                                         f"different ε drawn {DODGE:g} apart along p", 90))
    legend_below(figure4, f"{wrap(IMPROVEMENT_TEXT, 90)}\npoints of different ε "
                 f"drawn {DODGE:g} apart along p")
    return figure3, fig3, figure4, fig4


FIXED_BOUND_COLUMNS = ["attack", "target_precision", "p", "trial", "best_test_accuracy",
                       "test_accuracy"]


def _one_attack(frame: pd.DataFrame) -> pd.DataFrame:
    """Accuracy is a property of the target model, repeated on every attack's row: keep one."""
    attacks = list(dict.fromkeys(frame["attack"]))
    chosen = next((a for a in attacks if a in baseline_attacks()), attacks[0])
    rows = frame[frame["attack"] == chosen]
    keys = [c for c in ("dataset", "model", "target_precision", "p", "trial") if c in rows.columns]
    return rows.drop_duplicates(subset=keys)  # several policies share one target


@register_report("fixed_bound")
def fixed_bound_report(frame: pd.DataFrame, out_dir: Path) -> list[Path]:
    """Thudi et al. (2024) Figures 5–6: at a fixed precision bound, which p trains best?

    Each target bound β fixes a curve of (p, ε) pairs with U(ε, p) = β; lower p buys larger ε.
    Plotting the accuracy those pairs reach (best over epochs, and final) against p shows whether
    sub-sampling is the cheaper way to a given privacy level.  Points: mean over trials, bars:
    95 % Student-t interval over trials (`stats.mean_interval`; none with a single trial).
    """
    require(frame, FIXED_BOUND_COLUMNS, "fixed_bound")
    rows = _one_attack(frame)
    rows = rows[rows["target_precision"].notna()]
    if rows.empty:
        raise ValueError("fixed_bound report: no rows with a target_precision")
    out_dir = Path(out_dir)
    panels = panel_columns(rows, [])
    paths: list[Path] = []
    for column, name, what in (("best_test_accuracy", "best", "Best"),
                               ("test_accuracy", "final", "Final")):
        records = []
        for key, panel_rows in groups(rows, panels):
            panel = dict(zip(panels, key))
            for (beta, p), cell in panel_rows.groupby(["target_precision", "p"], sort=True):
                mean, low, high, n = mean_interval(cell[column].to_numpy(float))
                record = {**panel, "series": f"bound β = {beta:g}", "target_precision": float(beta),
                          "p": float(p), "accuracy": mean, "ci_low": low, "ci_high": high,
                          "n_trials": n}
                if "epsilon" in cell.columns:  # context: the ε the planner solved for (β, p)
                    record["epsilon"] = float(cell["epsilon"].mean())
                records.append(record)
        table = pd.DataFrame(records)
        panel_groups = groups(table, panels)
        fig, axes = panel_grid(len(panel_groups), width=5.4)
        targets = sorted(table["target_precision"].unique(), reverse=True)
        colour = dict(zip(targets, colours(len(targets))))
        for (key, panel_table), ax in zip(panel_groups, axes):
            for rank, beta in enumerate(targets):
                curve = panel_table[panel_table["target_precision"] == beta]
                if curve.empty:
                    continue
                errorbar(ax, curve["p"].to_numpy() + dodge(rank, len(targets)),
                         curve["accuracy"].to_numpy(),
                         curve["ci_low"].to_numpy(float), curve["ci_high"].to_numpy(float),
                         fmt="o-", color=colour[beta], label=f"bound β = {beta:g}")
            title = " · ".join(str(k) for k in key)
            ax.set(title=title or None, xlabel="sampling probability p = P(x* ∈ D)",
                   ylabel=f"{name} test accuracy", xlim=(0, 1))
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8, title="U fixed at β (ε solved per p)", title_fontsize=8)
        fig.suptitle(f"{what} test accuracy against p at a fixed precision bound\n"
                     f"(Thudi et al. 2024, Fig. {5 if name == 'best' else 6}; "
                     f"bars: 95 % t interval over trials; β drawn {DODGE:g} apart along p)", fontsize=10)
        paths += [save_figure(fig, out_dir / f"fixed_bound_{name}_accuracy.png"),
                  write_csv(table, out_dir / f"fixed_bound_{name}_accuracy.csv")]
    return paths
