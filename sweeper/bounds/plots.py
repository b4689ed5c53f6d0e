"""The papers' bound figures, redrawn from `sweeper.bounds` so a reader can check them by eye.

Kept apart from the formulas so that importing `sweeper.bounds` never pulls in matplotlib.
Figures are drawn on the Agg canvas directly (no pyplot, no global backend switch), so this
works headless and inside worker processes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
from matplotlib.figure import Figure

from sweeper.bounds import precision_bound, precision_lower_bound, sablayrolles_precision_bound
from sweeper.bounds.compare import ACCURACY, BOUNDS, PRECISION, Settings, coincident
from sweeper.figures import save_figure
from sweeper.formats import format_epsilon

#: ε values of the 2024 paper's Figure 1.
FIGURE1_EPSILONS = (0.1, 1.0, 2.0, 5.0)


def plot_bound_vs_p(path: Path, epsilons: Sequence[float] = FIGURE1_EPSILONS) -> Path:
    """U against p for several ε at δ = 0 (2024 paper, Figure 1; 2022 paper, Figure 2).

    The prior p (the always-member attack) is drawn too: the gap between it and U is all an
    attacker can gain, and it closes at both ends of the p axis.
    """
    p = np.linspace(0.0, 1.0, 401)
    fig = Figure(figsize=(5.6, 4.2))
    ax = fig.add_subplot()
    for eps in epsilons:
        ax.plot(p, precision_bound(eps, p), label=f"U, ε = {format_epsilon(eps)}")
    ax.plot(p, p, ":", color="grey", label="prior p (always member)")
    ax.set(xlabel="sampling probability p = P(x* ∈ D)", ylabel="precision bound",
           title="Upper bound on MI precision (Theorem 3.3, δ = 0)", xlim=(0, 1), ylim=(0, 1.02))
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return save_figure(fig, Path(path))


#: Line style, marker and width per bound of a panel: distinct even in grey, and wide-then-narrow
#: so that a bound drawn on top of an identical one leaves the one below visible.
STYLES = (("-", None, 4.0), ("--", "o", 1.8), (":", "s", 2.0), ("-.", "^", 1.4))
PANELS = {PRECISION: ("Precision bounds at p = {p:g}", "bound on attack precision P(member | flagged)"),
          ACCURACY: ("Accuracy bounds, balanced experiment (p = 0.5)",
                     "bound on attack accuracy (members = non-members)")}


def plot_compare(path: Path, settings: Settings, epsilons: Sequence[float]) -> Path:
    """`compare_figure` written as a PNG at `path`."""
    return save_figure(compare_figure(settings, epsilons), Path(path))


def compare_figure(settings: Settings, epsilons: Sequence[float]) -> Figure:
    """Every bound `bounds compare` tabulates, against ε: precision bounds (at p) in one panel,
    accuracy bounds (Yeom's balanced experiment) in the other, since the two are different
    quantities.  The table's ε are marked on each curve.  A bound identical to one drawn before
    it (Thudi et al.'s U at p = 0.5 and δ = 0 is Humphries et al.'s, and Mahloujifar et al.'s) says
    so in its legend entry, and is drawn narrower on top of the wider one so both stay visible; a
    bound undefined at these settings (Mahloujifar et al. at p ≠ 0.5) is listed as not drawn.
    """
    finite = sorted(e for e in epsilons if np.isfinite(e))
    top = max(finite) if finite else 8.0
    grid = np.unique(np.r_[np.linspace(0.0, top, 241), finite])
    marks = list(np.searchsorted(grid, finite))
    fig = Figure(figsize=(11.6, 4.6))
    for index, kind in enumerate((PRECISION, ACCURACY)):
        ax = fig.add_subplot(1, 2, index + 1)
        bounds = [b for b in BOUNDS if b.kind == kind]
        curves = {b.key: b.value(grid, settings) for b in bounds}
        same = coincident(curves, [b.key for b in bounds])
        names = {b.key: b.label for b in bounds}
        for number, (bound, (style, marker, width)) in enumerate(zip(bounds, STYLES)):
            colour = f"C{number}"
            curve = curves[bound.key]
            if curve is None:
                ax.plot([], [], style, color=colour,
                        label=f"{bound.label}: undefined at p = {settings.p:g}, not drawn")
                continue
            label = bound.label + (f"\n  = {names[same[bound.key]]} here (curves coincide)"
                                   if bound.key in same else "")
            ax.plot(grid, curve, style, color=colour, lw=width, marker=marker,
                    markevery=marks, ms=5, label=label)
        title, ylabel = PANELS[kind]
        ax.set(title=title.format(p=settings.p), xlabel="privacy budget ε", ylabel=ylabel,
               xlim=(0, top), ylim=(0, 1.02))
        ax.legend(fontsize=7, loc="lower right")
        ax.grid(alpha=0.3)
    fig.suptitle(f"Membership-inference bounds against ε (δ = {settings.delta:g}, Thudi U in "
                 f"{settings.form} form, Jayaraman PPV at FPR {settings.fpr:g}; "
                 "markers: the table's ε)", fontsize=9)
    return fig


def plot_compare_vs_p(path: Path, epsilons: Sequence[float] = (0.5, 1.0, 2.0)) -> Path:
    """U and Sablayrolles et al.'s p + ε/4 against p (2022 paper, Figure 12), with the lower bound."""
    p = np.linspace(0.0, 1.0, 401)
    fig = Figure(figsize=(5.6, 4.2))
    ax = fig.add_subplot()
    for i, eps in enumerate(epsilons):
        colour = f"C{i}"
        ax.plot(p, precision_bound(eps, p), color=colour,
                label=f"Thudi et al. U, ε = {format_epsilon(eps)}")
        ax.plot(p, sablayrolles_precision_bound(eps, p), "--", color=colour,
                label=f"Sablayrolles et al., ε = {format_epsilon(eps)}")
        ax.plot(p, precision_lower_bound(eps, p), ":", color=colour, lw=1)
    ax.set(xlabel="sampling probability p = P(x* ∈ D)", ylabel="precision bound",
           title="Precision bounds vs p (dotted: lower bound)", xlim=(0, 1), ylim=(0, 1.02))
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return save_figure(fig, Path(path))


def write_figures(out_dir: Path) -> list[Path]:
    """Write all three figures as PNGs into `out_dir`; return their paths."""
    out = Path(out_dir)
    return [
        plot_bound_vs_p(out / "bound_vs_p.png"),
        plot_compare(out / "compare_vs_epsilon.png", Settings(p=0.5),
                     [0.1, 0.25, 0.5, 1, 2, 3, 4, 5]),
        plot_compare_vs_p(out / "compare_vs_p.png"),
    ]
