"""The bound read backwards, for planning: which ε or which sampling rate p keeps every attacker
under a target precision, and how many deletion requests may be declined.

Why apart from `sweeper.bounds.thudi`.  These are what a team asks *before* training (the sweep's
planner, `sweeper bounds plan`); each inverts Thudi et al.'s U in closed form, and
refuses, with the reason and what would work instead, a target no ε can reach.
"""

from __future__ import annotations

import math

import numpy as np

from sweeper.bounds._checks import (ArrayLike, Result, check, check_delta, check_epsilon,
                                    check_form, check_prob, check_rate, check_target, is_scalar,
                                    out)
from sweeper.bounds.thudi import DEFAULT_TPR_FLOOR, delta_factor, log_stay_out, precision_bound

__all__ = ["epsilon_for_precision", "max_sampling_rate", "deletion_capacity"]


def epsilon_for_precision(target: ArrayLike, p: ArrayLike, delta: ArrayLike = 0.0,
                          tpr: ArrayLike = DEFAULT_TPR_FLOOR, *,
                          form: str = "derived") -> Result:
    """Largest ε whose bound U(ε, δ, p, s) stays at or below `target` β (2024 paper, §4.3).

    Solving U = β: 1/β − 1 = e^-ε·(1−p)/p·c, c the δ-factor of `form`, so

    - `derived` (default): ε = ln[(1−p)/p·(1 − δ/s) / (1/β − 1)];
    - `printed`: ε = ln[(1−p)·(1/p − δ/s) / (1/β − 1)].

    U grows with ε, so any ε up to this one also meets the target.  β = 1 or p = 0 gives ∞
    (every ε does).  No clipping is needed at ε = 0: the formula is ≥ 0 exactly when the target
    is met at ε = 0 (where U = p for δ = 0), so a negative value (beyond a 1e-12 rounding
    tolerance, which is returned as 0.0) means the target is out of reach.

    Args:
        target: β, the precision no attacker may exceed, in (0, 1].
        p: the sampling probability, in [0, 1].
        delta: the training's δ.
        tpr: the TPR floor s (as in `precision_bound`).
        form: `"derived"` or `"printed"` (as in `precision_bound`).

    Returns:
        The largest ε (float, or ndarray over array arguments); `math.inf` where every ε
            meets the target.

    Raises:
        ValueError: no ε reaches the target (β below the bound at ε = 0, or c ≤ 0: δ ≥ s
            derived, δ·p ≥ s printed, where the bound is vacuous for every ε); the message says
            why and the largest p that would make it reachable.

    Example:
        ```python
        >>> epsilon_for_precision(0.8, 0.1)      # ln(0.9/0.1 / (1/0.8 − 1)) = ln 36
        3.58351893845611

        ```
    """
    scalar = is_scalar(target, p, delta, tpr)
    beta, prior = check_target(target), check_prob("p", p)
    d, s = check_delta(delta), check_rate("tpr", tpr)
    form = check_form(form)
    beta, prior, d, s = np.broadcast_arrays(beta, prior, d, s)
    with np.errstate(all="ignore"):
        room = (1.0 - prior) / prior * delta_factor(form, d, prior, s)  # (1−p)/p·c
        eps = np.log(room / (1.0 / beta - 1.0))
    eps = np.where(prior == 0.0, math.inf, eps)
    eps = np.where(beta == 1.0, math.inf, eps)
    eps = np.where((eps < 0.0) & (eps > -1e-12), 0.0, eps)
    impossible = ~(eps >= 0.0)
    if np.any(impossible):
        i = tuple(np.argwhere(impossible)[0])
        b, q, dd, ss = (float(a[i]) for a in (beta, prior, d, s))
        raise ValueError(_unreachable_reason(b, q, dd, ss, form=form))
    return out(eps, scalar)


def _unreachable_reason(beta: float, p: float, delta: float, s: float, *,
                        form: str = "derived") -> str:
    """Why no ε reaches `beta` at this p under the bound's `form`, and what would."""
    form = check_form(form)
    if form == "derived" and delta >= s:
        return (f"target precision {beta:g} is unreachable: δ = {delta:g} ≥ s = {s:g}, so the δ "
                f"term makes Theorem 3.3 (derived form) vacuous for every ε and every p > 0; "
                f"raise the TPR floor s above δ or lower δ")
    p_max = float(max_sampling_rate(beta, 0.0, delta, s, form=form))
    other_p = f"this target needs p ≤ {p_max:.4g}"
    if p == 1.0:
        return (f"target precision {beta:g} is unreachable at p=1: a record that is always trained "
                f"on is a member with certainty whatever ε; {other_p}")
    if form == "printed" and delta * p >= s:
        return (f"target precision {beta:g} is unreachable at p={p:g}: δ/s = {delta / s:.4g} ≥ 1/p, "
                f"so the δ term makes Theorem 3.3 (printed form) vacuous for every ε; raise the "
                f"TPR floor s or lower δ, or note that {other_p}")
    if delta == 0.0:
        return (f"target precision {beta:g} is below the prior p={p:g}: no training can push "
                f"precision below the prior (always-member already achieves {p:g}); possible: "
                f"targets ≥ {p:g} at this p, or {other_p}")
    floor = float(precision_bound(0.0, p, delta, s, form=form))
    return (f"target precision {beta:g} is below {floor:.4g}, the bound at ε=0 for p={p:g}, "
            f"δ={delta:g}, s={s:g} ({form} form; no training can push it lower); possible: "
            f"targets ≥ {floor:.4g} at this p, or {other_p}")


def max_sampling_rate(target: ArrayLike, epsilon: ArrayLike, delta: ArrayLike = 0.0,
                      tpr: ArrayLike = DEFAULT_TPR_FLOOR, *,
                      form: str = "derived") -> Result:
    """Largest sampling rate p whose bound U(ε, δ, p, s) stays at or below `target` β.

    Let k = (1/β − 1)·e^ε.  U ≤ β ⇔ (1−p)/p·c ≥ k, c the δ-factor of `form`:

    - `derived` (default): c = 1 − δ/s does not depend on p, so p = 1/(1 + k/c) = c/(c + k) in
      closed form.  When δ ≥ s (c ≤ 0) the bound is vacuous (1.0) for every p > 0, so only
      p = 0 meets a β < 1: 0 is returned.
    - `printed`: c = 1 − δp/s, and U = β becomes k·p·s = (1−p)·(s − δp), i.e.
      δp² − (δ + s + k·s)·p + s = 0.  The quadratic is s > 0 at p = 0 and −k·s ≤ 0 at p = 1,
      so it has one root in (0, 1]; below it U < β.  That root is computed as
      2s / (b + √(b² − 4δs)), b = δ + s + k·s, which is stable.

    Both reduce to 1/(1 + k) at δ = 0.  β = 1 gives 1; ε = ∞ (with β < 1) gives 0: without
    privacy only an empty training set keeps every attacker below β.  Always possible, hence
    no error for arguments in their domains.

    Args:
        target: β, the precision no attacker may exceed, in (0, 1].
        epsilon: the training's ε, ≥ 0 or `math.inf`.
        delta: the training's δ.
        tpr: the TPR floor s (as in `precision_bound`).
        form: `"derived"` or `"printed"` (as in `precision_bound`).

    Returns:
        The largest p in [0, 1] (float, or ndarray over array arguments).

    Raises:
        ValueError: an argument outside its domain, naming it.

    Example:
        ```python
        >>> max_sampling_rate(0.8, 1.0)          # 1/(1 + (1/0.8 − 1)·e)
        0.5953903248083103

        ```
    """
    scalar = is_scalar(target, epsilon, delta, tpr)
    beta, eps = check_target(target), check_epsilon(epsilon)
    d, s = check_delta(delta), check_rate("tpr", tpr)
    form = check_form(form)
    with np.errstate(all="ignore"):
        k = (1.0 / beta - 1.0) * np.exp(eps)
        if form == "derived":
            c = delta_factor(form, d, 0.0, s)  # 1 − δ/s
            p = np.where(c > 0.0, c / (c + k), 0.0)
        else:
            b = d + s + k * s
            p = 2.0 * s / (b + np.sqrt(np.maximum(b * b - 4.0 * d * s, 0.0)))
    p = np.where(np.isinf(k), 0.0, p)
    p = np.where(beta == 1.0, 1.0, p)
    return out(np.clip(p, 0.0, 1.0), scalar)


def deletion_capacity(epsilon: ArrayLike, p: ArrayLike, B: ArrayLike) -> Result:
    """How many deletion requests m one may decline and still be B-MI unlearnt (2024, Cor. 5.2).

    B is the required probability that *none* of the m requested records was in the training set
    given the model, P(x̂ ∉ D | S) ≥ B; it must lie in (0, 1) (B = 1 would demand certainty, which
    sampling with p > 0 never gives).  Each record is out with probability at least
    L = 1 − U(ε, δ=0, p) = 1/(1 + e^ε·p/(1−p)), and the records are sampled independently, so
    m requests are safe while L^m ≥ B, i.e. m ≤ ln B / ln L.  Returned is that real-valued bound
    (floor it for a whole number of requests); ∞ when p = 0, 0 when p = 1 or ε = ∞.

    Args:
        epsilon: the training's ε (at δ = 0), ≥ 0 or `math.inf`.
        p: the sampling probability, in [0, 1].
        B: the required probability that no declined record was trained on, in (0, 1).

    Returns:
        m, real-valued (float, or ndarray over array arguments).

    Raises:
        ValueError: an argument outside its domain, naming it.

    Example:
        ```python
        >>> deletion_capacity(1.0, 0.1, 0.9)     # ln 0.9 / ln(1/(1 + e·0.1/0.9))
        0.3992053741435951

        ```

    Note: the printed Corollary 5.2 (both paper versions) puts e^-ε inside L, which contradicts the
    text's own definition ("L is 1 minus the upper bound on positive accuracy", footnote 5) and
    would make capacity *grow* with ε; this follows the derivation, with e^+ε.
    """
    scalar = is_scalar(epsilon, p, B)
    eps, prior = check_epsilon(epsilon), check_prob("p", p)
    need = check("B", B, 0.0, 1.0, low_open=True, high_open=True)
    log_l = log_stay_out(eps, prior)
    with np.errstate(all="ignore"):
        m = np.log(need) / log_l
    m = np.where(log_l == 0.0, math.inf, m)
    m = np.where(log_l == -math.inf, 0.0, m)
    return out(m, scalar)

