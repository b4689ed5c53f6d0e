"""Run a sweep: validate, plan, schedule the missing work on Ray, land rows as they finish.

Everything that can be refused is refused before Ray starts (config, dataset files).  Work that
is already in the store is not scheduled again, so a rerun of a finished sweep trains nothing,
and a killed sweep resumes where it stopped.  Results are streamed with `ray.wait`: each cell's
row is written (atomically) and logged to MLflow the moment its attack finishes.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional

import pandas as pd
from omegaconf import OmegaConf
from tqdm.auto import tqdm

from jobs.data import load_dataset, require_dataset, synthetic_dataset
from sweeper.config import ConfigError, SweepConfig, validate
from sweeper.frontier import load_frontier, plot_frontier
from sweeper.plan import AttackSpec, Cell, ModelSpec, QuerySpec, SweepPlan, build_plan
from sweeper.reports import draw
from sweeper.scale import scaled
from sweeper.store import ArtifactStore, atomic_write_bytes
from sweeper.tasks import attack_task, query_task, train_task
from sweeper.tracking import default_tracking_uri, open_tracker


@dataclass
class SweepResult:
    name: str
    results: pd.DataFrame
    sweep_dir: Path
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


@contextlib.contextmanager
def ray_session(cfg: SweepConfig) -> Iterator[Optional[str]]:
    """Join a running Ray (tests, `cluster.address`) or start a local one bound to loopback."""
    import ray

    if ray.is_initialized():
        yield None
        return
    context = ray.init(
        address=cfg.cluster.address,
        num_cpus=cfg.cluster.num_cpus if cfg.cluster.address is None else None,
        include_dashboard=cfg.cluster.include_dashboard,
        dashboard_host=cfg.cluster.dashboard_host,
        dashboard_port=cfg.cluster.dashboard_port,
        logging_level=logging.WARNING,
    )
    try:
        url = context.dashboard_url
        yield f"http://{url}" if url else None
    finally:
        ray.shutdown()


def flat_params(cfg: SweepConfig) -> dict[str, Any]:
    flat: dict[str, Any] = {}

    def walk(prefix: str, node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(f"{prefix}.{key}" if prefix else str(key), value)
        else:
            flat[prefix] = node

    walk("", OmegaConf.to_container(OmegaConf.structured(cfg)))
    return flat


def cell_label(cell: Cell) -> str:
    return f"{cell.attack} ε={cell.epsilon:g} δ={cell.delta:g} p={cell.p:g} trial={cell.trial}"


def run_sweep(cfg: SweepConfig, progress: bool = True, echo=print) -> SweepResult:
    started = time.perf_counter()
    cfg = scaled(cfg)
    validate(cfg)
    data_dir = Path(cfg.dataset.data_dir).expanduser()
    if not cfg.dataset.synthetic:
        require_dataset(cfg.dataset.name, data_dir, cfg.dataset.download)

    plan = build_plan(cfg)
    store = ArtifactStore(cfg.store.root)
    todo_models = [spec for key, spec in plan.models.items() if not store.has_model(key)]
    todo_cells = [cell for cell in plan.cells if not store.has_cell(cfg.name, cell.key)]
    echo(f"sweep '{cfg.name}': {len(plan.cells)} cells, {len(plan.models)} models "
         f"({len(todo_models)} to train, {len(plan.models) - len(todo_models)} already in the store), "
         f"{len(todo_cells)} cells to compute")
    # The data can still refuse the plan (too few records): load it before anything is written.
    data = sweep_data(plan, data_dir) if todo_cells else None
    store.write_manifest(cfg.name, {
        "name": cfg.name, "sweep_key": plan.key, "cells": [c.key for c in plan.cells],
        "config": OmegaConf.to_container(OmegaConf.structured(cfg)),
    })

    tracking_uri = cfg.tracking.uri or default_tracking_uri(store.root)
    tracker = open_tracker(tracking_uri, cfg.tracking.experiment, cfg.name, plan.key,
                           flat_params(cfg), store.root / "mlartifacts")
    failures: list[tuple[str, str]] = []
    dashboard_url = None
    if todo_cells:
        with ray_session(cfg) as dashboard_url:
            if dashboard_url:
                echo(f"Ray dashboard: {dashboard_url}  (token: `ray get-auth-token`)")
            failures = _execute(plan, todo_models, todo_cells, data, store, tracker, progress)

    results = load_frontier(run_dir=store.sweep_dir(cfg.name))
    plot_path = csv_path = None
    report_paths: list[Path] = []
    if not results.empty:
        plot_path = plot_frontier(results, store.sweep_dir(cfg.name) / "frontier.png", title=cfg.name)
        csv_path = store.sweep_dir(cfg.name) / "frontier.csv"
        atomic_write_bytes(csv_path, results.to_csv(index=False).encode())
        report_paths = draw(cfg.report, results, store.sweep_dir(cfg.name) / "report", store.root, echo)
    if tracker is not None:
        for row in results.to_dict("records"):  # cells computed while tracking was down, too
            tracker.log_cell(row)
        for path in (plot_path, csv_path, *report_paths):
            if path is not None:
                tracker.log_artifact(path)
        tracker.finish(failed=bool(failures))
    return SweepResult(
        name=cfg.name, results=results, sweep_dir=store.sweep_dir(cfg.name),
        tracking_uri=tracking_uri, models_total=len(plan.models), models_trained=len(todo_models),
        cells_total=len(plan.cells), cells_computed=len(todo_cells) - len(failures),
        seconds=time.perf_counter() - started, dashboard_url=dashboard_url, failures=failures,
        plot_path=plot_path, csv_path=csv_path, report_paths=report_paths,
    )


def sweep_data(plan: SweepPlan, data_dir: Path):
    """The pool and test split the sweep trains on: the real dataset, or synthetic data of its shape.

    Refuses (before Ray starts) a plan whose models need more pool records than the data holds.
    """
    cfg, data = plan.config, plan.config.dataset
    sizes = [spec.data.pool_size for spec in plan.models.values()]
    needed = None if None in sizes or not sizes else max(sizes)
    if data.synthetic:  # the plan gives synthetic models a pool size
        return synthetic_dataset(data.name, data.input_shape, data.num_classes, needed,
                                 data.test_size, seed=cfg.seed)
    loaded = load_dataset(data.name, data_dir, data.download, data.test_size)
    if needed is not None and needed > len(loaded.pool_y):
        raise ConfigError([f"dataset {data.name!r} has {len(loaded.pool_y)} pool records, but the "
                           f"grid needs {needed} (dataset.pool_size / dataset.members ÷ the smallest p)"])
    return loaded.first_records(needed)



def _execute(plan: SweepPlan, todo_models, todo_cells: list[Cell], data, store: ArtifactStore,
             tracker, progress: bool) -> list[tuple[str, str]]:
    import ray

    cfg = plan.config
    train_res, attack_res = cfg.resources.train, cfg.resources.attack
    # Ray 2.60's `.options()` cannot be chained, so each task gets all of its options at once.
    train_remote, attack_remote = ray.remote(train_task), ray.remote(_attack_after_training)
    train_options = dict(num_cpus=train_res.num_cpus, num_gpus=train_res.num_gpus,
                         max_retries=train_res.max_retries, retry_exceptions=False)
    attack_options = dict(num_cpus=attack_res.num_cpus, num_gpus=attack_res.num_gpus,
                          max_retries=attack_res.max_retries)

    if train_res.num_gpus > 0 and ray.cluster_resources().get("GPU", 0) == 0:
        raise ConfigError([f"resources.train.num_gpus={train_res.num_gpus}: the Ray cluster has "
                           "no GPU, so no training task could ever start; set it to 0"])
    data_ref = ray.put(data)
    labels_ref = ray.put(data.pool_y)
    root = str(store.root)
    threads = max(1, int(train_res.num_cpus))
    training = {
        spec.key: train_remote.options(name=spec.label, **train_options).remote(
            spec, data_ref, root, cfg.train.device, threads)
        for spec in todo_models
    }
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
    scoring = {}
    for scores_key, cells in cells_by_scores.items():
        spec: AttackSpec = cells[0].scores
        needed = [training[k] for k in (spec.target, *spec.shadows) if k in training]
        needed += [querying[k] for k in spec.queries if k in querying]
        ref = attack_remote.options(name=f"attack {cell_label(cells[0])}", **attack_options).remote(
            spec, cells, labels_ref, root, *needed)
        scoring[ref] = cells

    failures: list[tuple[str, str]] = []
    model_refs = {ref: key for key, ref in training.items()}
    pending = list(model_refs) + list(scoring)
    with tqdm(total=len(model_refs), desc="models trained", unit="model", disable=not progress) as models_bar, \
         tqdm(total=len(todo_cells), desc="cells computed", unit="cell", disable=not progress) as cells_bar:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            ref = done[0]
            if ref in model_refs:
                with contextlib.suppress(Exception):  # its failure surfaces in its cells
                    ray.get(ref)
                models_bar.update(1)
                continue
            cells = scoring[ref]
            try:
                rows = ray.get(ref)
            except Exception as error:  # noqa: BLE001 - one failed cell must not stop the sweep
                reason = str(error).strip().splitlines()[-1] if str(error).strip() else repr(error)
                failures += [(cell_label(cell), reason) for cell in cells]
                cells_bar.update(len(cells))
                continue
            for row in rows:
                store.write_cell(cfg.name, row["cell_key"], row)
                if tracker is not None:
                    tracker.log_cell(row)
            cells_bar.update(len(rows))
    return failures


def _query_after_training(spec: QuerySpec, model: ModelSpec, data, store_root: str, device: str,
                          threads: int, *_trained: Any) -> None:
    """`query_task`, taking the training result it waits for as an ignored argument."""
    query_task(spec, model, data, store_root, device, threads)


def _attack_after_training(spec: AttackSpec, cells: list[Cell], labels, store_root: str,
                           *_trained: Any) -> list[dict[str, Any]]:
    """`attack_task`, taking the training results it waits for as ignored arguments."""
    return attack_task(spec, cells, labels, store_root)
