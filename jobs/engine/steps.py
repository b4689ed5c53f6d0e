"""How a model's training steps run on its device: one kernel at a time, or replayed as CUDA graphs.

Why graphs.  A DP step of the shipped CNNs is a few hundred small kernels.  Launched one by one
from Python, the GPU waited on the host for most of each step (H100, `cifar10_cnn` at batch 512:
13.5 ms a step eager, 6.2 ms the same step replayed as a graph; `mnist_cnn` 6.9 against 1.0 ms).
`CapturedSteps` records a whole step — the batch's gather, the forward pass, per-sample
clipping, the noise and the optimizer's update — once, and replays it with one launch.

A graph replays fixed shapes, and a Poisson batch has a random size, so each batch is padded to
the next multiple of `BUCKET` records with rows of weight 0: their loss, gradient, norm and
clipped contribution are exactly 0, so the clipped sum, the noise and the divisor are the
unpadded step's (to float summation order), and the accountant's q is unchanged.  A model
captures one graph per padded size the first time it meets it (a handful over a training).

What a graph cannot hold runs eagerly (`EagerSteps`, the same arithmetic on exactly the drawn
records): every step on a CPU, the first step of a run (the optimizer makes its state there),
an empty batch, gradient canaries (planted and observed from the host), DP-Adam and compiled
forward passes.  Nothing in either kind of step asks the device for a value: batches are drawn
on the host (`jobs.engine.randomness`), and accuracy stays on the device until training ends.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from jobs.engine.clipping import PerSampleClipper
from jobs.engine.randomness import TrainingRng, gaussian_noise

#: Padded batch sizes are multiples of this (a step's extra work is < BUCKET rows; H100,
#: `cifar10_cnn` at batch 512: ≈ 3 % on average, and 6–8 graphs a model).
BUCKET = 32


PRECISIONS = ("fp32", "bf16")


def autocast(precision: str, device: torch.device):
    """The forward pass's numeric context: bfloat16 autocast for "bf16", a no-op for "fp32"."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


def clipped_sum(model: nn.Module, clipper: PerSampleClipper, x: torch.Tensor, y: torch.Tensor,
                precision: str = "fp32") -> None:
    """The batch's clipped per-sample gradient sum into each parameter's `.grad` (the part of
    Opacus's DPOptimizer step before the noise, `private_update`)."""
    if not len(y):  # an empty Poisson batch still takes a noisy step, as the accountant assumes
        clipper.zero_sum()
    elif clipper.closed_form:  # a linear stack: no autograd at all
        clipper.clip_and_sum_cross_entropy(x, y, autocast(precision, x.device))
    else:
        with clipper.watch(), autocast(precision, x.device):
            logits = model(x)
        clipper.clip_and_sum(F.cross_entropy(logits.float(), y, reduction="sum"))


def noisy_step(model: nn.Module, optimizer: torch.optim.Optimizer, noise_std: float,
               expected_batch_size: int, rng: TrainingRng) -> None:
    """Add N(0, noise_std²) to each parameter's clipped-sum `.grad`, divide by the expected
    batch and step: the part of a DP step after clipping, shared with `jobs.engine.stacked`."""
    # The optimizer's list, not `model.parameters()`: walking the modules every step costs more
    # than a small model's noise.
    parameters = [p for group in optimizer.param_groups for p in group["params"] if p.requires_grad]
    sizes = [p.numel() for p in parameters]
    # One draw for every coordinate and one kernel each to add it and divide (a small model's
    # step is a fraction of a millisecond, so kernels per parameter tensor would dominate it).
    noise = gaussian_noise(noise_std, sum(sizes), parameters[0], rng)
    grads = [p.grad for p in parameters]
    torch._foreach_add_(grads, [part.view_as(p) for p, part in zip(parameters, noise.split(sizes))])
    torch._foreach_div_(grads, expected_batch_size)
    optimizer.step()


def mean_gradient(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor,
                  y: torch.Tensor, precision: str = "fp32") -> None:
    """The batch's mean loss gradient into each parameter's `.grad` (a non-private step)."""
    optimizer.zero_grad(set_to_none=True)
    with autocast(precision, x.device):
        logits = model(x)
    F.cross_entropy(logits.float(), y).backward()


def private_update(run) -> None:
    """The noisy step after the clipped sum is in `.grad`: gradient canaries planted into the
    sum, Gaussian noise, the divisor, the optimizer's step, then the canaries observed."""
    schedule, canaries = run.schedule, run.canaries
    before = canaries.plant(schedule.sample_rate) if canaries is not None else None
    noisy_step(run.model, run.optimizer, run.noise_std, schedule.expected_batch_size, run.rng)
    if canaries is not None:
        canaries.observe(before, run.settings.lr, run.settings.momentum,
                         run.settings.max_grad_norm / schedule.expected_batch_size,
                         run.noise_multiplier, schedule.sample_rate)


def plain_update(run, batch_size: int) -> None:
    """The non-private step after the mean gradient is in `.grad`: every included gradient
    canary (in every step: there is no Poisson draw to thin them) adds C/|B|, unclipped."""
    canaries, divisor = run.canaries, max(1, batch_size)
    before = canaries.plant(1.0, 1.0 / divisor) if canaries is not None else None
    run.optimizer.step()
    if canaries is not None:
        canaries.observe(before, run.settings.lr, run.settings.momentum,
                         run.settings.max_grad_norm / divisor, 0.0, 1.0)


def padded_size(records: int) -> int:
    return max(BUCKET, -(-records // BUCKET) * BUCKET)


class EagerSteps:
    """Each step as plain PyTorch calls on exactly the batch drawn.

    `run` is a `jobs.engine.training.ModelRun`; `rows_x`, `rows_y` are the rows its records live in
    (on its device) and `index` (host) says which row each record of its training set is:
    batch indices are records.  `forward` is the model, or its compiled forward pass; `clipper`
    the private run's per-sample clipper (None: non-private)."""

    def __init__(self, run, rows_x: torch.Tensor, rows_y: torch.Tensor, index: torch.Tensor,
                 clipper: Optional[PerSampleClipper], forward: Optional[nn.Module] = None):
        if run.private != (clipper is not None):
            raise ValueError("a private run steps with a per-sample clipper, a non-private one "
                             "without")
        self.run, self.rows_x, self.rows_y, self.index = run, rows_x, rows_y, index
        self.clipper, self.forward = clipper, forward if forward is not None else run.model
        self.batches: list[torch.Tensor] = []
        self.stream: Optional[torch.cuda.Stream] = None

    def begin_epoch(self, batches: list[torch.Tensor]) -> None:
        self.batches = batches

    def step(self, position: int) -> None:
        run, batch = self.run, self.batches[position]
        rows = self.index[batch].to(self.rows_x.device, non_blocking=True)
        x, y = self.rows_x[rows], self.rows_y[rows]
        if self.clipper is not None:  # private
            clipped_sum(self.forward, self.clipper, x, y, run.settings.precision)
            private_update(run)
        else:
            mean_gradient(self.forward, run.optimizer, x, y, run.settings.precision)
            plain_update(run, len(batch))


class PaddedSteps(EagerSteps):
    """Each batch padded to `padded_size` rows of fixed buffers, the padding of weight 0: the
    shapes a CUDA graph replays (`CapturedSteps`), run eagerly here, on any device, so that a
    test on a CPU sees what padding does to the arithmetic."""

    def __init__(self, run, rows_x: torch.Tensor, rows_y: torch.Tensor, index: torch.Tensor,
                 clipper: Optional[PerSampleClipper]):
        super().__init__(run, rows_x, rows_y, index, clipper)
        device = rows_x.device
        capacity = padded_size(len(index))
        self.rows = torch.zeros(capacity, dtype=torch.long, device=device)
        self.weights = torch.zeros(capacity, dtype=torch.float32, device=device)
        self.inverse_size = torch.ones((), dtype=torch.float32, device=device)
        self.warm = False  # the first step here runs on exactly the drawn records
        self.layout: list[tuple[int, int, int]] = []  # per step: (records, padded, offset)

    def begin_epoch(self, batches: list[torch.Tensor]) -> None:
        """Lay the epoch's batches out padded, one after another, and upload them at once."""
        super().begin_epoch(batches)
        sizes = [len(batch) for batch in batches]
        padded = [padded_size(size) for size in sizes]
        offsets = [0]
        for size in padded[:-1]:
            offsets.append(offsets[-1] + size)
        rows = torch.zeros(sum(padded), dtype=torch.long)
        weights = torch.zeros(sum(padded), dtype=torch.float32)
        for batch, offset in zip(batches, offsets):
            rows[offset:offset + len(batch)] = self.index[batch]
            weights[offset:offset + len(batch)] = 1.0
        device = self.rows.device
        if device.type == "cuda":  # from pinned memory the copies do not wait for the host
            rows, weights = rows.pin_memory(), weights.pin_memory()
        self.epoch_rows = rows.to(device, non_blocking=True)
        self.epoch_weights = weights.to(device, non_blocking=True)
        self.layout = list(zip(sizes, padded, offsets))

    def step(self, position: int) -> None:
        records, size, offset = self.layout[position]
        if not self.warm or records == 0:
            super().step(position)
            self.warm = True
            return
        self.rows[:size].copy_(self.epoch_rows[offset:offset + size], non_blocking=True)
        self.weights[:size].copy_(self.epoch_weights[offset:offset + size], non_blocking=True)
        if not self.run.private:
            self.inverse_size.fill_(1.0 / records)
        self._padded_step(size)

    def _padded_step(self, size: int) -> None:
        """One step on the first `size` rows of the buffers, rows of weight 0 included."""
        run = self.run
        rows, weights = self.rows[:size], self.weights[:size]
        x, y = self.rows_x[rows], self.rows_y[rows]
        with autocast(run.settings.precision, x.device):
            if self.clipper is not None:  # private
                with self.clipper.watch():
                    logits = run.model(x)
            else:
                run.optimizer.zero_grad(set_to_none=True)
                logits = run.model(x)
        loss = (F.cross_entropy(logits.float(), y, reduction="none") * weights).sum()
        if self.clipper is not None:  # private
            self.clipper.clip_and_sum(loss)
            private_update(run)
        else:
            (loss * self.inverse_size).backward()
            run.optimizer.step()


class CapturedSteps(PaddedSteps):
    """`PaddedSteps` replayed as CUDA graphs, one per padded size, captured the first time each
    size comes, on the run's own stream, so that several models of one task overlap."""

    def __init__(self, run, rows_x: torch.Tensor, rows_y: torch.Tensor, index: torch.Tensor,
                 clipper: Optional[PerSampleClipper]):
        super().__init__(run, rows_x, rows_y, index, clipper)
        self.stream = torch.cuda.Stream(rows_x.device)
        self.stream.wait_stream(torch.cuda.current_stream(rows_x.device))  # rows uploaded there
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        # The graphs' shared memory pool: they never run at once.
        self.pool: Optional[torch.cuda._POOL_HANDLE] = None

    def _padded_step(self, size: int) -> None:
        graph = self.graphs.get(size)
        if graph is None:
            graph = self.graphs[size] = torch.cuda.CUDAGraph()
            graph.register_generator_state(self.run.rng.noise)
            with torch.cuda.graph(graph, pool=self.pool, stream=self.stream):
                super()._padded_step(size)
            self.pool = self.pool if self.pool is not None else graph.pool()
        graph.replay()


def captures(run, device: torch.device, compiled: bool) -> bool:
    """Whether `run`'s steps can be replayed as CUDA graphs (see the module's docstring)."""
    return (device.type == "cuda" and run.settings.optimizer == "sgd" and run.canaries is None
            and not compiled)
