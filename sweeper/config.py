"""The sweep's configuration schema and its validation.

The dataclasses are registered with Hydra's ConfigStore as the schema of `conf/config.yaml`, so
types and unknown keys are caught while Hydra composes; `validate` then checks what types cannot
express (ranges, names, combinations) and reports every problem at once, before any work starts.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from jobs.attacks import ATTACKS, AttackSettings
from jobs.data import IMAGE_DATASETS, LOADERS
from jobs.models import ARCHITECTURES, MEMBERSHIP_MECHANISM, MODEL_NAMES, build_model
from jobs.policies import OBJECTIVES, POLICIES, CalibrationSettings
from sweeper.bounds import BOUND_FORMS, epsilon_for_precision
from sweeper.reports import REPORTS

#: Attacks that read an exact mechanism's release rather than a network's logits.
MECHANISM_ATTACKS = tuple(name for name, attack in ATTACKS.items() if attack.reads_release)

ACCOUNTANTS = ("rdp", "prv", "gdp")
OPTIMIZERS = ("sgd", "adam")
SCALES = ("full", "smoke")
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


@dataclass
class DatasetConfig:
    name: str = "mnist_subset"
    data_dir: str = "~/.cache/sweeper/data"
    download: bool = True
    # Records held out for test accuracy; never in any pool.
    test_size: int = 1000
    # Use only the first `pool_size` records of the training split as the pool (null: all).
    pool_size: Optional[int] = None
    # Instead of pool_size: a model sampled at rate p draws from the first members/p records, so
    # its training set has `members` records on average (Jayaraman et al.'s 10 000).
    members: Optional[int] = None
    # The attack is evaluated on the first `eval_records` records of the pool (Thudi et al.: 1000).
    eval_records: int = 1000
    # What one record looks like and how many classes there are: the models are built from it,
    # and `synthetic` data (deterministic, learnable) of exactly this shape can stand in.
    input_shape: list[int] = field(default_factory=lambda: [1, 28, 28])
    num_classes: int = 10
    synthetic: bool = False


@dataclass
class ModelConfig:
    name: str = "mnist_cnn"


@dataclass
class TrainConfig:
    epochs: int = 15
    # Expected batch size; DP-SGD samples each record per step with rate batch_size / |D|.
    batch_size: int = 128
    lr: float = 0.05
    momentum: float = 0.9
    max_grad_norm: float = 1.0
    accountant: str = "rdp"
    device: str = "auto"
    # "sgd" (with `momentum`; Thudi et al.) or "adam" (DP-Adam; Jayaraman et al.).
    optimizer: str = "sgd"


@dataclass
class GridConfig:
    epsilon: list[float] = field(default_factory=lambda: [1.0, 8.0, math.inf])
    delta: list[float] = field(default_factory=lambda: [1e-5])
    p: list[float] = field(default_factory=lambda: [0.2, 0.5, 0.8])
    attack: list[str] = field(default_factory=lambda: ["lira_online", "lira_offline", "loss", "always_member"])
    policy: list[str] = field(default_factory=lambda: ["quantile_max"])
    trial: list[int] = field(default_factory=lambda: [0])
    # Instead of `p`: non-members per member (Jayaraman et al.), p = 1/(1 + γ) for each.
    gamma: list[float] = field(default_factory=list)
    # Instead of `epsilon`: fixed bounds β (Thudi et al. §4.3); each p gets the ε whose bound U at
    # (p, δ, tpr_floor) is β, solved by the planner (`sweeper.bounds.epsilon_for_precision`).
    precision_target: list[float] = field(default_factory=list)


@dataclass
class ShadowConfig:
    # Shadow models per ε, trained at p = 0.5 with complementary pairs of masks, so every record
    # is IN for exactly half of them (Carlini et al.'s balanced design). Must be even.
    count: int = 8
    p: float = 0.5


@dataclass
class MetricsConfig:
    # Floor on the TPR s in the bound's δ-term (Thudi et al. 2024 §4.3 use 0.01).
    tpr_floor: float = 0.01
    # The bound's δ-term: "derived" (valid for every p; see README) or "printed" (as in the paper).
    bound_form: str = "derived"
    # A cell is flagged as a violation when the data prove, at this level (one-sided, corrected
    # for the thresholds searched), a precision above the bound.
    violation_alpha: float = 0.001


@dataclass
class StoreConfig:
    root: str = "runs"


@dataclass
class TrackingConfig:
    # MLflow tracking URI; null means a SQLite file under store.root.
    uri: Optional[str] = None
    experiment: str = "sweeper"


@dataclass
class ClusterConfig:
    # Address of an existing Ray cluster ("auto", "ray://host:10001", …); null starts local Ray.
    address: Optional[str] = None
    num_cpus: Optional[int] = None
    include_dashboard: bool = True
    dashboard_host: str = "127.0.0.1"
    dashboard_port: int = 8265


@dataclass
class TaskResources:
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    max_retries: int = 3


@dataclass
class ResourcesConfig:
    train: TaskResources = field(default_factory=TaskResources)
    attack: TaskResources = field(default_factory=lambda: TaskResources(num_cpus=1.0))


@dataclass
class SweepConfig:
    name: str = "quickstart"
    seed: int = 0
    # "smoke" shrinks grid, epochs, shadows and records without changing the experiment's shape.
    scale: str = "full"
    # The figures this experiment draws besides the frontier (`sweeper.reports`).
    report: str = "frontier"
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    grid: GridConfig = field(default_factory=GridConfig)
    shadow: ShadowConfig = field(default_factory=ShadowConfig)
    attack: AttackSettings = field(default_factory=AttackSettings)
    calibration: CalibrationSettings = field(default_factory=CalibrationSettings)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    resources: ResourcesConfig = field(default_factory=ResourcesConfig)


def register_schema() -> None:
    ConfigStore.instance().store(name="sweep_schema", node=SweepConfig)


class ConfigError(ValueError):
    """Every problem found in a configuration, one per line."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("invalid configuration:\n" + "\n".join(f"  - {p}" for p in problems))


def to_sweep_config(cfg: DictConfig | SweepConfig) -> SweepConfig:
    if isinstance(cfg, SweepConfig):
        return cfg
    merged = OmegaConf.merge(OmegaConf.structured(SweepConfig), cfg)
    return OmegaConf.to_object(merged)  # type: ignore[return-value]


def validate(cfg: SweepConfig) -> None:
    """Raise ConfigError naming every problem (field, value, what is allowed)."""
    problems: list[str] = []

    def check(ok: bool, message: str) -> None:
        if not ok:
            problems.append(message)

    check(bool(NAME_PATTERN.match(cfg.name)),
          f"name={cfg.name!r}: use letters, digits, '_', '-', '.' (it becomes a folder name)")
    check(cfg.dataset.name in LOADERS,
          f"dataset.name={cfg.dataset.name!r}: known datasets are {sorted(LOADERS)}")
    check(cfg.model.name in MODEL_NAMES,
          f"model.name={cfg.model.name!r}: known models are {sorted(MODEL_NAMES)}")
    _check_mechanism_pairing(cfg, check)
    _check_model_fits_records(cfg, check)
    check(cfg.dataset.test_size > 0, f"dataset.test_size={cfg.dataset.test_size}: must be > 0")
    check(cfg.dataset.eval_records > 0,
          f"dataset.eval_records={cfg.dataset.eval_records}: must be > 0")
    check(cfg.dataset.members is None or cfg.dataset.pool_size is None,
          f"dataset.members={cfg.dataset.members}, dataset.pool_size={cfg.dataset.pool_size}: "
          "give at most one (members sets each model's pool from its p)")
    if cfg.dataset.members is not None:
        check(cfg.dataset.members >= cfg.dataset.eval_records,
              f"dataset.members={cfg.dataset.members}: must be ≥ dataset.eval_records "
              f"({cfg.dataset.eval_records}), since every pool holds the evaluation records")
    if cfg.dataset.pool_size is not None:
        check(cfg.dataset.pool_size >= cfg.dataset.eval_records,
              f"dataset.pool_size={cfg.dataset.pool_size}: must be ≥ dataset.eval_records "
              f"({cfg.dataset.eval_records})")

    _check_grid(cfg.grid, check, cfg)

    check(cfg.shadow.count >= 2 and cfg.shadow.count % 2 == 0,
          f"shadow.count={cfg.shadow.count}: must be an even number ≥ 2 (complementary mask pairs)")
    check(0 < cfg.shadow.p < 1, f"shadow.p={cfg.shadow.p}: must be in (0, 1)")
    check(cfg.attack.lira_variance in ("auto", "global", "per_record"),
          f"attack.lira_variance={cfg.attack.lira_variance!r}: use auto, global or per_record")
    augmenting = cfg.attack.augment_flip or cfg.attack.augment_shift != 0
    check(cfg.attack.augment_shift >= 0,
          f"attack.augment_shift={cfg.attack.augment_shift}: must be ≥ 0 (pixels)")
    check(not augmenting or cfg.dataset.name in IMAGE_DATASETS,
          f"attack.augment_flip/augment_shift: query augmentations need an image dataset "
          f"({list(IMAGE_DATASETS)}); dataset.name={cfg.dataset.name!r}")
    check(cfg.attack.loss_bound is None or cfg.attack.loss_bound > 0,
          f"attack.loss_bound={cfg.attack.loss_bound}: must be > 0 (or null)")
    check(cfg.attack.merlin_perturbations >= 1,
          f"attack.merlin_perturbations={cfg.attack.merlin_perturbations}: must be ≥ 1")
    check(cfg.attack.merlin_sigma > 0, f"attack.merlin_sigma={cfg.attack.merlin_sigma}: must be > 0")
    check(cfg.attack.pdtp_records >= 1, f"attack.pdtp_records={cfg.attack.pdtp_records}: must be ≥ 1")
    check(cfg.attack.pdtp_seeds >= 1, f"attack.pdtp_seeds={cfg.attack.pdtp_seeds}: must be ≥ 1")
    check(0 <= cfg.attack.morgan_min_tpr < 1,
          f"attack.morgan_min_tpr={cfg.attack.morgan_min_tpr}: must be in [0, 1)")
    check(0 < cfg.attack.morgan_fpr < 1, f"attack.morgan_fpr={cfg.attack.morgan_fpr}: must be in (0, 1)")
    check(0 < cfg.attack.loss_clamp < 1,
          f"attack.loss_clamp={cfg.attack.loss_clamp}: must be in (0, 1)")
    check(0 < cfg.metrics.tpr_floor <= 1,
          f"metrics.tpr_floor={cfg.metrics.tpr_floor}: must be in (0, 1]")
    check(cfg.calibration.objective in OBJECTIVES,
          f"calibration.objective={cfg.calibration.objective!r}: use one of {list(OBJECTIVES)}")
    check(0 < cfg.calibration.fpr < 1, f"calibration.fpr={cfg.calibration.fpr}: must be in (0, 1)")
    if "calibrated" in cfg.grid.policy:
        lira = [a for a in cfg.grid.attack if a.startswith("lira")]
        check(not lira or cfg.shadow.count >= 4,
              f"shadow.count={cfg.shadow.count}: the calibrated policy scores each shadow against "
              f"the others, so {lira} need at least 4 shadows")
    check(0 < cfg.metrics.violation_alpha < 1,
          f"metrics.violation_alpha={cfg.metrics.violation_alpha}: must be in (0, 1)")
    check(cfg.metrics.bound_form in BOUND_FORMS,
          f"metrics.bound_form={cfg.metrics.bound_form!r}: use one of {list(BOUND_FORMS)}")

    train = cfg.train
    check(train.epochs >= 1, f"train.epochs={train.epochs}: must be ≥ 1")
    check(train.batch_size >= 1, f"train.batch_size={train.batch_size}: must be ≥ 1")
    check(train.lr > 0, f"train.lr={train.lr}: must be > 0")
    check(0 <= train.momentum < 1, f"train.momentum={train.momentum}: must be in [0, 1)")
    check(train.max_grad_norm > 0, f"train.max_grad_norm={train.max_grad_norm}: must be > 0")
    check(train.optimizer in OPTIMIZERS,
          f"train.optimizer={train.optimizer!r}: use one of {list(OPTIMIZERS)}")
    check(cfg.scale in SCALES, f"scale={cfg.scale!r}: use one of {list(SCALES)}")
    check(cfg.report in REPORTS, f"report={cfg.report!r}: known reports are {sorted(REPORTS)}")
    check(train.accountant in ACCOUNTANTS,
          f"train.accountant={train.accountant!r}: use one of {list(ACCOUNTANTS)}")
    check(train.device == "auto" or re.match(r"^(cpu|cuda(:\d+)?|mps)$", train.device) is not None,
          f"train.device={train.device!r}: use auto, cpu, cuda, cuda:N or mps")

    for role in ("train", "attack"):
        res: TaskResources = getattr(cfg.resources, role)
        check(res.num_cpus > 0, f"resources.{role}.num_cpus={res.num_cpus}: must be > 0")
        check(res.num_gpus >= 0, f"resources.{role}.num_gpus={res.num_gpus}: must be ≥ 0")
        check(res.max_retries >= 0, f"resources.{role}.max_retries={res.max_retries}: must be ≥ 0")
    check(cfg.cluster.dashboard_host != "", "cluster.dashboard_host: must not be empty")

    if problems:
        raise ConfigError(problems)


def _check_model_fits_records(cfg: SweepConfig, check: Any) -> None:
    """Build the network once on the dataset's record shape: an image CNN on tabular records, or
    a record too small for its convolutions, is refused here rather than in a worker."""
    if cfg.model.name not in ARCHITECTURES or any(d <= 0 for d in cfg.dataset.input_shape):
        return
    try:
        build_model(cfg.model.name, tuple(cfg.dataset.input_shape), cfg.dataset.num_classes)
    except (RuntimeError, ValueError, TypeError) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        check(False, f"model.name={cfg.model.name!r} does not fit dataset.name={cfg.dataset.name!r}, "
                     f"whose records have shape {list(cfg.dataset.input_shape)}: {reason}")


def _check_targets_reachable(grid: GridConfig, cfg: SweepConfig, check: Any) -> None:
    """Every (β, p, δ) of a fixed-bound grid must have an ε; the planner's error says why not."""
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


def sampling_rates(grid: GridConfig) -> list[float]:
    """The grid's p values: `grid.p`, or 1/(1 + γ) for each `grid.gamma`."""
    return [float(p) for p in grid.p] if grid.p else [1.0 / (1.0 + g) for g in grid.gamma]


def _check_mechanism_pairing(cfg: SweepConfig, check: Any) -> None:
    """The exact mechanism reads membership bits only, and only its own attack reads its output."""
    exact = cfg.model.name == MEMBERSHIP_MECHANISM
    bits = cfg.dataset.name == "membership_bits"
    check(exact == bits or cfg.model.name not in MODEL_NAMES or cfg.dataset.name not in LOADERS,
          f"model.name={cfg.model.name!r} with dataset.name={cfg.dataset.name!r}: the "
          f"{MEMBERSHIP_MECHANISM!r} model goes with the 'membership_bits' dataset and only with it")
    for attack in cfg.grid.attack:
        if attack == "always_member" or attack not in ATTACKS:
            continue
        fits = (attack in MECHANISM_ATTACKS) == exact
        check(fits, f"grid.attack: {attack!r} does not apply to model.name={cfg.model.name!r}; "
                    + (f"use {sorted(MECHANISM_ATTACKS)} or always_member" if exact else
                       f"{sorted(MECHANISM_ATTACKS)} only attack {MEMBERSHIP_MECHANISM!r}"))


def _check_grid(grid: GridConfig, check: Any, cfg: SweepConfig) -> None:
    for axis in ("delta", "attack", "policy", "trial"):
        check(len(getattr(grid, axis)) > 0, f"grid.{axis}: must list at least one value")
    for axis in ("epsilon", "delta", "p", "attack", "policy", "trial", "gamma", "precision_target"):
        values = getattr(grid, axis)
        check(len(set(values)) == len(values), f"grid.{axis}={list(values)}: has duplicates")
    check((len(grid.epsilon) > 0) != (len(grid.precision_target) > 0),
          f"grid.epsilon={list(grid.epsilon)}, grid.precision_target={list(grid.precision_target)}: "
          "give exactly one of them (a target bound fixes ε for each p)")
    check((len(grid.p) > 0) != (len(grid.gamma) > 0),
          f"grid.p={list(grid.p)}, grid.gamma={list(grid.gamma)}: give exactly one of them "
          "(γ non-members per member means p = 1/(1 + γ))")
    for gamma in grid.gamma:
        check(gamma > 0 and math.isfinite(gamma), f"grid.gamma: {gamma} must be > 0 and finite")
    for target in grid.precision_target:
        check(0 < target <= 1, f"grid.precision_target: {target} must be in (0, 1]")
    if grid.precision_target and all(0 < t <= 1 for t in grid.precision_target):
        _check_targets_reachable(grid, cfg, check)
    for eps in grid.epsilon:
        check(eps > 0 and not math.isnan(eps), f"grid.epsilon: {eps} must be > 0 (inf allowed)")
    for delta in grid.delta:
        check(0 <= delta < 1, f"grid.delta: {delta} must be in [0, 1)")
    for p in sampling_rates(grid):
        check(0 < p < 1, f"grid.p: {p} must be in (0, 1)")
    for attack in grid.attack:
        check(attack in ATTACKS, f"grid.attack: {attack!r} is unknown; known attacks are {sorted(ATTACKS)}")
    for policy in grid.policy:
        check(policy in POLICIES, f"grid.policy: {policy!r} is unknown; known policies are {list(POLICIES)}")
    for trial in grid.trial:
        check(trial >= 0, f"grid.trial: {trial} must be ≥ 0")
