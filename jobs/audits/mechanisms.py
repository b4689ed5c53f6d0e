"""Mechanisms whose privacy is known exactly, applied to membership itself: a check on the bounds.

Why.  Trained models cannot tell whether a bound on every attack's precision is right: real attacks
are weak and accountants loose.  Here the mechanism sees one bit b (1: the record was trained on)
and releases an output whose whole privacy profile δ(ε') is known in closed form, and the attack
"member iff output ≥ t" has exact rates.  Randomized response must meet U at δ = 0; the Gaussian
mechanism, whose profile determines its trade-off curve, must *touch* min over ε' of U at the
likelihood-ratio (Neyman–Pearson) test.

Finding.  Theorem 3.3 as printed (Thudi et al. 2024; 2022 Thm 2), `precision_bound(...,
form="printed")`, fails this check for δ > 0 and p < 1: its proof sums P(H(D) ∈ S)·P(D) over
D ∋ x*, which is P(S, x* ∈ D) = p·s, and then calls it P(S | x*) = s.  Kept as p·s, the δ-term is
δ·e^-ε·(1−p)/(p·s): the library's default form="derived", which these mechanisms touch and never
exceed.  Smallest case: randomized response with ε = ln 3 is (0, 1/2)-DP; at p = 1/4 the attack
"output is 1" has s = 3/4 and precision 1/2, while the printed U(0, δ=1/2, p=1/4, s=3/4) =
1/(1 + 3 − 1/2) = 2/7 (derived: 1/(1 + 3·(1 − 2/3)) = 1/2).

For the sweep: `mechanism_for(ε, δ)` picks the exact mechanism for a grid cell,
`release_membership` is its one release on the pool, and `describe` / `from_description` turn it
into JSON-safe metadata and back.  The least bound over a mechanism's whole profile, the check
itself, is `sweeper.bounds.proven.tightest_bound`: the bounds stay with the bounds, and this module
(work inside a task) never imports the orchestration above it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Union

import numpy as np
from scipy.optimize import brentq
from scipy.special import erf, log_ndtr, ndtr
from scipy.stats import norm

from jobs.metrics import ppv

__all__ = ["RandomizedResponse", "GaussianMechanism", "Mechanism", "MembershipRelease",
           "gaussian_delta", "mechanism_for", "describe", "from_description", "precision_at", "release_membership"]


def _checked(name, value, low, high, *, low_open=False, high_open=False) -> np.ndarray:
    a = np.asarray(value, dtype=float)
    below = (a <= low) if low_open else (a < low)
    above = (a >= high) if high_open else (a > high)
    bad = np.isnan(a) | below | above
    if np.any(bad):
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        raise ValueError(f"{name} must lie in {interval}; got {name}={a[bad].flat[0]:g}")
    return a


def _out(values, scalar: bool):
    return float(values) if scalar else values


def _bits(members) -> np.ndarray:
    b = np.asarray(members)
    if b.dtype != bool and not np.all((b == 0) | (b == 1)):
        raise ValueError("members must be booleans (or 0/1): True = the record was trained on")
    return b.astype(bool)


class RandomizedResponse:
    """Release b with probability e^ε/(1 + e^ε), else 1 − b: exactly ε-DP, no slack anywhere."""

    def __init__(self, epsilon: float):
        self.epsilon = float(_checked("epsilon", epsilon, 0.0, math.inf))
        self.keep = 1.0 / (1.0 + math.exp(-self.epsilon))  # e^ε/(1+e^ε), = 1 at ε = ∞

    def release(self, members, rng: np.random.Generator) -> np.ndarray:
        b = _bits(members)
        return np.where(rng.random(b.shape) < self.keep, b, ~b).astype(float)

    def rates(self, threshold):
        """Outputs are 0 or 1: t ≤ 0 accepts all, 0 < t ≤ 1 accepts the output 1, t > 1 nothing."""
        t = _checked("threshold", threshold, -math.inf, math.inf)
        tpr = np.where(t <= 0.0, 1.0, np.where(t <= 1.0, self.keep, 0.0))
        fpr = np.where(t <= 0.0, 1.0, np.where(t <= 1.0, 1.0 - self.keep, 0.0))
        return _out(tpr, t.ndim == 0), _out(fpr, t.ndim == 0)

    def delta_at(self, epsilon_prime):
        """max_S P[M(1)∈S] − e^ε'·P[M(0)∈S] is attained at S = {1}: q − e^ε'(1−q) = q(1 − e^(ε'−ε)).

        (S = {0} gives 1 − q − e^ε'·q ≤ 0, S = {0, 1} gives 1 − e^ε' ≤ 0; swapping b is symmetric.)
        """
        e = _checked("epsilon_prime", epsilon_prime, 0.0, math.inf)
        with np.errstate(all="ignore"):
            d = np.where(e < self.epsilon, -self.keep * np.expm1(e - self.epsilon), 0.0)
        return _out(d, e.ndim == 0)

    def tight_epsilon(self, tpr):
        """ln of the likelihood ratio at the (randomized) LR test with this TPR, clipped at 0.

        TPR ≤ q: accept (part of) the output 1, ratio e^ε; above q the output 0 is accepted too,
        ratio e^-ε, clipped to 0.  See `sweeper.bounds.proven.tightest_bound` for why this is
        the optimal ε'.
        """
        s = _checked("tpr", tpr, 0.0, 1.0)
        return _out(np.where(s <= self.keep, self.epsilon, 0.0), s.ndim == 0)


class GaussianMechanism:
    """Release b·μ + N(0, 1): μ-GDP, whose exact profile is Balle & Wang's (2018, Thm 8)."""

    def __init__(self, mu: float):
        self.mu = float(_checked("mu", mu, 0.0, math.inf, low_open=True, high_open=True))

    @classmethod
    def calibrated(cls, epsilon: float, delta: float) -> "GaussianMechanism":
        """The smallest μ whose mechanism is (ε, δ)-DP: the root of δ(ε; μ) = δ.

        δ(ε; μ) rises with μ from 0 (μ → 0) to 1 (μ → ∞), so the root is unique.  Bracket: δ(ε; μ)
        falls with ε, so μ0 = 2Φ⁻¹((1+δ)/2), the root at ε = 0, has δ(ε; μ0) ≤ δ (lower end);
        the upper end doubles from there until δ(ε; ·) ≥ δ, which must happen as δ(ε; ∞) = 1.
        """
        eps = float(_checked("epsilon", epsilon, 0.0, math.inf, high_open=True))
        d = float(_checked("delta", delta, 0.0, 1.0, low_open=True, high_open=True))
        gap = lambda mu: gaussian_delta(eps, mu) - d  # noqa: E731
        low = 2.0 * float(norm.isf((1.0 - d) / 2.0))
        if eps == 0.0 or gap(low) >= 0.0:
            return cls(low)
        high = max(2.0 * low, 1.0)
        while gap(high) < 0.0:
            high *= 2.0
        return cls(brentq(gap, low, high, xtol=1e-15, rtol=1e-15, maxiter=500))

    def release(self, members, rng: np.random.Generator) -> np.ndarray:
        b = _bits(members)
        return b * self.mu + rng.standard_normal(b.shape)

    def rates(self, threshold):
        t = _checked("threshold", threshold, -math.inf, math.inf)
        return _out(norm.sf(t - self.mu), t.ndim == 0), _out(norm.sf(t), t.ndim == 0)

    def delta_at(self, epsilon_prime):
        e = _checked("epsilon_prime", epsilon_prime, 0.0, math.inf)
        return _out(_gaussian_delta(e, self.mu), e.ndim == 0)

    def tight_epsilon(self, tpr):
        """ε' = μt − μ²/2 at the threshold t = μ − Φ⁻¹(TPR): the log likelihood ratio there, ≥ 0."""
        s = _checked("tpr", tpr, 0.0, 1.0)
        with np.errstate(all="ignore"):
            e = self.mu ** 2 / 2.0 - self.mu * norm.ppf(s)
        return _out(np.maximum(e, 0.0), s.ndim == 0)


def gaussian_delta(epsilon: float, mu: float) -> float:
    """`GaussianMechanism(mu).delta_at(epsilon)` at one ε, its arguments unchecked: what root
    finders call in their loops.  `_gaussian_delta`'s arithmetic, the same numpy and scipy
    functions on the one branch its ε takes (bit for bit its value, in a quarter of the time:
    no mechanism built and checked, no array operations)."""
    eps = float(epsilon)
    if math.isinf(eps):
        return 0.0
    a = -eps / mu + mu / 2.0
    b = a - mu
    if a <= 0.0:
        mass = ndtr(a) - ndtr(b)
    elif b >= 0.0:
        mass = ndtr(-b) - ndtr(-a)
    else:
        mass = (erf(a / math.sqrt(2.0)) - erf(b / math.sqrt(2.0))) / 2.0
    with np.errstate(all="ignore"):  # log(e^0 − 1) = −∞ at ε = 0; e^x may overflow at large μ
        d = mass - np.exp(eps + np.log(-np.expm1(-eps)) + log_ndtr(b))
    return float(min(max(d, 0.0), 1.0))


def _gaussian_delta(eps: np.ndarray, mu: float) -> np.ndarray:
    """Φ(a) − e^ε·Φ(a − μ), a = −ε/μ + μ/2, written as [Φ(a) − Φ(a − μ)] − (e^ε − 1)·Φ(a − μ).

    The first bracket is an interval's mass, taken from whichever tail avoids cancellation (via
    erf when the interval straddles 0), so tiny μ keeps its relative accuracy (at ε = 0 it is
    δ = 2Φ(μ/2) − 1 exactly); the second term is taken in logs so that e^ε never overflows.
    """
    with np.errstate(all="ignore"):
        a = -eps / mu + mu / 2.0
        b = a - mu
        straddle = (erf(a / math.sqrt(2.0)) - erf(b / math.sqrt(2.0))) / 2.0
        mass = np.where(a <= 0.0, ndtr(a) - ndtr(b),
                        np.where(b >= 0.0, ndtr(-b) - ndtr(-a), straddle))
        d = mass - np.exp(eps + np.log(-np.expm1(-eps)) + log_ndtr(b))
    return np.clip(np.where(np.isinf(eps), 0.0, d), 0.0, 1.0)


def precision_at(mechanism, threshold, p):
    """P(member | output ≥ t) by Bayes with prior p; NaN where the attack never fires."""
    tpr, fpr = mechanism.rates(threshold)
    prior = _checked("p", p, 0.0, 1.0)
    return _out(ppv(tpr, fpr, prior), np.ndim(threshold) == 0 and prior.ndim == 0)


Mechanism = Union[RandomizedResponse, GaussianMechanism]


def mechanism_for(epsilon: float, delta: float) -> Mechanism:
    """The exact mechanism for an (ε, δ) cell: randomized response if δ = 0 or ε = ∞, else the
    Gaussian mechanism calibrated to be exactly (ε, δ)-DP (`GaussianMechanism.calibrated`).

    Why.  δ = 0 needs a pure-DP mechanism: the Gaussian's profile δ(ε'; μ) is positive for every
    finite ε', so no μ makes it (ε, 0)-DP, while randomized response is exactly ε-DP and meets U at
    δ = 0 with equality.  ε = ∞ has no Gaussian calibration (μ → ∞); randomized response at ε = ∞
    releases the bit itself, the non-private extreme.  For δ > 0 the Gaussian spends the whole
    (ε, δ) budget, so its likelihood-ratio tests probe U's δ-term (randomized response would
    ignore δ).
    """
    eps = float(_checked("epsilon", epsilon, 0.0, math.inf))
    d = float(_checked("delta", delta, 0.0, 1.0, high_open=True))
    if d == 0.0 or eps == math.inf:
        return RandomizedResponse(eps)
    return GaussianMechanism.calibrated(eps, d)


def _json_number(value: float) -> Union[float, str]:
    return "inf" if value == math.inf else float(value)


def describe(mechanism: Mechanism) -> dict[str, Any]:
    """A JSON-safe description, kind + parameters: {"kind": "randomized_response", "epsilon": ε}
    or {"kind": "gaussian", "mu": μ}; ε = ∞ is written as the string "inf" (plain JSON has no ∞).
    `from_description` inverts it exactly (floats survive JSON's shortest repr)."""
    if isinstance(mechanism, RandomizedResponse):
        return {"kind": "randomized_response", "epsilon": _json_number(mechanism.epsilon)}
    if isinstance(mechanism, GaussianMechanism):
        return {"kind": "gaussian", "mu": float(mechanism.mu)}
    raise ValueError(f"mechanism must be a RandomizedResponse or a GaussianMechanism; "
                     f"got mechanism={mechanism!r}")


_KINDS: dict[str, tuple[type[RandomizedResponse] | type[GaussianMechanism], str]] = {
    "randomized_response": (RandomizedResponse, "epsilon"), "gaussian": (GaussianMechanism, "mu")}


def from_description(description: dict[str, Any]) -> Mechanism:
    """The mechanism `describe` described; "inf" (or ∞) is read as ∞.  Anything else → ValueError."""
    if not isinstance(description, dict) or description.get("kind") not in _KINDS:
        kind = description.get("kind") if isinstance(description, dict) else description
        raise ValueError(f"kind must be one of {', '.join(map(repr, _KINDS))}; got kind={kind!r}")
    cls, name = _KINDS[description["kind"]]
    if set(description) != {"kind", name}:
        raise ValueError(f"a {description['kind']} description has exactly the keys 'kind' and "
                         f"{name!r}; got {sorted(description)}")
    value = description[name]
    if isinstance(value, str) and value == "inf":
        return cls(math.inf)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number or 'inf'; got {name}={value!r}")
    return cls(float(value))


@dataclass(frozen=True)
class MembershipRelease:
    """What an exact mechanism publishes about a pool: one output per record, nothing trained.

    Why its own type.  The store, the attack tasks and the results rows read a model's pool
    outputs and a few figures; a release has the outputs and the figures that apply to it (the ε
    it was built for, its noise, how many records were members) and no weights, test set or steps.
    """

    outputs: np.ndarray  # (pool,) float: the release on every pool record
    epsilon: float  # the ε it spends is the ε it was built for
    noise_multiplier: float  # 1/μ for the Gaussian mechanism, NaN for randomized response
    members: int  # pool records whose bit was 1

    @property
    def pool_logits(self) -> np.ndarray:
        """The outputs as a (pool, 1) float32 column, the shape a network's logits are stored in,
        so the attack tasks read a release exactly as they read a model."""
        return np.asarray(self.outputs, np.float32)[:, None]


def release_membership(mechanism: Mechanism, epsilon: float, mask: np.ndarray,
                       seed: int) -> MembershipRelease:
    """The mechanism's release on every pool record (`mask`: who was a member), with `seed`."""
    outputs = mechanism.release(mask, np.random.default_rng(seed))
    noise = 1.0 / mechanism.mu if isinstance(mechanism, GaussianMechanism) else math.nan
    return MembershipRelease(outputs=np.asarray(outputs, float), epsilon=float(epsilon),
                             noise_multiplier=noise, members=int(np.sum(mask)))
