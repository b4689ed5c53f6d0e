"""`python -m bench.calibration`: does a PPV-calibrated threshold accept anyone on the target?

Jayaraman et al.'s protocol (`purchase100_ppv`, `texas100_ppv`) calibrates the threshold on 4
holdout (shadow) models at p = 0.5 for the highest PPV, then applies it to the target at
p = 1/(1 + γ).  This simulates it with a strong attack (member scores N(`--shift`, 1), non-member
scores N(0, 1)) on `--records` evaluation records and prints, per γ, the median number of target
records accepted, the share of runs whose target precision is NaN (nobody accepted), and the
median precision.  When the top holdout scores are all members, a rule that keeps the strictest
of the thresholds tied at PPV 1 accepts one holdout record and nobody on the target.

To see the rule before the fix, run this file against an older checkout's `jobs` package:
`PYTHONPATH=/path/to/old/checkout python bench/calibration.py` (as a file, so that this checkout
does not shadow the old one).
"""

from __future__ import annotations

import argparse
import dataclasses
import math

import numpy as np

from jobs.policies import CalibrationSettings, calibrated_point, calibrated_thresholds

GAMMAS = (0.1, 0.5, 1.0, 2.0, 10.0)


def simulate(gamma: float, runs: int, records: int, holdouts: int, shift: float,
             settings: CalibrationSettings, seed: int) -> tuple[float, float, float]:
    """(median accepted on the target, share of NaN precisions, median precision) over `runs`."""
    rng = np.random.default_rng(seed)
    prior = 1.0 / (1.0 + gamma)
    labels = np.zeros(records, dtype=int)
    accepted, precisions = [], []
    for _ in range(runs):
        holdout_members = rng.random((holdouts, records)) < 0.5
        holdout = rng.normal(size=(holdouts, records)) + shift * holdout_members
        members = rng.random(records) < prior
        scores = rng.normal(size=records) + shift * members
        thresholds = calibrated_thresholds(holdout, holdout_members, labels, prior, 1, settings)
        point = calibrated_point(scores, members, labels, thresholds)
        accepted.append(point.tp + point.fp)
        precisions.append(point.precision)
    values = np.array(precisions)
    scored = values[~np.isnan(values)]
    return (float(np.median(accepted)), float(np.isnan(values).mean()),
            float(np.median(scored)) if len(scored) else math.nan)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.calibration",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="simulated sweeps per γ (default 200)")
    parser.add_argument("--records", type=int, default=1000,
                        help="evaluation records per model (default 1000)")
    parser.add_argument("--holdouts", type=int, default=4, help="holdout models (default 4)")
    parser.add_argument("--shift", type=float, default=3.0,
                        help="member score mean, non-members at 0, both with sd 1 (default 3)")
    parser.add_argument("--min-tpr", type=float, default=None,
                        help="calibration.min_tpr (default: the config default)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    settings = CalibrationSettings(objective="ppv")
    if args.min_tpr is not None:
        settings = dataclasses.replace(settings, min_tpr=args.min_tpr)
    print(f"calibrated, objective=ppv: {args.holdouts} holdout models x {args.records} records, "
          f"member scores N({args.shift:g}, 1); {args.runs} runs per γ; {settings}")
    print(f"{'γ':>5} {'p':>6} {'accepted (median)':>18} {'NaN precision':>14} {'precision (median)':>19}")
    for gamma in GAMMAS:
        accepted, nan_share, precision = simulate(gamma, args.runs, args.records, args.holdouts,
                                                  args.shift, settings, args.seed)
        print(f"{gamma:>5g} {1 / (1 + gamma):>6.3f} {accepted:>18g} {nan_share:>13.0%} "
              f"{precision:>19.3f}")


if __name__ == "__main__":
    main()
