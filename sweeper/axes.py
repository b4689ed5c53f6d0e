"""A cell's coordinates — the grid's axes — each declared once, here.

Why one declaration.  A coordinate listed by hand in each table, sort order, label and report is
one a new axis can miss, and a report that misses one pools its values as if they were trials
(two clip norms read as "2 trials").  So every coordinate is an `Axis`, and what needs the list
derives it: the Parquet columns (`sweeper.store.columns`), `sweeper.grid.plan.Cell.coordinates`, the sort
order, the pooling key every report and figure uses (`pooling_keys`), the labels, MLflow's
params, the `grid` section (`sweeper.config.schema.GridConfig`: a list per grid axis, its
default, its range checks, its registry, the alternative it may be given as), the smoke
shrink (`sweeper.grid.scale`), and the recipe axes the planner crosses (`RECIPE_AXES`).

Contract:
* `AXES`: every coordinate, in column order; `pooled` marks the one reports pool over (trial).
* A **grid axis** (`GRID_AXES`) is one `grid.<name>` lists the values of: those with `grid_values`
  (ε, δ, p, attack, policy, trial: the planner crosses them, ε and δ per privacy level with its
  shadows, p per target, attack per scoring task, policy per cell) and the recipe axes.  Each
  value must pass `rules` and, with `choices`, name an entry of that registry.  With an
  `alternative` the values may be given that way instead (p as γ, ε as a target bound β):
  exactly one of the two.
* A **recipe axis** (`recipe=True`) is a training setting: `grid.<name>` lists its values (empty:
  the sweep's own value alone, `Axis.setting`: `train.<name>`, or `model.name` for the
  architecture), each value trains its own models (its `TrainSettings`
  field, so the model key), and every row records the value its target trained with.  Adding one
  is its declaration here, with its range check.
* `pooling_keys(rows)`: every coordinate present but the pooled one (a recipe axis where the
  rows vary it); a report that needs a coarser view folds axes out of that, by name, itself.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Callable, Optional

#: A rule on one value of an axis, and what its check says when the value breaks it.
Rule = tuple[Callable[[Any], bool], str]
#: The largest integer NumPy's generators, Parquet's int64 columns and Ray's seeds take.
INT64_MAX = 2**63 - 1


def _first_two(values: list) -> list:
    return list(values)[:2]


@dataclass(frozen=True)
class Alternative:
    """Another way to give a grid axis's values (`grid.<name>` instead of the axis's own list:
    exactly one of the two is given), and what relates them, for the refusal."""

    name: str
    relation: str
    python_type: type = float
    rules: tuple[Rule, ...] = ()


@dataclass(frozen=True)
class Axis:
    """One coordinate of a cell."""

    name: str  # column, `Cell` attribute, MLflow param and `grid.<name>` for recipe axes
    type: str  # Arrow type name: "string", "float64" or "int64"
    doc: str  # the column's doc
    label: str  # how tables, figures and names write it ("ε", "p", "C")
    required: bool = True  # never null in a row (recipe axes are null in rows from before them)
    sort: Optional[int] = None  # position in every table's row order (the pooled axis: last)
    pooled: bool = False  # the axis reports pool over: another draw at the same coordinates
    recipe: bool = False  # a training setting the grid may sweep (`TrainSettings.<name>`)
    # `grid.<name>`'s default values, for a grid axis that is not a recipe axis (a recipe
    # axis's default is empty: the sweep's own value alone, `setting`); None: not in `grid`.
    grid_values: Optional[Callable[[], list]] = None
    python_type: builtins.type = float  # what `grid.<name>` holds
    rules: tuple[Rule, ...] = ()  # each grid value's range checks (a recipe axis's train value too)
    # The registry each value must name (attacks, policies, models), read when the check runs.
    choices: Optional[Callable[[], Collection]] = None
    alternative: Optional[Alternative] = None
    # What `scale=smoke` keeps of the axis's values (`sweeper.grid.scale`): at most two, small.
    smoke: Callable[[list], list] = _first_two
    # Read by DP-SGD alone (the clip norm): without DP one model serves every value.
    private_only: bool = False
    # For a recipe axis, the config field its unswept value comes from ("model.name"); None:
    # `train.<name>` (`setting`).
    unswept_from: Optional[str] = None

    @property
    def in_grid(self) -> bool:
        """Whether `grid.<name>` lists this axis's values."""
        return self.recipe or self.grid_values is not None

    def text(self, value: Any) -> str:
        """The value alone as tables and names write it (a number shortest, `0.5`)."""
        return f"{value:g}" if isinstance(value, float) else str(value)

    def format(self, value: Any) -> str:
        """The value as a label writes it: `label=value`."""
        return f"{self.label}={self.text(value)}"

    @property
    def setting(self) -> str:
        """The config field a recipe axis's value comes from when the grid does not sweep it."""
        return self.unswept_from or f"train.{self.name}"


def _attacks() -> Mapping:
    from jobs.attacks.contract import ATTACKS
    return ATTACKS


def _models() -> Collection:
    from jobs.models import MODEL_NAMES  # torch: only when a check asks

    return MODEL_NAMES


def _policies() -> Mapping:
    from jobs.policies import POLICIES

    return POLICIES


def _default_policies() -> list[str]:
    from jobs.policies import QUANTILE_MAX

    return [QUANTILE_MAX]


AXES: tuple[Axis, ...] = (
    Axis("dataset", "string", "dataset the models were trained on", "dataset", sort=0),
    Axis("model", "string", "architecture of the target and shadow models (grid.model, else "
                            "model.name)", "model", sort=6, recipe=True, python_type=str,
         choices=_models, unswept_from="model.name"),
    Axis("epsilon", "float64", "claimed ε of the target's training (inf: non-private)", "ε", sort=3,
         grid_values=lambda: [1.0, 8.0, math.inf],
         rules=((lambda v: v > 0 and not math.isnan(v), "must be > 0 (inf allowed: no privacy)"),),
         # Fixed bounds β (Thudi et al. §4.3): each p gets the ε whose bound U at (p, δ,
         # tpr_floor) is β, solved by the planner (`sweeper.bounds.epsilon_for_precision`).
         alternative=Alternative("precision_target", "a target bound fixes ε for each p",
                                 rules=((lambda v: 0 < v <= 1, "must be in (0, 1]"),))),
    Axis("delta", "float64", "claimed δ of the target's training", "δ", sort=4,
         grid_values=lambda: [1e-5], rules=((lambda v: 0 <= v < 1, "must be in [0, 1)"),)),
    Axis("p", "float64", "P(x* sampled into the training set): the prior of membership", "p", sort=5,
         grid_values=lambda: [0.2, 0.5, 0.8], rules=((lambda v: 0 < v <= 1, "must be in (0, 1]"),),
         # Non-members per member (Jayaraman et al.): p = 1/(1 + γ) for each.
         alternative=Alternative("gamma", "γ non-members per member means p = 1/(1 + γ)",
                                 rules=((lambda v: v > 0 and math.isfinite(v),
                                         "must be > 0 and finite"),))),
    Axis("target_precision", "float64", "the fixed bound β this cell's ε was solved for (NaN: "
                                        "none)", "β", required=False),
    Axis("attack", "string", "membership-inference attack", "attack", sort=1,
         grid_values=lambda: ["lira_online", "lira_offline", "loss", "always_member"],
         python_type=str, choices=_attacks, smoke=list),
    Axis("policy", "string", "threshold policy (quantile_max is an oracle on the evaluation "
                             "labels)", "policy", sort=2,
         grid_values=_default_policies, python_type=str, choices=_policies, smoke=list),
    Axis("max_grad_norm", "float64", "DP-SGD's clipping norm C the target trained with "
                                     "(grid.max_grad_norm, else train.max_grad_norm)", "C",
         required=False, sort=7, recipe=True, private_only=True,
         rules=((lambda v: v > 0 and math.isfinite(v), "must be > 0 and finite"),)),
    Axis("epochs", "int64", "epochs the target trained for (grid.epochs, else train.epochs)",
         "epochs", required=False, sort=8, recipe=True, python_type=int,
         rules=((lambda v: v >= 1, "must be ≥ 1"),), smoke=lambda values: [1, 2][:len(values)]),
    Axis("batch_size", "int64", "expected batch size of the target's training, hence DP-SGD's q "
                                "(grid.batch_size, else train.batch_size)", "B",
         required=False, sort=9, recipe=True, python_type=int,
         rules=((lambda v: v >= 1, "must be ≥ 1"),),
         smoke=lambda values: sorted({min(v, 64) for v in values})[:2]),
    Axis("trial", "int64", "trial index: another target drawn at the same coordinates", "trial",
         pooled=True, grid_values=lambda: [0], python_type=int,
         rules=((lambda v: v >= 0, "must be ≥ 0"),
                (lambda v: v <= INT64_MAX, f"is beyond a 64-bit integer (at most {INT64_MAX}), "
                                           "which seeds and Parquet's trial column hold"))),
)

BY_NAME = {axis.name: axis for axis in AXES}
#: Every coordinate's name, in column order.
COORDINATES: tuple[str, ...] = tuple(axis.name for axis in AXES)
#: The training settings the grid may sweep, in column order.
RECIPE_AXES: tuple[Axis, ...] = tuple(axis for axis in AXES if axis.recipe)
#: The axes `grid.<name>` lists values of, in column order.
GRID_AXES: tuple[Axis, ...] = tuple(axis for axis in AXES if axis.in_grid)
#: The row order of every table and command: the axes with a sort position, by it, then the
#: pooled one (trial), so that a table's trials sit together.
SORT_ORDER: list[str] = [axis.name for _, axis in sorted(
    ((a.sort, a) for a in AXES if a.sort is not None and not a.pooled), key=lambda pair: pair[0])
] + [axis.name for axis in AXES if axis.pooled]


def pooling_keys(rows: Any) -> list[str]:
    """What a row of a pooled table is, for `rows` (a DataFrame): every coordinate it has but
    the pooled one (trial), a recipe axis rows from before it hold null for only where `rows`
    vary it (`swept`; the model, always there, always), in column order.
    The one key every report, figure and view pools by."""
    varied = {axis.name for axis in swept(rows)}
    return [axis.name for axis in AXES if axis.name in rows and not axis.pooled
            and (not axis.recipe or axis.required or axis.name in varied)]


def swept(rows: Any) -> list[Axis]:
    """The recipe axes that take more than one value in `rows` (a DataFrame): the ones a view
    must show, since the sweep varies them.  Rows from before the axis existed hold no value
    (null), which tells nothing apart."""
    return [axis for axis in RECIPE_AXES
            if axis.name in rows and rows[axis.name].nunique(dropna=True) > 1]


def swept_in(grid: Any) -> tuple[str, ...]:
    """The recipe axes a sweep's `grid` section lists values for (an object, or a mapping such as
    the config read back from a manifest): the ones its cells are named by (`Cell.swept`).  Read
    from the config, not from rows: a row records every recipe value, swept or not."""
    def listed(name: str) -> Any:
        return grid.get(name) if isinstance(grid, Mapping) else getattr(grid, name, None)
    return tuple(axis.name for axis in RECIPE_AXES if listed(axis.name))
