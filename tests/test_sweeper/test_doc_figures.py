"""The docs' figures are what the code draws now (issue 32.5: the quickstart's figure said
"points: mean over trials" long after the code had pooled them): each PNG carries the words it
was drawn with, the code redraws the figure from the numbers beside it, and the two must agree."""

from __future__ import annotations

import shutil
from pathlib import Path

from sweeper import doc_figures
from sweeper.cli.doc_figures_command import main
from sweeper.doc_figures import DOC_FIGURES, DOCS, png_labels, redraw, stale_figures

ROOT = Path(__file__).resolve().parents[2]


def test_every_docs_figure_carries_the_words_the_code_draws():
    assert stale_figures() == []
    shown = "".join(page.read_text(encoding="utf-8") for page in (ROOT / "docs").glob("*.md"))
    for figure in DOC_FIGURES:  # each is shown on some page of the docs
        assert f"]({figure.png})" in shown, figure.png
    (frontier,) = [f for f in DOC_FIGURES if f.png == "quickstart_frontier.png"]
    title = png_labels(DOCS / frontier.png)[0]
    assert "pooled over trials" in title and "mean over trials" not in title


def test_a_label_the_code_changed_is_caught_and_redrawn(tmp_path, monkeypatch, capsys):
    """Break it: change one legend entry of the frontier and its PNG is named stale, the other
    figure not; redrawn, it is current again."""
    docs = tmp_path / "docs"
    shutil.copytree(DOCS / doc_figures.DATA, docs / doc_figures.DATA)
    for figure in DOC_FIGURES:
        shutil.copy(DOCS / figure.png, docs / figure.png)
    monkeypatch.setattr("sweeper.reports.frontier_chart.BOUND_TEXT", "a bound, said otherwise")
    (problem,) = stale_figures(docs)
    assert problem.startswith("quickstart_frontier.png: drawn with other words")
    assert "a bound, said otherwise" in problem
    monkeypatch.setattr(doc_figures, "DOCS", docs)
    assert main(["--check"]) == 1 and "quickstart_frontier.png" in capsys.readouterr().err
    (frontier,) = [f for f in DOC_FIGURES if f.png == "quickstart_frontier.png"]
    redraw(frontier, docs)
    assert stale_figures(docs) == [] and main(["--check"]) == 0
