"""Canaries: worst-case records planted in a model's training set to audit its DP guarantee.

Why.  Thudi et al.'s bound holds for *every* record; attacks on average records sit at the prior
long before the bound says anything, so they can neither tell a loose bound from a weak attack
nor notice a bug in the DP engine.  Canaries are the records DP must protect worst:

* **input canaries** (black box, final model): crafted records added to D like members —
  `mislabeled` pool records taken past every model's pool with their label shifted, or `noise`
  inputs (uniform on [0, 1]) with random labels.  The attacker sees the final model's logits on
  them (loss or LiRA, with shadows that hold or lack each canary by their own masks).
* **gradient canaries** (Nasr et al. 2023's Dirac canaries): an adversary-controlled record whose
  per-sample gradient, when it is in D and drawn into a Poisson batch, is `gradient_norm`·C times
  a unit vector e_j.  Clipping brings it to C·e_j.  Each canary owns one weight of the first
  linear layer whose input feature is zero in every record the sweep holds, so no record's
  gradient moves it and planting canaries changes no output.  The white-box adversary reads the
  final weights (θ0 − θT at j) or every iterate (each step's gradient at j recovered from
  θ_t − θ_{t+1}, summed or as the subsampled Gaussian's likelihood ratio).

Each canary is in D independently with the model's sampling rate p (a Bernoulli mask from the
model's mask seed, complemented for shadow pairs), so a canary cell has the cell's prior.  The
canaries do not change DP-SGD's rate q (computed from the records alone) or its divisor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch
from torch import nn

from jobs.engine.canary_columns import FINAL, ITERATE_LIKELIHOOD_RATIO, ITERATE_SUM


@dataclass(frozen=True)
class CanaryDesign:
    """Which canaries every model of a sweep holds (with its own inclusion mask): in model keys.

    `input_offset` is where mislabeled canaries are taken from the sweep's pool: past every
    model's own pool, so no model holds one as an ordinary record.
    """

    input_count: int
    input_recipe: str
    input_offset: int
    gradient_count: int
    gradient_norm: float  # a canary's gradient norm, in multiples of C (clipped to C)
    seed: int
    # The black-box final-model audit (`jobs.audits.blackbox`): training runs from crafted initial
    # weights per model (0: none), the blank canary's label, and the public pool records
    # [final_public_offset, + final_public_count) the weights are pre-trained on, and the
    # recipe they are pre-trained by (`jobs.engine.canary_columns.CRAFTINGS`) and its steps ("plain").
    final_runs: int = 0
    final_label: int = 0
    final_public_offset: int = 0
    final_public_count: int = 0
    final_crafting: str = "decoy"
    final_pretrain_steps: int = 0

    @property
    def records_needed(self) -> int:
        """Pool records the design reads (the mislabeled canaries' end, the crafted weights'
        public records' end; 0 otherwise)."""
        inputs = self.input_offset + self.input_count if self.input_recipe == "mislabeled" else 0
        public = self.final_public_offset + self.final_public_count if self.final_runs else 0
        return max(inputs, public)


def canary_masks(design: CanaryDesign, rate: float, mask_seed: int,
                 complement: bool) -> tuple[np.ndarray, np.ndarray]:
    """(input canaries included, gradient canaries included): Bernoulli(rate) from the model's
    mask seed on a stream of their own, flipped for the second of a shadow pair."""
    rng = np.random.default_rng([mask_seed, 0x6361_6E61])  # "cana"
    inputs = rng.random(design.input_count) < rate
    gradients = rng.random(design.gradient_count) < rate
    return (~inputs, ~gradients) if complement else (inputs, gradients)


def input_canaries(design: CanaryDesign, pool_x: np.ndarray, pool_y: np.ndarray,
                   num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """The input canaries' (inputs, labels), the same for every model of the sweep.

    `mislabeled`: pool records [input_offset, input_offset + count) of the sweep's pool, each
    label moved by 1..classes−1; `noise`: uniform inputs of the pool's shape, random labels.
    """
    rng = np.random.default_rng([design.seed, 1])
    count = design.input_count
    if design.input_recipe == "mislabeled":
        end = design.input_offset + count
        if end > len(pool_y):
            raise ValueError(f"mislabeled canaries need pool records up to {end}; the pool holds "
                             f"{len(pool_y)}")
        x = np.array(pool_x[design.input_offset:end], dtype=np.float32)
        y = (pool_y[design.input_offset:end] + rng.integers(1, num_classes, count)) % num_classes
        return x, y.astype(np.int64)
    x = rng.random((count, *pool_x.shape[1:]), dtype=np.float32)
    return x, rng.integers(0, num_classes, count).astype(np.int64)


def first_linear(model: nn.Module) -> Optional[nn.Linear]:
    """The model's first layer when it is (after an optional Flatten) a linear layer over the
    flattened input: the layer whose weights gradient canaries use; None otherwise."""
    layers = list(model) if isinstance(model, nn.Sequential) else []
    if layers and isinstance(layers[0], nn.Flatten):
        layers = layers[1:]
    return layers[0] if layers and isinstance(layers[0], nn.Linear) else None


def untouched_features(*arrays: np.ndarray) -> np.ndarray:
    """Indices of the flattened input features that are zero in every record of `arrays`."""
    touched = None
    for x in arrays:
        x = np.asarray(x)
        nonzero = np.any(x.reshape(len(x), int(np.prod(x.shape[1:]))) != 0, axis=0)
        touched = nonzero if touched is None else touched | nonzero
    if touched is None:
        raise ValueError("untouched_features needs at least one array")
    return np.flatnonzero(~touched)


def gradient_coordinates(design: CanaryDesign, layer: nn.Linear,
                         features: np.ndarray) -> np.ndarray:
    """The flat indices into `layer.weight` of the canaries' coordinates: weights (o, i) whose
    input feature i is in `features`, `gradient_count` of them in a seeded order."""
    out_features, in_features = layer.weight.shape
    free = (np.arange(out_features)[:, None] * in_features + features[None, :]).ravel()
    if len(free) < design.gradient_count:
        raise ValueError(f"{design.gradient_count} gradient canaries need as many weights that no "
                         f"record touches; the first linear layer has {len(free)}")
    return np.sort(np.random.default_rng([design.seed, 2]).permutation(free)[:design.gradient_count])


class GradientCanaries:
    """The gradient canaries inside one model's training, and the white-box adversary watching it.

    `plant` adds each drawn canary's clipped gradient to the clipped sum (before the noise);
    `observe` is the adversary's side: from the iterates alone (the coordinates' values before
    and after the step, the public learning rate, momentum, divisor and noise multiplier) it
    recovers the step's gradient at each coordinate, g_t = v_t − μ·v_{t−1} with
    v_t = (θ_t − θ_{t+1})/η, in units of C/B: z_t ~ (canaries drawn) + N(0, σ²), and accumulates
    Σ z_t and the subsampled Gaussian's log-likelihood ratio Σ log(1 − q + q·e^{(2z_t − 1)/(2σ²)}).
    It never reads what was planted, so a noise, clipping or sampling bug shows in its statistics.
    """

    def __init__(self, layer: nn.Linear, coordinates: np.ndarray, included: np.ndarray,
                 contribution: float, seed: int):
        device = layer.weight.device
        self.layer = layer
        self.coordinates = torch.as_tensor(coordinates, dtype=torch.long, device=device)
        self.included = torch.as_tensor(included, dtype=torch.bool, device=device)
        self.contribution = contribution
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)
        count = len(coordinates)
        self.initial = self._values().clone()
        self.sums = torch.zeros(count, dtype=torch.float64, device=device)
        self.ratios = torch.zeros(count, dtype=torch.float64, device=device)
        self.velocity = torch.zeros(count, dtype=torch.float64, device=device)
        self.unit = math.nan  # the last step's C/B: the final statistic's scale

    def _values(self) -> torch.Tensor:
        return self.layer.weight.detach().view(-1)[self.coordinates].double()

    def plant(self, rate: float, scale: float = 1.0) -> torch.Tensor:
        """Add `scale`·C·e_j for each included canary drawn (Bernoulli(rate)) to the weight's
        `.grad` (the clipped sum; a mean without DP, `scale` = 1/|B|); returns the coordinates'
        values before the step, for `observe`."""
        drawn = self.included & (torch.rand(len(self.included), generator=self.generator,
                                            device=self.included.device) < rate)
        grad = self.layer.weight.grad
        if grad is None:
            grad = self.layer.weight.grad = torch.zeros_like(self.layer.weight)
        grad.view(-1).index_add_(0, self.coordinates[drawn],
                                 torch.full((int(drawn.sum()),), self.contribution * scale,
                                            dtype=grad.dtype, device=grad.device))
        return self._values()

    def observe(self, before: torch.Tensor, lr: float, momentum: float, unit: float,
                noise_multiplier: float, rate: float) -> None:
        """Read one step from the iterates: `unit` is C/(the step's divisor)."""
        velocity = (before - self._values()) / lr
        z = (velocity - momentum * self.velocity) / unit
        self.velocity = velocity
        self.unit = unit
        self.sums += z
        if noise_multiplier > 0:
            exponent = (2.0 * z - 1.0) / (2.0 * noise_multiplier ** 2)
            self.ratios += exponent if rate >= 1.0 else torch.logaddexp(
                torch.full_like(z, math.log1p(-rate)), math.log(rate) + exponent)
        else:  # no noise: the count itself
            self.ratios += z

    def statistics(self, lr: float) -> np.ndarray:
        """(canaries, 3): the final-weights statistic (θ0 − θT)/(η·C/B), Σ z_t, the LLR."""
        final = (self.initial - self._values()) / (lr * self.unit)
        columns = {FINAL: final, ITERATE_SUM: self.sums, ITERATE_LIKELIHOOD_RATIO: self.ratios}
        return torch.stack([columns[c] for c in sorted(columns)], 1).cpu().numpy()

    def state(self) -> dict[str, torch.Tensor]:
        return {"generator": self.generator.get_state(), "initial": self.initial,
                "sums": self.sums, "ratios": self.ratios, "velocity": self.velocity,
                "unit": torch.tensor(self.unit, dtype=torch.float64)}

    def restore(self, state: dict[str, torch.Tensor]) -> None:
        device = self.sums.device
        self.generator.set_state(state["generator"])
        self.initial, self.sums = state["initial"].to(device), state["sums"].to(device)
        self.ratios, self.velocity = state["ratios"].to(device), state["velocity"].to(device)
        self.unit = float(state["unit"])


@dataclass(frozen=True)
class CanarySet:
    """One model's canaries: what `jobs.engine.training` plants."""

    design: CanaryDesign
    input_x: np.ndarray  # (input canaries, …) the crafted records
    input_y: np.ndarray
    input_included: np.ndarray  # bool, which of them are in D
    gradient_coordinates: np.ndarray  # flat indices into the first linear layer's weight
    gradient_included: np.ndarray  # bool


def canary_set(design: CanaryDesign, sweep_x: np.ndarray, sweep_y: np.ndarray,
               test_x: np.ndarray, num_classes: int, model: nn.Module, rate: float,
               mask_seed: int, complement: bool) -> CanarySet:
    """The canaries of one model of the sweep whose data are (`sweep_x`, `sweep_y`, `test_x`)."""
    input_included, gradient_included = canary_masks(design, rate, mask_seed, complement)
    input_x, input_y = input_canaries(design, sweep_x, sweep_y, num_classes)
    coordinates = np.zeros(0, dtype=np.int64)
    if design.gradient_count:
        layer = first_linear(model)
        if layer is None:
            raise ValueError("gradient canaries need a model whose first layer is linear")
        coordinates = gradient_coordinates(design, layer,
                                           untouched_features(sweep_x, test_x, input_x))
    return CanarySet(design, input_x, input_y, input_included, coordinates, gradient_included)
