"""`python -m bench.accounting`: what the noise search and the audits' inner loops cost, ours
against the reference each replaces, interleaved in one process.

- The PRV noise search (`train.accountant=prv`): `jobs.engine.accounting._search_noise` against
  Opacus's `get_noise_multiplier(accountant="prv")`, the same σ asked of both (and checked equal).
- One call of each audit inner loop's function: `gaussian_delta` against
  `GaussianMechanism(μ).delta_at`, `scipy.special.betaincinv` against `scipy.stats.beta.ppf`
  (Clopper–Pearson's ends), and the last iterate's numpy log-sum-exp against scipy's
  `logsumexp`.

Each figure is the median of `--repeat` runs, old and new alternating, as CPU seconds of this
process (`time.process_time`): compare the ratios, not the absolute times across machines.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
import warnings
from typing import Callable

import numpy as np


def median_cpu(before: Callable[[], object], now: Callable[[], object], repeat: int,
               calls: int = 1) -> tuple[float, float]:
    """Median CPU seconds a call of each of the two, alternating run by run."""
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeat):
        for side, work in enumerate((before, now)):
            start = time.process_time()
            for _ in range(calls):
                work()
            times[side].append((time.process_time() - start) / calls)
    return statistics.median(times[0]), statistics.median(times[1])


def noise_search(epsilon: float, sample_rate: float, steps: int, delta: float,
                 repeat: int) -> tuple[float, float]:
    from opacus.accountants.utils import get_noise_multiplier

    from jobs.engine.accounting import _search_noise

    tolerance = min(0.01, 0.001 * epsilon)
    found: dict[str, float] = {}

    def theirs() -> None:
        found["Opacus"] = get_noise_multiplier(
            target_epsilon=epsilon, target_delta=delta, sample_rate=sample_rate, steps=steps,
            accountant="prv", epsilon_tolerance=tolerance)

    def ours() -> None:
        found["ours"] = _search_noise.__wrapped__(epsilon, delta, sample_rate, steps, "prv")

    times = median_cpu(theirs, ours, repeat)
    if found["ours"] != found["Opacus"]:
        raise SystemExit(f"the searches disagree: σ = {found['ours']!r} here, "
                         f"{found['Opacus']!r} by Opacus")
    return times


def inner_loops(repeat: int, calls: int) -> dict[str, tuple[float, float]]:
    from scipy.special import betaincinv, logsumexp
    from scipy.stats import beta

    from jobs.audits.mechanisms import GaussianMechanism, gaussian_delta
    from sweeper.bounds.last_iterate import _log_sum_exp

    values = np.random.default_rng(0).normal(size=64)
    return {
        "Gaussian profile at one ε": median_cpu(
            lambda: float(GaussianMechanism(1.3).delta_at(0.7)), lambda: gaussian_delta(0.7, 1.3),
            repeat, calls),
        "Clopper–Pearson end": median_cpu(
            lambda: float(beta.ppf(0.01, 5, 100)), lambda: float(betaincinv(5, 100, 0.01)),
            repeat, calls),
        "log-sum-exp of 64": median_cpu(
            lambda: float(logsumexp(values)), lambda: _log_sum_exp(values), repeat, calls),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.accounting", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epsilon", type=float, default=4.0)
    parser.add_argument("--sample-rate", type=float, default=0.25)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each, alternating")
    parser.add_argument("--calls", type=int, default=2000,
                        help="calls a run of each inner-loop function")
    args = parser.parse_args(argv)
    if args.repeat < 1 or args.calls < 1 or args.steps < 1:
        parser.error("--repeat, --calls and --steps must be at least 1")
    warnings.simplefilter("ignore", UserWarning)  # Opacus: "optimal order is the largest alpha"
    theirs, ours = noise_search(args.epsilon, args.sample_rate, args.steps, args.delta,
                                args.repeat)
    print(f"PRV noise search, ε={args.epsilon:g} q={args.sample_rate:g} T={args.steps} "
          f"δ={args.delta:g} (same σ): Opacus {theirs:.2f} CPU-s, ours {ours:.2f} CPU-s, "
          f"{theirs / ours:.1f}×")
    for name, (old, new) in inner_loops(args.repeat, args.calls).items():
        print(f"{name}: before {old * 1e6:.1f} µs, now {new * 1e6:.1f} µs, "
              f"{old / new if new > 0 else math.inf:.1f}×")
    return 0


if __name__ == "__main__":
    sys.exit(main())
