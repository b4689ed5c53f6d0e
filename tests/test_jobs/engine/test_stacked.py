"""K models per task (`jobs.engine.stacked`): each model of a group is the model trained alone, the
stacked clipped sums are Opacus's, a killed group resumes each model from its own checkpoint,
and the planner groups only models that share every training setting."""

from __future__ import annotations

import copy
import dataclasses
import math
import time

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

import jobs.engine.steps as steps
import jobs.engine.training as training
import sweeper.cluster.tasks as tasks
from jobs.datasets import load_dataset
from jobs.engine.clipping import clipped_sums
from jobs.engine.linear_stack import is_linear_stack
from jobs.engine.stacked import Member, _Stack, train_models
from jobs.engine.training import TrainSettings, draw_mask, start_run, train_model
from jobs.models import build_model
from sweeper.config import ConfigError, SweepConfig
from sweeper.checks.validation import validate
from sweeper.grid.plan import DataSpec, ModelSpec, build_plan, group_resources, training_groups
from sweeper.store.columns import COST_COLUMNS
from sweeper.store.artifacts import ArtifactStore
from testkit.opacus_reference import opacus_clipped_sum

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    data = load_dataset("mnist_subset", tmp_path_factory.mktemp("data"), False, test_size=100)
    return data.first_records(240)


def recipe(model: str = "tanh_mlp64", epsilon: float = 2.0, optimizer: str = "sgd",
           epochs: int = 2) -> TrainSettings:
    return TrainSettings(model=model, epochs=epochs, batch_size=40, lr=0.1, momentum=0.9,
                         max_grad_norm=1.0, accountant="rdp", epsilon=epsilon,
                         delta=1e-5 if math.isfinite(epsilon) else None, optimizer=optimizer)


def masks(data, rates=(0.3, 0.5, 0.8)):
    """Training sets of different sizes, so the models take different steps per epoch."""
    return [draw_mask(len(data.pool_y), rate, seed=10 + i, complement=False)
            for i, rate in enumerate(rates)]


@pytest.mark.parametrize("model, epsilon, optimizer", [
    ("tanh_mlp64", 2.0, "sgd"),            # stacked, DP-SGD with momentum
    ("relu_mlp256x2", 2.0, "adam"),        # stacked, DP-Adam
    ("relu_mlp256x2", math.inf, "sgd"),    # stacked, non-private (shuffled batches, mean loss)
    ("mnist_cnn", 2.0, "sgd"),             # interleaved
])
def test_each_model_of_a_group_is_the_model_trained_alone(digits, model, epsilon, optimizer):
    settings = recipe(model, epsilon, optimizer, epochs=2 if model != "mnist_cnn" else 1)
    group_masks = masks(digits)
    seeds = [101, 202, 303]
    started = time.perf_counter()
    grouped = dict(train_models(settings, digits, [Member(m, s) for m, s in zip(group_masks, seeds)],
                                CPU))
    wall = time.perf_counter() - started
    assert sorted(grouped) == [0, 1, 2]
    # Each model's seconds are its share of the group's: stacked, they ran at once; interleaved,
    # one after another.  Either way they add up to at most the group's wall time.
    seconds = [grouped[index].train_seconds for index in range(3)]
    assert all(s > 0 for s in seconds) and sum(seconds) <= wall
    for index, (mask, seed) in enumerate(zip(group_masks, seeds)):
        alone = train_model(settings, digits, mask, seed, CPU)
        together = grouped[index]
        assert together.steps == alone.steps == settings.epochs * math.ceil(mask.sum() / 40)
        assert together.noise_multiplier == alone.noise_multiplier
        assert together.epsilon_spent == pytest.approx(alone.epsilon_spent, rel=1e-12)
        for name, tensor in alone.state_dict.items():
            torch.testing.assert_close(together.state_dict[name], tensor, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(together.pool_logits, alone.pool_logits, rtol=1e-4, atol=1e-4)
        assert together.test_accuracy == pytest.approx(alone.test_accuracy, abs=1 / 100)


def test_stacked_clipped_sums_equal_opacus_per_model(digits):
    """K = 3 relu_mlp256x2 models with their own weights and batches of different sizes (padded
    in the stack): each model's clipped sum is Opacus's per-sample reference for that model."""
    settings = recipe("relu_mlp256x2")
    runs = [start_run(settings, m, digits.input_shape, digits.num_classes, seed, CPU)
            for seed, m in zip((1, 2, 3), masks(digits))]
    models = [copy.deepcopy(run.model) for run in runs]  # before the stack takes them over
    stack = _Stack(runs)
    torch.manual_seed(0)
    sizes = [7, 12, 3]
    rows = [torch.as_tensor(np.flatnonzero(m))[torch.randperm(int(m.sum()))[:n]]
            for m, n in zip(masks(digits), sizes)]
    x_all, y_all = torch.as_tensor(digits.pool_x), torch.as_tensor(digits.pool_y)
    picked = torch.nn.utils.rnn.pad_sequence(rows, batch_first=True)
    valid = (torch.arange(picked.shape[1]) < torch.tensor(sizes)[:, None]).float()
    inputs, grads = stack.gradients(x_all[picked], y_all[picked], valid,
                                    steps.autocast("fp32", CPU))
    _, _, norms = clipped_sums(inputs, grads, [True] * 3, 1.0)
    clip = float(norms[valid > 0].median())  # between the records' norms: some are clipped
    weight_sums, bias_sums, norms = clipped_sums(inputs, grads, [True] * 3, clip)
    assert ((norms * valid) > clip).any() and ((norms < clip) & (valid > 0)).any()
    for k, (model, r) in enumerate(zip(models, rows)):
        _, reference = opacus_clipped_sum(model, x_all[r], y_all[r], clip)
        ours = [t[k] for pair in zip(weight_sums, bias_sums) for t in pair]
        assert len(ours) == len(reference)
        for got, want in zip(ours, reference):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_only_linear_stacks_are_stacked():
    assert is_linear_stack(build_model("tanh_mlp64", (107,), 2))
    assert is_linear_stack(build_model("relu_mlp256x2", (600,), 100))
    assert is_linear_stack(build_model("logistic_regression", (107,), 2))
    assert not is_linear_stack(build_model("mnist_cnn", (1, 28, 28), 10))
    assert not is_linear_stack(nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4), nn.Linear(4, 2)))


def _specs(settings: TrainSettings, count: int = 3) -> list[ModelSpec]:
    data = DataSpec("mnist_subset", test_size=100, pool_size=240)
    return [ModelSpec("shadow", data, settings, 0.5, mask_seed=7 + index // 2,
                      mask_complement=index % 2 == 1, index=index) for index in range(count)]


def test_a_killed_group_resumes_each_model_from_its_own_checkpoint(digits, tmp_path, monkeypatch):
    settings = recipe("tanh_mlp64", epochs=3)
    specs = _specs(settings)
    root = str(tmp_path / "store")
    store = ArtifactStore(root)
    store.mark()  # a store, as a sweep's driver makes it before any task
    # Model 0 finished and stored; model 1 killed after its first epoch; model 2 never started.
    tasks.train_task(specs[0], digits, root, "cpu", 1)
    finished_meta = store.read_model_meta(specs[0].key)
    real_save = training._save_checkpoint

    def save_then_die(*args, **kwargs):
        real_save(*args, **kwargs)
        raise KeyboardInterrupt("worker killed after epoch 1")

    monkeypatch.setattr(training, "_save_checkpoint", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        tasks.train_task(specs[1], digits, root, "cpu", 1)
    monkeypatch.setattr(training, "_save_checkpoint", real_save)
    assert not store.has_model(specs[1].key) and store.checkpoint(specs[1].key).load() is not None

    trained_members = []
    real_train_models = tasks.train_models

    def spy(settings, data, members, *args, **kwargs):
        trained_members.append(len(members))
        yield from real_train_models(settings, data, members, *args, **kwargs)

    monkeypatch.setattr(tasks, "train_models", spy)
    metas = tasks.train_group_task(specs, digits, root, "cpu", 1)
    assert trained_members == [2]  # the finished model is not trained again
    assert metas[0] == finished_meta
    assert metas[1]["resumed_from"] == [1] and metas[2]["resumed_from"] == []
    for spec, meta in zip(specs, metas):
        assert meta["key"] == spec.key and store.has_model(spec.key)
        assert meta["steps"] > 0
        mask = draw_mask(len(digits.pool_y), 0.5, spec.mask_seed, spec.mask_complement)
        alone = train_model(settings, digits, mask, int(spec.key[:8], 16), CPU)
        assert meta["steps"] == alone.steps
        stored = store.read_state_dict(spec.key)
        for name, tensor in alone.state_dict.items():
            torch.testing.assert_close(stored[name], tensor, rtol=1e-5, atol=1e-5)


def test_groups_share_exactly_the_training_settings_and_pool():
    base = recipe("tanh_mlp64")
    specs = (_specs(base, 5) + _specs(dataclasses.replace(base, lr=0.2), 2)
             + _specs(dataclasses.replace(base, model="logistic_regression"), 2)
             + _specs(dataclasses.replace(base, epsilon=4.0), 1))
    other_pool = dataclasses.replace(specs[0], data=dataclasses.replace(specs[0].data, pool_size=120))
    specs.append(other_pool)
    groups = training_groups(specs, 4)
    assert sorted(len(g) for g in groups) == [1, 1, 1, 2, 2, 4]
    assert sorted(s.key for g in groups for s in g) == sorted(s.key for s in specs)
    for group in groups:
        assert len({(s.train, s.data) for s in group}) == 1
    assert [len(g) for g in training_groups(specs, 1)] == [1] * len(specs)


def test_keys_do_not_depend_on_k_and_bf16_enters_the_key():
    cfg = SweepConfig()
    one = build_plan(cfg)
    cfg.train.models_per_task = 4
    assert set(build_plan(cfg).models) == set(one.models)
    cfg.train.precision = "bf16"
    assert not set(build_plan(cfg).models) & set(one.models)


@pytest.mark.parametrize("per_model, k, largest, expected", [
    (1.0, 4, 16.0, 4.0),    # K models, K times one model's CPUs
    (1.0, 4, 2.0, 2.0),     # but never more than the largest node has
    (0.25, 4, 1.0, 1.0),    # fractional GPUs: four quarter-GPU models fill one GPU
    (0.25, 2, 1.0, 0.5),
    (0.3, 4, 2.0, 2.0),     # 1.2 GPUs is no request Ray takes: whole GPUs above 1
    (0.3, 4, 1.0, 1.0),
    (0.0, 16, 0.0, 0.0),    # no GPU asked, none given
    (2.0, 1, 16.0, 2.0),
])
def test_task_resources_scale_with_k(per_model, k, largest, expected):
    assert group_resources(per_model, k, largest) == expected


@pytest.mark.parametrize("value", [0, -2, 1.5, "two", True])
def test_models_per_task_must_be_a_positive_integer_or_auto(value):
    cfg = SweepConfig()
    cfg.train.models_per_task = value
    with pytest.raises(ConfigError) as refused:
        validate(cfg)
    assert any(problem.startswith("train.models_per_task=") for problem in refused.value.problems)


def test_precision_is_checked():
    cfg = SweepConfig()
    cfg.train.precision = "fp16"
    with pytest.raises(ConfigError) as refused:
        validate(cfg)
    assert any("train.precision='fp16'" in problem for problem in refused.value.problems)


# A slow variant: `tests/faults/test_group_killed.py` runs a grouped sweep in `make test` (and
# equals it to one trained without interruption); the units above hold each model of a group.
@pytest.mark.slow
def test_a_sweep_with_four_models_per_task_gives_the_same_table(ray_local, make_tiny_config,
                                                                 tmp_path):
    """Real Ray, real store, real MLflow: tanh_mlp64 sweeps with K = 1 and K = 4 (each ε's two
    shadows and two targets in one stacked task) land the same cells with the same figures."""
    from sweeper.runner import run_sweep

    tables = {}
    for k in (1, 4):
        cfg = make_tiny_config(tmp_path / f"k{k}")
        cfg.model.name = "tanh_mlp64"
        cfg.train.models_per_task = k
        result = run_sweep(cfg, progress=False)
        assert not result.failures and result.models_trained == 8
        tables[k] = result.results.sort_values("cell_key", ignore_index=True)
    one, four = tables[1], tables[4]
    assert list(one.cell_key) == list(four.cell_key) and list(one.model_key) == list(four.model_key)
    # The thresholds are scores, which LiRA's likelihood ratio stretches to ±1e10 and beyond
    # at this size, so float-order differences show in them; what each threshold accepts (tp,
    # fp, precision, rates) must not move.
    # What each cell cost (its seconds) is not a figure: it differs from run to run.
    figures = [c for c in one.columns if c != "threshold" and c not in COST_COLUMNS]
    numeric = [c for c in figures if pd.api.types.is_float_dtype(one[c])]
    others = [c for c in figures if c not in numeric]
    pd.testing.assert_frame_equal(one[others], four[others])
    pd.testing.assert_frame_equal(one[numeric], four[numeric], check_exact=False, rtol=1e-4,
                                  atol=1e-4)


@pytest.mark.parametrize("value", ["0", "2.5", "two", "[4]"])
def test_the_command_line_refuses_a_bad_k_naming_the_field(value, tmp_path):
    from sweeper.checks.preflight import preflight

    with pytest.raises(ConfigError) as refused:
        preflight([f"train.models_per_task={value}", f"store.root={tmp_path / 'runs'}"])
    assert "train.models_per_task=" in str(refused.value)
    assert not (tmp_path / "runs").exists()


def test_auto_k_is_one_on_a_cpu_sixteen_stacked_and_four_interleaved_on_a_gpu():
    from sweeper.grid.plan import models_per_task

    cfg = SweepConfig()
    assert cfg.train.models_per_task == "auto" and models_per_task(cfg) == 1  # mnist_cnn, CPU
    cfg.model.name = "tanh_mlp64"
    assert models_per_task(cfg) == 1
    cfg.resources.train.num_gpus = 0.25
    assert models_per_task(cfg) == 16
    cfg.model.name = "mnist_cnn"
    assert models_per_task(cfg) == 4  # interleaved, each model on its own CUDA stream
    cfg.train.models_per_task = 3
    assert models_per_task(cfg) == 3


def test_bf16_forward_keeps_norms_and_clipped_sums_in_fp32():
    """Under bf16 autocast the clipper still returns fp32 norms and fp32 sums, which match the
    fp32 engine's to bf16's precision: an 8-bit mantissa, ~0.4 % a rounding, compounded over
    three layers' forward and backward (measured: norms within 2 %, sums within 9 %)."""
    from jobs.engine.clipping import PerSampleClipper

    torch.manual_seed(0)
    model = build_model("relu_mlp256x2", (60,), 10)
    x, y = torch.rand(16, 60), torch.randint(0, 10, (16,))
    sums = {}
    for precision in ("fp32", "bf16"):
        clipper = PerSampleClipper(model, 1.0)
        with clipper.watch(), steps.autocast(precision, CPU):
            logits = model(x)
        assert logits.dtype == (torch.bfloat16 if precision == "bf16" else torch.float32)
        norms = clipper.clip_and_sum(nn.functional.cross_entropy(logits.float(), y, reduction="sum"))
        assert norms.dtype == torch.float32
        sums[precision + " norms"] = norms
        sums[precision] = [p.grad.clone() for p in model.parameters()]
        assert all(g.dtype == torch.float32 for g in sums[precision])
    for full, half in zip(sums["fp32"], sums["bf16"]):
        assert float((half - full).norm() / full.norm()) < 0.15
    torch.testing.assert_close(sums["bf16 norms"], sums["fp32 norms"], rtol=0.03, atol=0)


def test_each_models_pool_logits_are_its_own_weights_logits_bit_for_bit(digits):
    """A task's finished model has its pool logits queued while the others train on
    (`jobs.engine.training.launch_logits`): what is stored is still that model's own forward pass on
    the pool, to the bit, for every model of the group, whatever order they finish in."""
    from jobs.models import build_model
    from jobs.engine.training import predict_logits

    settings = recipe("mnist_cnn", 2.0, "sgd", epochs=1)
    group = dict(train_models(settings, digits, [Member(m, s) for m, s in
                                                 zip(masks(digits), [11, 22, 33])], CPU))
    for trained in group.values():
        model = build_model("mnist_cnn", digits.input_shape, digits.num_classes)
        model.load_state_dict(trained.state_dict)
        assert np.array_equal(trained.pool_logits, predict_logits(model, digits.pool_x, CPU))
