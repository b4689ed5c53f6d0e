"""The upper side of an audit: DP-SGD's whole privacy profile δ(ε′), and the least Thudi bound
over it (`bound_profile`).

Why.  A training is (ε′, δ(ε′))-DP for every ε′ at once, not only at the (ε, δ) its noise was
calibrated to; every U(ε′, p, δ(ε′), s) holds, so the least of them is the tightest bound the
training's own accounting supports.  At q = 1 DP-SGD is exactly a Gaussian mechanism; below,
Opacus's PRV accountant gives δ(ε′), read as an upper bound so the bound stays valid.  Opacus,
jobs.audits.mechanisms and jobs.engine.accounting are imported inside the functions: the
package stays NumPy-only.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from sweeper.bounds._checks import ArrayLike, Result, check, check_prob, out
from sweeper.bounds._checks import check_counts
from sweeper.bounds.proven import PrivacyProfile, tightest_bound

__all__ = ["dpsgd_privacy_profile", "bound_profile"]


class _PrvProfile:
    """Poisson-subsampled DP-SGD's privacy profile from Opacus's PRV accountant, as an upper bound.

    Gopi, Lee & Wutschitz (2021) bound the error of the discretized privacy loss Y (the domain
    and mesh chosen as Opacus's PRVAccountant does for these errors): the true δ(ε') is at most
    δ̂(ε' − eps_error) + delta_error, δ̂(ε) = E[(1 − e^(ε−Y))₊] on the grid.  That upper side is
    what `delta_at` returns, so a bound taken from it stays valid.  Opacus's PRV is the
    remove-direction pair (the subsampled mixture against N(0, σ²)), the one its accountant
    certifies.
    """

    def __init__(self, noise_multiplier: float, sample_rate: float, steps: int,
                 eps_error: float, delta_error: float):
        from opacus.accountants.analysis.prv import (Domain, PoissonSubsampledGaussianPRV,
                                                     TruncatedPrivacyRandomVariable,
                                                     compose_heterogeneous, discretize)

        from jobs.engine.accounting import prv_safe_domain_size

        prv = PoissonSubsampledGaussianPRV(sample_rate, noise_multiplier)
        size = prv_safe_domain_size(noise_multiplier, sample_rate, steps, eps_error, delta_error)
        mesh = eps_error / math.sqrt(steps * math.log(12.0 / delta_error) / 2.0)
        domain = Domain.create_aligned(-size, size, mesh)
        with np.errstate(divide="ignore"):  # Opacus takes log(1 − q) = −∞ at q = 1
            single = discretize(TruncatedPrivacyRandomVariable(prv, domain.t_min, domain.t_max),
                                domain)
        loss = compose_heterogeneous(dprvs=[single], num_self_compositions=[steps])
        pmf = np.clip(loss.pmf, 0.0, None)  # FFT round-off; dropping it only raises δ̂
        self.eps_error, self.delta_error = eps_error, delta_error
        self._t = np.asarray(loss.domain.ts, float)
        self._tail = np.cumsum(pmf[::-1])[::-1]  # P[Y ≥ t_i]: the LR test's TPR at t_i
        self._weighted = np.cumsum((pmf * np.exp(-self._t))[::-1])[::-1]  # E[e^-Y; Y ≥ t_i]

    def delta_at(self, epsilon_prime):
        e = check("epsilon_prime", epsilon_prime, 0.0, math.inf) - self.eps_error
        i = np.searchsorted(self._t, e, side="left")
        j = np.minimum(i, self._t.size - 1)
        inside = self._tail[j] - np.exp(np.minimum(e, self._t[-1])) * self._weighted[j]
        d = np.where(i < self._t.size, inside, 0.0) + self.delta_error
        return out(np.clip(d, 0.0, 1.0), np.ndim(epsilon_prime) == 0)

    def tight_epsilon(self, tpr):
        """The threshold where the LR test "Y ≥ t" has TPR `tpr`, shifted like `delta_at`."""
        s = check_prob("tpr", tpr)
        i = np.searchsorted(-self._tail, -s, side="right") - 1  # last t with P[Y ≥ t] ≥ s
        e = np.where(i >= 0, self._t[np.maximum(i, 0)] + self.eps_error, 0.0)
        return out(np.maximum(e, 0.0), np.ndim(tpr) == 0)


@functools.lru_cache(maxsize=1024)
def _dpsgd_profile(noise_multiplier: float, sample_rate: float, steps: int, eps_error: float,
                   delta_error: float) -> PrivacyProfile:
    if sample_rate == 1.0:
        from jobs.audits.mechanisms import GaussianMechanism

        return GaussianMechanism(math.sqrt(steps) / noise_multiplier)
    return _PrvProfile(noise_multiplier, sample_rate, steps, eps_error, delta_error)


def dpsgd_privacy_profile(noise_multiplier: float, sample_rate: float, steps: int, *,
                          eps_error: float = 0.01, delta_error: float = 1e-10) -> PrivacyProfile:
    """DP-SGD's whole privacy profile δ(ε'), as `tightest_bound` reads it (`PrivacyProfile`).

    q = 1 is exactly the Gaussian mechanism with μ = √steps/σ (full batches: `steps` Gaussian
    releases of sensitivity 1 compose to μ-GDP), jobs.audits.mechanisms' closed form.  q < 1: Opacus's
    PRV accountant, made an upper bound on δ (`_PrvProfile`; `eps_error`, `delta_error` are its
    accuracy).  Cached per (σ, q, steps).
    """
    sigma = float(check("noise_multiplier", noise_multiplier, 0.0, math.inf, low_open=True,
                        high_open=True))
    q = float(check("sample_rate", sample_rate, 0.0, 1.0, low_open=True))
    count = check_counts("steps", steps)
    if count < 1:
        raise ValueError(f"steps must be at least 1; got steps={float(count):g}")
    eps_err = float(check("eps_error", eps_error, 0.0, 1.0, low_open=True))
    delta_err = float(check("delta_error", delta_error, 0.0, 1.0, low_open=True, high_open=True))
    return _dpsgd_profile(sigma, q, int(count), eps_err, delta_err)


def bound_profile(noise_multiplier: float, sample_rate: float, steps: int, p: ArrayLike,
                  tpr: ArrayLike, *, form: str = "derived") -> Result:
    """The least Thudi bound over DP-SGD's whole privacy profile: `tightest_bound` of
    `dpsgd_privacy_profile(σ, q, steps)` at (p, tpr), broadcasting over both.

    The training is (ε', δ(ε'))-DP for every ε' at once, so every U(ε', p, δ(ε'), s) holds and
    the least is the tightest; it is ≤ U at the (ε, δ) the noise was calibrated to.
    """
    return tightest_bound(dpsgd_privacy_profile(noise_multiplier, sample_rate, steps), p, tpr,
                          form=form)
