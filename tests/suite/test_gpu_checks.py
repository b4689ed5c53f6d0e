"""The checks `tests/gpu` runs on a GPU (`testkit.gpu_checks`), run here on the CPU: each must
pass what is right and catch the fault it exists for, injected."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from jobs.datasets import load_dataset
import jobs.engine.clipping as clipping
from jobs.engine.clipping import PerSampleClipper
from jobs.engine.steps import PaddedSteps
from jobs.models import build_model
from testkit.gpu_checks import (clean_sum, clipped_contributions, contribution_problems,
                                drawn_noise, noise_problems, noise_run)

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    return load_dataset("mnist_subset", tmp_path_factory.mktemp("data"), False,
                        test_size=100).first_records(256)


def normal(std: float, seed: int, size: int = 20_000) -> np.ndarray:
    return np.random.default_rng(seed).normal(0.0, std, size)


def test_honest_noise_passes_the_ks_checks():
    assert noise_problems([normal(0.3, 1), normal(0.3, 2), normal(0.3, 3)], 0.3) == []


def test_the_noise_check_catches_replayed_shared_and_mis_scaled_noise():
    draw = normal(0.3, 1)
    assert noise_problems([draw, draw.copy()], 0.3) == ["draws 0 and 1 are the same noise"]
    partly = normal(0.3, 2)
    partly[: len(partly) // 2] = draw[: len(draw) // 2]  # half the coordinates replayed
    assert any("not independent" in p for p in noise_problems([draw, partly], 0.3))
    assert [p[:6] for p in noise_problems([normal(0.36, 4)], 0.3)] == ["draw 0"]  # σ 20 % off
    assert [p[:6] for p in noise_problems([normal(0.3, 5) + 0.03], 0.3)] == ["draw 0"]  # a bias


def test_the_noise_of_padded_steps_is_fresh_and_gaussian(digits):
    """What a graph replays, eagerly (`PaddedSteps`): two steps' noise, read back from their
    gradients (`drawn_noise`), is N(0, σ²C²) each and independent."""
    clean = clean_sum(digits, CPU)
    run, stepper = noise_run(digits, CPU, 1.5, PaddedSteps)
    stepper.step(0)
    draws = [drawn_noise(run, stepper, position, clean) for position in (1, 2)]
    assert noise_problems(draws, run.noise_std) == []


def test_noise_replayed_from_one_generator_state_fails_the_check(digits):
    """The fault an unregistered generator makes in a CUDA graph (each replay the captured
    draw), made here by restoring the noise generator's state before the second step."""
    clean = clean_sum(digits, CPU)
    run, stepper = noise_run(digits, CPU, 1.5, PaddedSteps)
    stepper.step(0)
    state = run.rng.noise.get_state()
    first = drawn_noise(run, stepper, 1, clean)
    run.rng.noise.set_state(state)
    second = drawn_noise(run, stepper, 2, clean)
    problems = noise_problems([first, second], run.noise_std)
    assert problems and all("draws 0 and 1" in p for p in problems)


def contributions(route: str, monkeypatch) -> tuple[torch.Tensor, float]:
    """Every record's clipped contribution through `mnist_cnn` on the CPU, each layer keeping
    per-record gradients ("keep") or book-keeping ("book-keep"), C small enough to clip all."""
    from jobs.engine.layer_rules.base import _Rule
    from jobs.engine.layer_rules.conv2d import _Conv2dRule

    keep = route == "keep"
    for rule in (_Rule, _Conv2dRule):
        monkeypatch.setattr(rule, "keeps_samples", lambda self, *args: keep)
    torch.manual_seed(0)
    model = build_model("mnist_cnn", (1, 28, 28), 10)
    x, y = torch.rand(8, 1, 28, 28), torch.randint(0, 10, (8,))
    clip = 0.01
    return clipped_contributions(model, PerSampleClipper(model, clip), x, y), clip


@pytest.mark.parametrize("route", ["keep", "book-keep"])
def test_every_clipped_contribution_is_c_on_both_cpu_routes(monkeypatch, route):
    norms, clip = contributions(route, monkeypatch)
    assert contribution_problems(norms, clip) == []
    np.testing.assert_allclose(norms.numpy(), clip, rtol=1e-5)  # every record clipped: exactly C


@pytest.mark.parametrize("route", ["keep", "book-keep"])
def test_a_contribution_above_c_is_caught(monkeypatch, route):
    """A sum 1e-4 larger than its norms allow (as TF32 in a book-keeping sum, against fp32
    norms, made it ~1e-3): every record is named."""
    real = clipping.clip_factors
    monkeypatch.setattr(clipping, "clip_factors", lambda norms, c: real(norms, c) * (1 + 1e-4))
    norms, clip = contributions(route, monkeypatch)
    problems = contribution_problems(norms, clip)
    assert len(problems) == len(norms) and "+1.0e-04 relative" in problems[0]
