"""Each layer type's per-sample rule: its records' squared gradient norms and its clipped
gradient sum, by book-keeping or from per-record gradients (`jobs.clipping` says which and why).

`RULES` maps a layer class to its rule; `check_supported` names the layers no rule covers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, TypeGuard, cast

import torch
import torch.nn.functional as F
import torch.nn.grad
from torch import nn

from jobs.field_grams import field_grams, gram_floats, padding_of

#: Largest number of floats one chunk of a per-sample computation may hold (≈ 64 MB):
#: convolutions are processed a slice of the batch at a time below it.
CHUNK_FLOATS = 1 << 24
#: The same on a GPU (1 GB), and the most per-record gradients a convolution keeps there.
GPU_CHUNK_FLOATS = 1 << 28
#: On a CPU, the most receptive-field floats a record may gather for its per-record weight
#: gradients to be taken by one batched matmul (`_cpu_method`), 128 KB.
CPU_GATHER_FLOATS = 1 << 15



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


def _sequence(tensor: torch.Tensor) -> torch.Tensor:
    """(B, …, F) as (B, T, F): every middle axis is a position the weights are shared over."""
    return tensor.reshape(tensor.shape[0], -1, tensor.shape[-1])


def set_grad(parameter: Optional[torch.Tensor], value: torch.Tensor) -> None:
    if parameter is not None and parameter.requires_grad:
        parameter.grad = value if value.shape == parameter.shape and value.dtype == parameter.dtype \
            else value.reshape(parameter.shape).to(parameter.dtype)


def _channels_last(tensor: torch.Tensor) -> bool:
    """A 4-D tensor stored NHWC with more than one channel (one channel is both layouts)."""
    return (tensor.dim() == 4 and tensor.shape[1] > 1 and not tensor.is_contiguous()
            and tensor.is_contiguous(memory_format=torch.channels_last))


def _trainable(parameter: Optional[torch.Tensor]) -> TypeGuard[torch.Tensor]:
    return parameter is not None and parameter.requires_grad


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


class _Conv2dRule(_Rule):
    """Norms either from L×L Gram matrices of the receptive fields (`jobs.field_grams`) and of the
    output gradient (the ghost form, for small feature maps) or from each record's weight
    gradient, computed for a slice of the batch at once by one of `METHODS`: on a CPU chosen by
    the layer's geometry (`_cpu_method`), on a GPU by timing (`_fastest`)."""

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
                            padding=padding_of(module), stride=module.stride)
        (kh, kw), (sh, sw), (ph, pw) = module.kernel_size, module.stride, padding_of(module)
        windows = F.pad(a, (pw, pw, ph, ph)).unfold(2, kh, sh).unfold(3, kw, sw)
        b, c, rows, cols = windows.shape[:4]  # (b, C, H_out, W_out, kh, kw)
        return windows.permute(0, 1, 4, 5, 2, 3).reshape(b, c * kh * kw, rows * cols)

    @staticmethod
    def _field_rows(module: nn.Conv2d, a: torch.Tensor) -> torch.Tensor:
        """(b, L, kh·kw·C_in): each output position's receptive field as a row, in NHWC order,
        gathered from the padded input made NHWC (free when `a` is channels-last), so that
        the gather copies runs of kw·C_in floats: on one CPU thread 2.7× faster than
        `_unfold`'s columns for `mnist_cnn`'s second convolution (3.2 against 8.7 ms at batch
        512).  No dilation."""
        (kh, kw), (sh, sw), (ph, pw) = module.kernel_size, module.stride, padding_of(module)
        nhwc = F.pad(a.permute(0, 2, 3, 1), (0, 0, pw, pw, ph, ph)).contiguous()
        windows = nhwc.unfold(1, kh, sh).unfold(2, kw, sw)  # (b, H_out, W_out, C, kh, kw)
        b, rows, cols, channels = windows.shape[:4]
        return windows.permute(0, 1, 2, 4, 5, 3).reshape(b, rows * cols, kh * kw * channels)

    @classmethod
    def _gram_norms(cls, module: nn.Conv2d, a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """Σ_{t,t'} (u_t·u_t')(g_t·g_t') per record, from (b, C_out, H_out, W_out) output
        gradients: the fields' Grams by `field_grams`, or from the unfolded fields when the
        convolution is dilated."""
        outputs = g.reshape(len(g), module.out_channels, -1)
        grads = torch.bmm(outputs.transpose(1, 2), outputs)  # (b, L, L)
        if module.dilation != (1, 1):
            u = cls._unfold(module, a).transpose(1, 2)  # (b, L, C_in·kh·kw)
            return (torch.bmm(u, u.transpose(1, 2)) * grads).sum((1, 2))
        fields = field_grams(module, a, g.shape[2], g.shape[3]).view(-1, len(g))
        return (fields * grads.view(len(g), -1).T).sum(0)

    @staticmethod
    def _grouped_weights(module: nn.Conv2d, a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """(b, C_out, C_in, kh, kw): each record's weight gradient, from (b, C_in, H, W) inputs
        and (b, C_out, H_out, W_out) output gradients, as one convolution with a group a record."""
        records = a.shape[0]
        per_record = torch.nn.grad.conv2d_weight(
            a.reshape(1, -1, *a.shape[2:]),
            (records * module.out_channels, module.in_channels, *module.kernel_size),
            g.reshape(1, -1, *g.shape[2:]), stride=module.stride, padding=module.padding,
            dilation=module.dilation, groups=records)
        return per_record.reshape(records, *module.weight.shape)

    @classmethod
    def _unfolded_weights(cls, module: nn.Conv2d, a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """The same as `_grouped_weights`, as a batched matmul of each record's output gradient
        (C_out, L) and its unfolded input (C_in·kh·kw, L); for channels-last inputs in their own
        layout (`_rows_weights`)."""
        records = a.shape[0]
        if _channels_last(a) and module.dilation == (1, 1):
            return cls._rows_weights(module, a, g)
        return torch.bmm(g.reshape(records, module.out_channels, -1),
                         cls._unfold(module, a).transpose(1, 2)).reshape(records, *module.weight.shape)

    @classmethod
    def _rows_weights(cls, module: nn.Conv2d, a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """The same as `_grouped_weights`, from the receptive fields as NHWC rows (L, kh·kw·C_in)
        (`_field_rows`: no copy back to NCHW for channels-last inputs) and one batched matmul
        with the output gradient (C_out, L); the result is a permuted view (b, C_out, C_in, kh,
        kw) with a channels-last weight's strides.  No dilation."""
        if module.dilation != (1, 1):
            raise ValueError(f"receptive fields as rows need no dilation, not {module.dilation}")
        records = a.shape[0]
        fields = cls._field_rows(module, a)  # (b, L, kh·kw·C_in)
        grads = (g.permute(0, 2, 3, 1).reshape(records, -1, module.out_channels).transpose(1, 2)
                 if _channels_last(g) else g.reshape(records, module.out_channels, -1))
        per_record = torch.bmm(grads, fields)  # (b, C_out, kh·kw·C_in)
        return per_record.view(records, module.out_channels, *module.kernel_size,
                               module.in_channels).permute(0, 1, 4, 2, 3)

    @staticmethod
    def _shifts(module: nn.Conv2d) -> bool:
        """Whether `_shifted_weights` applies: stride 1, no dilation."""
        return module.stride == (1, 1) and module.dilation == (1, 1)

    @staticmethod
    def _shifted_weights(module: nn.Conv2d, a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """The same as `_grouped_weights` with no unfolded copy: one batched matmul per kernel
        offset (i, j), each record's output gradient (C_out, L′) against its padded input read
        at that offset (L′, C_in), a strided view.  Output positions run over whole padded
        rows, L′ = H_out·W_pad, the output gradient padded with zeros on the right, so that
        offset (i, j) is the flat padded input shifted by i·W_pad + j (one extra zero row keeps
        the last shift in bounds); for a stride-1 convolution.  Returns a permuted view
        (b, C_out, C_in, kh, kw) of a (kh, kw, b, C_out, C_in) tensor, which the norms and the
        clipped sum read in that order (`_around_batch`)."""
        if not _Conv2dRule._shifts(module):
            raise ValueError(f"shifted products need stride 1 and no dilation, not stride "
                             f"{module.stride}, dilation {module.dilation}")
        (kh, kw), (ph, pw) = module.kernel_size, padding_of(module)
        b, c_out = g.shape[:2]
        padded = F.pad(a, (pw, pw, ph, ph + 1))  # (b, C_in, H_pad + 1, W_pad)
        width = padded.shape[3]
        grads = F.pad(g, (0, width - g.shape[3]))  # (b, C_out, H_out, W_pad)
        positions = grads.shape[2] * width
        out = torch.empty(kh, kw, b, c_out, a.shape[1], device=a.device, dtype=g.dtype)
        if _channels_last(a):  # rows of channels: (b, positions, C) views, no copy of a
            flat = padded.permute(0, 2, 3, 1).reshape(b, -1, a.shape[1])
            rows = grads.permute(0, 2, 3, 1).reshape(b, positions, c_out).transpose(1, 2)
            for i in range(kh):
                for j in range(kw):
                    shift = i * width + j
                    torch.bmm(rows, flat[:, shift:shift + positions], out=out[i, j])
        else:
            flat = padded.reshape(b, a.shape[1], -1)
            rows = grads.reshape(b, c_out, positions)
            for i in range(kh):
                for j in range(kw):
                    shift = i * width + j
                    torch.bmm(rows, flat[:, :, shift:shift + positions].transpose(1, 2),
                              out=out[i, j])
        return out.permute(2, 3, 4, 0, 1)

    @classmethod
    def _weights(cls, module: nn.Conv2d, a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """Each record's weight gradient: on a CPU by the layer's geometry (`_cpu_method`), on
        a GPU by the fastest of the ways for this layer's shape on the card (`_fastest`)."""
        method = _fastest(module, a, g) if a.is_cuda else _cpu_method(module, g)
        return METHODS[method](module, a, g)

    @staticmethod
    def _slice(grad: torch.Tensor, floats_per_record: int) -> int:
        """Records per slice so that one slice's work stays under `CHUNK_FLOATS` (on a GPU
        `GPU_CHUNK_FLOATS`): a small layer's batch in one slice (`mnist_cnn`'s first
        convolution: 24 MB; five slices of it made a CPU step 4 % slower), a large one's in
        slices of at most 64 MB."""
        return max(1, (GPU_CHUNK_FLOATS if grad.is_cuda else CHUNK_FLOATS) // floats_per_record)

    @classmethod
    def samples_slice(cls, module: nn.Conv2d, grad: torch.Tensor) -> int:
        """Records per slice of `per_sample`: a slice's receptive fields and weight gradients."""
        fan_in = module.in_channels * math.prod(module.kernel_size)
        return cls._slice(grad, fan_in * math.prod(grad.shape[2:]) + module.weight.numel())

    def keeps_samples(self, seen: Seen, grad: torch.Tensor, parameters: int) -> bool:
        """On a GPU, whenever they fit in `GPU_CHUNK_FLOATS` (see the module's docstring).  On a
        CPU, by size (`_Rule.keeps_samples`), and besides wherever the norms would not take the
        Gram form, or a record's receptive fields are small enough to gather (`_cpu_method`):
        the per-record gradients are then computed for the norms anyway, or by one batched
        matmul, and keeping them spares book-keeping's second weight gradient for the sum
        (`python -m bench.train --routes` times both ways per layer).  Only a layer with Gram
        norms over fields too large to gather book-keeps (`cifar10_cnn`'s 8 × 8 ones)."""
        if grad.is_cuda:
            return grad.shape[0] * parameters <= GPU_CHUNK_FLOATS
        module = cast(nn.Conv2d, seen.module)
        gram = self._ghost(module, grad.shape[2] * grad.shape[3])
        return (super().keeps_samples(seen, grad, parameters) or not gram
                or _cpu_method(module, grad) != "grouped")

    def norms(self, seen: Seen, grad: torch.Tensor) -> torch.Tensor:
        module = cast(nn.Conv2d, seen.module)
        batch = grad.shape[0]
        g = grad.reshape(batch, module.out_channels, -1)  # (B, C_out, L)
        positions = g.shape[2]
        fan_in = module.in_channels * math.prod(module.kernel_size)
        ghost = self._ghost(module, positions)
        per_record = (gram_floats(module, seen.input.shape, positions) if ghost
                      else fan_in * positions + module.out_channels * fan_in)
        step = self._slice(grad, per_record)
        total = torch.zeros(batch, device=grad.device, dtype=torch.float32)
        if _trainable(module.weight):
            for start in range(0, batch, step):
                a, gc = seen.input[start:start + step], grad[start:start + step]
                total[start:start + step] += (
                    self._gram_norms(module, a, gc) if ghost else
                    self._weights(module, a, gc).reshape(len(gc), -1).float().pow(2).sum(1))
        if _trainable(module.bias):
            total += g.float().sum(2).pow(2).sum(1)
        return total

    def accumulate(self, seen: Seen, grad: torch.Tensor, factors: torch.Tensor) -> None:
        module = cast(nn.Conv2d, seen.module)
        weighted = grad * factors.to(grad.dtype).view(-1, 1, 1, 1)
        if _trainable(module.weight):  # the plain weight gradient of the re-weighted outputs
            set_grad(module.weight, torch.nn.grad.conv2d_weight(
                seen.input, module.weight.shape, weighted, stride=module.stride,
                padding=module.padding, dilation=module.dilation, groups=module.groups))
        set_grad(module.bias, weighted.sum((0, 2, 3)))

    def per_sample(self, seen: Seen, grad: torch.Tensor) -> Samples:
        module = cast(nn.Conv2d, seen.module)
        samples = []
        if _trainable(module.weight):
            step = self.samples_slice(module, grad)
            if step >= grad.shape[0]:  # one slice: no copy into a gathering tensor
                weights = self._weights(module, seen.input, grad)
            else:
                weights = grad.new_empty(grad.shape[0], *module.weight.shape)
                for start in range(0, grad.shape[0], step):
                    weights[start:start + step] = self._weights(
                        module, seen.input[start:start + step], grad[start:start + step])
            samples.append((module.weight, weights))
        if _trainable(module.bias):
            samples.append((module.bias, grad.sum((2, 3))))
        return samples


def _cpu_method(module: nn.Conv2d, g: torch.Tensor) -> str:
    """The name in `METHODS` a CPU takes for this layer, by its geometry alone, so that every
    process takes the same one (timings on shared cores vary by ±40 %, and two routes round
    differently).  Gathered receptive fields, then one batched matmul, where a record's fields
    are small (at most `CPU_GATHER_FLOATS`): as rows (NHWC) or as columns (`F.unfold`'s order),
    whichever copies longer contiguous runs (kw·C_in floats against W_out at stride 1); else
    one grouped convolution.  Measured on 2 cores, batch 512 (`bench/README.md`): `mnist_cnn`'s
    convolutions 3.6 and 2.7 ms as rows against 5.0 and 4.7 grouped; `cifar10_cnn`'s first 12.4
    as columns against 26.2 grouped, its wider layers 1.2–9× slower gathered."""
    fan_in = module.in_channels * math.prod(module.kernel_size)
    if module.dilation != (1, 1) or g.shape[2] * g.shape[3] * fan_in > CPU_GATHER_FLOATS:
        return "grouped"
    column_run = g.shape[3] if module.stride[1] == 1 else 1
    return "rows" if module.kernel_size[1] * module.in_channels >= column_run else "unfold"


#: The faster per-record method of each convolution shape met on a GPU in this process, by
#: (device, layer geometry, input shape); measured once, at the shape's first (eager) step.
_FASTEST_METHOD: dict[tuple, str] = {}


def _fastest(module: nn.Conv2d, a: torch.Tensor, g: torch.Tensor) -> str:
    """The name in `METHODS` of the one that took least time over three runs on these inputs.
    All compute the same per-record gradients (to float rounding): the choice changes speed,
    not the mechanism.  Inside a CUDA graph's capture nothing can be timed: an unmeasured shape
    takes "unfold", which works for every geometry."""
    key = (a.device.index, module.in_channels, module.out_channels, module.kernel_size,
           module.stride, module.padding, module.dilation, tuple(a.shape[1:]), _channels_last(a))
    if key not in _FASTEST_METHOD:
        if torch.cuda.is_current_stream_capturing():
            return "unfold"
        seconds = {}
        for method, take in METHODS.items():
            if not takes(method, module):
                continue
            take(module, a, g)  # warm-up: kernel choice and workspace outside the timing
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(3):
                take(module, a, g)
            end.record()
            end.synchronize()
            seconds[method] = start.elapsed_time(end)
        _FASTEST_METHOD[key] = min(seconds, key=seconds.__getitem__)
    return _FASTEST_METHOD[key]


def takes(method: str, module: nn.Conv2d) -> bool:
    """Whether `METHODS[method]` can take this layer: shifted products need stride 1 and no
    dilation, rows no dilation; the others take any geometry."""
    if method == "shifted":
        return _Conv2dRule._shifts(module)
    return method != "rows" or module.dilation == (1, 1)


#: The ways to each record's convolution weight gradients, by name (`_fastest` times them).
METHODS = {"grouped": _Conv2dRule._grouped_weights, "unfold": _Conv2dRule._unfolded_weights,
           "rows": _Conv2dRule._rows_weights, "shifted": _Conv2dRule._shifted_weights}


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


#: The layer types the engine can clip, by class.  A model with trainable parameters anywhere
#: else is refused (`check_supported`), never silently clipped wrong.
RULES: dict[type, _Rule] = {
    nn.Linear: _LinearRule(),
    nn.Conv2d: _Conv2dRule(),
    nn.GroupNorm: _NormRule(),
    nn.LayerNorm: _NormRule(),
}


def rule_for(module: nn.Module) -> Optional[_Rule]:
    return RULES.get(type(module))


def watched_rule(module: nn.Module) -> _Rule:
    """The rule of a layer the engine watches: only layers with one are (`rule_for`)."""
    rule = RULES.get(type(module))
    if rule is None:
        raise ValueError(f"a {type(module).__name__} layer has no per-sample rule")
    return rule


def check_supported(model: nn.Module) -> list[str]:
    """Why the engine cannot clip `model` (empty when it can): one line per offending layer."""
    problems = []
    for name, module in model.named_modules():
        own = [p for p in module.parameters(recurse=False) if p.requires_grad]
        if not own:
            continue
        if rule_for(module) is None:
            supported = ", ".join(cls.__name__ for cls in RULES)
            problems.append(f"layer {name or '(root)'} ({type(module).__name__}) has trainable "
                            f"parameters but no per-sample rule (supported: {supported})")
        elif isinstance(module, nn.Conv2d) and (module.groups != 1 or module.padding_mode != "zeros"
                                                or isinstance(module.padding, str)):
            problems.append(f"layer {name} (Conv2d): only groups=1, zero padding given as numbers "
                            "are supported")
    return problems
