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
from typing import Optional, Protocol


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


@functools.lru_cache(maxsize=256)
def _search_noise(epsilon: float, delta: Optional[float], sample_rate: float, steps: int,
                  accountant: str) -> float:
    from opacus.accountants.utils import get_noise_multiplier

    if accountant == "rdp" and delta and epsilon <= rdp_epsilon_floor(delta):
        raise ValueError(f"The privacy budget is too low: RDP certifies no ε below "
                         f"{rdp_epsilon_floor(delta):.4g} at δ={delta:g}, whatever the noise "
                         f"(asked ε={epsilon:g})")
    return float(get_noise_multiplier(
        target_epsilon=epsilon, target_delta=delta, sample_rate=sample_rate, steps=steps,
        accountant=accountant, epsilon_tolerance=min(0.01, 0.001 * epsilon),
        **_accountant_options(accountant)))


@functools.lru_cache(maxsize=1024)
def epsilon_of_history(accountant: str, delta: Optional[float], history: tuple) -> float:
    """The ε an accountant with this history (its (σ, q, steps) entries) has spent: the same
    for every model trained at one (σ, q) for as many steps, and a fraction of a second of
    Python each (most of a small model's task), so it is computed once per process."""
    from opacus.accountants import create_accountant

    replay = create_accountant(accountant)
    replay.history = [tuple(entry) for entry in history]
    return float(replay.get_epsilon(delta=delta, **_accountant_options(accountant)))
