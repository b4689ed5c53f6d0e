"""PDTP (Long, Bindschaedler & Gunter, "Towards Measuring Membership Privacy"), by leave-one-out.

PDTP(t) = max_y |ln p_{A(T)}(y | x_t) − ln p_{A(T∖t)}(y | x_t)| on probabilities rounded to the
centre of 0.01 bins: the binning is the paper's, and it keeps a near-zero denominator from making
the logarithm unbounded (PDTP ≤ ln(0.995 / 0.005) = ln 199 ≈ 5.29). The DTP-1 rule flags PDTP > 1.
Each record costs one retrain per seed, so only the first few members are measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import torch
from scipy.special import softmax

from jobs.datasets import ArrayDataset
from jobs.engine.training import TrainSettings, train_model

BINS = 100  # bins of width 0.01 over [0, 1]
#: The columns of `pdtp_table`, the stored answer of a "pdtp" query, in order.
TABLE_COLUMNS = ("record_id", "single", "averaged", "seed_mean")
DTP_THRESHOLD = 1.0  # the DTP-1 hypothesis: a record above it makes the classifier unsafe


def binned(prob: np.ndarray) -> np.ndarray:
    """Each probability replaced by the centre of its 0.01 bin: 0 → 0.005, 0.123 → 0.125.

    Bins are [k/100, (k+1)/100) except the last, [0.99, 1], which is closed: the paper divides
    [0, 1] into 100 equal bins and returns "the center of the bin to which the original output
    belongs", and 1.0 lies in the hundredth bin, so 1.0 → 0.995 (there is no bin centred on 1).
    A value within 1e-9 of an edge counts as on it, so a two-decimal number starts its bin
    despite binary floating point (0.29 · 100 = 28.999…96 would otherwise land in bin 28).
    """
    scaled = np.asarray(prob, dtype=np.float64) * BINS
    index = np.clip(np.floor(scaled + 1e-9), 0, BINS - 1)
    return (index + 0.5) / BINS


def pdtp(p_with: np.ndarray, p_without: np.ndarray) -> np.ndarray:
    """Per record, max over classes of |ln p_with − ln p_without| on binned (records, classes) rows."""
    p_with, p_without = np.asarray(p_with), np.asarray(p_without)
    if p_with.shape != p_without.shape or p_with.ndim != 2:
        raise ValueError(f"need two (records, classes) arrays, got {p_with.shape}, {p_without.shape}")
    return np.abs(np.log(binned(p_with)) - np.log(binned(p_without))).max(axis=1)


@dataclass(frozen=True)
class PdtpResult:
    """Per measured record (pool index in `record_ids`): the three PDTP estimates.

    The DTP-1 flag of an estimate is `estimate > DTP_THRESHOLD`, taken where it is reported
    (`sweeper.grid.cells.pdtp_row`), so it is not stored beside it.
    """

    record_ids: np.ndarray  # (records,) int64 pool indices of the measured members
    single: np.ndarray  # (records,) PDTP of one full model vs one leave-one-out model, seeds[0]
    averaged: np.ndarray  # (records,) PDTP of the seed-averaged probabilities
    seed_mean: np.ndarray  # (records,) mean over seeds of per-seed PDTP (Long et al.'s estimate)


def leave_one_out(settings: TrainSettings, data: ArrayDataset, mask: np.ndarray, records: int,
                  seeds: Sequence[int], device: torch.device,
                  public_size: Optional[int] = None) -> PdtpResult:
    """PDTP of the first `records` members of `mask` (pool order), by retraining without each.

    Only members are candidates: removing a non-member leaves the training set unchanged, so its
    "leave-one-out" model would be the full model again. One full model is trained per seed and
    shared by every record; each record costs one retrain per seed, len(seeds)·(records + 1)
    trainings in all. A seed is passed to `train_model` as is, full and leave-one-out alike, and
    so is the target's `public_size`: one record fewer changes neither DP-SGD's rate nor its
    divisor, as it does not for the target (`jobs.engine.accounting.rate_size`).

    `single` follows the paper's measurement on one pair of classifiers (seed seeds[0] for both).
    Under a randomized training algorithm (DP-SGD noise, initialization, batch order) it compares
    two *draws*, so it mixes t's influence with seed noise and is bounded by nothing.
    `averaged` averages the softmax probabilities over the seeds, for the full and for the
    leave-one-out models, before binning: the averages estimate p_{A(T)}(y|x_t) and
    p_{A(T∖t)}(y|x_t) of the randomized algorithm A, whose log-ratio ε-DP bounds (for a
    post-processed output in [0, 1], E_T ≤ e^ε E_{T∖t} + δ). Only `averaged` therefore relates to
    ε, up to the seed sampling error, the binning and δ.
    `seed_mean` is the paper's own estimator, "the average of 10 PDTP measurements" (§5): per
    seed s, PDTP of the full model against the leave-one-out model, both trained with seed s, then
    the mean over seeds.  It keeps the seed noise in (each term is ≥ 0, so noise only adds), and
    is what a figure compared with Long et al.'s must show.
    """
    mask = np.asarray(mask, dtype=bool)
    seeds = list(seeds)
    members = np.flatnonzero(mask)[:records]
    if not seeds:
        raise ValueError("leave_one_out needs at least one seed")
    if len(members) < records:
        raise ValueError(f"records={records} but the mask holds only {len(members)} members")

    def probabilities(train_mask: np.ndarray, seed: int, rows: np.ndarray) -> np.ndarray:
        logits = train_model(settings, data, train_mask, seed, device,
                             public_size=public_size).pool_logits[rows]
        return softmax(logits.astype(np.float64), axis=1)

    full = np.stack([probabilities(mask, seed, members) for seed in seeds])  # (seeds, records, C)
    loo = np.empty_like(full)
    for row, record in enumerate(members):
        without = mask.copy()
        without[record] = False
        for s, seed in enumerate(seeds):
            loo[s, row] = probabilities(without, seed, members[row : row + 1])[0]

    single, averaged, seed_mean = estimates(full, loo)
    return PdtpResult(
        record_ids=members.astype(np.int64),
        single=single,
        averaged=averaged,
        seed_mean=seed_mean,
    )


def estimates(full: np.ndarray, loo: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The three PDTP estimates from (seeds, records, classes) probabilities of the full and the
    leave-one-out models: (single: seed 0 alone, averaged: PDTP of the seed-averaged
    probabilities, seed_mean: the mean over seeds of each seed's PDTP), each (records,).

    They differ only in where the average over seeds is taken: after the PDTP (seed_mean, the
    paper's) or before it (averaged, ours); see `leave_one_out`.
    """
    full, loo = np.asarray(full, dtype=np.float64), np.asarray(loo, dtype=np.float64)
    if full.shape != loo.shape or full.ndim != 3 or len(full) == 0:
        raise ValueError(f"need two (seeds, records, classes) arrays, got {full.shape}, {loo.shape}")
    per_seed = np.stack([pdtp(with_t, without_t) for with_t, without_t in zip(full, loo)])
    return per_seed[0], pdtp(full.mean(axis=0), loo.mean(axis=0)), per_seed.mean(axis=0)


def pdtp_table(settings: TrainSettings, data: ArrayDataset, mask: np.ndarray, records: int,
               seeds: int, device: torch.device, public_size: Optional[int] = None) -> np.ndarray:
    """The answer of a "pdtp" model query: one row per measured record, `TABLE_COLUMNS` (pool
    index, single PDTP, PDTP of the seed-averaged probabilities, mean of per-seed PDTP).
    Column 2 is the attack's score.

    Seeds 0 … seeds−1 train the full and the leave-one-out models alike: PDTP measures the
    training algorithm on this training set, not the one target model trained with its own seed.
    """
    result = leave_one_out(settings, data, mask, records, range(seeds), device, public_size)
    return np.column_stack([result.record_ids, result.single, result.averaged,
                            result.seed_mean]).astype(np.float64)
