"""A sweep's wall by task kind (`sweeper.task_times`): unions of spans worked by hand."""

from __future__ import annotations

import pytest

from sweeper.task_times import KindTime, kind_times, union_length, wall_split_line


@pytest.mark.parametrize("spans, length", [
    ([], 0.0),
    ([(0.0, 2.0)], 2.0),
    ([(0.0, 2.0), (1.0, 3.0)], 3.0),  # overlapping: [0, 3]
    ([(5.0, 6.0), (0.0, 2.0)], 3.0),  # apart, unsorted
    ([(0.0, 10.0), (2.0, 3.0), (4.0, 5.0)], 10.0),  # nested
    ([(0.0, 1.0), (1.0, 2.0)], 2.0),  # touching
    ([(3.0, 2.0)], 0.0),  # reversed: nothing
])
def test_the_union_of_spans(spans, length):
    assert union_length(spans) == pytest.approx(length)


def test_each_kind_has_its_wall_task_seconds_and_count():
    times = kind_times({"training": [(0.0, 10.0), (0.0, 8.0)], "attacks": [(9.0, 12.0)]})
    assert times == {"training": KindTime(10.0, 18.0, 2), "queries": KindTime(0.0, 0.0, 0),
                     "attacks": KindTime(3.0, 3.0, 1)}
    assert wall_split_line(times) == (
        "wall by task kind: training 10.0 s (2 tasks, 18.0 task-s); queries 0.0 s (0 tasks, "
        "0.0 task-s); attacks 3.0 s (1 tasks, 3.0 task-s) (kinds overlap)")
