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

import functools
import io
import math
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional, Protocol

import numpy as np
import torch
from torch import nn

from jobs.clipping import PerSampleClipper
from jobs.datasets import ArrayDataset
from jobs.models import build_model


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


class Checkpoint(Protocol):
    """Where training keeps its per-epoch state (the artifact store provides one per model)."""

    def load(self) -> Optional[bytes]: ...

    def save(self, payload: bytes) -> None: ...


class NoiseCache(Protocol):
    """Where calibrated noise multipliers are kept across tasks (the artifact store provides one)."""

    def get(self, key: str) -> Optional[float]: ...

    def put(self, key: str, value: float) -> None: ...


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


#: RDP orders: Opacus's defaults stop at 63, where the conversion to (ε, δ) alone costs ≈ 0.103 at
#: δ = 1e-5, so smaller ε (Jayaraman et al.'s ε = 0.1) could never be reached.
RDP_ORDERS = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)) + [
    64, 80, 96, 128, 160, 192, 256, 320, 384, 512, 768, 1024, 1536, 2048]


def _accountant_options(accountant: str) -> dict:
    return {"alphas": RDP_ORDERS} if accountant == "rdp" else {}


@dataclass(frozen=True)
class PoissonSchedule:
    """Opacus's Poisson sampling for a training set of `size` records at expected `batch_size`:
    rate q = 1/⌈size/batch⌉, 1/q steps an epoch, gradients divided by int(size·q)."""

    size: int
    batch_size: int

    @property
    def steps_per_epoch(self) -> int:
        return max(1, math.ceil(self.size / self.batch_size))

    @property
    def sample_rate(self) -> float:
        return 1.0 / self.steps_per_epoch

    @property
    def expected_batch_size(self) -> int:
        return max(1, int(self.size * self.sample_rate))


def calibrate_noise(settings: TrainSettings, sample_rate: float,
                    cache: Optional[NoiseCache] = None) -> float:
    """The noise multiplier that spends exactly the target (ε, δ) over the training's steps.

    Opacus's search, with the wider RDP orders and a tolerance relative to ε (its default 0.01 is
    10 % of ε = 0.1); the answer errs on the private side (spent ε ≤ target).  Only a handful of
    distinct (ε, δ, q, epochs, accountant) occur in a sweep, so the answer is kept in this
    process and in `cache` (the store), and each is searched once.
    """
    args = (float(settings.epsilon), settings.delta, float(sample_rate), int(settings.epochs),
            settings.accountant)
    key = "noise-" + "-".join(repr(a) for a in args)
    cached = cache.get(key) if cache is not None else None
    if cached is not None:
        return float(cached)
    sigma = _search_noise(*args)
    if cache is not None:
        cache.put(key, sigma)
    return sigma


@functools.lru_cache(maxsize=256)
def _search_noise(epsilon: float, delta: Optional[float], sample_rate: float, epochs: int,
                  accountant: str) -> float:
    from opacus.accountants.utils import get_noise_multiplier

    return float(get_noise_multiplier(
        target_epsilon=epsilon, target_delta=delta, sample_rate=sample_rate, epochs=epochs,
        accountant=accountant, epsilon_tolerance=min(0.01, 0.001 * epsilon),
        **_accountant_options(accountant)))


@functools.lru_cache(maxsize=1024)
def _epsilon_of_history(accountant: str, delta: Optional[float], history: tuple) -> float:
    """The ε an accountant with this history (its (σ, q, steps) entries) has spent: the same
    for every model trained at one (σ, q) for as many steps, and a fraction of a second of
    Python each (most of a small model's task), so it is computed once per process."""
    from opacus.accountants import create_accountant

    replay = create_accountant(accountant)
    replay.history = [tuple(entry) for entry in history]
    return float(replay.get_epsilon(delta=delta, **_accountant_options(accountant)))


class _Rng:
    """The training's own random streams on its device: Poisson masks (or shuffles) and noise.
    Separate from torch's global state, so checkpoints restore them exactly."""

    def __init__(self, seed: int, device: torch.device):
        self.batches = torch.Generator(device=device)
        self.batches.manual_seed(seed)
        self.noise = torch.Generator(device=device)
        self.noise.manual_seed(seed + 1)

    def state(self) -> dict[str, torch.Tensor]:
        return {"batches": self.batches.get_state(), "noise": self.noise.get_state()}

    def restore(self, state: dict[str, torch.Tensor]) -> None:
        self.batches.set_state(state["batches"])
        self.noise.set_state(state["noise"])


def _batches(rng: _Rng, size: int, batch_size: int, schedule: Optional[PoissonSchedule],
             device: torch.device) -> Iterator[torch.Tensor]:
    """One epoch's batches as index tensors on the device: Poisson masks (DP) or a shuffle."""
    if schedule is None:
        yield from torch.randperm(size, generator=rng.batches, device=device).split(batch_size)
        return
    for _ in range(schedule.steps_per_epoch):
        draw = torch.rand(size, generator=rng.batches, device=device)
        yield (draw < schedule.sample_rate).nonzero().squeeze(1)


PRECISIONS = ("fp32", "bf16")


def autocast(precision: str, device: torch.device):
    """The forward pass's numeric context: bfloat16 autocast for "bf16", a no-op for "fp32"."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


def _dp_step(model: nn.Module, clipper: PerSampleClipper, optimizer: torch.optim.Optimizer,
             x: torch.Tensor, y: torch.Tensor, noise_std: float, expected_batch_size: int,
             rng: _Rng, precision: str = "fp32") -> None:
    """Clipped sum, Gaussian noise of std σ·C on it, divided by the expected batch: Opacus's
    DPOptimizer step with loss reduction "mean", then the wrapped optimizer's own step."""
    if not len(y):  # an empty Poisson batch still takes a noisy step, as the accountant assumes
        clipper.zero_sum()
    elif clipper.closed_form:  # a linear stack: no autograd at all
        clipper.clip_and_sum_cross_entropy(x, y, autocast(precision, x.device))
    else:
        with clipper.watch(), autocast(precision, x.device):
            logits = model(x)
        clipper.clip_and_sum(nn.functional.cross_entropy(logits.float(), y, reduction="sum"))
    noisy_step(model, optimizer, noise_std, expected_batch_size, rng)


def noisy_step(model: nn.Module, optimizer: torch.optim.Optimizer, noise_std: float,
               expected_batch_size: int, rng: _Rng) -> None:
    """Add N(0, noise_std²) to each parameter's clipped-sum `.grad`, divide by the expected
    batch and step: the part of a DP step after clipping, shared with `jobs.stacked`."""
    # The optimizer's list, not `model.parameters()`: walking the modules every step costs more
    # than a small model's noise.
    parameters = [p for group in optimizer.param_groups for p in group["params"] if p.requires_grad]
    sizes = [p.numel() for p in parameters]
    # One draw for every coordinate and one kernel each to add it and divide (a small model's
    # step is a fraction of a millisecond, so kernels per parameter tensor would dominate it).
    noise = torch.normal(0.0, noise_std, size=(sum(sizes),), device=parameters[0].device,
                         generator=rng.noise, dtype=parameters[0].dtype)
    grads = [p.grad for p in parameters]
    torch._foreach_add_(grads, [part.view_as(p) for p, part in zip(parameters, noise.split(sizes))])
    torch._foreach_div_(grads, expected_batch_size)
    optimizer.step()


def _plain_step(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor,
                y: torch.Tensor, precision: str = "fp32") -> None:
    optimizer.zero_grad(set_to_none=True)
    with autocast(precision, x.device):
        logits = model(x)
    nn.functional.cross_entropy(logits.float(), y).backward()
    optimizer.step()


@dataclass
class ModelRun:
    """One model's training state between steps: what `train_model` holds for one model and
    `jobs.stacked` holds for each of K.  `best` is −∞ until an epoch is evaluated."""

    settings: TrainSettings
    model: nn.Module
    optimizer: torch.optim.Optimizer
    rng: _Rng
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

    @property
    def private(self) -> bool:
        return self.schedule is not None

    @property
    def noise_std(self) -> float:
        return self.noise_multiplier * self.settings.max_grad_norm

    def batches(self, device: torch.device) -> Iterator[torch.Tensor]:
        """One epoch's batches (indices into the training set) from this model's own stream."""
        return _batches(self.rng, self.train_size, self.settings.batch_size, self.schedule, device)


def start_run(settings: TrainSettings, mask: np.ndarray, input_shape: tuple[int, ...],
              num_classes: int, seed: int, device: torch.device,
              checkpoint: Optional[Checkpoint] = None,
              noise_cache: Optional[NoiseCache] = None) -> ModelRun:
    """A model's initial weights (from `seed`), optimizer, random streams, noise and
    accountant, restored from `checkpoint` when it holds a readable one."""
    torch.manual_seed(seed)  # the initial weights
    model = build_model(settings.model, input_shape, num_classes).to(device)
    if settings.optimizer == "adam":
        optimizer = torch.optim.Adam(model.parameters(), lr=settings.lr)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=settings.lr, momentum=settings.momentum)
    run = ModelRun(settings, model, optimizer, _Rng(seed, device), checkpoint, int(mask.sum()))
    if math.isfinite(settings.epsilon):
        from opacus.accountants import create_accountant

        run.schedule = PoissonSchedule(run.train_size, settings.batch_size)
        run.noise_multiplier = calibrate_noise(settings, run.schedule.sample_rate, noise_cache)
        run.accountant = create_accountant(settings.accountant)
    run.start_epoch, run.steps, run.best, run.resumed_from = _resume(
        checkpoint, model, optimizer, run.accountant, run.rng)
    return run


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
        _save_checkpoint(run.checkpoint, epoch + 1, run.steps, run.best, run.resumed_from,
                         run.model, run.optimizer, run.accountant, run.rng)


def held_out_tensors(data: ArrayDataset,
                     device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The test split: inputs on the training device, labels on the host."""
    return torch.as_tensor(np.array(data.test_x)).to(device), torch.as_tensor(np.array(data.test_y))


def finish_run(run: ModelRun, data: ArrayDataset, mask: np.ndarray, test_x: torch.Tensor,
               test_y: torch.Tensor, device: torch.device) -> TrainedModel:
    """The trained model: weights, logits on the whole pool, accuracies, the ε spent."""
    settings, model = run.settings, run.model
    epsilon_spent = (_epsilon_of_history(settings.accountant, settings.delta,
                                         tuple(tuple(entry) for entry in run.accountant.history))
                     if run.accountant is not None else math.inf)
    pool_logits = predict_logits(model, data.pool_x, device).astype(np.float32)
    return TrainedModel(
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
    )


def train_model(settings: TrainSettings, data: ArrayDataset, mask: np.ndarray, seed: int,
                device: torch.device, checkpoint: Optional[Checkpoint] = None,
                noise_cache: Optional[NoiseCache] = None,
                compile_model: bool = False) -> TrainedModel:
    """Train on the pool records in `mask`, resuming from `checkpoint` when one exists.

    `compile_model` runs non-private training's forward pass through `torch.compile` (dynamic
    shapes); it changes rounding, not the mechanism, so it is not part of the model's key.  DP
    training stays eager: the per-sample engine needs the gradient at every layer's output,
    which a compiled graph does not expose.
    """
    run = start_run(settings, mask, data.input_shape, data.num_classes, seed, device, checkpoint,
                    noise_cache)
    model = run.model
    forward = torch.compile(model, dynamic=True) if compile_model and not run.private else model
    train_x = torch.as_tensor(np.array(data.pool_x[mask])).to(device)
    train_y = torch.as_tensor(np.array(data.pool_y[mask])).to(device)
    test_x, test_y = held_out_tensors(data, device)
    clipper = PerSampleClipper(model, settings.max_grad_norm) if run.private else None
    for epoch in range(run.start_epoch, settings.epochs):
        model.train()
        for batch in run.batches(device):
            if run.private:
                _dp_step(forward, clipper, run.optimizer, train_x[batch], train_y[batch],
                         run.noise_std, run.schedule.expected_batch_size, run.rng,
                         settings.precision)
            else:
                _plain_step(forward, run.optimizer, train_x[batch], train_y[batch],
                            settings.precision)
            counted_step(run)
        end_epoch(run, epoch, test_x, test_y, device)
    return finish_run(run, data, mask, test_x, test_y, device)


def _save_checkpoint(checkpoint: Checkpoint, epoch: int, steps: int, best: float,
                     resumed_from: list[int], model, optimizer, accountant, rng: _Rng) -> None:
    state = {
        "epoch": epoch,
        "steps": steps,
        "best_test_accuracy": best,
        "resumed_from": list(resumed_from),
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "accountant": accountant.state_dict() if accountant is not None else None,
        "rng": rng.state(),
    }
    buffer = io.BytesIO()
    torch.save(state, buffer)
    checkpoint.save(buffer.getvalue())


def _resume(checkpoint: Optional[Checkpoint], model, optimizer, accountant,
            rng: _Rng) -> tuple[int, int, float, list[int]]:
    """(epochs done, steps done, best test accuracy so far, epochs resumed from), restoring every
    state it saved; without a (readable) checkpoint, a fresh start."""
    payload = checkpoint.load() if checkpoint is not None else None
    if payload is None:
        return 0, 0, -math.inf, []
    state = torch.load(io.BytesIO(payload), weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    if accountant is not None and state["accountant"] is not None:
        accountant.load_state_dict(state["accountant"])
    rng.restore(state["rng"])
    epoch = int(state["epoch"])
    return epoch, int(state["steps"]), float(state["best_test_accuracy"]), \
        [*state["resumed_from"], epoch]
