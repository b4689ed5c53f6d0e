"""Training on a GPU as a sweep's task runs it (CUDA graphs, K models on their own streams):
each model of K equals the model trained alone, a graphed run killed after an epoch and resumed
equals the uninterrupted one, and `train.tf32=false` is fp32 everywhere, cuDNN included."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from jobs.engine.clipping import PerSampleClipper, tf32_convolutions
from jobs.engine.stacked import train_models
from jobs.engine.steps import CapturedSteps, clipped_sum
import jobs.engine.training as training
from jobs.engine.training import Member, TrainOptions, TrainSettings, draw_mask, train_model
from jobs.models import build_model
from testkit.gpu_checks import GPU_ONLY

pytestmark = GPU_ONLY

SETTINGS = TrainSettings(model="mnist_cnn", epochs=2, batch_size=64, lr=0.1, momentum=0.9,
                         max_grad_norm=1.0, accountant="rdp", epsilon=4.0, delta=1e-5)


def assert_same_model(got, want) -> None:
    assert got.steps == want.steps
    for name, tensor in want.state_dict.items():
        torch.testing.assert_close(got.state_dict[name], tensor, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got.pool_logits, want.pool_logits, rtol=1e-4, atol=1e-4)


def test_the_steps_are_captured_as_graphs(gpu_digits, cuda, monkeypatch):
    """What the other tests here rest on: on a GPU a DP run replays CUDA graphs."""
    made = []
    real = training._stepper
    monkeypatch.setattr(training, "_stepper", lambda *args: made.append(real(*args)) or made[-1])
    train_model(SETTINGS, gpu_digits, draw_mask(len(gpu_digits.pool_y), 0.5, 1, False), 3, cuda)
    assert isinstance(made[0], CapturedSteps) and made[0].graphs


def test_k_models_on_their_own_streams_each_equal_the_model_trained_alone(gpu_digits, cuda):
    members = [Member(draw_mask(len(gpu_digits.pool_y), 0.5, seed, False), 10 + seed)
               for seed in range(4)]
    together = dict(train_models(SETTINGS, gpu_digits, members, cuda))
    assert sorted(together) == [0, 1, 2, 3]
    for k, member in enumerate(members):
        alone = train_model(SETTINGS, gpu_digits, member.mask, member.seed, cuda)
        assert_same_model(together[k], alone)


def test_a_graphed_run_killed_after_an_epoch_and_resumed_equals_the_uninterrupted_run(
        gpu_digits, cuda, tmp_path, monkeypatch):
    from sweeper.store.artifacts import ArtifactStore

    settings = dataclasses.replace(SETTINGS, epochs=3)
    mask = draw_mask(len(gpu_digits.pool_y), 0.5, seed=1, complement=False)
    whole = train_model(settings, gpu_digits, mask, 3, cuda)
    real_save, saves = training._save_checkpoint, []

    def save_then_die(run, epoch):
        real_save(run, epoch)
        saves.append(epoch)
        if epoch == 1:
            raise KeyboardInterrupt("worker killed after epoch 1")

    checkpoint = ArtifactStore(tmp_path).checkpoint("model")
    monkeypatch.setattr(training, "_save_checkpoint", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        train_model(settings, gpu_digits, mask, 3, cuda, checkpoint=checkpoint)
    monkeypatch.setattr(training, "_save_checkpoint", real_save)
    resumed = train_model(settings, gpu_digits, mask, 3, cuda, checkpoint=checkpoint)
    assert saves == [1] and resumed.resumed_from == [1]
    assert resumed.epsilon_spent == pytest.approx(whole.epsilon_spent, rel=1e-9)
    assert_same_model(resumed, whole)


def one_dp_step(device: torch.device, tf32: bool) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """`cifar10_cnn`'s logits and clipped sums for one batch, on `device`, with `train.tf32`
    as given (matrix products through the clipper, convolutions through cuDNN's flag)."""
    torch.manual_seed(0)
    model = build_model("cifar10_cnn", (3, 32, 32), 10).to(device)
    generator = torch.Generator().manual_seed(1)
    x = torch.rand(64, 3, 32, 32, generator=generator).to(device)
    y = torch.randint(0, 10, (64,), generator=generator).to(device)
    with tf32_convolutions(tf32):
        logits = model(x).detach().double().cpu()
        clipped_sum(model, PerSampleClipper(model, 1.0, tf32), x, y)
    return logits, [p.grad.double().cpu() for p in model.parameters()]


def largest_relative_difference(got: list[torch.Tensor], want: list[torch.Tensor]) -> float:
    return max(float((g - w).abs().max() / w.abs().max()) for g, w in zip(got, want))


def test_tf32_false_is_fp32_everywhere_cudnn_included(cuda):
    """With `train.tf32=false` the GPU's forward pass and clipped sums are the CPU's (fp32, no
    TF32 there) to fp32 rounding; the control: with TF32 on, the forward pass is visibly not
    (TF32 keeps 10 mantissa bits: ~1e-3 relative), so the bound below tells the two apart."""
    cpu_logits, cpu_sums = one_dp_step(torch.device("cpu"), False)
    logits, sums = one_dp_step(cuda, False)
    assert largest_relative_difference([logits], [cpu_logits]) < 1e-4
    assert largest_relative_difference(sums, cpu_sums) < 1e-4
    tf32_logits, _ = one_dp_step(cuda, True)
    assert largest_relative_difference([tf32_logits], [cpu_logits]) > 1e-4


def test_training_with_tf32_false_runs_every_convolution_in_fp32(gpu_digits, cuda, monkeypatch):
    """The flags each convolution of a graphed training finds (forward passes, captures and the
    clipper's routes): cuDNN's TF32 off throughout with `TrainOptions(tf32=False)`."""
    seen = set()
    real = F.conv2d
    monkeypatch.setattr(F, "conv2d", lambda *args, **kwargs: (
        seen.add(torch.backends.cudnn.allow_tf32), real(*args, **kwargs))[1])
    train_model(dataclasses.replace(SETTINGS, epochs=1), gpu_digits,
                draw_mask(len(gpu_digits.pool_y), 0.5, 1, False), 3, cuda,
                options=TrainOptions(tf32=False))
    assert seen == {False}
