"""Submit a sweep's missing work to Ray: training groups, model queries and attacks, each with
its resources and the tasks it waits on.

Each kind of task waits for what it reads by taking the upstream tasks' result references as
arguments it ignores (`_query_after_training`, `_attack_after_training`): Ray starts it once
they are done, and a failed upstream task fails it, so `sweeper.runner` can name the culprit.

    submit_training   one task per group of up to K models (`training_groups`), longest first
    submit_queries    one task per model query the cells ask that the store lacks
    submit_attacks    one task per attack spec, its cells scored together (`Submitted`)
    task_options      a role's Ray options: resources, retries of transient failures only
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Container

from sweeper.config import ConfigError, SweepConfig
from sweeper.config.schema import TaskResources
from sweeper.failures import Retryable, cell_label
from sweeper.grid.plan import (AttackSpec, Cell, ModelSpec, QuerySpec, SweepPlan, group_label,
                          group_resources, models_per_task, train_options_of, training_groups)
from sweeper.store.artifacts import ArtifactStore
from sweeper.cluster.tasks import attack_task, query_task, train_group_task, train_task


@dataclass
class Submitted:
    """One attack task: the cells it scores, and the training and query tasks it waited on,
    each with its name, for the failure a cell reports."""

    cells: list[Cell]
    upstream: list[tuple[Any, str]]


def task_options(resources: TaskResources) -> dict[str, Any]:
    """A role's Ray options, given at once (Ray 2.60's `.options()` cannot be chained): its CPUs
    and GPUs, and retries of a lost worker or node or of memory another task held (Ray's
    `max_retries`); an exception of the task's own (bad data, a bug) would fail again, and so
    would a write to a full disk, so neither is retried (`Retryable`)."""
    return dict(num_cpus=resources.num_cpus, num_gpus=resources.num_gpus,
                max_retries=resources.max_retries, retry_exceptions=[Retryable])


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
    k = functools.cache(lambda model: models_per_task(cfg, model))  # by architecture (grid.model)
    for group in training_groups(longest_first(todo_models), k):
        options = {**train_options,
                   "num_cpus": group_resources(train_options["num_cpus"], len(group),
                                               largest.get("CPU", 0.0)),
                   "num_gpus": group_resources(train_options["num_gpus"], len(group),
                                               largest.get("GPU", 0.0))}
        args = (data_ref, root, cfg.train.device, max(1, int(options["num_cpus"])), train_options_of(cfg))
        if len(group) == 1:
            training[group[0].key] = single.options(name=group_label(group), **options).remote(
                group[0], *args)
            continue
        refs = grouped.options(name=group_label(group), num_returns=len(group),
                               **options).remote(group, *args)
        training.update({spec.key: ref for spec, ref in zip(group, refs)})
    return training


def check_cluster_resources(cfg: SweepConfig) -> None:
    """Refuse (before anything is written or submitted) CPU and GPU requests that no node of the
    cluster can meet: Ray would queue such a task for ever ("No available node types can fulfill
    resource request").  A group of K models is capped at the largest node (`group_resources`),
    so each role's own request is what must fit."""
    largest = largest_node()
    problems = []
    for role in ("train", "attack"):
        res = getattr(cfg.resources, role)
        for field_name, kind in (("num_cpus", "CPU"), ("num_gpus", "GPU")):
            wanted = getattr(res, field_name)
            has = largest.get(kind, 0.0)
            if wanted > has:
                problems.append(
                    f"resources.{role}.{field_name}={wanted:g}: the Ray cluster's largest node has "
                    f"{has:g} {kind}s, so no {role} task could ever start; ask for at most {has:g}"
                    + (" (0: no GPU)" if kind == "GPU" else "")
                    + ", or add larger nodes")
    if problems:
        raise ConfigError(problems)

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


def submit_queries(plan: SweepPlan, todo_cells: list[Cell], store: ArtifactStore,
                   training: dict[str, Any], data_ref, train_options: dict[str, Any],
                   submitted: Container[str] = ()) -> dict[str, Any]:
    """One task per model query the cells ask that the store does not hold (augmented logits,
    Merlin) and that is not among `submitted` (a sequential sweep's earlier rounds), after its
    model's training when that is submitted too; by query key.  A query loads a trained model
    again, so it asks for a trainer's resources."""
    import ray

    cfg = plan.config
    query_remote = ray.remote(_query_after_training)
    asked = {key for cell in todo_cells for key in cell.scores.queries
             if key not in submitted and not store.has_query(key)}
    threads = max(1, int(train_options["num_cpus"]))
    querying = {}
    for key in sorted(asked):
        query = plan.queries[key]
        model = plan.models[query.model]
        querying[key] = query_remote.options(name=f"query {query.kind} {model.description}",
                                             **train_options).remote(
            query, model, data_ref, store.uri, cfg.train.device, threads,
            *([training[query.model]] if query.model in training else []))
    return querying


def submit_attacks(plan: SweepPlan, todo_cells: list[Cell], training: dict[str, Any],
                   querying: dict[str, Any], data, root: str,
                   attack_options: dict[str, Any]) -> dict[Any, Submitted]:
    """One task per attack spec, scoring together the cells that share it, after the training
    and query tasks it reads; by the task's result reference."""
    import ray

    attack_remote = ray.remote(_attack_after_training)
    labels_ref, held_out_labels_ref = ray.put(data.pool_y), ray.put(data.test_y)
    cells_by_scores: dict[str, list[Cell]] = defaultdict(list)
    for cell in todo_cells:
        cells_by_scores[cell.scores.key].append(cell)
    scoring: dict[Any, Submitted] = {}
    for cells in cells_by_scores.values():
        spec: AttackSpec = cells[0].scores
        trained = [(training[k], plan.models[k].label) for k in (spec.target, *spec.shadows)
                   if k in training]
        queried = [(querying[k], f"query {plan.queries[k].kind}") for k in spec.queries
                   if k in querying]
        ref = attack_remote.options(name=f"attack {cell_label(cells[0])}", **attack_options).remote(
            spec, cells, labels_ref, held_out_labels_ref, root,
            *(upstream for upstream, _ in trained + queried))
        scoring[ref] = Submitted(cells, trained + queried)
    return scoring


def _query_after_training(spec: QuerySpec, model: ModelSpec, data, store_root: str, device: str,
                          threads: int, *_trained: Any) -> tuple[float, float]:
    """`query_task`, taking the training result it waits for as an ignored argument."""
    return query_task(spec, model, data, store_root, device, threads)


def _attack_after_training(spec: AttackSpec, cells: list[Cell], labels, held_out_labels,
                           store_root: str, *_trained: Any) -> list[dict[str, Any]]:
    """`attack_task`, taking the training results it waits for as ignored arguments."""
    return attack_task(spec, cells, labels, store_root, held_out_labels)
