"""The frontier report: measured precision next to the Thudi et al. bound, for every sweep.

`sweeper.frontier` answers the product's question (is any measured precision above U?) as a
table and a command; this module draws it, so every experiment's report set includes it and the
command and the reports draw one and the same figure: precision against p, one colour per ε,
with each ε's bound and the always-member baseline, and a mark on every cell whose precision
interval lies wholly above the bound (a bug in training or accounting: never hidden).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

from sweeper.bounds import precision_bound
from sweeper.figures import DODGE, caption_below, colours, policy_label, save_figure
from sweeper.axes import pooling_keys, swept
from sweeper.formats import format_epsilon
from sweeper.reports.report_registry import register_report
from sweeper.reports.stats import POOLED_TEXT, pooled_table
from sweeper.reports.tables import baseline_attacks, bound_settings, is_oracle, require, write_csv

FRONTIER_COLUMNS = ["attack", "epsilon", "delta", "p", "precision", "tp", "fp", "violation",
                    "tpr_floor", "bound_form"]

#: What a reader must be told to read the frontier: the legend's fixed entries and the caption.
ERROR_BAR_TEXT = POOLED_TEXT
BOUND_TEXT = "bound U of that ε (dashed): no attack's precision may lie above it"
PROFILE_TEXT = ("bound_profile (bar marks): the least U over the training's whole privacy "
                "profile δ(ε′), at the p measured")
PRIOR_TEXT = "precision = p (grey diagonal): guessing 'member' for everyone"
BASELINE_TEXT = "always-member baseline, measured (share of members evaluated)"
VIOLATION_TEXT = "violation: the data prove a precision (or an ε) above the bound: a bug"
UNDECIDED_TEXT = ("hollow: undecided at the sequential budget (sequential.max_trials / max_models); "
                  "bar: its anytime-valid interval")
ORACLE_TEXT = ("oracle: the threshold is the best of the top 2.5 %·i score quantiles, chosen on "
               "the target's own membership labels — an upper estimate of what a real attacker "
               "reaches, not an attack one could deploy")
#: Drawing order: a measured point (and its bar) above the bound_profile mark at its p.
PROFILE_ZORDER, POINT_ZORDER = 3, 4
#: A bound at or above this everywhere in the sweep's p range bounds nothing: it is labelled.
VACUOUS_BOUND = 0.99


def frontier_title(frame: pd.DataFrame, name: str = "", shadows: Optional[int] = None) -> str:
    """`name` (the sweep), then what the numbers were measured on: dataset, model, δ, shadow
    models, trials, so a PNG that travels alone still says what it shows."""
    facts = []
    for column in ("dataset", "model"):
        if column in frame.columns:
            facts.append(f"{column} {', '.join(str(v) for v in dict.fromkeys(frame[column]))}")
    deltas = sorted(frame["delta"].unique())
    facts.append("δ = " + ", ".join(f"{d:g}" for d in deltas))
    if shadows:
        facts.append(f"{shadows} shadow models per ε")
    trials = frame["trial"].nunique() if "trial" in frame.columns else 1
    facts.append(f"{trials} trial{'s' if trials != 1 else ''}"
                 + (" (points: pooled over trials)" if trials > 1 else ""))
    head = f"Attack precision against the bound U — {name}" if name else \
        "Attack precision against the bound U"
    return head + "\n" + " · ".join(facts)


def drawn_cells(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows the frontier draws: the tests with a precision, and the baselines
    (`baseline_attacks`); not per-record measures (PDTP), which have no precision."""
    return frame[frame["precision"].notna() | frame["attack"].isin(baseline_attacks())]


def frontier_figure(frame: pd.DataFrame, title: str = ""):
    """The frontier as a matplotlib Figure (not saved): one panel per attack (and policy, when the
    sweep has several), one colour per ε, one legend for the whole figure and a caption.

    Why it looks as it does: points are measurements at a few p, so they are drawn as points
    (precision pooled over trials) with its exact 95 % Clopper–Pearson bar (`pooled_precision`,
    the rule of every figure), never joined as if they were a curve; U is a curve
    (a formula of p), drawn dashed in its ε's colour.  A bound that sits at U ≈ 1 (large ε, ε = ∞)
    would hide in the panel's top edge, so it is labelled.  Whether the threshold was an oracle
    (chosen on the target's labels) changes what the precision means, so the panel says so.
    """
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    frame = drawn_cells(frame)
    baselines = frame["attack"].isin(baseline_attacks())
    tests = frame[~baselines]
    varied = swept(tests)  # a training setting the sweep varies: its own panels
    keys = [c for c in ("attack", "policy") if c in frame.columns
            and (c == "attack" or tests[c].nunique() > 1)] + [axis.name for axis in varied]
    panels = (list(tests.groupby(keys, sort=False, dropna=False)) if not tests.empty
              else [((frame["attack"].iloc[0],), frame)])  # baselines alone
    epsilons = sorted(frame["epsilon"].unique())
    delta = float(frame["delta"].max())  # the loosest bound of the grid
    floor = float(frame["tpr_floor"].max())
    form = str(frame["bound_form"].iloc[0])
    colour_of = dict(zip(epsilons, colours(len(epsilons))))
    data_p = np.sort(frame["p"].unique())
    grid = np.unique(np.r_[np.linspace(0.01, 0.99, 197), data_p])
    baseline = frame[baselines].groupby("p")["precision"].mean()
    offsets = dict(zip(epsilons, (np.arange(len(epsilons)) - (len(epsilons) - 1) / 2) * DODGE))
    vacuous = [eps for eps in epsilons
               if np.all(precision_bound(eps, data_p, delta, floor, form=form) >= VACUOUS_BOUND)]

    fig = Figure(figsize=(4.4 * len(panels) + 0.4, 4.4))
    axes = fig.subplots(1, len(panels), squeeze=False, sharey=True)[0]
    violations = oracle = profiled = undecided = False
    for axis, (key, cells) in zip(axes, panels):
        key = key if isinstance(key, tuple) else (key,)
        axis.plot([0, 1], [0, 1], color="lightgrey", lw=0.9, zorder=1)
        for eps in epsilons:
            colour = colour_of[eps]
            axis.plot(grid, precision_bound(eps, grid, delta, floor, form=form), "--",
                      color=colour, lw=1.2, zorder=2)
            at_eps = pooled_by_p(cells[cells["epsilon"] == eps])
            if at_eps.empty:
                continue
            x = at_eps.index.to_numpy(float) + offsets[eps]
            axis.errorbar(x, at_eps["precision"],
                          yerr=[at_eps["precision"] - at_eps["low"], at_eps["high"] - at_eps["precision"]],
                          fmt="o", linestyle="none", color=colour, capsize=3, ms=5,
                          zorder=POINT_ZORDER)
            if "bound_profile" in cells and cells["bound_profile"].notna().any():
                profile = cells[cells["epsilon"] == eps].groupby("p")["bound_profile"].mean()
                # under the point, never over it: a mark at 0.776 hid a point at 0.769
                axis.scatter(profile.index.to_numpy(float) + offsets[eps], profile.to_numpy(float),
                             marker="_", s=220, linewidths=2.2, color=colour, alpha=0.6,
                             zorder=PROFILE_ZORDER)
                profiled = True
            still = at_eps["undecided"].to_numpy()
            if still.any():  # a sequential sweep's cells undecided at its budget: hollow
                undecided = True
                axis.scatter(x[still], at_eps["precision"].to_numpy()[still], marker="o", s=34,
                             facecolors="white", edgecolors=colour, zorder=POINT_ZORDER + 0.5)
            bad = at_eps["violations"].to_numpy() > 0
            if bad.any():
                violations = True
                axis.scatter(x[bad], at_eps["precision"].to_numpy()[bad], marker="X", s=140,
                             color="red", zorder=5)
        if not baseline.empty:
            axis.plot(baseline.index, baseline.to_numpy(), "s", color="grey", ms=5, zorder=3)
        if vacuous:
            axis.annotate(f"U ≈ 1 for ε = {', '.join(format_epsilon(e) for e in vacuous)}",
                          xy=(0.02, 1.0), xytext=(0.02, 1.035), fontsize=7.5, color="dimgrey",
                          va="bottom")
        label = dict(zip(keys, key))
        panel_oracle = is_oracle(cells)
        oracle |= panel_oracle
        head = str(label["attack"])
        if varied:
            head += " · " + " ".join(axis.format(label[axis.name]) for axis in varied)
        if "policy" in label or panel_oracle:
            head += "\n" + policy_label(label.get("policy", cells["policy"].iloc[0]
                                                  if "policy" in cells else ""), panel_oracle)
        axis.set_title(head, fontsize=9)
        axis.set_xlabel("p = P(x* sampled into the training set)")
        axis.set_xlim(0, 1)
        axis.set_ylim(0, 1.1)
        axis.set_yticks(np.linspace(0, 1, 6))
        axis.grid(alpha=0.3)
    axes[0].set_ylabel("attack precision = P(member | flagged)")

    handles = [Line2D([], [], marker="o", ls="none", color=colour_of[e],
                      label=f"ε = {format_epsilon(e)}") for e in epsilons]
    handles += [Line2D([], [], marker="o", ls="none", color="black", label=ERROR_BAR_TEXT),
                Line2D([], [], ls="--", color="black", label=BOUND_TEXT),
                *([Line2D([], [], marker="_", ms=14, mew=2.2, ls="none", color="black",
                          label=PROFILE_TEXT)] if profiled else []),
                Line2D([], [], color="lightgrey", label=PRIOR_TEXT)]
    if not baseline.empty:
        handles.append(Line2D([], [], marker="s", ls="none", color="grey", label=BASELINE_TEXT))
    if violations:
        handles.append(Line2D([], [], marker="X", ls="none", ms=10, color="red", label=VIOLATION_TEXT))
    if undecided:
        handles.append(Line2D([], [], marker="o", ls="none", color="black", mfc="white",
                              label=UNDECIDED_TEXT))
    # Below the panels, not beside them: a figure as wide as three panels and a legend would be
    # drawn tiny wherever it is shown at a page's width (MLflow's artifact view, a README).
    legend = fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0),
                        ncol=2 if len(panels) > 1 else 1, fontsize=8, frameon=False,
                        title=f"U: Thudi et al. Thm 3.3, δ = {delta:g}, TPR ≥ {floor:g}",
                        title_fontsize=8)
    caption = [f"Points of different ε are drawn {DODGE:g} apart along p so their bars do not overlap."]
    if oracle:
        caption.insert(0, ORACLE_TEXT + ".")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()  # where the panels end up, so the caption can go under the legend
    caption_below(fig, legend, caption, 40 * len(panels) + 40)
    return fig


def pooled_by_p(cells: pd.DataFrame) -> pd.DataFrame:
    """`pooled_table` by p, indexed by p, with the columns the figure draws; a sequential
    sweep's (`sweeper.sequential.with_decisions`) with its anytime interval as the bar and
    `undecided` marking the cells its budget left undecided."""
    table = pooled_table(cells, ["p"]).set_index("p")
    table = table.rename(columns={"precision_ci_low": "low", "precision_ci_high": "high"})
    table["undecided"] = False
    if "decision" in cells and not table.empty:
        decided = cells.groupby("p")[["decision", "sequential_low", "sequential_high"]].first()
        table["low"], table["high"] = decided["sequential_low"], decided["sequential_high"]
        table["undecided"] = decided["decision"] == "undecided"
    return table


def plot_frontier(frame: pd.DataFrame, path: str | Path, title: str = "",
                  shadows: Optional[int] = None) -> Path:
    """Draw `frontier_figure` to a PNG at `path`, titled by `frontier_title` (`title` names the
    sweep; `shadows`, its shadow models per ε, when the caller knows them)."""
    figure = frontier_figure(frame, frontier_title(frame, title, shadows))
    return save_figure(figure, Path(path), layout=False)  # laid out by frontier_figure


#: The card figure's size and type: MLflow's image card shows the figure's thumbnail (820 px
#: square, `sweeper.tracking.recorder.IMAGE_CARD_WIDTH`) at the card's width, which a 1400-px
#: browser with MLflow's Assistant panel open makes about 417 px: text is drawn at half again
#: the size it must be read at.
CARD_INCHES, CARD_DPI, CARD_FONT = 8.2, 100, 19


def frontier_card_figure(frame: pd.DataFrame, name: str = ""):
    """The frontier for MLflow's image card: what `frontier_figure` draws, cut to what can be
    read at a card's width (about 417 px at first arrival) — each attack's pooled points with
    their bars, U dashed, the prior p, violations as red crosses; panels two to a row, short
    words, large type; no caption (the full figure, a click away, has it)."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    frame = drawn_cells(frame)
    tests = frame[~frame["attack"].isin(baseline_attacks())]
    panels = list(tests.groupby(["attack"], sort=False)) if not tests.empty else []
    epsilons = sorted(frame["epsilon"].unique())
    colour_of = dict(zip(epsilons, colours(len(epsilons))))
    delta, floor = float(frame["delta"].max()), float(frame["tpr_floor"].max())
    form = str(frame["bound_form"].iloc[0])
    grid = np.linspace(0.01, 0.99, 99)
    columns = 1 if len(panels) < 2 else 2
    rows = max(1, -(-len(panels) // columns))
    fig = Figure(figsize=(CARD_INCHES, CARD_INCHES * min(1.0, 0.36 + 0.42 * rows)), dpi=CARD_DPI)
    axes = fig.subplots(rows, columns, squeeze=False, sharex=True, sharey=True).ravel()
    for axis in axes[len(panels):]:
        axis.set_visible(False)
    for axis, (key, cells) in zip(axes, panels):
        axis.plot([0, 1], [0, 1], color="lightgrey", lw=1.5)
        offsets = (np.arange(len(epsilons)) - (len(epsilons) - 1) / 2) * DODGE * 1.5
        for eps, offset in zip(epsilons, offsets):
            colour = colour_of[eps]
            axis.plot(grid, precision_bound(eps, grid, delta, floor, form=form), "--",
                      color=colour, lw=2)
            at = pooled_by_p(cells[cells["epsilon"] == eps])
            if at.empty:
                continue
            x = at.index.to_numpy(float) + offset
            axis.errorbar(x, at["precision"], yerr=[at["precision"] - at["low"],
                                                     at["high"] - at["precision"]],
                          fmt="o", color=colour, capsize=4, ms=8, lw=2, zorder=4)
            bad = at["violations"].to_numpy() > 0
            if bad.any():
                axis.scatter(x[bad], at["precision"].to_numpy()[bad], marker="X", s=320,
                             color="red", zorder=5)
        axis.set_title(str(key[0] if isinstance(key, tuple) else key), fontsize=CARD_FONT)
        axis.set(xlim=(0, 1), ylim=(0, 1.05), xticks=[0, 0.5, 1], yticks=[0, 0.5, 1])
        axis.tick_params(labelsize=CARD_FONT - 2)
        axis.grid(alpha=0.3)
    for axis in axes[-columns:]:
        axis.set_xlabel("p (prior)", fontsize=CARD_FONT - 1)
    for axis in axes[::columns]:
        axis.set_ylabel("precision", fontsize=CARD_FONT - 1)
    handles = [Line2D([], [], marker="o", ls="none", ms=10, color=colour_of[e],
                      label=f"ε={format_epsilon(e)}") for e in epsilons]
    handles.append(Line2D([], [], ls="--", lw=2, color="black", label="U"))
    height = fig.get_size_inches()[1]
    head = 1.25 / height  # the title's and the legend's share of the height, in inches
    fig.suptitle(f"{name}: precision vs bound U" if name else "precision vs bound U",
                 fontsize=CARD_FONT, y=1 - 0.1 / height, va="top")
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 1 - 0.55 / height),
               ncol=len(handles), fontsize=CARD_FONT - 2, frameon=False, handletextpad=0.2,
               columnspacing=0.8)
    fig.tight_layout(rect=(0, 0, 1, 1 - head))
    return fig


def plot_frontier_card(frame: pd.DataFrame, path: str | Path, name: str = "") -> Path:
    """Draw `frontier_card_figure` to a PNG at `path`."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    figure = frontier_card_figure(frame, name)
    FigureCanvasAgg(figure)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=CARD_DPI, bbox_inches="tight", pad_inches=0.15, facecolor="white")
    return Path(path)


@register_report("frontier", whole_table=True)
def frontier_report(frame: pd.DataFrame, out_dir: Path) -> list[Path]:
    """The generic frontier, so every experiment's report set includes the product's question.

    Drawn by `plot_frontier`, as the command draws it, so the two never disagree; the CSV
    holds the pooled precisions and intervals that function draws, one row per coordinate
    (`pooled_precision`), with the trials' mean and the bound at each point.
    """
    require(frame, FRONTIER_COLUMNS, "frontier")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    png = plot_frontier(frame, out_dir / "frontier.png")
    cells = drawn_cells(frame)
    table = pooled_table(cells, pooling_keys(cells))  # every coordinate but the trial
    floor, form = bound_settings(cells if not cells.empty else frame)
    table["bound"] = [float(precision_bound(e, p, d, floor, form=form))
                      for e, d, p in zip(table["epsilon"], table["delta"], table["p"])]
    return [png, write_csv(table, out_dir / "frontier.csv")]
