"""The checks a sweep's configuration must pass before any work starts, section by section.

Types and unknown keys are caught by the schema while Hydra composes (`sweeper.config.schema`);
these checks cover what types cannot express (ranges, names, combinations).  Each section of the
configuration has one named check (`SECTIONS`); `section_problems` runs them all and returns every
problem at once (`validation` adds the planner's and refuses a configuration with any).  The
attacks' side is in `attack_checks`, where and how a sweep runs in `infrastructure`, the shared
wording in `sweeper.config.problems`.

Cheap to import: what a check needs from torch (building a network, looking for a GPU), the
store or the reports is imported inside that check; the planner never is.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import re
import typing
from collections.abc import Callable
from typing import Any, Optional

from jobs.attacks.contract import ATTACKS
from jobs.datasets import DATASETS
from jobs.engine.accounting import CALIBRATING_ACCOUNTANTS
from jobs.settings import problems as setting_problems
from sweeper.axes import GRID_AXES, INT64_MAX, RECIPE_AXES
from sweeper.checks.attack_checks import check_policies_and_metrics, check_shadows_and_attacks
from sweeper.checks.infrastructure import (check_cluster, check_resources, check_secrets,
                                           check_store, check_tracking)
from sweeper.config.problems import Check, ConfigError, did_you_mean, local_accelerator, unknown, \
    whole_pool
from sweeper.config.schema import GridConfig, SweepConfig, grid_axes
from sweeper.paths import control_problem, name_problem, shortened

__all__ = ["Check", "ConfigError", "SECTIONS", "did_you_mean", "section_problems", "shape_problems"]

#: Attacks that read an exact mechanism's release rather than a network's logits.
MECHANISM_ATTACKS = tuple(name for name, attack in ATTACKS.items() if attack.reads_release)

#: Accountants Opacus offers that may not calibrate noise here, and why (exit 2, not a warning).
#: GDP is a central-limit approximation for many steps: over few steps it under-states ε (noise
#: calibrated by it for ε = 1, 3, 8 at q = 1/4, 8 steps spends 1.03, 4.09, 9.13 by an exact PLD
#: accountant), so the bounds and violation flags taken at the nominal ε would be invalid.
REFUSED_ACCOUNTANTS = {
    "gdp": "GDP is an asymptotic approximation that under-states the ε a finite run spends; "
           "calibrate with rdp (an upper bound) or prv (numerically exact) instead",
}
SCALES = ("full", "smoke")


def section_problems(cfg: SweepConfig) -> list[str]:
    """Every problem of `cfg`'s sections (field, value, what is allowed); [] if none.  The
    planner's problems are `sweeper.checks.validation`'s, which runs both.

    Pure but for three looks at this machine: whether `store.root` could be written (a probe
    folder is made and removed: nothing is left), whether it has the GPU that local Ray would
    need, and MLflow's own `MLFLOW_TRACKING_URI` when `tracking.uri` is null.
    """
    problems: list[str] = []

    def check(ok: bool, message: str) -> None:
        if not ok:
            problems.append(message)

    shapes = shape_problems(cfg)
    if shapes:  # the checks below compare, hash and count values: they need the schema's kinds
        return shapes
    for section in SECTIONS:
        section(cfg, check)
    return problems + _swept_model_problems(cfg, problems)


def _swept_model_problems(cfg: SweepConfig, found: list[str]) -> list[str]:
    """The checks that read the architecture (`MODEL_SECTIONS`), again for each other one
    `grid.model` sweeps: a model must fit the records, its attacks and its K as `model.name`
    does.  Each problem the default architecture does not have, named by its grid value."""
    from jobs.models import MODEL_NAMES

    extra: list[str] = []
    for model in dict.fromkeys(cfg.grid.model):
        if model == cfg.model.name or model not in MODEL_NAMES:  # unknown: the grid's check says
            continue
        other = copy.deepcopy(cfg)
        other.model.name = model

        def check(ok: bool, message: str, model: str = model) -> None:
            if not ok and message not in found and f"grid.model={model!r}: {message}" not in extra:
                extra.append(f"grid.model={model!r}: {message}")

        for section in MODEL_SECTIONS:
            section(other, check)
    return extra


_SCALARS = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}
_PLURALS = {int: "integers", float: "numbers", str: "strings", bool: "booleans"}


def _is_kind(value: object, kind: type) -> bool:
    if kind in (int, float) and isinstance(value, bool):
        return False
    return isinstance(value, (int, float) if kind is float else kind)


def shape_problems(cfg: Any, schema: type = SweepConfig, prefix: str = "") -> list[str]:
    """Values whose kind the schema does not allow, which Hydra lets through inside lists
    (`grid.epsilon=[[1]]`, `grid.attack=[[loss]]`, `[1,{a:1}]`): every other check would trip
    on them (unhashable, not comparable), so they are named first and alone."""
    problems = []
    hints = typing.get_type_hints(schema)
    for spec in dataclasses.fields(schema):
        kind, value, key = hints[spec.name], getattr(cfg, spec.name), prefix + spec.name
        if isinstance(kind, type) and dataclasses.is_dataclass(kind) and dataclasses.is_dataclass(value):
            problems += shape_problems(value, kind, key + ".")
        elif typing.get_origin(kind) is list and isinstance(value, list):
            element = typing.get_args(kind)[0]
            wrong = [v for v in value if not _is_kind(v, element)]
            if wrong and element in _SCALARS:
                problems.append(f"{key}={value!r}: {shortened(repr(wrong[0]), 60)} is not "
                                f"{_SCALARS[element]}; {key} takes a flat list of "
                                f"{_PLURALS[element]}, e.g. {key}=[a,b]")
    return problems


def check_top_level(cfg: SweepConfig, check: Check) -> None:
    """The top level: the sweep's name, the dataset, model, scale and report it names, its seed."""
    from jobs.models import MODEL_NAMES  # torch: only when validating
    from sweeper.reports import REPORTS

    bad_name = name_problem("name", cfg.name)
    check(bad_name is None, bad_name or "")
    check(cfg.dataset.name in DATASETS,
          unknown("dataset.name", cfg.dataset.name, sorted(DATASETS), "datasets"))
    check(cfg.model.name in MODEL_NAMES,
          unknown("model.name", cfg.model.name, sorted(MODEL_NAMES), "models"))
    check(cfg.scale in SCALES, unknown("scale", cfg.scale, SCALES, "scales"))
    check(cfg.report in REPORTS, unknown("report", cfg.report, sorted(REPORTS), "reports"))
    check(0 <= cfg.seed <= INT64_MAX,
          f"seed={cfg.seed}: must be ≥ 0 and ≤ {INT64_MAX} (it seeds NumPy's generators)")


def check_dataset(cfg: SweepConfig, check: Check) -> None:
    """`dataset`: record shape and classes (the model must build on them), sizes of the pool."""
    data = cfg.dataset
    _check_mechanism_pairing(cfg, check)
    if data.name in DATASETS or data.input_shape or data.num_classes:  # else: unknown, named once
        _check_records(cfg, check)
    check(data.data_dir.strip() != "", "dataset.data_dir='': give a folder (default ~/.cache/sweeper/data)")
    problem = control_problem("dataset.data_dir", data.data_dir)
    check(problem is None, problem or "")
    check(data.test_size > 0, f"dataset.test_size={data.test_size}: must be > 0")
    total = None if data.synthetic or data.name not in DATASETS else DATASETS[data.name].shuffled_records
    check(total is None or data.test_size < total,
          f"dataset.test_size={data.test_size}: dataset.name={data.name!r} has {total} records, "
          "and the test set is held out of them: leave some for the pool (at most "
          f"{(total or 1) - 1}, and the pool must still hold what the grid needs)")
    check(data.eval_records > 0, f"dataset.eval_records={data.eval_records}: must be > 0")
    check(data.members is None or data.pool_size is None,
          f"dataset.members={data.members}, dataset.pool_size={data.pool_size}: "
          "give at most one (members sets each model's pool from its p); set the other to null, "
          "e.g. dataset.members=null with dataset.pool_size (the quickstart sets members)")
    if data.members is not None:
        check(data.members >= data.eval_records,
              f"dataset.members={data.members}: must be ≥ dataset.eval_records "
              f"({data.eval_records}), since every pool holds the evaluation records")
    if data.pool_size is not None:
        check(data.pool_size >= data.eval_records,
              f"dataset.pool_size={data.pool_size}: must be ≥ dataset.eval_records "
              f"({data.eval_records})")
    if data.members is None and data.pool_size is None and data.eval_records > 0:
        whole = whole_pool(cfg)
        check(whole is None or data.eval_records <= whole,
              f"dataset.eval_records={data.eval_records}: larger than the pool of "
              f"dataset.name={data.name!r}, {whole} records"
              + ("" if data.synthetic else f" once dataset.test_size={data.test_size} are held out")
              + f"; evaluate at most {whole} (the first records of the pool), or set "
              "dataset.pool_size / dataset.members")


def _check_records(cfg: SweepConfig, check: Check) -> None:
    """The records' shape and classes (the registered dataset's unless set): the model must
    build on them."""
    from jobs.models import MEMBERSHIP_MECHANISM

    data = cfg.dataset
    shape_ok = len(data.input_shape) > 0 and all(d > 0 for d in data.input_shape)
    check(shape_ok, f"dataset.input_shape={list(data.input_shape)}: must list at least one size, "
                    "each > 0 (e.g. [1, 28, 28] for images, [107] for tabular records)")
    classes = 1 if cfg.model.name == MEMBERSHIP_MECHANISM else 2  # the mechanism classifies nothing
    check(data.num_classes >= classes, f"dataset.num_classes={data.num_classes}: must be ≥ {classes}"
                                       + (" for a classifier" if classes == 2 else ""))
    if shape_ok and data.num_classes >= classes:
        _check_model_fits_records(cfg, check)


def check_grid(cfg: SweepConfig, check: Check) -> None:
    """`grid` and `max_cells`: every axis's values, and the number of cells they cross into."""
    _check_grid_axes(cfg.grid, check)
    check(cfg.max_cells >= 1, f"max_cells={cfg.max_cells}: must be ≥ 1")
    axes = grid_axes(cfg.grid)
    cells = math.prod(axes.values())
    if cfg.max_cells >= 1 and cells > cfg.max_cells:
        sizes = " × ".join(f"{n} {axis}" for axis, n in axes.items())
        check(False, f"grid: {sizes} = {cells} cells, over max_cells={cfg.max_cells}; shrink an axis, "
                     f"or raise max_cells on purpose (e.g. max_cells={cells}); every attack is "
                     "counted with every policy, an upper bound for PDTP, which has no policy")


def check_train(cfg: SweepConfig, check: Check) -> None:
    """`train`: the DP-SGD recipe, accountant, K models per task, precision and device."""
    from jobs.engine.steps import PRECISIONS

    train = cfg.train
    for axis in RECIPE_AXES:  # the settings the grid may sweep, by their axes' rules
        value = functools.reduce(getattr, axis.setting.split("."), cfg)
        for holds, says in axis.rules:
            check(holds(value), f"{axis.setting}={value}: {says}")
    for problem in setting_problems(train, "train."):  # each field's declared rule
        check(False, problem)
    refused = REFUSED_ACCOUNTANTS.get(train.accountant)
    check(refused is None, f"train.accountant={train.accountant!r}: refused: {refused}")
    check(refused is not None or train.accountant in CALIBRATING_ACCOUNTANTS,
          unknown("train.accountant", train.accountant, CALIBRATING_ACCOUNTANTS, "accountants"))
    declared = train.rate_from == "declared"
    check(declared == (train.public_size is not None),
          f"train.public_size={train.public_size}: set it exactly when train.rate_from=declared "
          f"(it is {train.rate_from})")
    if isinstance(train.public_size, int) and train.public_size > public_size_bound(cfg):
        bound = public_size_bound(cfg)
        check(False, f"train.public_size={train.public_size}: over {bound}, {PUBLIC_SIZE_SCALE} × "
                     f"the {bound // PUBLIC_SIZE_SCALE} records of the pool of dataset "
                     f"{cfg.dataset.name}; DP-SGD would take ⌈size/batch_size⌉ ≈ "
                     f"{math.ceil(train.public_size / train.batch_size):.3g} steps an epoch. "
                     "Declare the size of the training set you publish, at most the bound")
    k = train.models_per_task
    check(k == "auto" or (isinstance(k, int) and not isinstance(k, bool) and k >= 1),
          f"train.models_per_task={k!r}: must be an integer ≥ 1 or auto")
    check(train.precision in PRECISIONS, unknown("train.precision", train.precision, PRECISIONS,
                                                  "precisions"))
    device_ok = train.device == "auto" or re.match(r"^(cpu|cuda(:\d+)?|mps)$", train.device) is not None
    check(device_ok, f"train.device={train.device!r}: use auto, cpu, cuda, cuda:N or mps"
                     + did_you_mean(train.device, ("auto", "cpu", "cuda", "mps")))
    if device_ok and cfg.cluster.address is None and train.device != "auto":
        kind = train.device.split(":")[0]
        check(kind not in ("cuda", "mps") or local_accelerator(kind),
              f"train.device={train.device!r}: this machine has no {kind.upper()} device and "
              "cluster.address is null (local Ray); use auto or cpu, or point cluster.address at a "
              "cluster that has one")


#: `train.public_size` may declare at most this many times the records of the dataset's pool: it
#: is the public size of a training set drawn from that pool, and DP-SGD takes ⌈size/batch_size⌉
#: steps an epoch (1e15 planned 1.6e13 steps an epoch: a sweep that never ends).
PUBLIC_SIZE_SCALE = 10


def public_size_bound(cfg: SweepConfig) -> int:
    """The largest `train.public_size` a sweep may declare: `PUBLIC_SIZE_SCALE` × the records of
    its dataset's pool, or of the largest pool of any dataset when its own is not known."""
    pool = whole_pool(cfg)
    if pool is None:
        pool = max(spec.pool_records(0) for spec in DATASETS.values())
    return PUBLIC_SIZE_SCALE * max(pool, 1)


def _check_model_fits_records(cfg: SweepConfig, check: Check) -> None:
    """Build the network once on the dataset's record shape: an image CNN on tabular records, or
    a record too small for its convolutions, is refused here rather than in a worker."""
    from jobs.models import ARCHITECTURES

    if cfg.model.name not in ARCHITECTURES or any(d <= 0 for d in cfg.dataset.input_shape):
        return
    shape = tuple(cfg.dataset.input_shape)
    reason = _build_error(cfg.model.name, shape, cfg.dataset.num_classes)
    if reason is None:
        return
    fitting = [name for name in ARCHITECTURES
               if _build_error(name, shape, cfg.dataset.num_classes) is None]
    kind = "tabular records" if len(shape) == 1 else "records"
    check(False, f"model.name={cfg.model.name!r} does not fit dataset.name={cfg.dataset.name!r}, "
                 f"whose {kind} have shape {list(shape)}"
                 + (" (it is an image model: it needs (channels, height, width))" if len(shape) != 3 else "")
                 + f": {reason}; the models that fit are {fitting}")


def _build_error(model: str, shape: tuple[int, ...], num_classes: int) -> Optional[str]:
    from jobs.models import build_model

    try:
        build_model(model, shape, num_classes)
    except (RuntimeError, ValueError, TypeError) as error:
        return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return None


def _check_mechanism_pairing(cfg: SweepConfig, check: Check) -> None:
    """The exact mechanism reads membership bits only, and only its own attack reads its output."""
    from jobs.models import MEMBERSHIP_MECHANISM, MODEL_NAMES

    exact = cfg.model.name == MEMBERSHIP_MECHANISM
    bits = cfg.dataset.name == "membership_bits"
    check(exact == bits or cfg.model.name not in MODEL_NAMES or cfg.dataset.name not in DATASETS,
          f"model.name={cfg.model.name!r} with dataset.name={cfg.dataset.name!r}: the "
          f"{MEMBERSHIP_MECHANISM!r} model goes with the 'membership_bits' dataset and only with it")
    anywhere = [name for name, attack in ATTACKS.items() if not attack.reads_model]
    for attack in cfg.grid.attack:
        if attack in anywhere or attack not in ATTACKS:
            continue
        fits = (attack in MECHANISM_ATTACKS) == exact
        check(fits, f"grid.attack: {attack!r} does not apply to model.name={cfg.model.name!r}; "
                    + (f"use {sorted(MECHANISM_ATTACKS)} or {' or '.join(anywhere)}" if exact else
                       f"{sorted(MECHANISM_ATTACKS)} only attack {MEMBERSHIP_MECHANISM!r}"))


def _check_grid_axes(grid: GridConfig, check: Check) -> None:
    """Each grid axis (`sweeper.axes.GRID_AXES`) as it declares: given (a recipe axis may be
    empty; an axis with an alternative is given one way, exactly), without duplicates, each
    value within its rules and, with `choices`, a name in that registry."""
    for axis in GRID_AXES:
        values = list(getattr(grid, axis.name))
        lists = [(axis.name, values, axis.rules)]
        alternative = axis.alternative
        if alternative is not None:
            given = list(getattr(grid, alternative.name))
            lists.append((alternative.name, given, alternative.rules))
            check(bool(values) != bool(given),
                  f"grid.{axis.name}={values}, grid.{alternative.name}={given}: give exactly "
                  f"one of them ({alternative.relation})")
        else:
            check(axis.recipe or len(values) > 0, f"grid.{axis.name}: must list at least one value")
        for name, listed, rules in lists:
            check(len(set(listed)) == len(listed), f"grid.{name}={listed}: has duplicates")
            for value in listed:
                for holds, says in rules:
                    check(holds(value), f"grid.{name}: {value} {says}")
        if axis.choices is not None:
            known = axis.choices()
            kind = getattr(known, "family", axis.name)
            for value in values:
                check(value in known, f"grid.{axis.name}: {value!r} is unknown; known "
                                      f"{kind[:-1] + 'ies' if kind.endswith('y') else kind + 's'} "
                                      f"are {sorted(known)}{did_you_mean(value, known)}")


def check_sequential(cfg: SweepConfig, check: Check) -> None:
    """`sequential`: each setting's rule, and a first look no later than the last trial."""
    sequential = cfg.sequential
    for problem in setting_problems(sequential, "sequential."):
        check(False, problem)
    if not sequential.enabled or not isinstance(sequential.min_trials, int):
        return
    trials = len(cfg.grid.trial)
    check(sequential.min_trials <= trials,
          f"sequential.min_trials={sequential.min_trials}: more than the {trials} trial(s) a cell "
          "may get (sequential.max_trials, else grid.trial's); give at most that")
    measured = [name for name in cfg.grid.attack
                if name in ATTACKS and not ATTACKS[name].measures_records]
    check(bool(measured) or not cfg.grid.attack,
          f"sequential.enabled=true: grid.attack={list(cfg.grid.attack)} has no attack with a "
          "precision to decide on")


#: The checks `section_problems` runs, one per section of the configuration, in this order.
SECTIONS: tuple[Callable[[SweepConfig, Check], None], ...] = (
    check_top_level, check_dataset, check_grid, check_shadows_and_attacks,
    check_policies_and_metrics, check_sequential, check_train, check_resources, check_cluster,
    check_store, check_tracking, check_secrets)
#: The checks that read `model.name`: run again for each architecture `grid.model` sweeps.
MODEL_SECTIONS: tuple[Callable[[SweepConfig, Check], None], ...] = (
    check_dataset, check_shadows_and_attacks, check_train)
