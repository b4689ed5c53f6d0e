"""Per-sample gradient clipping in one backward pass, with a rule chosen per layer.

DP-SGD needs Σ_i clip(∇ℓ_i) over a batch: each record's gradient scaled to norm ≤ C, then
summed.  Opacus's default materialises every record's gradient of every weight (B × params
floats), which for a wide MLP costs 37–69× a plain step.  This engine never does that where a
cheaper route exists:

* **Norms**, per layer from what the layer saw: ‖a_i‖·‖g_i‖ for a linear layer on a vector input
  (the "ghost norm": a_i the layer's input, g_i the gradient at its output); for a sequence or a
  convolution the ghost form Σ_{t,t'} (a_t·a_t')(g_t·g_t') or the record's materialised gradient
  (T² against the layer's parameter count); normalisation layers' small gradients materialised.
* **Clipped sum** Σ_i c_i·∇ℓ_i, per layer from whichever is smaller to keep until the clip factors
  c_i are known: the layer's output gradient (with the input it already holds), one weighted
  Σ_i c_i·a_iᵀg_i at the end (book-keeping, Bu et al. 2023), or each record's gradient of the
  layer's own weights (896 floats a record for a 3→32 conv against 32 768 for its output
  gradient).  The choice compares per-record sizes, so it is the same at every batch size: in the
  shipped models only the first convolutions keep per-record gradients.
* **One backward pass**: a layer that keeps per-record gradients takes them as its output
  gradient arrives (an identity autograd node after the layer, a "tap", hands it over) and
  releases its output gradient and input at once; a book-keeping layer's output gradient is asked
  of autograd by its gradient edge, with no tap (a Python autograd node costs ≈ 0.015 ms a step).
  Layers' outputs are never held and the unclipped weight gradients never computed.
* **Linear stacks** (`Flatten`, `Linear`, `Tanh`, `ReLU`) take a closed-form step with no
  autograd at all (`jobs.linear_stack`, `clip_and_sum_cross_entropy`): autograd's bookkeeping was
  most of their cost.

The mechanism is exactly Opacus's: clip factor min(1, C / (‖∇ℓ_i‖ + 1e-6)) on the gradient of
each record's own loss, so `jobs.training` can add the same Gaussian noise and the accountant's
ε is unchanged.
"""

from __future__ import annotations

import functools
import math
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Iterator, Optional

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.graph import GradientEdge, get_gradient_edge

from jobs import linear_stack

#: Largest number of floats one chunk of a per-sample computation may hold (≈ 64 MB):
#: convolutions are processed a slice of the batch at a time below it.
CHUNK_FLOATS = 1 << 24

#: Added to each norm before dividing, as Opacus does, so the two engines clip identically.
NORM_EPSILON = 1e-6


@dataclass
class _Seen:
    """What one layer saw in the forward pass: its input (detached; the same storage autograd
    saves for the layer's backward, so holding it costs nothing until then)."""

    module: nn.Module
    input: torch.Tensor


#: One layer's per-record gradients: (parameter, (B, *parameter.shape)) for each trainable one.
Samples = list[tuple[nn.Parameter, torch.Tensor]]


class _Rule:
    """Per-sample squared gradient norms and the clipped gradient sum of one layer type, by
    book-keeping (`norms` then `accumulate`, from the input and the output gradient) or from the
    per-record gradients (`per_sample`), whichever `keeps_samples` finds smaller."""

    def norms(self, seen: _Seen, grad: torch.Tensor) -> torch.Tensor:  # (B,)
        raise NotImplementedError

    def accumulate(self, seen: _Seen, grad: torch.Tensor, factors: torch.Tensor) -> None:
        """Write Σ_i factors_i·∇ℓ_i into each trainable parameter's `.grad`."""
        raise NotImplementedError

    def per_sample(self, seen: _Seen, grad: torch.Tensor) -> Samples:
        """Each record's gradient of each trainable parameter."""
        raise NotImplementedError

    def keeps_samples(self, seen: _Seen, grad: torch.Tensor, parameters: int) -> bool:
        """Whether the layer's per-record gradients (B × its `parameters` trainable floats) are
        no larger than what book-keeping holds until the clip factors are known (its output
        gradient and its input).  Both sides grow with B: the choice is the same at every B."""
        return grad.shape[0] * parameters <= grad.numel() + seen.input.numel()


def _squared_norms(samples: Samples, batch: int, device: torch.device) -> torch.Tensor:
    total = torch.zeros(batch, device=device, dtype=torch.float32)
    for _, per_record in samples:
        total += per_record.float().pow(2).reshape(batch, -1).sum(1)
    return total


def _sequence(tensor: torch.Tensor) -> torch.Tensor:
    """(B, …, F) as (B, T, F): every middle axis is a position the weights are shared over."""
    return tensor.reshape(tensor.shape[0], -1, tensor.shape[-1])


def _set_grad(parameter: Optional[nn.Parameter], value: torch.Tensor) -> None:
    if parameter is not None and parameter.requires_grad:
        parameter.grad = value if value.shape == parameter.shape and value.dtype == parameter.dtype \
            else value.reshape(parameter.shape).to(parameter.dtype)


def _trainable(parameter: Optional[nn.Parameter]) -> bool:
    return parameter is not None and parameter.requires_grad


class _LinearRule(_Rule):
    def norms(self, seen: _Seen, grad: torch.Tensor) -> torch.Tensor:
        module: nn.Linear = seen.module
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

    def accumulate(self, seen: _Seen, grad: torch.Tensor, factors: torch.Tensor) -> None:
        module: nn.Linear = seen.module
        # (B·T, in) and (B·T, out): one position a record (a vector input) is a plain 2-D matrix.
        a = seen.input if seen.input.dim() == 2 else seen.input.reshape(-1, seen.input.shape[-1])
        weighted = (grad * factors.view((-1,) + (1,) * (grad.dim() - 1))).reshape(-1, grad.shape[-1])
        _set_grad(module.weight, weighted.T @ a)
        _set_grad(module.bias, weighted.sum(0))

    def per_sample(self, seen: _Seen, grad: torch.Tensor) -> Samples:
        module: nn.Linear = seen.module
        a, g = _sequence(seen.input), _sequence(grad)
        samples = []
        if _trainable(module.weight):
            samples.append((module.weight, torch.bmm(g.transpose(1, 2), a)))  # (B, out, in)
        if _trainable(module.bias):
            samples.append((module.bias, g.sum(1)))
        return samples


class _Conv2dRule(_Rule):
    """Norms either from L×L Gram matrices of the unfolded input and the output gradient (the
    ghost form, for small feature maps) or from each record's weight gradient, computed for a
    slice of the batch at once as one convolution with one group per record (measured faster
    on a CPU than unfold + batched matmul for every conv of the shipped models)."""

    @staticmethod
    def _ghost(module: nn.Conv2d, positions: int) -> bool:
        fan_in = module.in_channels * math.prod(module.kernel_size)
        return positions * (module.out_channels + fan_in) < module.out_channels * fan_in

    @staticmethod
    def _unfold(module: nn.Conv2d, a: torch.Tensor) -> torch.Tensor:
        """(b, C_in·kh·kw, L): each output position's receptive field as a column, in
        `F.unfold`'s order.  Without dilation, as strided views and one copy: 1.5–3× faster on
        a CPU than `F.unfold`, whose im2col loops over the batch."""
        if module.dilation != (1, 1):
            return F.unfold(a, module.kernel_size, dilation=module.dilation,
                            padding=module.padding, stride=module.stride)
        (kh, kw), (sh, sw), (ph, pw) = module.kernel_size, module.stride, module.padding
        windows = F.pad(a, (pw, pw, ph, ph)).unfold(2, kh, sh).unfold(3, kw, sw)
        b, c, rows, cols = windows.shape[:4]  # (b, C, H_out, W_out, kh, kw)
        return windows.permute(0, 1, 4, 5, 2, 3).reshape(b, c * kh * kw, rows * cols)

    @classmethod
    def _gram_norms(cls, module: nn.Conv2d, a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        u = cls._unfold(module, a).float()  # (b, C_in·kh·kw, L)
        return (torch.bmm(u.transpose(1, 2), u) * torch.bmm(g.transpose(1, 2), g)).sum((1, 2))

    @staticmethod
    def _grouped_weights(module: nn.Conv2d, a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """(b, C_out, C_in, kh, kw): each record's weight gradient, from (b, C_in, H, W) inputs
        and (b, C_out, H_out, W_out) output gradients."""
        records = a.shape[0]
        per_record = torch.nn.grad.conv2d_weight(
            a.reshape(1, -1, *a.shape[2:]),
            (records * module.out_channels, module.in_channels, *module.kernel_size),
            g.reshape(1, -1, *g.shape[2:]), stride=module.stride, padding=module.padding,
            dilation=module.dilation, groups=records)
        return per_record.reshape(records, *module.weight.shape)

    @staticmethod
    def _slice(grad: torch.Tensor, floats_per_record: int) -> int:
        """Records per slice so that one slice's work stays under `CHUNK_FLOATS` and under the
        layer's output gradient, which is already in memory: the work never doubles the peak."""
        return max(1, min(CHUNK_FLOATS, grad.numel()) // floats_per_record)

    def norms(self, seen: _Seen, grad: torch.Tensor) -> torch.Tensor:
        module: nn.Conv2d = seen.module
        batch = grad.shape[0]
        g = grad.reshape(batch, module.out_channels, -1)  # (B, C_out, L)
        positions = g.shape[2]
        fan_in = module.in_channels * math.prod(module.kernel_size)
        ghost = self._ghost(module, positions)
        per_record = fan_in * positions + (positions * positions if ghost
                                           else module.out_channels * fan_in)
        step = self._slice(grad, per_record)
        total = torch.zeros(batch, device=grad.device, dtype=torch.float32)
        if _trainable(module.weight):
            for start in range(0, batch, step):
                a, gc = seen.input[start:start + step], grad[start:start + step]
                total[start:start + step] += (
                    self._gram_norms(module, a, gc.reshape(len(gc), module.out_channels, -1).float())
                    if ghost else
                    self._grouped_weights(module, a, gc).reshape(len(gc), -1).float().pow(2).sum(1))
        if _trainable(module.bias):
            total += g.float().sum(2).pow(2).sum(1)
        return total

    def accumulate(self, seen: _Seen, grad: torch.Tensor, factors: torch.Tensor) -> None:
        module: nn.Conv2d = seen.module
        weighted = grad * factors.to(grad.dtype).view(-1, 1, 1, 1)
        if _trainable(module.weight):  # the plain weight gradient of the re-weighted outputs
            _set_grad(module.weight, torch.nn.grad.conv2d_weight(
                seen.input, module.weight.shape, weighted, stride=module.stride,
                padding=module.padding, dilation=module.dilation, groups=module.groups))
        _set_grad(module.bias, weighted.sum((0, 2, 3)))

    def per_sample(self, seen: _Seen, grad: torch.Tensor) -> Samples:
        module: nn.Conv2d = seen.module
        samples = []
        if _trainable(module.weight):
            weights = grad.new_empty(grad.shape[0], *module.weight.shape)
            fan_in = module.in_channels * math.prod(module.kernel_size)
            step = self._slice(grad, fan_in * math.prod(grad.shape[2:]) + module.weight.numel())
            for start in range(0, grad.shape[0], step):
                weights[start:start + step] = self._grouped_weights(
                    module, seen.input[start:start + step], grad[start:start + step])
            samples.append((module.weight, weights))
        if _trainable(module.bias):
            samples.append((module.bias, grad.sum((2, 3))))
        return samples


class _NormRule(_Rule):
    """GroupNorm and LayerNorm: the affine weight's gradient is Σ g·x̂ over the positions."""

    @staticmethod
    def _normalized(module: nn.Module, a: torch.Tensor) -> torch.Tensor:
        if isinstance(module, nn.GroupNorm):
            return F.group_norm(a, module.num_groups, eps=module.eps)
        return F.layer_norm(a, module.normalized_shape, eps=module.eps)

    @staticmethod
    def _per_record(module: nn.Module, values: torch.Tensor) -> torch.Tensor:
        """Sum a (B, …) tensor over the positions the affine parameters are shared across."""
        if isinstance(module, nn.GroupNorm):  # (B, C, *spatial) → (B, C)
            return values.reshape(values.shape[0], values.shape[1], -1).sum(2)
        shape = module.normalized_shape  # (B, *, *normalized_shape) → (B, *normalized_shape)
        return values.reshape(values.shape[0], -1, *shape).sum(1)

    def per_sample(self, seen: _Seen, grad: torch.Tensor) -> Samples:
        module = seen.module
        samples = []
        if _trainable(module.weight):
            samples.append((module.weight, self._per_record(module, grad * self._normalized(module, seen.input))))
        if _trainable(module.bias):
            samples.append((module.bias, self._per_record(module, grad)))
        return samples

    def keeps_samples(self, seen: _Seen, grad: torch.Tensor, parameters: int) -> bool:
        return True  # one float per channel and record: never larger than the output gradient


class _Tap(torch.autograd.Function):
    """Identity on a layer's output; in the backward pass it hands the output's gradient to
    `take` and passes it on unchanged.  Its second input, a scalar `anchor`, is what the clipper
    asks autograd for, so that autograd runs every tap and computes no weight gradient."""

    @staticmethod
    def forward(ctx, output: torch.Tensor, anchor: torch.Tensor, take) -> torch.Tensor:
        ctx.take = take
        return output.view_as(output)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        ctx.take(grad)
        return grad, None, None


#: The layer types the engine can clip, by class.  A model with trainable parameters anywhere
#: else is refused (`check_supported`), never silently clipped wrong.
RULES: dict[type, _Rule] = {
    nn.Linear: _LinearRule(),
    nn.Conv2d: _Conv2dRule(),
    nn.GroupNorm: _NormRule(),
    nn.LayerNorm: _NormRule(),
}


def _rule_for(module: nn.Module) -> Optional[_Rule]:
    return RULES.get(type(module))


def check_supported(model: nn.Module) -> list[str]:
    """Why the engine cannot clip `model` (empty when it can): one line per offending layer."""
    problems = []
    for name, module in model.named_modules():
        own = [p for p in module.parameters(recurse=False) if p.requires_grad]
        if not own:
            continue
        if _rule_for(module) is None:
            supported = ", ".join(cls.__name__ for cls in RULES)
            problems.append(f"layer {name or '(root)'} ({type(module).__name__}) has trainable "
                            f"parameters but no per-sample rule (supported: {supported})")
        elif isinstance(module, nn.Conv2d) and (module.groups != 1 or module.padding_mode != "zeros"
                                                or isinstance(module.padding, str)):
            problems.append(f"layer {name} (Conv2d): only groups=1, zero padding given as numbers "
                            "are supported")
    return problems


class PerSampleClipper:
    """Clips each record's gradient of one model to `max_grad_norm` and sums them.

    Use as::

        with clipper.watch():
            logits = model(x)
        norms = clipper.clip_and_sum(loss_sum)   # loss_sum = Σ_i ℓ_i, reduction "sum"

    after which every trainable parameter's `.grad` holds Σ_i min(1, C/(‖∇ℓ_i‖+1e-6))·∇ℓ_i.
    """

    def __init__(self, model: nn.Module, max_grad_norm: float):
        problems = check_supported(model)
        if problems:
            raise ValueError("cannot clip per sample: " + "; ".join(problems))
        self.max_grad_norm = float(max_grad_norm)
        self._layers = [m for m in model.modules() if _rule_for(m) is not None
                        and any(p.requires_grad for p in m.parameters(recurse=False))]
        # Asked every step: looked up once (a module's parameters() is slow next to a small step).
        self._parameters = [p for m in self._layers for p in m.parameters(recurse=False)
                            if p.requires_grad]
        self._sizes = {id(m): sum(p.numel() for p in m.parameters(recurse=False) if p.requires_grad)
                       for m in self._layers}
        self._seen: list[Optional[_Seen]] = []
        self._anchor: Optional[torch.Tensor] = None
        # The book-keeping layers' output gradient edges, by their place in `_seen`.
        self._edges: list[tuple[int, GradientEdge]] = []
        # Filled during the backward pass, per layer (by its place in `_seen`): its squared
        # per-record norms, and what its clipped sum is taken from once the factors are known.
        self._squared: dict[int, torch.Tensor] = {}
        self._kept: dict[int, tuple[_Seen, torch.Tensor] | Samples] = {}
        # A linear stack, every parameter trainable, has its clipped sum in closed form.
        self._stack: Optional[list[nn.Module]] = (
            list(model) if linear_stack.is_linear_stack(model)
            and all(p.requires_grad for p in model.parameters()) else None)

    @contextmanager
    def watch(self) -> Iterator[None]:
        """Record each layer's input during one forward pass, and mark how its output's gradient
        is to be handed over: a layer that keeps per-record gradients gets a tap after its
        output, through which the backward pass hands the gradient over as soon as it is known;
        a book-keeping layer keeps its output gradient until the end anyway, so autograd is asked
        for it directly, by the output's gradient edge (which holds the layer's autograd node,
        not the output)."""
        self._seen, self._squared, self._kept, self._edges = [], {}, {}, []
        self._anchor = None

        def record(module: nn.Module, inputs: tuple, output: torch.Tensor) -> Optional[torch.Tensor]:
            if not output.requires_grad:
                return None
            index = len(self._seen)
            # fp32 whatever the forward ran in (bf16 autocast): norms and sums are taken in fp32.
            seen = _Seen(module, inputs[0].detach().float())
            self._seen.append(seen)
            if not _rule_for(module).keeps_samples(seen, output, self._sizes[id(module)]):
                self._edges.append((index, get_gradient_edge(output)))
                return None
            if self._anchor is None:
                self._anchor = torch.zeros((), device=output.device, requires_grad=True)
            return _Tap.apply(output, self._anchor, functools.partial(self._take, index, True))

        handles = [layer.register_forward_hook(record) for layer in self._layers]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()

    def _take(self, index: int, keeps_samples: bool, grad: torch.Tensor) -> None:
        """One layer's output gradient: its norms now, and either its per-record gradients (the
        input and the output gradient then released; during the backward pass, through its
        tap) or both kept for book-keeping (after the backward pass)."""
        grad = grad.float()  # a no-op in fp32; after a bf16 forward, norms and sums in fp32
        seen = self._seen[index]
        self._seen[index] = None
        rule = _rule_for(seen.module)
        if keeps_samples:
            samples = rule.per_sample(seen, grad)
            self._squared[index] = _squared_norms(samples, grad.shape[0], grad.device)
            self._kept[index] = samples
        else:
            self._squared[index] = rule.norms(seen, grad)
            self._kept[index] = (seen, grad)

    def clip_and_sum(self, loss_sum: torch.Tensor) -> torch.Tensor:
        """Set each parameter's `.grad` to the clipped sum; return the per-sample norms (B,)."""
        seen, anchor, edges = self._seen, self._anchor, self._edges
        self._anchor, self._edges = None, []
        if len({id(s.module) for s in seen}) != len(seen):
            self._seen = []
            raise ValueError("a layer ran twice in one forward pass: per-sample norms of shared "
                             "weights are not supported")
        for parameter in self._parameters:  # the previous step's sums: free them first
            parameter.grad = None
        try:
            # Autograd is asked for the book-keeping layers' output gradients and, when a layer
            # has a tap, for the anchor (so that it runs every tap); never for a weight gradient.
            wanted = [edge for _, edge in edges] + ([anchor] if anchor is not None else [])
            grads = torch.autograd.grad(loss_sum, wanted, allow_unused=True) if wanted else ()
            for (index, _), grad in zip(edges, grads):
                if grad is not None:
                    self._take(index, False, grad)
            if len(self._squared) != len(seen):
                raise ValueError("a layer's output did not reach the loss: its per-sample norms "
                                 "are unknown")
            squared = [self._squared[index] for index in sorted(self._squared)]
            norms = (squared[0] if len(squared) == 1 else torch.stack(squared).sum(0)).sqrt()
            factors = clip_factors(norms, self.max_grad_norm)
            for index in sorted(self._kept):
                kept = self._kept.pop(index)  # released layer by layer
                if isinstance(kept, tuple):
                    _rule_for(kept[0].module).accumulate(kept[0], kept[1], factors)
                else:
                    for parameter, per_record in kept:
                        _set_grad(parameter, torch.einsum("b,b...->...",
                                                          factors.to(per_record.dtype), per_record))
            return norms
        finally:
            self._seen, self._squared, self._kept = [], {}, {}

    @property
    def closed_form(self) -> bool:
        """Whether `clip_and_sum_cross_entropy` can take this model's steps (a linear stack)."""
        return self._stack is not None

    def clip_and_sum_cross_entropy(self, x: torch.Tensor, y: torch.Tensor,
                                   context: AbstractContextManager = nullcontext()) -> torch.Tensor:
        """A linear stack's forward pass and clipped sum for the loss Σ_i cross_entropy(model(x_i),
        y_i), all in closed form (`jobs.linear_stack`): no autograd graph, no hooks, the same
        norms and factors.  The passes run in `context` (bf16 autocast, say); norms and sums are
        fp32.  Sets each parameter's `.grad` as `clip_and_sum` does; returns the per-sample norms."""
        linears = [layer for layer in self._stack if isinstance(layer, nn.Linear)]
        weights, biases = [m.weight for m in linears], [m.bias for m in linears]
        inputs, grads = linear_stack.gradients(self._stack, weights, biases, x, y, context=context)
        weight_sums, bias_sums, norms = clipped_sums(inputs, grads, [b is not None for b in biases],
                                                     self.max_grad_norm)
        for module, weight_sum, bias_sum in zip(linears, weight_sums, bias_sums):
            module.weight.grad = weight_sum
            if bias_sum is not None:
                module.bias.grad = bias_sum
        return norms

    def zero_sum(self) -> None:
        """An empty Poisson batch: the clipped sum is zero (the noise is added all the same)."""
        for parameter in self._parameters:
            parameter.grad = torch.zeros_like(parameter)


def clip_factors(norms: torch.Tensor, max_grad_norm: float) -> torch.Tensor:
    """Opacus's clip factor min(1, C / (‖g‖ + 1e-6)) (as 1/(‖g‖ + 1e-6)·C, in place: these few
    kernels on B floats are a visible part of a small model's step)."""
    return (norms + NORM_EPSILON).reciprocal_().mul_(max_grad_norm).clamp_max_(1.0)


def clipped_sums(inputs: list[torch.Tensor], grads: list[torch.Tensor], has_bias: list[bool],
                 max_grad_norm: Optional[float], weights: Optional[torch.Tensor] = None
                 ) -> tuple[list[torch.Tensor], list[Optional[torch.Tensor]], torch.Tensor]:
    """Per model k: Σ_i c_ki·∇ℓ_ki for each linear layer's weight and bias, and the norms (a
    linear stack's clipped sum in closed form, `jobs.linear_stack`; a lone model is the same
    without the leading K axis).

    `inputs[l]` (K, B, in) and `grads[l]` (K, B, out) are layer l's inputs and the gradients of
    the summed loss at its outputs, in fp32.  Record i of model k has the gradient norm
    √Σ_l ‖g_kil‖²·(‖a_kil‖² + 1[bias]) (ghost norms: exact for one position per record), and
    c_ki = min(1, C/(norm + 1e-6)) (Opacus's factor), or `weights` (K, B) instead when
    `max_grad_norm` is None (no clipping).
    """
    norms = linear_stack.squared_norms(inputs, grads, has_bias).sqrt_()
    factors = clip_factors(norms, max_grad_norm) if max_grad_norm is not None else weights
    return (*linear_stack.weighted_sums(inputs, grads, has_bias, factors), norms)
