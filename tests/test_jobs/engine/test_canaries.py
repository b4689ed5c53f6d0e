"""Canaries in the DP engine (jobs/engine/canaries.py) on real MNIST: what is planted, what the white-box
observer recovers, and that its statistics follow the distributions DP-SGD's mechanism implies.

Expected distributions are derived by hand: at q = 1 a canary's per-step recovered gradient is
(1 if in D) + N(0, σ²) in units of C/B, so its sum over T steps is N(T, Tσ²) or N(0, Tσ²); at
q < 1 the likelihood-ratio statistic's law is simulated in NumPy from that model (not from our
code), and compared with a two-sample test.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from jobs.datasets import load_dataset
from jobs.engine import clipping
from jobs.engine.canaries import (CanaryDesign, canary_masks, canary_set, first_linear,
                                  input_canaries, untouched_features)
from jobs.engine.canary_columns import FINAL, ITERATE_LIKELIHOOD_RATIO, ITERATE_SUM
from jobs.engine.stacked import Member, train_models
import jobs.engine.training as training
from jobs.engine.training import TrainSettings, draw_mask, train_model
from jobs.models import build_model

CPU = torch.device("cpu")
POOL = 400  # each model's pool; mislabeled canaries are taken past it


@pytest.fixture(scope="module")
def mnist(tmp_path_factory):
    data = load_dataset("mnist_subset", tmp_path_factory.mktemp("data"), False, test_size=200)
    return data.first_records(POOL + 100)


def recipe(epsilon: float, *, steps: int = 10, batch: int = 1000, momentum: float = 0.0,
           lr: float = 0.5) -> TrainSettings:
    return TrainSettings(model="tanh_mlp64", epochs=steps, batch_size=batch, lr=lr,
                         momentum=momentum, max_grad_norm=1.0, accountant="rdp", epsilon=epsilon,
                         delta=1e-5 if math.isfinite(epsilon) else None, eval_every=0)


def design(inputs: int = 0, gradients: int = 2000, recipe_name: str = "mislabeled") -> CanaryDesign:
    return CanaryDesign(inputs, recipe_name, POOL, gradients, 1000.0, seed=3)


def canaries_for(mnist, chosen: CanaryDesign, rate: float = 0.5, mask_seed: int = 11,
                 complement: bool = False):
    model = build_model("tanh_mlp64", mnist.input_shape, mnist.num_classes)
    return canary_set(chosen, mnist.pool_x, mnist.pool_y, mnist.test_x, mnist.num_classes, model,
                      rate, mask_seed, complement)


def train(mnist, settings, canaries, seed: int = 5, rate: float = 0.5, **kwargs):
    pool = mnist.first_records(POOL)
    mask = draw_mask(POOL, rate, seed=9, complement=False)
    return train_model(settings, pool, mask, seed, CPU, canaries=canaries, **kwargs), mask


def test_masks_are_bernoulli_and_complemented_and_recipes_are_what_they_say(mnist):
    chosen = design(inputs=100, gradients=20_000)
    inputs, gradients = canary_masks(chosen, 0.3, mask_seed=4, complement=False)
    assert abs(gradients.mean() - 0.3) < 0.015  # 4.6 standard errors
    flipped = canary_masks(chosen, 0.3, mask_seed=4, complement=True)
    assert (flipped[0] == ~inputs).all() and (flipped[1] == ~gradients).all()
    x, y = input_canaries(chosen, mnist.pool_x, mnist.pool_y, 10)
    assert np.array_equal(x, mnist.pool_x[POOL:POOL + 100])  # records no model's pool holds
    assert (y != mnist.pool_y[POOL:POOL + 100]).all() and y.min() >= 0 and y.max() < 10
    noise_x, noise_y = input_canaries(design(inputs=50, recipe_name="noise"), mnist.pool_x,
                                      mnist.pool_y, 10)
    assert noise_x.shape == (50, *mnist.input_shape) and 0.4 < noise_x.mean() < 0.6
    assert len(set(noise_y.tolist())) > 5


def test_gradient_canaries_own_weights_no_record_touches(mnist):
    canaries = canaries_for(mnist, design())
    features = untouched_features(mnist.pool_x, mnist.test_x)
    assert len(features) > 40  # MNIST's blank border
    in_features = first_linear(build_model("tanh_mlp64", mnist.input_shape, 10)).in_features
    columns = canaries.gradient_coordinates % in_features
    assert len(set(canaries.gradient_coordinates.tolist())) == 2000
    flat = np.concatenate([mnist.pool_x, mnist.test_x]).reshape(-1, in_features)
    assert not flat[:, columns].any()


def test_planting_changes_no_output_and_no_other_weight(mnist):
    settings = recipe(2.0)
    with_canaries, _ = train(mnist, settings, canaries_for(mnist, design()))
    without, _ = train(mnist, settings, None)
    assert np.array_equal(with_canaries.pool_logits, without.pool_logits)
    weight = "0.weight" if "0.weight" in without.state_dict else "1.weight"
    changed = (with_canaries.state_dict[weight] != without.state_dict[weight]).flatten().numpy()
    canaries = canaries_for(mnist, design())
    assert set(np.flatnonzero(changed)) <= set(canaries.gradient_coordinates.tolist())
    assert changed.sum() > 500  # the included canaries' weights did move


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_without_noise_the_observer_recovers_every_canary_exactly(mnist, momentum):
    """At ε = ∞ every included canary is in every step, unclipped at C: Σ z_t counts the steps."""
    canaries = canaries_for(mnist, design(gradients=300))
    trained, _ = train(mnist, recipe(math.inf, steps=6, batch=100, momentum=momentum, lr=0.1),
                       canaries)
    statistics = trained.canary_outputs["gradient_statistics"]
    included = trained.canary_outputs["gradient_included"]
    expected = np.where(included, trained.steps, 0.0)
    assert np.allclose(statistics[:, ITERATE_SUM], expected, atol=1e-3)
    if momentum == 0.0:  # scaled by the last batch's C/|B|: batches differ by a record or two
        assert np.allclose(statistics[:, FINAL], expected, rtol=0.1, atol=1e-3)


def test_full_batch_sums_follow_the_gaussian_mechanism(mnist):
    """q = 1: Σ z_t ~ N(T, Tσ²) in D and N(0, Tσ²) out of it (KS against the exact laws)."""
    trained, _ = train(mnist, recipe(4.0, steps=10), canaries_for(mnist, design()))
    assert trained.sample_rate == 1.0
    sums = trained.canary_outputs["gradient_statistics"][:, ITERATE_SUM]
    included = trained.canary_outputs["gradient_included"]
    spread = math.sqrt(trained.steps) * trained.noise_multiplier
    assert stats.kstest(sums[included], "norm", args=(trained.steps, spread)).pvalue > 1e-4
    assert stats.kstest(sums[~included], "norm", args=(0.0, spread)).pvalue > 1e-4


def test_subsampled_likelihood_ratio_matches_a_simulation_of_the_mechanism(mnist):
    """q < 1 (batch 100 of ~200 records): each in-D canary is drawn with probability q per step;
    the LLR statistic's law is simulated from (Bernoulli(q) + N(0, σ²)) per step."""
    trained, _ = train(mnist, recipe(4.0, steps=12, batch=100), canaries_for(mnist, design()))
    q, sigma, steps = trained.sample_rate, trained.noise_multiplier, trained.steps
    assert q < 1
    included = trained.canary_outputs["gradient_included"]
    observed = trained.canary_outputs["gradient_statistics"][:, ITERATE_LIKELIHOOD_RATIO]
    rng = np.random.default_rng(0)

    def simulate(n: int, member: bool) -> np.ndarray:
        z = rng.normal(0.0, sigma, (n, steps)) + (member * (rng.random((n, steps)) < q))
        return np.log1p(-q + q * np.exp((2 * z - 1) / (2 * sigma ** 2))).sum(1)

    assert stats.ks_2samp(observed[included], simulate(20_000, True)).pvalue > 1e-4
    assert stats.ks_2samp(observed[~included], simulate(20_000, False)).pvalue > 1e-4


def test_clipping_turned_off_shows_in_the_observers_statistics(mnist, monkeypatch):
    """A broken clip (factor 1) lets a canary's full norm through: 1000 per step, not 1."""
    monkeypatch.setattr(clipping, "clip_factors", lambda norms, c: torch.ones_like(norms))
    trained, _ = train(mnist, recipe(4.0, steps=10), canaries_for(mnist, design()))
    sums = trained.canary_outputs["gradient_statistics"][:, ITERATE_SUM]
    included = trained.canary_outputs["gradient_included"]
    assert np.median(sums[included]) > 500 * trained.steps


def test_input_canaries_are_trained_on_and_leave_the_schedule_alone(mnist):
    canaries = canaries_for(mnist, design(inputs=100, gradients=0))
    settings = recipe(math.inf, steps=40, batch=64, lr=0.1)
    trained, mask = train(mnist, settings, canaries)
    private, without = (train(mnist, recipe(4.0, steps=2, batch=64), c)[0] for c in (canaries, None))
    assert (private.sample_rate, private.steps) == (without.sample_rate, without.steps)  # q: records
    logits = trained.canary_outputs["input_logits"]
    labels = trained.canary_outputs["input_labels"]
    loss = -logits[np.arange(100), labels] + np.log(np.exp(logits).sum(1))
    included = trained.canary_outputs["input_included"]
    assert loss[included].mean() < loss[~included].mean() - 1.0  # memorised their wrong labels


def test_stacked_models_hold_their_canaries_as_trained_alone(mnist):
    chosen = design(inputs=30, gradients=200)
    settings = recipe(2.0, steps=5, batch=100)
    pool = mnist.first_records(POOL)
    members = [Member(draw_mask(POOL, 0.5, seed=s, complement=False), 20 + s, None,
                      canaries_for(mnist, chosen, mask_seed=s)) for s in range(2)]
    stacked = dict(train_models(settings, pool, members, CPU))
    for k, member in enumerate(members):
        alone = train_model(settings, pool, member.mask, member.seed, CPU,
                            canaries=member.canaries)
        for name, values in alone.canary_outputs.items():
            assert np.allclose(stacked[k].canary_outputs[name], values, atol=1e-4), name


def test_resume_restores_the_canaries_exactly(mnist, tmp_path, monkeypatch):
    from sweeper.store.artifacts import ArtifactStore

    canaries = canaries_for(mnist, design(gradients=300))
    settings = recipe(2.0, steps=4, batch=100)
    whole, _ = train(mnist, settings, canaries)
    real_save = training._save_checkpoint

    def save_then_die(run, epoch):
        real_save(run, epoch)
        if epoch == 2:
            raise KeyboardInterrupt("killed after epoch 2")

    checkpoint = ArtifactStore(tmp_path).checkpoint("model")
    monkeypatch.setattr(training, "_save_checkpoint", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        train(mnist, settings, canaries, checkpoint=checkpoint)
    monkeypatch.setattr(training, "_save_checkpoint", real_save)
    resumed, _ = train(mnist, settings, canaries, checkpoint=checkpoint)
    assert resumed.resumed_from == [2]
    assert np.allclose(resumed.canary_outputs["gradient_statistics"],
                       whole.canary_outputs["gradient_statistics"], atol=1e-9)
