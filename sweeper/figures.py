"""What every figure of the product shares: how it is saved (ε is written by `sweeper.formats`).

Figures are drawn on matplotlib's Agg canvas directly (no pyplot, no global backend switch), so
they work headless, in worker processes and in tests alike.  matplotlib itself is imported only
when a figure is drawn.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def save_figure(fig: Figure, path: Path, layout: bool = True) -> Path:
    """Lay the figure out (unless `layout` is False: a figure that placed its own legend and
    caption against its laid-out panels) and write it as a PNG at `path` (folders created).

    matplotlib is imported here, not with the module: a rerun whose figures are up to date
    never loads it."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    if layout:
        fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")  # legends and captions outside the axes too
    return path
