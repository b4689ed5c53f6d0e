"""Thudi et al.'s bound on membership-inference precision and its relatives, as numbers.

An attacker who says "x* was in the training set" is right with probability P(x* ∈ D | S), the
attack's *precision* (Thudi et al.'s positive accuracy).  Thudi et al. (2022; TMLR 2024, Theorem
3.3) bound it for *every* attack from the DP guarantee and from p = P_x*(1), the probability that
x* was sampled into the training set at all: p enters as prior odds (1 − p)/p, which DP can only
shift by a factor e^ε, so sub-sampling lowers the bound where lowering ε alone cannot (at ε = 0
the bound is still p, never below it).

* **Here**: that one Bayes argument read forwards — upper and lower bounds on precision, the
  negative-side mirror, groups of records, the generalization gap.  Its inverses live in
  `sweeper.bounds.planning` (which ε, or which p, keeps every attacker under a target; deletion
  capacity) and `sweeper.bounds.proven` (which ε an observed attack *proves*).
* **The TPR floor s.**  With δ > 0 the bound carries δ·e^-ε·(1 − p)/(p·s), s = P(S | x* ∈ D)
  the attack's true-positive rate.  As s → 0 an (ε, δ)-DP mechanism admits attacks whose
  precision tends to 1 (the papers' counter-example), so the bound covers attacks that flag x*
  at least a fraction s of the time it *was* trained on.  Every function that takes s defaults it
  to ``DEFAULT_TPR_FLOOR`` = 0.01 (the 2024 paper, §4.3; the 2022 version used 0.1).  With δ = 0
  s plays no part.
* **``form="derived"``** (the default): U = 1/(1 + e^-ε·(1−p)/p·(1 − δ/s)).  Theorem 3.3's proof
  computes the joint P(S, x* ∈ D) = p·s and calls it P(S | x* ∈ D) = s, losing a factor 1/p in
  the δ-term; keeping p·s, with P(S | x* ∉ D) ≥ e^-ε·(s − δ), Bayes gives this form: the δ = 0
  bound at ε − ln(1 − δ/s), vacuous (1.0) once δ ≥ s, equal to the printed form when δ = 0 or
  p = 1 and never below it otherwise; touched by randomized response and the Gaussian
  mechanism's likelihood-ratio tests (jobs/audits/mechanisms.py, `sweeper.bounds.proven.tightest_bound`).
* **``form="printed"``**: the formulas exactly as the papers print them (2022, Theorem 2; 2024,
  Theorem 3.3), U = 1/(1 + e^-ε·(1−p)/p − δ·e^-ε·(1−p)/s), not a valid bound for δ > 0 and
  p < 1; kept to reproduce the papers' numbers (``BOUND_FORMS``).  The counter-example
  (randomized response at p = 1/4: precision 1/2 against a printed U of 2/7) is in
  docs/choices.md.  Every function with a δ-term takes ``form``.
"""

from __future__ import annotations

import math

import numpy as np

from sweeper.bounds._checks import (ArrayLike, Result, check_delta, check_epsilon, check_form,
                                    check_prob, check_rate, is_scalar, out)

#: Smallest attack TPR s = P(S | x* ∈ D) the (ε, δ) bound is taken to cover (2024 paper, §4.3).
DEFAULT_TPR_FLOOR = 0.01

__all__ = [
    "DEFAULT_TPR_FLOOR",
    "precision_bound",
    "negative_accuracy_bound",
    "precision_lower_bound",
    "positive_advantage_bound",
    "group_precision_bound",
    "generalization_gap_interval",
]


# --------------------------------------------------------------------------- the Bayes step
# Shared with the planning inverses and the earlier bounds, which read the same step.


def delta_factor(form: str, d: np.ndarray, prior: np.ndarray | float, s: np.ndarray) -> np.ndarray:
    """The (ε, δ) factor on the prior odds: 1 − δ/s (derived) or 1 − δ·p/s (printed).

    `prior` is the probability whose odds the bound moves (p for precision, 1 − p for the
    negative mirror); only the printed form uses it.  ≤ 0 means the bound is vacuous.  The
    derived factor is taken as (s − δ)/s, exact in its subtraction when δ is close to s.
    """
    return (s - d) / s if form == "derived" else 1.0 - d * prior / s


def posterior(shift: np.ndarray, p: np.ndarray | float, slack: np.ndarray | float = 1.0) -> np.ndarray:
    """1 / (1 + e^-shift · (1 − p)/p · slack): a prior p whose odds moved by a factor e^shift.

    The Bayes step behind U, its negative mirror, the lower bound and the generalization interval
    (shift = ±ε, prior p or 1 − p).  `slack` is the (ε, δ) correction from `delta_factor`,
    1 − δ/s or (printed) 1 − δ·p/s, a factor on the odds so that p = 0 never forms ∞ − ∞; slack ≤ 0 means the
    bound is vacuous (1.0).  Edges follow the math: p = 0 → 0 and p = 1 → 1 whatever the shift,
    shift = +∞ → 1, shift = −∞ → 0.
    """
    shift, p, slack = np.broadcast_arrays(np.asarray(shift, float), np.asarray(p, float),
                                          np.asarray(slack, float))
    with np.errstate(all="ignore"):
        value = 1.0 / (1.0 + np.exp(-shift) * ((1.0 - p) / p) * slack)
    value = np.where(shift == math.inf, 1.0, value)
    value = np.where(shift == -math.inf, 0.0, value)
    value = np.where(slack <= 0.0, 1.0, value)
    value = np.where(p == 0.0, 0.0, value)
    value = np.where(p == 1.0, 1.0, value)
    return np.clip(value, 0.0, 1.0)


def log_stay_out(eps: np.ndarray, p: np.ndarray) -> np.ndarray:
    """ln L, L = 1/(1 + e^ε·p/(1−p)): the least probability that x* is *not* in D given S.

    Kept in log form (−log1p) because deletion capacity and group bounds multiply many L close to 1.
    """
    eps, p = np.broadcast_arrays(eps, p)
    with np.errstate(all="ignore"):
        value = -np.log1p(np.exp(eps) * p / (1.0 - p))
    value = np.where((p > 0.0) & (eps == math.inf), -math.inf, value)
    value = np.where(p == 0.0, 0.0, value)
    return np.where(p == 1.0, -math.inf, value)


# --------------------------------------------------------------------------- the bounds


def precision_bound(epsilon: ArrayLike, p: ArrayLike, delta: ArrayLike = 0.0,
                    tpr: ArrayLike = DEFAULT_TPR_FLOOR, *, form: str = "derived") -> Result:
    """Upper bound U on any attack's precision P(x* ∈ D | S) (Thudi et al. 2024, Theorem 3.3).

    Two forms (`form`), with s = `tpr` the attack's TPR:

    - `derived` (default): U = 1 / (1 + e^-ε·(1−p)/p·(1 − δ/s)); the proof of Theorem 3.3 with
      P(S, x* ∈ D) = p·s kept (module docstring), i.e. the δ = 0 bound at
      ε_eff = ε − ln(1 − δ/s), vacuous once δ ≥ s.
    - `printed`: U = 1 / (1 + e^-ε·(1−p)/p − δ·e^-ε·(1−p)/s), the theorem as the papers print
      it; not a valid bound for δ > 0 and p < 1 (it can fall below an attack's exact precision).

    The two agree when δ = 0 (U = p·e^ε / (p·e^ε + 1 − p), s drops out) or p = 1; otherwise
    derived ≥ printed.  The bound holds only while the denominator is positive; otherwise (and
    whenever it would exceed 1) it is vacuous: 1.0.  U rises with ε and p and falls with s, so
    the bound for *every* attack with TPR ≥ floor is U at s = floor.

    Args:
        epsilon: the training's ε, ≥ 0; `math.inf` for non-private training (U = 1).
        p: the probability that x* was sampled into the training set, in [0, 1].
        delta: the training's δ, in [0, 1).
        tpr: the TPR floor s, in (0, 1]: the bound covers every attack that flags x* at least
            this often when it was trained on.  Defaults to `DEFAULT_TPR_FLOOR` (0.01), the
            product's own default (`metrics.tpr_floor`, the sweep's `bound`, `sweeper bounds
            --tpr`), so the library and the product give one number for one question.  With
            δ = 0 it plays no part.
        form: `"derived"` or `"printed"` (above).

    Returns:
        U in [p, 1]: a float when every argument is a scalar, else an ndarray of the arguments'
            broadcast shape.

    Raises:
        ValueError: an argument outside its domain, naming it.

    Example:
        ```python
        >>> precision_bound(2, 0.5)              # 1/(1 + e^-2)
        0.8807970779778823
        >>> precision_bound(3, 0.5, delta=0.05)  # δ ≥ s = 0.01: vacuous
        1.0

        ```
    """
    scalar = is_scalar(epsilon, p, delta, tpr)
    eps, prior = check_epsilon(epsilon), check_prob("p", p)
    d, s = check_delta(delta), check_rate("tpr", tpr)
    return out(posterior(eps, prior, delta_factor(check_form(form), d, prior, s)), scalar)


def negative_accuracy_bound(epsilon: ArrayLike, p: ArrayLike, delta: ArrayLike = 0.0,
                            tnr: ArrayLike = DEFAULT_TPR_FLOOR, *,
                            form: str = "derived") -> Result:
    """Upper bound on P(x* ∉ D | S') for an attack saying "not a member" (Theorem 3.3, mirror).

    The precision bound with the roles of member and non-member swapped, i.e. prior 1 − p, and
    s' = `tnr` = P(S' | x* ∉ D).  derived (default): 1 / (1 + e^-ε·p/(1−p)·(1 − δ/s'));
    printed: 1 / (1 + e^-ε·p/(1−p) − δ·e^-ε·p/s'), invalid for δ > 0 and p > 0 (see
    `precision_bound`).  ``tnr`` defaults to the same floor as `precision_bound`'s ``tpr``.
    """
    scalar = is_scalar(epsilon, p, delta, tnr)
    eps, prior = check_epsilon(epsilon), check_prob("p", p)
    d, s = check_delta(delta), check_rate("tnr", tnr)
    factor = delta_factor(check_form(form), d, 1.0 - prior, s)
    return out(posterior(eps, 1.0 - prior, factor), scalar)


def precision_lower_bound(epsilon: ArrayLike, p: ArrayLike) -> Result:
    """Lower bound 1 / (1 + e^ε·(1−p)/p) on the precision of any attack that fires (pure ε-DP).

    DP bounds the likelihood ratio from both sides, so no attack can be *worse* than this either;
    every precision lies in [lower, U].  Equals 1 − (negative-accuracy bound) at δ = 0.
    """
    scalar = is_scalar(epsilon, p)
    eps, prior = check_epsilon(epsilon), check_prob("p", p)
    return out(posterior(-eps, prior), scalar)


def positive_advantage_bound(epsilon: ArrayLike, p: ArrayLike, delta: ArrayLike = 0.0,
                             tpr: ArrayLike = DEFAULT_TPR_FLOOR, *,
                             form: str = "derived") -> Result:
    """Bound 2·(U − p) on the positive advantage Ad = 2·(precision − p) (2022 paper, §7.5).

    The gain over the always-member baseline, scaled like Yeom's advantage so that at p = 0.5 the
    two agree in form.  Not monotone in p: it vanishes at p = 0 and p = 1.  U in either `form`
    (see `precision_bound`).
    """
    scalar = is_scalar(epsilon, p, delta, tpr)
    bound = np.asarray(precision_bound(epsilon, p, delta, tpr, form=form))
    return out(2.0 * (bound - np.asarray(p, float)), scalar)


def group_precision_bound(epsilon: float, ps: ArrayLike) -> float:
    """Bound 1 − Π_{x∈G} 1/(1 + e^ε·p_x/(1−p_x)) on P(G ∩ D ≠ ∅ | S), pure ε-DP (2022, Cor. 3).

    "Some record of the group G was trained on" is the complement of "none was"; each factor is
    the lower bound on one record's negative accuracy, and the bound ignores the other records,
    so the factors multiply.  `ps` is the 1-D array of the group's sampling probabilities; an
    empty group gives 0.
    """
    eps = check_epsilon(epsilon)
    if eps.ndim:
        raise ValueError(f"epsilon must be a scalar for a group bound; got shape {eps.shape}")
    prior = check_prob("ps", ps)
    if prior.ndim != 1:
        raise ValueError(f"ps must be a 1-D array of sampling probabilities; got shape {prior.shape}")
    log_none = float(np.sum(log_stay_out(eps, prior)))
    return max(0.0, -math.expm1(log_none)) if log_none > -math.inf else 1.0


def generalization_gap_interval(epsilon: ArrayLike) -> tuple[Result, Result]:
    """Interval ((1+e^ε)^-1, (1+e^-ε)^-1) containing (R_gen/B + 1)/2 (2024, Cor. 5.4; 2022, Cor. 5).

    Yeom's threshold adversary has accuracy (R_gen/B + 1)/2 at p = 0.5 (R_gen the generalization
    gap, B a bound on the loss); at p = 0.5 every attack's accuracy lies between the precision
    lower and upper bounds, so this pins the gap: R_gen/B ∈ [2·low − 1, 2·high − 1].
    """
    scalar = is_scalar(epsilon)
    eps = check_epsilon(epsilon)
    return out(posterior(-eps, 0.5), scalar), out(posterior(eps, 0.5), scalar)

