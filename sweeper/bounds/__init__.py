"""What (ε, δ)-DP training promises about membership inference, as numbers.

Why these quantities.  An attacker who says "x* was in the training set" is right with probability
P(x* ∈ D | S), the attack's *precision* (Thudi et al. call it positive accuracy).  Thudi et al.
(2022; TMLR 2024, Theorem 3.3) bound it for *every* attack from the DP guarantee and from
p = P_x*(1), the probability that x* was sampled into the training set at all.  p enters as prior
odds (1 − p)/p, which DP can only shift by a factor e^ε: sub-sampling the training set therefore
lowers the bound where lowering ε alone cannot (at ε = 0 the bound is still p, never below it).
Everything here is that one Bayes argument read in different directions: upper and lower bounds
on precision, the negative-side mirror, groups of records, deletion requests (B-MI unlearning),
the generalization gap, the inverses a planner needs (which ε, or which p, keeps every attacker
under a target precision), and the audit direction (which ε an observed attack *proves*).

Why a floor on the TPR.  With δ > 0 the bound carries a term δ·e^-ε·(1 − p)/(p·s),
s = P(S | x* ∈ D) being the attack's true-positive rate.  As s → 0 an (ε, δ)-DP mechanism admits
attacks whose precision tends to 1 (the papers' counter-example), so no bound exists without a
floor on s: the bound covers attacks that flag x* at least a fraction s of the time it *was*
trained on.  The functions take s as given; callers apply the floor, by default
``DEFAULT_TPR_FLOOR`` = 0.01 (the 2024 paper, §4.3; the 2022 version used 0.1).  With δ = 0 s plays
no part.

Why the δ-term is not the printed one (``form="derived"``, the default).  Theorem 3.3 as printed
(both versions) reads U = 1/(1 + e^-ε·(1−p)/p − δ·e^-ε·(1−p)/s), which is not a valid bound for
δ > 0 and p < 1.  Its proof sums P(H(D) ∈ S)·P(D) over the datasets D ∋ x*, which is the joint
P(S, x* ∈ D) = p·s, and then calls it P(S | x* ∈ D) = s, losing a factor 1/p in the δ-term.
Counter-example: randomized response on membership with ε = ln 3 is (0, 1/2)-DP; at p = 1/4 the
attack "output 1" has s = 3/4 and precision exactly 1/2, yet the printed U(0, 1/2, 1/4, 3/4) =
1/(1 + 3 − 1/2) = 2/7.  Keeping p·s, P(S | x* ∉ D) ≥ e^-ε·(s − δ) and Bayes give
U = 1/(1 + e^-ε·(1−p)/p·(1 − δ/s)): the δ = 0 bound at ε_eff = ε − ln(1 − δ/s), vacuous (1.0)
once δ ≥ s, equal to the printed form when δ = 0 or p = 1 and never below it otherwise (it is
touched by randomized response and by the Gaussian mechanism's likelihood-ratio tests, see
jobs/mechanisms.py).  Every function with a δ-term takes ``form``: "derived" (default) or
"printed", the formulas exactly as the papers print them (SPEC §3.1, §3.2, §3.9), kept to
reproduce the papers' numbers; see ``BOUND_FORMS``.

Conventions.  All functions are pure NumPy and broadcast over array arguments; they return a
Python float when every argument is a scalar and an ndarray otherwise.  ε = ∞ (non-private
training) is a legal value.  Bounds that are probabilities are clipped to [0, 1]; a bound whose
denominator is not positive is vacuous and returned as 1.0.  Parameters out of their domain raise
ValueError naming the argument; measured rates (precision, TPR, FPR in the audit helpers) may be
NaN (an attack that never fired has no precision) and give NaN.
"""

from __future__ import annotations

import math
from typing import Any, Sequence, Union

import numpy as np

ArrayLike = Union[float, Sequence[float], np.ndarray]
Result = Union[float, np.ndarray]

#: Smallest attack TPR s = P(S | x* ∈ D) the (ε, δ) bound is taken to cover (2024 paper, §4.3).
DEFAULT_TPR_FLOOR = 0.01

#: Readings of Theorem 3.3's δ-term: "derived" (the proof carried through, the default) and
#: "printed" (the papers' formula, invalid for δ > 0 and p < 1; see the module docstring).
BOUND_FORMS = ("derived", "printed")

__all__ = [
    "BOUND_FORMS",
    "DEFAULT_TPR_FLOOR",
    "precision_bound",
    "negative_accuracy_bound",
    "precision_lower_bound",
    "positive_advantage_bound",
    "group_precision_bound",
    "deletion_capacity",
    "generalization_gap_interval",
    "epsilon_for_precision",
    "max_sampling_rate",
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
    "epsilon_from_precision",
    "epsilon_from_rates",
]


# --------------------------------------------------------------------------- helpers


def _is_scalar(*values: Any) -> bool:
    return all(np.ndim(v) == 0 for v in values)


def _out(values: np.ndarray, scalar: bool) -> Result:
    return float(values) if scalar else values


def _check(name: str, value: ArrayLike, low: float, high: float, *, low_open: bool = False,
           high_open: bool = False, allow_nan: bool = False) -> np.ndarray:
    """Return `value` as a float array, or raise ValueError naming the argument and its value."""
    array = np.asarray(value, dtype=float)
    nan_ok = np.isnan(array) if allow_nan else np.zeros(array.shape, bool)
    below = (array <= low) if low_open else (array < low)
    above = (array >= high) if high_open else (array > high)
    bad = ~nan_ok & (below | above | np.isnan(array))
    if np.any(bad):
        offending = array[bad].flat[0] if array.ndim else float(array)
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        raise ValueError(f"{name} must lie in {interval}; got {name}={offending:g}")
    return array


def _epsilon(value: ArrayLike) -> np.ndarray:
    return _check("epsilon", value, 0.0, math.inf)


def _delta(value: ArrayLike) -> np.ndarray:
    return _check("delta", value, 0.0, 1.0, high_open=True)


def _prob(name: str, value: ArrayLike) -> np.ndarray:
    return _check(name, value, 0.0, 1.0)


def _rate(name: str, value: ArrayLike) -> np.ndarray:
    return _check(name, value, 0.0, 1.0, low_open=True)


def _form(value: Any) -> str:
    """Return `value` if it is one of BOUND_FORMS, else raise ValueError naming `form`."""
    if not isinstance(value, str) or value not in BOUND_FORMS:
        raise ValueError(f"form must be one of {', '.join(map(repr, BOUND_FORMS))}; "
                         f"got form={value!r}")
    return value


def _slack(form: str, d: np.ndarray, prior: np.ndarray, s: np.ndarray) -> np.ndarray:
    """The (ε, δ) factor on the prior odds: 1 − δ/s (derived) or 1 − δ·p/s (printed).

    `prior` is the probability whose odds the bound moves (p for precision, 1 − p for the
    negative mirror); only the printed form uses it.  ≤ 0 means the bound is vacuous.  The
    derived factor is taken as (s − δ)/s, exact in its subtraction when δ is close to s.
    """
    return (s - d) / s if form == "derived" else 1.0 - d * prior / s


def _posterior(shift: np.ndarray, p: np.ndarray, slack: np.ndarray | float = 1.0) -> np.ndarray:
    """1 / (1 + e^-shift · (1 − p)/p · slack): a prior p whose odds moved by a factor e^shift.

    The Bayes step behind U, its negative mirror, the lower bound and the generalization interval
    (shift = ±ε, prior p or 1 − p).  `slack` is the (ε, δ) correction from `_slack`, 1 − δ/s or
    (printed) 1 − δ·p/s, a factor on the odds so that p = 0 never forms ∞ − ∞; slack ≤ 0 means the
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


def _log_stay_out(eps: np.ndarray, p: np.ndarray) -> np.ndarray:
    """ln L, L = 1/(1 + e^ε·p/(1−p)): the least probability that x* is *not* in D given S.

    Kept in log form (−log1p) because deletion capacity and group bounds multiply many L close to 1.
    """
    eps, p = np.broadcast_arrays(eps, p)
    with np.errstate(all="ignore"):
        value = -np.log1p(np.exp(eps) * p / (1.0 - p))
    value = np.where((p > 0.0) & (eps == math.inf), -math.inf, value)
    value = np.where(p == 0.0, 0.0, value)
    return np.where(p == 1.0, -math.inf, value)


# --------------------------------------------------------------------------- Thudi et al.


def precision_bound(epsilon: ArrayLike, p: ArrayLike, delta: ArrayLike = 0.0,
                    tpr: ArrayLike = 1.0, *, form: str = "derived") -> Result:
    """Upper bound U on any attack's precision P(x* ∈ D | S) (Thudi et al. 2024, Theorem 3.3).

    derived (default): U = 1 / (1 + e^-ε·(1−p)/p·(1 − δ/s)), s = `tpr` the attack's TPR; the
    proof of Theorem 3.3 with P(S, x* ∈ D) = p·s kept (module docstring), i.e. the δ = 0 bound at
    ε_eff = ε − ln(1 − δ/s), vacuous once δ ≥ s.
    printed: U = 1 / (1 + e^-ε·(1−p)/p − δ·e^-ε·(1−p)/s), the theorem as the papers print it; not
    a valid bound for δ > 0 and p < 1 (it can fall below an attack's exact precision).
    The two agree when δ = 0 (U = p·e^ε / (p·e^ε + 1 − p), s drops out) or p = 1; otherwise derived
    ≥ printed.  The bound holds only while the denominator is positive; otherwise (and whenever it
    would exceed 1) it is vacuous: 1.0.  U rises with ε and p and falls with s, so the bound for
    *every* attack with TPR ≥ floor is U at s = floor; ``tpr`` defaults to 1.0 (the loosest
    δ-term) only to keep δ = 0 calls short.
    """
    scalar = _is_scalar(epsilon, p, delta, tpr)
    eps, prior, d, s = _epsilon(epsilon), _prob("p", p), _delta(delta), _rate("tpr", tpr)
    return _out(_posterior(eps, prior, _slack(_form(form), d, prior, s)), scalar)


def negative_accuracy_bound(epsilon: ArrayLike, p: ArrayLike, delta: ArrayLike = 0.0,
                            tnr: ArrayLike = 1.0, *, form: str = "derived") -> Result:
    """Upper bound on P(x* ∉ D | S') for an attack saying "not a member" (Theorem 3.3, mirror).

    The precision bound with the roles of member and non-member swapped, i.e. prior 1 − p, and
    s' = `tnr` = P(S' | x* ∉ D).  derived (default): 1 / (1 + e^-ε·p/(1−p)·(1 − δ/s'));
    printed: 1 / (1 + e^-ε·p/(1−p) − δ·e^-ε·p/s'), invalid for δ > 0 and p > 0 (see
    `precision_bound`).
    """
    scalar = _is_scalar(epsilon, p, delta, tnr)
    eps, prior, d, s = _epsilon(epsilon), _prob("p", p), _delta(delta), _rate("tnr", tnr)
    return _out(_posterior(eps, 1.0 - prior, _slack(_form(form), d, 1.0 - prior, s)), scalar)


def precision_lower_bound(epsilon: ArrayLike, p: ArrayLike) -> Result:
    """Lower bound 1 / (1 + e^ε·(1−p)/p) on the precision of any attack that fires (pure ε-DP).

    DP bounds the likelihood ratio from both sides, so no attack can be *worse* than this either;
    every precision lies in [lower, U].  Equals 1 − (negative-accuracy bound) at δ = 0.
    """
    scalar = _is_scalar(epsilon, p)
    eps, prior = _epsilon(epsilon), _prob("p", p)
    return _out(_posterior(-eps, prior), scalar)


def positive_advantage_bound(epsilon: ArrayLike, p: ArrayLike, delta: ArrayLike = 0.0,
                             tpr: ArrayLike = 1.0, *, form: str = "derived") -> Result:
    """Bound 2·(U − p) on the positive advantage Ad = 2·(precision − p) (2022 paper, §7.5).

    The gain over the always-member baseline, scaled like Yeom's advantage so that at p = 0.5 the
    two agree in form.  Not monotone in p: it vanishes at p = 0 and p = 1.  U in either `form`
    (see `precision_bound`).
    """
    scalar = _is_scalar(epsilon, p, delta, tpr)
    bound = np.asarray(precision_bound(epsilon, p, delta, tpr, form=form))
    return _out(2.0 * (bound - np.asarray(p, float)), scalar)


def group_precision_bound(epsilon: float, ps: ArrayLike) -> float:
    """Bound 1 − Π_{x∈G} 1/(1 + e^ε·p_x/(1−p_x)) on P(G ∩ D ≠ ∅ | S), pure ε-DP (2022, Cor. 3).

    "Some record of the group G was trained on" is the complement of "none was"; each factor is
    the lower bound on one record's negative accuracy, and the bound ignores the other records,
    so the factors multiply.  `ps` is the 1-D array of the group's sampling probabilities; an
    empty group gives 0.
    """
    eps = _epsilon(epsilon)
    if eps.ndim:
        raise ValueError(f"epsilon must be a scalar for a group bound; got shape {eps.shape}")
    prior = _prob("ps", ps)
    if prior.ndim != 1:
        raise ValueError(f"ps must be a 1-D array of sampling probabilities; got shape {prior.shape}")
    log_none = float(np.sum(_log_stay_out(eps, prior)))
    return max(0.0, -math.expm1(log_none)) if log_none > -math.inf else 1.0


def deletion_capacity(epsilon: ArrayLike, p: ArrayLike, B: ArrayLike) -> Result:
    """How many deletion requests m one may decline and still be B-MI unlearnt (2024, Cor. 5.2).

    B is the required probability that *none* of the m requested records was in the training set
    given the model, P(x̂ ∉ D | S) ≥ B; it must lie in (0, 1) (B = 1 would demand certainty, which
    sampling with p > 0 never gives).  Each record is out with probability at least
    L = 1 − U(ε, δ=0, p) = 1/(1 + e^ε·p/(1−p)), and the records are sampled independently, so
    m requests are safe while L^m ≥ B, i.e. m ≤ ln B / ln L.  Returned is that real-valued bound
    (floor it for a whole number of requests); ∞ when p = 0, 0 when p = 1 or ε = ∞.

    Note: the printed Corollary 5.2 (both paper versions) puts e^-ε inside L, which contradicts the
    text's own definition ("L is 1 minus the upper bound on positive accuracy", footnote 5) and
    would make capacity *grow* with ε; this follows the derivation, with e^+ε.
    """
    scalar = _is_scalar(epsilon, p, B)
    eps, prior = _epsilon(epsilon), _prob("p", p)
    need = _check("B", B, 0.0, 1.0, low_open=True, high_open=True)
    log_l = _log_stay_out(eps, prior)
    with np.errstate(all="ignore"):
        m = np.log(need) / log_l
    m = np.where(log_l == 0.0, math.inf, m)
    m = np.where(log_l == -math.inf, 0.0, m)
    return _out(m, scalar)


def generalization_gap_interval(epsilon: ArrayLike) -> tuple[Result, Result]:
    """Interval ((1+e^ε)^-1, (1+e^-ε)^-1) containing (R_gen/B + 1)/2 (2024, Cor. 5.4; 2022, Cor. 5).

    Yeom's threshold adversary has accuracy (R_gen/B + 1)/2 at p = 0.5 (R_gen the generalization
    gap, B a bound on the loss); at p = 0.5 every attack's accuracy lies between the precision
    lower and upper bounds, so this pins the gap: R_gen/B ∈ [2·low − 1, 2·high − 1].
    """
    scalar = _is_scalar(epsilon)
    eps = _epsilon(epsilon)
    return _out(_posterior(-eps, 0.5), scalar), _out(_posterior(eps, 0.5), scalar)


# --------------------------------------------------------------------------- planning inverses


def _target(value: ArrayLike) -> np.ndarray:
    return _check("target", value, 0.0, 1.0, low_open=True)


def epsilon_for_precision(target: ArrayLike, p: ArrayLike, delta: ArrayLike = 0.0,
                          tpr: ArrayLike = 1.0, *, form: str = "derived") -> Result:
    """Largest ε whose bound U(ε, δ, p, s) stays at or below `target` β (2024 paper, §4.3).

    Solving U = β: 1/β − 1 = e^-ε·(1−p)/p·c, c the δ-factor of `form`, so
    derived (default): ε = ln[(1−p)/p·(1 − δ/s) / (1/β − 1)];
    printed:           ε = ln[(1−p)·(1/p − δ/s) / (1/β − 1)].
    U grows with ε, so any ε up to this one also meets the target.  β = 1 or p = 0 gives ∞ (every
    ε does).  No clipping is needed at ε = 0: the formula is ≥ 0 exactly when the target is met at
    ε = 0 (where U = p for δ = 0), so a negative value (beyond a 1e-12 rounding tolerance, which
    is returned as 0.0) means the target is out of reach and raises ValueError with the reason and
    the largest p that would make it reachable; so does c ≤ 0 (δ ≥ s derived, δ·p ≥ s printed),
    where the bound is vacuous for every ε.
    """
    scalar = _is_scalar(target, p, delta, tpr)
    beta, prior, d, s = _target(target), _prob("p", p), _delta(delta), _rate("tpr", tpr)
    form = _form(form)
    beta, prior, d, s = np.broadcast_arrays(beta, prior, d, s)
    with np.errstate(all="ignore"):
        room = (1.0 - prior) / prior * _slack(form, d, prior, s)  # (1−p)/p·c
        eps = np.log(room / (1.0 / beta - 1.0))
    eps = np.where(prior == 0.0, math.inf, eps)
    eps = np.where(beta == 1.0, math.inf, eps)
    eps = np.where((eps < 0.0) & (eps > -1e-12), 0.0, eps)
    impossible = ~(eps >= 0.0)
    if np.any(impossible):
        i = tuple(np.argwhere(impossible)[0])
        b, q, dd, ss = (float(a[i]) for a in (beta, prior, d, s))
        raise ValueError(_unreachable_reason(b, q, dd, ss, form=form))
    return _out(eps, scalar)


def _unreachable_reason(beta: float, p: float, delta: float, s: float, *,
                        form: str = "derived") -> str:
    """Why no ε reaches `beta` at this p under the bound's `form`, and what would."""
    form = _form(form)
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
                      tpr: ArrayLike = 1.0, *, form: str = "derived") -> Result:
    """Largest sampling rate p whose bound U(ε, δ, p, s) stays at or below `target` β.

    Let k = (1/β − 1)·e^ε.  U ≤ β ⇔ (1−p)/p·c ≥ k, c the δ-factor of `form`:
    derived (default): c = 1 − δ/s does not depend on p, so p = 1/(1 + k/c) = c/(c + k) in closed
    form.  When δ ≥ s (c ≤ 0) the bound is vacuous (1.0) for every p > 0, so only p = 0 meets a
    β < 1: 0 is returned.
    printed: c = 1 − δp/s, and U = β becomes k·p·s = (1−p)·(s − δp), i.e.
    δp² − (δ + s + k·s)·p + s = 0.  The quadratic is s > 0 at p = 0 and −k·s ≤ 0 at p = 1, so it
    has one root in (0, 1]; below it U < β.  That root is computed as 2s / (b + √(b² − 4δs)),
    b = δ + s + k·s, which is stable.
    Both reduce to 1/(1 + k) at δ = 0.  β = 1 gives 1; ε = ∞ (with β < 1) gives 0: without
    privacy only an empty training set keeps every attacker below β.  Always possible, hence no
    error.
    """
    scalar = _is_scalar(target, epsilon, delta, tpr)
    beta, eps, d, s = _target(target), _epsilon(epsilon), _delta(delta), _rate("tpr", tpr)
    form = _form(form)
    with np.errstate(all="ignore"):
        k = (1.0 / beta - 1.0) * np.exp(eps)
        if form == "derived":
            c = _slack(form, d, 0.0, s)  # 1 − δ/s
            p = np.where(c > 0.0, c / (c + k), 0.0)
        else:
            b = d + s + k * s
            p = 2.0 * s / (b + np.sqrt(np.maximum(b * b - 4.0 * d * s, 0.0)))
    p = np.where(np.isinf(k), 0.0, p)
    p = np.where(beta == 1.0, 1.0, p)
    return _out(np.clip(p, 0.0, 1.0), scalar)


# --------------------------------------------------------------------------- earlier bounds
# Table 1 of the 2022 paper lists Yeom, Erlingsson and Humphries as *accuracy* bounds for Yeom's
# balanced experiment (p = 0.5): accuracy = (1 + advantage)/2.  The *_accuracy_bound functions
# return that accuracy (as the table does); *_advantage_bound return the advantage the original
# papers state.  Both are clipped to [0, 1]: a "bound" above 1 says nothing.


def yeom_advantage_bound(epsilon: ArrayLike) -> Result:
    """Yeom et al. (2018): advantage ≤ e^ε − 1 for ε-DP (clipped to 1; vacuous from ε = ln 2)."""
    scalar = _is_scalar(epsilon)
    with np.errstate(over="ignore"):
        adv = np.expm1(_epsilon(epsilon))
    return _out(np.clip(adv, 0.0, 1.0), scalar)


def yeom_accuracy_bound(epsilon: ArrayLike) -> Result:
    """Yeom et al. (2018) as accuracy at p = 0.5: (1 + e^ε − 1)/2 = e^ε/2, clipped to 1."""
    scalar = _is_scalar(epsilon)
    return _out((1.0 + np.asarray(yeom_advantage_bound(epsilon))) / 2.0, scalar)


def erlingsson_advantage_bound(epsilon: ArrayLike, delta: ArrayLike = 0.0) -> Result:
    """Erlingsson et al. (2019): advantage ≤ 1 − e^-ε + δ·e^-ε (Hall et al.'s TPR/FPR relation)."""
    scalar = _is_scalar(epsilon, delta)
    eps, d = _epsilon(epsilon), _delta(delta)
    return _out(np.clip(1.0 - (1.0 - d) * np.exp(-eps), 0.0, 1.0), scalar)


def erlingsson_accuracy_bound(epsilon: ArrayLike, delta: ArrayLike = 0.0) -> Result:
    """Erlingsson et al. as accuracy at p = 0.5: 1 − e^-ε/2 + δ·e^-ε/2 (Table 1: 1 − e^-ε/2)."""
    scalar = _is_scalar(epsilon, delta)
    return _out((1.0 + np.asarray(erlingsson_advantage_bound(epsilon, delta))) / 2.0, scalar)


def humphries_advantage_bound(epsilon: ArrayLike, delta: ArrayLike = 0.0) -> Result:
    """Humphries et al. (2020): advantage ≤ (e^ε − 1 + 2δ)/(e^ε + 1).

    Computed as (1 − e^-ε + 2δ·e^-ε)/(1 + e^-ε) so that ε = ∞ gives 1, not ∞/∞.
    """
    scalar = _is_scalar(epsilon, delta)
    e_neg = np.exp(-_epsilon(epsilon))
    adv = (1.0 - e_neg + 2.0 * _delta(delta) * e_neg) / (1.0 + e_neg)
    return _out(np.clip(adv, 0.0, 1.0), scalar)


def humphries_accuracy_bound(epsilon: ArrayLike, delta: ArrayLike = 0.0) -> Result:
    """Humphries et al. as accuracy at p = 0.5: (e^ε + δ)/(e^ε + 1); at δ = 0 equal to U(ε, 0.5)."""
    scalar = _is_scalar(epsilon, delta)
    return _out((1.0 + np.asarray(humphries_advantage_bound(epsilon, delta))) / 2.0, scalar)


def sablayrolles_precision_bound(epsilon: ArrayLike, p: ArrayLike) -> Result:
    """Sablayrolles et al. (2019): precision ≤ p + ε/4 for ε-DP (clipped to 1)."""
    scalar = _is_scalar(epsilon, p)
    return _out(np.clip(_prob("p", p) + _epsilon(epsilon) / 4.0, 0.0, 1.0), scalar)


def mahloujifar_precision_bound(epsilon: ArrayLike) -> Result:
    """Mahloujifar et al. (2022): precision ≤ 1/(1 + e^-ε), only at p = 0.5 with all else fixed."""
    scalar = _is_scalar(epsilon)
    return _out(_posterior(_epsilon(epsilon), 0.5), scalar)


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
    scalar = _is_scalar(epsilon, delta, fpr)
    eps, d, alpha = np.broadcast_arrays(_epsilon(epsilon), _delta(delta), _prob("fpr", fpr))
    return _out(np.clip(_jayaraman_tpr_max(eps, d, alpha) - alpha, 0.0, 1.0), scalar)


def jayaraman_ppv_bound(epsilon: ArrayLike, delta: ArrayLike, fpr: ArrayLike,
                        gamma: ArrayLike) -> Result:
    """Jayaraman et al. (2020, Thm 4.2): PPV ≤ (1 − f(α)) / (1 − f(α) + γ·α).

    γ = non-members per member = (1 − p)/p.  At α = 0 with δ = 0 the expression is 0/0; its limit
    e^ε/(e^ε + γ) is returned, which is Thudi et al.'s U at p = 1/(1 + γ): the two bounds meet as
    the FPR vanishes.
    """
    scalar = _is_scalar(epsilon, delta, fpr, gamma)
    eps, d, alpha, g = np.broadcast_arrays(_epsilon(epsilon), _delta(delta), _prob("fpr", fpr),
                                           _check("gamma", gamma, 0.0, math.inf))
    tpr_max = _jayaraman_tpr_max(eps, d, alpha)
    with np.errstate(all="ignore"):
        ppv = tpr_max / (tpr_max + g * alpha)
        limit = _posterior(eps, 1.0 / (1.0 + g))
    ppv = np.where(tpr_max + g * alpha == 0.0, limit, ppv)
    ppv = np.where((alpha == 0.0) & (g == math.inf), limit, ppv)
    return _out(np.clip(ppv, 0.0, 1.0), scalar)


# --------------------------------------------------------------------------- audit


def epsilon_from_precision(precision: ArrayLike, p: ArrayLike) -> Result:
    """The ε an observed precision proves (δ = 0): ln[prec·(1−p) / (p·(1−prec))].

    Inverting U: a precision above U(ε, p) is impossible, so the training cannot have been ε-DP for
    any smaller ε.  Pass the *lower* end of the precision's confidence interval so the claim holds
    with that confidence.  0 when precision ≤ p (no evidence beyond the prior); ∞ when
    precision = 1 (or p = 0 with a positive precision).  NaN precision gives NaN.
    """
    scalar = _is_scalar(precision, p)
    prec = _check("precision", precision, 0.0, 1.0, allow_nan=True)
    prior = _prob("p", p)
    prec, prior = np.broadcast_arrays(prec, prior)
    with np.errstate(all="ignore"):
        eps = np.log(prec * (1.0 - prior)) - np.log(prior * (1.0 - prec))
    eps = np.where((prec == 1.0) | (prior == 0.0), math.inf, eps)
    eps = np.where(prec <= prior, 0.0, eps)
    return _out(np.where(np.isnan(prec), np.nan, eps), scalar)


def epsilon_from_rates(tpr: ArrayLike, fpr: ArrayLike, delta: ArrayLike = 0.0) -> Result:
    """The ε an attack's (TPR, FPR) proves: max(ln((TPR − δ)/FPR), ln((1 − δ − FPR)/(1 − TPR)), 0).

    (ε, δ)-DP forces TPR ≤ e^ε·FPR + δ and 1 − FPR ≤ e^ε·(1 − TPR) + δ for every test; a measured
    pair violating them for some ε rules that ε out.  Use the interval ends (TPR low, FPR high) to
    make the claim hold with confidence.  A term whose numerator is ≤ 0 proves nothing (skipped);
    a positive numerator over a zero denominator proves ε = ∞.  NaN rates give NaN.
    """
    scalar = _is_scalar(tpr, fpr, delta)
    t = _check("tpr", tpr, 0.0, 1.0, allow_nan=True)
    f = _check("fpr", fpr, 0.0, 1.0, allow_nan=True)
    t, f, d = np.broadcast_arrays(t, f, _delta(delta))

    def _term(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            value = np.log(numerator) - np.log(denominator)
        value = np.where(denominator == 0.0, math.inf, value)
        return np.where(numerator <= 0.0, -math.inf, value)

    eps = np.maximum.reduce([_term(t - d, f), _term(1.0 - d - f, 1.0 - t), np.zeros_like(t)])
    return _out(np.where(np.isnan(t) | np.isnan(f), np.nan, eps), scalar)
