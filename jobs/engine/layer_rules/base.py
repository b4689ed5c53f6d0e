"""What every layer type's rule shares: what a layer saw (`Seen`), the rule's contract (`_Rule`),
and the per-record gradient arithmetic the engine runs on any layer's (`squared_norms`,
`weighted_sum`, `set_grad`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, TypeGuard

import torch
from torch import nn


@dataclass
class Seen:
    """What one layer saw in the forward pass: its input (detached; the same storage autograd
    saves for the layer's backward, so holding it costs nothing until then)."""

    module: nn.Module
    input: torch.Tensor


#: One layer's per-record gradients: (parameter, (B, *parameter.shape)) for each trainable one.
Samples = list[tuple[torch.Tensor, torch.Tensor]]


class _Rule:
    """Per-sample squared gradient norms and the clipped gradient sum of one layer type, by
    book-keeping (`norms` then `accumulate`, from the input and the output gradient) or from the
    per-record gradients (`per_sample`), whichever `keeps_samples` finds smaller."""

    def norms(self, seen: Seen, grad: torch.Tensor) -> torch.Tensor:  # (B,)
        raise NotImplementedError

    def accumulate(self, seen: Seen, grad: torch.Tensor, factors: torch.Tensor) -> None:
        """Write Σ_i factors_i·∇ℓ_i into each trainable parameter's `.grad`."""
        raise NotImplementedError

    def per_sample(self, seen: Seen, grad: torch.Tensor) -> Samples:
        """Each record's gradient of each trainable parameter."""
        raise NotImplementedError

    def keeps_samples(self, seen: Seen, grad: torch.Tensor, parameters: int) -> bool:
        """Whether the layer's per-record gradients (B × its `parameters` trainable floats) are
        no larger than what book-keeping holds until the clip factors are known (its output
        gradient and its input).  Both sides grow with B: the choice is the same at every B."""
        return grad.shape[0] * parameters <= grad.numel() + seen.input.numel()


def _around_batch(per_record: torch.Tensor) -> tuple[torch.Tensor, list[int]]:
    """`per_record` read in its memory order as (A, B, F) — the axes stored outside its batch
    axis, the batch, the axes inside — and the order of those non-batch axes.  A permuted
    view of a dense tensor is read without a copy, whether its batch axis is outermost
    (per-record gradients taken channels-last) or not (shifted products: (kh, kw, B, …))."""
    strides = per_record.stride()
    order = sorted(range(per_record.dim()), key=lambda axis: -strides[axis])
    dense = per_record.permute(*order)
    if not dense.is_contiguous():
        dense, order = per_record.contiguous(), list(range(per_record.dim()))
    batch = order.index(0)
    view = dense.reshape(math.prod(dense.shape[:batch]), dense.shape[batch], -1)
    return view, order[:batch] + order[batch + 1:]


def squared_norms(samples: Samples, batch: int, device: torch.device) -> torch.Tensor:
    total = torch.zeros(batch, device=device, dtype=torch.float32)
    for _, per_record in samples:
        view, _ = _around_batch(per_record)
        # One reduction per record (a squared copy first cost a GPU step 6 %).
        total += torch.linalg.vector_norm(view, dim=(0, 2)).float().square()
    return total


def weighted_sum(factors: torch.Tensor, per_record: torch.Tensor) -> torch.Tensor:
    """Σ_i factors_i·per_record_i, as matrix-vector products over the tensor's memory order;
    the result keeps the per-record layout when the batch axis is outermost, else it is
    made contiguous (a parameter-sized copy)."""
    view, order = _around_batch(per_record)
    shape = [per_record.shape[axis] for axis in order]
    total = torch.matmul(factors.to(view.dtype), view).view(shape)  # (A, B)·(B) per outer row
    total = total.permute(*sorted(range(len(order)), key=lambda axis: order[axis]))
    return total if view.shape[0] == 1 else total.contiguous()

def set_grad(parameter: Optional[torch.Tensor], value: torch.Tensor) -> None:
    if parameter is not None and parameter.requires_grad:
        parameter.grad = value if value.shape == parameter.shape and value.dtype == parameter.dtype \
            else value.reshape(parameter.shape).to(parameter.dtype)


def _trainable(parameter: Optional[torch.Tensor]) -> TypeGuard[torch.Tensor]:
    return parameter is not None and parameter.requires_grad

