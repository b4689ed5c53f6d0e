"""Every registered report keeps a swept training setting's values apart (issue 31).

Why a test per report.  A report pools what its table gives it; handed two clip norms it reads
them as two trials.  The frontier, which every sweep draws on the whole table, keeps them apart
itself (a column and a panel per value); every other report is guarded at once by
`sweeper.reports.report_registry.draw`, which draws it once per value into `<label>=<value>/`.  So each
report is drawn through that one dispatcher from a table holding two values, and each folder's
CSVs must be exactly those of that value drawn alone, and differ from the other value's.  The
list comes from `REPORTS`: a report registered later fails by name until `TABLES` has a table
it draws.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from sweeper.axes import BY_NAME
from sweeper.reports import REPORTS, draw
from sweeper.store.artifacts import ArtifactStore
from testkit import report_frames
from testkit.report_frames import REPORT_TABLES as TABLES

#: The swept recipe axis and its two values; the second's table has other numbers.
AXIS = BY_NAME["max_grad_norm"]
VALUES = (0.5, 2.0)


def two_clip_norms(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` twice, at clip norms 0.5 and 2 (a swept training setting), the second with
    precisions moved, so a view that pooled the two would show neither."""
    second = frame.assign(max_grad_norm=2.0, tp=frame["tp"] // 2)
    return pd.concat([frame.assign(max_grad_norm=0.5), second], ignore_index=True)


def test_a_swept_training_setting_is_kept_apart_by_the_frontier(tmp_path):
    """Issue 31: clip norms pooled as if they were trials read as "2 trials".  Every view pools
    over the trial alone (`sweeper.axes.pooling_keys`); every other report is drawn once per
    value (below)."""
    from sweeper.frontier import format_summary, summarize_frontier
    from sweeper.reports import frontier_figure

    lira_frame = report_frames.lira_frame()
    frame = two_clip_norms(lira_frame)
    summary = summarize_frontier(frame)
    assert set(summary["max_grad_norm"]) == {0.5, 2.0}
    assert len(summary) == 2 * len(summarize_frontier(lira_frame))
    assert (summary["n_trials"] == len(lira_frame["trial"].unique())).all()
    assert "C" in format_summary(frame).splitlines()[0].split()
    titles = [axis.get_title() for axis in frontier_figure(frame).axes if axis.get_title()]
    assert sum("C=0.5" in t for t in titles) == sum("C=2" in t for t in titles) == 1
    table = pd.read_csv(REPORTS["frontier"](frame, tmp_path / "frontier")[1])
    assert len(table) == 2 * len(pd.read_csv(REPORTS["frontier"](lira_frame, tmp_path / "one")[1]))
    # Rows from before the axis existed (null) tell nothing apart: one view, as before.
    unswept = lira_frame.assign(max_grad_norm=float("nan"))
    assert len(summarize_frontier(unswept)) == len(summarize_frontier(lira_frame))


def swept_table(name: str, store: ArtifactStore) -> tuple[pd.DataFrame, list[pd.DataFrame]]:
    """The report's table at both values of the axis, and each value's rows alone."""
    if name not in TABLES:
        pytest.fail(f"report {name!r} has no table here: add its builder to TABLES")
    parts = [TABLES[name](store, variant).assign(**{AXIS.name: value})
             for variant, value in enumerate(VALUES)]
    return pd.concat(parts, ignore_index=True), parts


def csvs(folder: Path) -> dict[str, pd.DataFrame]:
    return {path.name: pd.read_csv(path) for path in sorted(folder.glob("*.csv"))}


def same(one: dict[str, pd.DataFrame], other: dict[str, pd.DataFrame]) -> bool:
    return one.keys() == other.keys() and all(
        one[name].shape == other[name].shape and one[name].equals(other[name]) for name in one)


@pytest.mark.parametrize("name", list(REPORTS))
def test_every_report_is_drawn_once_per_swept_value_from_its_rows_alone(name, tmp_path):
    store = tmp_path / "store"
    frame, parts = swept_table(name, ArtifactStore(store))
    context = {"store_root": store} if REPORTS[name].reads_scores else {}
    notes: list[str] = []
    written = draw(name, frame, tmp_path / "report", store, echo=notes.append)
    assert notes == []  # a report the dispatcher could not draw says so here: none may
    if REPORTS[name].whole_table:
        # Not the dispatcher's: every sweep draws it on the whole table, a column per value.
        assert written == []
        table = pd.read_csv(REPORTS[name](frame, tmp_path / "whole", **context)[1])
        for value, part in zip(VALUES, parts):
            alone = pd.read_csv(REPORTS[name](part, tmp_path / AXIS.format(value), **context)[1])
            assert AXIS.name in table and AXIS.name not in alone  # one value: no column
            mine = table[table[AXIS.name] == value].drop(columns=AXIS.name)
            pd.testing.assert_frame_equal(mine.reset_index(drop=True), alone)
        return
    folders = [tmp_path / "report" / AXIS.format(value) for value in VALUES]
    assert {path.parent for path in written} == set(folders)
    drawn = []
    for folder, part in zip(folders, parts):
        alone = REPORTS[name](part, tmp_path / "alone" / folder.name, **context)
        assert sorted(p.name for p in written if p.parent == folder) == sorted(p.name for p in alone)
        assert csvs(folder), f"{name} wrote no CSV to read back"
        # Its rows and no other's: exactly the CSVs of this value drawn alone.
        assert same(csvs(folder), csvs(alone[0].parent)), f"{folder.name} holds other rows"
        drawn.append(csvs(folder))
    # And the check discriminates: the two values' outputs differ, so folders handed the whole
    # table, or each other's rows, cannot both pass as their own.
    assert not same(*drawn)


@pytest.mark.parametrize("name", [name for name, report in REPORTS.items()
                                  if not report.whole_table])
def test_a_report_handed_several_swept_values_directly_refuses_them(name, tmp_path):
    """Called on its own with both values, a report that pools only trials would read them as
    trials (`fixed_bound` kept only the first value's targets): it refuses, naming the axis,
    whether called from the registry or by the name it is defined under."""
    import sweeper.reports as reports

    store = tmp_path / "store"
    frame, _ = swept_table(name, ArtifactStore(store))
    context = {"store_root": store} if REPORTS[name].reads_scores else {}
    defined = getattr(reports, REPORTS[name].draw.__name__, None)
    for call in filter(None, (REPORTS[name], defined)):
        with pytest.raises(ValueError, match=r"\(C=0\.5, C=2\).*once per value"):
            call(frame, tmp_path / "report", **context)
    assert not (tmp_path / "report").exists() or not any((tmp_path / "report").iterdir())
