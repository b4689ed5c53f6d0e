"""The `audit` report (+experiment=dpsgd_audit): what canary audits prove about our DP engine.

Two figures, each with a CSV of exactly the numbers drawn:

* ``audit_epsilon.png`` — the ε each audit proves against the ε claimed, pooled over trials
  (every target's canaries are independent observations of the same mechanism, so the trials'
  per-record scores are joined and audited once: 5 trials × 4 000 canaries = 20 000
  observations), one panel per p.  The diagonal is a tight audit; a point above it is a bug.
  The Gaussian-DP audit is drawn filled only where it is a proof (full-batch training, q = 1).
  A grey line is the last iterate's heuristic ε (Steinke et al. 2025, `epsilon_last_iterate`):
  what an audit that sees only the final model could reach at best.  ``audit_threat_models.csv``
  puts, per (ε, p), the accountant's ε, that heuristic and the best valid audit of each threat
  model side by side.
* ``audit_precision.png`` — precision against p, one panel per ε: each attack's pooled
  precision at its cell's operating point with the exact (Clopper–Pearson) interval of the
  pooled TP/(TP + FP), Thudi et al.'s U and `bound_profile`, the least U over the training's
  whole privacy profile.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

from jobs.attacks.contract import ATTACKS, TRAINING_RUNS
from sweeper.bounds.audit_columns import (Training, audit_epsilons, best_valid,
                                          gdp_estimate_uncorrected, last_iterate, profile_bound,
                                          valid_audits)
from sweeper.bounds import epsilon_one_run_fdp, one_run_ceiling, precision_bound
from sweeper.figures import DODGE, dodge, errorbar, panel_grid, save_figure
from sweeper.reports.loading import load_scores
from sweeper.reports.report_registry import register_report
from sweeper.reports.stats import pooled_precision
from sweeper.reports.tables import not_tests, require, write_csv

AUDIT_COLUMNS = ["attack", "policy", "epsilon", "delta", "p", "trial", "threat_model", "tp", "fp",
                 "audit_alpha", "noise_multiplier", "dp_sample_rate", "steps", "epsilon_spent",
                 "tpr_floor", "bound_form", "scores_key"]
ESTIMATORS = {"epsilon_audit_cp": "Clopper–Pearson", "epsilon_audit_gdp": "Gaussian DP",
              "epsilon_audit_one_run": "one run", "epsilon_audit_one_run_fdp": "one run, f-DP",
              "epsilon_audit_family": "DP-SGD family",
              "epsilon_audit_family_lr": "DP-SGD family, LR law",
              "epsilon_audit_final_law": "final model, its law",
              "estimate_gdp_uncorrected": "Gaussian DP, thresholds uncorrected (the paper's estimate)"}
MARKERS = {"epsilon_audit_cp": "o", "epsilon_audit_gdp": "s", "epsilon_audit_one_run": "^",
           "epsilon_audit_one_run_fdp": "v", "epsilon_audit_family": "D",
           "epsilon_audit_family_lr": "P", "epsilon_audit_final_law": "X",
           "estimate_gdp_uncorrected": "*"}


def training_of_row(row: pd.Series) -> Training:
    """What a results row says of its target's training (`Training`); rows from before the
    optimizer and momentum columns give no final-model law."""
    return Training(float(row["noise_multiplier"]), float(row["dp_sample_rate"]),
                    int(row["steps"]),
                    Training.sums_steps(row.get("optimizer"), row.get("momentum")))


def pooled_audits(frame: pd.DataFrame, scores: pd.DataFrame) -> pd.DataFrame:
    """One row per (ε, δ, p, attack, policy): every trial's scores joined, then audited."""
    rows = []
    keys = ["epsilon", "delta", "p", "attack", "policy"]
    for key, cells in frame.groupby(keys, sort=True):
        joined = scores[scores["scores_key"].isin(cells["scores_key"])
                        & (scores["policy"] == key[4])].drop_duplicates(["scores_key", "record_id"])
        first = cells.iloc[0]
        training = training_of_row(first)
        attack = ATTACKS[key[3]]
        ratio, final = attack.scores_likelihood_ratio, attack.scores_final_displacement
        alpha = float(first["audit_alpha"])
        proven = audit_epsilons(joined["score"].to_numpy(float), joined["member"].to_numpy(bool),
                                p=key[2], delta=key[1], alpha=alpha,
                                family=training if attack.independent else None,
                                likelihood_ratio=ratio, final_displacement=final)
        valid = valid_audits(training, attack.independent, likelihood_ratio=ratio,
                             final_displacement=final)
        best = best_valid(proven, valid)
        # Annamalai & De Cristofaro's own estimate, beside the proofs of their protocol's runs.
        estimate = (gdp_estimate_uncorrected(joined["score"].to_numpy(float),
                                             joined["member"].to_numpy(bool), delta=key[1])
                    if attack.evaluates == TRAINING_RUNS else math.nan)
        # What a perfect attack would prove by one run's guesses on as many observations: an
        # audit below the claim says nothing of a claim above its ceiling.
        ceilings = {f"ceiling_{name}": one_run_ceiling(len(joined), delta=key[1], alpha=alpha,
                                                       p=key[2], rule=rule)
                    for name, rule in (("one_run", None), ("one_run_fdp", epsilon_one_run_fdp))}
        rows.append({**dict(zip(keys, key)), "threat_model": first["threat_model"],
                     "trials": len(cells), "observations": len(joined),
                     "members": int(joined["member"].sum()), **proven, **ceilings,
                     "valid": "+".join(name.replace("epsilon_audit_", "") for name in valid),
                     "epsilon_audit_best": best, "estimate_gdp_uncorrected": estimate,
                     "ratio": best / key[0] if math.isfinite(key[0]) else math.nan,
                     "epsilon_spent_max": float(cells["epsilon_spent"].max()),
                     "epsilon_last_iterate": last_iterate(training, key[1])})
    return pd.DataFrame(rows)


#: Per (ε, δ, p): both ceilings and the best valid audit of each threat model (`threat_model_table`).
THREAT_MODELS_CSV = "audit_threat_models.csv"


def threat_model_summary(paths: list[Path]) -> Optional[str]:
    """What a sweep prints of its audits under the frontier: per claimed ε (and δ, p), the
    accountant's ε, the last iterate's heuristic ε and the best valid audit in each threat
    model, from the `THREAT_MODELS_CSV` among `paths` (None where there is none)."""
    found = [path for path in paths if Path(path).name == THREAT_MODELS_CSV]
    if not found:
        return None
    table = pd.read_csv(found[0])
    threat_models = [column for column in table if column.startswith("best_audit_")]
    shown = pd.DataFrame({"ε": table["epsilon"].map("{:g}".format),
                          "δ": table["delta"].map("{:g}".format),
                          "p": table["p"].map("{:g}".format),
                          "ε spent": table["epsilon_spent_max"].map(_two_places),
                          "ε last iterate": table["epsilon_last_iterate"].map(_two_places)})
    for column in threat_models:
        shown[column.removeprefix("best_audit_")] = table[column].map(_two_places)
    if "estimate_gdp_uncorrected" in table:  # the black-box runs' estimate, as papers report it
        shown["estimate (not a proof)"] = table["estimate_gdp_uncorrected"].map(_two_places)
    return ("Audits by threat model: the best valid audit's ε in each, against ε spent (the\n"
            "accountant's, every iterate released) and ε last iterate (Steinke et al.'s heuristic\n"
            "for the final model alone: the ceiling of final-model audits, not a proof)\n"
            + shown.to_string(index=False) + f"\n(table: {found[0]})")


def _two_places(value: float) -> str:
    return "–" if pd.isna(value) else f"{value:.2f}"


@register_report("audit", reads_scores=True, summary=threat_model_summary)
def audit_report(frame: pd.DataFrame, out_dir: Path, store_root: Path) -> list[Path]:
    """Audit ε against claimed ε, and precision against p with U and `bound_profile`."""
    require(frame, AUDIT_COLUMNS, "audit")
    rows = frame[~frame["attack"].isin(not_tests()) & np.isfinite(frame["epsilon"])]
    if rows.empty:
        raise ValueError("audit report: no finite-ε attack cells")
    out_dir = Path(out_dir)
    table = pooled_audits(rows, load_scores(rows, store_root))
    return [*_epsilon_figure(table, out_dir), *_precision_figure(rows, out_dir)]


def _epsilon_figure(table: pd.DataFrame, out_dir: Path) -> list[Path]:
    return [save_figure(audit_epsilon_figure(table), out_dir / "audit_epsilon.png", layout=False),
            write_csv(table, out_dir / "audit_epsilon.csv"),
            write_csv(threat_model_table(table), out_dir / THREAT_MODELS_CSV)]


def threat_model_table(table: pd.DataFrame) -> pd.DataFrame:
    """Per (ε, δ, p): the accountant's ε (every iterate released), the last iterate's heuristic
    ε (the final model alone) and the best valid audit in each threat model, from
    `pooled_audits`'s table: what each attacker provably reaches against both ceilings."""
    keys = ["epsilon", "delta", "p"]
    best = table.pivot_table(index=keys, columns="threat_model", values="epsilon_audit_best",
                             aggfunc="max").add_prefix("best_audit_")
    ceilings = table.groupby(keys)[["epsilon_spent_max", "epsilon_last_iterate"]].max()
    joined = ceilings.join(best)
    if "estimate_gdp_uncorrected" in table and table["estimate_gdp_uncorrected"].notna().any():
        # the black-box runs' uncorrected estimate (an estimate, not a proof), as papers report it
        joined = joined.join(table.groupby(keys)[["estimate_gdp_uncorrected"]].max())
    return joined.reset_index()


def audit_epsilon_figure(table: pd.DataFrame):
    """The ε each audit proves against the ε claimed, one panel per p, from `pooled_audits`'s
    table (or its CSV): a matplotlib Figure, laid out, not saved.

    Colour is the attack, marker the estimator, filled a proof and hollow an estimate, so one
    legend of attacks plus estimators (not one entry per pair) sits below the panels.  Each
    claimed ε is its own training: its points stand alone, never joined to the next ε's, and
    the attacks sit side by side around it so points at one value do not hide each other."""
    from matplotlib.lines import Line2D

    ps = sorted(table["p"].unique(), reverse=True)
    fig, axes = panel_grid(len(ps), width=5.6, height=4.4, sharey=True)
    attacks = list(dict.fromkeys(table["attack"]))
    claimed = sorted(table["epsilon"].unique())
    top = float(table["epsilon"].max())
    shown: dict[str, str] = {}  # estimator column → its name, for those some panel draws
    shows_ceiling = False
    for ax, p in zip(axes, ps):
        at = table[table["p"] == p]
        ax.plot([0, top * 1.1], [0, top * 1.1], ls="--", color="black", lw=1)
        ceiling = at.drop_duplicates("epsilon")
        if "epsilon_last_iterate" in ceiling and ceiling["epsilon_last_iterate"].notna().any():
            # One bar per claimed ε, as wide as its attacks' points: each ε its own training.
            half = (abs(dodge(0, len(attacks))) + DODGE) * top * 1.5
            ax.hlines(ceiling["epsilon_last_iterate"], ceiling["epsilon"] - half,
                      ceiling["epsilon"] + half, color="grey", lw=2.5, alpha=0.6)
            shows_ceiling = True
        for index, attack in enumerate(attacks):
            of = at[at["attack"] == attack]
            x = of["epsilon"].to_numpy(float) + dodge(index, len(attacks)) * top * 1.5
            for column, name in ESTIMATORS.items():
                if column not in of:  # a table written before this estimator existed
                    continue
                values = of[column].to_numpy(float)
                if np.isnan(values).all():
                    continue
                shown[column] = name
                proof = np.array([column.replace("epsilon_audit_", "") in v.split("+")
                                  for v in of["valid"]])
                ax.scatter(x, values, marker=MARKERS[column], s=22, linewidths=0.9,
                           edgecolors=f"C{index}",
                           facecolors=[f"C{index}" if filled else "none" for filled in proof])
        ax.set(title=f"p = {p:g}", xlabel="claimed ε (the training's target)",
               xlim=(0, top * 1.1), ylim=(-0.03 * top, top * 1.05), xticks=claimed)
        ax.tick_params(labelleft=True)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("audit ε (a lower bound on the true ε)")
    fig.suptitle(f"Canary audits of the DP engine: ε proven at confidence {1 - _alpha(table):.0%}"
                 " against ε claimed, trials pooled", fontsize=10)
    fig.tight_layout()
    handles = [Line2D([], [], ls="--", color="black", lw=1),
               *([Line2D([], [], color="grey", lw=2.5, alpha=0.6)] if shows_ceiling else []),
               *(Line2D([], [], color=f"C{index}", lw=5) for index in range(len(attacks))),
               *(Line2D([], [], ls="none", marker=MARKERS[column], color="black")
                 for column in shown)]
    labels = ["audit ε = claimed ε (a tight audit)",
              *(["last-iterate heuristic ε (final-model ceiling)"] if shows_ceiling else []),
              *attacks, *shown.values()]
    legend = fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=3,
               fontsize=7.5, frameon=False, title_fontsize=7.5, alignment="center",
               title="A filled point above the diagonal is a DP bug.  Colour: the attack; marker: "
                     "the audit; filled: a proof,\nhollow: an estimate (Clopper–Pearson and "
                     "Gaussian DP on records of one model, Gaussian DP where q < 1)")
    legend.get_title().set_multialignment("center")
    return fig


def _alpha(table: pd.DataFrame) -> float:
    return 0.05 if "audit_alpha" not in table else float(table["audit_alpha"].iloc[0])


def _precision_figure(rows: pd.DataFrame, out_dir: Path) -> list[Path]:
    records = []
    for (eps, delta), at in rows.groupby(["epsilon", "delta"], sort=True):
        training = training_of_row(at.iloc[0])
        first = at.iloc[0]
        floor, form = float(first["tpr_floor"]), str(first["bound_form"])
        base = {"epsilon": eps, "delta": delta}
        for (attack, p), cells in at.groupby(["attack", "p"], sort=False):
            records.append({**base, "series": attack, "p": p, **pooled_precision(cells)})
        for p in np.linspace(0.02, 0.98, 49):
            records.append({**base, "series": "Thudi U", "p": p,
                            "value": float(precision_bound(eps, p, delta, floor, form=form))})
            records.append({**base, "series": "bound_profile", "p": p,
                            "value": profile_bound(training, p, floor, form)})
            records.append({**base, "series": "prior p", "p": p, "value": p})
    table = pd.DataFrame(records)
    privacy = list(dict.fromkeys(zip(table["epsilon"], table["delta"])))
    fig, axes = panel_grid(len(privacy), width=4.6, height=4.2, columns=4)
    attacks = [s for s in dict.fromkeys(table["series"])
               if s not in ("Thudi U", "bound_profile", "prior p")]
    for ax, (eps, delta) in zip(axes, privacy):
        sel = table[(table["epsilon"] == eps) & (table["delta"] == delta)]
        for name, style in (("Thudi U", dict(ls="--", color="black", label="Thudi U at (ε, δ)")),
                            ("bound_profile", dict(ls="-", color="black", lw=1.4,
                                                   label="bound_profile (whole δ(ε′))")),
                            ("prior p", dict(ls=":", color="grey", label="prior p"))):
            curve = sel[sel["series"] == name]
            ax.plot(curve["p"], curve["value"], **style)
        for index, attack in enumerate(attacks):
            points = sel[sel["series"] == attack].dropna(subset=["value"]).sort_values("p")
            if not points.empty:
                errorbar(ax, points["p"].to_numpy(float), points["value"].to_numpy(float),
                         points["low"].to_numpy(float), points["high"].to_numpy(float),
                         fmt="o", color=f"C{index}", label=attack)
        ax.set(title=f"ε = {eps:g}, δ = {delta:g}", xlabel="p = P(x* in the training set)",
               ylabel="precision (trials pooled)", xlim=(0, 1), ylim=(0, 1.02))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="lower right")
    fig.suptitle("Precision of canary and average-record attacks against the bounds\n"
                 "(bars: 95 % Clopper–Pearson interval of the pooled TP/(TP+FP) over trials)",
                 fontsize=10)
    return [save_figure(fig, out_dir / "audit_precision.png"),
            write_csv(table, out_dir / "audit_precision.csv")]
