"""Attack scores to the figures of a cell: precision with its interval, TPR at low FPR, AUC.

Why these.  The bound is on precision, P(member | the attack said member), so precision is the
headline; but a precision measured on three positives means little, so it always travels with
TP, FP and an exact (Clopper–Pearson) interval, and the violation test uses the interval's lower
end.  TPR at a fixed low FPR and ROC AUC need no threshold choice at all, so they show an
attack's strength independently of the threshold policy.

Convention: a higher score means "more likely a member"; a NaN score means "non-member" at every
threshold, the 100 % cut included (Thudi et al., footnote 4): it is never accepted, and
AUC ranks it below every real score.  No threshold is ever taken from a NaN, so "accept the top
100 %" accepts every *scored* record, not the unscored ones.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
from scipy.special import betaincinv
from scipy.stats import rankdata

#: Thudi et al.'s grid: accept the top 2.5 %·i of scores, i = 1 … 40.
QUANTILE_STEP = 0.025
QUANTILE_COUNT = 40


@dataclass(frozen=True)
class OperatingPoint:
    """An attack at one threshold: accept every record whose score is ≥ `threshold`."""

    threshold: float
    tp: int
    fp: int
    members: int
    non_members: int
    precision: float
    precision_ci_low: float
    precision_ci_high: float
    # How many thresholds the policy tried to find this one: a test on it must correct for them.
    candidates: int = 1

    @property
    def accepted_fraction(self) -> float:
        return (self.tp + self.fp) / (self.members + self.non_members)

    @property
    def tpr(self) -> float:
        return self.tp / self.members if self.members else math.nan

    @property
    def fpr(self) -> float:
        return self.fp / self.non_members if self.non_members else math.nan


def clopper_pearson_lower(successes: int, trials: int, alpha: float) -> float:
    """One-sided exact lower confidence bound: P(Bin(trials, bound) ≥ successes) = alpha.

    NaN with no trials; 0 with no successes (nothing rules out a rate of 0).
    """
    if trials == 0:
        return math.nan
    return 0.0 if successes == 0 else float(betaincinv(successes, trials - successes + 1, alpha))


def clopper_pearson_upper(successes: int, trials: int, alpha: float) -> float:
    """One-sided exact upper confidence bound: P(Bin(trials, bound) ≤ successes) = alpha.

    NaN with no trials; 1 when every trial succeeded (nothing rules out a rate of 1).
    """
    if trials == 0:
        return math.nan
    return 1.0 if successes == trials else float(
        betaincinv(successes + 1, trials - successes, 1.0 - alpha))


def reaches_min_tpr(tpr: np.ndarray, min_tpr: float) -> np.ndarray:
    """Which thresholds a holdout calibration may choose: those finding at least `min_tpr` of the
    holdout members (and at least one).

    Shared by the `calibrated` policy's PPV objective and Morgan's box search: both maximise a
    holdout PPV, whose maximum on a small holdout is often a pure cut of one or two records, a
    choice that accepts nobody on the target.  The 1e-12 slack keeps a rate computed as k/n from
    missing a floor of exactly k/n.
    """
    tpr = np.asarray(tpr, dtype=np.float64)
    return (tpr > 0) & (tpr >= min_tpr - 1e-12)


def clopper_pearson(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact binomial interval for successes/trials: the Beta quantiles of Clopper & Pearson.

    (NaN, NaN) with no trials: an attack that accepted nobody has no precision to bound.
    Not `scipy.stats.binomtest(k, n).proportion_ci(method="exact")`, which gives the same ends
    (tests/test_jobs/test_metrics.py checks them against it) but computes a p-value first: 2.75 ms against
    0.10 ms a call at n = 10 000, and `quantile_max` takes it at 40 thresholds per cell.
    """
    if trials == 0:
        return math.nan, math.nan
    tail = (1.0 - confidence) / 2.0
    return clopper_pearson_lower(successes, trials, tail), clopper_pearson_upper(successes, trials, tail)


def ppv(tpr, fpr, prior):
    """Precision (positive predictive value) of rates (TPR, FPR) when a share `prior` of the
    records are members: P(member | accepted) = p·TPR / (p·TPR + (1 − p)·FPR), by Bayes.

    The one home of this formula: the policies rank holdout thresholds by it, Morgan's box search
    ranks boxes by it, the results table reports it at the cell's γ (Jayaraman et al.'s PPV) and
    the exact mechanisms' precision is it.  NaN where nobody is accepted (no precision to speak
    of).  A float when every argument is a scalar, an array otherwise.
    """
    hits = prior * np.asarray(tpr, dtype=np.float64)
    accepted = hits + (1.0 - prior) * np.asarray(fpr, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        value = np.where(accepted > 0.0, hits / accepted, np.nan)
    return float(value) if value.ndim == 0 else value


def _clean(scores: np.ndarray, members: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    scores = np.asarray(scores, dtype=np.float64)
    members = np.asarray(members, dtype=bool)
    if scores.shape != members.shape or scores.ndim != 1:
        raise ValueError(f"scores {scores.shape} and members {members.shape} must be equal 1-D shapes")
    return scores, members


def operating_point(scores: np.ndarray, members: np.ndarray, threshold: float,
                    confidence: float = 0.95) -> OperatingPoint:
    """Count TP and FP of "member iff score ≥ threshold" and the precision's exact interval.

    A NaN score fails every comparison, so it is never accepted, whatever the threshold.
    """
    scores, members = _clean(scores, members)
    accepted = scores >= threshold  # NaN ≥ t is False
    tp = int(np.sum(accepted & members))
    fp = int(np.sum(accepted & ~members))
    low, high = clopper_pearson(tp, tp + fp, confidence)
    return OperatingPoint(
        threshold=float(threshold), tp=tp, fp=fp, members=int(members.sum()),
        non_members=int((~members).sum()),
        precision=tp / (tp + fp) if tp + fp else math.nan,
        precision_ci_low=low, precision_ci_high=high,
    )


def quantile_thresholds(scores: np.ndarray) -> np.ndarray:
    """The thresholds that accept the top 2.5 %·i of records, i = 1 … 40 (Thudi et al.).

    With n records, the i-th accepts "score ≥ t" for the lowest t that takes at most ⌈0.025·i·n⌉
    records.  A threshold cannot split a tie, so a tie at the cut stays out: a decision attack
    (scores 0 and 1) that says "member" for 2 of 200 records is then measured on those 2, not
    drowned in the 198 it rejected.  A cut inside a tie at the very top has no threshold and is
    skipped.  The cuts count every record, NaN ones included, but thresholds come from real scores
    only: a cut reaching into the NaN records accepts every scored record and no NaN one.
    """
    scores = np.asarray(scores, dtype=np.float64)
    ordered = np.sort(scores[~np.isnan(scores)])[::-1]
    if len(ordered) == 0:
        return ordered
    fractions = QUANTILE_STEP * np.arange(1, QUANTILE_COUNT + 1)
    counts = np.clip(np.ceil(np.round(fractions * len(scores), 9)).astype(int), 1, max(len(scores), 1))
    # How many records each distinct threshold accepts: the ends of the runs of equal scores.
    accepts = np.flatnonzero(np.r_[ordered[1:] != ordered[:-1], True]) + 1
    largest = np.searchsorted(accepts, counts, side="right") - 1  # the last run end ≤ count
    return ordered[accepts[largest[largest >= 0]] - 1]


def quantile_max(scores: np.ndarray, members: np.ndarray, confidence: float = 0.95) -> OperatingPoint:
    """Thudi et al.'s policy: the best precision over the 40 top-quantile thresholds.

    It picks the threshold *using the evaluation labels*, so it is an oracle: an upper estimate
    of what the attack could reach, which is what a check against an upper bound wants.  Ties in
    precision go to the threshold with more true positives (more evidence).  With no real score
    at all (every score NaN) nobody is accepted and the precision is NaN.
    """
    if len(np.asarray(scores)) == 0:
        raise ValueError("no records to evaluate")
    thresholds = np.unique(quantile_thresholds(scores))
    if len(thresholds) == 0:
        return operating_point(scores, members, math.inf, confidence)
    points = [operating_point(scores, members, t, confidence) for t in thresholds]
    scored = [p for p in points if not math.isnan(p.precision)]
    best = max(scored, key=lambda p: (p.precision, p.tp))
    return dataclasses.replace(best, candidates=len(thresholds))


def roc_curve(scores: np.ndarray, members: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(FPR, TPR) of "score ≥ t" for every distinct real score t, from accepting nobody to every
    scored record: records with a NaN score are in the denominators, never accepted.

    Not `sklearn.metrics.roc_curve`: it refuses NaN and ±∞ scores, to which this module's
    convention gives a meaning (an attack that cannot score a record, a loss of +∞).  On finite
    scores the two agree exactly (tests/test_jobs/test_metrics.py); so do `roc_auc` and `roc_auc_score`.
    """
    scores, members = _clean(scores, members)
    scored = ~np.isnan(scores)
    order = np.argsort(-scores[scored], kind="stable")
    sorted_scores, sorted_members = scores[scored][order], members[scored][order]
    # The last index of each run of equal scores: a threshold accepts whole ties.
    ends = np.flatnonzero(np.r_[sorted_scores[1:] != sorted_scores[:-1], True])
    tp = np.cumsum(sorted_members)[ends]
    fp = np.cumsum(~sorted_members)[ends]
    positives, negatives = max(int(members.sum()), 1), max(int((~members).sum()), 1)
    return np.r_[0.0, fp / negatives], np.r_[0.0, tp / positives]


def tpr_at_fpr(scores: np.ndarray, members: np.ndarray, fpr: float) -> float:
    """The highest TPR of any threshold whose FPR is at most `fpr` (Carlini et al.'s low-FPR metric)."""
    false_rates, true_rates = roc_curve(scores, members)
    return float(true_rates[false_rates <= fpr + 1e-12].max())


def max_advantage(scores: np.ndarray, members: np.ndarray) -> float:
    """Yeom et al.'s membership advantage, max over thresholds of TPR − FPR (Jayaraman et al. use
    the same): a figure of the scores alone, like AUC, whatever threshold a policy picks.

    Accepting nobody is a threshold too, so it is never below 0.  NaN without members or
    without non-members.
    """
    scores, members = _clean(scores, members)
    if members.all() or not members.any():
        return math.nan
    false_rates, true_rates = roc_curve(scores, members)
    return float(np.max(true_rates - false_rates))


def roc_auc(scores: np.ndarray, members: np.ndarray) -> float:
    """P(a member outscores a non-member), ties counting one half (the Mann–Whitney statistic).

    A NaN score is outscored by every real one (−∞ included) and ties with the other NaNs.
    """
    scores, members = _clean(scores, members)
    positives, negatives = int(members.sum()), int((~members).sum())
    if positives == 0 or negatives == 0:
        return math.nan
    unscored = np.isnan(scores)
    ranks = np.full(len(scores), (unscored.sum() + 1) / 2.0)  # the NaNs share the lowest ranks
    ranks[~unscored] = rankdata(scores[~unscored]) + unscored.sum()
    return float((ranks[members].sum() - positives * (positives + 1) / 2) / (positives * negatives))
