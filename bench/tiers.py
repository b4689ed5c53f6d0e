"""`python -m bench.tiers`: where `make test`'s time goes, tier by tier.

Runs each of the Makefile's tier targets alone, one after another, exactly as `make test` calls
them (`make --no-print-directory TARGET` in this checkout), and prints for each its wall, the
CPU-seconds the whole machine was busy meanwhile (every process's: the tier's sweeps, Ray
workers and servers included, from `/proc/stat`'s busy and idle jiffies before and after) and the
share of the cores that kept busy.  A tier at ~100 % busy is bounded by its work, one well under
by its waits (nodes starting, kills, timeouts), which is what a schedule can fill.

Why CPU-seconds: on two cores `make test` can never take less than the sum of its tiers' CPU ÷ 2,
whatever runs beside what; that floor against the goal says whether a goal needs less work or a
better schedule.  CPU-seconds of the whole machine count anyone else's work too: run it on a quiet
machine (the load averages at the start and end are printed so a reader can tell).

Linux only (`/proc/stat`, `/proc/loadavg`).  Each target's output goes to `--logs DIR`
(`<target>.log`); a target that fails is reported with its exit status, and the rest still run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
#: `make test`'s tiers, in its order (the Makefile's targets; `test-unit` is `make check`'s).
TARGETS = ("lint", "test-unit-coverage", "test-ray-process", "test-serial", "test-cluster")
CHOICES = (*TARGETS, "test-unit")


@dataclass(frozen=True)
class Jiffies:
    """The machine's CPU counters (/proc/stat's first line), in clock ticks."""

    busy: int
    idle: int

    @classmethod
    def now(cls) -> "Jiffies":
        with open("/proc/stat") as stat:
            fields = [int(value) for value in stat.readline().split()[1:]]
        user, nice, system, idle, iowait, irq, softirq = fields[:7]
        steal = fields[7] if len(fields) > 7 else 0
        return cls(busy=user + nice + system + irq + softirq + steal, idle=idle + iowait)


@dataclass(frozen=True)
class TierFigure:
    target: str
    returncode: int
    wall_s: float
    cpu_s: float
    busy_share: float
    load_before: str


def load_average() -> str:
    with open("/proc/loadavg") as loadavg:
        return " ".join(loadavg.read().split()[:3])


def time_target(target: str, logs: Path) -> TierFigure:
    """`make TARGET` in this checkout, its output to `logs/TARGET.log`."""
    ticks = os.sysconf("SC_CLK_TCK")
    load = load_average()
    before, start = Jiffies.now(), time.monotonic()
    with open(logs / f"{target}.log", "w") as log:
        done = subprocess.run(["make", "--no-print-directory", target], cwd=REPO_ROOT,
                              stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    wall, after = time.monotonic() - start, Jiffies.now()
    busy, idle = after.busy - before.busy, after.idle - before.idle
    return TierFigure(target, done.returncode, wall, busy / ticks,
                      busy / (busy + idle) if busy + idle else 0.0, load)


def table(figures: list[TierFigure], cores: int) -> str:
    rows = [f"{'target':<20} {'wall s':>7} {'CPU-s':>7} {'busy':>5}  load at start  exit",
            *(f"{f.target:<20} {f.wall_s:7.0f} {f.cpu_s:7.0f} {f.busy_share:5.0%}  "
              f"{f.load_before:<14} {f.returncode}" for f in figures)]
    wall, cpu = sum(f.wall_s for f in figures), sum(f.cpu_s for f in figures)
    rows.append(f"{'one after another':<20} {wall:7.0f} {cpu:7.0f}")
    rows.append(f"the work's floor on {cores} cores: {cpu / cores:.0f} s (CPU-s ÷ cores), "
                "whatever runs beside what")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.tiers",
        description="Each tier of `make test` alone, as make runs it: wall, the machine's "
                    "CPU-seconds meanwhile and the share of the cores kept busy (Linux).")
    parser.add_argument("targets", nargs="*", choices=CHOICES, metavar="TARGET",
                        help=f"Makefile targets to time, in order (default: {' '.join(TARGETS)}; "
                             "also: test-unit, make check's unit tier without coverage)")
    parser.add_argument("--logs", type=Path, default=REPO_ROOT / "runs" / "bench-tiers",
                        help="folder for each target's output, <target>.log (default: "
                             "runs/bench-tiers)")
    args = parser.parse_args(argv)
    if not Path("/proc/stat").is_file():
        parser.error("needs Linux's /proc/stat: the machine's CPU counters")
    args.logs.mkdir(parents=True, exist_ok=True)
    targets = args.targets or list(TARGETS)
    cores = os.cpu_count() or 1
    mypy_cache = (REPO_ROOT / ".mypy_cache").is_dir()
    print(f"{cores} cores; mypy's cache {'warm' if mypy_cache else 'empty'}; "
          f"logs in {args.logs}", flush=True)
    figures = []
    for target in targets:
        figure = time_target(target, args.logs)
        figures.append(figure)
        print(f"{target}: {figure.wall_s:.0f} s, exit {figure.returncode}", flush=True)
    print(table(figures, cores))
    print(f"load at the end: {load_average()}")
    return 0 if all(f.returncode == 0 for f in figures) else 1


if __name__ == "__main__":
    sys.exit(main())
