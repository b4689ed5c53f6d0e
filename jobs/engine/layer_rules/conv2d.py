"""The convolution's rule, and how it takes each record's weight gradients: one of `METHODS`,
on a CPU chosen by the layer's geometry (`_cpu_method`), on a GPU by timing (`_fastest`).

Its norms' ghost form, Σ_{t,t'} (u_t·u_t')(g_t·g_t'), needs only the Gram matrices of the
receptive fields, u_t·u_t' for every two output positions t, t' of each record, which
`field_grams` takes without gathering the fields.  Field pixel (i, j) of output position t is
padded-input pixel s·t + (i, j), so u_t·u_t' = Σ_(i,j) P[s·t + (i, j), s·t' + (i, j)] with P the
Gram of the padded input's pixels; only pixels one stride apart (one phase) are ever paired, so
P is taken phase by phase.
"""

from __future__ import annotations

import math
from typing import cast

import torch
import torch.nn.functional as F
import torch.nn.grad
from torch import nn

from jobs.engine.layer_rules.base import Samples, Seen, _Rule, _trainable, set_grad

#: Largest number of floats one chunk of a per-sample computation may hold (≈ 64 MB):
#: convolutions are processed a slice of the batch at a time below it.
CHUNK_FLOATS = 1 << 24
#: The same on a GPU (1 GB), and the most per-record gradients a convolution keeps there.
GPU_CHUNK_FLOATS = 1 << 28
#: On a CPU, the most receptive-field floats a record may gather for its per-record weight
#: gradients to be taken by one batched matmul (`_cpu_method`), 128 KB.
CPU_GATHER_FLOATS = 1 << 15


def padding_of(module: nn.Conv2d) -> tuple[int, ...]:
    """The convolution's zero padding in numbers: "same" and "valid" are refused before any
    work (`jobs.engine.layer_rules.check_supported`), so one here is a bug."""
    if isinstance(module.padding, str):
        raise ValueError(f"padding={module.padding!r}: only padding given as numbers is supported")
    return module.padding


def phase_grid(module: nn.Conv2d, input_shape: torch.Size) -> tuple[int, int]:
    """The padded input's pixels one stride apart (a phase) form an H_s × W_s grid."""
    (sh, sw), (ph, pw) = module.stride, padding_of(module)
    return -(-(input_shape[2] + 2 * ph) // sh), -(-(input_shape[3] + 2 * pw) // sw)


def gram_floats(module: nn.Conv2d, input_shape: torch.Size, positions: int) -> int:
    """Floats a record's Gram norms hold at once: its phase-split input, its pixels' Gram twice
    (as multiplied, then batch-last) and the two L × L Grams; dilated, its unfolded fields."""
    if module.dilation != (1, 1):
        return module.in_channels * math.prod(module.kernel_size) * positions + 2 * positions ** 2
    hs, ws = phase_grid(module, input_shape)
    phases = math.prod(module.stride)
    return phases * hs * ws * (module.in_channels + 2 * hs * ws) + 2 * positions ** 2


def field_grams(module: nn.Conv2d, a: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """(H_out, W_out, H_out, W_out, b): u_t·u_t' for every two output positions of each record
    of `a` (b, C_in, H, W), for an H_out × W_out output: one batched matmul per phase, then a
    sum of kh·kw shifted blocks of it, batch last so that each block is one contiguous run per
    row (`python -m bench.train --routes` times the book-keeping layers' norms and sum; what
    this replaced, the gathered fields' own Gram, took twice as long: `bench/README.md`).  No
    dilation."""
    (kh, kw), (sh, sw), (ph, pw) = module.kernel_size, module.stride, padding_of(module)
    b, channels, height, width = a.shape
    hs, ws = phase_grid(module, a.shape)
    padded = a.new_zeros(b, channels, hs * sh, ws * sw)  # zeros and a copy: F.pad took 4×
    padded[:, :, ph:ph + height, pw:pw + width] = a
    pixels = padded.view(b, channels, hs, sh, ws, sw).permute(3, 5, 0, 2, 4, 1)
    pixels = pixels.reshape(sh * sw * b, hs * ws, channels)  # (phases·b, H_s·W_s, C_in)
    pairs = torch.bmm(pixels, pixels.transpose(1, 2)).view(sh, sw, b, hs, ws, hs, ws)
    pairs = pairs.permute(0, 1, 3, 4, 5, 6, 2).contiguous()
    grams = pairs.new_zeros(rows, cols, rows, cols, b)
    for i in range(kh):
        for j in range(kw):
            di, dj = i // sh, j // sw
            grams += pairs[i % sh, j % sw, di:di + rows, dj:dj + cols, di:di + rows, dj:dj + cols]
    return grams


def _channels_last(tensor: torch.Tensor) -> bool:
    """A 4-D tensor stored NHWC with more than one channel (one channel is both layouts)."""
    return (tensor.dim() == 4 and tensor.shape[1] > 1 and not tensor.is_contiguous()
            and tensor.is_contiguous(memory_format=torch.channels_last))


class _Conv2dRule(_Rule):
    """Norms either from L×L Gram matrices of the receptive fields (`field_grams`) and of the
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
        """On a GPU, whenever they fit in `GPU_CHUNK_FLOATS` (`jobs.engine.clipping` says why).  On a
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
