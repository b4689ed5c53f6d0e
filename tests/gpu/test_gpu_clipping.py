"""No clipped contribution exceeds C on any GPU route: each per-record route of a convolution
(`jobs.engine.layer_rules.conv2d.METHODS`) and book-keeping, TF32 on and off, NCHW and channels-last,
for both shipped CNNs (`testkit.gpu_checks.clipped_contributions`)."""

from __future__ import annotations

import pytest
import torch

import jobs.engine.clipping as clipping
from jobs.engine.clipping import PerSampleClipper, tf32_convolutions
from jobs.engine.layer_rules.base import _Rule
import jobs.engine.layer_rules.conv2d as conv2d
from jobs.models import build_model
from testkit.gpu_checks import GPU_ONLY, clipped_contributions, contribution_problems

pytestmark = GPU_ONLY

SHAPES = {"mnist_cnn": (1, 28, 28), "cifar10_cnn": (3, 32, 32)}
ROUTES = [*conv2d.METHODS, "book-keep"]
CLIP = 0.01  # small enough that every record is clipped: each contribution is C


def contributions(model_name: str, route: str, tf32: bool, channels_last: bool, monkeypatch):
    keep = route != "book-keep"
    for rule in (_Rule, conv2d._Conv2dRule):
        monkeypatch.setattr(rule, "keeps_samples", lambda self, *args: keep)
    if keep:  # this route wherever it takes the layer, else unfold (any geometry)
        monkeypatch.setattr(conv2d, "_fastest", lambda module, a, g: (
            route if conv2d.takes(route, module) else "unfold"))
    torch.manual_seed(0)
    model = build_model(model_name, SHAPES[model_name], 10).cuda()
    x = torch.rand(32, *SHAPES[model_name], device="cuda")
    if channels_last:
        model, x = model.to(memory_format=torch.channels_last), x.contiguous(
            memory_format=torch.channels_last)
    y = torch.randint(0, 10, (32,), device="cuda")
    with tf32_convolutions(tf32):
        return clipped_contributions(model, PerSampleClipper(model, CLIP, tf32), x, y)


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("tf32", [True, False])
@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("model_name", list(SHAPES))
def test_no_clipped_contribution_exceeds_c(model_name, route, tf32, channels_last, monkeypatch):
    norms = contributions(model_name, route, tf32, channels_last, monkeypatch)
    assert contribution_problems(norms, CLIP) == []


@pytest.mark.parametrize("route", ["grouped", "book-keep"])
def test_the_check_sees_a_sum_larger_than_its_norms_on_the_gpu(route, monkeypatch):
    """The negative control on the card: factors 1e-4 too large are caught on every record."""
    real = clipping.clip_factors
    monkeypatch.setattr(clipping, "clip_factors", lambda norms, c: real(norms, c) * (1 + 1e-4))
    norms = contributions("cifar10_cnn", route, True, False, monkeypatch)
    assert len(contribution_problems(norms, CLIP)) == len(norms)
