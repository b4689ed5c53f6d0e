"""Merlin and Morgan (Jayaraman et al., "Revisiting membership inference under realistic
assumptions", §5.2–5.3).

Merlin asks whether a record sits at a local minimum of the model's loss: members of an
overfitted model tend to, so most small perturbations raise their loss, while for non-members
the loss goes up or down about equally often.  Morgan adds a band on the loss itself, because
an extremely low loss is a near-global minimum, which says little about membership.

Unlike the attacks scored from stored logits alone, Merlin needs the model itself (it queries
new inputs), so it runs where the model is loaded; Morgan's thresholds come from holdout models only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import numpy as np

from jobs.metrics import ppv, reaches_min_tpr

if TYPE_CHECKING:
    import torch

#: Candidate loss thresholds (holdout quantiles) and Merlin thresholds for Morgan's search; 101
#: covers every ratio k/100 of the default T = 100 exactly.
LOSS_GRID = 64
MERLIN_GRID = 101


def _record_seed(seed: int, index: int) -> int:
    """A seed per (seed, record): noise never depends on how the records were chunked."""
    return int(np.random.SeedSequence(seed, spawn_key=(index,)).generate_state(1, np.uint64)[0])


def merlin_ratio(model: torch.nn.Module, x: np.ndarray, y: np.ndarray, *,
                 perturbations: int = 100, sigma: float = 0.01, seed: int = 0,
                 loss_clamp: float = 1e-6, device: Optional[torch.device] = None,
                 batch_records: int = 256) -> np.ndarray:
    """Per record, the share of `perturbations` Gaussian perturbations that strictly raise the
    cross-entropy loss (Algorithm 1; ties count as "no", as in the paper's step 5).

    The paper perturbs unit-norm inputs with σ = 0.01; our models see unnormalized inputs, so
    each record's noise has std σ·‖x‖₂ per coordinate, the same perturbation relative to it.
    The unperturbed copy rides in the same forward pass as its perturbations, so a batch-size
    dependent rounding difference cannot pass for a loss change.  Noise is reproducible per
    (seed, record index, device kind); CPU and CUDA generators give different streams.

    The loss is −log max(p_y, `loss_clamp`), as in the authors' code (bargavj/EvaluatingDPML,
    `log_loss` with SMALL_VALUE = 1e-6): where the record and its perturbations all have
    p_y < loss_clamp every loss is the same, nothing is "raised", and the ratio is 0 — the
    paper's very-high-loss non-members scoring 0 — where the unclamped loss would still rise
    for about half of the perturbations.
    """
    import torch  # here: Morgan's thresholds, imported with the attacks, need no torch
    import torch.nn.functional as F

    if not 0.0 < loss_clamp < 1.0:
        raise ValueError(f"loss_clamp must lie in (0, 1), got {loss_clamp}")
    device = torch.device("cpu") if device is None else device
    largest_loss = -math.log(loss_clamp)
    x_all = torch.as_tensor(np.asarray(x, dtype=np.float32))
    y_all = torch.as_tensor(np.asarray(y, dtype=np.int64))
    count, shape, draws = x_all.shape[0], tuple(x_all.shape[1:]), int(perturbations)
    ratios = np.zeros(count)
    generator = torch.Generator(device=device)
    was_training = model.training
    model.eval()  # dropout or batch-norm updates would move the loss on their own
    try:
        with torch.no_grad():
            for start in range(0, count, batch_records):
                records = x_all[start:start + batch_records].to(device)
                labels = y_all[start:start + batch_records].to(device)
                size = len(records)
                noise = torch.empty((size, draws) + shape, device=device)
                for row in range(size):
                    generator.manual_seed(_record_seed(seed, start + row))
                    noise[row] = torch.randn((draws,) + shape, generator=generator, device=device)
                scale = sigma * records.reshape(size, -1).norm(dim=1)
                noise *= scale.view((size, 1) + (1,) * len(shape))
                batch = torch.cat([records[:, None], records[:, None] + noise], dim=1)
                logits = model(batch.reshape((size * (draws + 1),) + shape))
                loss = F.cross_entropy(logits, labels.repeat_interleave(draws + 1),
                                       reduction="none").view(size, draws + 1)
                loss = loss.clamp(max=largest_loss)  # −log max(p_y, clamp)
                raised = (loss[:, 1:] > loss[:, :1]).sum(dim=1)
                ratios[start:start + size] = raised.cpu().numpy() / draws
    finally:
        model.train(was_training)
    return ratios


@dataclass(frozen=True)
class MorganThresholds:
    """Member iff lower ≤ loss ≤ upper and merlin ≥ merlin (all inclusive, as in the paper)."""

    lower: float
    upper: float
    merlin: float


#: An empty band: no loss, not even ±∞, lies in [+∞, −∞].
ACCEPT_NOBODY = MorganThresholds(math.inf, -math.inf, math.inf)


def morgan_decisions(loss: np.ndarray, merlin: np.ndarray,
                     thresholds: MorganThresholds) -> np.ndarray:
    """Morgan's calls; a NaN loss or ratio fails every comparison, so it is never a member."""
    loss, merlin = np.asarray(loss, dtype=np.float64), np.asarray(merlin, dtype=np.float64)
    return (loss >= thresholds.lower) & (loss <= thresholds.upper) & (merlin >= thresholds.merlin)


def _grid(values: np.ndarray, size: int) -> np.ndarray:
    """Candidate thresholds: the observed values, or `size` quantiles of them (data values)."""
    unique = np.unique(values)
    if len(unique) <= size:
        return unique
    return np.unique(np.quantile(values, np.linspace(0.0, 1.0, size), method="inverted_cdf"))


def _cumulative(loss_index: np.ndarray, merlin_index: np.ndarray, weights: np.ndarray,
                rows: int, cols: int) -> np.ndarray:
    """(rows, cols) table: total weight with loss_index ≤ j and merlin_index > k."""
    flat = loss_index * (cols + 1) + merlin_index
    hist = np.bincount(flat, weights, minlength=(rows + 1) * (cols + 1)).reshape(rows + 1, cols + 1)
    upto = np.cumsum(hist, axis=0)[:rows]
    return np.cumsum(upto[:, ::-1], axis=1)[:, ::-1][:, 1:]


def morgan_thresholds(holdout_loss: np.ndarray, holdout_merlin: np.ndarray,
                      holdout_members: np.ndarray, *, fpr: float = 0.01,
                      prior: float = 0.5, min_tpr: float = 0.0) -> MorganThresholds:
    """Morgan's (φ_L, φ_U, φ_M), chosen jointly on holdout models with known membership (§5.3).

    The paper sets all three together "to maximize the PPV on a separate holdout set", taking
    the lowest φ_L among those reaching the best PPV "to maximize the number of members
    identified".  So: over every box (φ_L ≤ φ_U from LOSS_GRID loss quantiles, φ_M from the
    holdout's Merlin values) whose holdout FPR is at most `fpr` and which accepts at least one
    member, take the highest PPV; ties go to the higher TPR, then the widest box (lowest φ_L,
    highest φ_U, lowest φ_M).  PPV is taken at `prior`, p·TPR / (p·TPR + (1−p)·FPR); it ranks
    boxes by TPR/FPR at every p, so p changes the PPV, never the choice.  Max PPV favours small
    pure boxes: that is the paper's goal (expose a few members with near-certainty), not TPR.
    `min_tpr` asks a box to find at least that share of the holdout members: on a small holdout
    the purest box is often one or two records, a choice that does not carry over to the target
    (the same guard as the `calibrated` policy's, `jobs.metrics.reaches_min_tpr`).
    With no such box, ACCEPT_NOBODY.  Arrays may be (models, n); a NaN never counts as accepted.
    The target's membership is not a parameter, so it cannot leak into the choice.
    """
    if not 0.0 < prior < 1.0:
        raise ValueError(f"prior must lie in (0, 1), got {prior}")
    loss = np.asarray(holdout_loss, dtype=np.float64).ravel()
    merlin = np.asarray(holdout_merlin, dtype=np.float64).ravel()
    members = np.asarray(holdout_members, dtype=bool).ravel()
    if not loss.shape == merlin.shape == members.shape:
        raise ValueError("holdout loss, merlin and membership must have the same size")
    member_count, non_member_count = max(int(members.sum()), 1), max(int((~members).sum()), 1)
    valid = ~(np.isnan(loss) | np.isnan(merlin))
    loss, merlin, members = loss[valid], merlin[valid], members[valid]
    loss_grid, merlin_grid = _grid(loss, LOSS_GRID), _grid(merlin, MERLIN_GRID)
    rows, cols = len(loss_grid), len(merlin_grid)
    if rows == 0:
        return ACCEPT_NOBODY
    at_most = np.searchsorted(loss_grid, loss, "left")  # loss ≤ grid[j] ⇔ j ≥ this
    below = np.searchsorted(loss_grid, loss, "right")  # loss < grid[i] ⇔ i ≥ this
    ratio_index = np.searchsorted(merlin_grid, merlin, "right")  # merlin ≥ grid[k] ⇔ k < this

    def in_box(weights: np.ndarray) -> np.ndarray:  # (i, j, k): count in [g_i, g_j] × [m_k, ∞)
        upper = _cumulative(at_most, ratio_index, weights, rows, cols)
        lower = _cumulative(below, ratio_index, weights, rows, cols)
        return upper[None, :, :] - lower[:, None, :]

    tpr = in_box(members.astype(np.float64)) / member_count
    false_rate = in_box((~members).astype(np.float64)) / non_member_count
    grid = np.indices(tpr.shape)
    i, j, k = grid[0], grid[1], grid[2]
    feasible = (i <= j) & reaches_min_tpr(tpr, min_tpr) & (false_rate <= fpr + 1e-12)
    if not feasible.any():
        return ACCEPT_NOBODY
    tpr, false_rate, i, j, k = (a[feasible] for a in (tpr, false_rate, i, j, k))
    best = np.lexsort((k, -j, i, -tpr, -ppv(tpr, false_rate, prior)))[0]
    return MorganThresholds(float(loss_grid[i[best]]), float(loss_grid[j[best]]),
                            float(merlin_grid[k[best]]))
