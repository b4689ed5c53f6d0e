"""Train one model on a Bernoulli sample of the pool, with DP-SGD or without.

The sampling rate p of the pool is applied once, here, to build the training set D; it is not
DP-SGD's per-step rate q = 1/⌈|D| / batch⌉, which (with the steps and the noise multiplier) is
all the accountant sees.  ε = ∞ trains without clipping or noise.

The DP mechanism is Opacus's, step for step: each step takes every record of D independently
with probability q (Poisson sampling), clips each record's gradient to C, adds N(0, σ²C²) to
the sum and divides by the expected batch int(|D|·q); 1/q steps an epoch; Opacus's accountant
counts them.  What differs is the cost: the whole training set lives on the training device,
batches are index masks drawn there, and `jobs.clipping` clips per sample in one backward pass.

Training resumes from a per-epoch checkpoint (model, optimizer, accountant, RNG states), so a
worker killed mid-training costs at most one epoch when Ray retries the task.
"""

from __future__ import annotations

import io
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional, Protocol

import numpy as np
import torch
from torch import nn

from jobs.accounting import NoiseCache, PoissonSchedule, calibrate_noise, epsilon_of_history
from jobs.canaries import CanarySet, GradientCanaries, first_linear
from jobs import clipping
from jobs.clipping import PerSampleClipper
from jobs.datasets import ArrayDataset
from jobs.models import build_model
from jobs.randomness import CANARIES, WEIGHTS, TrainingRng, epoch_batches, gaussian_noise, stream_seed

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainSettings:
    """What determines a model besides its data: all of it goes into the model's content key."""

    model: str
    epochs: int
    batch_size: int
    lr: float
    momentum: float
    max_grad_norm: float
    accountant: str
    epsilon: float
    delta: Optional[float]
    optimizer: str = "sgd"  # or "adam" (DP-Adam: the same noisy gradient fed to Adam)
    # Test accuracy after every `eval_every`-th epoch and after the last; best_test_accuracy is
    # the best of those (1: every epoch, as Thudi et al.'s best-accuracy figures need).
    eval_every: int = 1
    # "fp32", or "bf16": forward passes under bfloat16 autocast (per-sample norms, clipped sums
    # and the optimizer stay in fp32).  It changes the model, so it is in the key (left out of
    # it at "fp32", so keys from before the switch stay valid).
    precision: str = "fp32"
    # Noise seeded from the operating system's entropy (not reproducible: resumed runs differ),
    # each coordinate the sum of four draws of σC/2 as Opacus's secure_mode.  Torch's generator
    # stays a PRNG (Opacus uses a cryptographic one, torchcsprng, not installable here).
    secure_noise: bool = False


@dataclass
class TrainedModel:
    state_dict: dict[str, torch.Tensor]
    pool_logits: np.ndarray  # (pool, classes) float32: every attack reads these
    test_accuracy: float  # after the last epoch
    train_accuracy: float
    noise_multiplier: float
    steps: int
    epsilon_spent: float
    train_size: int
    # The best test accuracy after any evaluated epoch (Thudi et al. report it beside the final one).
    best_test_accuracy: float = math.nan
    # The epoch each resumed attempt started from: one entry per interruption survived.
    resumed_from: list[int] = field(default_factory=list)
    # With canaries (`jobs.canaries`): which are in D, the input canaries' logits and the
    # gradient canaries' white-box statistics, by name (`canary_outputs`).
    canary_outputs: dict[str, np.ndarray] = field(default_factory=dict)
    sample_rate: float = math.nan  # DP-SGD's q (NaN without DP): the audits' privacy profile
    # Wall seconds its training took here (since it resumed, when it did); its share when K
    # models were trained at once (`jobs.stacked`).
    train_seconds: float = math.nan


class Checkpoint(Protocol):
    """Where training keeps its per-epoch state (the artifact store provides one per model)."""

    def load(self) -> Optional[bytes]: ...

    def save(self, payload: bytes) -> None: ...

    def quarantine(self) -> str:
        """Set the saved state aside (it failed to load); where it went."""


def draw_mask(pool_size: int, rate: float, seed: int, complement: bool) -> np.ndarray:
    """Bernoulli(rate) membership over the pool; `complement` flips it (balanced shadow pairs)."""
    mask = np.random.default_rng(seed).random(pool_size) < rate
    return ~mask if complement else mask


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def predict_logits(model: nn.Module, x: np.ndarray | torch.Tensor, device: torch.device,
                   batch: int = 4096) -> np.ndarray:
    """The model's logits on `x`, in large batches on `device`, as float32 on the host."""
    model.eval()
    outputs = []
    with torch.no_grad():
        for start in range(0, len(x), batch):
            # A copy: arrays from Ray's object store are read-only, which torch refuses to wrap.
            chunk = torch.as_tensor(np.array(x[start:start + batch]) if isinstance(x, np.ndarray)
                                    else x[start:start + batch]).to(device)
            outputs.append(model(chunk).float().cpu().numpy())
    return np.concatenate(outputs) if outputs else np.zeros((0, 0), dtype=np.float32)


def _accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, device: torch.device) -> float:
    if not len(y):
        return math.nan
    logits = predict_logits(model, x, device)
    return float((logits.argmax(axis=1) == y.cpu().numpy()).mean())


PRECISIONS = ("fp32", "bf16")


def autocast(precision: str, device: torch.device):
    """The forward pass's numeric context: bfloat16 autocast for "bf16", a no-op for "fp32"."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


def _clipped_sum(model: nn.Module, clipper: PerSampleClipper, x: torch.Tensor, y: torch.Tensor,
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
        clipper.clip_and_sum(nn.functional.cross_entropy(logits.float(), y, reduction="sum"))


def noisy_step(model: nn.Module, optimizer: torch.optim.Optimizer, noise_std: float,
               expected_batch_size: int, rng: TrainingRng) -> None:
    """Add N(0, noise_std²) to each parameter's clipped-sum `.grad`, divide by the expected
    batch and step: the part of a DP step after clipping, shared with `jobs.stacked`."""
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


def _mean_gradient(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor,
                   y: torch.Tensor, precision: str = "fp32") -> None:
    optimizer.zero_grad(set_to_none=True)
    with autocast(precision, x.device):
        logits = model(x)
    nn.functional.cross_entropy(logits.float(), y).backward()


@dataclass
class ModelRun:
    """One model's training state between steps: what `train_model` holds for one model and
    `jobs.stacked` holds for each of K.  `best` is −∞ until an epoch is evaluated."""

    settings: TrainSettings
    model: nn.Module
    optimizer: torch.optim.Optimizer
    rng: TrainingRng
    checkpoint: Optional[Checkpoint]
    train_size: int
    schedule: Optional[PoissonSchedule] = None  # None: non-private (shuffled batches)
    accountant: Any = None
    noise_multiplier: float = 0.0
    start_epoch: int = 0
    steps: int = 0
    best: float = -math.inf
    resumed_from: list[int] = field(default_factory=list)
    last: float = math.nan  # test accuracy after the last epoch trained here
    canary_set: Optional[CanarySet] = None
    canaries: Optional[GradientCanaries] = None  # planted and observed at every step
    rows: int = 0  # the training set's rows: its records, then its input canaries
    started: float = field(default_factory=time.perf_counter)  # when `start_run` made it

    @property
    def private(self) -> bool:
        return self.schedule is not None

    @property
    def noise_std(self) -> float:
        return self.noise_multiplier * self.settings.max_grad_norm

    def batches(self, device: torch.device) -> Iterator[torch.Tensor]:
        """One epoch's batches (indices into the training set) from this model's own stream."""
        return epoch_batches(self.rng, self.rows, self.settings.batch_size, self.schedule, device)


def start_run(settings: TrainSettings, mask: np.ndarray, input_shape: tuple[int, ...],
              num_classes: int, seed: int, device: torch.device,
              checkpoint: Optional[Checkpoint] = None,
              noise_cache: Optional[NoiseCache] = None,
              canaries: Optional[CanarySet] = None) -> ModelRun:
    """A model's initial weights (from `seed`), optimizer, random streams, noise, accountant
    and canaries, restored from `checkpoint` when it holds a readable one.

    DP-SGD's rate q comes from the records alone: planting canaries leaves the schedule and the
    divisor as they are.
    """
    torch.manual_seed(stream_seed(seed, WEIGHTS))  # the initial weights
    model = build_model(settings.model, input_shape, num_classes).to(device)
    if settings.optimizer == "adam":
        optimizer = torch.optim.Adam(model.parameters(), lr=settings.lr)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=settings.lr, momentum=settings.momentum)
    run = ModelRun(settings, model, optimizer, TrainingRng(seed, device, settings.secure_noise),
                   checkpoint, int(mask.sum()))
    run.rows = run.train_size
    if math.isfinite(settings.epsilon):
        from opacus.accountants import create_accountant

        run.schedule = PoissonSchedule(run.train_size, settings.batch_size)
        run.noise_multiplier = calibrate_noise(settings, run.schedule.sample_rate, noise_cache)
        run.accountant = create_accountant(settings.accountant)
    if canaries is not None:
        run.canary_set = canaries
        run.rows += int(canaries.input_included.sum())
        if len(canaries.gradient_coordinates):
            run.canaries = _gradient_canaries(run, canaries, seed)
    _resume(run)
    return run


def _gradient_canaries(run: ModelRun, canaries: CanarySet, seed: int) -> GradientCanaries:
    """The model's gradient canaries: a canary's clipped gradient is what the engine's own clip
    factor makes of a gradient of norm `gradient_norm`·C (C itself without DP, unclipped)."""
    if run.settings.optimizer != "sgd":
        raise ValueError("gradient canaries are observed through SGD's update rule: "
                         f"optimizer {run.settings.optimizer!r} is not supported")
    clip = run.settings.max_grad_norm
    contribution = clip
    if run.private:
        norm = torch.tensor([canaries.design.gradient_norm * clip], dtype=torch.float64)
        # The engine's own clip factor (`jobs.clipping`, which the records' clipping calls), so a
        # clipping bug reaches the canaries too; the canary is not a row of the per-sample pass.
        contribution = float(clipping.clip_factors(norm, clip)[0] * norm[0])
    return GradientCanaries(first_linear(run.model), canaries.gradient_coordinates,
                            canaries.gradient_included, contribution, stream_seed(seed, CANARIES))


def private_update(run: ModelRun) -> None:
    """The noisy step after the clipped sum is in `.grad`: gradient canaries planted into the
    sum, Gaussian noise, the divisor, the optimizer's step, then the canaries observed."""
    schedule, canaries = run.schedule, run.canaries
    before = canaries.plant(schedule.sample_rate) if canaries is not None else None
    noisy_step(run.model, run.optimizer, run.noise_std, schedule.expected_batch_size, run.rng)
    if canaries is not None:
        canaries.observe(before, run.settings.lr, run.settings.momentum,
                         run.settings.max_grad_norm / schedule.expected_batch_size,
                         run.noise_multiplier, schedule.sample_rate)


def plain_update(run: ModelRun, batch_size: int) -> None:
    """The non-private step after the mean gradient is in `.grad`: every included gradient
    canary (in every step: there is no Poisson draw to thin them) adds C/|B|, unclipped."""
    canaries, divisor = run.canaries, max(1, batch_size)
    before = canaries.plant(1.0, 1.0 / divisor) if canaries is not None else None
    run.optimizer.step()
    if canaries is not None:
        canaries.observe(before, run.settings.lr, run.settings.momentum,
                         run.settings.max_grad_norm / divisor, 0.0, 1.0)


def counted_step(run: ModelRun) -> None:
    """Book one step taken: the accountant's (when private) and the step count."""
    if run.accountant is not None:
        run.accountant.step(noise_multiplier=run.noise_multiplier,
                            sample_rate=run.schedule.sample_rate)
    run.steps += 1


def end_epoch(run: ModelRun, epoch: int, test_x: torch.Tensor, test_y: torch.Tensor,
              device: torch.device) -> None:
    """After epoch `epoch` (0-based): test accuracy when it is due, then the checkpoint."""
    settings = run.settings
    if epoch + 1 == settings.epochs or (settings.eval_every > 0
                                        and (epoch + 1) % settings.eval_every == 0):
        run.last = _accuracy(run.model, test_x, test_y, device)
        run.best = max(run.best, run.last)
    if run.checkpoint is not None:
        _save_checkpoint(run, epoch + 1)


def held_out_tensors(data: ArrayDataset,
                     device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The test split: inputs on the training device, labels on the host."""
    return torch.as_tensor(np.array(data.test_x)).to(device), torch.as_tensor(np.array(data.test_y))


def finish_run(run: ModelRun, data: ArrayDataset, mask: np.ndarray, test_x: torch.Tensor,
               test_y: torch.Tensor, device: torch.device, sharing: int = 1) -> TrainedModel:
    """The trained model: weights, logits on the whole pool, accuracies, the ε spent, and the
    seconds since the run started, shared by the `sharing` models trained with it."""
    settings, model = run.settings, run.model
    epsilon_spent = (epsilon_of_history(settings.accountant, settings.delta,
                                         tuple(tuple(entry) for entry in run.accountant.history))
                     if run.accountant is not None else math.inf)
    pool_logits = predict_logits(model, data.pool_x, device).astype(np.float32)
    return TrainedModel(
        canary_outputs=canary_outputs(run, device),
        sample_rate=run.schedule.sample_rate if run.private else math.nan,
        state_dict={k: v.detach().cpu().clone() for k, v in model.state_dict().items()},
        pool_logits=pool_logits,
        test_accuracy=run.last if run.start_epoch < settings.epochs else _accuracy(
            model, test_x, test_y, device),
        # The training records are pool records: their logits are already at hand.
        train_accuracy=float((pool_logits[mask].argmax(axis=1) == data.pool_y[mask]).mean())
        if mask.any() else math.nan,
        noise_multiplier=run.noise_multiplier,
        steps=run.steps,
        epsilon_spent=float(epsilon_spent),
        train_size=int(mask.sum()),
        best_test_accuracy=run.best if run.best > -math.inf else math.nan,  # no test set: NaN
        resumed_from=run.resumed_from,
        train_seconds=(time.perf_counter() - run.started) / sharing,
    )


def canary_outputs(run: ModelRun, device: torch.device) -> dict[str, np.ndarray]:
    """What an auditor reads of a model's canaries: which are in D, the model's logits on the
    input canaries, the gradient canaries' statistics (`GradientCanaries.statistics`)."""
    canaries = run.canary_set
    if canaries is None:
        return {}
    outputs = {"input_included": canaries.input_included,
               "gradient_included": canaries.gradient_included}
    if len(canaries.input_y):
        outputs["input_labels"] = canaries.input_y
        outputs["input_logits"] = predict_logits(run.model, canaries.input_x,
                                                 device).astype(np.float32)
    if run.canaries is not None:
        outputs["gradient_statistics"] = run.canaries.statistics(run.settings.lr)
    return outputs


def training_rows(data: ArrayDataset, mask: np.ndarray,
                  canaries: Optional[CanarySet]) -> tuple[np.ndarray, np.ndarray]:
    """The training set's inputs and labels: the pool records in `mask`, then the input
    canaries included."""
    x, y = data.pool_x[mask], data.pool_y[mask]
    if canaries is None or not canaries.input_included.any():
        return np.array(x), np.array(y)
    included = canaries.input_included
    return (np.concatenate([x, canaries.input_x[included]]),
            np.concatenate([y, canaries.input_y[included]]))


def train_model(settings: TrainSettings, data: ArrayDataset, mask: np.ndarray, seed: int,
                device: torch.device, checkpoint: Optional[Checkpoint] = None,
                noise_cache: Optional[NoiseCache] = None,
                compile_model: bool = False,
                canaries: Optional[CanarySet] = None) -> TrainedModel:
    """Train on the pool records in `mask`, resuming from `checkpoint` when one exists.

    `compile_model` runs non-private training's forward pass through `torch.compile` (dynamic
    shapes); it changes rounding, not the mechanism, so it is not part of the model's key.  DP
    training stays eager: the per-sample engine needs the gradient at every layer's output,
    which a compiled graph does not expose.
    """
    run = start_run(settings, mask, data.input_shape, data.num_classes, seed, device, checkpoint,
                    noise_cache, canaries)
    model = run.model
    forward = torch.compile(model, dynamic=True) if compile_model and not run.private else model
    rows_x, rows_y = training_rows(data, mask, canaries)
    train_x, train_y = torch.as_tensor(rows_x).to(device), torch.as_tensor(rows_y).to(device)
    test_x, test_y = held_out_tensors(data, device)
    clipper = PerSampleClipper(model, settings.max_grad_norm) if run.private else None
    for epoch in range(run.start_epoch, settings.epochs):
        model.train()
        for batch in run.batches(device):
            if run.private:
                _clipped_sum(forward, clipper, train_x[batch], train_y[batch], settings.precision)
                private_update(run)
            else:
                _mean_gradient(forward, run.optimizer, train_x[batch], train_y[batch],
                               settings.precision)
                plain_update(run, len(batch))
            counted_step(run)
        end_epoch(run, epoch, test_x, test_y, device)
    return finish_run(run, data, mask, test_x, test_y, device)


def _save_checkpoint(run: ModelRun, epoch: int) -> None:
    state = {
        "epoch": epoch,
        "steps": run.steps,
        "best_test_accuracy": run.best,
        "resumed_from": list(run.resumed_from),
        "model": run.model.state_dict(),
        "optimizer": run.optimizer.state_dict(),
        "accountant": run.accountant.state_dict() if run.accountant is not None else None,
        "rng": run.rng.state(),
        "canaries": run.canaries.state() if run.canaries is not None else None,
    }
    buffer = io.BytesIO()
    torch.save(state, buffer)
    run.checkpoint.save(buffer.getvalue())


def _resume(run: ModelRun) -> None:
    """Restore every state the run's checkpoint saved (epochs and steps done, the best test
    accuracy so far, the epochs resumed from); without a (readable) checkpoint, a fresh start."""
    payload = run.checkpoint.load() if run.checkpoint is not None else None
    if payload is None:
        return
    try:
        state = torch.load(io.BytesIO(payload), weights_only=True)
    except Exception as error:  # noqa: BLE001 - whatever refused it: start over, never load unsafely
        # Its checksum held, so it was written so: a malicious or incompatible file.  torch's own
        # message suggests weights_only=False: not repeated.
        where = run.checkpoint.quarantine()
        logger.warning("a training checkpoint does not load as plain tensors (weights_only "
                       "refused it: %s): set aside as %s; training starts over",
                       type(error).__name__, where)
        return
    run.model.load_state_dict(state["model"])
    run.optimizer.load_state_dict(state["optimizer"])
    if run.accountant is not None and state["accountant"] is not None:
        run.accountant.load_state_dict(state["accountant"])
    run.rng.restore(state["rng"])
    if run.canaries is not None:
        run.canaries.restore(state["canaries"])
    run.start_epoch = int(state["epoch"])
    run.steps, run.best = int(state["steps"]), float(state["best_test_accuracy"])
    run.resumed_from = [*state["resumed_from"], run.start_epoch]
