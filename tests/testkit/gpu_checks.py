"""The checks `tests/gpu` runs on a GPU, written so that the CPU suite can run them too
(`tests/suite/test_gpu_checks.py`): a check that never runs where it is written is a check nobody
has seen fail.

    noise_problems          draws of DP noise: each N(0, std²) by a KS test, no two the same
    drawn_noise             the noise one DP step added, read back from its gradients
    contribution_problems   each record's clipped contribution against C
    clipped_contributions   each record's clipped contribution, by the engine, one at a time
"""

from __future__ import annotations

import contextlib
import itertools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy import stats
from torch import nn

#: `tests/gpu`'s marks: every test there is a `gpu` test, skipped without CUDA.
GPU_ONLY = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

#: A KS p-value below this fails a draw (one false alarm in 10⁴ tests of honest noise).
KS_ALPHA = 1e-4
#: How far above C a contribution may go: fp32 rounding of a norm against its sum is ~1e-6
#: relative (and Opacus adds 1e-6 to every norm); TF32 in one of the two gave ~1e-3.
CONTRIBUTION_SLACK = 1e-5


def noise_problems(draws: list[np.ndarray], std: float, alpha: float = KS_ALPHA) -> list[str]:
    """What is wrong with `draws`, each meant to be fresh N(0, std²) noise (empty: nothing):
    a draw whose values a KS test rejects as N(0, std²), two draws that are equal, or whose
    difference a KS test rejects as N(0, 2·std²) (noise replayed, or partly shared)."""
    problems = []
    for i, draw in enumerate(draws):
        p = stats.kstest(np.asarray(draw, np.float64) / std, "norm").pvalue
        if p < alpha:
            problems.append(f"draw {i} is not N(0, {std:.3g}²): KS p = {p:.1e}")
    for (i, first), (j, second) in itertools.combinations(enumerate(draws), 2):
        if np.array_equal(first, second):
            problems.append(f"draws {i} and {j} are the same noise")
            continue
        difference = (np.asarray(first, np.float64) - np.asarray(second, np.float64))
        p = stats.kstest(difference / (std * math.sqrt(2)), "norm").pvalue
        if p < alpha:
            problems.append(f"draws {i} and {j} are not independent: their difference is not "
                            f"N(0, 2·{std:.3g}²) (KS p = {p:.1e})")
    return problems


def gradient_vector(model: nn.Module) -> torch.Tensor:
    """Every trainable parameter's `.grad`, flattened into one float64 vector on the host."""
    return torch.cat([p.grad.detach().double().flatten().cpu() for p in model.parameters()
                      if p.requires_grad])


def drawn_noise(run, stepper, position: int, clean: torch.Tensor) -> np.ndarray:
    """The noise the DP step at `position` added: after the step `.grad` holds (clipped sum +
    noise) / expected batch (`jobs.engine.steps.noisy_step`), and `clean` is that clipped sum, from a
    twin run without noise on the same batch.  With lr = 0 the weights never move, so every
    step of the run has the same clipped sum."""
    stream = stepper.stream
    with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
        stepper.step(position)
    if stream is not None:
        stream.synchronize()
    summed = gradient_vector(run.model) * run.schedule.expected_batch_size
    return (summed - clean).numpy()


def clipped_contributions(model: nn.Module, clipper, x: torch.Tensor,
                          y: torch.Tensor) -> torch.Tensor:
    """Each record's clipped contribution's norm (float64, on the host), as the engine computes
    it: the clipped sum of the batch with every other record's loss weighted 0, so each record
    takes the very routes (and shapes) it takes in the whole batch."""
    norms = []
    for i in range(len(y)):
        weights = torch.zeros(len(y), device=x.device)
        weights[i] = 1.0
        with clipper.watch():
            logits = model(x)
        clipper.clip_and_sum((F.cross_entropy(logits.float(), y, reduction="none") * weights).sum())
        norms.append(gradient_vector(model).norm())
    return torch.stack(norms)


def contribution_problems(norms: torch.Tensor, max_grad_norm: float,
                          slack: float = CONTRIBUTION_SLACK) -> list[str]:
    """The records whose clipped contribution exceeds C by more than `slack` relative."""
    limit = max_grad_norm * (1 + slack)
    return [f"record {i}: its clipped contribution has norm {float(norm):.9g} > C = "
            f"{max_grad_norm:g} (+{float(norm) / max_grad_norm - 1:.1e} relative)"
            for i, norm in enumerate(norms) if norm > limit]


def noise_run(data, device: torch.device, noise_multiplier: float, steps_class, batch: int = 64,
              seed: int = 5):
    """A DP run of `mnist_cnn` on `data` that never moves its weights (lr 0, no momentum), with
    `noise_multiplier` set, and its `steps_class` stepper (`jobs.engine.steps`) on an epoch of one
    batch (the pool's first `batch` records) repeated, so that every padded step is the same
    step: (run, stepper)."""
    from jobs.engine.clipping import PerSampleClipper
    from jobs.engine.training import TrainSettings, on_device, start_run

    settings = TrainSettings(model="mnist_cnn", epochs=1, batch_size=batch, lr=0.0, momentum=0.0,
                             max_grad_norm=1.0, accountant="rdp", epsilon=2.0, delta=1e-5)
    run = start_run(settings, np.ones(len(data.pool_y), bool), data.input_shape,
                    data.num_classes, seed, device)
    run.noise_multiplier = noise_multiplier
    pool_x, pool_y = on_device(data.pool_x, data.pool_y, device)
    stepper = steps_class(run, pool_x, pool_y, torch.arange(len(data.pool_y)),
                          PerSampleClipper(run.model, settings.max_grad_norm))
    stream = stepper.stream
    with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
        stepper.begin_epoch([torch.arange(batch)] * 8)
    return run, stepper


def clean_sum(data, device: torch.device) -> torch.Tensor:
    """The clipped sum (no noise) of `noise_run`'s padded step, from a twin run without noise."""
    from jobs.engine.steps import PaddedSteps

    run, stepper = noise_run(data, device, 0.0, PaddedSteps)
    stepper.step(0)  # the first step runs on exactly the drawn records; the next one padded
    stepper.step(1)
    return gradient_vector(run.model) * run.schedule.expected_batch_size
