"""The docs' figures, redrawn by the current code from the numbers they show.

Each figure under `docs/` is drawn from a CSV in `docs/figures/` (the rows a real sweep
produced), so a changed label, legend or interval rule reaches the docs by one command,
`python -m sweeper.cli.doc_figures_command`, without rerunning the sweeps.  Every PNG carries the
words it was drawn with (`LABELS_KEY`, a PNG text chunk), and `stale_figures` — which a test runs —
names each figure whose words are not what the current code draws: a change of words is
caught, a change of drawing under the same words is not (run the command after one).
`--from-store ROOT` first refreshes the CSVs from sweeps run into ROOT (`quickstart`,
`dpsgd_audit`, `bb_audit_mnist_logreg`).

Command line: `python -m sweeper.cli.doc_figures_command --help`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import pandas as pd

from sweeper.figures import figure_labels, save_figure

#: The repository's docs folder, and where the figures' numbers live in it.
DOCS = Path(__file__).resolve().parent.parent / "docs"
DATA = "figures"
#: The PNG text chunk that holds a figure's words, as JSON.
LABELS_KEY = "sweeper:labels"


@dataclass(frozen=True)
class DocFigure:
    """One docs figure: its PNG, the sweep its numbers come from, how to read them out of
    that sweep's store (`extract`) and how to draw them (`draw`: a matplotlib Figure and
    whether it laid itself out)."""

    png: str
    sweep: str
    extract: Callable[[Path, str], pd.DataFrame]
    draw: Callable[[pd.DataFrame], tuple[object, bool]]

    @property
    def data(self) -> str:
        return f"{DATA}/{Path(self.png).stem}.csv"


#: The columns of a sweep's results the frontier figure reads.
FRONTIER_FIGURE_COLUMNS = ["dataset", "model", "attack", "policy", "policy_uses_target_labels",
                           "epsilon", "delta", "p", "trial", "precision", "tp", "fp",
                           "violation", "tpr_floor", "bound_form", "bound_profile"]


def _frontier_rows(root: Path, sweep: str) -> pd.DataFrame:
    from sweeper.frontier import load_frontier
    from sweeper.store.artifacts import ArtifactStore

    frame = load_frontier(sweep, root)
    shadows = ArtifactStore(root).read_manifest(sweep).get("config", {}).get("shadow", {})
    columns = [column for column in FRONTIER_FIGURE_COLUMNS if column in frame]
    return frame[columns].assign(shadow_count=shadows.get("count"))


def _draw_frontier(rows: pd.DataFrame) -> tuple[object, bool]:
    from sweeper.reports.frontier_chart import frontier_figure, frontier_title

    shadows = rows["shadow_count"].iloc[0] if "shadow_count" in rows else None
    shadows = int(shadows) if shadows is not None and pd.notna(shadows) else None
    cells = rows.drop(columns=["shadow_count"], errors="ignore")
    return frontier_figure(cells, frontier_title(cells, "quickstart", shadows)), False


def _audit_rows(root: Path, sweep: str) -> pd.DataFrame:
    """The table the audit report drew (`pooled_audits`, which needs every record's score): the
    CSV it wrote beside its figure."""
    return pd.read_csv(Path(root) / "sweeps" / sweep / "report" / "audit_epsilon.csv")


def _draw_audit(rows: pd.DataFrame) -> tuple[object, bool]:
    from sweeper.reports.engine_audit import audit_epsilon_figure

    return audit_epsilon_figure(rows), True


DOC_FIGURES = (
    DocFigure("quickstart_frontier.png", "quickstart", _frontier_rows, _draw_frontier),
    DocFigure("dpsgd_audit_epsilon.png", "dpsgd_audit", _audit_rows, _draw_audit),
    DocFigure("bb_audit_epsilon.png", "bb_audit_mnist_logreg", _audit_rows, _draw_audit),
)


def drawn(figure: DocFigure, docs: Optional[Path] = None):
    """`figure` drawn by the current code from its CSV: (matplotlib Figure, laid out itself)."""
    return figure.draw(pd.read_csv((docs or DOCS) / figure.data))


def redraw(figure: DocFigure, docs: Optional[Path] = None) -> Path:
    """Draw `figure` from its CSV into its PNG, its words in the PNG's `LABELS_KEY` chunk."""
    docs = docs or DOCS
    fig, laid_out = drawn(figure, docs)
    labels = json.dumps(figure_labels(fig), ensure_ascii=False)
    return save_figure(fig, docs / figure.png, layout=not laid_out, metadata={LABELS_KEY: labels})


def png_labels(path: Path) -> Optional[list[str]]:
    """The words a PNG was drawn with (its `LABELS_KEY` chunk), None when it has none."""
    from PIL import Image, PngImagePlugin

    with Image.open(path) as image:
        if not isinstance(image, PngImagePlugin.PngImageFile):
            raise ValueError(f"{path} is not a PNG")
        text = image.text.get(LABELS_KEY)
    return json.loads(text) if text is not None else None


def stale_figures(docs: Optional[Path] = None) -> list[str]:
    """Each docs figure whose PNG does not carry the words the current code draws from its
    CSV, with why: the docs then show labels the code no longer writes."""
    docs = docs or DOCS
    problems = []
    for figure in DOC_FIGURES:
        path = docs / figure.png
        if not path.is_file() or not (docs / figure.data).is_file():
            problems.append(f"{figure.png}: missing (or its data {figure.data})")
            continue
        have = png_labels(path)
        want = figure_labels(drawn(figure, docs)[0])
        if have != want:
            changed = sorted(set(want) ^ set(have or []))[:3]
            problems.append(f"{figure.png}: drawn with other words than the code's now "
                            f"({'; '.join(repr(text) for text in changed) or 'their order'})")
    return problems
