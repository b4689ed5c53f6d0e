"""The statistics the reports draw: means over trials with their intervals, per-record accuracy.

Intervals over trials are Student's t (`scipy.stats.t.interval`, n − 1 degrees of freedom), not
the normal 1.96 that Thudi et al. print: with the few trials a sweep affords (2 to 5) the normal
interval would be far too narrow (at two trials t is 12.7, not 1.96).  One trial has no spread
to use; each function says what it does then.  Pure NumPy/SciPy on arrays and tables: no
drawing and no store here.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd
from scipy.stats import t as student_t

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
    return t_interval(d)


def trial_spread(rows: pd.DataFrame, value: str, low: str, high: str) -> dict[str, float]:
    """Mean over trials and the error bar drawn for it.

    Why two rules: with several trials the bar shows how much trials disagree (± one sample
    standard deviation), which is the variation a reader of Thudi et al.'s averaged curves needs;
    with one trial there is no spread, so the bar is that trial's own 95 % Clopper–Pearson
    interval (the uncertainty of a precision on few positives).  Trials whose value is NaN (an
    attack that accepted nobody has no precision) are left out and not counted.
    """
    rows = rows[rows[value].notna()]
    n = len(rows)
    if n == 0:
        return {"value": math.nan, "low": math.nan, "high": math.nan, "sd": math.nan,
                "n_trials": 0, "error_bar": "none"}
    values = rows[value].to_numpy(float)
    mean = float(values.mean())
    if n == 1:
        return {"value": mean, "low": float(rows[low].iloc[0]), "high": float(rows[high].iloc[0]),
                "sd": math.nan, "n_trials": 1, "error_bar": "clopper-pearson"}
    sd = float(values.std(ddof=1))
    return {"value": mean, "low": mean - sd, "high": mean + sd, "sd": sd, "n_trials": n,
            "error_bar": "sd over trials"}


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
