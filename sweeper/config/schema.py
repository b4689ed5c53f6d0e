"""The sweep's configuration schema: what `conf/config.yaml` composes into.

Dataclasses only, and cheap to import: the command line, the planner and the tests read the
schema without paying for torch, Ray, MLflow or matplotlib (the attacks' and policies' settings
come from `jobs.attacks` and `jobs.policies`, which bring NumPy and SciPy).  `register_schema`
hands it to Hydra's ConfigStore, so types and unknown keys are caught while Hydra composes; what
types cannot express (ranges, names, combinations) is checked in `sweeper.checks.sections`.
"""

from __future__ import annotations

import dataclasses
import functools

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Optional, TypeAlias

from jobs.attacks.contract import ATTACKS

from jobs.attacks.section import AttackSettings
from jobs.datasets import DATASETS
from jobs.policies import POLICIES, CalibrationSettings
from jobs.settings import Between, OneOf, Rule, Setting
from sweeper.axes import GRID_AXES
from sweeper.bounds._checks import BOUND_FORMS
from sweeper.bounds.thudi import DEFAULT_TPR_FLOOR

if TYPE_CHECKING:
    from omegaconf import DictConfig


#: Pool size of synthetic stand-in data (`dataset.synthetic`) when `dataset.pool_size` does not
#: set one.
STAND_IN_POOL = 2000


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
    # Empty / 0: the dataset's own, from its registration (`jobs.datasets.DATASETS`); set them
    # only to change them (a synthetic stand-in of another shape).
    input_shape: list[int] = field(default_factory=list)
    num_classes: int = 0
    synthetic: bool = False

    def fill_from_spec(self) -> None:
        """Take `input_shape` / `num_classes` left unset from the named dataset's `DatasetSpec`.

        An unknown name leaves them unset: the checks refuse the name (with close matches).
        """
        spec = DATASETS.get(self.name)
        if spec is None:
            return
        if not self.input_shape:
            self.input_shape = list(spec.input_shape)
        if not self.num_classes:
            self.num_classes = spec.num_classes


#: The optimizers `train.optimizer` names (`jobs.engine.training`).
OPTIMIZERS = ("sgd", "adam")
#: Where DP-SGD's sampling rate comes from (`train.rate_from`, `sweeper.grid.recipes`).
RATE_SOURCES = ("expected", "declared", "actual")


@dataclass(frozen=True)
class EvenCount(Rule):
    """An even integer ≥ 2: models trained in complementary pairs of masks."""

    def holds(self, value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 2 \
            and value % 2 == 0

    def __str__(self) -> str:
        return "must be an even number ≥ 2 (complementary mask pairs)"


@dataclass
class ModelConfig:
    name: str = "mnist_cnn"


@dataclass
class TrainConfig:
    epochs: int = 15
    # Expected batch size; DP-SGD samples each record per step with rate batch_size / |D|.
    batch_size: int = 128
    lr: float = Setting(0.05, Between(0, low_open=True), "SGD's (or Adam's) step size.").field()
    momentum: float = Setting(0.9, Between(0, 1, high_open=True), "SGD's momentum.").field()
    max_grad_norm: float = 1.0
    accountant: str = "rdp"
    device: str = "auto"
    optimizer: str = Setting("sgd", OneOf(OPTIMIZERS, "optimizers"),
                             '"sgd" (with `momentum`; Thudi et al.) or "adam" (DP-Adam; '
                             'Jayaraman et al.).').field()
    eval_every: int = Setting(1, Between(0, integer=True, note="0: the last epoch only"),
                              "Test accuracy after every k-th epoch and after the last (0: the "
                              "last only, cheapest); best_test_accuracy is the best of those, so "
                              "the fixed-bound reports keep 1.").field()
    # K: models trained together in one Ray task (`jobs.engine.stacked`), which asks for K times
    # resources.train.  An integer ≥ 1, or auto: 1 on a CPU (measured: docs/how-it-works.md,
    # "K models per task"), 16 for linear stacks (tanh_mlp64, logistic_regression, relu_mlp256x2) trained on
    # a GPU.  Only models of one architecture, recipe, ε and pool share a task; a model's key
    # does not depend on K.
    models_per_task: Any = "auto"
    # torch.compile the training step's forward pass (one model per task: it turns stacking off).
    # Off: on this CPU it does not pay (docs/how-it-works.md).  Not part of the model's key.
    compile: bool = False
    checkpoint_seconds: float = Setting(
        30.0, Between(0, note="0: every epoch"),
        "A model's training state is saved at an epoch's end once this many seconds have passed "
        "since the last save (0: every epoch), so a killed worker loses at most that much "
        "training or one epoch.  Not part of the model's key.").field()
    # How a GPU computes, never what (neither is in the model's key; docs/gpu.md measures
    # both): convolutional models stored NHWC, per-record gradient products in TF32.  Both are
    # ignored on a CPU.
    channels_last: bool = False
    tf32: bool = True
    # fp32, or bf16: forward passes under bfloat16 autocast; per-sample norms, clipped sums and
    # the optimizer stay in fp32.  It changes the model, so it is part of the model's key.
    precision: str = "fp32"
    # DP noise from the OS's entropy, each coordinate the sum of four draws (Opacus's
    # secure_mode), for models you release: not reproducible, and a resumed model differs from
    # an uninterrupted one.  Part of the model's key when on.
    secure_noise: bool = False
    rate_from: str = Setting(
        "expected", OneOf(RATE_SOURCES, "sources"),
        "The training-set size DP-SGD's rate q = 1/⌈size/batch_size⌉ and its divisor "
        "int(size·q) come from: expected (pool × p, public, the default), declared "
        "(`public_size`), or actual (the private |D|, Opacus's rule: an added record can change "
        "q).  docs/how-it-works.md, \"The sample rate\".").field()
    public_size: Optional[int] = Setting(
        None, Between(1, integer=True, nullable=True, null_means="not declared"),
        "The public training-set size q comes from when rate_from=declared.").field()


#: The grid: a list per grid axis (`sweeper.axes.GRID_AXES`), each with its declared default
#: (a recipe axis's is empty: then `train.<name>` alone), and a list per axis's alternative
#: (`Axis.alternative`: p as γ, ε as a target bound β), empty unless given instead.
if TYPE_CHECKING:  # built at import from GRID_AXES: a type checker knows no field of it
    GridConfig: TypeAlias = Any
else:
    GridConfig = dataclasses.make_dataclass(
        "GridConfig",
        [(axis.name, list[axis.python_type], field(default_factory=axis.grid_values or list))
         for axis in GRID_AXES]
        + [(axis.alternative.name, list[axis.alternative.python_type], field(default_factory=list))
           for axis in GRID_AXES if axis.alternative is not None])
    GridConfig.__module__ = __name__


def sampling_rates(grid: GridConfig) -> list[float]:
    """The grid's p values: `grid.p`, or 1/(1 + γ) for each `grid.gamma`."""
    return [float(p) for p in grid.p] if grid.p else [1.0 / (1.0 + g) for g in grid.gamma]


def grid_axes(grid: GridConfig) -> dict[str, int]:
    """The number of values on each axis of the grid, as the planner crosses them (an axis or
    its alternative), by the axis's label; a recipe axis only where the grid sweeps it."""
    counts: dict[str, int] = {}
    for axis in GRID_AXES:
        values = len(getattr(grid, axis.name))
        if axis.alternative is not None:
            values = values or len(getattr(grid, axis.alternative.name))
        if values or not axis.recipe:
            counts[axis.label] = values
    return counts


@dataclass
class ShadowConfig:
    count: int = Setting(8, EvenCount(),
                         "Shadow models per ε, trained at p = 0.5 with complementary pairs of "
                         "masks, so every record is IN for exactly half of them (Carlini et al.'s "
                         "balanced design).").field()
    p: float = Setting(0.5, Between(0, 1, low_open=True, high_open=True),
                       "P(a record is in a shadow's training set).").field()
    # false: shadows draw from the target's pool, so the attack knows the population the target
    # was sampled from (Carlini et al.'s LiRA setting, the stronger adversary).  true: shadows
    # train on records past every target's pool, records no target can ever see (Jayaraman et
    # al.'s disjoint shadow data); calibration and Shokri/Morgan then learn from the shadows'
    # outputs on their own records.  Needs dataset.members or dataset.pool_size; not for LiRA.
    disjoint_data: bool = False


@dataclass
class MetricsConfig:
    tpr_floor: float = Setting(
        DEFAULT_TPR_FLOOR, Between(0, 1, low_open=True),
        "Floor on the TPR s in the bound's δ-term (Thudi et al. 2024 §4.3 use 0.01); the "
        "library's default too (`sweeper.bounds.precision_bound`), so both give one number.").field()
    bound_form: str = Setting(
        "derived", OneOf(BOUND_FORMS, "forms"),
        'The bound\'s δ-term: "derived" (valid for every p; see docs/choices.md) or "printed" '
        "(as in the paper).").field()
    violation_alpha: float = Setting(
        0.001, Between(0, 1, low_open=True, high_open=True),
        "A cell is flagged as a violation when the data prove, at this level (one-sided, "
        "corrected for the thresholds searched), a precision above the bound or an ε above the "
        "claimed one.").field()
    audit_alpha: float = Setting(
        0.05, Between(0, 1, low_open=True, high_open=True),
        "epsilon_audit and epsilon_audit_rates are one-sided claims at this level, corrected for "
        "the thresholds searched: an attack at exactly ε proves more than ε at most this "
        "often.").field()


@dataclass
class SequentialConfig:
    """The sequential frontier (`sweeper.sequential`, docs/sequential.md): each frontier cell
    gets trials, one after another, only until its anytime-valid precision interval
    (`sweeper.bounds.anytime`) meets its goal."""

    enabled: bool = Setting(
        False, None,
        "Decide each cell sequentially rather than train every trial of grid.trial.").field()
    min_trials: int = Setting(
        1, Between(1, integer=True),
        "Trials every cell gets before its goal is looked at, submitted at once.").field()
    max_trials: Optional[int] = Setting(
        None, Between(1, integer=True, nullable=True, null_means="grid.trial's trials"),
        "Trials a cell may get at most: the sweep plans trials 0 … max_trials − 1 in place of "
        "grid.trial, and stops a cell there, undecided, when its goal is not met.").field()
    max_models: Optional[int] = Setting(
        None, Between(1, integer=True, nullable=True, null_means="no cap but max_trials"),
        "Target models the whole sweep may train or read, over all cells (shadows not "
        "counted): a cell still undecided when it is spent stays undecided.").field()
    level: float = Setting(
        0.95, Between(0, 1, low_open=True, high_open=True),
        "Confidence that every look's interval holds the precision at once (1 − α).").field()
    width: float = Setting(
        0.1, Between(0, 1, low_open=True),
        "Goal: a cell is decided once its interval is narrower than this.").field()
    margin: float = Setting(
        0.05, Between(0, 1, high_open=True),
        "Goal: a cell is decided once its interval lies wholly below U − margin (or wholly "
        "above U: a violation, proven).").field()


@dataclass
class StoreConfig:
    root: str = "runs"
    # A run whose grid or settings differ from what its name already holds in the store is
    # refused; true (or --replace) replaces that name's results on purpose (`sweeper.claim`).
    replace: bool = False
    # Another process running the same sweep on this store: refuse at once (false), or wait for
    # it to end (true, or --wait).  Local stores only (`sweeper.claim`).
    wait: bool = False
    # A local store.root that exists, is not empty and holds no store (`/`, a home folder) is
    # refused; true makes that folder a store on purpose (`sweeper.store.artifacts.store_root_problem`).
    adopt: bool = False


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
    # A Ray runtime environment for every task, passed to ray.init (e.g. {working_dir: ., excludes:
    # [runs]}).  It shows in the Ray dashboard: credentials belong on the nodes, not in env_vars.
    runtime_env: dict[str, Any] = field(default_factory=dict)
    # Ship this checkout's `sweeper` and `jobs` packages to the workers (runtime_env py_modules),
    # for clusters whose nodes do not have the project installed, or have an older copy.
    ship_project: bool = False
    # Seconds to wait for `address` to answer before the sweep is refused (exit 2, nothing
    # written): Ray itself retries an address where nothing listens without end.
    connect_timeout_s: float = 30.0
    # Start local Ray even when the environment turns its token authentication off
    # (RAY_AUTH_MODE=disabled): its dashboard and job API then run code for anyone who reaches them.
    allow_no_auth: bool = False


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
    # A sweep whose grid has more cells (ε × δ × p × attack × policy × trial) is refused: raise it
    # on purpose, not by a typo in a grid axis.
    max_cells: int = 20000
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    grid: GridConfig = field(default_factory=GridConfig)
    shadow: ShadowConfig = field(default_factory=ShadowConfig)
    attack: AttackSettings = field(default_factory=AttackSettings)
    calibration: CalibrationSettings = field(default_factory=CalibrationSettings)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    sequential: SequentialConfig = field(default_factory=SequentialConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    resources: ResourcesConfig = field(default_factory=ResourcesConfig)

    def __post_init__(self) -> None:
        # Here, not in DatasetConfig: the schema Hydra merges over holds a DatasetConfig() whose
        # unset shape must stay unset until the composed dataset.name is known; every
        # SweepConfig, built in code or by `to_sweep_config`, passes here with its name.
        self.dataset.fill_from_spec()


def _grid_values(axis: str) -> list[str]:
    """What the grid's axes of names take, from the registries the validation checks against.

    `--help` shows them (conf/config.yaml's footer reads `${sweeper_grid_values:attack}`), so the
    help cannot drift from the code: the `attack:` config group names settings files (lira, …),
    not the grid's values (lira_online, …).
    """
    registries: dict[str, Iterable[str]] = {"attack": ATTACKS, "policy": POLICIES}
    return list(registries[axis])


@functools.cache
def register_schema() -> None:
    """Register `SweepConfig` as Hydra's `sweep_schema` and the resolver `--help` reads: once
    per process (Hydra's ConfigStore and OmegaConf's resolvers are process-wide, and storing the
    schema again rebuilds its nodes, 14 ms on our machine, each time a command composes)."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    ConfigStore.instance().store(name="sweep_schema", node=SweepConfig)
    OmegaConf.register_new_resolver(
        "sweeper_grid_values", lambda axis: ", ".join(_grid_values(axis)), replace=True)


def to_sweep_config(cfg: DictConfig | SweepConfig) -> SweepConfig:
    """A composed configuration as the typed `SweepConfig` (merged over the schema's defaults;
    dataset shape and classes left unset come from the dataset's spec, `SweepConfig.__post_init__`)."""
    if isinstance(cfg, SweepConfig):
        return cfg
    from omegaconf import OmegaConf

    merged = OmegaConf.merge(_schema_defaults(), cfg)  # merge copies it: the cache stays as built
    return OmegaConf.to_object(merged)  # type: ignore[return-value]


@functools.cache
def _schema_defaults() -> DictConfig:
    """`SweepConfig`'s defaults as OmegaConf nodes, built once per process (17 ms; copying
    them, as every merge does, takes 3 ms)."""
    from omegaconf import OmegaConf

    return OmegaConf.structured(SweepConfig)
