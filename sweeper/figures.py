"""What every figure of the product shares: how it is saved, coloured, laid out and labelled.

One drawing module for the frontier (`sweeper.reports.frontier_chart`), the papers' reports
(`sweeper.reports`) and the bounds' own figures (`sweeper.bounds.plots`), so a colour, an error
bar or a label means the same thing in each (ε is written by `sweeper.formats`).

Figures are drawn on matplotlib's Agg canvas directly (no pyplot, no global backend switch), so
they work headless, in worker processes and in tests alike.  matplotlib itself is imported only
when a figure is drawn.
"""

from __future__ import annotations

import io
import math
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from matplotlib.legend import Legend

#: How far apart along p the points of different series are drawn, so their bars do not hide
#: each other (the CSVs keep the exact p).
DODGE = 0.012


def save_figure(fig: Figure, path: Path, layout: bool = True,
                metadata: dict[str, str] | None = None) -> Path:
    """Lay the figure out (unless `layout` is False: a figure that placed its own legend and
    caption against its laid-out panels) and write it as a PNG at `path` (folders created),
    with `metadata` as the PNG's text chunks: whole or not at all, and never through a link
    at `path` (`sweeper.store.files.atomic_write_bytes` puts a new file in its place).  Figures
    of a store are drawn in a private folder and kept by the store's own write path
    (`sweeper.store.artifacts.ArtifactStore.keep_figures`).

    matplotlib is imported here, not with the module: a rerun whose figures are up to date
    never loads it."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from sweeper.store.files import PUBLIC_MODE, atomic_write_bytes

    path = Path(path)
    FigureCanvasAgg(fig)
    if layout:
        fig.tight_layout()
    fit_canvas(fig)
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=120, bbox_inches="tight", metadata=metadata)
    atomic_write_bytes(path, png.getvalue(), PUBLIC_MODE)
    return path


def fit_canvas(fig: Figure, pad: float = 0.1) -> None:
    """Grow the figure's canvas until every word and legend lies on it, `pad` inches inside its
    edge, moving nothing relative to anything else: a legend or caption placed below the
    panels, or a title wider than them, is then part of the Figure itself, not only of a PNG
    saved with ``bbox_inches="tight"`` (the layout test, tests/test_sweeper/test_figure_layout.py, checks
    every figure against this canvas).

    Panels, figure texts and figure legends are placed in figure fractions, so each is moved
    to the fraction that keeps its place in inches on the larger canvas."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.transforms import Bbox

    renderer = FigureCanvasAgg(fig).get_renderer()
    width, height = fig.get_size_inches()
    box = fig.get_tightbbox(renderer)  # inches
    x0, y0 = min(box.x0 - pad, 0.0), min(box.y0 - pad, 0.0)
    x1, y1 = max(box.x1 + pad, width), max(box.y1 + pad, height)
    if (x0, y0, x1, y1) == (0.0, 0.0, width, height):
        return

    def moved(points: np.ndarray) -> np.ndarray:
        return (points * [width, height] - [x0, y0]) / [x1 - x0, y1 - y0]

    fraction = fig.transFigure.inverted()
    anchors = [(legend, Bbox(moved(legend.get_bbox_to_anchor().transformed(fraction).get_points())))
               for legend in fig.legends]
    for ax in fig.axes:
        ax.set_position(Bbox(moved(ax.get_position().get_points())))
    for text in fig.texts:
        if text.get_transform() == fig.transFigure:
            text.set_position(tuple(moved(np.array(text.get_position(), float))))
    fig.set_size_inches(x1 - x0, y1 - y0)
    for legend, anchor in anchors:
        legend.set_bbox_to_anchor(anchor, transform=fig.transFigure)


def figure_labels(fig: Figure) -> list[str]:
    """Every word a reader is given, in drawing order: the figure's title and texts, each
    panel's title, axis labels and notes, every legend's title and entries (not the tick
    numbers, which are the data's)."""
    from matplotlib.text import Text

    texts: list[Text] = [fig._suptitle] if fig._suptitle is not None else []
    texts += list(fig.texts)
    for axis in fig.axes:
        texts += [axis.title, axis._left_title, axis._right_title, axis.xaxis.label,
                  axis.yaxis.label, *axis.texts]
    for legend in [*fig.legends, *(axis.get_legend() for axis in fig.axes)]:
        if legend is not None:
            texts += [legend.get_title(), *legend.get_texts()]
    unique = {id(text): text for text in texts}  # the suptitle is one of fig.texts too
    return [text.get_text() for text in unique.values() if text.get_text()]


def colours(count: int) -> np.ndarray:
    """`count` colours of one sequential map (viridis, its yellow end left out: unreadable on
    white), so ε or β read in order from dark to light in every figure."""
    from matplotlib import colormaps

    return colormaps["viridis"](np.linspace(0.0, 0.9, max(count, 1)))


def policy_label(policy: Any, oracle: bool) -> str:
    """A threshold policy as a panel names it; an oracle (thresholds chosen on the target's own
    labels) says so, since it changes what the precision means."""
    return f"{policy} (oracle: uses target labels)" if oracle else str(policy)


def dodge(rank: int, count: int) -> float:
    """The offset along p of series `rank` of `count`, centred on the true p."""
    return (rank - (count - 1) / 2) * DODGE


def panel_grid(count: int, width: float = 4.8, height: float = 4.2,
               columns: int = 3, sharey: bool = False) -> tuple[Figure, list[Any]]:
    """A figure of `count` panels, at most `columns` to a row, each `width` × `height` inches;
    `sharey`: one y-scale for all, so panels compare at a glance."""
    from matplotlib.figure import Figure

    cols = min(count, columns)
    rows = math.ceil(count / cols)
    fig = Figure(figsize=(width * cols, height * rows))
    axes: list[Any] = []
    for i in range(count):
        axes.append(fig.add_subplot(rows, cols, i + 1, sharey=axes[0] if sharey and axes else None))
    return fig, axes


def legend_below(fig: Figure, title: str, columns: int = 2) -> Legend:
    """One legend for the figure, below the panels (inside one it would sit on some point or
    bar), with every label any panel drew, once: a series one panel lacks is still named."""
    entries: dict[str, Any] = {}
    for axis in fig.axes:
        for handle, label in zip(*axis.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    return fig.legend(list(entries.values()), list(entries), loc="upper center",
                      bbox_to_anchor=(0.5, 0.0), ncol=columns, fontsize=7.5, frameon=False,
                      title=title, title_fontsize=7.5)


def errorbar(ax: Any, x: np.ndarray, y: np.ndarray, low: np.ndarray, high: np.ndarray,
             **style: Any) -> None:
    """An error bar from absolute ends; a NaN end draws no bar."""
    below = np.where(np.isnan(low), 0.0, y - low)
    above = np.where(np.isnan(high), 0.0, high - y)
    ax.errorbar(x, y, yerr=[below, above], capsize=3, **style)


def wrap(text: str, width: int) -> str:
    """`text` broken into lines of at most `width` characters."""
    return "\n".join(textwrap.wrap(text, width))


def caption_below(fig: Figure, legend: Legend, lines: Sequence[str], width: int) -> None:
    """Write `lines` (each wrapped at `width`) under `legend`, which sits below the panels.

    The figure must already be laid out: where the legend ends is measured on the canvas."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    box = legend.get_window_extent(FigureCanvasAgg(fig).get_renderer())
    bottom = box.transformed(fig.transFigure.inverted()).y0
    fig.text(0.5, bottom - 0.01, "\n".join(wrap(line, width) for line in lines),
             fontsize=7.5, va="top", ha="center", color="dimgrey")
