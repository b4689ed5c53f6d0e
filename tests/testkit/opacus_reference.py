"""Opacus's answer for a clipped sum of per-record gradients, the reference the clipping engine
(tests/test_jobs/engine/test_clipping.py) and the stacked trainer (tests/test_jobs/engine/test_stacked.py) are held to.

Opacus's `GradSampleModule` (hooks mode) materialises every record's gradient, and Opacus's
`DPOptimizer.clip_and_accumulate` rule is applied to those here, written out.
"""

from __future__ import annotations

import copy
import warnings

import torch
from opacus import GradSampleModule
from torch import nn


def opacus_clipped_sum(model: nn.Module, x: torch.Tensor, y: torch.Tensor,
                       max_grad_norm: float) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """(per-record norms, clipped sums): per-sample gradients of the summed cross-entropy by
    hooks (on a copy of `model`), norms over all parameters, factor min(1, C/(‖g‖ + 1e-6)),
    Σ_i factor_i·g_i for each trainable parameter in order."""
    module = GradSampleModule(copy.deepcopy(model), loss_reduction="sum")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nn.functional.cross_entropy(module(x), y, reduction="sum").backward()
    samples = [p.grad_sample for p in module.parameters() if p.requires_grad]
    norms = torch.stack([g.reshape(len(x), -1).norm(dim=1) for g in samples], 1).norm(dim=1)
    factors = (max_grad_norm / (norms + 1e-6)).clamp(max=1.0)
    return norms, [torch.einsum("i,i...", factors, g) for g in samples]
