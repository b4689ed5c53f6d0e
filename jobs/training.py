"""Train one model on a Bernoulli sample of the pool, with DP-SGD (Opacus) or without.

The sampling rate p of the pool is applied once, here, to build the training set D; it is not
DP-SGD's per-step rate q = batch_size / |D|, which (with the steps and the noise multiplier) is
all the accountant sees.  ε = ∞ trains without clipping or noise.

Training resumes from a per-epoch checkpoint (model, optimizer, accountant, RNG states), so a
worker killed mid-training costs at most one epoch when Ray retries the task.
"""

from __future__ import annotations

import io
import math
import warnings
from dataclasses import dataclass, field
from typing import Optional, Protocol

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from jobs.data import ArrayDataset
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
    optimizer: str = "sgd"  # or "adam" (DP-Adam under Opacus)


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
    # The best test accuracy after any epoch (Thudi et al. report it beside the final one).
    best_test_accuracy: float = math.nan
    # The epoch each resumed attempt started from: one entry per interruption survived.
    resumed_from: list[int] = field(default_factory=list)


class Checkpoint(Protocol):
    """Where training keeps its per-epoch state (the artifact store provides one per model)."""

    def load(self) -> Optional[bytes]: ...

    def save(self, payload: bytes) -> None: ...


def draw_mask(pool_size: int, rate: float, seed: int, complement: bool) -> np.ndarray:
    """Bernoulli(rate) membership over the pool; `complement` flips it (balanced shadow pairs)."""
    mask = np.random.default_rng(seed).random(pool_size) < rate
    return ~mask if complement else mask


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def _accuracy(model: nn.Module, x: np.ndarray, y: np.ndarray, device: torch.device) -> float:
    logits = predict_logits(model, x, device)
    return float((logits.argmax(axis=1) == y).mean()) if len(y) else math.nan


def predict_logits(model: nn.Module, x: np.ndarray, device: torch.device, batch: int = 2048) -> np.ndarray:
    model.eval()
    outputs = []
    with torch.no_grad():
        for start in range(0, len(x), batch):
            # A copy: arrays from Ray's object store are read-only, which torch refuses to wrap.
            chunk = torch.tensor(x[start : start + batch], device=device)
            outputs.append(model(chunk).float().cpu().numpy())
    return np.concatenate(outputs) if outputs else np.zeros((0, 0), dtype=np.float32)


#: Opacus's notices that say nothing about this run: the secure RNG (we seed for reproducibility,
#: not for a production release) and the per-sample-gradient hook on the input layer.
_HARMLESS_WARNINGS = ("Secure RNG turned off", "Full backward hook is firing")


def _train(
    settings: TrainSettings,
    data: ArrayDataset,
    mask: np.ndarray,
    seed: int,
    device: torch.device,
    checkpoint: Optional[Checkpoint] = None,
) -> TrainedModel:
    torch.manual_seed(seed)  # drives shuffling, Poisson batches and DP noise alike
    train_x = torch.as_tensor(data.pool_x[mask])
    train_y = torch.as_tensor(data.pool_y[mask])
    model = build_model(settings.model, data.input_shape, data.num_classes).to(device)
    if settings.optimizer == "adam":
        optimizer = torch.optim.Adam(model.parameters(), lr=settings.lr)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=settings.lr, momentum=settings.momentum)
    loader = DataLoader(TensorDataset(train_x, train_y), batch_size=settings.batch_size, shuffle=True)

    private = math.isfinite(settings.epsilon)
    engine = None
    noise_multiplier = 0.0
    if private:
        from opacus import PrivacyEngine

        engine = PrivacyEngine(accountant=settings.accountant)
        noise_multiplier = calibrate_noise(settings, sample_rate=1.0 / len(loader))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # make_private's advice on settings we chose on purpose
            model, optimizer, loader = engine.make_private(
                module=model, optimizer=optimizer, data_loader=loader,
                noise_multiplier=noise_multiplier, max_grad_norm=settings.max_grad_norm,
                poisson_sampling=True,
            )

    start_epoch, steps, best, resumed_from = _resume(checkpoint, model, optimizer, engine)
    plain = model._module if hasattr(model, "_module") else model
    last = math.nan  # test accuracy after the last epoch trained here
    for epoch in range(start_epoch, settings.epochs):
        model.train()
        for batch_x, batch_y in loader:
            batch_x, batch_y = batch_x.to(device), batch_y.to(device)
            optimizer.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(model(batch_x), batch_y)
            loss.backward()
            optimizer.step()
            steps += 1
        last = _accuracy(plain, data.test_x, data.test_y, device)
        best = max(best, last)
        if checkpoint is not None:
            _save_checkpoint(checkpoint, epoch + 1, steps, best, resumed_from, model, optimizer,
                             engine)

    epsilon_spent = (engine.accountant.get_epsilon(delta=settings.delta, **_accountant_options(settings))
                     if engine is not None else math.inf)
    pool_logits = predict_logits(plain, data.pool_x, device).astype(np.float32)
    return TrainedModel(
        state_dict={k: v.detach().cpu() for k, v in plain.state_dict().items()},
        pool_logits=pool_logits,
        test_accuracy=last if start_epoch < settings.epochs else _accuracy(
            plain, data.test_x, data.test_y, device),
        # The training records are pool records: their logits are already at hand.
        train_accuracy=float((pool_logits[mask].argmax(axis=1) == data.pool_y[mask]).mean())
        if mask.any() else math.nan,
        noise_multiplier=noise_multiplier,
        steps=steps,
        epsilon_spent=float(epsilon_spent),
        train_size=int(mask.sum()),
        best_test_accuracy=best if best > -math.inf else math.nan,  # no test set: NaN
        resumed_from=resumed_from,
    )


#: RDP orders: Opacus's defaults stop at 63, where the conversion to (ε, δ) alone costs ≈ 0.103 at
#: δ = 1e-5, so smaller ε (Jayaraman et al.'s ε = 0.1) could never be reached.
RDP_ORDERS = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)) + [
    64, 80, 96, 128, 160, 192, 256, 320, 384, 512, 768, 1024, 1536, 2048]


def _accountant_options(settings: TrainSettings) -> dict:
    return {"alphas": RDP_ORDERS} if settings.accountant == "rdp" else {}


def calibrate_noise(settings: TrainSettings, sample_rate: float) -> float:
    """The noise multiplier that spends exactly the target (ε, δ) over the training's steps.

    Opacus's search, with the wider RDP orders and a tolerance relative to ε (its default 0.01 is
    10 % of ε = 0.1); the answer errs on the private side (spent ε ≤ target).
    """
    from opacus.accountants.utils import get_noise_multiplier

    return float(get_noise_multiplier(
        target_epsilon=settings.epsilon, target_delta=settings.delta, sample_rate=sample_rate,
        epochs=settings.epochs, accountant=settings.accountant,
        epsilon_tolerance=min(0.01, 0.001 * settings.epsilon), **_accountant_options(settings)))


def train_model(settings: TrainSettings, data: ArrayDataset, mask: np.ndarray, seed: int,
                device: torch.device, checkpoint: Optional[Checkpoint] = None) -> TrainedModel:
    """Train on the pool records in `mask`, resuming from `checkpoint` when one exists."""
    with warnings.catch_warnings():
        for message in _HARMLESS_WARNINGS:
            warnings.filterwarnings("ignore", message=message)
        return _train(settings, data, mask, seed, device, checkpoint)


def _save_checkpoint(checkpoint: Checkpoint, epoch: int, steps: int, best: float,
                     resumed_from: list[int], model, optimizer, engine) -> None:
    state = {
        "epoch": epoch,
        "steps": steps,
        "best_test_accuracy": best,
        "resumed_from": list(resumed_from),
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "accountant": engine.accountant.state_dict() if engine is not None else None,
        "torch_rng": torch.get_rng_state(),
    }
    buffer = io.BytesIO()
    torch.save(state, buffer)
    checkpoint.save(buffer.getvalue())


def _resume(checkpoint: Optional[Checkpoint], model, optimizer,
            engine) -> tuple[int, int, float, list[int]]:
    """(epochs done, steps done, best test accuracy so far, epochs resumed from), restoring every
    state it saved; without a (readable) checkpoint, a fresh start."""
    payload = checkpoint.load() if checkpoint is not None else None
    if payload is None:
        return 0, 0, -math.inf, []
    state = torch.load(io.BytesIO(payload), weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    if engine is not None and state["accountant"] is not None:
        engine.accountant.load_state_dict(state["accountant"])
    torch.set_rng_state(state["torch_rng"])
    epoch = int(state["epoch"])
    return epoch, int(state["steps"]), float(state["best_test_accuracy"]), \
        [*state["resumed_from"], epoch]
