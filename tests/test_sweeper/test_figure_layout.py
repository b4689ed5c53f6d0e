"""Every figure the project draws keeps its words apart and on its canvas (issue 43.3).

Each figure is checked as it is saved: `Figure.savefig` is wrapped so that every figure any
report, the bounds' plots or the docs' figures write is measured by
`testkit.figure_layout.layout_problems` at that moment (after `save_figure`'s layout).  The
reports draw the small real-shaped tables of `testkit.report_frames.REPORT_TABLES` (a report
registered later fails here by name until it has one); the docs' figures draw the rows real
sweeps produced (docs/figures/*.csv).  The detector itself is proven by planting the audit
figure's old faults in a real figure and seeing each named.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from matplotlib.figure import Figure

from sweeper.doc_figures import DOC_FIGURES, DOCS, drawn
from sweeper.figures import save_figure
from sweeper.reports import REPORTS
from sweeper.reports.engine_audit import ESTIMATORS
from sweeper.store.artifacts import ArtifactStore
from testkit.figure_layout import layout_problems
from testkit.report_frames import REPORT_TABLES


@pytest.fixture
def saved(monkeypatch) -> dict[str, list[str]]:
    """File name → the layout problems of the figure saved there, for every figure saved."""
    import sweeper.store.files as files

    found: dict[str, list[str]] = {}
    drawn: list[list[str]] = []  # the problems of the figure being saved, until it is written
    save, write = Figure.savefig, files.atomic_write_bytes

    def measured(fig, fname, *args, **kwargs):
        drawn.append(layout_problems(fig))
        return save(fig, fname, *args, **kwargs)

    def written(path, data, mode=None):  # `save_figure` renders the PNG, then writes it whole
        if drawn and Path(path).suffix == ".png":
            found[Path(path).name] = drawn.pop()
        return write(path, data, mode)

    monkeypatch.setattr(Figure, "savefig", measured)
    monkeypatch.setattr(files, "atomic_write_bytes", written)
    return found


def assert_laid_out(saved: dict[str, list[str]]) -> None:
    assert saved, "no figure was saved"
    problems = [f"{name}: {problem}" for name, found in saved.items() for problem in found]
    assert problems == []


@pytest.mark.parametrize("name", list(REPORTS))
def test_every_report_figure_keeps_its_words_apart_and_on_the_canvas(name, saved, tmp_path):
    if name not in REPORT_TABLES:
        pytest.fail(f"report {name!r} has no table in testkit.report_frames.REPORT_TABLES")
    store = tmp_path / "store"
    frame = REPORT_TABLES[name](ArtifactStore(store), 0)
    context = {"store_root": store} if REPORTS[name].reads_scores else {}
    written = REPORTS[name](frame, tmp_path / "out", **context)
    assert sorted(saved) == sorted(path.name for path in written if path.suffix == ".png")
    assert_laid_out(saved)


def test_the_bounds_figures_keep_their_words_apart_and_on_the_canvas(saved, tmp_path):
    from sweeper.bounds.plots import write_figures

    assert len(write_figures(tmp_path)) == len(saved) == 3
    assert_laid_out(saved)


@pytest.mark.parametrize("figure", DOC_FIGURES, ids=lambda figure: figure.png)
def test_the_docs_figures_keep_their_words_apart_from_the_real_rows(figure, saved, tmp_path):
    """Drawn from the rows real sweeps produced: the audit figure's two panels and seven
    attacks, which the small tables above do not reach."""
    fig, laid_out = drawn(figure)
    save_figure(fig, tmp_path / figure.png, layout=not laid_out)
    assert_laid_out(saved)


# -- the detector, proven by planting faults ------------------------------------------------


@pytest.fixture
def audit_figure(tmp_path) -> Figure:
    """The docs' audit figure (two panels, real rows), laid out and fitted as it is saved."""
    (figure,) = [f for f in DOC_FIGURES if f.png == "dpsgd_audit_epsilon.png"]
    fig, laid_out = drawn(figure)
    save_figure(fig, tmp_path / figure.png, layout=not laid_out)
    assert layout_problems(fig) == []
    return fig


def test_a_title_planted_on_the_panel_titles_is_caught(audit_figure):
    """The old audit figure's fault: its two-line suptitle sat on both panels' titles."""
    fig = audit_figure
    title = fig.axes[0].title.get_window_extent()
    top = fig.transFigure.inverted().transform((0, title.y1))[1]
    fig._suptitle.set_y(top)  # its top (va="top") at the panel titles' top
    problems = layout_problems(fig)
    assert any("figure text 'Canary audits" in p and "overlaps panel 0 title" in p
               for p in problems), problems
    assert any("overlaps panel 1 title" in p for p in problems), problems


def test_a_legend_beside_one_panel_running_into_the_next_is_caught(audit_figure):
    """The old audit figure's other fault: a 25-entry legend beside the left panel, cut by the
    right one and hiding its y-label."""
    fig = audit_figure
    left = fig.axes[0]
    handles = [left.scatter([1], [1], label=f"attack {i}: an estimator") for i in range(25)]
    left.legend(handles=handles, fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    problems = layout_problems(fig)
    assert "panel 0 legend runs into panel 1" in problems
    assert any(p.startswith("panel 0 legend overlaps panel 1 y tick") for p in problems), problems


def test_a_legend_outside_the_canvas_is_caught(audit_figure):
    fig = audit_figure
    (legend,) = fig.legends
    legend.set_bbox_to_anchor((0.5, -0.6), transform=fig.transFigure)  # below the canvas
    problems = layout_problems(fig)
    assert len(problems) == 1 and problems[0].startswith("figure legend leaves the canvas")


def test_crowded_tick_labels_are_caught():
    fig = Figure(figsize=(2, 2))
    ax = fig.add_subplot()
    ax.set_xticks(range(10), [f"ε = {value}" for value in range(10)])
    assert any("x tick" in p and "overlaps" in p and "x tick" in p.split("overlaps")[1]
               for p in layout_problems(fig))


def test_fitting_the_canvas_moves_nothing_it_only_adds_room(tmp_path):
    """`save_figure` grows the canvas to hold a legend placed below the panels: the panels keep
    their size in inches and the legend its place under them."""
    fig = Figure(figsize=(4, 3))
    ax = fig.add_subplot()
    ax.plot([0, 1], [0, 1], label="a line")
    legend = fig.legend(loc="upper center", bbox_to_anchor=(0.5, 0.0))
    fig.tight_layout()
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig).draw()
    before = (ax.get_window_extent().width, ax.get_window_extent().height)
    assert any("figure legend leaves the canvas" in p for p in layout_problems(fig))
    save_figure(fig, tmp_path / "fitted.png", layout=False)
    assert layout_problems(fig) == []
    assert (ax.get_window_extent().width, ax.get_window_extent().height) == pytest.approx(before)
    assert fig.get_size_inches()[1] > 3
    assert legend.get_window_extent().y1 <= ax.get_window_extent().y0  # still under the panel


def test_the_audit_figure_never_joins_points_of_different_claimed_epsilon(audit_figure):
    """Each claimed ε is its own training: no line runs between two of its points (the old
    figure joined them); the only line is the diagonal, and the last-iterate ceiling is one
    level bar per claimed ε."""
    from matplotlib.collections import LineCollection

    fig = audit_figure
    rows = pd.read_csv(DOCS / "figures" / "dpsgd_audit_epsilon.csv")
    for ax in fig.axes:
        (diagonal,) = ax.get_lines()
        assert diagonal.get_linestyle() == "--"
        assert sum(len(c.get_offsets()) for c in ax.collections
                   if not isinstance(c, LineCollection)) > 0
        (ceiling,) = [c for c in ax.collections if isinstance(c, LineCollection)]
        segments = ceiling.get_segments()
        assert len(segments) == rows["epsilon"].nunique()
        for (x0, y0), (x1, y1) in segments:  # level, around its own ε alone
            assert y0 == y1 and x0 < x1
            assert sum(x0 <= e <= x1 for e in rows["epsilon"].unique()) == 1
    # One legend entry per attack and per estimator the rows hold, not one per pair, beside
    # the diagonal and the ceiling.
    estimators = rows.reindex(columns=list(ESTIMATORS)).notna().any().sum()
    assert len(fig.legends[0].get_texts()) == 2 + rows["attack"].nunique() + estimators
