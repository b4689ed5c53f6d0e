"""DP-SGD's accounting: Poisson sampling's schedule, the noise that spends a target (ε, δ) over
the steps taken, and the ε a history of steps has spent — Opacus's accountants, used so that
the answer errs on the private side.

Kept apart from `jobs.engine.training` (the steps themselves): what an accountant is told, and how the
noise is searched, is what an audit of the engine checks (`tests/test_jobs/engine/test_accounting.py`,
`tests/test_sweeper/bounds/test_dp_audit.py`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable, Optional, Protocol, Sequence

import numpy as np
from scipy import special


class Recipe(Protocol):
    """What calibration reads of a training recipe (`jobs.engine.training.TrainSettings` is one)."""

    @property
    def epsilon(self) -> float: ...

    @property
    def delta(self) -> Optional[float]: ...

    @property
    def epochs(self) -> int: ...

    @property
    def accountant(self) -> str: ...


class NoiseCache(Protocol):
    """Where calibrated noise multipliers are kept across tasks (the artifact store provides one)."""

    def get(self, key: str) -> Optional[float]: ...

    def put(self, key: str, value: float) -> None: ...


#: RDP orders: Opacus's defaults stop at 63, where the conversion to (ε, δ) alone costs ≈ 0.103 at
#: δ = 1e-5, so smaller ε (Jayaraman et al.'s ε = 0.1) could never be reached.
RDP_ORDERS = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)) + [
    64, 80, 96, 128, 160, 192, 256, 320, 384, 512, 768, 1024, 1536, 2048]


def _accountant_options(accountant: str) -> dict:
    return {"alphas": RDP_ORDERS} if accountant == "rdp" else {}


@dataclass(frozen=True)
class PoissonSchedule:
    """Opacus's Poisson sampling for a training set of `size` records at expected `batch_size`:
    rate q = 1/⌈size/batch⌉, 1/q steps an epoch, gradients divided by int(size·q).

    `size` is the public size q comes from (`rate_size`), not necessarily the records trained
    on: from the private |D|, an added record can change q and the divisor (Opacus #571, #819).
    """

    size: int
    batch_size: int

    @property
    def steps_per_epoch(self) -> int:
        return max(1, math.ceil(self.size / self.batch_size))

    @property
    def sample_rate(self) -> float:
        return 1.0 / self.steps_per_epoch

    @property
    def expected_batch_size(self) -> int:
        return max(1, int(self.size * self.sample_rate))


def rate_size(private_size: int, public_size: Optional[int]) -> int:
    """The size DP-SGD's rate and divisor come from: the declared public size, else the
    private |D| (Opacus's rule, whose q depends on the data it protects)."""
    return private_size if public_size is None else public_size


#: Accountants the noise may be calibrated with: GDP's CLT under-states subsampled DP-SGD's ε
#: (tests/test_jobs/engine/test_accounting.py measures it overspending), so it is refused here, not only by the config.
CALIBRATING_ACCOUNTANTS = ("rdp", "prv")


def training_steps(epochs: int, sample_rate: float) -> int:
    """The steps training takes: `epochs` of 1/q steps each (q = 1/⌈|D|/batch⌉ exactly)."""
    return int(epochs) * round(1.0 / sample_rate)


def calibrate_noise(settings: Recipe, sample_rate: float,
                    cache: Optional[NoiseCache] = None) -> float:
    """The noise multiplier that spends exactly the target (ε, δ) over the training's steps.

    Opacus's search on the exact step count (its `epochs=` path counts int(epochs/q) steps,
    one short when float division rounds down), with the wider RDP orders and a tolerance
    relative to ε (its default 0.01 is 10 % of ε = 0.1); the answer errs on the private side
    (spent ε ≤ target).  Only a handful of distinct (ε, δ, q, steps, accountant) occur in a
    sweep, so the answer is kept in this process and in `cache` (the store), and each is
    searched once.  Raises ValueError for an accountant outside `CALIBRATING_ACCOUNTANTS`.
    """
    if settings.accountant not in CALIBRATING_ACCOUNTANTS:
        raise ValueError(f"noise cannot be calibrated with accountant {settings.accountant!r}: "
                         f"use one of {', '.join(CALIBRATING_ACCOUNTANTS)} (GDP under-states "
                         "subsampled DP-SGD's ε)")
    args = (float(settings.epsilon), settings.delta, float(sample_rate),
            training_steps(settings.epochs, sample_rate), settings.accountant)
    key = "noise-steps-" + "-".join(repr(a) for a in args)
    cached = cache.get(key) if cache is not None else None
    if cached is not None:
        return float(cached)
    sigma = _search_noise(*args)
    if cache is not None:
        cache.put(key, sigma)
    return sigma


def rdp_epsilon_floor(delta: float, orders=tuple(RDP_ORDERS)) -> float:
    """A floor under every ε the RDP accountant certifies at δ, whatever the noise: its RDP →
    (ε, δ) conversion (Opacus's `get_privacy_spent`) with every order's RDP at 0 (σ → ∞).  An
    ε at or below it is refused at once, where Opacus's search would double σ up to 10⁶ first
    (≈ 35 s of ever slower RDP sums) to raise the same error."""
    return min(math.log((a - 1) / a) - (math.log(delta) + math.log(a)) / (a - 1) for a in orders)


#: Opacus's `get_noise_multiplier`: the first upper bracket is twice this, and the search gives
#: up with its "The privacy budget is too low." once σ passes `MAX_SIGMA`.
FIRST_SIGMA, MAX_SIGMA = 10, 1e6


@functools.lru_cache(maxsize=256)
def _search_noise(epsilon: float, delta: Optional[float], sample_rate: float, steps: int,
                  accountant: str) -> float:
    from opacus.accountants.utils import get_noise_multiplier

    tolerance = min(0.01, 0.001 * epsilon)
    if accountant == "rdp" and delta:
        if epsilon <= rdp_epsilon_floor(delta):
            raise ValueError(f"The privacy budget is too low: RDP certifies no ε below "
                             f"{rdp_epsilon_floor(delta):.4g} at δ={delta:g}, whatever the noise "
                             f"(asked ε={epsilon:g})")
        # Opacus's own search, each ε of it summed by numpy (`rdp_epsilon`), then its answer
        # spent once by Opacus's accountant: kept only if Opacus's search would stop there too.
        sigma = bisect_noise(lambda s: rdp_epsilon(s, sample_rate, steps, delta),
                             epsilon, tolerance)
        spent = epsilon_of_history("rdp", delta, ((sigma, sample_rate, steps),))
        if spent <= epsilon and epsilon - spent <= tolerance:
            return sigma
    if accountant == "prv" and delta:
        # Likewise: each ε of Opacus's search through its PRV accountant's own steps, the
        # domain's RDP bounds summed by numpy (`prv_epsilon`), the answer checked by Opacus.
        sigma = bisect_noise(lambda s: prv_epsilon(s, sample_rate, steps, delta), epsilon,
                             tolerance)
        spent = epsilon_of_history("prv", delta, ((sigma, sample_rate, steps),))
        if spent <= epsilon and epsilon - spent <= tolerance:
            return sigma
    return float(get_noise_multiplier(
        target_epsilon=epsilon, target_delta=delta, sample_rate=sample_rate, steps=steps,
        accountant=accountant, epsilon_tolerance=tolerance, **_accountant_options(accountant)))


def bisect_noise(epsilon_at: Callable[[float], float], target: float, tolerance: float) -> float:
    """Opacus's `get_noise_multiplier` search step for step on `epsilon_at` (ε as a function
    of σ): σ doubled from 20 until ε ≤ target, then bisected until target − ε ≤ `tolerance`,
    the upper end returned.  The same ε gives the same σ, bit for bit."""
    low, high, spent = 0.0, float(FIRST_SIGMA), math.inf
    while spent > target:
        high *= 2
        spent = epsilon_at(high)
        if high > MAX_SIGMA:
            raise ValueError("The privacy budget is too low.")
    while target - spent > tolerance:
        middle = (low + high) / 2
        at_middle = epsilon_at(middle)
        if at_middle < target:
            high, spent = middle, at_middle
        else:
            low = middle
    return high


def rdp_epsilon(sigma: float, sample_rate: float, steps: int, delta: float,
                orders: Sequence[float] = tuple(RDP_ORDERS)) -> float:
    """The ε Opacus's RDP accountant certifies at δ after `steps` steps at (σ, q): its
    conversion (`get_privacy_spent`, Balle et al. 2020, Thm. 21) of `subsampled_gaussian_rdp`,
    the smallest over the orders; an order whose RDP overflows is left out, as Opacus's
    nan-skipping minimum does."""
    alphas = np.asarray(orders, dtype=float)
    rdp = subsampled_gaussian_rdp(sample_rate, sigma, alphas) * steps
    with np.errstate(invalid="ignore"):
        eps = rdp - (math.log(delta) + np.log(alphas)) / (alphas - 1) + np.log((alphas - 1) / alphas)
    eps = eps[~np.isnan(eps)]
    return float(eps.min()) if eps.size else math.inf


def prv_safe_domain_size(sigma: float, sample_rate: float, steps: int, eps_error: float,
                         delta_error: float) -> float:
    """Opacus's `compute_safe_domain_size` (Gopi et al. 2021, remark 5.6) for one (σ, q)
    composed `steps` times: the larger ε its RDP accountant certifies, over the steps at
    δ_error/4 and one step at δ_error/(8·steps), each summed by numpy (`rdp_epsilon` at the
    accountant's default orders) where Opacus sums one series term at a time in Python (most of
    a PRV ε's cost: 50-130 ms)."""
    from opacus.accountants import RDPAccountant

    orders = tuple(RDPAccountant.DEFAULT_ALPHAS)
    largest = max(rdp_epsilon(sigma, sample_rate, steps, delta_error / 4, orders),
                  rdp_epsilon(sigma, sample_rate, 1, delta_error / (8 * steps), orders))
    return max(largest, eps_error) + 3


def prv_epsilon(sigma: float, sample_rate: float, steps: int, delta: float,
                eps_error: float = 0.01) -> float:
    """The ε Opacus's PRV accountant certifies at δ after `steps` steps at (σ, q): its
    `get_epsilon` step for step (the domain, the truncated PRV discretized on it, its FFT
    composition, the upper end of ε at its default errors), the domain's size from
    `prv_safe_domain_size`."""
    from opacus.accountants.analysis.prv import (Domain, PoissonSubsampledGaussianPRV,
                                                 TruncatedPrivacyRandomVariable,
                                                 compose_heterogeneous, discretize)

    delta_error = delta / 1000
    size = prv_safe_domain_size(sigma, sample_rate, steps, eps_error, delta_error)
    mesh = eps_error / np.sqrt(steps * np.log(12 / delta_error) / 2)
    domain = Domain.create_aligned(-size, size, mesh)
    prv = PoissonSubsampledGaussianPRV(sample_rate, sigma)
    single = discretize(TruncatedPrivacyRandomVariable(prv, domain.t_min, domain.t_max), domain)
    loss = compose_heterogeneous(dprvs=[single], num_self_compositions=[steps])
    return float(loss.compute_epsilon(delta, delta_error, eps_error)[2])


def subsampled_gaussian_rdp(q: float, sigma: float, orders: np.ndarray) -> np.ndarray:
    """One step's RDP of the Poisson-subsampled Gaussian at every order at once: Opacus's
    `compute_rdp` (Mironov, Talwar & Zhang 2019, §3.3: log A_α / (α − 1)) term for term, with
    its series' stopping rule, summed by numpy instead of one term at a time in Python (the
    calibration's whole cost).  An order whose binomial overflows (α ≳ 1030) is ∞ here, ∞
    or nan in Opacus: no ε comes from it in either."""
    if q == 0:
        return np.zeros(len(orders))
    if sigma == 0:
        return np.full(len(orders), np.inf)
    if q == 1:
        return orders / (2 * sigma**2)
    whole = orders == np.floor(orders)
    log_a = np.empty(len(orders))
    log_a[whole] = _log_a_whole_orders(q, sigma, orders[whole].astype(np.int64))
    log_a[~whole] = _log_a_fractional_orders(q, sigma, orders[~whole])
    return log_a / (orders - 1)


def _log_a_whole_orders(q: float, sigma: float, orders: np.ndarray) -> np.ndarray:
    """log A_α for integer α: log Σ_{i≤α} C(α,i) q^i (1−q)^{α−i} e^{(i²−i)/2σ²}, every order's
    terms in one flat array (Opacus's `_compute_log_a_for_int_alpha`)."""
    counts = orders + 1
    starts = np.r_[0, np.cumsum(counts)[:-1]]
    alpha = np.repeat(orders, counts)
    i = np.arange(alpha.size) - np.repeat(starts, counts)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = (np.log(special.binom(alpha, i)) + i * math.log(q) + (alpha - i) * math.log(1 - q)
                 + (i * i - i) / (2 * sigma**2))
        peak = np.maximum.reduceat(terms, starts)
        log_a = peak + np.log(np.add.reduceat(np.exp(terms - np.repeat(peak, counts)), starts))
    return np.where(np.isfinite(peak), log_a, np.inf)


def _log_a_fractional_orders(q: float, sigma: float, orders: np.ndarray) -> np.ndarray:
    """log A_α for fractional α: Opacus's `_compute_log_a_for_frac_alpha` series (the integrals
    below and above z₀, signed binomial terms), each order's terms up to and including the
    first whose two parts are both under e^−30, taken in chunks of doubling length (up to
    thousands of terms at α near 1 and small σ) with a running log-sum-exp."""
    z0 = sigma**2 * math.log(1 / q - 1) + 0.5
    peak = np.full((2, len(orders)), -np.inf)
    total = np.zeros((2, len(orders)))
    active = np.arange(len(orders))
    start, size = 0, 64
    while active.size:
        i = np.arange(start, start + size, dtype=float)[None, :]
        alpha = orders[active][:, None]
        coef = special.binom(alpha, i)
        j = alpha - i
        # log(erfc(x)/2) is log_ndtr(−x√2): Opacus's 0.5·erfc((i − z₀)/(√2σ)), likewise for j.
        parts = (np.log(np.abs(coef)) + i * math.log(q) + j * math.log(1 - q)
                 + (i * i - i) / (2 * sigma**2) + special.log_ndtr((z0 - i) / sigma),
                 np.log(np.abs(coef)) + j * math.log(q) + i * math.log(1 - q)
                 + (j * j - j) / (2 * sigma**2) + special.log_ndtr((j - z0) / sigma))
        small = np.maximum(*parts) < -30
        ends = small.any(axis=1)
        last = np.where(ends, small.argmax(axis=1), size - 1)
        kept = np.arange(size)[None, :] <= last[:, None]
        sign = np.where(coef > 0, 1.0, -1.0)
        for k, part in enumerate(parts):
            part = np.where(kept, part, -np.inf)
            new_peak = np.maximum(peak[k, active], part.max(axis=1))
            total[k, active] = (total[k, active] * np.exp(peak[k, active] - new_peak)
                                + np.sum(np.where(kept, sign * np.exp(part - new_peak[:, None]), 0),
                                         axis=1))
            peak[k, active] = new_peak
        active = active[~ends]
        start, size = start + size, 2 * size
    with np.errstate(invalid="ignore"):
        return np.logaddexp(*(peak + np.log(total)))


@functools.lru_cache(maxsize=1024)
def epsilon_of_history(accountant: str, delta: Optional[float], history: tuple) -> float:
    """The ε an accountant with this history (its (σ, q, steps) entries) has spent: the same
    for every model trained at one (σ, q) for as many steps, and a fraction of a second of
    Python each (most of a small model's task), so it is computed once per process."""
    from opacus.accountants import create_accountant

    replay = create_accountant(accountant)
    replay.history = [tuple(entry) for entry in history]
    return float(replay.get_epsilon(delta=delta, **_accountant_options(accountant)))
