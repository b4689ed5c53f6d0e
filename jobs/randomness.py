"""Where a model's training draws its randomness: one independent stream per purpose.

Why its own streams.  The initial weights, the batches, the noise and the canaries each come
from a stream spawned from the model's seed and its purpose (`stream_seed`), never from torch's
global state: no two purposes or models share a stream, and a checkpoint restores the batch and
noise streams exactly (`TrainingRng.state`), so a resumed training is the uninterrupted one.

- `TrainingRng`: the batch and noise generators on the training device; with `secure_noise` the
  noise is seeded from the OS's entropy and never replayed.
- `epoch_batches`: one epoch's batches as index tensors: Poisson masks at q (DP) or a shuffle.
- `gaussian_noise`: N(0, σ²) per coordinate (secure: Opacus's sum of four draws of σ/2).
"""

from __future__ import annotations

import secrets
from typing import Iterator, Optional

import numpy as np
import torch

from jobs.accounting import PoissonSchedule

#: The purposes of a model's random streams, each spawned from its seed (`stream_seed`).
WEIGHTS, BATCHES, NOISE, CANARIES = range(4)


def stream_seed(seed: int, purpose: int) -> int:
    """An independent 63-bit seed for one purpose of the model seeded `seed`: NumPy's
    SeedSequence over (seed, purpose), so no two purposes or models share a stream (seed s's
    noise is never seed s+1's batches)."""
    return int(np.random.SeedSequence([seed, purpose]).generate_state(1, np.uint64)[0] >> 1)


class TrainingRng:
    """The training's own random streams on its device: Poisson masks (or shuffles) and noise.
    Separate from torch's global state, so checkpoints restore them exactly; with
    `secure_noise` the noise stream is seeded from the OS's entropy instead."""

    def __init__(self, seed: int, device: torch.device, secure_noise: bool = False):
        self.batches = torch.Generator(device=device)
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


def epoch_batches(rng: TrainingRng, size: int, batch_size: int,
                  schedule: Optional[PoissonSchedule],
                  device: torch.device) -> Iterator[torch.Tensor]:
    """One epoch's batches as index tensors on the device: Poisson masks (DP) or a shuffle."""
    if schedule is None:
        yield from torch.randperm(size, generator=rng.batches, device=device).split(batch_size)
        return
    for _ in range(schedule.steps_per_epoch):
        draw = torch.rand(size, generator=rng.batches, device=device)
        yield (draw < schedule.sample_rate).nonzero().squeeze(1)


def gaussian_noise(std: float, count: int, like: torch.Tensor, rng: TrainingRng) -> torch.Tensor:
    """N(0, std²) per coordinate; with secure noise the sum of four draws of std/2, as Opacus's
    secure_mode, against attacks on the floating-point sampler (Mironov 2012)."""
    if not rng.secure:
        return torch.normal(0.0, std, size=(count,), device=like.device, generator=rng.noise,
                            dtype=like.dtype)
    return torch.normal(0.0, std / 2, size=(4, count), device=like.device, generator=rng.noise,
                        dtype=like.dtype).sum(0)
