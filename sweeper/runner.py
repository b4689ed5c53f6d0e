"""Run a sweep: validate, plan, schedule the missing work on Ray, land rows as they finish.

Everything that can be refused is refused before Ray starts (config, dataset files) or, for the
data's size, while it starts, and always before anything is written.  Ray, the data and MLflow
start side by side (`start_up`).  Work that is already in the store is not scheduled again, so a
rerun of a finished sweep trains nothing (nor starts Ray, loads data, opens MLflow when it has
nothing to log, or redraws unchanged figures), and a killed sweep resumes where it stopped.  Results are streamed with `ray.wait`: each cell's
row is written (atomically) and logged to MLflow the moment its attack finishes.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import importlib
import json
import logging
import math
import time
from collections import defaultdict
from concurrent.futures import Future, ThreadPoolExecutor
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
from sweeper.failures import TRANSIENT_EXCEPTIONS, Failure, classify, storing_failure
from sweeper.formats import format_epsilon
from sweeper.frontier import sort_frontier
from sweeper.plan import (AttackSpec, Cell, ModelSpec, QuerySpec, SweepPlan, build_plan,
                          group_label, group_resources, models_per_task, training_groups)
from sweeper.ray_start import (dynamic_agent_port, environment, free_dashboard_port,
                               local_ray_confined, require_reachable, submitted_job_address)
from sweeper.reports import draw, plot_frontier
from sweeper.results import CELLS_DATASET, compact
from sweeper.scale import scaled
from sweeper.schema import SchemaError
from sweeper.store import ArtifactStore, atomic_write_bytes
from sweeper.tasks import attack_task, query_task, train_group_task, train_task
from sweeper.credentials import redact, redact_tree
from sweeper.tracking import (config_params, default_tracking_uri, open_tracker, summary_metrics,
                              tracking_stamp)


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


def cell_label(cell: Cell) -> str:
    return f"{cell.attack} ε={format_epsilon(cell.epsilon)} δ={cell.delta:g} p={cell.p:g} trial={cell.trial}"


def run_sweep(cfg: SweepConfig, progress: bool = True, echo=print) -> SweepResult:
    started = time.perf_counter()
    cfg = scaled(cfg)
    validate(cfg)
    data_dir = Path(cfg.dataset.data_dir).expanduser()
    if not cfg.dataset.synthetic:
        require_dataset(cfg.dataset.name, data_dir, cfg.dataset.download)

    plan = build_plan(cfg)
    store = ArtifactStore(cfg.store.root)
    states = {cell.key: store.cell_state(cfg.name, cell.key) for cell in plan.cells}
    todo_cells = [cell for cell in plan.cells if states[cell.key] != "present"]
    corrupt = {key for key, state in states.items() if state == "corrupt"}
    # Only models a missing cell reads: a finished cell never waits on a retrain.
    needed = {key for cell in todo_cells for key in (cell.scores.target, *cell.scores.shadows)}
    todo_models = [spec for key, spec in plan.models.items()
                   if key in needed and not store.has_model(key)]
    echo(f"sweep '{cfg.name}': {len(plan.cells)} cells, {len(plan.models)} models; "
         f"{len(todo_cells)} cells to compute, reading {len(needed)} models "
         f"({len(todo_models)} to train, {len(needed) - len(todo_models)} already in the store)")

    tracking_uri = cfg.tracking.uri or default_tracking_uri(store.local_root)
    config = OmegaConf.to_container(OmegaConf.structured(cfg))

    def opened_tracker():
        return open_tracker(tracking_uri, cfg.tracking.experiment, cfg.name, plan.key,
                            config_params(config), mlflow_artifact_location(store),
                            store.read_scores_table)

    failures: list[tuple[str, str]] = []
    tracker = dashboard_url = None
    manifest = {"name": cfg.name, "sweep_key": plan.key, "cells": [c.key for c in plan.cells],
                "tracking_uri": redact(tracking_uri), "config": redact_tree(config)}
    if todo_cells:
        with start_up(cfg, plan, data_dir, opened_tracker) as (dashboard_url, data, tracker_ready):
            store.write_manifest(cfg.name, manifest)
            if dashboard_url:
                echo(f"Ray dashboard: {dashboard_url}  (token: `ray get-auth-token`)")
            failures = _execute(plan, todo_models, todo_cells, data, store, tracker_ready, progress)
            tracker = tracker_ready.result()
    else:
        store.write_manifest(cfg.name, manifest)
    if corrupt:
        failed = {label for label, _ in failures}
        redone = sum(cell_label(cell) not in failed for cell in todo_cells if cell.key in corrupt)
        echo(f"recomputed {redone} of {len(corrupt)} cells whose files failed their checksum")

    results = sort_frontier(compact(store, cfg.name, manifest["cells"], echo).frame)
    release_freed_memory()
    figures, figures_key = publish_figures(cfg, store, results, echo)
    stamp = tracking_stamp(tracking_uri, cfg.tracking.experiment, plan.key, results.get("cell_key", []),
                           figures_key)
    opened = bool(todo_cells)
    if not todo_cells and store.read_tracking_stamp(cfg.name) != stamp:
        tracker, opened = opened_tracker(), True  # something is missing in MLflow, or unknown
    tracking_warning = None
    if tracker is None and opened:  # open_tracker warned why
        tracking_warning = f"MLflow tracking at {redact(tracking_uri)} was unavailable"
    if tracker is not None:
        for row in results.to_dict("records"):  # cells computed while tracking was down, too
            tracker.log_cell(row)
        for path in figures:
            tracker.log_artifact(path)
        tracker.log_summary(summary_metrics(results, len(todo_models),
                                            time.perf_counter() - started))
        tracking_warning = tracker.finish(failed=bool(failures))
        if tracking_warning is None:  # after the last write: the database file as MLflow left it
            store.write_tracking_stamp(cfg.name, tracking_stamp(
                tracking_uri, cfg.tracking.experiment, plan.key, results.get("cell_key", []),
                figures_key))
    return SweepResult(
        name=cfg.name, results=results, sweep_dir=store.sweep_uri(cfg.name),
        results_dir=store.location(CELLS_DATASET),
        tracking_uri=redact(tracking_uri), models_total=len(plan.models),
        models_trained=len(todo_models), cells_total=len(plan.cells),
        cells_computed=len(todo_cells) - len(failures),
        seconds=time.perf_counter() - started, dashboard_url=dashboard_url, failures=failures,
        plot_path=figures[0] if figures else None, csv_path=figures[1] if figures else None,
        report_paths=figures[2:], tracking_warning=tracking_warning,
    )


@contextlib.contextmanager
def start_up(cfg: SweepConfig, plan: SweepPlan, data_dir: Path,
             opened_tracker: Callable[[], Any]) -> Iterator[tuple[Optional[str], Any, Future]]:
    """Ray, the data and MLflow, started side by side rather than one after the other.

    Ray starts in this thread (it installs signal handlers) while one thread loads the data and
    another imports MLflow.  The tracker is opened (its run created) only once the data has loaded
    and the cluster has the resources asked for: either can still refuse the sweep (ConfigError,
    exit 2), and a refused sweep writes nothing.  Yields (dashboard URL, data, the tracker's
    future, resolved by whoever first logs); Ray is shut down on leaving, also on a refusal.
    """
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="sweeper-start") as background:
        loading = background.submit(sweep_data, plan, data_dir)
        import ray  # noqa: F401 - before MLflow's import starts: the two share packages (protobuf)

        importing = background.submit(import_mlflow)
        with ray_session(cfg) as dashboard_url:
            data = loading.result()
            check_cluster_resources(cfg)
            tracker_ready = background.submit(lambda: (importing.result(), opened_tracker())[1])
            yield dashboard_url, data, tracker_ready


def import_mlflow() -> None:
    """Import the MLflow modules the tracker uses: most of the time opening it takes."""
    with contextlib.suppress(ImportError):
        import mlflow.tracking  # noqa: F401


def mlflow_artifact_location(store: ArtifactStore) -> Optional[str]:
    """Artifacts beside the results for a local store; the tracking server's choice otherwise."""
    return (store.local_root / "mlartifacts").as_uri() if store.local_root is not None else None


#: The code that draws the figures (a package: all its modules): a change to it redraws them even
#: when the table is the same.
DRAWING_MODULES = ("sweeper.frontier", "sweeper.reports", "sweeper.figures", "sweeper.formats")
FIGURES_STAMP = ".figures.json"


def figures_key(cfg: SweepConfig, table_csv: bytes) -> str:
    """What the figures are drawn from: the table they plot, the report, the title (the name and
    the shadow models it names) and the code."""
    digest = hashlib.sha256(table_csv)
    digest.update(f"\n{cfg.report}\n{cfg.name}\n{cfg.shadow.count}\n".encode())
    for name in DRAWING_MODULES:
        module = importlib.import_module(name)
        files = (sorted(Path(module.__file__).parent.glob("*.py")) if hasattr(module, "__path__")
                 else [Path(module.__file__)])  # a package: every module of it
        for path in files:
            digest.update(path.read_bytes())
    return digest.hexdigest()


def publish_figures(cfg: SweepConfig, store: ArtifactStore, results: pd.DataFrame,
                    echo) -> tuple[list[Path], Optional[str]]:
    """frontier.png, frontier.csv and the experiment's report, drawn on this machine and copied
    into the store when it is remote; none for a sweep without results.  Returns the paths and
    the figures' key.

    Figures whose inputs are unchanged (`figures_key`, kept in the figures folder) are not drawn
    again: a rerun that computed nothing never loads matplotlib.  Notes the report printed
    when it was drawn are printed again.
    """
    if results.empty:
        return [], None
    folder = store.figures_dir(cfg.name)
    table_csv = results.to_csv(index=False).encode()
    key = figures_key(cfg, table_csv)
    with contextlib.suppress(OSError, ValueError):
        drawn = json.loads((folder / FIGURES_STAMP).read_text())
        paths = [folder / name for name in drawn["paths"]]
        if drawn["key"] == key and all(path.is_file() for path in paths):
            for note in drawn["notes"]:
                echo(note)
            return paths, key
    notes: list[str] = []

    def note(line: str) -> None:
        notes.append(line)
        echo(line)

    plot_path = plot_frontier(results, folder / "frontier.png", title=cfg.name,
                              shadows=cfg.shadow.count)
    csv_path = folder / "frontier.csv"
    atomic_write_bytes(csv_path, table_csv)
    report_paths = draw(cfg.report, results, folder / "report", store.uri, note)
    paths = [plot_path, csv_path, *report_paths]
    for path in paths:
        store.publish(f"sweeps/{cfg.name}/{path.relative_to(folder).as_posix()}", path)
    atomic_write_bytes(folder / FIGURES_STAMP, json.dumps({
        "key": key, "paths": [path.relative_to(folder).as_posix() for path in paths],
        "notes": notes}).encode())
    return paths, key


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
             tracker_ready: Future, progress: bool) -> list[tuple[str, str]]:
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
                tracker = tracker_ready.result()  # opened while the first models trained
                failures += _land(ref, cfg.name, cells, upstream.pop(ref), store, tracker,
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


def _land(ref, sweep: str, cells: list[Cell], upstream: list[tuple[Any, str]],
          store: ArtifactStore, tracker, train_retries: int,
          attack_retries: int) -> list[tuple[str, str]]:
    """Store (and log) the rows of one finished attack, or its cells' failure records; the
    cells that failed, with their reasons."""
    import ray

    try:
        rows = ray.get(ref)
    except Exception as error:  # noqa: BLE001 - one failed cell must not stop the sweep
        failure = _first_failure(error, f"attack {cell_label(cells[0])}", upstream,
                                 train_retries, attack_retries)
        reason = f"{failure.task}: {failure.reason}" if failure.task else failure.reason
        for cell in cells:
            store.write_failure(sweep, cell.key, failure.record(cell_label(cell), cell.key,
                                                                cell.coordinates))
        return [(cell_label(cell), reason) for cell in cells]
    failed = []
    for row, cell in zip(rows, cells):
        try:
            store.write_cell(sweep, row["cell_key"], row)
        except (OSError, SchemaError) as error:  # this row, not the others: they still land
            failure = storing_failure(error)
            failed.append((cell_label(cell), failure.reason))
            with contextlib.suppress(OSError):  # the store may be what failed
                store.write_failure(sweep, cell.key, failure.record(cell_label(cell), cell.key,
                                                                    cell.coordinates))
            continue
        if tracker is not None:
            tracker.log_cell(row)
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
