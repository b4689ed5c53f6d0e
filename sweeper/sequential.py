"""The sequential frontier: each frontier cell gets trials one after another, only until its
precision interval meets its goal (`sequential.*`, docs/sequential.md).

Why.  A fixed grid gives every (ε, p) cell `grid.trial`'s trials whatever its data already say.
Here a frontier cell (every coordinate but the trial) gets `min_trials` trials at once, then its
next trial as soon as its last one lands while it is undecided, up to `max_trials`; its interval
is anytime-valid (`sweeper.bounds.anytime`), so looking after every trial does not spoil it.
A trial's target model is trained only when some cell that reads it asks for that trial.

    Decisions          the driver's view while the sweep runs: what to submit next, what is left
    replay             a resumed sweep's stored rows, told to it

The driver's loop that asks it is `sweeper.runner`'s (`_execute_sequential`): submit, land,
decide, submit.

The rule itself, on a cell's rows, is `sweeper.decisions` (light: the frontier command reads it).

Decisions are a function of the landed rows alone, read in trial order: a resumed sweep reads
its stored rows back and finds the decisions it had; the same seeds give the same rows, hence the
same decisions (unless `max_models` runs out, when which cell got the last model depends on
which landed first).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Sequence

from sweeper.config.schema import SequentialConfig
from sweeper.decisions import MEASURE, UNDECIDED, CellDecision, Goal, cell_decision
from sweeper.grid.plan import Cell, SweepPlan
from sweeper.listeners import Listener


def measures_records(attack: str) -> bool:
    """Whether `attack` is a measure per record (PDTP), not a membership test with a precision."""
    from jobs.attacks.contract import ATTACKS

    return attack in ATTACKS and ATTACKS[attack].measures_records


def frontier_key(cell: Cell) -> tuple[tuple[str, str], ...]:
    """A frontier cell's identity: every coordinate but the trial (NaN-safe, hashable)."""
    return tuple((name, repr(value)) for name, value in sorted(cell.coordinates.items())
                 if name != "trial")


@dataclass
class _Frontier:
    """One frontier cell's trials in order and what became of each."""

    cells: list[Cell]  # one per trial, in trial order
    counts: dict[int, tuple[int, int]] = field(default_factory=dict)  # trial index -> (tp, fp)
    bound: float = math.nan
    in_flight: set[int] = field(default_factory=set)
    failed: bool = False
    measure: bool = False  # PDTP: `min_trials` trials, nothing to decide


class Decisions(Listener):
    """The sequential driver's bookkeeping, told of each landed row as a listener: per frontier
    cell, which trials landed, which are in flight, whether it is decided; and the target
    models the sweep has used (its `max_models` budget).  A measure per record (PDTP) gets its
    `min_trials` trials and no more: it has no precision to decide on."""

    def __init__(self, plan: SweepPlan, settings: SequentialConfig) -> None:
        self.settings, self.goal = settings, Goal.of(settings)
        order = {trial: index for index, trial in enumerate(plan.config.grid.trial)}
        by_key: dict[tuple, list[Cell]] = defaultdict(list)
        for cell in plan.cells:
            by_key[frontier_key(cell)].append(cell)
        self.frontiers = {key: _Frontier(sorted(cells, key=lambda c: order[c.trial]),
                                         measure=measures_records(cells[0].attack))
                          for key, cells in by_key.items()}
        self.where = {cell.key: (key, index) for key, frontier in self.frontiers.items()
                      for index, cell in enumerate(frontier.cells)}
        self.max_trials = len(plan.config.grid.trial)
        self.models_used: set[str] = set()
        self.target_models = {cell.scores.target for cell in plan.cells}
        self.replayed = 0  # rows read back from the store (`replay`)

    @property
    def landed(self) -> int:
        """The rows landed, read back or computed."""
        return sum(len(frontier.counts) for frontier in self.frontiers.values())

    def record(self, cell: Cell, tp: int, fp: int, bound: float) -> None:
        key, index = self.where[cell.key]
        frontier = self.frontiers[key]
        frontier.counts[index] = (int(tp), int(fp))
        frontier.bound = float(bound)
        frontier.in_flight.discard(index)
        self.models_used.add(cell.scores.target)

    def on_cell_landed(self, cell: Cell, row: dict[str, Any]) -> None:
        self.record(cell, row["tp"], row["fp"], row["bound"])

    def on_cell_failed(self, cell: Cell, failure: Any) -> None:
        self.lost(cell)

    def lost(self, cell: Cell) -> None:
        """A trial that will not land: its cell stops where it is (a gap, reported as failed)."""
        key, index = self.where[cell.key]
        self.frontiers[key].in_flight.discard(index)
        self.frontiers[key].failed = True

    def landed_in_order(self, frontier: _Frontier) -> int:
        looks = 0
        while looks in frontier.counts:
            looks += 1
        return looks

    def verdict(self, frontier: _Frontier) -> CellDecision:
        looks = self.landed_in_order(frontier)
        counts = [frontier.counts[index] for index in range(looks)]
        return cell_decision([c[0] for c in counts], [c[1] for c in counts], frontier.bound,
                             self.goal)

    def next_cells(self) -> list[Cell]:
        """The trials to submit now: for each undecided cell, its first `min_trials` and then
        the one after its last landed trial, none in flight or landed already; a trial whose
        target model would pass `max_models` is held back (its cell ends undecided)."""
        budget = self.settings.max_models
        wanted = []
        for frontier in self.frontiers.values():
            if frontier.failed:
                continue
            looks = self.landed_in_order(frontier)
            if looks >= self.settings.min_trials and (frontier.measure
                                                     or self.verdict(frontier).decision):
                continue
            upto = min(self.max_trials, max(self.settings.min_trials, looks + 1))
            for index in range(upto):
                if index in frontier.counts or index in frontier.in_flight:
                    continue
                target = frontier.cells[index].scores.target
                if budget is not None and target not in self.models_used \
                        and len(self.models_used) >= budget:
                    break
                self.models_used.add(target)
                frontier.in_flight.add(index)
                wanted.append(frontier.cells[index])
        return wanted

    def skipped(self) -> list[str]:
        """The keys of the cells the sequential rule did not need: every trial past what each
        cell landed, once nothing is in flight (a failed cell's gap is its failure's)."""
        return [cell.key for frontier in self.frontiers.values() if not frontier.failed
                for index, cell in enumerate(frontier.cells)
                if index not in frontier.counts and index not in frontier.in_flight]

    def summary(self) -> dict[str, Any]:
        """What the sweep's summary says: the decisions by kind, and the target models used
        against the fixed grid's at `max_trials`."""
        kinds: dict[str, int] = defaultdict(int)
        for frontier in self.frontiers.values():
            if frontier.measure:
                kinds[MEASURE] += 1
                continue
            verdict = self.verdict(frontier)
            kinds["failed" if frontier.failed else verdict.decision or UNDECIDED] += 1
        return {"decisions": dict(kinds), "models_used": len(self.models_used),
                "models_fixed": len(self.target_models), "max_trials": self.max_trials}


def replay(decisions: Decisions, plan: SweepPlan, store: Any, present: Sequence[Cell]) -> None:
    """Tell `decisions` of the rows a resumed sweep already holds (`ArtifactStore.read_cell_table`),
    so it goes on from the decisions it had."""
    for cell in present:
        table = store.read_cell_table(plan.config.name, cell.key)
        row = table.select(["tp", "fp", "bound"]).to_pylist()[0]
        decisions.record(cell, row["tp"], row["fp"], row["bound"])
        decisions.replayed += 1
