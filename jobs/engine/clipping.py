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
  shipped models only the first convolutions keep per-record gradients.  On a CPU so does every
  convolution but one whose norms take the Gram form over receptive fields too large to gather
  (`cifar10_cnn`'s 8 × 8 layers): elsewhere its per-record gradients are computed for the norms
  anyway, or by one batched matmul, and keeping them spares a second weight gradient.
* **One backward pass**: a layer that keeps per-record gradients takes them as its output
  gradient arrives (an identity autograd node after the layer, a "tap", hands it over) and
  releases its output gradient and input at once; a book-keeping layer's output gradient is asked
  of autograd by its gradient edge, with no tap (a Python autograd node costs ≈ 0.015 ms a step).
  Layers' outputs are never held and the unclipped weight gradients never computed.
* **Linear stacks** (`Flatten`, `Linear`, `Tanh`, `ReLU`) take a closed-form step with no
  autograd at all (`jobs.engine.linear_stack`, `clip_and_sum_cross_entropy`): autograd's bookkeeping was
  most of their cost.
* **On a GPU** memory is plentiful and what costs is kernels: every convolution keeps its
  per-record gradients (up to `GPU_CHUNK_FLOATS` of them, never sliced below that), so its
  weight gradient is never computed twice and its norm and its clipped sum are read from the
  same tensor; each convolution's per-record gradients come from whichever of cuDNN's grouped
  convolution, unfold or rows + batched matmul, or shifted products measured fastest for its
  shape on this card (`_fastest`: on an H100, 2× either way depending on the layer, and 16× once), in
  TF32 when asked (`tf32_products`, `tf32_convolutions`).  A layer that book-keeps takes its norms
  and its clipped sum in fp32 whatever is asked (`full_precision`): they are different products.

The mechanism is exactly Opacus's: clip factor min(1, C / (‖∇ℓ_i‖ + 1e-6)) on the gradient of
each record's own loss, so `jobs.engine.training` can add the same Gaussian noise and the accountant's
ε is unchanged.
"""

from __future__ import annotations

import functools
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Iterator, Optional

import torch
from torch import nn
from torch.autograd.graph import GradientEdge, get_gradient_edge

from jobs.engine import linear_stack
from jobs.engine.layer_rules import check_supported, rule_for, watched_rule
from jobs.engine.layer_rules.base import Samples, Seen, set_grad, squared_norms, weighted_sum

#: Added to each norm before dividing, as Opacus does, so the two engines clip identically.
NORM_EPSILON = 1e-6


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


class PerSampleClipper:
    """Clips each record's gradient of one model to `max_grad_norm` and sums them.

    Use as::

        with clipper.watch():
            logits = model(x)
        norms = clipper.clip_and_sum(loss_sum)   # loss_sum = Σ_i ℓ_i, reduction "sum"

    after which every trainable parameter's `.grad` holds Σ_i min(1, C/(‖∇ℓ_i‖+1e-6))·∇ℓ_i.
    """

    def __init__(self, model: nn.Module, max_grad_norm: float, tf32: bool = False):
        problems = check_supported(model)
        if problems:
            raise ValueError("cannot clip per sample: " + "; ".join(problems))
        self.max_grad_norm = float(max_grad_norm)
        # Per-record gradients' matrix products on a GPU in TF32 (`tf32_products`).
        self.tf32 = tf32
        self._layers = [m for m in model.modules() if rule_for(m) is not None
                        and any(p.requires_grad for p in m.parameters(recurse=False))]
        # Asked every step: looked up once (a module's parameters() is slow next to a small step).
        self._parameters = [p for m in self._layers for p in m.parameters(recurse=False)
                            if p.requires_grad]
        self._sizes = {id(m): sum(p.numel() for p in m.parameters(recurse=False) if p.requires_grad)
                       for m in self._layers}
        self._seen: list[Optional[Seen]] = []
        self._anchor: Optional[torch.Tensor] = None
        # The book-keeping layers' output gradient edges, by their place in `_seen`.
        self._edges: list[tuple[int, GradientEdge]] = []
        # Filled during the backward pass, per layer (by its place in `_seen`): its squared
        # per-record norms, and what its clipped sum is taken from once the factors are known.
        self._squared: dict[int, torch.Tensor] = {}
        self._kept: dict[int, tuple[Seen, torch.Tensor] | Samples] = {}
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
            seen = Seen(module, inputs[0].detach().float())
            self._seen.append(seen)
            if not watched_rule(module).keeps_samples(seen, output, self._sizes[id(module)]):
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
        if seen is None:
            raise ValueError("a layer's output gradient arrived twice in one backward pass")
        self._seen[index] = None
        rule = watched_rule(seen.module)
        if keeps_samples:
            with tf32_products(self.tf32):
                samples = rule.per_sample(seen, grad)
            self._squared[index] = squared_norms(samples, grad.shape[0], grad.device)
            self._kept[index] = samples
        else:
            with full_precision():
                self._squared[index] = rule.norms(seen, grad)
            self._kept[index] = (seen, grad)

    def clip_and_sum(self, loss_sum: torch.Tensor) -> torch.Tensor:
        """Set each parameter's `.grad` to the clipped sum; return the per-sample norms (B,)."""
        seen, anchor, edges = self._seen, self._anchor, self._edges
        self._anchor, self._edges = None, []
        if len({id(s.module) for s in seen if s is not None}) != len(seen):
            self._seen = []
            raise ValueError("a layer ran twice in one forward pass: per-sample norms of shared "
                             "weights are not supported")
        for parameter in self._parameters:  # the previous step's sums: free them first
            parameter.grad = None
        try:
            # Autograd is asked for the book-keeping layers' output gradients and, when a layer
            # has a tap, for the anchor (so that it runs every tap); never for a weight gradient.
            wanted = [edge for _, edge in edges] + ([anchor] if anchor is not None else [])
            # Tensors and gradient edges mixed, which autograd takes; its stub wants one kind.
            grads = (torch.autograd.grad(loss_sum, wanted, allow_unused=True)  # type: ignore[arg-type]
                     if wanted else ())
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
                    with full_precision():  # the precision its norms were taken in
                        watched_rule(kept[0].module).accumulate(kept[0], kept[1], factors)
                else:
                    for param, per_record in kept:
                        set_grad(param, weighted_sum(factors, per_record))
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
        y_i), all in closed form (`jobs.engine.linear_stack`): no autograd graph, no hooks, the same
        norms and factors.  The passes run in `context` (bf16 autocast, say); norms and sums are
        fp32.  Sets each parameter's `.grad` as `clip_and_sum` does; returns the per-sample norms."""
        if self._stack is None:
            raise ValueError("only a linear stack has its clipped sum in closed form (closed_form)")
        linears = [layer for layer in self._stack if isinstance(layer, nn.Linear)]
        weights = [m.weight for m in linears]
        biases: list[Optional[torch.Tensor]] = [m.bias for m in linears]
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


@contextmanager
def tf32_products(enabled: bool) -> Iterator[None]:
    """CUDA matrix products in TF32 while computing per-record gradients, when `enabled`.

    Safe for the mechanism because a layer that keeps per-record gradients reads its norms and
    its clipped sum from the same tensor: whatever the products' rounding, each record's
    clipped contribution has norm ≤ C exactly as computed.  (cuDNN's convolutions, the grouped
    per-record route included, follow `train.tf32` for the whole training: `tf32_convolutions`.)
    Book-keeping layers, whose norm and sum come from different products, take both in fp32
    (`full_precision`)."""
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous


@contextmanager
def tf32_convolutions(enabled: bool) -> Iterator[None]:
    """cuDNN's convolutions (forward, backward, the grouped per-record route) in TF32 exactly
    when `train.tf32` asks: PyTorch's own default is TF32 on, so `train.tf32=false` would
    otherwise leave every convolution of the step in TF32.  Set for a whole training
    (`jobs.engine.training.train_runs`): a CUDA graph captured under it replays its kernels."""
    previous = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32 = previous


@contextmanager
def full_precision() -> Iterator[None]:
    """fp32 matrix products and convolutions, whatever `train.tf32` or the process says: a
    book-keeping layer's norms (Grams, ghost norms) and its clipped sum (a weight gradient of
    the re-weighted outputs) are different products, so only the same precision in both keeps
    each contribution ≤ C to fp32 rounding, within the 1e-6 Opacus adds to every norm.  With
    the sum in TF32 (cuDNN's default) and the norms in fp32 a contribution exceeded C by about
    1e-3 relative (issue 40)."""
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn


def clip_factors(norms: torch.Tensor, max_grad_norm: float) -> torch.Tensor:
    """Opacus's clip factor min(1, C / (‖g‖ + 1e-6)) (as 1/(‖g‖ + 1e-6)·C, in place: these few
    kernels on B floats are a visible part of a small model's step)."""
    return (norms + NORM_EPSILON).reciprocal_().mul_(max_grad_norm).clamp_max_(1.0)


def clipped_sums(inputs: list[torch.Tensor], grads: list[torch.Tensor], has_bias: list[bool],
                 max_grad_norm: Optional[float], weights: Optional[torch.Tensor] = None
                 ) -> tuple[list[torch.Tensor], list[Optional[torch.Tensor]], torch.Tensor]:
    """Per model k: Σ_i c_ki·∇ℓ_ki for each linear layer's weight and bias, and the norms (a
    linear stack's clipped sum in closed form, `jobs.engine.linear_stack`; a lone model is the same
    without the leading K axis).

    `inputs[l]` (K, B, in) and `grads[l]` (K, B, out) are layer l's inputs and the gradients of
    the summed loss at its outputs, in fp32.  Record i of model k has the gradient norm
    √Σ_l ‖g_kil‖²·(‖a_kil‖² + 1[bias]) (ghost norms: exact for one position per record), and
    c_ki = min(1, C/(norm + 1e-6)) (Opacus's factor), or `weights` (K, B) instead when
    `max_grad_norm` is None (no clipping).
    """
    norms = linear_stack.squared_norms(inputs, grads, has_bias).sqrt_()
    factors = clip_factors(norms, max_grad_norm) if max_grad_norm is not None else weights
    if factors is None:
        raise ValueError("without clipping (max_grad_norm=None) the records' weights are needed")
    return (*linear_stack.weighted_sums(inputs, grads, has_bias, factors), norms)
