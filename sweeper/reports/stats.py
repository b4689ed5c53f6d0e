"""The statistics the reports draw: pooled precisions and means over trials with their
intervals, per-record accuracy.

Precision's bars, in every figure, are the exact Clopper–Pearson interval of the precision pooled
over trials (`pooled_precision`).

Other intervals over trials are Student's t (`scipy.stats.t.interval`, n − 1 degrees of
freedom), not the normal 1.96 that Thudi et al. print: with the few trials a sweep affords (2 to
5) the normal interval would be far too narrow (at two trials t is 12.7, not 1.96).  One trial has no spread
to use; each function says what it does then.  Pure NumPy/SciPy on arrays and tables: no
drawing and no store here.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import pandas as pd
from scipy.stats import t as student_t

from jobs.metrics import clopper_pearson

#: The papers' "95 % confidence interval".
CONFIDENCE = 0.95


def t_interval(values: np.ndarray) -> tuple[float, float, float, int]:
    """Mean of `values` and its 95 % Student-t interval: (mean, low, high, n).

    mean ± t(0.975, n − 1)·sd/√n with the sample sd (ddof = 1).  No interval (NaN ends) for one
    value; a point interval when every value is equal (no spread: scipy refuses a zero scale).
    A NaN among the values makes the mean and the interval NaN (`mean_interval` leaves them out).
    """
    values = np.asarray(values, float)
    n = int(values.size)
    if n == 0:
        return math.nan, math.nan, math.nan, 0
    mean = float(values.mean())
    if n == 1:
        return mean, math.nan, math.nan, 1
    sd = float(values.std(ddof=1))
    if sd == 0.0:
        return mean, mean, mean, n
    low, high = student_t.interval(CONFIDENCE, n - 1, loc=mean, scale=sd / math.sqrt(n))
    return mean, float(low), float(high), n


def mean_interval(values: np.ndarray) -> tuple[float, float, float, int]:
    """`t_interval` of the values that are not NaN (a trial that measured nothing)."""
    values = np.asarray(values, float)
    return t_interval(values[~np.isnan(values)])


def improvement_interval(precision: Sequence[float], baseline: Sequence[float],
                         ci_low: Sequence[float], ci_high: Sequence[float]) -> tuple[float, float, float, int]:
    """Mean improvement over the always-member baseline and its 95 % interval, per cell.

    Why paired differences: each trial's baseline is the member share of *its own* evaluated
    records, so d_i = precision_i − baseline_i removes the trial-to-trial wobble of the prior.
    With n ≥ 2 trials the interval is `t_interval` of the d_i (Student's t rather than Thudi et
    al.'s normal 1.96, which is far too narrow for 2–5 trials).  With one trial there is no
    spread to use, and the baseline is a known share, not an estimate, so the interval is the
    precision's Clopper–Pearson interval shifted by it: [low − baseline, high − baseline].
    Either interval is cut to what the mean difference can be, [−b̄, 1 − b̄] for the trials'
    mean baseline b̄ (a precision lies in [0, 1]): with 2–5 trials t's ends reach far outside
    it, and the true mean lies inside, so the cut interval covers it as often.
    Trials with a NaN precision are left out.  Returns (mean, low, high, n).
    """
    prec = np.asarray(precision, float)
    base = np.asarray(baseline, float)
    keep = ~np.isnan(prec)
    d = prec[keep] - base[keep]
    if d.size == 1:
        low = float(np.asarray(ci_low, float)[keep][0] - base[keep][0])
        high = float(np.asarray(ci_high, float)[keep][0] - base[keep][0])
        return float(d[0]), low, high, 1
    mean, low, high, n = t_interval(d)
    if n:
        floor = -float(base[keep].mean())
        low, high = max(low, floor), min(high, floor + 1.0)
    return mean, low, high, n


#: What Figure 4's bars are (`improvement_interval`), in its legend.
IMPROVEMENT_TEXT = ("bar: 95 % Student-t interval of the trials' precision − baseline, cut to "
                    "[−baseline, 1 − baseline]; one trial: Clopper–Pearson shifted")


#: What every figure's precision bar is, in its legend or caption.
POOLED_TEXT = ("pooled precision ΣTP/(ΣTP+ΣFP) over trials; bar: its exact 95 % "
               "Clopper–Pearson interval")


def pooled_precision(rows: pd.DataFrame) -> dict[str, Any]:
    """The precision of a cell's trials taken together, and its exact interval: the one rule of
    every figure's precision bar (and of `sweeper frontier`'s summary).

    Why pooled: every trial's flagged records are draws of the same attack at the same (ε, δ, p),
    so ΣTP/(ΣTP + ΣFP) over trials is one binomial proportion, and Clopper–Pearson's exact
    interval of it (`jobs.metrics.clopper_pearson`) says how well the trials together pin it
    down.  A mean of the trials' interval ends, or the sd over trials, is an interval for
    neither.  A trial that flagged nobody adds nothing; with none flagged at all the value and
    interval are NaN.  Also gives the trials' own mean precision (`mean`, NaN-skipping), `tp`,
    `fp`, `n_trials` (trials with a precision) and the rule's name (`error_bar`).
    """
    tp, fp = int(rows["tp"].sum()), int(rows["fp"].sum())
    low, high = clopper_pearson(tp, tp + fp)
    return {"value": tp / (tp + fp) if tp + fp else math.nan, "low": low, "high": high,
            "mean": float(rows["precision"].mean()), "tp": tp, "fp": fp,
            "n_trials": int(rows["precision"].notna().sum()),
            "error_bar": "exact clopper-pearson of pooled tp/(tp+fp)"}


def pooled_table(cells: pd.DataFrame, keys: Sequence[str],
                 means: Sequence[str] = ()) -> pd.DataFrame:
    """One row per group of `keys` (the trials of one coordinate): `pooled_precision` as
    `precision`, `precision_ci_low`, `precision_ci_high`, `mean_precision`, `tp`, `fp`,
    `n_trials`; the mean over trials of each column in `means` that `cells` has (NaN-skipping);
    and `violations`, how many of its trials are flagged."""
    keys = list(keys)
    rows = []
    for key, group in cells.groupby(keys, sort=True, dropna=False):
        pooled = pooled_precision(group)
        rows.append({**dict(zip(keys, key)), "precision": pooled["value"],
                     "precision_ci_low": pooled["low"], "precision_ci_high": pooled["high"],
                     "mean_precision": pooled["mean"], "tp": pooled["tp"], "fp": pooled["fp"],
                     "n_trials": pooled["n_trials"],
                     **{column: float(group[column].mean()) for column in means
                        if column in group},
                     "violations": int(group["violation"].sum())})
    columns = [*keys, "precision", "precision_ci_low", "precision_ci_high", "mean_precision",
               "tp", "fp", "n_trials", *[c for c in means if c in cells], "violations"]
    return pd.DataFrame(rows, columns=columns)


def per_record_accuracy(cell_scores: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    """Long et al.'s per-target attack accuracy, one row per (`by`…, record).

    Definition: for a record, over every target (trial) of the group whose evaluation includes it,
    the share of targets on which the cell's decision was right, the decision being "member" iff
    score ≥ the cell's operating `threshold` (the one its policy chose; a NaN score is
    "non-member", as the attacks' own metrics count it) and "right" meaning it equals the
    record's true membership in that target.  Cells with a NaN threshold (per-class calibrated
    thresholds, which one number cannot reproduce) are left out.  Returns `accuracy` and
    `evaluations` (how many targets the share is over).
    """
    rows = cell_scores[cell_scores["threshold"].notna()]
    decision = (rows["score"].to_numpy(float) >= rows["threshold"].to_numpy(float))
    correct = decision == rows["member"].to_numpy(bool)
    table = rows[list(by) + ["record_id"]].assign(correct=correct.astype(float))
    out = (table.groupby(list(by) + ["record_id"], sort=True, dropna=False)["correct"]
           .agg(accuracy="mean", evaluations="count").reset_index())
    return out


def correlations(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Pearson and Spearman; NaN when fewer than two points or either side is constant."""
    from scipy.stats import pearsonr, spearmanr

    if len(x) < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan, math.nan
    return float(pearsonr(x, y)[0]), float(spearmanr(x, y)[0])
