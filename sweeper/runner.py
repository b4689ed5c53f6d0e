"""Run a sweep: a short sequence of named stages, conducted by `run_sweep`.

    prepare    validate and plan (once: `validate` returns the plan it checked), and ask the store
               what is left (refusals before anything is written)
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
import copy
import ctypes
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence, cast

import pandas as pd
from omegaconf import OmegaConf

from jobs.datasets import require_dataset
from sweeper import claim, interrupts
from sweeper.config import ConfigError, SweepConfig
from sweeper.checks.validation import validate
from sweeper.console import Progress, forwarded
from sweeper.credentials import redact, redact_tree
from sweeper.failures import Failure, cell_label, classify, stopping_error
from sweeper.listeners import (FigureDrawer, Listeners, NotLanded, RowWriter, SweepEnd,
                               TrackingListener)
from sweeper.grid.plan import Cell, ModelSpec, SweepPlan
from sweeper.probes import not_mlflow_problem, store_endpoint_problem, tracking_server_problem
from sweeper.cluster.address import joins_cluster
from sweeper.cluster.dashboard import auth_hint
from sweeper.cluster.start import ray_session
from sweeper.cluster.store_reach import require_shared_store
from sweeper.grid.sweep_data import sweep_data
from sweeper.decisions import summary_line, with_decisions
from sweeper.sequential import Decisions, replay
from sweeper.store.results import CELLS_DATASET, compact, needed_cells, sort_frontier
from sweeper.grid.scale import scaled
from sweeper.store.files import DiskFull, LinkInStore, sweep_stale_parts
from sweeper.store.artifacts import ArtifactStore
from sweeper.task_times import KindTime, kind_times
from sweeper.cluster.submission import (Submitted, check_cluster_resources, submit_attacks,
                                submit_queries, submit_training, task_options)
from sweeper.tracking.recorder import default_tracking_uri

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
    html_report: Optional[Path] = None  # the sweep's self-contained page (`sweeper.html_report`)
    # Training, queries and attacks: each kind's wall and task seconds (`sweeper.task_times`).
    task_times: dict[str, KindTime] = field(default_factory=dict)
    tracking_warning: Optional[str] = None  # what MLflow missed, when it went down mid-sweep
    tracking_page: Optional[str] = None  # the sweep's page in MLflow's UI (`experiment_page`)
    # A sequential sweep's decisions by kind and models used (`Decisions.summary`); None: fixed.
    sequential: Optional[dict[str, Any]] = None


@dataclass
class Sweep:
    """A validated, planned sweep and what of it the store lacks (`prepare`)."""

    cfg: SweepConfig  # scaled (`sweeper.grid.scale`) and validated
    plan: SweepPlan
    store: ArtifactStore
    data_dir: Path
    todo_cells: list[Cell]  # cells not present in the store (missing, or failed their checksum)
    todo_models: list[ModelSpec]  # models a todo cell reads that the store lacks
    corrupt: set[str]  # keys of cells whose files (their row or scores) failed their checksum
    tracking_uri: str
    config: dict[str, Any]  # the config as plain containers (MLflow params, the manifest)
    manifest: dict[str, Any]  # its cells, where it is tracked, its config (credentials masked)
    # A sequential sweep's bookkeeping (`sweeper.sequential`), its stored rows replayed; None
    # for a fixed grid.
    decisions: Optional[Decisions] = None


def run_sweep(cfg: SweepConfig | SweepPlan, progress: bool = True,
              echo: Optional[Callable[[str], None]] = None) -> SweepResult:
    """Run `cfg`'s sweep: prepare → execute (telling the sinks of each landed cell) → collect →
    end (the sinks finish: figures, MLflow) → summarize.

    Args:
        cfg: the composed config, or the plan `validate(scaled(cfg))` returned (the command
            line's preflight runs it): that plan is run, not checked or planned again.
        progress: show the models' and cells' progress (`sweeper.console.Progress`).
        echo: also receives the status lines, which go to this package's loggers
            (`sweeper.console` shows them).

    Returns:
        The `SweepResult` the command reports.

    Raises:
        ConfigError, DatasetUnavailable: refused by `prepare`, before anything is written.
        KeyboardInterrupt: SIGINT or SIGTERM (`sweeper.interrupts`), once the listeners closed.
        DiskFull: a task found no space to store what it made (its path), once the listeners
            closed: every other write would fail alike.
        LinkInStore: a task met a symbolic link where the store writes (something put it
            there while the sweep ran: the preflight refuses those it sees), once the listeners
            closed.
    """
    with forwarded(echo), contextlib.ExitStack() as claimed:
        started = time.perf_counter()
        sweep = prepare(cfg, claimed)
        listeners = sinks(sweep)
        try:
            failures, trained, dashboard_url, spans = execute(sweep, listeners, progress)
            end = listeners.on_sweep_end(SweepEnd(collect(sweep), failures, trained, started,
                                                  task_times=kind_times(spans)))
        # Ctrl-C, SIGTERM (`sweeper.interrupts`), a task that found the disk full or a link in
        # the store: the sinks close
        except (KeyboardInterrupt, DiskFull, LinkInStore):
            listeners.on_sweep_interrupted()
            raise
        return summarize(sweep, end, dashboard_url)


def prepare(cfg: SweepConfig | SweepPlan, claimed: Optional[contextlib.ExitStack] = None) -> Sweep:
    """Scale, validate and plan (`validate` returns the plan it checked: the sweep is planned
    once), and check against the store what is left to compute and train.

    Args:
        cfg: the composed config, or the plan `validate(scaled(cfg))` returned: run as it is.
        claimed: when given, the sweep's lock is taken into it and the sweep's name checked to
            hold this very sweep (`sweeper.claim`) before the store is read.

    Returns:
        The `Sweep`: its scaled config, plan, store and the cells and models it lacks.

    Raises:
        ConfigError: an invalid config or an unreachable store or tracking server; with
            `claimed`, a sweep name another process holds or that holds another sweep
            (`claim.SweepRefused`).  Raised before anything is written.
        DatasetUnavailable: the dataset's files are missing (and not downloaded).
    """
    plan = cfg if isinstance(cfg, SweepPlan) else validate(scaled(cfg))
    cfg = plan.config
    server = cfg.tracking.uri or os.environ.get("MLFLOW_TRACKING_URI") or ""
    field = "tracking.uri" if cfg.tracking.uri else "MLFLOW_TRACKING_URI"
    unreachable = [problem for problem in (
        store_endpoint_problem(cfg.store.root),
        tracking_server_problem(server, field) or not_mlflow_problem(server, field))
        if problem]
    if unreachable:  # before the store or MLflow is asked anything: their clients retry for minutes
        raise ConfigError(unreachable)
    data_dir = Path(cfg.dataset.data_dir).expanduser()
    if not cfg.dataset.synthetic:
        require_dataset(cfg.dataset.name, data_dir, cfg.dataset.download)

    store = ArtifactStore(cfg.store.root)
    # A dataclass's container is a dict keyed by its field names; OmegaConf types every container.
    config = cast(dict[str, Any], OmegaConf.to_container(OmegaConf.structured(cfg)))
    earlier_keys: list[str] = []
    if claimed is not None:
        claimed.enter_context(claim.held(store, cfg.name, cfg.store.wait))
        earlier_keys = claim.require_same_sweep(store, cfg.name, [c.key for c in plan.cells],
                                                redact_tree(config), cfg.store.replace)
    if store.local_root is not None:
        swept = sweep_stale_parts(store.local_root)
        if swept:
            logger.info("removed %d partial files that interrupted writes left in the store", swept)
    states = cell_states(store, cfg.name, plan.cells)
    todo_cells = [cell for cell in plan.cells if states[cell.key] != "present"]
    decisions = None
    if cfg.sequential.enabled:  # only the first round: the rest is asked for as cells land
        decisions = Decisions(plan, cfg.sequential)
        replay(decisions, plan, store, [c for c in plan.cells if states[c.key] == "present"])
        todo_cells = copy.deepcopy(decisions).next_cells()
    # Only models a missing cell reads: a finished cell never waits on a retrain.
    needed = {key for cell in todo_cells for key in (cell.scores.target, *cell.scores.shadows)}
    todo_models = [spec for key, spec in plan.models.items()
                   if key in needed and not store.has_model(key)]
    logger.info("sweep '%s': %d cells, %d models; %d cells to compute, reading %d models "
                "(%d to train, %d already in the store)", cfg.name, len(plan.cells),
                len(plan.models), len(todo_cells), len(needed), len(todo_models),
                len(needed) - len(todo_models))
    tracking_uri = cfg.tracking.uri or default_tracking_uri(store.local_root)
    manifest = {"name": cfg.name, "sweep_key": plan.key, "cells": [c.key for c in plan.cells],
                "earlier_keys": earlier_keys, "tracking_uri": redact(tracking_uri), "config": redact_tree(config)}
    if decisions is not None and not todo_cells:  # finished: the cells it did not need
        manifest["sequential"] = {"skipped": decisions.skipped(), **decisions.summary()}
    return Sweep(cfg=cfg, plan=plan, store=store, data_dir=data_dir, todo_cells=todo_cells,
                 todo_models=todo_models,
                 corrupt={key for key, state in states.items() if state == "corrupt"},
                 tracking_uri=tracking_uri, config=config, manifest=manifest, decisions=decisions)


def cell_states(store: ArtifactStore, sweep: str, cells: Sequence[Cell]) -> dict[str, str]:
    """Each cell's state in the store (`ArtifactStore.cell_state`), a landed cell taking its
    per-record scores' when they are not present: the results' scores dataset is rebuilt from
    those files (on a grow, say), so a cell whose scores fail their checksum is computed again,
    from its stored models (trained again when they are gone too), never dropped from it."""
    states = {cell.key: store.cell_state(sweep, cell.key) for cell in cells}
    landed = [cell for cell in cells if states[cell.key] == "present"]
    scores = {key: store.scores_state(key) for key in {cell.scores.key for cell in landed}}
    for cell in landed:
        states[cell.key] = scores[cell.scores.key]
    return states


def sinks(sweep: Sweep) -> Listeners:
    """The prepared sweep's listeners, in the order they are told (see `sweeper.listeners`).

    Returns:
        The store's row writer, the figure drawer, the MLflow tracker (which logs the drawer's
        figures).
    """
    return Listeners([RowWriter(sweep.store, sweep.cfg.name, sweep.manifest),
                      FigureDrawer(sweep.cfg, sweep.store, sweep.manifest["config"]),
                      TrackingListener(sweep.cfg, sweep.plan.key, sweep.manifest["earlier_keys"],
                                       sweep.store, sweep.tracking_uri, sweep.config)])


def execute(sweep: Sweep, listeners: Listeners, progress: bool
            ) -> tuple[list[tuple[str, str]], int, Optional[str],
                       dict[str, list[tuple[float, float]]]]:
    """Run the prepared sweep's missing work, telling `listeners` of each cell as it lands.

    Ray, the data and the listeners start side by side (`start_up`).  With nothing to compute
    nothing starts: the listeners only hear that the sweep started.

    Returns:
        The failed cells as (label, reason), the models trained and stored, the Ray
        dashboard's URL (None when Ray did not start or has no dashboard), and the finished
        tasks' spans by kind (`sweeper.task_times`).

    Raises:
        DiskFull: a task found no space to store what it made.
    """
    if not sweep.todo_cells:
        listeners.on_sweep_start()
        return [], 0, None, {}
    with start_up(sweep.cfg, sweep.plan, sweep.data_dir, listeners) as (dashboard_url, data):
        if dashboard_url:
            logger.info("Ray dashboard: %s  (%s)", dashboard_url, auth_hint())
        if sweep.decisions is not None:
            listeners.append(sweep.decisions)  # told of each row, after the store keeps it
            failures, trained, spans = _execute_sequential(sweep.plan, sweep.decisions, data,
                                                           sweep.store, listeners, progress)
            if not any(frontier.in_flight for frontier in sweep.decisions.frontiers.values()):
                sweep.manifest["sequential"] = {"skipped": sweep.decisions.skipped(),
                                                **sweep.decisions.summary()}
                sweep.store.write_manifest(sweep.cfg.name, sweep.manifest)
        else:
            failures, trained, spans = _execute(sweep.plan, sweep.todo_models, sweep.todo_cells,
                                                data, sweep.store, listeners, progress)
    if sweep.corrupt:
        failed = {label for label, _ in failures}
        redone = sum(cell_label(cell) not in failed for cell in sweep.todo_cells
                     if cell.key in sweep.corrupt)
        logger.info("recomputed %d of %d cells whose files failed their checksum", redone,
                    len(sweep.corrupt))
    return failures, trained, dashboard_url, spans


def collect(sweep: Sweep) -> pd.DataFrame:
    """Every present cell's row of the sweep once it ran, in the frontier's order.

    The rows are read back from the store, which compacts them into its results dataset.
    """
    results = sort_frontier(with_decisions(
        compact(sweep.store, sweep.cfg.name, needed_cells(sweep.manifest)).frame,
        sweep.manifest["config"]))
    release_freed_memory()
    return results


def summarize(sweep: Sweep, end: SweepEnd, dashboard_url: Optional[str]) -> SweepResult:
    """The `SweepResult` the command reports, from the sweep and what its end gave."""
    cfg, plan, store, figures = sweep.cfg, sweep.plan, sweep.store, end.figures
    return SweepResult(
        name=cfg.name, results=end.results, sweep_dir=store.sweep_uri(cfg.name),
        results_dir=store.location(CELLS_DATASET),
        tracking_uri=redact(sweep.tracking_uri), models_total=len(plan.models),
        models_trained=end.models_trained, cells_total=len(plan.cells),
        cells_computed=(len(sweep.todo_cells) if sweep.decisions is None
                        else sweep.decisions.landed - sweep.decisions.replayed) - len(end.failures),
        seconds=time.perf_counter() - end.started, dashboard_url=dashboard_url,
        failures=end.failures, plot_path=figures[0] if figures else None,
        csv_path=figures[1] if figures else None,
        report_paths=[path for path in figures[2:] if path != end.html_report],
        html_report=end.html_report, tracking_warning=end.tracking_warning,
        tracking_page=end.tracking_page, task_times=end.task_times,
        sequential=None if sweep.decisions is None else sweep.decisions.summary(),
    )


@contextlib.contextmanager
def start_up(cfg: SweepConfig, plan: SweepPlan, data_dir: Path,
             listeners: Listeners) -> Iterator[tuple[Optional[str], Any]]:
    """Ray, the data and the listeners (MLflow), started side by side rather than one after the
    other.

    Ray starts in this thread (it installs signal handlers) while one thread loads the data and
    the listeners prepare on another (`Listener.on_start_up`: MLflow's import).  The listeners
    hear that the sweep started (`on_sweep_start`: the manifest is written, the tracker's run
    opened in the background) only once the data has loaded and the cluster has the resources
    asked for and, on a cluster this sweep joins, every node shares a local store's folder
    (`require_shared_store`): any of these can still refuse the sweep (ConfigError, exit 2), and a
    refused sweep writes nothing.  Yields (dashboard URL, data); Ray is shut down on leaving, also on a refusal.
    """
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="sweeper-start") as background:
        loading = background.submit(sweep_data, plan, data_dir)
        import ray  # noqa: F401 - before MLflow's import starts: the two share packages (protobuf)

        listeners.on_start_up(background)
        with ray_session(cfg) as dashboard_url:
            data = loading.result()
            check_cluster_resources(cfg)
            local_root = ArtifactStore(cfg.store.root).local_root
            if local_root is not None and joins_cluster(cfg):
                require_shared_store(local_root, cfg.store.root)
            listeners.on_sweep_start()
            yield dashboard_url, data


def _execute(plan: SweepPlan, todo_models, todo_cells: list[Cell], data, store: ArtifactStore,
             listeners: Listeners, progress: bool
             ) -> tuple[list[tuple[str, str]], int, dict[str, list[tuple[float, float]]]]:
    """Submit the missing training, query and attack tasks (`sweeper.cluster.submission`); as each
    attack lands, tell the listeners of its cells (`_land`).  The failed cells, with their
    reasons, the models stored, and the finished tasks' spans by kind."""
    import ray

    cfg = plan.config
    train_options, attack_options = task_options(cfg.resources.train), task_options(cfg.resources.attack)
    data_ref = ray.put(data)
    training = submit_training(plan, todo_models, data_ref, store.uri, train_options)
    querying = submit_queries(plan, todo_cells, store, training, data_ref, train_options)
    scoring = submit_attacks(plan, todo_cells, training, querying, data, store.uri, attack_options)
    return _await_cells(scoring, set(training.values()), set(querying.values()),
                        len(todo_cells), listeners,
                        (cfg.resources.train.max_retries, cfg.resources.attack.max_retries),
                        progress)


def _execute_sequential(plan: SweepPlan, decisions: Decisions, data: Any, store: ArtifactStore,
                        listeners: Listeners, progress: bool
                        ) -> tuple[list[tuple[str, str]], int, dict[str, list[tuple[float, float]]]]:
    """A sequential sweep's execution (`sweeper.sequential`): submit each cell's trials as
    `decisions` asks for them, land each attack's cells as it finishes (`_land`, which tells
    `decisions` too) and ask again: no barrier between rounds.  The failed cells with their
    reasons, the models stored, and the finished tasks' spans by kind (`sweeper.task_times`)."""
    import ray

    cfg = plan.config
    train_options, attack_options = task_options(cfg.resources.train), task_options(cfg.resources.attack)
    retries = (cfg.resources.train.max_retries, cfg.resources.attack.max_retries)
    data_ref = ray.put(data)
    training: dict[str, Any] = {}
    querying: dict[str, Any] = {}
    scoring: dict[Any, Any] = {}
    pending: list[Any] = []
    model_refs: set = set()
    query_refs: set = set()
    failures: list[tuple[str, str]] = []
    trained = 0
    spans: dict[str, list[tuple[float, float]]] = {"queries": [], "attacks": []}
    training_spans: dict[float, float] = {}  # a training task's start → its last model's end
    fixed_cells = len(plan.cells)
    with Progress(len(decisions.target_models), "target models used", "model", progress) as models_bar, \
         Progress(fixed_cells, "cells computed (of the fixed grid's)", "cell", progress) as cells_bar:
        while True:
            batch = decisions.next_cells()
            if batch:
                needed = {key for cell in batch for key in (cell.scores.target, *cell.scores.shadows)}
                new_models = [plan.models[key] for key in sorted(needed)
                              if key not in training and not store.has_model(key)]
                started = submit_training(plan, new_models, data_ref, store.uri, train_options)
                training.update(started)
                model_refs.update(started.values())
                asked = submit_queries(plan, batch, store, training, data_ref, train_options,
                                       submitted=querying)
                querying.update(asked)
                query_refs.update(asked.values())
                attacks = submit_attacks(plan, batch, training, querying, data, store.uri,
                                         attack_options)
                scoring.update(attacks)
                pending += [*started.values(), *asked.values(), *attacks]
                models_bar.update(len({cell.scores.target for cell in batch}
                                      & {spec.key for spec in new_models}))
            if not pending:
                break
            interrupts.check()
            done, pending = ray.wait(pending, num_returns=1, timeout=CHECK_SECONDS)
            if pending:
                more, pending = ray.wait(pending, num_returns=len(pending), timeout=0)
                done += more
            for ref in done:
                if ref in model_refs:
                    meta = _finished(ref)
                    if meta is not None:
                        trained += 1
                        if "started_at" in meta:
                            start = meta["started_at"]
                            training_spans[start] = max(training_spans.get(start, start),
                                                        meta["ended_at"])
                    continue
                if ref in query_refs:
                    span = _finished(ref)
                    if span is not None:
                        spans["queries"].append(tuple(span))
                    continue
                submitted = scoring.pop(ref)
                failures += _land(ref, submitted.cells, submitted.upstream, listeners, *retries,
                                  spans["attacks"])
                for cell in submitted.cells:  # told neither landed nor failed: not landed
                    key, index = decisions.where[cell.key]
                    if index in decisions.frontiers[key].in_flight:
                        decisions.lost(cell)
                cells_bar.update(len(submitted.cells))
        release_freed_memory()
    spans["training"] = list(training_spans.items())
    logger.info("%s", summary_line(decisions.summary()))
    return failures, trained, spans


def _await_cells(scoring: dict[Any, Submitted], model_refs: set, query_refs: set, cells: int,
                 listeners: Listeners, retries: tuple[int, int], progress: bool
                 ) -> tuple[list[tuple[str, str]], int, dict[str, list[tuple[float, float]]]]:
    """Wait for every training, query and attack task, landing each attack's cells as it
    finishes (`_land`) and counting models (once stored) and cells on the terminal; the failed
    cells, with their reasons, the models stored, and each finished task's span by kind
    (`sweeper.task_times`).  DiskFull, at once, when a task found no space for what it made:
    every task after it would spend its work to fail at its first write."""
    import ray

    failures: list[tuple[str, str]] = []
    trained = 0
    training: dict[float, float] = {}  # a training task's start → its last model's end
    spans: dict[str, list[tuple[float, float]]] = {"queries": [], "attacks": []}
    pending = list(model_refs) + list(query_refs) + list(scoring)
    trimmed_at = time.monotonic()
    with Progress(len(model_refs), "models trained", "model", progress) as models_bar, \
         Progress(cells, "cells computed", "cell", progress) as cells_bar:
        while pending:
            interrupts.check()  # a signal a `__del__` saw, say Ray's (`sweeper.interrupts`)
            done, pending = ray.wait(pending, num_returns=1, timeout=CHECK_SECONDS)
            if pending:  # and whatever else finished meanwhile: one pass, not one wait each
                more, pending = ray.wait(pending, num_returns=len(pending), timeout=0)
                done += more
            for ref in done:
                if ref in model_refs:  # a failed model surfaces in its cells
                    meta = _finished(ref)
                    if meta is not None:
                        trained += 1
                        models_bar.update(1)
                        if "started_at" in meta:
                            start = meta["started_at"]
                            training[start] = max(training.get(start, start), meta["ended_at"])
                    continue
                if ref in query_refs:  # and so does a failed query
                    span = _finished(ref)
                    if span is not None:
                        spans["queries"].append(tuple(span))
                    continue
                submitted = scoring.pop(ref)  # popped: Ray may free the result once it has landed
                failures += _land(ref, submitted.cells, submitted.upstream, listeners, *retries,
                                  spans["attacks"])
                cells_bar.update(len(submitted.cells))
            if time.monotonic() - trimmed_at > TRIM_SECONDS:
                release_freed_memory()
                trimmed_at = time.monotonic()
    release_freed_memory()
    spans["training"] = list(training.items())
    return failures, trained, spans


def _finished(ref) -> Any:
    """A finished training or query task's result (a model's metadata, a query's span); None
    when it failed (its cells say why); DiskFull when it found no space for what it made,
    LinkInStore when it met a symbolic link where it writes (`stopping_error`)."""
    import ray

    try:
        return ray.get(ref)
    except Exception as error:  # noqa: BLE001 - whatever it raised, its cells report it
        stop = stopping_error(error)
        if stop is not None:
            raise stop from None
        return None


#: How often the driver hands freed heap back to the OS while cells land.
TRIM_SECONDS = 10.0
#: How often the landing loop wakes, with nothing landed, to raise a signal a `__del__` swallowed.
CHECK_SECONDS = 1.0


def release_freed_memory() -> None:
    """Return the heap glibc keeps after frees to the OS.  Without it a long sweep's driver grows
    ~60-80 MB per 1000 cells of memory it no longer uses (measured by `python -m bench.load`);
    a no-op off glibc."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _land(ref, cells: list[Cell], upstream: list[tuple[Any, str]], listeners: Listeners,
          train_retries: int, attack_retries: int,
          spans: Optional[list[tuple[float, float]]] = None) -> list[tuple[str, str]]:
    """Tell the listeners of one finished attack's cells: each row that landed, in order until
    one cannot keep it (`NotLanded`), or the cells' failure; its span joins `spans` (it ended
    now, `attack_seconds` after it started).  The cells that failed, with their reasons."""
    import ray

    try:
        rows = ray.get(ref)
    except Exception as error:  # noqa: BLE001 - one failed cell must not stop the sweep
        failure, culprit = _first_failure(error, f"attack {cell_label(cells[0])}", upstream,
                                          train_retries, attack_retries)
        stop = stopping_error(culprit)
        if stop is not None:  # before a failure record, which would not fit (or land) either
            raise stop from None
        reason = f"{failure.task}: {failure.reason}" if failure.task else failure.reason
        for cell in cells:
            listeners.on_cell_failed(cell, failure)
        return [(cell_label(cell), reason) for cell in cells]
    if spans is not None and rows and "attack_seconds" in rows[0]:
        now = time.time()
        spans.append((now - float(rows[0]["attack_seconds"]), now))
    failed = []
    for row, cell in zip(rows, cells):
        try:
            listeners.on_cell_landed(cell, row)
        except NotLanded as lost:  # this row, not the others: they still land
            failed.append((cell_label(cell), lost.failure.reason))
    return failed


def _first_failure(error: Exception, attack: str, upstream: list[tuple[Any, str]],
                   train_retries: int, attack_retries: int) -> tuple[Failure, Exception]:
    """Why an attack failed: the training or query task it waited on that failed (with that
    task's retry bound), else the attack itself; with the culprit's error."""
    import ray

    for dependency, name in upstream:
        try:
            ray.get(dependency)
        except Exception as cause:  # noqa: BLE001 - the culprit, whatever it raised
            return classify(cause, train_retries, task=name), cause
    return classify(error, attack_retries, task=attack), error
