"""Where a figure's words sit on its canvas: text on text, a legend on another panel, or words
past the canvas' edge, measured after the figure is drawn (issue 43.3: the audit figure's
title sat on both panel titles, its 25-entry legend ran under the right panel and hid its
y-label, and nothing said so).

`layout_problems` reads every text artist's window extent from the rendered canvas (never the
pixels): the figure's title and texts, each panel's titles, axis labels, visible tick labels and
notes, and each legend as one box.  Two boxes may not overlap; a panel's words and legends may
not run into another panel; every box must lie inside the figure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

#: Pixels two boxes may share (antialiasing, a descender touching a frame) before they overlap.
TOLERANCE = 1.0


@dataclass(frozen=True)
class Box:
    """One word or legend on the canvas: what it says, the panel it belongs to (None: the
    figure's), its window extent."""

    name: str
    owner: Optional[int]
    extent: Any  # matplotlib.transforms.Bbox, in display pixels

    def overlaps(self, other: Any) -> bool:
        return (min(self.extent.x1, other.x1) - max(self.extent.x0, other.x0) > TOLERANCE
                and min(self.extent.y1, other.y1) - max(self.extent.y0, other.y0) > TOLERANCE)


def _describe(text: Any, role: str) -> str:
    words = " ".join(text.get_text().split())
    return f"{role} {words[:40]!r}"


def text_boxes(fig: Any) -> list[Box]:
    """Every visible, non-empty text and legend of `fig` as a `Box`; the figure must have been
    drawn (`fig.canvas.draw()`), so tick labels and extents are the ones shown."""
    renderer = fig.canvas.get_renderer()
    boxes: list[Box] = []

    def add(text: Any, role: str, owner: Optional[int]) -> None:
        if text is None or not text.get_visible() or not text.get_text().strip():
            return
        boxes.append(Box(_describe(text, role), owner, text.get_window_extent(renderer)))

    seen: set[int] = set()
    for text in [fig._suptitle, fig._supxlabel, fig._supylabel, *fig.texts]:
        if text is not None and id(text) not in seen:
            seen.add(id(text))
            add(text, "figure text", None)
    for legend in fig.legends:
        if legend.get_visible():
            boxes.append(Box("figure legend", None, legend.get_window_extent(renderer)))
    for index, ax in enumerate(fig.axes):
        if not ax.get_visible():
            continue
        where = f"panel {index}"
        for role, text in (("title", ax.title), ("left title", ax._left_title),
                           ("right title", ax._right_title), ("x label", ax.xaxis.label),
                           ("y label", ax.yaxis.label)):
            add(text, f"{where} {role}", index)
        for text in ax.texts:
            add(text, f"{where} note", index)
        for axis, name in ((ax.xaxis, "x tick"), (ax.yaxis, "y tick")):
            low, high = sorted(axis.get_view_interval())
            for tick in axis.get_major_ticks():
                location = tick.get_loc()
                if location is None or not low - 1e-9 * abs(high - low) <= location <= high + 1e-9 * abs(high - low):
                    continue  # a tick outside the view is never drawn
                for label in (tick.label1, tick.label2):
                    add(label, f"{where} {name}", index)
        legend = ax.get_legend()
        if legend is not None and legend.get_visible():
            boxes.append(Box(f"{where} legend", index, legend.get_window_extent(renderer)))
    return boxes


def layout_problems(fig: Any) -> list[str]:
    """Every overlap and overflow of `fig`'s words as it is drawn now, as sentences; [] when
    every word has its own place on the canvas.

    Draws the canvas first (on Agg if the figure has none), so call it on the figure as it will
    be saved: after its layout."""
    if fig.canvas is None or type(fig.canvas).__name__ == "FigureCanvasBase":
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        FigureCanvasAgg(fig)
    fig.canvas.draw()
    boxes = text_boxes(fig)
    canvas = fig.bbox
    problems = []
    for box in boxes:
        e = box.extent
        if (e.x0 < canvas.x0 - TOLERANCE or e.y0 < canvas.y0 - TOLERANCE
                or e.x1 > canvas.x1 + TOLERANCE or e.y1 > canvas.y1 + TOLERANCE):
            problems.append(f"{box.name} leaves the canvas "
                            f"({e.x0:.0f}..{e.x1:.0f} × {e.y0:.0f}..{e.y1:.0f} px of "
                            f"{canvas.width:.0f} × {canvas.height:.0f})")
    for i, box in enumerate(boxes):
        for other in boxes[i + 1:]:
            if box.overlaps(other.extent):
                problems.append(f"{box.name} overlaps {other.name}")
    panels = [(index, ax.bbox) for index, ax in enumerate(fig.axes) if ax.get_visible()]
    for box in boxes:
        for index, frame in panels:
            if index != box.owner and box.overlaps(frame):
                problems.append(f"{box.name} runs into panel {index}")
    return problems
