"""Run a sweep: a short sequence of named stages, conducted by `run_sweep`.

    prepare    validate, plan, and ask the store what is left (refusals before anything is written)
    execute    start Ray, the data and the sinks side by side (`start_up`); schedule the missing
               work on Ray and stream each finished attack back (`ray.wait`)
    collect    read the rows back from the store (its results dataset)
    end        the sinks finish (figures drawn, MLflow backfilled and closed)
    summarize  the `SweepResult` the command reports

The sinks of landed cells — the store's row writer, the MLflow tracker, the figure drawer — are
listeners (`sweeper.listeners`, Ray Tune's callbacks the model): the execution loop tells them
of each cell the moment its attack finishes and knows none of them.  Work that is already in the
store is not scheduled again, so a rerun of a finished sweep trains nothing (nor starts Ray,
loads data, opens MLflow when it has nothing to log, or redraws unchanged figures), and a killed
sweep resumes where it stopped.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import math
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import pandas as pd
from omegaconf import OmegaConf
from tqdm.auto import tqdm

import jobs
import sweeper
from jobs.datasets import load_dataset, require_dataset, synthetic_dataset
from sweeper.config import ConfigError, SweepConfig, validate
from sweeper.console import forwarded
from sweeper.credentials import redact, redact_tree
from sweeper.failures import TRANSIENT_EXCEPTIONS, Failure, cell_label, classify
from sweeper.frontier import sort_frontier
from sweeper.listeners import (FigureDrawer, Listener, NotLanded, RowWriter, SweepEnd,
                               TrackingListener)
from sweeper.plan import (AttackSpec, Cell, ModelSpec, QuerySpec, SweepPlan, build_plan,
                          group_label, group_resources, models_per_task, training_groups)
from sweeper.ray_start import (dynamic_agent_port, environment, free_dashboard_port,
                               local_ray_confined, require_reachable, submitted_job_address)
from sweeper.results import CELLS_DATASET, compact
from sweeper.scale import scaled
from sweeper.store import ArtifactStore
from sweeper.tasks import attack_task, query_task, train_group_task, train_task
from sweeper.tracking import default_tracking_uri

logger = logging.getLogger(__name__)


@dataclass
class SweepResult:
    name: str
    results: pd.DataFrame
    sweep_dir: str  # the sweep's folder, or its URI on a remote store
    results_dir: str  # the store's readable results dataset (hive-partitioned by sweep)
    tracking_uri: str
    models_total: int
    models_trained: int
    cells_total: int
    cells_computed: int
    seconds: float
    dashboard_url: Optional[str] = None
    failures: list[tuple[str, str]] = field(default_factory=list)  # (cell label, reason)
    plot_path: Optional[Path] = None  # frontier.png, also attached to the sweep's MLflow run
    csv_path: Optional[Path] = None
    report_paths: list[Path] = field(default_factory=list)  # the experiment's own figures
    tracking_warning: Optional[str] = None  # what MLflow missed, when it went down mid-sweep


@contextlib.contextmanager
def ray_session(cfg: SweepConfig) -> Iterator[Optional[str]]:
    """Join the Ray this process already runs (tests), connect to `cluster.address` (refused
    after `cluster.connect_timeout_s` when nothing answers) or to the cluster running this process
    as a Ray job (`ray job submit`, `submitted_job_address`), or start a new local Ray ("local":
    never a stale cluster found on the machine) that listens on loopback only and dies with this
    process (`local_ray_confined`).

    The driver's job carries the sweep's name as `job_name` metadata, the column the Ray
    dashboard's Jobs page shows, so the sweep is found by name there (a `ray job submit
    --metadata-json` job_name wins)."""
    import ray
    from ray.job_config import JobConfig

    if ray.is_initialized():
        yield None
        return
    runtime_env = runtime_environment(cfg)
    job = JobConfig(metadata={"job_name": f"sweeper {cfg.name}", "sweeper_sweep": cfg.name})
    address = cfg.cluster.address or submitted_job_address()
    with contextlib.ExitStack() as stack:
        if address is None:
            adopt = stack.enter_context(local_ray_confined())
            # Workers inherit the variables from the Ray processes started here: kept out of
            # Ray's runtime environment, so out of its agent's log and its dashboard.
            variables = (runtime_env or {}).pop("env_vars", {})
            with environment(variables), dynamic_agent_port():
                context = ray.init(
                    address="local", num_cpus=cfg.cluster.num_cpus, runtime_env=runtime_env or None,
                    include_dashboard=cfg.cluster.include_dashboard,
                    dashboard_host=cfg.cluster.dashboard_host,
                    dashboard_port=free_dashboard_port(cfg.cluster.dashboard_host,
                                                       cfg.cluster.dashboard_port)
                    if cfg.cluster.include_dashboard else cfg.cluster.dashboard_port,
                    logging_level=logging.WARNING, job_config=job)
            adopt()
        else:
            require_reachable(address, cfg.cluster.connect_timeout_s)
            context = ray.init(address=address, runtime_env=runtime_env,
                               logging_level=logging.WARNING, job_config=job)
        stack.callback(ray.shutdown)
        url = context.dashboard_url
        yield f"http://{url}" if url else None


def runtime_environment(cfg: SweepConfig) -> Optional[dict[str, Any]]:
    """`cluster.runtime_env`, plus this checkout's packages when `cluster.ship_project` asks
    (workers of a cluster without the project installed then import the driver's code)."""
    env = dict(cfg.cluster.runtime_env)
    if cfg.cluster.ship_project:
        env["py_modules"] = [*env.get("py_modules", []), *(str(Path(module.__file__).parent)
                                                          for module in (sweeper, jobs))]
    return env or None


def check_cluster_resources(cfg: SweepConfig) -> None:
    """Refuse (before anything is written) GPU requests the cluster cannot meet."""
    import ray

    for role in ("train", "attack"):
        wanted = getattr(cfg.resources, role).num_gpus
        if wanted > 0 and ray.cluster_resources().get("GPU", 0) == 0:
            raise ConfigError([f"resources.{role}.num_gpus={wanted}: the Ray cluster has no GPU, "
                               f"so no {role} task could ever start; set it to 0"])


@dataclass
class Sweep:
    """A validated, planned sweep and what of it the store lacks (`prepare`)."""

    cfg: SweepConfig  # scaled (`sweeper.scale`) and validated
    plan: SweepPlan
    store: ArtifactStore
    data_dir: Path
    todo_cells: list[Cell]  # cells not present in the store (missing, or failed their checksum)
    todo_models: list[ModelSpec]  # models a todo cell reads that the store lacks
    corrupt: set[str]  # keys of cells whose files failed their checksum
    tracking_uri: str
    config: dict[str, Any]  # the config as plain containers (MLflow params, the manifest)
    manifest: dict[str, Any]  # its cells, where it is tracked, its config (credentials masked)


def run_sweep(cfg: SweepConfig, progress: bool = True,
              echo: Optional[Callable[[str], None]] = None, validated: bool = False) -> SweepResult:
    """Run `cfg`'s sweep: prepare → execute (telling the sinks of each landed cell) → collect →
    end (the sinks finish: figures, MLflow) → summarize.  Status lines go to this package's
    loggers (`sweeper.console` shows them); `echo`, when given, receives them too.  `validated`:
    `validate(scaled(cfg))` has already passed (the command line's preflight runs it)."""
    with forwarded(echo):
        started = time.perf_counter()
        sweep = prepare(cfg, validated)
        listeners = sinks(sweep)
        failures, dashboard_url = execute(sweep, listeners, progress)
        end = SweepEnd(collect(sweep), failures, len(sweep.todo_models), started)
        for listener in listeners:
            listener.on_sweep_end(end)
        return summarize(sweep, end, dashboard_url)


def prepare(cfg: SweepConfig, validated: bool = False) -> Sweep:
    """Takes the composed config; gives the `Sweep`: scaled, validated unless it already was
    (refused with ConfigError, or DatasetUnavailable for missing dataset files, before anything
    is written), planned, and checked against the store for what is left to compute and train."""
    cfg = scaled(cfg)
    if not validated:
        validate(cfg)
    data_dir = Path(cfg.dataset.data_dir).expanduser()
    if not cfg.dataset.synthetic:
        require_dataset(cfg.dataset.name, data_dir, cfg.dataset.download)

    plan = build_plan(cfg)
    store = ArtifactStore(cfg.store.root)
    states = {cell.key: store.cell_state(cfg.name, cell.key) for cell in plan.cells}
    todo_cells = [cell for cell in plan.cells if states[cell.key] != "present"]
    # Only models a missing cell reads: a finished cell never waits on a retrain.
    needed = {key for cell in todo_cells for key in (cell.scores.target, *cell.scores.shadows)}
    todo_models = [spec for key, spec in plan.models.items()
                   if key in needed and not store.has_model(key)]
    logger.info("sweep '%s': %d cells, %d models; %d cells to compute, reading %d models "
                "(%d to train, %d already in the store)", cfg.name, len(plan.cells),
                len(plan.models), len(todo_cells), len(needed), len(todo_models),
                len(needed) - len(todo_models))
    tracking_uri = cfg.tracking.uri or default_tracking_uri(store.local_root)
    config = OmegaConf.to_container(OmegaConf.structured(cfg))
    manifest = {"name": cfg.name, "sweep_key": plan.key, "cells": [c.key for c in plan.cells],
                "tracking_uri": redact(tracking_uri), "config": redact_tree(config)}
    return Sweep(cfg=cfg, plan=plan, store=store, data_dir=data_dir, todo_cells=todo_cells,
                 todo_models=todo_models,
                 corrupt={key for key, state in states.items() if state == "corrupt"},
                 tracking_uri=tracking_uri, config=config, manifest=manifest)


def sinks(sweep: Sweep) -> list[Listener]:
    """Takes the prepared sweep; gives its listeners in the order they are told: the store's row
    writer, the figure drawer, the MLflow tracker (see `sweeper.listeners`)."""
    return [RowWriter(sweep.store, sweep.cfg.name, sweep.manifest),
            FigureDrawer(sweep.cfg, sweep.store),
            TrackingListener(sweep.cfg, sweep.plan.key, sweep.store, sweep.tracking_uri,
                             sweep.config)]


def execute(sweep: Sweep, listeners: list[Listener],
            progress: bool) -> tuple[list[tuple[str, str]], Optional[str]]:
    """Takes the prepared sweep and its listeners; starts Ray, the data and the listeners side by
    side (`start_up`), runs the missing work and tells the listeners of each cell as it lands.
    Gives the failed cells (label, reason) and the Ray dashboard's URL.  With nothing to compute
    nothing starts: the listeners only hear that the sweep started."""
    if not sweep.todo_cells:
        for listener in listeners:
            listener.on_sweep_start()
        return [], None
    with start_up(sweep.cfg, sweep.plan, sweep.data_dir, listeners) as (dashboard_url, data):
        if dashboard_url:
            logger.info("Ray dashboard: %s  (token: `ray get-auth-token`)", dashboard_url)
        failures = _execute(sweep.plan, sweep.todo_models, sweep.todo_cells, data, sweep.store,
                            listeners, progress)
    if sweep.corrupt:
        failed = {label for label, _ in failures}
        redone = sum(cell_label(cell) not in failed for cell in sweep.todo_cells
                     if cell.key in sweep.corrupt)
        logger.info("recomputed %d of %d cells whose files failed their checksum", redone,
                    len(sweep.corrupt))
    return failures, dashboard_url


def collect(sweep: Sweep) -> pd.DataFrame:
    """Takes the sweep once it ran; gives every present cell's row, read back from the store
    (which compacts them into its results dataset), in the frontier's order."""
    results = sort_frontier(compact(sweep.store, sweep.cfg.name, sweep.manifest["cells"]).frame)
    release_freed_memory()
    return results


def summarize(sweep: Sweep, end: SweepEnd, dashboard_url: Optional[str]) -> SweepResult:
    """Takes the sweep and what its end gave; gives the `SweepResult` the command reports."""
    cfg, plan, store, figures = sweep.cfg, sweep.plan, sweep.store, end.figures
    return SweepResult(
        name=cfg.name, results=end.results, sweep_dir=store.sweep_uri(cfg.name),
        results_dir=store.location(CELLS_DATASET),
        tracking_uri=redact(sweep.tracking_uri), models_total=len(plan.models),
        models_trained=len(sweep.todo_models), cells_total=len(plan.cells),
        cells_computed=len(sweep.todo_cells) - len(end.failures),
        seconds=time.perf_counter() - end.started, dashboard_url=dashboard_url,
        failures=end.failures, plot_path=figures[0] if figures else None,
        csv_path=figures[1] if figures else None, report_paths=figures[2:],
        tracking_warning=end.tracking_warning,
    )


@contextlib.contextmanager
def start_up(cfg: SweepConfig, plan: SweepPlan, data_dir: Path,
             listeners: list[Listener]) -> Iterator[tuple[Optional[str], Any]]:
    """Ray, the data and the listeners (MLflow), started side by side rather than one after the
    other.

    Ray starts in this thread (it installs signal handlers) while one thread loads the data and
    the listeners prepare on another (`Listener.on_start_up`: MLflow's import).  The listeners
    hear that the sweep started (`on_sweep_start`: the manifest is written, the tracker's run
    opened in the background) only once the data has loaded and the cluster has the resources
    asked for: either can still refuse the sweep (ConfigError, exit 2), and a refused sweep writes
    nothing.  Yields (dashboard URL, data); Ray is shut down on leaving, also on a refusal.
    """
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="sweeper-start") as background:
        loading = background.submit(sweep_data, plan, data_dir)
        import ray  # noqa: F401 - before MLflow's import starts: the two share packages (protobuf)

        for listener in listeners:
            listener.on_start_up(background)
        with ray_session(cfg) as dashboard_url:
            data = loading.result()
            check_cluster_resources(cfg)
            for listener in listeners:
                listener.on_sweep_start()
            yield dashboard_url, data


def sweep_data(plan: SweepPlan, data_dir: Path):
    """The pool and test split the sweep trains on: the real dataset, or synthetic data of its shape.

    Refuses (before anything is written) a plan whose models need more pool records than the
    data holds.
    """
    cfg, data = plan.config, plan.config.dataset
    sizes = [spec.data.records_needed for spec in plan.models.values()]
    needed = None if None in sizes or not sizes else max(sizes)
    if data.synthetic:  # the plan gives synthetic models a pool size
        return synthetic_dataset(data.name, data.input_shape, data.num_classes, needed,
                                 data.test_size, seed=cfg.seed)
    loaded = load_dataset(data.name, data_dir, data.download, data.test_size)
    if needed is not None and needed > len(loaded.pool_y):
        raise ConfigError([f"dataset {data.name!r} has {len(loaded.pool_y)} pool records, but the "
                           f"grid needs {needed} (dataset.pool_size / dataset.members ÷ the smallest "
                           "p, plus the shadows' pool past it with shadow.disjoint_data)"])
    return loaded.first_records(needed)



def _execute(plan: SweepPlan, todo_models, todo_cells: list[Cell], data, store: ArtifactStore,
             listeners: list[Listener], progress: bool) -> list[tuple[str, str]]:
    """Submit the missing training, query and attack tasks; as each attack lands, tell the
    listeners of its cells (`_land`).  The failed cells, with their reasons."""
    import ray

    cfg = plan.config
    train_res, attack_res = cfg.resources.train, cfg.resources.attack
    # Ray 2.60's `.options()` cannot be chained, so each task gets all of its options at once.
    attack_remote = ray.remote(_attack_after_training)
    # A lost worker or node, or memory another task held, is retried (Ray's `max_retries`); an
    # exception of the task's own (bad data, a bug) would fail again, so it is not.
    transient = list(TRANSIENT_EXCEPTIONS)
    train_options = dict(num_cpus=train_res.num_cpus, num_gpus=train_res.num_gpus,
                         max_retries=train_res.max_retries, retry_exceptions=transient)
    attack_options = dict(num_cpus=attack_res.num_cpus, num_gpus=attack_res.num_gpus,
                          max_retries=attack_res.max_retries, retry_exceptions=transient)
    data_ref = ray.put(data)
    labels_ref = ray.put(data.pool_y)
    root = store.uri
    threads = max(1, int(train_res.num_cpus))
    training = submit_training(plan, todo_models, data_ref, root, train_options)
    # Model queries (augmented logits, Merlin) load a trained model again: trainer resources.
    query_remote = ray.remote(_query_after_training)
    asked = {key for cell in todo_cells for key in cell.scores.queries if not store.has_query(key)}
    querying = {}
    for key in sorted(asked):
        query = plan.queries[key]
        model = plan.models[query.model]
        querying[key] = query_remote.options(name=f"query {query.kind} {model.description}",
                                             **train_options).remote(
            query, model, data_ref, root, cfg.train.device, threads,
            *([training[query.model]] if query.model in training else []))
    cells_by_scores: dict[str, list[Cell]] = defaultdict(list)
    for cell in todo_cells:
        cells_by_scores[cell.scores.key].append(cell)
    scoring: dict[Any, list[Cell]] = {}
    upstream: dict[Any, list[tuple[Any, str]]] = {}  # each attack's training and query tasks
    for scores_key, cells in cells_by_scores.items():
        spec: AttackSpec = cells[0].scores
        needed = [training[k] for k in (spec.target, *spec.shadows) if k in training]
        needed += [querying[k] for k in spec.queries if k in querying]
        ref = attack_remote.options(name=f"attack {cell_label(cells[0])}", **attack_options).remote(
            spec, cells, labels_ref, root, *needed)
        scoring[ref] = cells
        upstream[ref] = [(training[k], plan.models[k].label) for k in (spec.target, *spec.shadows)
                         if k in training]
        upstream[ref] += [(querying[k], f"query {plan.queries[k].kind}") for k in spec.queries
                          if k in querying]

    failures: list[tuple[str, str]] = []
    model_refs = set(training.values())
    pending = list(model_refs) + list(scoring)
    trimmed_at = time.monotonic()
    with tqdm(total=len(model_refs), desc="models trained", unit="model", disable=not progress) as models_bar, \
         tqdm(total=len(todo_cells), desc="cells computed", unit="cell", disable=not progress) as cells_bar:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            if pending:  # and whatever else finished meanwhile: one pass, not one wait each
                more, pending = ray.wait(pending, num_returns=len(pending), timeout=0)
                done += more
            for ref in done:
                if ref in model_refs:  # a failed model surfaces in its cells
                    models_bar.update(1)
                    continue
                cells = scoring.pop(ref)  # popped: Ray may free the result once it has landed
                failures += _land(ref, cells, upstream.pop(ref), listeners,
                                  train_res.max_retries, attack_res.max_retries)
                cells_bar.update(len(cells))
            if time.monotonic() - trimmed_at > TRIM_SECONDS:
                release_freed_memory()
                trimmed_at = time.monotonic()
    release_freed_memory()
    return failures


def submit_training(plan: SweepPlan, todo_models: list[ModelSpec], data_ref, root: str,
                    train_options: dict[str, Any]) -> dict[str, Any]:
    """One Ray task per group of up to K models (`training_groups`); each model's own result
    reference (a group task has one return per model), by model key.  A group asks for K
    times one model's CPUs and GPUs (`group_resources`, capped at the largest node)."""
    import ray

    cfg = plan.config
    largest = largest_node()
    single, grouped = ray.remote(train_task), ray.remote(train_group_task)
    training = {}
    for group in training_groups(longest_first(todo_models), models_per_task(cfg)):
        options = {**train_options,
                   "num_cpus": group_resources(train_options["num_cpus"], len(group),
                                               largest.get("CPU", 0.0)),
                   "num_gpus": group_resources(train_options["num_gpus"], len(group),
                                               largest.get("GPU", 0.0))}
        args = (data_ref, root, cfg.train.device, max(1, int(options["num_cpus"])),
                cfg.train.compile)
        if len(group) == 1:
            training[group[0].key] = single.options(name=group_label(group), **options).remote(
                group[0], *args)
            continue
        refs = grouped.options(name=group_label(group), num_returns=len(group),
                               **options).remote(group, *args)
        training.update({spec.key: ref for spec, ref in zip(group, refs)})
    return training


def largest_node() -> dict[str, float]:
    """The CPUs and GPUs of the cluster's largest live node (each the largest of any node)."""
    import ray

    largest: dict[str, float] = {}
    for node in ray.nodes():
        if node.get("Alive"):
            for kind in ("CPU", "GPU"):
                largest[kind] = max(largest.get(kind, 0.0), float(node["Resources"].get(kind, 0.0)))
    return largest


def longest_first(specs: list[ModelSpec]) -> list[ModelSpec]:
    """The models in the order their training tasks are submitted: the most records trained on
    (epochs × p × pool) first, DP before non-private training at a tie (per-sample clipping costs
    more).  Ray starts tasks in submission order, so the longest ones no longer end up alone at
    the end of the sweep with the other CPUs idle (longest processing time first)."""
    def work(spec: ModelSpec) -> tuple[float, bool]:
        return (spec.train.epochs * spec.sample_rate * (spec.data.pool_size or 1),
                math.isfinite(spec.train.epsilon))

    return sorted(specs, key=work, reverse=True)


#: How often the driver hands freed heap back to the OS while cells land.
TRIM_SECONDS = 10.0


def release_freed_memory() -> None:
    """Return the heap glibc keeps after frees to the OS.  Without it a long sweep's driver grows
    ~60-80 MB per 1000 cells of memory it no longer uses (measured by `python -m bench.load`);
    a no-op off glibc."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _land(ref, cells: list[Cell], upstream: list[tuple[Any, str]], listeners: list[Listener],
          train_retries: int, attack_retries: int) -> list[tuple[str, str]]:
    """Tell the listeners of one finished attack's cells: each row that landed, in order until
    one cannot keep it (`NotLanded`), or the cells' failure.  The cells that failed, with their
    reasons."""
    import ray

    try:
        rows = ray.get(ref)
    except Exception as error:  # noqa: BLE001 - one failed cell must not stop the sweep
        failure = _first_failure(error, f"attack {cell_label(cells[0])}", upstream,
                                 train_retries, attack_retries)
        reason = f"{failure.task}: {failure.reason}" if failure.task else failure.reason
        for cell in cells:
            for listener in listeners:
                listener.on_cell_failed(cell, failure)
        return [(cell_label(cell), reason) for cell in cells]
    failed = []
    for row, cell in zip(rows, cells):
        try:
            for listener in listeners:
                listener.on_cell_landed(cell, row)
        except NotLanded as lost:  # this row, not the others: they still land
            failed.append((cell_label(cell), lost.failure.reason))
    return failed


def _first_failure(error: Exception, attack: str, upstream: list[tuple[Any, str]],
                   train_retries: int, attack_retries: int) -> Failure:
    """Why an attack failed: the training or query task it waited on that failed (with that
    task's retry bound), else the attack itself."""
    import ray

    for dependency, name in upstream:
        try:
            ray.get(dependency)
        except Exception as cause:  # noqa: BLE001 - the culprit, whatever it raised
            return classify(cause, train_retries, task=name)
    return classify(error, attack_retries, task=attack)


def _query_after_training(spec: QuerySpec, model: ModelSpec, data, store_root: str, device: str,
                          threads: int, *_trained: Any) -> None:
    """`query_task`, taking the training result it waits for as an ignored argument."""
    query_task(spec, model, data, store_root, device, threads)


def _attack_after_training(spec: AttackSpec, cells: list[Cell], labels, store_root: str,
                           *_trained: Any) -> list[dict[str, Any]]:
    """`attack_task`, taking the training results it waits for as ignored arguments."""
    return attack_task(spec, cells, labels, store_root)
