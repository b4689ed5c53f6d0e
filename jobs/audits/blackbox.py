"""Black-box final-model audits with worst-case initial weights (Annamalai & De Cristofaro,
NeurIPS 2024, "Nearly tight black-box auditing of differentially private machine learning").

Why.  DP-SGD's guarantee holds whatever the initial weights are, so an auditor may choose them.
Chosen so that the records of D are already fitted (their gradients tiny) while one crafted
canary — a blank image with a label the weights predict least — has a gradient that clipping
cuts to C, every step of training pushes the canary's loss by C whenever it is in D, and its
final loss alone (the only thing observed) separates the runs with it from the runs without it
nearly as well as the whole transcript would.  One observation per training run, so the audit
trains many: `final_runs` runs of the model's own recipe on its own D (the same D for every
run), each holding the canary with the model's p, every run its own noise.  The runs are
independent, so Clopper–Pearson (and Gaussian DP at q = 1) are proofs on their losses.

The weights are pre-trained without privacy on public pool records past every model's pool
(the paper pre-trains on the half of MNIST it does not train on privately), by one of two
recipes (`CRAFTINGS`, `attack.canary_final_crafting`):

- "decoy": full-batch Adam with copies of the blank image under a decoy label, so that the
  blank image is predicted confidently as another class than the canary's: its gradient then
  has norm ≈ √2·(C = 1) before clipping.  Ours: a linear model, whose gradient on a blank
  image is the bias's alone, gives a canary with no pull without it.
- "plain": the paper's own (`craft_initial_params.ipynb`, cell 3–7): SGD at 0.01, batches
  of 32 in order, from PyTorch's default weights, on the public records alone; the records
  of D are then fitted, and the blank image, which no public record resembles, is not.
"""

from __future__ import annotations

import logging
from typing import Optional

import numpy as np
import torch
from torch import nn

from jobs.datasets import ArrayDataset
from jobs.engine.accounting import NoiseCache
from jobs.engine.canaries import CanaryDesign, CanarySet
from jobs.engine.canary_columns import CRAFTINGS
from jobs.engine.randomness import stream_seed
from jobs.engine.training import Member, TrainSettings, train_runs
from jobs.models import build_model

logger = logging.getLogger(__name__)

#: "decoy": full-batch Adam steps, its rate, and the share of the pre-training set that is
#: blank images under the decoy label.
PRETRAIN_STEPS, PRETRAIN_LR, DECOY_SHARE = 500, 0.05, 0.1
#: "plain", the paper's notebook (cell 3): SGD at 0.01 on batches of 32 taken in order; its
#: steps are `attack.canary_final_pretrain_steps` (theirs: 5 epochs of 30 000 records, 4 690).
PLAIN_LR, PLAIN_BATCH = 0.01, 32
#: The purpose of the runs' seeds and of their canary draws (`stream_seed`): "bbox".
FINAL_RUNS = 0x62626F78


def blank_canary(input_shape: tuple[int, ...], label: int) -> tuple[np.ndarray, np.ndarray]:
    """The canary: one all-zero image of `input_shape` with `label`."""
    return np.zeros((1, *input_shape), dtype=np.float32), np.array([label], dtype=np.int64)


def decoy_label(label: int, num_classes: int) -> int:
    """The class the crafted weights predict on the blank image: any other than the canary's."""
    return (label + 1) % num_classes


def crafted_initial_state(model_name: str, input_shape: tuple[int, ...], num_classes: int,
                          public_x: np.ndarray, public_y: np.ndarray, label: int,
                          seed: int, crafting: str = "decoy",
                          pretrain_steps: int = 0) -> dict[str, torch.Tensor]:
    """Worst-case initial weights: `model_name` pre-trained without privacy on the public
    records by the recipe `crafting` (`CRAFTINGS`; "plain" for `pretrain_steps`), from weights
    drawn from `seed`."""
    if crafting not in CRAFTINGS:
        raise ValueError(f"crafting {crafting!r}: known recipes are {list(CRAFTINGS)}")
    torch.manual_seed(seed)
    model = build_model(model_name, input_shape, num_classes)
    if crafting == "plain":
        plain_pretraining(model, public_x, public_y, pretrain_steps)
    else:
        decoy_pretraining(model, input_shape, public_x, public_y, label, num_classes)
    return {name: value.detach().clone() for name, value in model.state_dict().items()}


def plain_pretraining(model: nn.Module, public_x: np.ndarray, public_y: np.ndarray,
                      steps: int) -> None:
    """The paper's pre-training: `steps` SGD steps on batches of `PLAIN_BATCH` public records
    taken in their order, epoch after epoch (no shuffle, no blank image)."""
    x = torch.as_tensor(np.asarray(public_x, np.float32))
    y = torch.as_tensor(np.asarray(public_y, np.int64))
    starts = range(0, len(y), PLAIN_BATCH)
    optimizer = torch.optim.SGD(model.parameters(), lr=PLAIN_LR)
    loss = nn.CrossEntropyLoss()
    for step in range(steps):
        start = starts[step % len(starts)]
        optimizer.zero_grad()
        loss(model(x[start:start + PLAIN_BATCH]), y[start:start + PLAIN_BATCH]).backward()
        optimizer.step()


def decoy_pretraining(model: nn.Module, input_shape: tuple[int, ...], public_x: np.ndarray,
                      public_y: np.ndarray, label: int, num_classes: int) -> None:
    """Full-batch Adam on the public records plus blank images under the decoy label."""
    decoys = max(1, int(round(DECOY_SHARE * len(public_y) / (1 - DECOY_SHARE))))
    blank, _ = blank_canary(input_shape, label)
    x = torch.as_tensor(np.concatenate([np.asarray(public_x, np.float32),
                                        np.repeat(blank, decoys, axis=0)]))
    y = torch.as_tensor(np.concatenate([np.asarray(public_y, np.int64),
                                        np.full(decoys, decoy_label(label, num_classes))]))
    optimizer = torch.optim.Adam(model.parameters(), lr=PRETRAIN_LR)
    loss = nn.CrossEntropyLoss()
    for _ in range(PRETRAIN_STEPS):
        optimizer.zero_grad()
        loss(model(x), y).backward()
        optimizer.step()


def run_inclusions(design: CanaryDesign, rate: float, mask_seed: int) -> np.ndarray:
    """Which of the model's `final_runs` runs hold the canary: Bernoulli(rate) each, from the
    model's mask seed on a stream of their own."""
    rng = np.random.default_rng([mask_seed, FINAL_RUNS])
    return rng.random(design.final_runs) < rate


def final_model_runs(settings: TrainSettings, pool: ArrayDataset, sweep_pool_x: np.ndarray,
                     sweep_pool_y: np.ndarray, mask: np.ndarray, design: CanaryDesign,
                     rate: float, mask_seed: int, seed: int, device: torch.device,
                     noise_cache: Optional[NoiseCache] = None,
                     public_size: Optional[int] = None) -> dict[str, np.ndarray]:
    """The audit's observations for one model: `design.final_runs` trainings of `settings` on
    the model's records (`mask` of its `pool`) from the crafted weights, each with the blank
    canary in D as `run_inclusions` says, through the engine every model trains with
    (`jobs.engine.training.train_runs`: its clipping, noise and accountant).

    Returns what the model stores beside its canaries: `final_run_included` (runs,),
    `final_run_logits` (runs, classes: each final model's logits on the canary) and
    `final_run_labels` (runs,: the canary's label).
    """
    public = slice(design.final_public_offset,
                   design.final_public_offset + design.final_public_count)
    if public.stop > len(sweep_pool_y):
        raise ValueError(f"crafted weights are pre-trained on pool records up to {public.stop}; "
                         f"the pool holds {len(sweep_pool_y)}")
    initial = crafted_initial_state(settings.model, pool.input_shape, pool.num_classes,
                                    sweep_pool_x[public], sweep_pool_y[public],
                                    design.final_label, stream_seed(seed, FINAL_RUNS),
                                    design.final_crafting, design.final_pretrain_steps)
    included = run_inclusions(design, rate, mask_seed)
    x, y = blank_canary(pool.input_shape, design.final_label)
    empty = np.zeros(0, dtype=np.int64)
    members = [Member(mask, stream_seed(seed, FINAL_RUNS + 1 + run), None,
                      CanarySet(design, x, y, np.array([included[run]]), empty,
                                np.zeros(0, dtype=bool)), public_size, initial)
               for run in range(design.final_runs)]
    logits = np.zeros((design.final_runs, pool.num_classes), dtype=np.float64)
    for run, trained in train_runs(settings, pool, members, device, noise_cache):
        logits[run] = trained.canary_outputs["input_logits"][0]
    logger.info("black-box audit: %d runs from crafted weights, %d with the canary",
                design.final_runs, int(included.sum()))
    return {"final_run_included": included, "final_run_logits": logits,
            "final_run_labels": np.full(design.final_runs, design.final_label, dtype=np.int64)}
