"""Every problem of a sweep's configuration, found before anything starts.

Two layers answer: the configuration's own checks (`sweeper.config`, section by section: ranges,
names, combinations, infrastructure) and the planner's (what only the grid as the planner
crosses it can tell, from facts known without loading data: targets no ε reaches and PDTP
targets with too few members, `plan_problems`; models' pools larger than the dataset, read off
the plan itself).
This module sits above both, so the configuration's checks never import the planner.

The plan is built once per sweep, here: `validate` checks the plan it builds (the models' pools
against the dataset's) and returns it, and the runner runs that plan (`sweeper.runner.prepare`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from jobs.attacks.contract import ATTACKS
from jobs.datasets import DATASETS, pool_records
from sweeper.bounds import epsilon_for_precision
from sweeper.checks.sections import section_problems, shape_problems
from sweeper.config.problems import Check, ConfigError, whole_pool
from sweeper.config.schema import SweepConfig, sampling_rates

if TYPE_CHECKING:  # the planner imports the engine: loaded once a configuration is checked
    from sweeper.grid.plan import SweepPlan

__all__ = ["find_problems", "plan_problems", "validate"]


def find_problems(cfg: SweepConfig) -> list[str]:
    """Every problem of `cfg`: the sections' checks, then the planner's.

    Pure but for the looks at this machine that `section_problems` takes (a probe folder under
    `store.root`, the local GPU, `MLFLOW_TRACKING_URI`).

    Returns:
        One line per problem (the field, the value given, what is allowed); [] if none.
    """
    return _problems_and_plan(cfg)[0]


def validate(cfg: SweepConfig) -> SweepPlan:
    """`cfg`'s plan (`sweeper.grid.plan.build_plan`), built once, once `cfg` passed every check:
    the runner runs it as it is (`sweeper.runner.prepare`), never planning the sweep again.

    Args:
        cfg: the configuration at its scale (`sweeper.grid.scale.scaled`).

    Raises:
        ConfigError: naming every problem `find_problems` finds."""
    problems, plan = _problems_and_plan(cfg)
    if problems or plan is None:
        raise ConfigError(problems)
    return plan


def _problems_and_plan(cfg: SweepConfig) -> tuple[list[str], Optional[SweepPlan]]:
    """`find_problems`, and the plan when there are none: it is built once every other check
    passed (its kinds, values and combinations), and checked itself."""
    problems = section_problems(cfg)
    if shape_problems(cfg):  # the planner compares and counts values: it needs their kinds
        return problems, None
    problems += plan_problems(cfg)
    if problems:
        return problems, None
    from sweeper.grid.plan import build_plan

    try:
        plan = build_plan(cfg)
    except ValueError as error:  # a plan that cannot be built: its reason, one line
        return [f"the grid cannot be planned: {str(error).strip().splitlines()[0]}"], None
    problems = _plan_fit_problems(cfg, plan)
    return problems, None if problems else plan


def plan_problems(cfg: SweepConfig) -> list[str]:
    """The grid's problems as the planner sees them, before a plan is built: targets no ε
    reaches, PDTP targets with too few members.

    Args:
        cfg: a configuration whose values have the schema's kinds.

    Returns:
        One line per problem; [] if none.
    """
    problems: list[str] = []

    def check(ok: bool, message: str) -> None:
        if not ok:
            problems.append(message)

    _check_targets_reachable(cfg, check)
    _check_retrained_members(cfg, check)
    return problems


def _check_targets_reachable(cfg: SweepConfig, check: Check) -> None:
    """Every (β, p, δ) of a fixed-bound grid must have an ε; the bound's solver says why not."""
    grid = cfg.grid
    if not all(0 < target <= 1 for target in grid.precision_target):
        return  # the grid's check names those
    for target in grid.precision_target:
        for prior in sampling_rates(grid):
            for delta in grid.delta:
                if not (0 < prior <= 1 and 0 <= delta < 1):
                    continue
                try:
                    epsilon_for_precision(target, prior, delta, cfg.metrics.tpr_floor,
                                          form=cfg.metrics.bound_form)
                except ValueError as error:
                    check(False, f"grid.precision_target: {target} at p={prior:g}, δ={delta:g}: {error}")


def _check_retrained_members(cfg: SweepConfig, check: Check) -> None:
    """An attack that retrains each target without some of its members (PDTP) needs every target
    to hold that many.  The target's membership mask is drawn from a seed the plan fixes, so the
    count is known exactly here, before anything trains."""
    from jobs.engine.training import draw_mask
    from sweeper.grid.plan import pool_size_for, target_mask_seed

    for name in cfg.grid.attack:
        setting = ATTACKS[name].retrains if name in ATTACKS else None
        if not setting:
            continue
        left_out = getattr(ATTACKS[name].settings_from(cfg.attack), setting)
        if left_out < 1:
            continue  # the setting's own rule names it
        for p in sampling_rates(cfg.grid):
            pool = pool_size_for(cfg, p) or whole_pool(cfg) if 0 < p <= 1 else None
            if pool is None:
                continue
            for trial in cfg.grid.trial:
                members = int(draw_mask(pool, p, target_mask_seed(cfg, trial), False).sum())
                if members < left_out:
                    check(False, f"attack.{setting}={left_out}: the {name} target at p={p:g}, "
                                 f"trial={trial} holds only {members} members (of a pool of "
                                 f"{pool} records), so it cannot leave out that many; use at most "
                                 f"{members}, or a larger p or pool")
                    return


def _plan_fit_problems(cfg: SweepConfig, plan: SweepPlan) -> list[str]:
    """The records the plan's models reach (dataset.members or pool_size ÷ the smallest p, the
    shadows' records past them) against the pool the dataset holds, known without loading it:
    refused here, not once Ray has started and the data has loaded."""
    pool = None if cfg.dataset.synthetic else pool_records(cfg.dataset.name, cfg.dataset.test_size)
    if pool is None:
        return []
    models = list(plan.models.values())
    sizes = [spec.records_needed for spec in models]
    known = [size for size in sizes if size is not None]
    needed = max(known) if known and len(known) == len(sizes) else None  # None: one reads all
    if needed is None or needed <= pool:
        return []
    return [f"dataset.name={cfg.dataset.name!r} has {pool} pool records"
            + ("" if pool == DATASETS[cfg.dataset.name].shuffled_records else
               f" (dataset.test_size={cfg.dataset.test_size} held out)")
            + f", but the grid needs {needed} (dataset.members={cfg.dataset.members}, "
            f"dataset.pool_size={cfg.dataset.pool_size}, ÷ the smallest p"
            + (", plus the shadows' records past them" if cfg.shadow.disjoint_data else "")
            + (", plus the mislabeled canaries past every pool"
               if any(spec.canaries is not None and spec.canaries.records_needed
                      for spec in models) else "")
            + "); lower dataset.members / dataset.pool_size or raise the smallest p"]
