"""Linear stacks (`Flatten`, `Linear`, `Tanh`, `ReLU` in a `Sequential`): DP-SGD's per-record
norms and clipped sums in closed form, with no autograd.

A linear stack's step is a fraction of a millisecond (0.1–0.3 ms for `logistic_regression` at
batch 512 on one CPU thread), so what autograd costs around the arithmetic — recording the graph,
running its engine, a forward hook per layer to see the layer's input — is a visible share of
it.  None of it is needed: every gradient the clipped sum uses has a closed form.  With z the
logits, the gradient of Σ_i cross_entropy(z_i, y_i) at z_i is softmax(z_i) − onehot(y_i); a linear
layer passes g·W back to its input, tanh multiplies by 1 − t², ReLU by 1[t > 0] (t the
activation's output).  Record i's gradient norm is its ghost norm √Σ_l ‖g_il‖²·(‖a_il‖² + 1[bias])
(a_il layer l's input, g_il the gradient at its output; exact for one position per record, as
here), and layer l's clipped sum is (c ⊙ G_l)ᵀ·A_l, one matmul — Bu et al.'s book-keeping.
The clip factors c_i themselves are `jobs.engine.clipping`'s.

Everything is written for (…, B, features): one model's (B, features), or K models' (K, B,
features) stacked by `jobs.engine.stacked`, with weights (…, out, in).
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Optional, TypeGuard

import torch
from torch import nn

#: The layers of a linear stack.
LAYERS = (nn.Flatten, nn.Linear, nn.Tanh, nn.ReLU)


def is_linear_stack(model: nn.Module) -> TypeGuard[nn.Sequential]:
    """Whether `model` is a flat `Sequential` of `LAYERS` with at least one linear layer, any
    `Flatten` over every axis after the batch."""
    if not isinstance(model, nn.Sequential) or not any(isinstance(m, nn.Linear) for m in model):
        return False
    for layer in model:
        if type(layer) not in LAYERS:
            return False
        if isinstance(layer, nn.Flatten) and (layer.start_dim, layer.end_dim) != (1, -1):
            return False
    return True


def _linear(h: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    if weight.dim() == 2:
        return torch.addmm(bias, h, weight.t()) if bias is not None else h @ weight.t()
    transposed = weight.transpose(1, 2)  # K models: (K, B, in) · (K, in, out)
    return torch.baddbmm(bias.unsqueeze(1), h, transposed) if bias is not None \
        else torch.bmm(h, transposed)


def forward(layers: list[nn.Module], weights: list[torch.Tensor],
            biases: list[Optional[torch.Tensor]], x: torch.Tensor
            ) -> tuple[torch.Tensor, list[torch.Tensor], list[Optional[torch.Tensor]]]:
    """The logits, each linear layer's input, and each layer's output where the backward pass
    needs it (the activations'; None elsewhere).  `weights[l]`/`biases[l]` are the l-th linear
    layer's, (out, in) for one model or (K, out, in) for K; `x` is (B, …) or (K, B, …)."""
    batch_dims = weights[0].dim() - 1
    inputs: list[torch.Tensor] = []
    outputs: list[Optional[torch.Tensor]] = []
    h, position = x, 0
    for layer in layers:
        if isinstance(layer, nn.Flatten):
            h = h.flatten(batch_dims)
            outputs.append(None)
        elif isinstance(layer, nn.Linear):
            inputs.append(h)
            h = _linear(h, weights[position], biases[position])
            position += 1
            outputs.append(None)
        else:
            h = torch.tanh(h) if isinstance(layer, nn.Tanh) else torch.relu(h)
            outputs.append(h)
    return h, inputs, outputs


def output_gradients(layers: list[nn.Module], weights: list[torch.Tensor],
                     logits: torch.Tensor, outputs: list[Optional[torch.Tensor]], y: torch.Tensor,
                     record_weights: Optional[torch.Tensor] = None) -> list[torch.Tensor]:
    """The gradient of Σ_i w_i·cross_entropy(logits_i, y_i) at each linear layer's output
    (w_i = `record_weights`, (…, B), or 1), walking the stack backwards from the logits."""
    g = torch.softmax(logits, -1)
    g.scatter_add_(-1, y.unsqueeze(-1), g.new_full((), -1.0).expand(y.shape + (1,)))
    if record_weights is not None:
        g.mul_(record_weights.unsqueeze(-1))
    backwards: list[torch.Tensor] = []  # the last linear layer's first
    for layer, output in zip(reversed(layers), reversed(outputs)):
        if isinstance(layer, nn.Linear):
            backwards.append(g)
            if len(backwards) == len(weights):  # the first linear layer: nothing further back
                break
            g = g @ weights[len(weights) - len(backwards)]
        elif isinstance(layer, nn.Tanh):
            g = torch.ops.aten.tanh_backward(g, output)  # g·(1 − t²), autograd's own kernel
        elif isinstance(layer, nn.ReLU):
            g = torch.ops.aten.threshold_backward(g, output, 0)  # g·1[t > 0]
    return backwards[::-1]


def gradients(layers: list[nn.Module], weights: list[torch.Tensor],
              biases: list[Optional[torch.Tensor]], x: torch.Tensor, y: torch.Tensor,
              record_weights: Optional[torch.Tensor] = None,
              context: AbstractContextManager = nullcontext()
              ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Each linear layer's inputs (…, B, in) and the gradient of Σ_i w_i·cross_entropy at its
    outputs (…, B, out), both in fp32: the forward and backward passes run in `context` (bf16
    autocast, say), the loss's gradient at the logits is taken in fp32 as `jobs.engine.training` takes
    the loss."""
    with torch.no_grad(), context:
        logits, inputs, outputs = forward(layers, weights, biases, x)
        grads = output_gradients(layers, weights, logits.float(), outputs, y, record_weights)
    return [a.float() for a in inputs], [g.float() for g in grads]


def squared_norms(inputs: list[torch.Tensor], grads: list[torch.Tensor],
                  has_bias: list[bool]) -> torch.Tensor:
    """Each record's squared gradient norm (…, B): Σ_l ‖g_il‖²·(‖a_il‖² + 1[bias]), from layer
    l's inputs `inputs[l]` (…, B, in) and the gradients `grads[l]` (…, B, out) at its outputs."""
    squared = None
    for a, g, bias in zip(inputs, grads, has_bias):
        term = torch.linalg.vecdot(a, a)
        if bias:
            term.add_(1.0)
        term.mul_(torch.linalg.vecdot(g, g))
        squared = term if squared is None else squared.add_(term)
    if squared is None:
        raise ValueError("squared norms need at least one linear layer")
    return squared


def weighted_sums(inputs: list[torch.Tensor], grads: list[torch.Tensor], has_bias: list[bool],
                  factors: torch.Tensor) -> tuple[list[torch.Tensor], list[Optional[torch.Tensor]]]:
    """Σ_i factors_i·∇ℓ_i for each linear layer's weight (…, out, in) and bias (…, out; None
    without one): one matmul a layer."""
    weight_sums, bias_sums = [], []
    for a, g, bias in zip(inputs, grads, has_bias):
        weighted = g * factors.unsqueeze(-1)
        weight_sums.append(weighted.transpose(-1, -2) @ a)
        bias_sums.append(weighted.sum(-2) if bias else None)
    return weight_sums, bias_sums
