"""Earlier bounds on membership inference under DP, for comparison with Thudi et al.'s
(2022 paper, Table 1; `sweeper bounds compare`).

Table 1 of the 2022 paper lists Yeom, Erlingsson and Humphries as *accuracy* bounds for Yeom's
balanced experiment (p = 0.5): accuracy = (1 + advantage)/2.  The *_accuracy_bound functions
return that accuracy (as the table does); *_advantage_bound return the advantage the original
papers state.  Both are clipped to [0, 1]: a "bound" above 1 says nothing.
"""

from __future__ import annotations

import math

import numpy as np

from sweeper.bounds._checks import (ArrayLike, Result, check, check_delta, check_epsilon,
                                    check_prob, is_scalar, out)
from sweeper.bounds.thudi import posterior

__all__ = [
    "yeom_advantage_bound",
    "yeom_accuracy_bound",
    "erlingsson_advantage_bound",
    "erlingsson_accuracy_bound",
    "humphries_advantage_bound",
    "humphries_accuracy_bound",
    "sablayrolles_precision_bound",
    "mahloujifar_precision_bound",
    "jayaraman_advantage_bound",
    "jayaraman_ppv_bound",
]


def yeom_advantage_bound(epsilon: ArrayLike) -> Result:
    """Yeom et al. (2018): advantage ≤ e^ε − 1 for ε-DP (clipped to 1; vacuous from ε = ln 2)."""
    scalar = is_scalar(epsilon)
    with np.errstate(over="ignore"):
        adv = np.expm1(check_epsilon(epsilon))
    return out(np.clip(adv, 0.0, 1.0), scalar)


def yeom_accuracy_bound(epsilon: ArrayLike) -> Result:
    """Yeom et al. (2018) as accuracy at p = 0.5: (1 + e^ε − 1)/2 = e^ε/2, clipped to 1."""
    scalar = is_scalar(epsilon)
    return out((1.0 + np.asarray(yeom_advantage_bound(epsilon))) / 2.0, scalar)


def erlingsson_advantage_bound(epsilon: ArrayLike, delta: ArrayLike = 0.0) -> Result:
    """Erlingsson et al. (2019): advantage ≤ 1 − e^-ε + δ·e^-ε (Hall et al.'s TPR/FPR relation)."""
    scalar = is_scalar(epsilon, delta)
    eps, d = check_epsilon(epsilon), check_delta(delta)
    return out(np.clip(1.0 - (1.0 - d) * np.exp(-eps), 0.0, 1.0), scalar)


def erlingsson_accuracy_bound(epsilon: ArrayLike, delta: ArrayLike = 0.0) -> Result:
    """Erlingsson et al. as accuracy at p = 0.5: 1 − e^-ε/2 + δ·e^-ε/2 (Table 1: 1 − e^-ε/2)."""
    scalar = is_scalar(epsilon, delta)
    return out((1.0 + np.asarray(erlingsson_advantage_bound(epsilon, delta))) / 2.0, scalar)


def humphries_advantage_bound(epsilon: ArrayLike, delta: ArrayLike = 0.0) -> Result:
    """Humphries et al. (2020): advantage ≤ (e^ε − 1 + 2δ)/(e^ε + 1).

    Computed as (1 − e^-ε + 2δ·e^-ε)/(1 + e^-ε) so that ε = ∞ gives 1, not ∞/∞.
    """
    scalar = is_scalar(epsilon, delta)
    e_neg = np.exp(-check_epsilon(epsilon))
    adv = (1.0 - e_neg + 2.0 * check_delta(delta) * e_neg) / (1.0 + e_neg)
    return out(np.clip(adv, 0.0, 1.0), scalar)


def humphries_accuracy_bound(epsilon: ArrayLike, delta: ArrayLike = 0.0) -> Result:
    """Humphries et al. as accuracy at p = 0.5: (e^ε + δ)/(e^ε + 1); at δ = 0 equal to U(ε, 0.5)."""
    scalar = is_scalar(epsilon, delta)
    return out((1.0 + np.asarray(humphries_advantage_bound(epsilon, delta))) / 2.0, scalar)


def sablayrolles_precision_bound(epsilon: ArrayLike, p: ArrayLike) -> Result:
    """Sablayrolles et al. (2019): precision ≤ p + ε/4 for ε-DP (clipped to 1)."""
    scalar = is_scalar(epsilon, p)
    return out(np.clip(check_prob("p", p) + check_epsilon(epsilon) / 4.0, 0.0, 1.0), scalar)


def mahloujifar_precision_bound(epsilon: ArrayLike) -> Result:
    """Mahloujifar et al. (2022): precision ≤ 1/(1 + e^-ε), only at p = 0.5 with all else fixed."""
    scalar = is_scalar(epsilon)
    return out(posterior(check_epsilon(epsilon), 0.5), scalar)


def _jayaraman_tpr_max(eps: np.ndarray, d: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """1 − f(α), f(α) = max{0, 1 − δ − e^ε·α, e^-ε·(1 − δ − α)}: the most TPR an (ε, δ)-DP test
    with FPR α can have.

    Written as min{1, δ + e^ε·α, 1 − e^-ε·(1 − δ − α)}, the same number without the cancellation
    1 − (1 − tiny) that would cost digits as α → 0.  e^ε·α is taken as 0 when α = 0, also at
    ε = ∞ (the limit along α → 0 at fixed ε).
    """
    with np.errstate(all="ignore"):
        scaled = np.where(alpha == 0.0, 0.0, np.exp(eps) * alpha)
        return np.minimum.reduce([np.ones_like(scaled), d + scaled,
                                  1.0 - np.exp(-eps) * (1.0 - d - alpha)])


def jayaraman_advantage_bound(epsilon: ArrayLike, delta: ArrayLike, fpr: ArrayLike) -> Result:
    """Jayaraman et al. (2020, Thm 4.1): advantage ≤ 1 − α − f(α) at the attack's FPR α."""
    scalar = is_scalar(epsilon, delta, fpr)
    eps, d, alpha = np.broadcast_arrays(check_epsilon(epsilon), check_delta(delta),
                                        check_prob("fpr", fpr))
    return out(np.clip(_jayaraman_tpr_max(eps, d, alpha) - alpha, 0.0, 1.0), scalar)


def jayaraman_ppv_bound(epsilon: ArrayLike, delta: ArrayLike, fpr: ArrayLike,
                        gamma: ArrayLike) -> Result:
    """Jayaraman et al. (2020, Thm 4.2): PPV ≤ (1 − f(α)) / (1 − f(α) + γ·α).

    γ = non-members per member = (1 − p)/p.  At α = 0 with δ = 0 the expression is 0/0; its limit
    e^ε/(e^ε + γ) is returned, which is Thudi et al.'s U at p = 1/(1 + γ): the two bounds meet as
    the FPR vanishes.
    """
    scalar = is_scalar(epsilon, delta, fpr, gamma)
    eps, d, alpha, g = np.broadcast_arrays(check_epsilon(epsilon), check_delta(delta),
                                           check_prob("fpr", fpr),
                                           check("gamma", gamma, 0.0, math.inf))
    tpr_max = _jayaraman_tpr_max(eps, d, alpha)
    with np.errstate(all="ignore"):
        ppv = tpr_max / (tpr_max + g * alpha)
        limit = posterior(eps, 1.0 / (1.0 + g))
    ppv = np.where(tpr_max + g * alpha == 0.0, limit, ppv)
    ppv = np.where((alpha == 0.0) & (g == math.inf), limit, ppv)
    return out(np.clip(ppv, 0.0, 1.0), scalar)
