"""The linear layer's rule: ghost norms from its input and output gradient (the Gram form on
sequences), its clipped sum one matmul."""

from __future__ import annotations

from typing import cast

import torch
from torch import nn

from jobs.engine.layer_rules.base import Samples, Seen, _Rule, _trainable, set_grad


def _sequence(tensor: torch.Tensor) -> torch.Tensor:
    """(B, …, F) as (B, T, F): every middle axis is a position the weights are shared over."""
    return tensor.reshape(tensor.shape[0], -1, tensor.shape[-1])


class _LinearRule(_Rule):
    def norms(self, seen: Seen, grad: torch.Tensor) -> torch.Tensor:
        module = cast(nn.Linear, seen.module)
        a, g = seen.input, grad
        if a.dim() == 2:  # one position: the ghost norm is exact and costs B·(in + out)
            g_sq = torch.linalg.vecdot(g, g)
            if not _trainable(module.weight):
                return g_sq
            a_sq = torch.linalg.vecdot(a, a)
            if _trainable(module.bias):  # ‖g‖²·‖a‖² + ‖g‖² = ‖g‖²·(‖a‖² + 1)
                a_sq.add_(1.0)
            return g_sq.mul_(a_sq)
        total = torch.zeros(a.shape[0], device=a.device, dtype=torch.float32)
        # A sequence short enough for book-keeping (T·(in + out) < in·out, see `keeps_samples`)
        # has T² < in·out, so the Gram form is the cheaper one.
        a, g = _sequence(a).float(), _sequence(g).float()
        if _trainable(module.weight):
            total += (torch.bmm(a, a.transpose(1, 2)) * torch.bmm(g, g.transpose(1, 2))).sum((1, 2))
        if _trainable(module.bias):
            total += g.sum(1).pow(2).sum(1)
        return total

    def accumulate(self, seen: Seen, grad: torch.Tensor, factors: torch.Tensor) -> None:
        module = cast(nn.Linear, seen.module)
        # (B·T, in) and (B·T, out): one position a record (a vector input) is a plain 2-D matrix.
        a = seen.input if seen.input.dim() == 2 else seen.input.reshape(-1, seen.input.shape[-1])
        weighted = (grad * factors.view((-1,) + (1,) * (grad.dim() - 1))).reshape(-1, grad.shape[-1])
        set_grad(module.weight, weighted.T @ a)
        set_grad(module.bias, weighted.sum(0))

    def per_sample(self, seen: Seen, grad: torch.Tensor) -> Samples:
        module = cast(nn.Linear, seen.module)
        a, g = _sequence(seen.input), _sequence(grad)
        samples = []
        if _trainable(module.weight):
            samples.append((module.weight, torch.bmm(g.transpose(1, 2), a)))  # (B, out, in)
        if _trainable(module.bias):
            samples.append((module.bias, g.sum(1)))
        return samples

