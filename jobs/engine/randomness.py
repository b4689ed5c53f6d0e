"""Where a model's training draws its randomness: one independent stream per purpose.

Why its own streams.  The initial weights, the batches, the noise and the canaries each come
from a stream spawned from the model's seed and its purpose (`stream_seed`), never from torch's
global state: no two purposes or models share a stream, and a checkpoint restores the batch and
noise streams exactly (`TrainingRng.state`), so a resumed training is the uninterrupted one.

- `TrainingRng`: the batch generator (on the host) and the noise generator (on the training
  device); with `secure_noise` the noise is seeded from the OS's entropy and never replayed.
- `epoch_batches`: one epoch's batches as host index tensors: Poisson masks at q (DP) or a
  shuffle, the whole epoch drawn at once.

Why batches are drawn on the host.  A Poisson batch's size is random, and the host must know it
to run the step; drawn on a GPU, every step asked the device for it (a synchronisation that
left the GPU idle between steps).  Drawn on the host, a step never waits for the device, and a
seed draws the same batches on every device.
- `gaussian_noise`: N(0, σ²) per coordinate (secure: Opacus's sum of four draws of σ/2).
"""

from __future__ import annotations

import secrets
from typing import Optional

import numpy as np
import torch

from jobs.engine.accounting import PoissonSchedule

#: The purposes of a model's random streams, each spawned from its seed (`stream_seed`).
WEIGHTS, BATCHES, NOISE, CANARIES = range(4)


def stream_seed(seed: int, purpose: int) -> int:
    """An independent 63-bit seed for one purpose of the model seeded `seed`: NumPy's
    SeedSequence over (seed, purpose), so no two purposes or models share a stream (seed s's
    noise is never seed s+1's batches)."""
    return int(np.random.SeedSequence([seed, purpose]).generate_state(1, np.uint64)[0] >> 1)


class TrainingRng:
    """The training's own random streams: Poisson masks (or shuffles) on the host, noise on the
    training device.  Separate from torch's global state, so checkpoints restore them exactly;
    with `secure_noise` the noise stream is seeded from the OS's entropy instead."""

    def __init__(self, seed: int, device: torch.device, secure_noise: bool = False):
        self.batches = torch.Generator()
        self.batches.manual_seed(stream_seed(seed, BATCHES))
        self.noise = torch.Generator(device=device)
        self.secure = secure_noise
        self.noise.manual_seed(secrets.randbits(63) if secure_noise else stream_seed(seed, NOISE))

    def state(self) -> dict[str, torch.Tensor]:
        return {"batches": self.batches.get_state(), "noise": self.noise.get_state()}

    def restore(self, state: dict[str, torch.Tensor]) -> None:
        self.batches.set_state(state["batches"])
        if not self.secure:  # a secure stream is never replayed
            self.noise.set_state(state["noise"])


#: Most uniforms one Poisson draw holds at once (64 MB): an epoch of many steps over a large
#: training set is drawn in slices of steps, which draws the same values as one draw.
DRAW_FLOATS = 1 << 24


def epoch_batches(rng: TrainingRng, size: int, batch_size: int,
                  schedule: Optional[PoissonSchedule]) -> list[torch.Tensor]:
    """One epoch's batches as host index tensors: Poisson masks at q, each record of each step
    in independently (DP), or a shuffle split into batches.  The epoch's steps are drawn
    together, step after step from one stream: the same values as a draw per step."""
    if schedule is None:
        return list(torch.randperm(size, generator=rng.batches).split(batch_size))
    steps, batches = schedule.steps_per_epoch, []
    per_draw = max(1, DRAW_FLOATS // max(size, 1))
    for first in range(0, steps, per_draw):
        taken = torch.rand(min(per_draw, steps - first), size, generator=rng.batches) < schedule.sample_rate
        batches += taken.nonzero()[:, 1].split(taken.sum(1).tolist())
    return batches


def gaussian_noise(std: float, count: int, like: torch.Tensor, rng: TrainingRng) -> torch.Tensor:
    """N(0, std²) per coordinate; with secure noise the sum of four draws of std/2, as Opacus's
    secure_mode, against attacks on the floating-point sampler (Mironov 2012)."""
    if not rng.secure:
        return torch.normal(0.0, std, size=(count,), device=like.device, generator=rng.noise,
                            dtype=like.dtype)
    return torch.normal(0.0, std / 2, size=(4, count), device=like.device, generator=rng.noise,
                        dtype=like.dtype).sum(0)
