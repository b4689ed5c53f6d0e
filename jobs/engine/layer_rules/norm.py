"""GroupNorm's and LayerNorm's rule: their small per-record gradients, always materialised."""

from __future__ import annotations

from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from jobs.engine.layer_rules.base import Samples, Seen, _Rule, _trainable


class _NormRule(_Rule):
    """GroupNorm and LayerNorm: the affine weight's gradient is Σ g·x̂ over the positions."""

    @staticmethod
    def _normalized(module: nn.GroupNorm | nn.LayerNorm, a: torch.Tensor) -> torch.Tensor:
        if isinstance(module, nn.GroupNorm):
            return F.group_norm(a, module.num_groups, eps=module.eps)
        return F.layer_norm(a, module.normalized_shape, eps=module.eps)

    @staticmethod
    def _per_record(module: nn.GroupNorm | nn.LayerNorm, values: torch.Tensor) -> torch.Tensor:
        """Sum a (B, …) tensor over the positions the affine parameters are shared across."""
        if isinstance(module, nn.GroupNorm):  # (B, C, *spatial) → (B, C)
            return values.reshape(values.shape[0], values.shape[1], -1).sum(2)
        shape = module.normalized_shape  # (B, *, *normalized_shape) → (B, *normalized_shape)
        return values.reshape(values.shape[0], -1, *shape).sum(1)

    def per_sample(self, seen: Seen, grad: torch.Tensor) -> Samples:
        module = cast(nn.GroupNorm | nn.LayerNorm, seen.module)
        samples: Samples = []
        if _trainable(module.weight):
            samples.append((module.weight, self._per_record(module, grad * self._normalized(module, seen.input))))
        if _trainable(module.bias):
            samples.append((module.bias, self._per_record(module, grad)))
        return samples

    def keeps_samples(self, seen: Seen, grad: torch.Tensor, parameters: int) -> bool:
        return True  # one float per channel and record: never larger than the output gradient
