"""The bodies of the sweep's remote tasks: read inputs from the store, do the work, write back.

They are plain functions so tests can call them without Ray; `sweeper.runner` wraps them as
Ray tasks.  What a results row says is computed in `sweeper.grid.cells`: here only store → compute
→ store.  Only the driver writes results rows and MLflow runs; tasks write content-keyed
artifacts, which are safe to write twice.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from typing import Any, Optional

import numpy as np
import pandas as pd
import torch

from jobs.attacks.contract import (ATTACKS, GRADIENT_CANARIES, INPUT_CANARIES, RECORDS,
                                   TRAINING_RUNS, AttackInputs, holdout_scores)
from jobs.attacks.pdtp import pdtp_table
from jobs.attacks.queries import PDTP_QUERY, QUERIES, answer
from jobs.audits.blackbox import final_model_runs
from jobs.audits.mechanisms import (Mechanism, MembershipRelease, describe, mechanism_for,
                                    release_membership)
from jobs.datasets import ArrayDataset
from jobs.engine.canaries import CanarySet, canary_set
from jobs.engine.host_memory import keep_freed_memory
from jobs.engine.stacked import Member, train_models
from jobs.engine.training import TrainedModel, TrainOptions, draw_mask, resolve_device, train_model
from jobs.metrics import operating_point
from jobs.models import MEMBERSHIP_MECHANISM, build_model
from jobs.policies import POLICIES, CalibrationSettings, apply_policy, calibrated_thresholds
from sweeper.grid.cells import cell_row, pdtp_row
from sweeper.grid.plan import AttackSpec, Cell, ModelSpec, QuerySpec
from sweeper.store.artifacts import ArtifactStore


def _set_up_process(num_threads: int) -> None:
    """This task's torch CPU threads, and its process keeping freed memory for the next step's
    tensors (`jobs.engine.host_memory`)."""
    torch.set_num_threads(max(1, num_threads))
    keep_freed_memory()


def train_task(spec: ModelSpec, data: ArrayDataset, store_root: str, device: str,
               num_threads: int, options: TrainOptions = TrainOptions()) -> dict[str, Any]:
    """Train the model `spec` describes (resuming from its checkpoint) and store it.

    `data` is the sweep's whole pool; the model draws from its own part (`DataSpec.pool_of`).
    """
    _set_up_process(num_threads)
    started = time.time()
    store = ArtifactStore(store_root).require_here()
    key = spec.key
    if store.has_model(key):  # a retry after the artifact landed, or a concurrent duplicate
        return store.read_model_meta(key)
    canaries = model_canaries(spec, data)
    full, data = data, spec.data.pool_of(data)
    mask = draw_mask(len(data.pool_y), spec.sample_rate, spec.mask_seed, spec.mask_complement)
    if spec.train.model == MEMBERSHIP_MECHANISM:
        mechanism = mechanism_for(spec.train.epsilon, spec.train.delta or 0.0)
        release = release_membership(mechanism, spec.train.epsilon, mask, seed=int(key[:8], 16))
        return _store_release(store, spec, mechanism, release, mask)
    where = resolve_device(device)
    trained = train_model(spec.train, data, mask, seed=int(key[:8], 16),
                          device=where, checkpoint=store.checkpoint(key),
                          noise_cache=store.noise_cache(), canaries=canaries,
                          options=options.on(where), public_size=spec.public_size)
    return _store_trained(store, spec, with_final_runs(spec, data, full, trained, mask, where,
                                                       store), mask, where, started)


def with_final_runs(spec: ModelSpec, pool: ArrayDataset, data: ArrayDataset,
                    trained: TrainedModel, mask: np.ndarray, device,
                    store: ArtifactStore) -> TrainedModel:
    """`trained` with the black-box audit's runs beside its canaries (`jobs.audits.blackbox`) when its
    design asks for them: on its own records `mask` of its `pool`, the crafted weights
    pre-trained on public records of the sweep's `data`."""
    design = spec.canaries
    if design is None or not design.final_runs:
        return trained
    trained.canary_outputs.update(final_model_runs(
        spec.train, pool, data.pool_x, data.pool_y, mask, design, spec.sample_rate,
        spec.mask_seed, int(spec.key[:8], 16), device, store.noise_cache(), spec.public_size))
    return trained


def model_canaries(spec: ModelSpec, data: ArrayDataset) -> Optional[CanarySet]:
    """The canaries the model `spec` holds (None: none), from the sweep's whole `data`: every
    model of the sweep gets the same canaries, each with its own inclusion masks."""
    if spec.canaries is None:
        return None
    model = build_model(spec.train.model, data.input_shape, data.num_classes)
    return canary_set(spec.canaries, data.pool_x, data.pool_y, data.test_x, data.num_classes,
                      model, spec.sample_rate, spec.mask_seed, spec.mask_complement)


def train_group_task(specs: list[ModelSpec], data: ArrayDataset, store_root: str, device: str,
                     num_threads: int, options: TrainOptions = TrainOptions()
                     ) -> tuple[dict[str, Any], ...]:
    """Train several models of one group (`sweeper.grid.plan.training_groups`: one architecture,
    recipe and pool) in this one task (`jobs.engine.stacked.train_models`), storing each the moment
    it is done; returns each model's metadata, in the order of `specs`.

    Models already in the store are not trained again; the others each resume from their own
    checkpoint, so a retried group costs at most one epoch of each model.
    """
    _set_up_process(num_threads)
    started = time.time()
    store = ArtifactStore(store_root).require_here()
    metas: dict[int, dict[str, Any]] = {index: store.read_model_meta(spec.key)
                                        for index, spec in enumerate(specs)
                                        if store.has_model(spec.key)}
    todo = [index for index in range(len(specs)) if index not in metas]
    if todo:
        first = specs[todo[0]]
        pool = first.data.pool_of(data)  # one group, one pool
        masks = {index: draw_mask(len(pool.pool_y), specs[index].sample_rate,
                                  specs[index].mask_seed, specs[index].mask_complement)
                 for index in todo}
        members = [Member(masks[index], int(specs[index].key[:8], 16),
                          store.checkpoint(specs[index].key), model_canaries(specs[index], data),
                          specs[index].public_size)
                   for index in todo]
        where = resolve_device(device)
        for position, trained in train_models(first.train, pool, members, where,
                                              store.noise_cache(), options.on(where)):
            index = todo[position]
            trained = with_final_runs(specs[index], pool, data, trained, masks[index], where, store)
            metas[index] = _store_trained(store, specs[index], trained, masks[index], where,
                                          started)
    return tuple(metas[index] for index in range(len(specs)))


def _model_meta(spec: ModelSpec, **figures: Any) -> dict[str, Any]:
    """The metadata stored with a model (or a release): who it is, what it reports, its budget,
    the GPUs its task was given (Ray's CUDA_VISIBLE_DEVICES; None without one) and the Ray node
    that trained it (`training_node`)."""
    return {"key": spec.key, "role": spec.role, "label": spec.label, "sample_rate": spec.sample_rate,
            **figures, "epsilon": spec.train.epsilon, "delta": spec.train.delta,
            "optimizer": spec.train.optimizer, "momentum": spec.train.momentum,
            "public_size": spec.public_size,
            "visible_gpus": os.environ.get("CUDA_VISIBLE_DEVICES"), **training_node()}


def training_node() -> dict[str, Optional[str]]:
    """The Ray node this task runs on, by id and address (None for both outside a Ray task):
    on a cluster, which machine trained a model, for its logs and its device."""
    import ray

    if not ray.is_initialized():
        return {"node_id": None, "node_ip": None}
    context = ray.get_runtime_context()
    return {"node_id": context.get_node_id(), "node_ip": ray.util.get_node_ip_address()}


def device_description(device: torch.device) -> str:
    """The device a model trained on, as its metadata says it: "cpu", or "cuda:0 (NVIDIA …)"."""
    if device.type != "cuda":
        return str(device)
    index = device.index if device.index is not None else torch.cuda.current_device()
    return f"cuda:{index} ({torch.cuda.get_device_name(index)})"


def _store_trained(store: ArtifactStore, spec: ModelSpec, trained: TrainedModel,
                   mask: np.ndarray, device: torch.device, started: float) -> dict[str, Any]:
    """Write one trained model with its metadata (with the device it trained on and its task's
    span in wall-clock seconds: `sweeper.task_times`); return the metadata."""
    meta = _model_meta(
        spec, test_accuracy=trained.test_accuracy, train_accuracy=trained.train_accuracy,
        best_test_accuracy=trained.best_test_accuracy,
        noise_multiplier=trained.noise_multiplier, steps=trained.steps,
        epsilon_spent=trained.epsilon_spent, train_size=trained.train_size,
        resumed_from=list(trained.resumed_from), dp_sample_rate=trained.sample_rate,
        train_seconds=trained.train_seconds, device=device_description(device),
        started_at=started, ended_at=time.time())
    store.write_model(spec.key, trained.state_dict, trained.pool_logits, mask, meta,
                      trained.canary_outputs)
    return meta


def _store_release(store: ArtifactStore, spec: ModelSpec, mechanism: Mechanism,
                   release: MembershipRelease, mask: np.ndarray) -> dict[str, Any]:
    """Write an exact mechanism's release where a model would go, so the attack tasks and the
    results rows read it like a network's outputs; return the metadata.

    It has no weights (an empty state dict), no test set (NaN accuracies) and took no steps; the
    description of the mechanism goes with it, for the closed forms (`exact_figures`).
    """
    meta = _model_meta(
        spec, mechanism=describe(mechanism), test_accuracy=math.nan, train_accuracy=math.nan,
        best_test_accuracy=math.nan, noise_multiplier=release.noise_multiplier, steps=0,
        epsilon_spent=release.epsilon, train_size=release.members, resumed_from=[])
    store.write_model(spec.key, {}, release.pool_logits, mask, meta)
    return meta


def query_task(spec: QuerySpec, model_spec: ModelSpec, data: ArrayDataset, store_root: str,
               device: str, num_threads: int) -> tuple[float, float]:
    """Store a model's answer to one query: loaded from its weights, or (PDTP) retrained.
    Returns its span in wall-clock seconds (`sweeper.task_times`)."""
    started = time.time()
    _set_up_process(num_threads)
    store = ArtifactStore(store_root).require_here()
    if store.has_query(spec.key):
        return started, time.time()
    settings, n = dict(spec.settings), spec.eval_records
    data = model_spec.data.pool_of(data)
    if spec.kind == PDTP_QUERY:
        _, mask = store.read_model_outputs(spec.model)
        values = pdtp_table(model_spec.train, data, mask, settings["records"], settings["seeds"],
                            resolve_device(device), model_spec.public_size)
    else:
        model = build_model(model_spec.train.model, data.input_shape, data.num_classes)
        model.load_state_dict(store.read_state_dict(spec.model))
        x, y = data.pool_x[:n], data.pool_y[:n]
        if QUERIES[spec.kind].held_out:  # then the held-out records no model trained on
            held_out = settings["held_out"]
            x = np.concatenate([x, data.test_x[:held_out]])
            y = np.concatenate([y, data.test_y[:held_out]])
        values = answer(spec.kind, settings, model, x, y, resolve_device(device))
    store.write_query(spec.key, values)
    return started, time.time()


def attack_task(spec: AttackSpec, cells: list[Cell], labels: np.ndarray, store_root: str,
                held_out_labels: Optional[np.ndarray] = None) -> list[dict[str, Any]]:
    """Score one attack on one target, store per-record scores, and return its cells' rows,
    each with the task's wall seconds (`attack_seconds`, shared by its cells).  `labels` are
    the pool's, `held_out_labels` the held-out split's (read by a held-out query's attack)."""
    started = time.perf_counter()
    rows = _attack_rows(spec, cells, labels, held_out_labels,
                       ArtifactStore(store_root).require_here())
    seconds = time.perf_counter() - started
    return [{**row, "attack_seconds": seconds} for row in rows]


def _attack_rows(spec: AttackSpec, cells: list[Cell], labels: np.ndarray,
                 held_out_labels: Optional[np.ndarray], store: ArtifactStore) -> list[dict[str, Any]]:
    """The scores, stored, and the rows of the attack's cells (`sweeper.grid.cells`)."""
    attack = ATTACKS[spec.attack]
    settings = attack.settings_of(spec.settings)  # all it may read: its own settings, from its key
    answers = [store.read_query(key) for key in spec.queries]
    if attack.evaluates == RECORDS:
        inputs, members = _record_inputs(store, spec, labels, answers)
        question = attack.query(settings)
        if question is not None and QUERIES[question[0]].held_out:
            inputs = with_held_out_population(inputs, answers, held_out_labels)
    else:
        inputs, members = _canary_inputs(store, spec, attack.evaluates)
    labels, n = inputs.labels, len(members)
    scores = attack.score(inputs, settings)
    store.write_scores(spec.key, pd.DataFrame({
        "record_id": np.arange(n), "score": scores, "member": members,
        "model_key": spec.target, "attack": spec.attack,
    }))
    target_meta = store.read_model_meta(spec.target)
    if attack.measures_records:  # PDTP has no threshold, so no policy applies
        return [pdtp_row(cell, answers[0], target_meta) for cell in cells]
    holdout = (holdout_scores(attack, inputs, settings) if not attack.decides
               and any(POLICIES[cell.policy].calibrates for cell in cells) else None)
    rows = []
    for cell in cells:
        if attack.decides:  # decisions, not scores: no policy picks a threshold over them
            rows.append(cell_row(cell, operating_point(scores, members, 1.0), scores, members,
                                 target_meta))
            continue
        thresholds = None
        if POLICIES[cell.policy].calibrates:  # chosen on the shadows: the target's mask is not passed
            if holdout is None or inputs.shadow_members is None:
                raise ValueError(f"policy {cell.policy!r} calibrates on shadow models; attack "
                                 f"{cell.attack!r} has none")
            thresholds = calibrated_thresholds(holdout, inputs.shadow_members, inputs.holdout_labels,
                                               cell.p, max(1, inputs.target_logits.shape[1]),
                                               CalibrationSettings(**dict(cell.calibration)))
        point = apply_policy(cell.policy, scores, members, labels, thresholds)
        rows.append(cell_row(cell, point, scores, members, target_meta))
    return rows


def _record_inputs(store: ArtifactStore, spec: AttackSpec, labels: np.ndarray,
                   answers: list[np.ndarray]) -> tuple[AttackInputs, np.ndarray]:
    """The first `eval_records` pool records, as the target and its shadows saw them, and
    which of them the target holds (never shown to the attack)."""
    n, start = spec.eval_records, spec.shadow_records_from
    shadow_labels = labels[start:start + n] if start else None  # disjoint shadows' own records
    target_logits, target_mask = store.read_model_outputs(spec.target)
    shadow_logits = shadow_members = None
    if spec.shadows:
        outputs = [store.read_model_outputs(key) for key in spec.shadows]
        shadow_logits = np.stack([logits[:n] for logits, _ in outputs])
        shadow_members = np.stack([mask[:n] for _, mask in outputs])
    return AttackInputs(target_logits[:n], labels[:n], shadow_logits, shadow_members,
                        target_query=answers[0] if answers else None,
                        shadow_query=np.stack(answers[1:]) if len(answers) > 1 else None,
                        shadow_labels=shadow_labels), target_mask[:n]


def _canary_inputs(store: ArtifactStore, spec: AttackSpec,
                   evaluates: str) -> tuple[AttackInputs, np.ndarray]:
    """The target's canaries of one kind, and the shadows' (which hold the same canaries by
    their own masks): the input canaries' logits and labels, or the gradient canaries'
    white-box statistics."""
    models = [store.read_canaries(key) for key in (spec.target, *spec.shadows)]
    if evaluates == TRAINING_RUNS:  # the target's own runs: one observation each
        outputs = models[0]
        return (AttackInputs(outputs["final_run_logits"], outputs["final_run_labels"]),
                outputs["final_run_included"])
    kind = "input" if evaluates == INPUT_CANARIES else "gradient"
    included = np.stack([outputs[f"{kind}_included"] for outputs in models])
    shadow_members = included[1:] if spec.shadows else None
    if evaluates == GRADIENT_CANARIES:
        observations = np.stack([outputs["gradient_statistics"] for outputs in models])
        count = len(included[0])
        return AttackInputs(np.zeros((count, 0)), np.zeros(count, np.int64), None, shadow_members,
                            observations=observations[0],
                            shadow_observations=observations[1:] if spec.shadows else None
                            ), included[0]
    logits = np.stack([outputs["input_logits"] for outputs in models])
    return AttackInputs(logits[0], models[0]["input_labels"], logits[1:] if spec.shadows else None,
                        shadow_members), included[0]


def with_held_out_population(inputs: AttackInputs, answers: list[np.ndarray],
                             held_out_labels: Optional[np.ndarray]) -> AttackInputs:
    """A held-out query's inputs (RMIA's, QMIA's): each model's answer, (views, n + m, classes), is
    split into the evaluation records' views (the query fields) and the population z, the m
    held-out records no model trained on (the population fields, with their labels)."""
    if held_out_labels is None:
        raise ValueError("a held-out query's attack needs the held-out split's labels")
    n = len(inputs.labels)
    target = answers[0]
    shadows = np.stack(answers[1:]) if len(answers) > 1 else None  # none: a shadow-free attack
    return dataclasses.replace(
        inputs, target_query=target[:, :n], shadow_query=None if shadows is None else shadows[:, :, :n],
        population_logits=target[:, n:], population_labels=held_out_labels[:target.shape[1] - n],
        shadow_population_logits=None if shadows is None else shadows[:, :, n:],
        shadow_population_members=None)

