"""`python -m bench.sequential`: the models a sequential frontier trains against the fixed grid's.

Runs an experiment (the quickstart by default) twice into one store: first sequentially
(`sequential.enabled=true`, at most `--max-trials` trials a cell, the experiment's or the given
goal), then as the fixed grid of the same `--max-trials` trials.  The fixed run reuses every
model the sequential one trained (content keys), so the two are compared in models, never in
wall time.  Prints, per frontier cell, the sequential decision and the trial it came at, the
width of its anytime-valid interval there, whether it meets its goal, and the fixed grid's
Clopper–Pearson width at `--max-trials` trials; then "target models: N of M" (issue 49's target:
a sequential quickstart trains at most 60 % of the fixed grid's target models, every decided cell
meeting its goal).  `--no-fixed` skips the fixed run (M is then the fixed plan's count).

The sweeps land in `--store` (a temporary folder unless given); extra arguments are overrides
of both sweeps (`train.epochs=5`).
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence

import pandas as pd

KEYS = ["attack", "epsilon", "p"]


def compose(experiment: str, store: Path, name: str, max_trials: int, sequential: bool,
            overrides: Sequence[str]):
    """The sweep's config as `python -m sweeper +experiment=… overrides…` composes it."""
    from sweeper.checks.preflight import composed

    trials = ",".join(str(trial) for trial in range(max_trials))
    return composed([f"+experiment={experiment}", f"name={name}", f"store.root={store}",
                     "cluster.include_dashboard=false", f"grid.trial=[{trials}]",
                     f"sequential.enabled={str(sequential).lower()}",
                     *([f"sequential.max_trials={max_trials}"] if sequential else []),
                     *overrides])[0]


def goal_met(row: pd.Series, settings) -> bool:
    """Whether a decided cell's interval meets the goal its decision names."""
    low, high, bound = row["precision_ci_low"], row["precision_ci_high"], row["bound"]
    return {"width": high - low < settings.width, "below": high < bound - settings.margin,
            "violation": low > bound}.get(row["decision"], False)


def compared(sequential: pd.DataFrame, fixed: Optional[pd.DataFrame], settings) -> pd.DataFrame:
    """One row per frontier cell: the sequential decision, its trial and width, whether it meets
    its goal, and the fixed grid's width (NaN without a fixed run)."""
    from sweeper.frontier import summarize_frontier

    ours = summarize_frontier(sequential)
    ours = ours[ours["decision"] != "measure"].copy()
    ours["width"] = ours["precision_ci_high"] - ours["precision_ci_low"]
    ours["goal met"] = [goal_met(row, settings) if row["decision"] != "undecided" else False
                        for _, row in ours.iterrows()]
    if fixed is not None:
        theirs = summarize_frontier(fixed)
        theirs["fixed width"] = theirs["precision_ci_high"] - theirs["precision_ci_low"]
        ours = ours.merge(theirs[[*KEYS, "fixed width"]], on=KEYS, how="left")
    else:
        ours["fixed width"] = math.nan
    return ours[[*KEYS, "decision", "decided_at", "width", "goal met", "fixed width"]]


def table(rows: pd.DataFrame) -> str:
    """The rows as a markdown table (docs/sequential.md's)."""
    lines = ["| attack | ε | p | decision | at trial | width | goal met | fixed width |",
             "|---|---|---|---|---|---|---|---|"]
    for row in rows.to_dict("records"):
        at = "" if math.isnan(row["decided_at"]) else f"{row['decided_at']:.0f}"
        lines.append(f"| `{row['attack']}` | {row['epsilon']:g} | {row['p']:g} | {row['decision']} | "
                     f"{at} | {row['width']:.3f} | {'yes' if row['goal met'] else 'no'} | "
                     f"{row['fixed width']:.3f} |")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sequential", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--experiment", default="quickstart")
    parser.add_argument("--max-trials", type=int, default=4,
                        help="trials a cell may get, and the fixed grid's trials (default 4: the "
                             "quickstart's)")
    parser.add_argument("--store", type=Path, default=None,
                        help="the sweeps' store (default: temporary)")
    parser.add_argument("--no-fixed", action="store_true",
                        help="skip the fixed grid's run (its model count is the plan's)")
    parser.add_argument("overrides", nargs="*", help="overrides of both sweeps (key=value)")
    args = parser.parse_args(argv)
    from sweeper.grid.plan import build_plan
    from sweeper.grid.scale import scaled
    from sweeper.runner import run_sweep

    store = args.store or Path(tempfile.mkdtemp(prefix="bench_sequential_"))
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; store {store}")
    cfg = compose(args.experiment, store, f"{args.experiment}_sequential", args.max_trials, True,
                  args.overrides)
    started = time.perf_counter()
    sequential = run_sweep(cfg, progress=False)
    print(f"sequential sweep: {time.perf_counter() - started:.0f} s wall, load average "
          f"{os.getloadavg()[0]:.1f}")
    fixed_cfg = compose(args.experiment, store, f"{args.experiment}_fixed", args.max_trials, False,
                        args.overrides)
    fixed = None
    if not args.no_fixed:
        started = time.perf_counter()
        fixed = run_sweep(fixed_cfg, progress=False).results
        print(f"fixed sweep (reusing the sequential one's models): "
              f"{time.perf_counter() - started:.0f} s wall")
    plan = build_plan(scaled(fixed_cfg))
    targets = sum(spec.role == "target" for spec in plan.models.values())
    shadows = len(plan.models) - targets
    rows = compared(sequential.results, fixed, scaled(cfg).sequential)
    print()
    print(table(rows))
    used = sequential.sequential["models_used"] if sequential.sequential else 0
    decided = rows[rows["decision"] != "undecided"]
    print(f"\ntarget models: sequential {used} of the fixed grid's {targets} "
          f"({used / max(1, targets):.0%}; issue 49's target ≤ 60 %); shadows {shadows} in both; "
          f"cells decided {len(decided)} of {len(rows)}, each meeting its goal: "
          f"{'yes' if decided['goal met'].all() else 'NO'}; median width sequential "
          f"{rows['width'].median():.3f}, fixed {rows['fixed width'].median():.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
