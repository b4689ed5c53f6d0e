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

from sweeper.bounds import (
    erlingsson_accuracy_bound,
    humphries_accuracy_bound,
    precision_bound,
    precision_lower_bound,
    sablayrolles_precision_bound,
    yeom_accuracy_bound,
)
from sweeper.figures import save_figure

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
        ax.plot(p, precision_bound(eps, p), label=f"U, ε = {eps:g}")
    ax.plot(p, p, ":", color="grey", label="prior p (always member)")
    ax.set(xlabel="sampling probability p = P(x* ∈ D)", ylabel="precision bound",
           title="Upper bound on MI precision (Theorem 3.3, δ = 0)", xlim=(0, 1), ylim=(0, 1.02))
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return save_figure(fig, Path(path))


def plot_compare_vs_epsilon(path: Path, max_epsilon: float = 5.0, delta: float = 0.0) -> Path:
    """Earlier accuracy bounds against ε at p = 0.5 (2022 paper, Figure 11).

    In Yeom's balanced experiment precision and accuracy bounds are comparable; Thudi et al.'s U at
    p = 0.5 coincides with Humphries et al. (and Mahloujifar et al.), the tightest earlier bound.
    """
    eps = np.linspace(0.0, max_epsilon, 251)
    fig = Figure(figsize=(5.6, 4.2))
    ax = fig.add_subplot()
    ax.plot(eps, precision_bound(eps, 0.5, delta, 1.0), lw=2.5, label="Thudi et al. U (p = 0.5)")
    ax.plot(eps, humphries_accuracy_bound(eps, delta), "--", label="Humphries et al.")
    ax.plot(eps, erlingsson_accuracy_bound(eps, delta), label="Erlingsson et al.")
    ax.plot(eps, sablayrolles_precision_bound(eps, 0.5), label="Sablayrolles et al. (p + ε/4)")
    ax.plot(eps, yeom_accuracy_bound(eps), label="Yeom et al. (e^ε/2)")
    ax.set(xlabel="privacy budget ε", ylabel="bound on MI accuracy / precision",
           title="Bounds at p = 0.5 (δ = 0)" if delta == 0 else f"Bounds at p = 0.5 (δ = {delta:g})",
           xlim=(0, max_epsilon), ylim=(0.45, 1.02))
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return save_figure(fig, Path(path))


def plot_compare_vs_p(path: Path, epsilons: Sequence[float] = (0.5, 1.0, 2.0)) -> Path:
    """U and Sablayrolles et al.'s p + ε/4 against p (2022 paper, Figure 12), with the lower bound."""
    p = np.linspace(0.0, 1.0, 401)
    fig = Figure(figsize=(5.6, 4.2))
    ax = fig.add_subplot()
    for i, eps in enumerate(epsilons):
        colour = f"C{i}"
        ax.plot(p, precision_bound(eps, p), color=colour, label=f"Thudi et al. U, ε = {eps:g}")
        ax.plot(p, sablayrolles_precision_bound(eps, p), "--", color=colour,
                label=f"Sablayrolles et al., ε = {eps:g}")
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
        plot_compare_vs_epsilon(out / "compare_vs_epsilon.png"),
        plot_compare_vs_p(out / "compare_vs_p.png"),
    ]
