"""Jayaraman et al.: the `ppv` report, PPV against γ = non-members per member.

Writes the PNG and, next to it, a CSV with exactly the numbers drawn (long format: a ``series``
column says which line a row belongs to).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sweeper.bounds import jayaraman_ppv_bound, precision_bound
from sweeper.figures import errorbar, policy_label, save_figure
from sweeper.reports.report_registry import register_report
from sweeper.reports.stats import POOLED_TEXT, pooled_precision
from sweeper.reports.tables import (
    bound_settings,
    groups,
    is_oracle,
    not_tests,
    panel_columns,
    privacy_keys,
    privacy_label,
    require,
    write_csv,
)

PPV_COLUMNS = ["attack", "policy", "epsilon", "delta", "trial", "gamma", "precision", "tp", "fp",
               "precision_ci_low", "precision_ci_high", "fpr", "tpr_floor", "bound_form"]


@register_report("ppv")
def ppv_report(frame: pd.DataFrame, out_dir: Path) -> list[Path]:
    """Jayaraman et al.: how an attack's PPV falls as members become rare (γ grows).

    PPV is the measured precision at the cell's own prior p = 1/(1 + γ): the sweep evaluates each
    target on a record set whose member share is the real p, so no re-weighting is involved.
    One panel per (policy, ε): attacks as colours, the prior 1/(1 + γ) (what always-member gets)
    dotted, Thudi et al.'s U at p = 1/(1 + γ) dashed, and Jayaraman et al.'s Theorem 4.2 bound
    at each attack's mean measured FPR as open markers (it is tighter than U when the FPR is
    large and meets U as the FPR vanishes).  Points: PPV pooled over trials, bars its exact
    Clopper–Pearson interval (`pooled_precision`), as in every figure.
    """
    require(frame, PPV_COLUMNS, "ppv")
    rows = frame[~frame["attack"].isin(not_tests()) & frame["gamma"].notna()]
    if rows.empty:
        raise ValueError("ppv report: the results table has no attack rows with a gamma")
    out_dir = Path(out_dir)
    panels = panel_columns(rows, ["policy"])
    several_deltas = rows["delta"].nunique() > 1
    attacks = list(dict.fromkeys(rows["attack"]))
    colour = {a: f"C{i}" for i, a in enumerate(attacks)}
    records = []
    layout: list[tuple[dict[str, Any], float, float]] = []
    for key, panel_rows in groups(rows, panels):
        panel = dict(zip(panels, key))
        panel["oracle"] = is_oracle(panel_rows)
        floor, form = bound_settings(panel_rows)
        for eps, delta in privacy_keys(panel_rows):
            layout.append((panel, eps, delta))
            at = panel_rows[(panel_rows["epsilon"] == eps) & (panel_rows["delta"] == delta)]
            gammas = np.sort(at["gamma"].unique())
            base = {**panel, "epsilon": eps, "delta": delta}
            for attack, by_attack in at.groupby("attack", sort=False):
                for gamma, cell in by_attack.groupby("gamma", sort=True):
                    spread = pooled_precision(cell)
                    fpr = float(cell["fpr"].mean())
                    records.append({**base, "series": str(attack), "gamma": float(gamma),
                                    "fpr_mean": fpr, **spread})
                    records.append({**base, "series": f"Jayaraman bound at FPR ({attack})",
                                    "gamma": float(gamma), "fpr_mean": fpr,
                                    "value": float(jayaraman_ppv_bound(eps, delta, fpr, gamma))
                                    if not math.isnan(fpr) else math.nan})
            low, high = float(gammas.min()), float(gammas.max())
            grid = np.unique(np.r_[np.geomspace(low / 1.5, high * 1.5, 120), gammas])
            for gamma in grid:
                p = 1.0 / (1.0 + gamma)
                records.append({**base, "series": "Thudi U", "gamma": float(gamma),
                                "tpr_floor": floor, "bound_form": form,
                                "value": float(precision_bound(eps, p, delta, floor, form=form))})
                records.append({**base, "series": "prior 1/(1+γ)", "gamma": float(gamma),
                                "value": p})
    table = pd.DataFrame(records)
    policies = list(dict.fromkeys(str(panel.get("policy")) for panel, _, _ in layout))
    columns = max(sum(1 for panel, _, _ in layout if str(panel.get("policy")) == pol)
                  for pol in policies)
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4.6 * columns, 4.2 * len(policies)))
    counters = {pol: 0 for pol in policies}
    for panel, eps, delta in layout:
        pol = str(panel.get("policy"))
        index = policies.index(pol) * columns + counters[pol] + 1
        counters[pol] += 1
        ax = fig.add_subplot(len(policies), columns, index)
        sel = table[(table["epsilon"] == eps) & (table["delta"] == delta)]
        for c in panels:
            sel = sel[sel[c] == panel[c]]
        for name, ls, color, label in (("Thudi U", "--", "black", "Thudi U at p=1/(1+γ)"),
                                       ("prior 1/(1+γ)", ":", "grey",
                                        "prior 1/(1+γ) (always member)")):
            curve = sel[sel["series"] == name]
            ax.plot(curve["gamma"], curve["value"], ls=ls, color=color, label=label)
        for attack in attacks:
            points = sel[sel["series"] == attack].dropna(subset=["value"])
            if points.empty:
                continue
            errorbar(ax, points["gamma"].to_numpy(), points["value"].to_numpy(),
                     points["low"].to_numpy(float), points["high"].to_numpy(float),
                     fmt="o-", color=colour[attack], label=attack)
            jay = sel[sel["series"] == f"Jayaraman bound at FPR ({attack})"]
            ax.scatter(jay["gamma"], jay["value"], marker="^", facecolors="none",
                       edgecolors=colour[attack], s=40,
                       label=f"Jayaraman bound at {attack}'s FPR")
        head = " · ".join(str(panel[c]) for c in panels if c != "policy")
        title = policy_label(panel.get("policy"), panel["oracle"])
        title = f"{title}\n{privacy_label(eps, delta, several_deltas)}" + (f" · {head}" if head else "")
        ax.set(xscale="log", title=title, ylim=(0, 1.02),
               xlabel="γ = non-members per member = (1 − p)/p", ylabel="PPV (measured precision)")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=6, loc="lower left")
    fig.suptitle("Attack PPV against the prior γ = non-members per member\n"
                 f"(Jayaraman et al.), with the DP bounds\n{POOLED_TEXT}", fontsize=10)
    return [save_figure(fig, out_dir / "ppv_vs_gamma.png"), write_csv(table, out_dir / "ppv_vs_gamma.csv")]
