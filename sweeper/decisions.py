"""The sequential frontier's rule on a cell's rows: decided (how, at which trial) or not.

Pure and light (NumPy, pandas, `sweeper.bounds.anytime`): the sweep's driver
(`sweeper.sequential`) and the frontier command, which reads a sequential sweep's decisions back
from its rows and its config (`with_decisions`), apply the same rule.  Decisions are a function
of the rows alone, read in trial order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd

from sweeper.bounds.anytime import anytime_precision_interval, decide

#: A frontier cell still short of its goal when its trials (or the sweep's models) ran out.
UNDECIDED = "undecided"
#: A measure per record (PDTP) has no precision to decide on: it gets `min_trials` trials.
MEASURE = "measure"


@dataclass(frozen=True)
class Goal:
    """A cell's goal and when it is first looked at: `sequential.*`'s level, width, margin and
    min_trials."""

    level: float
    width: float
    margin: float
    min_trials: int

    @classmethod
    def of(cls, settings: Any) -> "Goal":
        """From a `SequentialConfig` or its plain mapping (a manifest's config)."""
        values = settings if isinstance(settings, dict) else vars(settings)
        return cls(float(values["level"]), float(values["width"]), float(values["margin"]),
                   int(values["min_trials"]))


@dataclass(frozen=True)
class CellDecision:
    """Where one frontier cell stands: `decision` ("violation", "below", "width", "" while
    undecided), the look it was taken at (`trials` pooled), and that look's interval."""

    decision: str
    trials: int
    low: float
    high: float


def cell_decision(tp: Sequence[int], fp: Sequence[int], bound: float,
                  goal: Goal) -> CellDecision:
    """The sequential rule on one cell's per-trial counts, in trial order: the first look at or
    after `min_trials` whose anytime interval (`anytime_precision_interval`) meets the goal
    (`sweeper.bounds.anytime.decide`), else the last look, undecided."""
    if not len(tp):
        return CellDecision("", 0, math.nan, math.nan)
    low, high = anytime_precision_interval(np.cumsum(tp), np.cumsum(fp), goal.level)
    said = decide(low, high, bound, goal.width, goal.margin)
    looked = np.arange(1, len(tp) + 1) >= goal.min_trials
    met = np.flatnonzero(looked & (said != ""))
    at = int(met[0]) if met.size else len(tp) - 1
    return CellDecision(str(said[at]) if met.size else "", at + 1, float(low[at]), float(high[at]))


def frontier_decisions(frame: pd.DataFrame, keys: Sequence[str],
                       goal: Goal, max_trials: int) -> pd.DataFrame:
    """`cell_decision` for each frontier cell of a sweep's rows (grouped by `keys`, the
    frontier's pooling keys, trials in order): `decision` (how it was decided, or "undecided"
    at the budget, "running" when it may still get trials, "measure" for PDTP, which has no
    precision), `decided_at` (the trials its decision pooled), and its anytime interval
    `sequential_low`, `sequential_high`."""
    rows = []
    for key, group in frame.sort_values("trial").groupby(list(keys), sort=True, dropna=False):
        if group["precision"].isna().all() and "pdtp_records" in group \
                and group["pdtp_records"].notna().any():  # PDTP: a measure, no precision
            rows.append({**dict(zip(keys, key)), "decision": MEASURE, "decided_at": math.nan,
                         "sequential_low": math.nan, "sequential_high": math.nan})
            continue
        verdict = cell_decision(group["tp"].to_numpy(int), group["fp"].to_numpy(int),
                                float(group["bound"].mean()), goal)
        said = verdict.decision or (UNDECIDED if verdict.trials >= max_trials else "running")
        rows.append({**dict(zip(keys, key)), "decision": said,
                     "decided_at": verdict.trials if verdict.decision else math.nan,
                     "sequential_low": verdict.low, "sequential_high": verdict.high})
    return pd.DataFrame(rows, columns=[*keys, "decision", "decided_at", "sequential_low",
                                       "sequential_high"])


def with_decisions(frame: pd.DataFrame, config: dict[str, Any]) -> pd.DataFrame:
    """A sweep's rows with its frontier cells' decisions on each (`frontier_decisions`'
    columns), when its config (`config`, plain containers: the manifest's) is sequential; the
    rows as they are otherwise."""
    settings = config.get("sequential") or {}
    if not settings.get("enabled") or frame.empty:
        return frame
    from sweeper.axes import pooling_keys

    keys = pooling_keys(frame)
    decided = frontier_decisions(frame, keys, Goal.of(settings), len(config["grid"]["trial"]))
    return frame.merge(decided, on=keys, how="left")


def summary_line(summary: dict[str, Any]) -> str:
    """'sequential: trained N of the M models the fixed grid of max_trials would; …'."""
    decisions = ", ".join(f"{count} {kind}" for kind, count in sorted(summary["decisions"].items()))
    return (f"sequential: trained {summary['models_used']} of the {summary['models_fixed']} "
            f"target models the fixed grid of {summary['max_trials']} trials would "
            f"({summary['models_used'] / max(1, summary['models_fixed']):.0%}; shadows as the "
            f"fixed grid); cells: {decisions}")
