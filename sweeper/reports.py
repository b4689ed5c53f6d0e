"""Per-experiment reports: each paper's own figures, redrawn from a sweep's results table.

Why not just the frontier.  `sweeper.frontier` answers the product's question (is any measured
precision above U?) the same way for every sweep.  Each paper that an experiment reproduces asks a
narrower question and shows it in its own figure, and a reader comparing our numbers with theirs
needs that figure, axes and all:

- ``thudi_lira``: Thudi et al. (TMLR 2024) Figure 3 (precision against p per ε, with U and the
  always-member baseline) and Figure 4 (improvement over that baseline, with 95 % intervals);
- ``fixed_bound``: their Figures 5–6 (best and final test accuracy against p at a fixed U);
- ``ppv``: Jayaraman et al. (PPV against γ = non-members per member, per attack);
- ``pdtp``: Long et al. (per-record PDTP against per-record attack accuracy, with correlations);
- ``generalization``: Yeom et al. (the loss attack's advantage at Yeom's threshold and at the best
  one against the 0–1 generalization gap; Adversary 1 against its Theorem 2 line).

Every report writes PNGs and, next to each, a CSV with exactly the numbers drawn (long format: a
``series`` column says which line a row belongs to), so a figure can be checked or redrawn
without this code.  Figures are drawn on the Agg canvas directly (no pyplot, no global backend),
as `sweeper.bounds.plots` does, so reports work headless and in worker processes.

A report given a table without the columns it needs raises ValueError naming every missing
column: a sweep of another experiment should fail loudly, not draw an empty or misleading figure.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional, Sequence

import numpy as np
import pandas as pd
from scipy.stats import t as student_t

from jobs.pdtp import TABLE_COLUMNS as PDTP_TABLE_COLUMNS
from sweeper.bounds import jayaraman_ppv_bound, precision_bound
from sweeper.figures import save_figure
from sweeper.formats import format_epsilon
from sweeper.store import ArtifactStore

if TYPE_CHECKING:  # drawn lazily: matplotlib is imported only where a figure is made
    from matplotlib.figure import Figure

__all__ = [
    "REPORTS",
    "frontier_report",
    "thudi_lira_report",
    "fixed_bound_report",
    "ppv_report",
    "pdtp_report",
    "generalization_report",
    "load_scores",
    "load_target_scores",
    "load_pdtp_values",
    "improvement_interval",
    "per_record_accuracy",
]

#: Normal quantile of a two-sided 95 % interval (the papers' "95 % confidence interval").
def _t95(n: int) -> float:
    """Student's t quantile for a 95 % interval of a mean over n trials (n − 1 degrees of freedom).

    Not the normal 1.96: with the few trials sweeps afford (2 to 5) it would be far too narrow.
    """
    return float(student_t.ppf(0.975, n - 1))

BASELINE_ATTACK = "always_member"
PDTP_ATTACK = "pdtp"
LOSS_ATTACK = "loss"
ORACLE_POLICY = "quantile_max"

#: Attacks that are not membership tests with a precision of their own: the baseline (drawn as
#: its own line) and PDTP (a per-record measure).
NOT_TESTS = (BASELINE_ATTACK, PDTP_ATTACK)


# --------------------------------------------------------------------------- shared helpers


def _require(frame: pd.DataFrame, columns: Iterable[str], report: str,
             what: str = "results table") -> None:
    """Refuse a table that lacks columns, naming all of them at once."""
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{report} report: the {what} lacks column(s) {', '.join(missing)}")


def _write_csv(table: pd.DataFrame, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(path, index=False)
    return path


def _is_oracle(rows: pd.DataFrame) -> bool:
    """Whether these rows' thresholds were chosen on the target's own labels.

    The results table says so per row (`policy_uses_target_labels`); older tables without it
    fall back to the one policy known to be an oracle.
    """
    if "policy_uses_target_labels" in rows.columns:
        return bool(rows["policy_uses_target_labels"].fillna(False).astype(bool).any())
    return bool((rows.get("policy", pd.Series(dtype=object)) == ORACLE_POLICY).any())


def _policy_label(policy: Any, oracle: bool) -> str:
    return f"{policy} (oracle: uses target labels)" if oracle else str(policy)


def _panel_columns(frame: pd.DataFrame, inner: Sequence[str]) -> list[str]:
    """Panel identity: `inner`, preceded by dataset/model only where the sweep varies them."""
    outer = [c for c in ("dataset", "model") if c in frame.columns and frame[c].nunique() > 1]
    return outer + [c for c in inner if c in frame.columns]


def _groups(frame: pd.DataFrame, columns: Sequence[str]) -> list[tuple[tuple, pd.DataFrame]]:
    """Groups in order of first appearance (stable panels), NaN keys kept."""
    if not columns:
        return [((), frame)]
    out = []
    for key, rows in frame.groupby(list(columns), sort=False, dropna=False):
        out.append((key if isinstance(key, tuple) else (key,), rows))
    return out


def _privacy_keys(frame: pd.DataFrame) -> list[tuple[float, float]]:
    pairs = frame[["epsilon", "delta"]].drop_duplicates()
    return sorted((float(e), float(d)) for e, d in pairs.itertuples(index=False))


def _privacy_label(eps: float, delta: float, several_deltas: bool) -> str:
    return f"ε={format_epsilon(eps)}, δ={delta:g}" if several_deltas else f"ε={format_epsilon(eps)}"


def _colours(count: int) -> np.ndarray:
    from matplotlib import colormaps

    return colormaps["viridis"](np.linspace(0.0, 0.9, max(count, 1)))


def _bound_settings(rows: pd.DataFrame) -> tuple[float, str]:
    """The TPR floor and bound form these rows were computed with (loosest floor if mixed)."""
    forms = rows["bound_form"].dropna()
    return float(rows["tpr_floor"].max()), str(forms.iloc[0]) if len(forms) else "derived"


def _trial_spread(rows: pd.DataFrame, value: str, low: str, high: str) -> dict[str, float]:
    """Mean over trials and the error bar drawn for it.

    Why two rules: with several trials the bar shows how much trials disagree (± one sample
    standard deviation), which is the variation a reader of Thudi et al.'s averaged curves needs;
    with one trial there is no spread, so the bar is that trial's own 95 % Clopper–Pearson
    interval (the uncertainty of a precision on few positives).  Trials whose value is NaN (an
    attack that accepted nobody has no precision) are left out and not counted.
    """
    rows = rows[rows[value].notna()]
    n = len(rows)
    if n == 0:
        return {"value": math.nan, "low": math.nan, "high": math.nan, "sd": math.nan,
                "n_trials": 0, "error_bar": "none"}
    values = rows[value].to_numpy(float)
    mean = float(values.mean())
    if n == 1:
        return {"value": mean, "low": float(rows[low].iloc[0]), "high": float(rows[high].iloc[0]),
                "sd": math.nan, "n_trials": 1, "error_bar": "clopper-pearson"}
    sd = float(values.std(ddof=1))
    return {"value": mean, "low": mean - sd, "high": mean + sd, "sd": sd, "n_trials": n,
            "error_bar": "sd over trials"}


def _errorbar(ax: Any, x: np.ndarray, y: np.ndarray, low: np.ndarray, high: np.ndarray,
              **style: Any) -> None:
    """An error bar from absolute ends; a NaN end draws no bar."""
    below = np.where(np.isnan(low), 0.0, y - low)
    above = np.where(np.isnan(high), 0.0, high - y)
    ax.errorbar(x, y, yerr=[below, above], capsize=3, **style)


#: How far apart along p the points of different series are drawn, so their bars do not hide
#: each other (the CSVs keep the exact p).
DODGE = 0.012


def _dodge(rank: int, count: int) -> float:
    """The offset along p of series `rank` of `count`, centred on the true p."""
    return (rank - (count - 1) / 2) * DODGE


def _p_grid(data_p: Iterable[float]) -> np.ndarray:
    """Where bound curves are evaluated: a fine grid plus the sweep's own p (exact there)."""
    return np.unique(np.r_[np.linspace(0.01, 0.99, 99), np.asarray(list(data_p), float)])


# --------------------------------------------------------------------------- frontier


FRONTIER_COLUMNS = ["attack", "epsilon", "delta", "p", "precision", "precision_ci_low",
                    "precision_ci_high", "violation", "tpr_floor", "bound_form"]


def frontier_report(frame: pd.DataFrame, out_dir: Path) -> list[Path]:
    """The generic frontier, so every experiment's report set includes the product's question.

    Drawing is delegated to `sweeper.frontier.plot_frontier` so the two never disagree; the CSV
    holds the per-(attack, ε, p) means that function draws, with the bound at each point.
    """
    from sweeper.frontier import plot_frontier

    _require(frame, FRONTIER_COLUMNS, "frontier")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    png = plot_frontier(frame, out_dir / "frontier.png")
    cells = frame[frame["precision"].notna() | (frame["attack"] == BASELINE_ATTACK)]
    table = (cells.groupby(["attack", "epsilon", "delta", "p"], sort=True)
             .agg(precision=("precision", "mean"), precision_ci_low=("precision_ci_low", "mean"),
                  precision_ci_high=("precision_ci_high", "mean"),
                  violation=("violation", "any"), n_trials=("precision", "count"))
             .reset_index())
    floor, form = _bound_settings(cells if not cells.empty else frame)
    table["bound"] = [float(precision_bound(e, p, d, floor, form=form))
                      for e, d, p in zip(table["epsilon"], table["delta"], table["p"])]
    return [png, _write_csv(table, out_dir / "frontier.csv")]


# --------------------------------------------------------------------------- Thudi et al.


THUDI_COLUMNS = ["attack", "policy", "epsilon", "delta", "p", "trial", "precision",
                 "precision_ci_low", "precision_ci_high", "baseline", "tpr_floor", "bound_form"]


def improvement_interval(precision: Sequence[float], baseline: Sequence[float],
                         ci_low: Sequence[float], ci_high: Sequence[float]) -> tuple[float, float, float, int]:
    """Mean improvement over the always-member baseline and its 95 % interval, per cell.

    Why paired differences: each trial's baseline is the member share of *its own* evaluated
    records, so d_i = precision_i − baseline_i removes the trial-to-trial wobble of the prior.
    With n ≥ 2 trials the interval is d̄ ± t(0.975, n − 1)·sd(d)/√n (sample sd, ddof = 1; Student's
    t rather than Thudi et al.'s normal 1.96, which is far too narrow for 2–5 trials).  With one trial there
    is no spread to use, and the baseline is a known share, not an estimate, so the interval is
    the precision's Clopper–Pearson interval shifted by it: [low − baseline, high − baseline].
    Trials with a NaN precision are left out.  Returns (mean, low, high, n).
    """
    prec = np.asarray(precision, float)
    base = np.asarray(baseline, float)
    keep = ~np.isnan(prec)
    d = prec[keep] - base[keep]
    n = int(d.size)
    if n == 0:
        return math.nan, math.nan, math.nan, 0
    mean = float(d.mean())
    if n == 1:
        low = float(np.asarray(ci_low, float)[keep][0] - base[keep][0])
        high = float(np.asarray(ci_high, float)[keep][0] - base[keep][0])
        return mean, low, high, 1
    half = _t95(n) * float(d.std(ddof=1)) / math.sqrt(n)
    return mean, mean - half, mean + half, n


def _thudi_tables(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The numbers of Figures 3 and 4, long format, one row per plotted point."""
    attacks = frame[~frame["attack"].isin(NOT_TESTS)]
    if attacks.empty:
        raise ValueError("thudi_lira report: the results table has no attack rows besides "
                         f"{', '.join(NOT_TESTS)}")
    panels = _panel_columns(frame, ["attack", "policy"])
    several_deltas = frame["delta"].nunique() > 1
    fig3, fig4 = [], []
    for key, rows in _groups(attacks, panels):
        panel = dict(zip(panels, key))
        panel["oracle"] = _is_oracle(rows)
        floor, form = _bound_settings(rows)
        for eps, delta in _privacy_keys(rows):
            at = rows[(rows["epsilon"] == eps) & (rows["delta"] == delta)]
            label = _privacy_label(eps, delta, several_deltas)
            for p, cell in at.groupby("p", sort=True):
                spread = _trial_spread(cell, "precision", "precision_ci_low", "precision_ci_high")
                fig3.append({**panel, "series": "precision", "label": label, "epsilon": eps,
                             "delta": delta, "p": float(p), **spread})
                mean, low, high, n = improvement_interval(
                    cell["precision"], cell["baseline"], cell["precision_ci_low"],
                    cell["precision_ci_high"])
                fig4.append({**panel, "series": "improvement", "label": label, "epsilon": eps,
                             "delta": delta, "p": float(p), "value": mean, "low": low,
                             "high": high, "n_trials": n,
                             "interval": "clopper-pearson" if n == 1 else "normal over trials"})
            for p in _p_grid(at["p"]):
                fig3.append({**panel, "series": "bound U", "label": f"U, {label}", "epsilon": eps,
                             "delta": delta, "p": float(p), "tpr_floor": floor, "bound_form": form,
                             "value": float(precision_bound(eps, p, delta, floor, form=form))})
        for p, cell in rows.groupby("p", sort=True):
            fig3.append({**panel, "series": "always-member baseline", "label": "always member",
                         "p": float(p), "value": float(cell["baseline"].mean()),
                         "n_trials": int(cell["baseline"].notna().sum())})
            if len(_privacy_keys(rows)) > 1:  # the paper's Figure 4: pooled over ε and trials
                mean, low, high, n = improvement_interval(
                    cell["precision"], cell["baseline"], cell["precision_ci_low"],
                    cell["precision_ci_high"])
                fig4.append({**panel, "series": "improvement, all ε pooled", "label": "all ε",
                             "p": float(p), "value": mean, "low": low, "high": high,
                             "n_trials": n,
                             "interval": "clopper-pearson" if n == 1 else "normal over trials"})
    return pd.DataFrame(fig3), pd.DataFrame(fig4)


def _panel_title(panel: dict[str, Any], panels: Sequence[str]) -> str:
    parts = [str(panel[c]) for c in panels if c not in ("policy",)]
    if "policy" in panels:
        parts.append(_policy_label(panel["policy"], panel.get("oracle", False)))
    return "\n".join([" · ".join(parts[:-1]), parts[-1]]) if len(parts) > 1 else parts[0]


def _panel_grid(count: int, width: float = 4.8, height: float = 4.2,
                columns: int = 3) -> tuple[Figure, list[Any]]:
    from matplotlib.figure import Figure

    cols = min(count, columns)
    rows = math.ceil(count / cols)
    fig = Figure(figsize=(width * cols, height * rows))
    axes = [fig.add_subplot(rows, cols, i + 1) for i in range(count)]
    return fig, axes


def thudi_lira_report(frame: pd.DataFrame, out_dir: Path) -> list[Path]:
    """Thudi et al. (2024) Figures 3 and 4: sampling, more than ε, limits what an attack gains.

    Figure 3 puts each attack's precision (mean over trials; bars: sd over trials, or the one
    trial's Clopper–Pearson interval) next to U for every ε and the always-member baseline, so
    the reader sees how close real attacks come to the bound.  Figure 4 plots the gain over the
    baseline alone (see `improvement_interval`), where the paper's point — little gain at low and
    high p — is visible; it adds the paper's own curve, pooled over ε and trials, when the sweep
    has several ε.  One panel per attack and policy; the oracle policy is labelled as such.
    """
    _require(frame, THUDI_COLUMNS, "thudi_lira")
    out_dir = Path(out_dir)
    fig3, fig4 = _thudi_tables(frame)
    panels = _panel_columns(frame, ["attack", "policy"])
    keys = [k for k, _ in _groups(fig4, panels)]
    eps_keys = sorted({(e, d) for e, d in fig4[["epsilon", "delta"]].dropna().itertuples(index=False)})
    colour = dict(zip(eps_keys, _colours(len(eps_keys))))

    figure3, axes3 = _panel_grid(len(keys))
    figure4, axes4 = _panel_grid(len(keys))
    for key, ax3, ax4 in zip(keys, axes3, axes4):
        match3 = (fig3[panels] == pd.Series(dict(zip(panels, key)))).all(axis=1)
        match4 = (fig4[panels] == pd.Series(dict(zip(panels, key)))).all(axis=1)
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
                _errorbar(ax3, points["p"].to_numpy() + _dodge(rank, len(colour)),
                          points["value"].to_numpy(), points["low"].to_numpy(float),
                          points["high"].to_numpy(float), fmt="o", linestyle="none", color=c,
                          label=points["label"].iloc[0])
            gain = rows4[(rows4["series"] == "improvement") & (rows4["epsilon"] == eps)
                         & (rows4["delta"] == delta)].dropna(subset=["value"])
            if not gain.empty:
                _errorbar(ax4, gain["p"].to_numpy(), gain["value"].to_numpy(),
                          gain["low"].to_numpy(float), gain["high"].to_numpy(float),
                          fmt="o-", color=c, label=gain["label"].iloc[0])
        base = rows3[rows3["series"] == "always-member baseline"]
        ax3.plot(base["p"], base["value"], "s:", color="grey", label="always member (baseline)")
        pooled = rows4[rows4["series"] == "improvement, all ε pooled"].dropna(subset=["value"])
        if not pooled.empty:
            _errorbar(ax4, pooled["p"].to_numpy(), pooled["value"].to_numpy(),
                      pooled["low"].to_numpy(float), pooled["high"].to_numpy(float),
                      fmt="D-", color="black", lw=2, label="all ε pooled (paper's Fig. 4)")
        ax4.axhline(0.0, color="grey", lw=0.8)
        title = _panel_title(panel, panels)
        for ax in (ax3, ax4):
            ax.set_title(title, fontsize=9)
        ax3.set(xlabel="sampling probability p = P(x* ∈ D)",
                ylabel="attack precision (mean over trials)", xlim=(0, 1), ylim=(0, 1.02))
        ax4.set(xlabel="sampling probability p = P(x* ∈ D)",
                ylabel="precision − always-member baseline", xlim=(0, 1))
        for ax in (ax3, ax4):
            ax.grid(alpha=0.3)
        ax3.legend(fontsize=7, loc="lower right", title_fontsize=7,
                   title="dashed: bound U per ε\nbars: ±1 sd over trials (1 trial: 95 % CP)\n"
                         "points of different ε drawn 0.012 apart along p")
        ax4.legend(fontsize=7, title="95 % intervals", title_fontsize=7)
    figure3.suptitle("Attack precision against sampling probability p, per ε,\n"
                     "with the bound U (Thudi et al. 2024, Fig. 3)", fontsize=10)
    figure4.suptitle("Attack precision minus the always-member baseline,\n"
                     "with 95 % intervals (Thudi et al. 2024, Fig. 4)", fontsize=10)
    return [save_figure(figure3, out_dir / "thudi_lira_precision.png"),
            _write_csv(fig3, out_dir / "thudi_lira_precision.csv"),
            save_figure(figure4, out_dir / "thudi_lira_improvement.png"),
            _write_csv(fig4, out_dir / "thudi_lira_improvement.csv")]


# --------------------------------------------------------------------------- fixed bound


FIXED_BOUND_COLUMNS = ["attack", "target_precision", "p", "trial", "best_test_accuracy",
                       "test_accuracy"]


def _one_attack(frame: pd.DataFrame) -> pd.DataFrame:
    """Accuracy is a property of the target model, repeated on every attack's row: keep one."""
    attacks = list(dict.fromkeys(frame["attack"]))
    chosen = BASELINE_ATTACK if BASELINE_ATTACK in attacks else attacks[0]
    rows = frame[frame["attack"] == chosen]
    keys = [c for c in ("dataset", "model", "target_precision", "p", "trial") if c in rows.columns]
    return rows.drop_duplicates(subset=keys)  # several policies share one target


def _mean_interval(values: np.ndarray) -> tuple[float, float, float, int]:
    """Mean over trials ± 1.96·sd/√n (the papers' 95 % interval over trials); none for n = 1."""
    values = values[~np.isnan(values)]
    n = int(values.size)
    if n == 0:
        return math.nan, math.nan, math.nan, 0
    mean = float(values.mean())
    if n == 1:
        return mean, math.nan, math.nan, 1
    half = _t95(n) * float(values.std(ddof=1)) / math.sqrt(n)
    return mean, mean - half, mean + half, n


def fixed_bound_report(frame: pd.DataFrame, out_dir: Path) -> list[Path]:
    """Thudi et al. (2024) Figures 5–6: at a fixed precision bound, which p trains best?

    Each target bound β fixes a curve of (p, ε) pairs with U(ε, p) = β; lower p buys larger ε.
    Plotting the accuracy those pairs reach (best over epochs, and final) against p shows whether
    sub-sampling is the cheaper way to a given privacy level.  Points: mean over trials, bars:
    95 % normal interval over trials (none with a single trial).
    """
    _require(frame, FIXED_BOUND_COLUMNS, "fixed_bound")
    rows = _one_attack(frame)
    rows = rows[rows["target_precision"].notna()]
    if rows.empty:
        raise ValueError("fixed_bound report: no rows with a target_precision")
    out_dir = Path(out_dir)
    panels = _panel_columns(rows, [])
    paths: list[Path] = []
    for column, name, what in (("best_test_accuracy", "best", "Best"),
                               ("test_accuracy", "final", "Final")):
        records = []
        for key, panel_rows in _groups(rows, panels):
            panel = dict(zip(panels, key))
            for (beta, p), cell in panel_rows.groupby(["target_precision", "p"], sort=True):
                mean, low, high, n = _mean_interval(cell[column].to_numpy(float))
                record = {**panel, "series": f"bound β = {beta:g}", "target_precision": float(beta),
                          "p": float(p), "accuracy": mean, "ci_low": low, "ci_high": high,
                          "n_trials": n}
                if "epsilon" in cell.columns:  # context: the ε the planner solved for (β, p)
                    record["epsilon"] = float(cell["epsilon"].mean())
                records.append(record)
        table = pd.DataFrame(records)
        groups = _groups(table, panels)
        fig, axes = _panel_grid(len(groups), width=5.4)
        targets = sorted(table["target_precision"].unique(), reverse=True)
        colour = dict(zip(targets, _colours(len(targets))))
        for (key, panel_table), ax in zip(groups, axes):
            for rank, beta in enumerate(targets):
                curve = panel_table[panel_table["target_precision"] == beta]
                if curve.empty:
                    continue
                _errorbar(ax, curve["p"].to_numpy() + _dodge(rank, len(targets)),
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
                     f"bars: 95 % t interval over trials; β drawn 0.012 apart along p)", fontsize=10)
        paths += [save_figure(fig, out_dir / f"fixed_bound_{name}_accuracy.png"),
                  _write_csv(table, out_dir / f"fixed_bound_{name}_accuracy.csv")]
    return paths


# --------------------------------------------------------------------------- Jayaraman et al.


PPV_COLUMNS = ["attack", "policy", "epsilon", "delta", "trial", "gamma", "precision",
               "precision_ci_low", "precision_ci_high", "fpr", "tpr_floor", "bound_form"]


def ppv_report(frame: pd.DataFrame, out_dir: Path) -> list[Path]:
    """Jayaraman et al.: how an attack's PPV falls as members become rare (γ grows).

    PPV is the measured precision at the cell's own prior p = 1/(1 + γ): the sweep evaluates each
    target on a record set whose member share is the real p, so no re-weighting is involved.
    One panel per (policy, ε): attacks as colours, the prior 1/(1 + γ) (what always-member gets)
    dotted, Thudi et al.'s U at p = 1/(1 + γ) dashed, and Jayaraman et al.'s Theorem 4.2 bound
    at each attack's mean measured FPR as open markers (it is tighter than U when the FPR is
    large and meets U as the FPR vanishes).  Points: mean over trials; bars as in Figure 3.
    """
    _require(frame, PPV_COLUMNS, "ppv")
    rows = frame[~frame["attack"].isin(NOT_TESTS) & frame["gamma"].notna()]
    if rows.empty:
        raise ValueError("ppv report: the results table has no attack rows with a gamma")
    out_dir = Path(out_dir)
    panels = _panel_columns(rows, ["policy"])
    several_deltas = rows["delta"].nunique() > 1
    attacks = list(dict.fromkeys(rows["attack"]))
    colour = {a: f"C{i}" for i, a in enumerate(attacks)}
    records = []
    layout: list[tuple[dict[str, Any], float, float]] = []
    for key, panel_rows in _groups(rows, panels):
        panel = dict(zip(panels, key))
        panel["oracle"] = _is_oracle(panel_rows)
        floor, form = _bound_settings(panel_rows)
        for eps, delta in _privacy_keys(panel_rows):
            layout.append((panel, eps, delta))
            at = panel_rows[(panel_rows["epsilon"] == eps) & (panel_rows["delta"] == delta)]
            gammas = np.sort(at["gamma"].unique())
            base = {**panel, "epsilon": eps, "delta": delta}
            for attack, by_attack in at.groupby("attack", sort=False):
                for gamma, cell in by_attack.groupby("gamma", sort=True):
                    spread = _trial_spread(cell, "precision", "precision_ci_low",
                                           "precision_ci_high")
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
        for name, style in (("Thudi U", dict(ls="--", color="black", label="Thudi U at p=1/(1+γ)")),
                            ("prior 1/(1+γ)", dict(ls=":", color="grey",
                                                   label="prior 1/(1+γ) (always member)"))):
            curve = sel[sel["series"] == name]
            ax.plot(curve["gamma"], curve["value"], **style)
        for attack in attacks:
            points = sel[sel["series"] == attack].dropna(subset=["value"])
            if points.empty:
                continue
            _errorbar(ax, points["gamma"].to_numpy(), points["value"].to_numpy(),
                      points["low"].to_numpy(float), points["high"].to_numpy(float),
                      fmt="o-", color=colour[attack], label=attack)
            jay = sel[sel["series"] == f"Jayaraman bound at FPR ({attack})"]
            ax.scatter(jay["gamma"], jay["value"], marker="^", facecolors="none",
                       edgecolors=colour[attack], s=40,
                       label=f"Jayaraman bound at {attack}'s FPR")
        head = " · ".join(str(panel[c]) for c in panels if c != "policy")
        title = _policy_label(panel.get("policy"), panel["oracle"])
        title = f"{title}\n{_privacy_label(eps, delta, several_deltas)}" + (f" · {head}" if head else "")
        ax.set(xscale="log", title=title, ylim=(0, 1.02),
               xlabel="γ = non-members per member = (1 − p)/p", ylabel="PPV (measured precision)")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=6, loc="lower left")
    fig.suptitle("Attack PPV against the prior γ = non-members per member\n"
                 "(Jayaraman et al.), with the DP bounds", fontsize=10)
    return [save_figure(fig, out_dir / "ppv_vs_gamma.png"), _write_csv(table, out_dir / "ppv_vs_gamma.csv")]


# --------------------------------------------------------------------------- Long et al.


PDTP_FRAME_COLUMNS = ["model_key", "attack", "policy", "epsilon", "delta", "p", "threshold"]
SCORES_COLUMNS = ["record_id", "score", "member", "model_key", "attack"]
PDTP_VALUES_COLUMNS = ["model_key", "record_id", "pdtp_seed_mean"]


def load_scores(frame: pd.DataFrame, store_root: str | Path) -> pd.DataFrame:
    """Every per-record score of the sweep's cells, one row per (cell, record).

    Scores are stored once per (attack, target) under `scores_key`, while a cell adds its policy
    and trial; joining on `scores_key` gives each cell its own copy of its attack's scores.
    """
    _require(frame, ["scores_key", "attack", "policy", "trial"], "pdtp")
    store = ArtifactStore(store_root)
    parts = []
    cells = frame[["scores_key", "policy", "trial"]].drop_duplicates()
    for scores_key, cell_rows in cells.groupby("scores_key", sort=False):
        try:
            scores = store.read_scores(scores_key)
        except FileNotFoundError:
            raise FileNotFoundError(f"pdtp report: per-record scores {scores_key} are missing "
                                    f"from {store.uri}/scores") from None
        parts.append(scores.merge(cell_rows.drop(columns="scores_key"), how="cross"))
    if not parts:
        return pd.DataFrame(columns=SCORES_COLUMNS + ["policy", "trial"])
    return pd.concat(parts, ignore_index=True)


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


def per_record_accuracy(cell_scores: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    """Long et al.'s per-target attack accuracy, one row per (`by`…, record).

    Definition: for a record, over every target (trial) of the group whose evaluation includes it,
    the share of targets on which the cell's decision was right, the decision being "member" iff
    score ≥ the cell's operating `threshold` (the one its policy chose; a NaN score is
    "non-member", as the attacks' own metrics count it) and "right" meaning it equals the
    record's true membership in that target.  Cells with a NaN threshold (per-class calibrated
    thresholds, which one number cannot reproduce) are left out.  Returns `accuracy` and
    `evaluations` (how many targets the share is over).
    """
    rows = cell_scores[cell_scores["threshold"].notna()]
    decision = (rows["score"].to_numpy(float) >= rows["threshold"].to_numpy(float))
    correct = decision == rows["member"].to_numpy(bool)
    table = rows[list(by) + ["record_id"]].assign(correct=correct.astype(float))
    out = (table.groupby(list(by) + ["record_id"], sort=True, dropna=False)["correct"]
           .agg(accuracy="mean", evaluations="count").reset_index())
    return out


def _correlations(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Pearson and Spearman; NaN when fewer than two points or either side is constant."""
    from scipy.stats import pearsonr, spearmanr

    if len(x) < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan, math.nan
    return float(pearsonr(x, y)[0]), float(spearmanr(x, y)[0])


def load_pdtp_values(frame: pd.DataFrame, store_root: str | Path) -> pd.DataFrame:
    """Long et al.'s per-record PDTP (the mean over seeds of per-seed PDTP values), per target.

    The pdtp attack's per-record score is our seed-averaged PDTP; the paper's estimator is only
    in the stored query answer (`jobs.pdtp.pdtp_table`), which each pdtp row names in
    `pdtp_query_key`.  Returns model_key, record_id, pdtp_seed_mean.
    """
    _require(frame, ["attack", "model_key", "pdtp_query_key"], "pdtp")
    store = ArtifactStore(store_root)
    rows = frame.loc[frame["attack"] == PDTP_ATTACK, ["model_key", "pdtp_query_key"]]
    parts = []
    for model_key, query_key in rows.dropna().drop_duplicates().itertuples(index=False):
        try:
            table = pd.DataFrame(store.read_query(query_key), columns=list(PDTP_TABLE_COLUMNS))
        except FileNotFoundError:
            raise FileNotFoundError(f"pdtp report: the PDTP table {query_key} is missing from "
                                    f"{store.uri}/queries") from None
        parts.append(pd.DataFrame({"model_key": model_key,
                                   "record_id": table["record_id"].astype(np.int64),
                                   "pdtp_seed_mean": table["seed_mean"]}))
    if not parts:
        return pd.DataFrame(columns=PDTP_VALUES_COLUMNS)
    return pd.concat(parts, ignore_index=True)


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
    _require(frame, PDTP_FRAME_COLUMNS, "pdtp")
    if scores is None or pdtp_values is None:
        if store_root is None:
            raise ValueError("pdtp report: needs the per-record scores and PDTP tables: pass "
                             "scores= (see load_scores) and pdtp_values= (see load_pdtp_values), "
                             "or store_root=")
        scores = load_scores(frame, store_root) if scores is None else scores
        pdtp_values = load_pdtp_values(frame, store_root) if pdtp_values is None else pdtp_values
    _require(scores, SCORES_COLUMNS, "pdtp", what="scores table")
    _require(pdtp_values, PDTP_VALUES_COLUMNS, "pdtp", what="per-record PDTP table")
    out_dir = Path(out_dir)
    joined = _cell_scores(frame, scores)
    group = [c for c in ("dataset", "model") if c in joined.columns] + ["epsilon", "delta", "p"]
    measured = joined[(joined["attack"] == PDTP_ATTACK) & joined["score"].notna()]
    if measured.empty:
        raise ValueError("pdtp report: no per-record PDTP scores (no pdtp cells in the sweep)")
    measured = measured.drop_duplicates(subset=["model_key", "record_id"])  # one per target
    ours = (measured.groupby(group + ["record_id"], sort=True)["score"]
            .agg(pdtp_seed_averaged="mean", pdtp_measurements="count").reset_index())
    targets = measured[group + ["model_key"]].drop_duplicates()
    papers = (pdtp_values.merge(targets, on="model_key", how="inner")
              .groupby(group + ["record_id"], sort=True)["pdtp_seed_mean"].mean().reset_index())
    attacked = joined[~joined["attack"].isin(NOT_TESTS)]
    accuracy = per_record_accuracy(attacked, group + ["attack", "policy"])
    points = (accuracy.merge(papers, on=group + ["record_id"], how="inner")
              .merge(ours, on=group + ["record_id"], how="inner"))
    if points.empty:
        raise ValueError("pdtp report: no record has both a PDTP and an attack decision "
                         "(are the attacks' thresholds all NaN?)")
    panel_keys = group + ["attack", "policy"]
    oracle = {pol: _is_oracle(frame[frame["policy"] == pol]) for pol in points["policy"].unique()}
    summaries = []
    for key, rows in _groups(points, panel_keys):
        accuracy_values = rows["accuracy"].to_numpy(float)
        r, rho = _correlations(accuracy_values, rows["pdtp_seed_mean"].to_numpy(float))
        r_ours, rho_ours = _correlations(accuracy_values, rows["pdtp_seed_averaged"].to_numpy(float))
        summaries.append({**dict(zip(panel_keys, key)), "records": len(rows), "pearson": r,
                          "spearman": rho,
                          "dtp1_share_seed_mean": float((rows["pdtp_seed_mean"] > 1.0).mean()),
                          "pearson_seed_averaged": r_ours, "spearman_seed_averaged": rho_ours,
                          "dtp1_share_seed_averaged":
                              float((rows["pdtp_seed_averaged"] > 1.0).mean())})
    summary = pd.DataFrame(summaries)
    points = points.merge(summary[panel_keys + ["pearson", "spearman"]], on=panel_keys, how="left")

    fig, axes = _panel_grid(len(summary), width=4.6, height=4.2)
    for ax, summary_row in zip(axes, summary.to_dict("records")):
        match = (points[panel_keys] == pd.Series({k: summary_row[k] for k in panel_keys})).all(axis=1)
        rows = points[match]
        ax.scatter(rows["accuracy"], rows["pdtp_seed_averaged"], s=14, facecolors="none",
                   edgecolors="grey", label="seed-averaged PDTP (ours: relates to ε)")
        ax.scatter(rows["accuracy"], rows["pdtp_seed_mean"], s=14, alpha=0.7, color="C0",
                   label="mean of per-seed PDTP (Long et al.)")
        ax.axhline(1.0, color="red", lw=0.8, ls="--",
                   label="DTP-1 threshold (Long et al.'s PDTP = 1)")
        where = " · ".join(str(summary_row[c]) for c in group if c in ("dataset", "model"))
        head = (f"{summary_row['attack']}, "
                f"{_policy_label(summary_row['policy'], oracle[summary_row['policy']])}\n"
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
            _write_csv(points, out_dir / "pdtp_vs_accuracy.csv"),
            _write_csv(summary, out_dir / "pdtp_correlations.csv")]


# --------------------------------------------------------------------------- Yeom et al.


GENERALIZATION_COLUMNS = ["attack", "epsilon", "model_key", "scores_key", "train_accuracy",
                          "test_accuracy"]
LOSS_RANDOMIZED_ATTACK = "loss_randomized"
#: The CSV's series: what each plotted point is.
YEOM_SERIES = "loss: Yeom's threshold (mean training loss)"
BEST_SERIES = "loss: best threshold (max TPR − FPR)"
RANDOMIZED_SERIES = "loss_randomized: Adversary 1"


def advantage(decisions: np.ndarray, member: np.ndarray) -> float:
    """Yeom et al.'s membership advantage of yes/no decisions: TPR − FPR (NaN without both kinds)."""
    decisions, member = np.asarray(decisions, bool), np.asarray(member, bool)
    if member.all() or not member.any():
        return math.nan
    return float(decisions[member].mean() - decisions[~member].mean())


def best_advantage(scores: np.ndarray, member: np.ndarray) -> float:
    """max over thresholds t of TPR − FPR for "member iff score ≥ t" (accepting none gives 0).

    The threshold-free advantage (SPEC §4; Yeom's and Jayaraman's meaning): an upper envelope no
    single rule fixed in advance is promised.  A NaN score is "non-member" at every threshold.
    """
    scores, member = np.asarray(scores, float), np.asarray(member, bool)
    if member.all() or not member.any():
        return math.nan
    finite = ~np.isnan(scores)
    if not finite.any():
        return 0.0
    order = np.argsort(-scores[finite], kind="stable")
    ranked, is_member = scores[finite][order], member[finite][order]
    tpr = np.cumsum(is_member) / member.sum()
    fpr = np.cumsum(~is_member) / (~member).sum()
    last_of_tie = np.r_[ranked[1:] != ranked[:-1], True]  # a threshold accepts all its ties
    return float(max(0.0, (tpr - fpr)[last_of_tie].max(initial=0.0)))


def yeom_threshold(scores: np.ndarray, member: np.ndarray) -> tuple[float, float]:
    """Yeom et al.'s threshold rule for the loss attack: (mean training loss, its advantage).

    The adversary is told the model's average training loss (Yeom et al. §3.3 set the threshold
    at the published training error; Jayaraman et al.'s reference implementation says "member"
    iff per-record loss ≤ the training loss).  `scores` are the loss attack's, −loss with p_y
    clamped; the training loss is estimated by the evaluated members' mean loss (finite scores).
    A NaN score is "non-member".
    """
    loss, member = -np.asarray(scores, float), np.asarray(member, bool)
    known = member & ~np.isnan(loss)
    if not known.any():
        return math.nan, math.nan
    threshold = float(loss[known].mean())
    return threshold, advantage(loss <= threshold, member)


def expected_loss_gap(scores: np.ndarray, member: np.ndarray, bound: float) -> float:
    """Yeom et al.'s Theorem 2 line for Adversary 1: (E_non-member[ℓ] − E_member[ℓ]) / B.

    ℓ = min(loss, B), the loss Adversary 1 reads (`jobs.attacks.loss_randomized`), from the loss
    attack's scores (−loss) of the same target over the same evaluated records, so Adversary 1's
    expected advantage on these records is exactly this value.
    """
    loss = np.minimum(-np.asarray(scores, float), bound)
    member = np.asarray(member, bool)
    keep = ~np.isnan(loss)
    if not (keep & member).any() or not (keep & ~member).any():
        return math.nan
    return float((loss[keep & ~member].mean() - loss[keep & member].mean()) / bound)


def default_loss_bound() -> float:
    """B of rows that do not carry it (`loss_bound`): the attack's default, −ln(loss_clamp)."""
    from jobs.attacks import AttackSettings, yeom_loss_bound

    return yeom_loss_bound(AttackSettings())


def _row_loss_bounds(frame: pd.DataFrame) -> dict[str, float]:
    """B that each target's `loss_randomized` cell used, from the row's `loss_bound` column."""
    if "loss_bound" not in frame.columns:
        return {}
    rows = frame[(frame["attack"] == LOSS_RANDOMIZED_ATTACK) & frame["loss_bound"].notna()]
    return dict(zip(rows["model_key"], rows["loss_bound"].astype(float)))


def load_target_scores(frame: pd.DataFrame, store_root: str | Path,
                       attacks: Sequence[str]) -> pd.DataFrame:
    """The per-record scores of `attacks` on each target, each stored table read once."""
    _require(frame, ["attack", "scores_key"], "generalization")
    store = ArtifactStore(store_root)
    keys = frame.loc[frame["attack"].isin(attacks), "scores_key"].dropna().unique()
    parts = []
    for key in keys:
        try:
            parts.append(store.read_scores(key))
        except FileNotFoundError:
            raise FileNotFoundError(f"generalization report: per-record scores {key} are missing "
                                    f"from {store.uri}/scores") from None
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=SCORES_COLUMNS)


def _generalization_table(frame: pd.DataFrame, scores: pd.DataFrame,
                          bound: Optional[float]) -> pd.DataFrame:
    """One row per (target, series): x, y and what they were computed from (long format).
    B is `bound` when given, else what each target's row says it used, else the default."""
    row_bounds = _row_loss_bounds(frame)
    keep = [c for c in ("dataset", "model", "epsilon", "delta", "p", "trial") if c in frame.columns]
    targets = (frame[frame["attack"].isin([LOSS_ATTACK, LOSS_RANDOMIZED_ATTACK])]
               .drop_duplicates(subset="model_key"))
    by_key = {key: rows for key, rows in scores.groupby(["model_key", "attack"], sort=False)}
    out = []
    for target in targets.to_dict("records"):
        key = target["model_key"]
        loss = by_key.get((key, LOSS_ATTACK))
        if loss is None:
            raise ValueError(f"generalization report: target {key} has no per-record scores of "
                             f"the {LOSS_ATTACK!r} attack (both figures read its losses)")
        loss = loss.sort_values("record_id")
        base = {c: target[c] for c in keep} | {"model_key": key}
        gap = float(target["train_accuracy"]) - float(target["test_accuracy"])
        threshold, yeom = yeom_threshold(loss["score"], loss["member"])
        out.append({**base, "series": YEOM_SERIES, "x": gap, "y": yeom,
                    "x_is": "0–1 gap: train − test accuracy", "yeom_threshold_loss": threshold})
        out.append({**base, "series": BEST_SERIES, "x": gap,
                    "y": best_advantage(loss["score"], loss["member"]),
                    "x_is": "0–1 gap: train − test accuracy"})
        randomized = by_key.get((key, LOSS_RANDOMIZED_ATTACK))
        if randomized is not None:
            decisions = randomized.sort_values("record_id")
            if not np.array_equal(decisions["record_id"].to_numpy(), loss["record_id"].to_numpy()):
                raise ValueError(f"generalization report: target {key}'s loss and "
                                 "loss_randomized scores cover different records")
            target_bound = (bound if bound is not None
                            else row_bounds.get(key, default_loss_bound()))
            out.append({**base, "series": RANDOMIZED_SERIES,
                        "x": expected_loss_gap(loss["score"], loss["member"], target_bound),
                        "y": advantage(decisions["score"].to_numpy(float) >= 0.5,
                                       decisions["member"]),
                        "x_is": "expected loss gap / B", "loss_bound": target_bound})
    return pd.DataFrame(out)


def generalization_report(frame: pd.DataFrame, out_dir: Path, *,
                          scores: Optional[pd.DataFrame] = None,
                          store_root: Optional[str | Path] = None,
                          loss_bound: Optional[float] = None) -> list[Path]:
    """Yeom et al.: membership advantage grows with overfitting, whatever ε says.

    Every figure is computed per target from the stored per-record scores, never from a cell's
    policy threshold: a policy such as `quantile_max` picks the best-*precision* cut (accepting
    2.5 % of records), whose TPR − FPR is far below what Yeom et al. analyse and would seem to
    refute them.  Left panel, against the 0–1 generalization gap (train − test accuracy):
    Yeom's own threshold rule for the loss attack (member iff loss ≤ the mean training loss,
    `yeom_threshold`) and, labelled apart, the best threshold's advantage (`best_advantage`),
    with the line advantage = gap (Theorem 2 with the 0–1 loss, B = 1; the cross-entropy
    threshold may sit on either side of it).  Right panel, `loss_randomized` (Adversary 1, the
    theorem's own adversary) against its own Theorem 2 line: advantage = expected loss gap / B
    (`expected_loss_gap`, on the same cross-entropy Adversary 1 reads), where B is `loss_bound`
    (default: the `loss_bound` its row records, which the sweep's `attack.loss_bound` or
    −ln(loss_clamp) set).  One point per target, coloured by ε.
    """
    _require(frame, GENERALIZATION_COLUMNS, "generalization")
    if not (frame["attack"] == LOSS_ATTACK).any():
        raise ValueError(f"generalization report: no rows of the {LOSS_ATTACK!r} attack")
    if scores is None:
        if store_root is None:
            raise ValueError("generalization report: needs the per-record scores: pass scores= "
                             "(see load_target_scores) or store_root=")
        scores = load_target_scores(frame, store_root, [LOSS_ATTACK, LOSS_RANDOMIZED_ATTACK])
    _require(scores, SCORES_COLUMNS, "generalization", what="scores table")
    out_dir = Path(out_dir)
    table = _generalization_table(frame, scores, None if loss_bound is None else float(loss_bound))
    panels = _panel_columns(table, [])
    groups = _groups(table, panels)
    randomized = (table["series"] == RANDOMIZED_SERIES).any()
    epsilons = sorted(table["epsilon"].unique())
    colour = dict(zip(epsilons, _colours(len(epsilons))))
    fig, axes = _panel_grid(len(groups) * (2 if randomized else 1), width=5.0,
                            columns=2 if randomized else 3)
    styles = {YEOM_SERIES: dict(marker="o", s=30), BEST_SERIES: dict(marker="x", s=30),
              RANDOMIZED_SERIES: dict(marker="s", s=26)}
    for index, (key, panel_rows) in enumerate(groups):
        head = " · ".join(str(v) for v in key)
        pairs = [(axes[index * (2 if randomized else 1)], (YEOM_SERIES, BEST_SERIES),
                  "generalization gap (0–1 loss): train − test accuracy",
                  "advantage = gap (Yeom et al., Thm 2 with 0–1 loss, B = 1)")]
        if randomized:
            bounds = panel_rows.loc[panel_rows["series"] == RANDOMIZED_SERIES, "loss_bound"].unique()
            b_is = f"B = {bounds[0]:.3g}" if len(bounds) == 1 else "B per target"
            pairs.append((axes[index * 2 + 1], (RANDOMIZED_SERIES,),
                          f"expected loss gap / B (cross-entropy, {b_is})",
                          "advantage = E[loss gap]/B (Yeom et al., Thm 2)"))
        for ax, series, xlabel, line in pairs:
            shown = panel_rows[panel_rows["series"].isin(series)]
            for name in series:
                for eps in epsilons:
                    pts = shown[(shown["series"] == name) & (shown["epsilon"] == eps)]
                    if not pts.empty:
                        ax.scatter(pts["x"], pts["y"], color=colour[eps],
                                   label=f"{name}, ε={format_epsilon(eps)}", **styles[name])
            values = shown[["x", "y"]].to_numpy(float)
            low = min(0.0, float(np.nanmin(values))) if len(values) else 0.0
            high = max(0.05, float(np.nanmax(values)) * 1.1) if len(values) else 1.0
            ax.plot([low, high], [low, high], "--", color="black", lw=1, label=line)
            what = ("loss attack: Yeom's threshold and the best one" if series[0] == YEOM_SERIES
                    else "loss_randomized: Yeom et al.'s Adversary 1")
            ax.set(title=f"{head}\n{what}" if head else what, xlabel=xlabel,
                   ylabel="membership advantage (TPR − FPR)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=6)
    fig.suptitle("Membership advantage against the generalization gap (Yeom et al.)",
                 fontsize=10)
    return [save_figure(fig, out_dir / "generalization.png"),
            _write_csv(table, out_dir / "generalization.csv")]


#: Report name → function(results table, output folder[, …]) → paths written.
#: Reports that read the per-record scores tables too (pass them `store_root=`).
READS_SCORES = ("pdtp", "generalization")

REPORTS: dict[str, Callable[..., list[Path]]] = {
    "frontier": frontier_report,
    "thudi_lira": thudi_lira_report,
    "fixed_bound": fixed_bound_report,
    "ppv": ppv_report,
    "pdtp": pdtp_report,
    "generalization": generalization_report,
}


def draw(name: str, frame: pd.DataFrame, out_dir: Path, store_root: Path,
         echo: Callable[[str], Any] = print) -> list[Path]:
    """The experiment's own figures beside the frontier, or none with a note saying why.

    A report that cannot be drawn (a grid too small for its figure) must not cost the results.
    """
    if name == "frontier":
        return []
    try:
        context = {"store_root": store_root} if name in READS_SCORES else {}
        return REPORTS[name](frame, out_dir, **context)
    except ValueError as error:
        echo(f"report '{name}' not drawn: {error}")
        return []
