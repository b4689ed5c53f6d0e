"""The Gram matrices of a convolution's receptive fields, u_t·u_t' for every two output positions
t, t' of each record, without gathering the fields: the ghost form of a convolution's per-record
norms Σ_{t,t'} (u_t·u_t')(g_t·g_t') (`jobs.layer_rules`) needs only these.

Field pixel (i, j) of output position t is padded-input pixel s·t + (i, j), so
u_t·u_t' = Σ_(i,j) P[s·t + (i, j), s·t' + (i, j)] with P the Gram of the padded input's pixels;
only pixels one stride apart (one phase) are ever paired, so P is taken phase by phase.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def padding_of(module: nn.Conv2d) -> tuple[int, ...]:
    """The convolution's zero padding in numbers: "same" and "valid" are refused before any
    work (`jobs.layer_rules`), so one here is a bug."""
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
