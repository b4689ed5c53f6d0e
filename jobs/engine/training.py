"""Train one model on a Bernoulli sample of the pool, with DP-SGD or without.

The sampling rate p of the pool is applied once, here, to build the training set D; it is not
DP-SGD's per-step rate q = 1/⌈|D| / batch⌉, which (with the steps and the noise multiplier) is
all the accountant sees.  ε = ∞ trains without clipping or noise.

The DP mechanism is Opacus's, step for step: each step takes every record of D independently
with probability q (Poisson sampling), clips each record's gradient to C, adds N(0, σ²C²) to
the sum and divides by the expected batch int(|D|·q); 1/q steps an epoch; Opacus's accountant
counts them.  What differs is the cost: the pool lives on the training device, batches are drawn
on the host an epoch at a time, `jobs.engine.clipping` clips per sample in one backward pass, and on a
GPU each step is replayed as a CUDA graph (`jobs.engine.steps`).  `train_runs` trains several models
of one task step by step, each on its own CUDA stream, so that their kernels overlap.

Training resumes from a checkpoint taken at an epoch's end (model, optimizer, accountant, RNG
states) at most every `checkpoint_seconds`, so a worker killed mid-training costs at most that
long, or one epoch, when Ray retries the task.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional, Protocol, cast

import numpy as np
import torch
from torch import nn

from jobs.datasets import ArrayDataset
from jobs.engine import clipping
from jobs.engine.accounting import (NoiseCache, PoissonSchedule, calibrate_noise,
                                    epsilon_of_history, rate_size)
from jobs.engine.canaries import CanarySet, GradientCanaries, first_linear
from jobs.engine.clipping import PerSampleClipper, tf32_convolutions
from jobs.engine.randomness import CANARIES, WEIGHTS, TrainingRng, epoch_batches, stream_seed
from jobs.engine.steps import CapturedSteps, EagerSteps, captures
from jobs.models import build_model

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
    # With canaries (`jobs.engine.canaries`): which are in D, the input canaries' logits and the
    # gradient canaries' white-box statistics, by name (`canary_outputs`).
    canary_outputs: dict[str, np.ndarray] = field(default_factory=dict)
    sample_rate: float = math.nan  # DP-SGD's q (NaN without DP): the audits' privacy profile
    # Wall seconds its training took here (since it resumed, when it did); its share when K
    # models were trained at once (`jobs.engine.stacked`).
    train_seconds: float = math.nan


@dataclass(frozen=True)
class TrainOptions:
    """How a model is trained rather than what it is: speed and rounding, never the mechanism,
    so none of it enters the model's key.

    Attributes:
        compile: non-private training's forward pass through `torch.compile` (dynamic shapes).
            DP training is never compiled: the per-sample engine needs the gradient at every
            layer's output, which a compiled graph does not expose.
        checkpoint_seconds: the training state is saved at an epoch's end once this long has
            passed since the last save (0: every epoch).
        channels_last: convolutional models' weights and activations stored NHWC, per-record
            gradients taken in that layout (saved weights are contiguous either way).
        tf32: per-record gradients' products in TF32 on a GPU (`jobs.engine.clipping.tf32_products`),
            and cuDNN's convolutions in TF32 (`jobs.engine.clipping.tf32_convolutions`); false: fp32
            everywhere, cuDNN included.  Book-keeping layers are fp32 either way.
    """

    compile: bool = False
    checkpoint_seconds: float = 0.0
    channels_last: bool = False
    tf32: bool = False

    def on(self, device: torch.device) -> "TrainOptions":
        """The options as a sweep applies them on `device`: the GPU's own ones off on a CPU
        (where they were not measured to pay); `jobs` itself honours them anywhere."""
        if device.type == "cuda":
            return self
        return dataclasses.replace(self, channels_last=False, tf32=False)


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


@dataclass
class PoolLogits:
    """A model's logits on the way to host memory (`launch_logits`): `numpy()` waits for them."""

    host: torch.Tensor
    copied: Optional[torch.cuda.Event] = None  # None: on the host already
    device: Optional[torch.Tensor] = None  # the copy's source, alive until it is done

    def ready(self) -> bool:
        return self.copied is None or self.copied.query()

    def numpy(self) -> np.ndarray:
        if self.copied is not None:
            self.copied.synchronize()
        return self.host.numpy()


def launch_logits(model: nn.Module, x: torch.Tensor, batch: int = 4096) -> PoolLogits:
    """The model's logits on `x` (on its device), as `predict_logits` computes them, queued on
    the current stream with their copy to pinned host memory: on a GPU nothing waits for them
    here, so the training thread goes on stepping the task's other models meanwhile."""
    model.eval()
    with torch.no_grad():
        logits = (torch.cat([model(x[start:start + batch]).float() for start in range(0, len(x), batch)])
                  if len(x) else torch.zeros((0, 0)))
    if not logits.is_cuda:
        return PoolLogits(logits)
    host = torch.empty(logits.shape, dtype=torch.float32, pin_memory=True)
    host.copy_(logits, non_blocking=True)
    copied = torch.cuda.Event()
    copied.record()
    return PoolLogits(host, copied, logits)


def device_accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor,
                    batch: int = 4096) -> torch.Tensor:
    """The share of `x` (on the model's device) that `model` labels `y` (same device), as a
    0-d tensor there: nothing waits for the device until the number is read."""
    if not len(y):
        return torch.tensor(math.nan)
    model.eval()
    with torch.no_grad():
        correct = sum((model(x[start:start + batch]).argmax(1) == y[start:start + batch]).sum()
                      for start in range(0, len(y), batch))
    model.train()
    return correct / len(y)


@dataclass
class ModelRun:
    """One model's training state between steps: what `train_model` holds for one model and
    `jobs.engine.stacked` holds for each of K.  `best` is −∞ until an epoch is evaluated."""

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
    best: Any = -math.inf  # a float, or a 0-d tensor on the device once an epoch is evaluated
    resumed_from: list[int] = field(default_factory=list)
    last: Any = math.nan  # test accuracy after the last epoch trained here (like `best`)
    canary_set: Optional[CanarySet] = None
    canaries: Optional[GradientCanaries] = None  # planted and observed at every step
    rows: int = 0  # the training set's rows: its records, then its input canaries
    started: float = field(default_factory=time.perf_counter)  # when `start_run` made it
    saved: float = field(default_factory=time.perf_counter)  # when its state was last saved

    @property
    def private(self) -> bool:
        return self.schedule is not None

    @property
    def noise_std(self) -> float:
        return self.noise_multiplier * self.settings.max_grad_norm

    def batches(self) -> list[torch.Tensor]:
        """One epoch's batches (host indices into the training set) from its own stream."""
        return epoch_batches(self.rng, self.rows, self.settings.batch_size, self.schedule)


def start_run(settings: TrainSettings, mask: np.ndarray, input_shape: tuple[int, ...],
              num_classes: int, seed: int, device: torch.device,
              checkpoint: Optional[Checkpoint] = None,
              noise_cache: Optional[NoiseCache] = None,
              canaries: Optional[CanarySet] = None,
              public_size: Optional[int] = None,
              channels_last: bool = False,
              initial_state: Optional[dict[str, torch.Tensor]] = None) -> ModelRun:
    """A model's initial weights (from `seed`, or `initial_state` where an auditor crafted
    them, `jobs.audits.blackbox`), optimizer, random streams, noise, accountant and canaries,
    restored from `checkpoint` when it holds a readable one.

    DP-SGD's rate q and divisor come from `public_size` when one is declared, else from the
    records in `mask` (`jobs.engine.accounting.rate_size`); planting canaries leaves both as they are.
    """
    torch.manual_seed(stream_seed(seed, WEIGHTS))  # the initial weights
    model = build_model(settings.model, input_shape, num_classes).to(device)
    if initial_state is not None:
        model.load_state_dict(initial_state)
    if channels_last:  # 4-D weights NHWC: every convolution's output follows (`TrainOptions`)
        model = model.to(memory_format=torch.channels_last)
    optimizer: torch.optim.Optimizer
    if settings.optimizer == "adam":
        optimizer = torch.optim.Adam(model.parameters(), lr=settings.lr)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=settings.lr, momentum=settings.momentum)
    run = ModelRun(settings, model, optimizer, TrainingRng(seed, device, settings.secure_noise),
                   checkpoint, int(mask.sum()))
    run.rows = run.train_size
    if math.isfinite(settings.epsilon):
        from opacus.accountants import create_accountant

        run.schedule = PoissonSchedule(rate_size(run.train_size, public_size), settings.batch_size)
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
        # The engine's own clip factor (`jobs.engine.clipping`, which the records' clipping calls), so a
        # clipping bug reaches the canaries too; the canary is not a row of the per-sample pass.
        contribution = float(clipping.clip_factors(norm, clip)[0] * norm[0])
    layer = first_linear(run.model)
    if layer is None:
        raise ValueError(f"gradient canaries live in a first linear layer: model "
                         f"{run.settings.model!r} has none")
    return GradientCanaries(layer, canaries.gradient_coordinates,
                            canaries.gradient_included, contribution, stream_seed(seed, CANARIES))


def counted_step(run: ModelRun) -> None:
    """Book one step taken: the accountant's (when private) and the step count."""
    if run.accountant is not None:
        if run.schedule is None:
            raise ValueError("the accountant books Poisson-sampled steps: the run has no schedule")
        run.accountant.step(noise_multiplier=run.noise_multiplier,
                            sample_rate=run.schedule.sample_rate)
    run.steps += 1


def end_epoch(run: ModelRun, epoch: int, test_x: torch.Tensor, test_y: torch.Tensor,
              checkpoint_seconds: float) -> None:
    """After epoch `epoch` (0-based): test accuracy when it is due (kept on the device), then
    the checkpoint when `checkpoint_seconds` have passed since the last one (0: every epoch)."""
    settings = run.settings
    if epoch + 1 == settings.epochs or (settings.eval_every > 0
                                        and (epoch + 1) % settings.eval_every == 0):
        run.last = device_accuracy(run.model, test_x, test_y)
        run.best = (run.last if not torch.is_tensor(run.best) and run.best == -math.inf
                    else torch.maximum(torch.as_tensor(run.best, device=run.last.device), run.last))
    if run.checkpoint is not None and time.perf_counter() - run.saved >= checkpoint_seconds:
        _save_checkpoint(run, epoch + 1)
        run.saved = time.perf_counter()


def on_device(x: np.ndarray, y: np.ndarray,
              device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Records and labels on the training device (a copy: arrays from Ray's object store are
    read-only, which torch refuses to wrap)."""
    return torch.as_tensor(np.array(x)).to(device), torch.as_tensor(np.array(y)).to(device)


def finish_run(run: ModelRun, data: ArrayDataset, mask: np.ndarray, pool_x: torch.Tensor,
               test_x: torch.Tensor, test_y: torch.Tensor, sharing: int = 1,
               logits: Optional[PoolLogits] = None) -> TrainedModel:
    """The trained model: weights, logits on the whole pool (`pool_x`, on the device: its
    first rows are the pool's; `logits` when launched already), accuracies, the ε spent, and
    the seconds since the run started, shared by the `sharing` models trained with it."""
    settings, model, device = run.settings, run.model, pool_x.device
    epsilon_spent = (epsilon_of_history(settings.accountant, settings.delta,
                                         tuple(tuple(entry) for entry in run.accountant.history))
                     if run.accountant is not None else math.inf)
    if logits is None:
        logits = launch_logits(model, pool_x[:len(data.pool_y)])
    pool_logits = logits.numpy().astype(np.float32)
    best = float(run.best)
    return TrainedModel(
        canary_outputs=canary_outputs(run, device),
        sample_rate=run.schedule.sample_rate if run.schedule is not None else math.nan,
        state_dict={k: v.detach().cpu().contiguous().clone() for k, v in model.state_dict().items()},
        pool_logits=pool_logits,
        test_accuracy=float(run.last if run.start_epoch < settings.epochs
                            else device_accuracy(model, test_x, test_y)),
        # The training records are pool records: their logits are already at hand.
        train_accuracy=float((pool_logits[mask].argmax(axis=1) == data.pool_y[mask]).mean())
        if mask.any() else math.nan,
        noise_multiplier=run.noise_multiplier,
        steps=run.steps,
        epsilon_spent=float(epsilon_spent),
        train_size=int(mask.sum()),
        best_test_accuracy=best if best > -math.inf else math.nan,  # no test set: NaN
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


@dataclass(frozen=True)
class Member:
    """One model of a task: its training set within the pool, its seed, its checkpoint, and
    its canaries (every member of a task has the same design, with its own inclusion masks)."""

    mask: np.ndarray
    seed: int
    checkpoint: Optional[Checkpoint] = None
    canaries: Optional[CanarySet] = None
    # The public size DP-SGD's rate and divisor come from (None: the records in `mask`).
    public_size: Optional[int] = None
    # Initial weights an auditor crafted (`jobs.audits.blackbox`); None: drawn from `seed`.
    initial_state: Optional[dict[str, torch.Tensor]] = None


def start_members(settings: TrainSettings, data: ArrayDataset, members: list[Member],
                  device: torch.device, noise_cache: Optional[NoiseCache],
                  channels_last: bool = False) -> list[ModelRun]:
    """Each member's run (`start_run`), for the one-by-one and the stacked trainers alike."""
    return [start_run(settings, m.mask, data.input_shape, data.num_classes, m.seed, device,
                      m.checkpoint, noise_cache, m.canaries, m.public_size, channels_last,
                      m.initial_state)
            for m in members]


def group_rows(data: ArrayDataset, members: list[Member]
               ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """The task's rows (the pool, then the input canaries every member shares) and each
    model's training set as row indices: record j of model k's D is row index[k][j], its pool
    records then its input canaries (the order `canary_set` gives them)."""
    x, y = np.array(data.pool_x), np.array(data.pool_y)
    canaries = members[0].canaries
    if canaries is None or not len(canaries.input_y):
        return x, y, [np.flatnonzero(m.mask) for m in members]
    index = []
    for m in members:
        if m.canaries is None:
            raise ValueError("the models of one task plant the same input canaries, or none")
        index.append(np.concatenate([np.flatnonzero(m.mask),
                                     len(y) + np.flatnonzero(m.canaries.input_included)]))
    return np.concatenate([x, canaries.input_x]), np.concatenate([y, canaries.input_y]), index


def train_runs(settings: TrainSettings, data: ArrayDataset, members: list[Member],
               device: torch.device, noise_cache: Optional[NoiseCache] = None,
               options: TrainOptions = TrainOptions()) -> Iterator[tuple[int, TrainedModel]]:
    """Train every member, a step of each in turn, yielding (member index, trained model) as
    each one finishes.  Each model is the model trained alone: its own weights, optimizer,
    streams, accountant and checkpoint; on a GPU its own CUDA stream and graphs (`jobs.engine.steps`),
    so the members' kernels overlap.  The pool is on the device once for all of them."""
    with tf32_convolutions(options.tf32):  # cuDNN as `train.tf32` says, for the whole training
        yield from _train_runs(settings, data, members, device, noise_cache, options)


def _train_runs(settings: TrainSettings, data: ArrayDataset, members: list[Member],
                device: torch.device, noise_cache: Optional[NoiseCache],
                options: TrainOptions) -> Iterator[tuple[int, TrainedModel]]:
    runs = start_members(settings, data, members, device, noise_cache, options.channels_last)
    rows_x, rows_y, index = group_rows(data, members)
    pool_x, pool_y = on_device(rows_x, rows_y, device)
    test_x, test_y = on_device(data.test_x, data.test_y, device)
    steppers = [_stepper(run, pool_x, pool_y, torch.as_tensor(rows), device, options)
                for run, rows in zip(runs, index)]
    epoch = [run.start_epoch for run in runs]
    position = [0] * len(runs)
    active = list(range(len(runs)))
    for k in active:
        if epoch[k] < settings.epochs:
            with _on(steppers[k].stream):
                steppers[k].begin_epoch(runs[k].batches())
    launched: dict[int, PoolLogits] = {}  # finished models' pool logits on their way
    while active or launched:
        finished = []
        for k in active:
            run, stepper = runs[k], steppers[k]
            with _on(stepper.stream):
                while epoch[k] < settings.epochs and position[k] == len(stepper.batches):
                    end_epoch(run, epoch[k], test_x, test_y, options.checkpoint_seconds)
                    epoch[k], position[k] = epoch[k] + 1, 0
                    if epoch[k] < settings.epochs:
                        stepper.begin_epoch(run.batches())
                if epoch[k] == settings.epochs:
                    finished.append(k)
                    continue
                stepper.step(position[k])
                counted_step(run)
                position[k] += 1
        for k in finished:  # the pool's logits queued: the others' steps go on meanwhile
            active.remove(k)
            with _on(steppers[k].stream):
                launched[k] = launch_logits(runs[k].model, pool_x[:len(data.pool_y)])
        for k in [k for k, logits in launched.items() if logits.ready() or not active]:
            with _on(steppers[k].stream):
                trained = finish_run(runs[k], data, members[k].mask, pool_x, test_x, test_y,
                                     sharing=len(runs), logits=launched.pop(k))
            yield k, trained


def _stepper(run: ModelRun, pool_x: torch.Tensor, pool_y: torch.Tensor, index: torch.Tensor,
             device: torch.device, options: TrainOptions) -> EagerSteps:
    """How `run` takes its steps: replayed as CUDA graphs where it can (`jobs.engine.steps.captures`),
    else eagerly (with the compiled forward pass, for non-private training that asks for it)."""
    clipper = (PerSampleClipper(run.model, run.settings.max_grad_norm, options.tf32)
               if run.private else None)
    compiled = options.compile and not run.private
    if captures(run, device, compiled):
        return CapturedSteps(run, pool_x, pool_y, index, clipper)
    # A compiled Module is a Module (OptimizedModule); torch.compile's stub says only Callable.
    forward = cast(nn.Module, torch.compile(run.model, dynamic=True)) if compiled else None
    return EagerSteps(run, pool_x, pool_y, index, clipper, forward)


def _on(stream: Optional[torch.cuda.Stream]):
    return torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()


def train_model(settings: TrainSettings, data: ArrayDataset, mask: np.ndarray, seed: int,
                device: torch.device, checkpoint: Optional[Checkpoint] = None,
                noise_cache: Optional[NoiseCache] = None,
                canaries: Optional[CanarySet] = None,
                options: TrainOptions = TrainOptions(),
                public_size: Optional[int] = None) -> TrainedModel:
    """Train one model on the pool records in `mask` (`train_runs`), resuming from
    `checkpoint` when one exists; DP-SGD's rate from `public_size` when declared."""
    return next(train_runs(settings, data, [Member(mask, seed, checkpoint, canaries, public_size)],
                           device, noise_cache, options))[1]


def _save_checkpoint(run: ModelRun, epoch: int) -> None:
    if run.checkpoint is None:
        raise ValueError("the run has no checkpoint to save to")
    state = {
        "epoch": epoch,
        "steps": run.steps,
        "best_test_accuracy": float(run.best),
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
    if run.checkpoint is None:
        return
    payload = run.checkpoint.load()
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
