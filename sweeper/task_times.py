"""Where a sweep's wall went: its training, query and attack tasks' spans, per kind.

Each finished task gives a span (start, end) in wall-clock seconds: a training task records
its own in each model's metadata (`started_at`, `ended_at`), a query task returns its own, and
an attack's ends when the driver receives it, `attack_seconds` after it started.  A kind's wall
is the length of the union of its tasks' spans (the time at least one of them ran); the kinds
overlap (attacks on one ε run while another ε's models train), so the three need not add up to
the sweep's wall.  Its task seconds are the sum of the spans (more than its wall when tasks ran
side by side).
"""

from __future__ import annotations

from dataclasses import dataclass

#: The kinds of task, in the order the summary names them.
KINDS = ("training", "queries", "attacks")


@dataclass(frozen=True)
class KindTime:
    """One kind of task's share of a sweep: its wall (the union of its spans), the sum of its
    spans, and how many there were."""

    wall: float
    task_seconds: float
    tasks: int


def union_length(spans: list[tuple[float, float]]) -> float:
    """The length of the union of the intervals [start, end] (an empty or reversed one adds 0)."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        start = max(start, reach)
        if end > start:
            total += end - start
            reach = end
    return total


def kind_times(spans: dict[str, list[tuple[float, float]]]) -> dict[str, KindTime]:
    """Each kind of `KINDS`'s wall, task seconds and count (zeros for a kind with no task)."""
    return {kind: KindTime(union_length(spans.get(kind, [])),
                           sum(max(0.0, end - start) for start, end in spans.get(kind, [])),
                           len(spans.get(kind, [])))
            for kind in KINDS}


def wall_split_line(times: dict[str, KindTime]) -> str:
    """The summary's line: each kind's wall, its task seconds and task count."""
    parts = [f"{kind} {t.wall:.1f} s ({t.tasks} tasks, {t.task_seconds:.1f} task-s)"
             for kind, t in times.items()]
    return "wall by task kind: " + "; ".join(parts) + " (kinds overlap)"
