"""DP training on real MNIST digits with real Opacus: accounting, masks, checkpoint resume."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from jobs.datasets import load_dataset
from jobs.engine.accounting import RDP_ORDERS
import jobs.engine.randomness as randomness
import jobs.engine.training as training
from jobs.engine.training import TrainSettings, draw_mask, train_model

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    data = load_dataset("mnist_subset", tmp_path_factory.mktemp("data"), False, test_size=200)
    return data.first_records(300)


def settings(epsilon: float, epochs: int = 2) -> TrainSettings:
    return TrainSettings(model="mnist_cnn", epochs=epochs, batch_size=50, lr=0.05, momentum=0.9,
                         max_grad_norm=1.0, accountant="rdp", epsilon=epsilon,
                         delta=1e-5 if math.isfinite(epsilon) else None)


def test_mask_is_bernoulli_and_complement_flips_it():
    mask = draw_mask(20_000, 0.3, seed=7, complement=False)
    assert abs(mask.mean() - 0.3) < 0.015  # 4.6 standard errors of √(0.3·0.7/20000)
    assert (draw_mask(20_000, 0.3, seed=7, complement=True) == ~mask).all()
    assert (draw_mask(20_000, 0.3, seed=7, complement=False) == mask).all()


def test_dp_training_spends_the_target_epsilon(digits):
    mask = draw_mask(len(digits.pool_y), 0.5, seed=1, complement=False)
    model = train_model(settings(2.0), digits, mask, seed=3, device=CPU)
    assert model.noise_multiplier > 0
    assert 1.8 < model.epsilon_spent <= 2.0 + 1e-6
    assert model.train_size == mask.sum()
    # Opacus sets q = 1 / ceil(|D| / batch) and takes 1/q Poisson steps an epoch.
    assert model.steps == 2 * math.ceil(mask.sum() / 50)
    assert model.pool_logits.shape == (len(digits.pool_y), 10)


def test_a_declared_public_size_keeps_rate_and_divisor_when_a_record_is_added(digits):
    # Opacus's rule (DPDataLoader.from_data_loader): q = 1 / len(loader) = 1/⌈|D|/B⌉ and the
    # divisor int(|D|·q).  At B = 50, |D| = 100 gives q = 1/2 and divides by 50; one record more
    # (101) gives q = 1/3 and divides by int(101/3) = 33: the rate depends on the private data.
    neighbours = np.zeros(len(digits.pool_y), bool), np.zeros(len(digits.pool_y), bool)
    neighbours[0][:100], neighbours[1][:101] = True, True
    rules = {}
    for public_size in (None, 100):
        runs = [training.start_run(settings(2.0), mask, digits.input_shape, digits.num_classes,
                                   seed=3, device=CPU, public_size=public_size) for mask in neighbours]
        rules[public_size] = [(run.schedule.sample_rate, run.schedule.expected_batch_size,
                               run.noise_multiplier) for run in runs]
    (q0, divisor0, _), (q1, divisor1, _) = rules[None]
    assert (q0, divisor0, q1, divisor1) == (1 / 2, 50, 1 / 3, 33)
    # Declared: both neighbours sample at 1/2, divide by 50 and add the same noise.
    assert rules[100][0] == rules[100][1] and rules[100][0][:2] == (1 / 2, 50)
    assert rules[100][0][2] == rules[None][0][2]


def test_non_private_training_adds_no_noise(digits):
    mask = draw_mask(len(digits.pool_y), 0.5, seed=1, complement=False)
    model = train_model(settings(math.inf, epochs=15), digits, mask, seed=3, device=CPU)
    assert model.noise_multiplier == 0 and math.isinf(model.epsilon_spent)
    assert model.train_accuracy > 0.5  # it learns


def test_resume_after_a_crash_equals_an_uninterrupted_run(digits, tmp_path, monkeypatch):
    mask = draw_mask(len(digits.pool_y), 0.5, seed=1, complement=False)
    whole = train_model(settings(2.0, epochs=3), digits, mask, seed=3, device=CPU)

    real_save = training._save_checkpoint
    saves = []

    def save_then_die(*args, **kwargs):
        real_save(*args, **kwargs)
        saves.append(args[1])
        if len(saves) == 2:
            raise KeyboardInterrupt("worker killed after epoch 2")

    from sweeper.store.artifacts import ArtifactStore

    checkpoint = ArtifactStore(tmp_path).checkpoint("model")
    monkeypatch.setattr(training, "_save_checkpoint", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        train_model(settings(2.0, epochs=3), digits, mask, seed=3, device=CPU, checkpoint=checkpoint)
    monkeypatch.setattr(training, "_save_checkpoint", real_save)
    resumed = train_model(settings(2.0, epochs=3), digits, mask, seed=3, device=CPU, checkpoint=checkpoint)

    assert resumed.epsilon_spent == pytest.approx(whole.epsilon_spent, rel=1e-9)
    assert resumed.steps == whole.steps
    assert resumed.resumed_from == [2] and whole.resumed_from == []
    for name, tensor in whole.state_dict.items():
        torch.testing.assert_close(resumed.state_dict[name], tensor)
    np.testing.assert_allclose(resumed.pool_logits, whole.pool_logits, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("epsilon", [2.0, math.inf])
def test_padded_batches_train_the_model_unpadded_batches_train(digits, monkeypatch, epsilon):
    """What a GPU replays as CUDA graphs (`jobs.engine.steps.PaddedSteps`: each batch padded with
    rows of weight 0 to a multiple of 32, fixed buffers) run eagerly on the CPU: the same
    model as exactly the drawn batches, to float summation order — for DP-SGD and for
    non-private training (the mean over the batch's real records)."""
    from jobs.engine.steps import BUCKET, PaddedSteps

    mask = draw_mask(len(digits.pool_y), 0.5, seed=1, complement=False)
    plain = train_model(settings(epsilon), digits, mask, seed=3, device=CPU)
    real, padded_sizes = training._stepper, []

    def padded(run, pool_x, pool_y, index, device, compiled):
        stepper = PaddedSteps(run, pool_x, pool_y, index, real(run, pool_x, pool_y, index,
                                                                device, compiled).clipper)
        original = stepper._padded_step
        stepper._padded_step = lambda size: (padded_sizes.append(size), original(size))
        return stepper

    monkeypatch.setattr(training, "_stepper", padded)
    padded_model = train_model(settings(epsilon), digits, mask, seed=3, device=CPU)
    assert padded_sizes and all(size % BUCKET == 0 for size in padded_sizes)
    assert padded_model.steps == plain.steps
    for name, tensor in plain.state_dict.items():
        torch.testing.assert_close(padded_model.state_dict[name], tensor, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("seconds, saved", [(0.0, [1, 2, 3]), (3600.0, [])])
def test_checkpoints_are_saved_at_epochs_ends_once_checkpoint_seconds_have_passed(
        digits, tmp_path, monkeypatch, seconds, saved):
    from sweeper.store.artifacts import ArtifactStore

    real_save, epochs = training._save_checkpoint, []
    monkeypatch.setattr(training, "_save_checkpoint",
                        lambda run, epoch: (epochs.append(epoch), real_save(run, epoch)))
    mask = draw_mask(len(digits.pool_y), 0.5, seed=1, complement=False)
    train_model(settings(2.0, epochs=3), digits, mask, seed=3, device=CPU,
                checkpoint=ArtifactStore(tmp_path).checkpoint("model"),
                options=training.TrainOptions(checkpoint_seconds=seconds))
    assert epochs == saved


def test_small_epsilons_are_reached_with_the_wider_rdp_orders():
    # Opacus converts RDP at order α to ε = RDP + (ln(1/δ) − ln α)/(α − 1) + ln((α − 1)/α); with
    # its orders (≤ 63) the last two terms alone are (11.513 − 4.143)/62 − 0.016 ≈ 0.103 at
    # δ = 1e-5, so ε = 0.1 is out of reach; with orders up to 2048 it is spent to within 1 %.
    from opacus.accountants import RDPAccountant

    settings = TrainSettings(model="mnist_cnn", epochs=2, batch_size=50, lr=0.05, momentum=0.9,
                             max_grad_norm=1.0, accountant="rdp", epsilon=0.1, delta=1e-5)
    sigma = training.calibrate_noise(settings, sample_rate=0.1)
    accountant = RDPAccountant()
    accountant.history = [(sigma, 0.1, 20)]  # 2 epochs at rate 0.1
    assert accountant.get_epsilon(delta=1e-5) > 0.103  # the default orders cannot certify it
    spent = accountant.get_epsilon(delta=1e-5, alphas=RDP_ORDERS)
    assert 0.099 <= spent <= 0.1


def test_a_damaged_checkpoint_is_not_used_but_training_starts_over(digits, tmp_path):
    from sweeper.store.artifacts import ArtifactStore

    mask = draw_mask(len(digits.pool_y), 0.5, seed=1, complement=False)
    checkpoint = ArtifactStore(tmp_path).checkpoint("model")
    checkpoint.save(b"not a checkpoint")
    path = tmp_path / "checkpoints" / "model.pt"
    path.write_bytes(path.read_bytes()[:-3] + b"xyz")  # altered after it was written
    assert checkpoint.load() is None
    model = train_model(settings(2.0, epochs=1), digits, mask, seed=3, device=CPU, checkpoint=checkpoint)
    assert model.resumed_from == [] and model.steps > 0


def test_each_purpose_and_each_model_has_its_own_random_stream():
    """Seeds s and s+1 (PDTP trains seeds 0…n−1) once shared streams: s+1's batches were s's
    noise, and on CPU the Poisson stream was seeded like the initial weights."""
    first = [randomness.TrainingRng(seed, CPU) for seed in (4, 5)]
    draws = {(seed, name): torch.rand(64, generator=getattr(rng, name))
             for seed, rng in zip((4, 5), first) for name in ("batches", "noise")}
    torch.manual_seed(randomness.stream_seed(4, randomness.WEIGHTS))
    draws[(4, "weights")] = torch.rand(64)
    values = list(draws.values())
    assert all(not torch.equal(a, b) for i, a in enumerate(values) for b in values[i + 1:])


def test_secure_noise_is_not_replayed_and_has_the_noise_it_claims():
    """Two secure runs of one seed differ; each coordinate is the sum of four N(0, (σC/2)²)
    draws, N(0, σ²C²) again: its sample variance is tested with a two-sided χ² interval."""
    from scipy.stats import chi2

    draws = [randomness.gaussian_noise(2.0, 20_000, torch.zeros(1),
                                       randomness.TrainingRng(3, CPU, secure_noise=True))
             for _ in range(2)]
    assert not torch.equal(*draws)
    statistic = float((draws[0].double() ** 2).sum() / 4.0)
    assert chi2.ppf(5e-7, 20_000) < statistic < chi2.ppf(1 - 5e-7, 20_000)
    replayed = [randomness.gaussian_noise(2.0, 100, torch.zeros(1), randomness.TrainingRng(3, CPU))
                for _ in range(2)]
    assert torch.equal(*replayed)  # the default stream is reproducible


@pytest.mark.parametrize("routes", ["cpu", "gpu"])
@pytest.mark.parametrize("epsilon", [2.0, math.inf])
def test_channels_last_trains_the_contiguous_model(digits, monkeypatch, routes, epsilon):
    """`TrainOptions(channels_last=True)` stores weights and activations NHWC: the same
    arithmetic in another order, so the same model to float rounding.  "gpu" takes a GPU's
    per-layer routes on this CPU (every convolution keeps per-record gradients, taken by
    unfold and one batched matmul in NHWC order), where the layout matters most.  One epoch:
    later, max-pooling's near ties turn rounding into a different winner now and then, as any
    change of summation order does (measured: 1e-8 relative after 4 steps, 4e-6 after 8)."""
    from jobs.engine.layer_rules.conv2d import _Conv2dRule

    mask = draw_mask(len(digits.pool_y), 0.5, seed=1, complement=False)
    nhwc_products = []
    if routes == "gpu":
        nhwc = _Conv2dRule._rows_weights
        monkeypatch.setattr(_Conv2dRule, "keeps_samples", lambda self, seen, grad, parameters: True)
        monkeypatch.setattr(_Conv2dRule, "_weights", classmethod(
            lambda cls, module, a, g: cls._unfolded_weights(module, a, g)))
        monkeypatch.setattr(_Conv2dRule, "_rows_weights", classmethod(
            lambda cls, module, a, g: (nhwc_products.append(module.in_channels), nhwc(module, a, g))[1]))
    contiguous = train_model(settings(epsilon, epochs=1), digits, mask, seed=3, device=CPU)
    assert not nhwc_products  # contiguous activations take the NCHW route
    nhwc_model = train_model(settings(epsilon, epochs=1), digits, mask, seed=3, device=CPU,
                             options=training.TrainOptions(channels_last=True))
    if routes == "gpu" and math.isfinite(epsilon):
        assert nhwc_products and set(nhwc_products) == {16}  # mnist_cnn's second convolution
    assert nhwc_model.steps == contiguous.steps
    for name, tensor in contiguous.state_dict.items():
        assert nhwc_model.state_dict[name].is_contiguous()
        torch.testing.assert_close(nhwc_model.state_dict[name], tensor, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(nhwc_model.pool_logits, contiguous.pool_logits, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("tf32", [True, False])
def test_tf32_is_asked_for_per_record_products_only(digits, monkeypatch, tf32):
    """`train.tf32` (`TrainOptions.tf32`) sets TF32 for per-record gradients' matrix products
    (whose norm and clipped sum read one tensor) and for cuDNN's convolutions, the forward pass
    included; false means fp32 everywhere.  Book-keeping layers' norms and sums, which come
    from different products, are fp32 either way (`jobs.engine.clipping.full_precision`).  The flags
    are what a GPU reads: seen here as each call finds them (as (matmul, cuDNN))."""
    from jobs.engine.layer_rules.conv2d import _Conv2dRule
    from jobs.engine.layer_rules.linear import _LinearRule

    def flags() -> tuple[bool, bool]:
        return torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32

    asked: dict[str, set] = {"per_sample": set(), "norms": set(), "accumulate": set(),
                             "forward": set()}
    for rule in (_Conv2dRule, _LinearRule):
        for method in ("per_sample", "norms", "accumulate"):
            real = getattr(rule, method)
            monkeypatch.setattr(rule, method, lambda self, *args, _real=real, _method=method: (
                asked[_method].add(flags()), _real(self, *args))[1])
    real_forward = torch.nn.Conv2d._conv_forward
    monkeypatch.setattr(torch.nn.Conv2d, "_conv_forward", lambda self, *args: (
        asked["forward"].add(flags()), real_forward(self, *args))[1])
    before = flags()
    mask = draw_mask(len(digits.pool_y), 0.5, seed=1, complement=False)
    train_model(settings(2.0, epochs=1), digits, mask, seed=3, device=CPU,
                options=training.TrainOptions(tf32=tf32))
    assert asked == {"per_sample": {(tf32, tf32)}, "norms": {(False, False)},
                     "accumulate": {(False, False)}, "forward": {(False, tf32)}}
    assert flags() == before  # restored once training ends


def test_a_sweep_applies_the_gpu_options_on_a_gpu_only():
    options = training.TrainOptions(channels_last=True, tf32=True, checkpoint_seconds=5.0)
    assert options.on(torch.device("cuda")) == options
    assert options.on(CPU) == training.TrainOptions(checkpoint_seconds=5.0)
