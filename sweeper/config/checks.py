"""The checks a sweep's configuration must pass before any work starts, section by section.

Types and unknown keys are caught by the schema while Hydra composes (`sweeper.config.schema`);
these checks cover what types cannot express (ranges, names, combinations).  Each section of the
configuration has one named check (`SECTIONS`); `find_problems` runs them all and returns every
problem at once, `validate` refuses a configuration that has any.

Cheap to import: what a check needs from torch (building a network, looking for a GPU), the
planner, the store or the reports is imported inside that check.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Callable, Iterable
from typing import Any, Optional
from urllib.parse import urlsplit

from jobs.attacks import ATTACKS
from jobs.datasets import IMAGE_DATASETS, LOADERS, pool_records
from jobs.policies import CALIBRATED, OBJECTIVES, POLICIES
from sweeper.bounds import BOUND_FORMS, epsilon_for_precision
from sweeper.config.schema import GridConfig, SweepConfig, TaskResources
from sweeper.credentials import (looks_secret, redact, tracking_uri_problem, uri_credentials,
                                 value_credentials)
from sweeper.paths import folder_problem, name_problem

#: Attacks that read an exact mechanism's release rather than a network's logits.
MECHANISM_ATTACKS = tuple(name for name, attack in ATTACKS.items() if attack.reads_release)

ACCOUNTANTS = ("rdp", "prv")
#: Accountants Opacus offers that may not calibrate noise here, and why (exit 2, not a warning).
#: GDP is a central-limit approximation for many steps: over few steps it under-states ε (noise
#: calibrated by it for ε = 1, 3, 8 at q = 1/4, 8 steps spends 1.03, 4.09, 9.13 by an exact PLD
#: accountant), so the bounds and violation flags taken at the nominal ε would be invalid.
REFUSED_ACCOUNTANTS = {
    "gdp": "GDP is an asymptotic approximation that under-states the ε a finite run spends; "
           "calibrate with rdp (an upper bound) or prv (numerically exact) instead",
}
OPTIMIZERS = ("sgd", "adam")
SCALES = ("full", "smoke")
LIRA_VARIANCES = ("auto", "global", "per_record")
LIRA_OFFLINE_COMBINES = ("log_cdf", "zscore")
#: Where the store may live besides a local path (pyarrow file systems).
STORE_SCHEMES = ("file", "s3", "gs")
#: The keys `ray.init(runtime_env=...)` understands (Ray 2.60's RuntimeEnv fields and plugins).
RUNTIME_ENV_KEYS = ("working_dir", "py_modules", "py_executable", "pip", "uv", "conda", "env_vars",
                    "excludes", "container", "image_uri", "config", "java_jars",
                    "worker_process_setup_hook", "nsight", "mpi")


class ConfigError(ValueError):
    """Every problem found in a configuration, one per line."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("invalid configuration:\n" + "\n".join(f"  - {p}" for p in problems))


#: How a check reports: `check(ok, message)` records `message` when `ok` is false.
Check = Callable[[bool, str], None]


def find_problems(cfg: SweepConfig) -> list[str]:
    """Every problem of `cfg` (field, value, what is allowed), section by section; [] if none.

    Pure but for three looks at this machine: whether `store.root` could be written (a probe
    folder is made and removed: nothing is left), whether it has the GPU that local Ray would
    need, and MLflow's own `MLFLOW_TRACKING_URI` when `tracking.uri` is null.
    """
    problems: list[str] = []

    def check(ok: bool, message: str) -> None:
        if not ok:
            problems.append(message)

    for section in SECTIONS:
        section(cfg, check)
    return problems


def validate(cfg: SweepConfig) -> None:
    """Raise ConfigError naming every problem `find_problems` finds."""
    problems = find_problems(cfg)
    if problems:
        raise ConfigError(problems)


def did_you_mean(value: object, known: Iterable[str], prefix: str = "") -> str:
    """"; did you mean 'x'?" for the known names close to `value` (typos, prefixes), or "".

    Names are matched bare and shown with `prefix` ("grid." → 'grid.epsilon').
    """
    text, known = str(value), [str(name) for name in known]
    close = difflib.get_close_matches(text, known, n=3, cutoff=0.6)
    if len(text) >= 3:
        close += [name for name in known if name.startswith(text) and name not in close]
    if not close:
        return ""
    names = [repr(prefix + name) for name in close[:3]]
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]
    return f"; did you mean {listed}?"


def _unknown(field_name: str, value: object, known: Iterable[str], what: str) -> str:
    known = list(known)
    return f"{field_name}={value!r}: unknown; known {what} are {known}{did_you_mean(value, known)}"


def check_top_level(cfg: SweepConfig, check: Check) -> None:
    """The top level: the sweep's name, the dataset, model, scale and report it names, its seed."""
    from jobs.models import MODEL_NAMES  # torch: only when validating
    from sweeper.reports import REPORTS

    bad_name = name_problem("name", cfg.name)
    check(bad_name is None, bad_name or "")
    check(cfg.dataset.name in LOADERS,
          _unknown("dataset.name", cfg.dataset.name, sorted(LOADERS), "datasets"))
    check(cfg.model.name in MODEL_NAMES,
          _unknown("model.name", cfg.model.name, sorted(MODEL_NAMES), "models"))
    check(cfg.scale in SCALES, _unknown("scale", cfg.scale, SCALES, "scales"))
    check(cfg.report in REPORTS, _unknown("report", cfg.report, sorted(REPORTS), "reports"))
    check(cfg.seed >= 0, f"seed={cfg.seed}: must be ≥ 0 (it seeds NumPy's generators)")


def check_dataset(cfg: SweepConfig, check: Check) -> None:
    """`dataset`: record shape and classes (the model must build on them), sizes of the pool."""
    from jobs.models import MEMBERSHIP_MECHANISM

    data = cfg.dataset
    _check_mechanism_pairing(cfg, check)
    shape_ok = len(data.input_shape) > 0 and all(d > 0 for d in data.input_shape)
    check(shape_ok, f"dataset.input_shape={list(data.input_shape)}: must list at least one size, "
                    "each > 0 (e.g. [1, 28, 28] for images, [107] for tabular records)")
    classes = 1 if cfg.model.name == MEMBERSHIP_MECHANISM else 2  # the mechanism classifies nothing
    check(data.num_classes >= classes, f"dataset.num_classes={data.num_classes}: must be ≥ {classes}"
                                       + (" for a classifier" if classes == 2 else ""))
    if shape_ok and data.num_classes >= classes:
        _check_model_fits_records(cfg, check)
    check(data.data_dir.strip() != "", "dataset.data_dir='': give a folder (default ~/.cache/sweeper/data)")
    check(data.test_size > 0, f"dataset.test_size={data.test_size}: must be > 0")
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
        whole = _whole_pool(cfg)
        check(whole is None or data.eval_records <= whole,
              f"dataset.eval_records={data.eval_records}: larger than the pool of "
              f"dataset.name={data.name!r}, {whole} records"
              + ("" if data.synthetic else f" once dataset.test_size={data.test_size} are held out")
              + f"; evaluate at most {whole} (the first records of the pool), or set "
              "dataset.pool_size / dataset.members")


def _whole_pool(cfg: SweepConfig) -> Optional[int]:
    """Records in the pool when neither dataset.pool_size nor dataset.members cuts it: the
    synthetic stand-in's, or the dataset's (None when it is not known without loading it)."""
    from sweeper.plan import STAND_IN_POOL  # torch, with the planner: only when validating

    if cfg.dataset.synthetic:
        return STAND_IN_POOL
    return pool_records(cfg.dataset.name, cfg.dataset.test_size)


def _check_pdtp_members(cfg: SweepConfig, check: Check) -> None:
    """PDTP retrains without each of a target's first `attack.pdtp_records` members, so every
    PDTP target must hold that many.  Its membership mask is drawn from a seed the plan fixes,
    so the count is known exactly here, before anything trains."""
    from jobs.training import draw_mask
    from sweeper.plan import pool_size_for, sampling_rates, seed_from

    if "pdtp" not in cfg.grid.attack or cfg.attack.pdtp_records < 1:
        return
    for p in sampling_rates(cfg.grid):
        if not 0 < p <= 1:
            continue
        pool = pool_size_for(cfg, p) or _whole_pool(cfg)
        if pool is None:
            continue
        for trial in cfg.grid.trial:
            members = int(draw_mask(pool, p, seed_from(cfg.seed, "target", trial), False).sum())
            if members < cfg.attack.pdtp_records:
                check(False, f"attack.pdtp_records={cfg.attack.pdtp_records}: the PDTP target at "
                             f"p={p:g}, trial={trial} holds only {members} members (of a pool of "
                             f"{pool} records), so it cannot leave out that many; use at most "
                             f"{members}, or a larger p or pool")
                return


def check_grid(cfg: SweepConfig, check: Check) -> None:
    """`grid` and `max_cells`: every axis's values, and the number of cells they cross into."""
    from sweeper.plan import grid_axes  # torch, with the planner: only when validating

    _check_grid_axes(cfg.grid, check, cfg)
    check(cfg.max_cells >= 1, f"max_cells={cfg.max_cells}: must be ≥ 1")
    axes = grid_axes(cfg.grid)
    cells = math.prod(axes.values())
    if cfg.max_cells >= 1 and cells > cfg.max_cells:
        sizes = " × ".join(f"{n} {axis}" for axis, n in axes.items())
        check(False, f"grid: {sizes} = {cells} cells, over max_cells={cfg.max_cells}; shrink an axis, "
                     f"or raise max_cells on purpose (e.g. max_cells={cells}); every attack is "
                     "counted with every policy, an upper bound for PDTP, which has no policy")


def check_shadows_and_attacks(cfg: SweepConfig, check: Check) -> None:
    """`shadow` and `attack`: shadow pairs, each attack's settings, PDTP's members."""
    check(cfg.shadow.count >= 2 and cfg.shadow.count % 2 == 0,
          f"shadow.count={cfg.shadow.count}: must be an even number ≥ 2 (complementary mask pairs)")
    check(0 < cfg.shadow.p < 1, f"shadow.p={cfg.shadow.p}: must be in (0, 1)")
    if cfg.shadow.disjoint_data:
        check(cfg.dataset.members is not None or cfg.dataset.pool_size is not None,
              "shadow.disjoint_data=true: set dataset.members or dataset.pool_size, so that records "
              "remain past every target's pool for the shadows")
        lira = [a for a in cfg.grid.attack if a.startswith("lira")]
        check(not lira, f"shadow.disjoint_data=true: {lira} fit IN/OUT shadows on the target's own "
                        "records, which disjoint shadows never see; use shadow.disjoint_data=false")
    attack = cfg.attack
    check(attack.lira_variance in LIRA_VARIANCES,
          _unknown("attack.lira_variance", attack.lira_variance, LIRA_VARIANCES, "variances"))
    check(attack.lira_offline_combine in LIRA_OFFLINE_COMBINES,
          _unknown("attack.lira_offline_combine", attack.lira_offline_combine,
                   LIRA_OFFLINE_COMBINES, "combinations"))
    augmenting = attack.augment_flip or attack.augment_shift != 0
    check(attack.augment_shift >= 0,
          f"attack.augment_shift={attack.augment_shift}: must be ≥ 0 (pixels)")
    check(not augmenting or cfg.dataset.name in IMAGE_DATASETS,
          f"attack.augment_flip/augment_shift: query augmentations need an image dataset "
          f"({list(IMAGE_DATASETS)}); dataset.name={cfg.dataset.name!r}")
    check(attack.loss_bound is None or attack.loss_bound > 0,
          f"attack.loss_bound={attack.loss_bound}: must be > 0 (or null)")
    check(attack.merlin_perturbations >= 1,
          f"attack.merlin_perturbations={attack.merlin_perturbations}: must be ≥ 1")
    check(attack.merlin_sigma > 0, f"attack.merlin_sigma={attack.merlin_sigma}: must be > 0")
    check(attack.pdtp_records >= 1, f"attack.pdtp_records={attack.pdtp_records}: must be ≥ 1")
    _check_pdtp_members(cfg, check)
    check(attack.pdtp_seeds >= 1, f"attack.pdtp_seeds={attack.pdtp_seeds}: must be ≥ 1")
    check(0 <= attack.morgan_min_tpr < 1,
          f"attack.morgan_min_tpr={attack.morgan_min_tpr}: must be in [0, 1)")
    check(0 < attack.morgan_fpr < 1, f"attack.morgan_fpr={attack.morgan_fpr}: must be in (0, 1)")
    check(0 < attack.loss_clamp < 1, f"attack.loss_clamp={attack.loss_clamp}: must be in (0, 1)")
    for key in ("seed", "merlin_seed"):
        value = getattr(attack, key)
        check(value >= 0, f"attack.{key}={value}: must be ≥ 0 (it seeds NumPy's generators)")


def check_policies_and_metrics(cfg: SweepConfig, check: Check) -> None:
    """`calibration` and `metrics`: the threshold policy's objective and rates, the bound's form."""
    check(0 < cfg.metrics.tpr_floor <= 1,
          f"metrics.tpr_floor={cfg.metrics.tpr_floor}: must be in (0, 1]")
    check(cfg.calibration.objective in OBJECTIVES,
          _unknown("calibration.objective", cfg.calibration.objective, OBJECTIVES, "objectives"))
    check(0 < cfg.calibration.fpr < 1, f"calibration.fpr={cfg.calibration.fpr}: must be in (0, 1)")
    check(0 <= cfg.calibration.min_tpr < 1,
          f"calibration.min_tpr={cfg.calibration.min_tpr}: must be in [0, 1)")
    if CALIBRATED in cfg.grid.policy:
        lira = [a for a in cfg.grid.attack if a.startswith("lira")]
        check(not lira or cfg.shadow.count >= 4,
              f"shadow.count={cfg.shadow.count}: the calibrated policy scores each shadow against "
              f"the others, so {lira} need at least 4 shadows")
    check(0 < cfg.metrics.violation_alpha < 1,
          f"metrics.violation_alpha={cfg.metrics.violation_alpha}: must be in (0, 1)")
    check(0 < cfg.metrics.audit_alpha < 1,
          f"metrics.audit_alpha={cfg.metrics.audit_alpha}: must be in (0, 1)")
    check(cfg.metrics.bound_form in BOUND_FORMS,
          _unknown("metrics.bound_form", cfg.metrics.bound_form, BOUND_FORMS, "forms"))


def check_train(cfg: SweepConfig, check: Check) -> None:
    """`train`: the DP-SGD recipe, accountant, K models per task, precision and device."""
    from jobs.training import PRECISIONS

    train = cfg.train
    check(train.epochs >= 1, f"train.epochs={train.epochs}: must be ≥ 1")
    check(train.batch_size >= 1, f"train.batch_size={train.batch_size}: must be ≥ 1")
    check(train.eval_every >= 0, f"train.eval_every={train.eval_every}: must be ≥ 0 (0: the last "
                                 "epoch only)")
    check(train.lr > 0 and math.isfinite(train.lr), f"train.lr={train.lr}: must be > 0 and finite")
    check(0 <= train.momentum < 1, f"train.momentum={train.momentum}: must be in [0, 1)")
    check(train.max_grad_norm > 0 and math.isfinite(train.max_grad_norm),
          f"train.max_grad_norm={train.max_grad_norm}: must be > 0 and finite")
    check(train.optimizer in OPTIMIZERS, _unknown("train.optimizer", train.optimizer, OPTIMIZERS, "optimizers"))
    refused = REFUSED_ACCOUNTANTS.get(train.accountant)
    check(refused is None, f"train.accountant={train.accountant!r}: refused: {refused}")
    check(refused is not None or train.accountant in ACCOUNTANTS,
          _unknown("train.accountant", train.accountant, ACCOUNTANTS, "accountants"))
    k = train.models_per_task
    check(k == "auto" or (isinstance(k, int) and not isinstance(k, bool) and k >= 1),
          f"train.models_per_task={k!r}: must be an integer ≥ 1 or auto")
    check(train.precision in PRECISIONS, _unknown("train.precision", train.precision, PRECISIONS,
                                                  "precisions"))
    device_ok = train.device == "auto" or re.match(r"^(cpu|cuda(:\d+)?|mps)$", train.device) is not None
    check(device_ok, f"train.device={train.device!r}: use auto, cpu, cuda, cuda:N or mps"
                     + did_you_mean(train.device, ("auto", "cpu", "cuda", "mps")))
    if device_ok and cfg.cluster.address is None and train.device != "auto":
        kind = train.device.split(":")[0]
        check(kind not in ("cuda", "mps") or _local_accelerator(kind),
              f"train.device={train.device!r}: this machine has no {kind.upper()} device and "
              "cluster.address is null (local Ray); use auto or cpu, or point cluster.address at a "
              "cluster that has one")


def _local_accelerator(kind: str) -> bool:
    import torch

    if kind == "cuda":
        return bool(torch.cuda.is_available())
    return bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())


def check_resources(cfg: SweepConfig, check: Check) -> None:
    """`resources`: what each Ray task asks for, and whether local Ray could grant it."""
    for role in ("train", "attack"):
        res: TaskResources = getattr(cfg.resources, role)
        for kind, least in (("num_cpus", "> 0"), ("num_gpus", "≥ 0")):
            amount = getattr(res, kind)
            ok = (amount > 0 if kind == "num_cpus" else amount >= 0) and math.isfinite(amount)
            check(ok, f"resources.{role}.{kind}={amount}: must be {least}")
            check(not ok or amount <= 1 or float(amount).is_integer(),
                  f"resources.{role}.{kind}={amount}: Ray takes fractions only below 1; use a "
                  "whole number above it")
        check(res.max_retries >= 0, f"resources.{role}.max_retries={res.max_retries}: must be ≥ 0")
        if cfg.cluster.address is None and res.num_gpus > 0:
            check(_local_accelerator("cuda"),
                  f"resources.{role}.num_gpus={res.num_gpus}: this machine has no GPU and "
                  "cluster.address is null (local Ray), so no task could start; set it to 0 or "
                  "point cluster.address at a cluster with GPUs")


def check_cluster(cfg: SweepConfig, check: Check) -> None:
    """`cluster`: the Ray address, dashboard and runtime environment (no credentials in it)."""
    cluster = cfg.cluster
    if cluster.address is not None:
        address = cluster.address
        scheme = urlsplit(address).scheme if "://" in address else ""
        check(address.strip() != "" and not re.search(r"\s", address) and scheme in ("", "ray"),
              f"cluster.address={address!r}: use null (local Ray), auto, HOST:PORT of the head's GCS "
              "or ray://HOST:10001 (Ray Client); the dashboard's http:// address is not the cluster's")
    check(cluster.num_cpus is None or cluster.num_cpus >= 1,
          f"cluster.num_cpus={cluster.num_cpus}: must be ≥ 1 (or null: all of this machine's)")
    check(cluster.dashboard_host.strip() != "",
          "cluster.dashboard_host='': give an interface, e.g. 127.0.0.1 (loopback only)")
    check(0 <= cluster.dashboard_port <= 65535,
          f"cluster.dashboard_port={cluster.dashboard_port}: must be a TCP port in 0..65535 "
          "(0: any free port)")
    check(math.isfinite(cluster.connect_timeout_s) and cluster.connect_timeout_s > 0,
          f"cluster.connect_timeout_s={cluster.connect_timeout_s}: must be a number of seconds > 0")
    _check_runtime_env(cluster.runtime_env, check)


def _check_runtime_env(env: Any, check: Check) -> None:
    if not isinstance(env, dict):
        check(False, f"cluster.runtime_env={env!r}: must be a mapping of Ray runtime_env keys")
        return
    for key in env:
        check(key in RUNTIME_ENV_KEYS,
              f"cluster.runtime_env.{key}: unknown key; Ray's runtime_env takes "
              f"{list(RUNTIME_ENV_KEYS)}{did_you_mean(key, RUNTIME_ENV_KEYS)}")
    variables = env.get("env_vars")
    if variables is None:
        return
    if not isinstance(variables, dict):
        check(False, f"cluster.runtime_env.env_vars={variables!r}: must be a mapping NAME: value")
        return
    for name, value in variables.items():
        check(isinstance(value, str) and bool(re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", str(name))),
              f"cluster.runtime_env.env_vars.{name}: names are letters, digits and '_', values are "
              "strings (quote numbers)")
        found = value_credentials(value) if isinstance(value, str) else []
        check(not looks_secret(str(name)) and not found,
              f"cluster.runtime_env.env_vars.{name}: looks like a credential"
              + (f" (its value holds {', '.join(found)})" if found else "")
              + "; a runtime environment is shown in Ray's dashboard and written to Ray's "
              "runtime_env_agent.log on every node, so set it in the nodes' own environment "
              "(a Kubernetes Secret as env of the RayCluster's pods, the cluster launcher's "
              "setup, see deploy/README.md) or a secret store the tasks read")


def check_store(cfg: SweepConfig, check: Check) -> None:
    """`store.root`: a writable folder or a supported URI without credentials."""
    from sweeper.store import is_uri

    root = cfg.store.root
    if not root.strip():
        check(False, "store.root='': give a folder or a URI (file://, s3://, gs://)")
        return
    if is_uri(root):
        parts = urlsplit(root)
        scheme = parts.scheme.lower()
        if scheme not in STORE_SCHEMES:
            check(False, f"store.root={redact(root)!r}: scheme {scheme!r} is not supported; use a "
                         f"local path or one of {[f'{s}://' for s in STORE_SCHEMES]}")
            return
        secrets = uri_credentials(root)
        check(not secrets, f"store.root={redact(root)!r}: holds credentials ({', '.join(secrets)}), "
                           "which would land in logs and the MLflow run; use the environment instead "
                           "(AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, GOOGLE_APPLICATION_CREDENTIALS)")
        if scheme == "file":
            _check_local_store(parts.path, root, check)
        else:
            check(parts.netloc != "", f"store.root={redact(root)!r}: name a bucket, {scheme}://BUCKET/PATH")
        return
    _check_local_store(root, root, check)


def _check_local_store(path: str, given: str, check: Check) -> None:
    """The folder must be writable, or creatable with its parents (`sweeper.paths.folder_problem`
    asks the file system; nothing is left behind)."""
    problem = folder_problem("store.root", given, path)
    check(problem is None, problem or "")


def check_tracking(cfg: SweepConfig, check: Check) -> None:
    """`tracking`: the MLflow experiment's name and a tracking URI without credentials."""
    tracking = cfg.tracking
    check(tracking.experiment.strip() != "",
          "tracking.experiment='': give the MLflow experiment's name (default 'sweeper')")
    if tracking.uri is None:  # MLflow's own variable, when set, is the tracking URI: same rules
        from_environment = os.environ.get("MLFLOW_TRACKING_URI")
        problem = from_environment and tracking_uri_problem(from_environment, "MLFLOW_TRACKING_URI")
        check(not problem, f"{problem} (the environment variable; tracking.uri is null)")
        return
    check(tracking.uri.strip() != "",
          "tracking.uri='': use null for the SQLite file under store.root, or an MLflow URI")
    problem = tracking_uri_problem(tracking.uri, "tracking.uri")
    check(problem is None, problem or "")


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


def _check_targets_reachable(grid: GridConfig, cfg: SweepConfig, check: Check) -> None:
    """Every (β, p, δ) of a fixed-bound grid must have an ε; the planner's error says why not."""
    from sweeper.plan import sampling_rates

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


def _check_mechanism_pairing(cfg: SweepConfig, check: Check) -> None:
    """The exact mechanism reads membership bits only, and only its own attack reads its output."""
    from jobs.models import MEMBERSHIP_MECHANISM, MODEL_NAMES

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


def _check_grid_axes(grid: GridConfig, check: Check, cfg: SweepConfig) -> None:
    from sweeper.plan import sampling_rates

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
        check(eps > 0 and not math.isnan(eps), f"grid.epsilon: {eps} must be > 0 (inf allowed: no privacy)")
    for delta in grid.delta:
        check(0 <= delta < 1, f"grid.delta: {delta} must be in [0, 1)")
    for p in sampling_rates(grid):
        check(0 < p <= 1, f"grid.p: {p} must be in (0, 1]")
    for attack in grid.attack:
        check(attack in ATTACKS, f"grid.attack: {attack!r} is unknown; known attacks are "
                                 f"{sorted(ATTACKS)}{did_you_mean(attack, ATTACKS)}")
    for policy in grid.policy:
        check(policy in POLICIES, f"grid.policy: {policy!r} is unknown; known policies are "
                                  f"{list(POLICIES)}{did_you_mean(policy, POLICIES)}")
    for trial in grid.trial:
        check(trial >= 0, f"grid.trial: {trial} must be ≥ 0")


#: The checks `find_problems` runs, one per section of the configuration, in this order.
SECTIONS: tuple[Callable[[SweepConfig, Check], None], ...] = (
    check_top_level, check_dataset, check_grid, check_shadows_and_attacks,
    check_policies_and_metrics, check_train, check_resources, check_cluster, check_store,
    check_tracking)
