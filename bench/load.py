"""`python -m bench.load`: a sweep of hundreds of cells, with the driver's memory watched.

A grid of tiny models (logistic regression on 20 synthetic binary features, 2 classes, a
200-record pool, 1 epoch, 2 shadows per ε) is sized to at least `--cells` cells and run through
`sweeper.runner.run_sweep` in this process, exactly as `python -m sweeper` runs it (local Ray,
Parquet rows, MLflow in SQLite).  A thread samples the driver's resident memory (RSS) every
`--interval` seconds next to the number of cells landed so far, so the report can say whether
memory grows with the cells: the figure to watch is the growth from 10 % of the cells landed to
the peak, and the slope over the middle 80 % of the cells.  Then the frontier of the finished
sweep is rendered (table and PNG), in this process and as `python -m sweeper.cli.frontier_command`, and
timed.

The grid grows by trials: one trial is |ε| × |p| targets and |ε| × |p| × |attacks| × |policies|
cells, so `--cells 500` and `--cells 2000` differ in cells and targets only, and their peaks can
be compared: flat memory means the peak does not grow with the cells beyond the results table.
`--trim-heap` asks glibc to return freed heap before each sample, which tells memory the driver
still holds (a leak) from freed memory the allocator keeps (fragmentation).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

MB = 1024 * 1024

EPSILONS = (1.0, 2.0, 4.0, 8.0, math.inf)
SAMPLING_RATES = (0.1, 0.3, 0.5, 0.7, 0.9)
ATTACKS = ("loss", "lira_offline", "lira_online", "shokri", "always_member")
POLICIES = ("quantile_max",)


def cells_per_trial(epsilons: Sequence[float] = EPSILONS, rates: Sequence[float] = SAMPLING_RATES,
                    attacks: Sequence[str] = ATTACKS, policies: Sequence[str] = POLICIES) -> int:
    return len(epsilons) * len(rates) * len(attacks) * len(policies)


def load_config(root: str | Path, cells: int = 500, *, name: str = "load",
                epsilons: Sequence[float] = EPSILONS, rates: Sequence[float] = SAMPLING_RATES,
                attacks: Sequence[str] = ATTACKS, policies: Sequence[str] = POLICIES,
                model: str = "logistic_regression", pool: int = 200, eval_records: int = 100,
                shadows: int = 2, batch_size: int = 256, num_cpus: Optional[int] = 2):
    """A SweepConfig of tiny models on synthetic data with at least `cells` cells.

    Targets: |ε| × |p| × trials; shadows: |ε| × `shadows`; attack tasks: targets × |attacks|.
    """
    from sweeper.config import SweepConfig

    trials = max(1, math.ceil(cells / cells_per_trial(epsilons, rates, attacks, policies)))
    cfg = SweepConfig()
    cfg.name = name
    cfg.dataset.name = "synthetic"
    cfg.dataset.synthetic = True
    cfg.dataset.input_shape = [20]
    cfg.dataset.num_classes = 2
    cfg.dataset.pool_size = pool
    cfg.dataset.test_size = 100
    cfg.dataset.eval_records = eval_records
    cfg.model.name = model
    cfg.train.epochs = 1
    cfg.train.batch_size = batch_size
    cfg.train.lr = 0.5
    cfg.train.momentum = 0.0
    cfg.shadow.count = shadows
    cfg.grid.epsilon = [float(e) for e in epsilons]
    cfg.grid.delta = [1e-5]
    cfg.grid.p = [float(p) for p in rates]
    cfg.grid.attack = list(attacks)
    cfg.grid.policy = list(policies)
    cfg.grid.trial = list(range(trials))
    cfg.store.root = str(Path(root) / "runs")
    cfg.cluster.include_dashboard = False
    cfg.cluster.num_cpus = num_cpus
    return cfg


def release_freed_heap() -> None:
    """Ask glibc to hand freed heap back to the OS (`malloc_trim(0)`); a no-op without glibc."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def driver_rss() -> int:
    """This process's resident set size in bytes (psutil, else /proc/self/status)."""
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil comes with ray[default]
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("no psutil and no /proc/self/status: cannot read RSS") from None
    return psutil.Process().memory_info().rss


class RssSampler:
    """Samples (seconds, RSS bytes, cells landed) every `interval` s on a daemon thread.

    Cells landed are counted as the Parquet files in the sweep's `cells/` folder: the runner
    writes one, atomically, per cell, so nothing in the sweep itself has to be instrumented.

    With `trim`, glibc is asked to return freed heap before each sample, so RSS follows the
    memory the driver still holds (a leak) rather than what the allocator keeps after frees
    (fragmentation); that changes the process measured, so it is off by default.
    """

    def __init__(self, cells_dir: Path, interval: float = 0.5, trim: bool = False):
        self.cells_dir = Path(cells_dir)
        self.interval = interval
        self.trim = trim
        self.samples: list[tuple[float, int, int]] = []
        self.marks: dict[str, tuple[float, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self.started = time.perf_counter()

    def count_cells(self) -> int:
        try:
            with os.scandir(self.cells_dir) as entries:
                return sum(1 for e in entries if e.name.endswith(".parquet"))
        except FileNotFoundError:
            return 0

    def sample(self) -> tuple[float, int, int]:
        if self.trim:
            release_freed_heap()
        point = (time.perf_counter() - self.started, driver_rss(), self.count_cells())
        self.samples.append(point)
        return point

    def mark(self, label: str) -> int:
        """Record the RSS now under `label` (e.g. 'start', 'planned', 'end')."""
        seconds, rss, _ = self.sample()
        self.marks[label] = (seconds, rss)
        return rss

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> "RssSampler":
        self.mark("start")
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.mark("end")

    # --- what the samples say -----------------------------------------------------------------

    def write_csv(self, path: str | Path) -> None:
        lines = ["seconds,rss_mb,cells"] + [f"{s:.2f},{rss / MB:.1f},{done}" for s, rss, done in self.samples]
        Path(path).write_text("\n".join(lines) + "\n")

    def peak(self) -> int:
        return max(rss for _, rss, _ in self.samples)

    def rss_at_cells(self, share: float, total: int) -> Optional[int]:
        """RSS at the first sample with at least `share` of `total` cells landed."""
        for _, rss, done in self.samples:
            if done >= share * total:
                return rss
        return None

    def seconds_at_cells(self, share: float, total: int) -> Optional[float]:
        for seconds, _, done in self.samples:
            if done >= share * total:
                return seconds
        return None

    def peak_while_cells(self, total: int, from_share: float = 0.1) -> int:
        """The peak from `from_share` of the cells landed until before the last one.

        It starts where `rss_at_cells(from_share, …)` is read, so the difference is growth: the
        RSS a driver sheds as the sweep starts (a test session's garbage, trimmed once cells run)
        must not count as a rise.  It ends before the last cell: no end-of-sweep frontier.
        """
        during = [rss for _, rss, done in self.samples if from_share * total <= done < total]
        return max(during) if during else self.peak()

    def slope_mb_per_1000_cells(self, total: int, low: float = 0.1, high: float = 0.9) -> float:
        """Least-squares RSS slope (MB per 1000 cells) over samples with low..high of the cells."""
        points = [(done, rss) for _, rss, done in self.samples if low * total <= done <= high * total]
        if len({done for done, _ in points}) < 2:
            return math.nan
        n = len(points)
        mean_x = sum(d for d, _ in points) / n
        mean_y = sum(r for _, r in points) / n
        sxx = sum((d - mean_x) ** 2 for d, _ in points)
        sxy = sum((d - mean_x) * (r - mean_y) for d, r in points)
        return sxy / sxx * 1000 / MB


@dataclass
class LoadReport:
    cells: int
    models: int
    attack_tasks: int
    landed: int  # unique cell keys in the results table
    rows: int  # rows in the results table (== landed when no cell landed twice)
    failures: list[tuple[str, str]]
    wall_s: float
    cells_s: Optional[float]  # from start until the last cell landed
    first_cell_s: Optional[float]  # from start until the first cell landed
    driver_cpu_s: float  # user + system CPU of this process (not of the Ray workers)
    rss_start: int
    rss_planned: int
    rss_at_10: Optional[int]
    rss_at_25: Optional[int]
    rss_at_100: Optional[int]
    rss_peak_cells: int  # peak from 10 % of the cells until the last landed
    rss_peak: int  # peak over everything, the end-of-sweep frontier and report included
    rss_end: int
    slope_mb_per_1000: float
    frontier_s: dict[str, float] = field(default_factory=dict)
    sweep_dir: Optional[Path] = None
    samples: int = 0
    sampler: Optional[RssSampler] = field(default=None, repr=False)

    @property
    def growth_after_10(self) -> Optional[int]:
        """Peak (from 10 % of the cells until the last) minus the RSS at 10 % of the cells."""
        return None if self.rss_at_10 is None else self.rss_peak_cells - self.rss_at_10

    def lines(self) -> list[str]:
        def mb(value: Optional[int]) -> str:
            return "n/a" if value is None else f"{value / MB:8.1f} MB"

        def s(value: Optional[float]) -> str:
            return "n/a" if value is None else f"{value:.1f} s"

        return [
            f"cells          {self.cells} planned, {self.landed} landed (unique cell keys), "
            f"{self.rows} rows, {len(self.failures)} failed",
            f"models         {self.models}   attack tasks {self.attack_tasks}",
            f"wall           {self.wall_s:.1f} s  (first cell landed at {s(self.first_cell_s)}, "
            f"last at {s(self.cells_s)}; {self.cells / self.wall_s:.1f} cells/s overall)",
            f"driver CPU     {self.driver_cpu_s:.1f} s (user + system, this process only)",
            f"driver RSS     start {mb(self.rss_start)}",
            f"               after planning {mb(self.rss_planned)}",
            f"               at 10 % cells {mb(self.rss_at_10)}   25 % {mb(self.rss_at_25)}   "
            f"100 % {mb(self.rss_at_100)}",
            f"               peak from 10 % cells {mb(self.rss_peak_cells)}   peak overall "
            f"{mb(self.rss_peak)}",
            f"               end {mb(self.rss_end)}",
            f"flatness       peak − RSS at 10 %: {mb(self.growth_after_10)}; slope over the middle "
            f"80 % of the cells: {self.slope_mb_per_1000:.1f} MB per 1000 cells "
            f"({self.samples} samples)",
            *(f"frontier       {label}: {seconds:.2f} s" for label, seconds in self.frontier_s.items()),
        ]


def time_frontier(sweep_dir: Path, out_png: Optional[Path] = None) -> tuple[dict[str, float], int]:
    """Seconds to load the results table, format it and draw the PNG, in this process."""
    from sweeper.frontier import format_table, load_frontier
    from sweeper.reports import plot_frontier

    timings: dict[str, float] = {}
    start = time.perf_counter()
    frame = load_frontier(run_dir=sweep_dir)
    timings["load_frontier"] = time.perf_counter() - start
    mark = time.perf_counter()
    format_table(frame)
    timings["format_table"] = time.perf_counter() - mark
    mark = time.perf_counter()
    plot_frontier(frame, out_png or sweep_dir / "frontier_load.png", title=sweep_dir.name)
    timings["plot_frontier"] = time.perf_counter() - mark
    timings["in-process total"] = time.perf_counter() - start
    return timings, len(frame)


def time_frontier_command(sweep_dir: Path) -> float:
    """Seconds of `python -m sweeper.cli.frontier_command --run-dir DIR` (interpreter start and imports too)."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "sweeper.cli.frontier_command", "--run-dir", str(sweep_dir)],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def run_load(cfg, interval: float = 0.5, progress: bool = True, frontier_command: bool = True,
             trim: bool = False, echo: Callable[[str], None] = print) -> LoadReport:
    """Run `cfg` with `run_sweep` in this process while sampling the driver's RSS.

    Joins a Ray that is already initialized (tests), else `run_sweep` starts a local one.
    """
    from sweeper.grid.plan import build_plan
    from sweeper.runner import run_sweep
    from sweeper.store.artifacts import ArtifactStore
    from sweeper.tracking.recorder import import_mlflow

    # The sweep imports MLflow in the background while its first models train; on a fast sweep
    # that one-time import lands after 10 % of the cells and would read as per-cell growth.
    import_mlflow()
    plan = build_plan(cfg)
    local_root = ArtifactStore(cfg.store.root).local_root
    if local_root is None:
        raise ValueError(f"store.root={cfg.store.root!r}: the load benchmark counts cell files, so "
                         "it needs a local store")
    cells_dir = local_root / "sweeps" / cfg.name / "cells"
    sampler = RssSampler(cells_dir, interval, trim)

    def note(line: str) -> None:  # the runner's first line comes right after planning
        if "planned" not in sampler.marks:
            sampler.mark("planned")
        echo(line)

    cpu = os.times()
    with sampler:
        result = run_sweep(cfg, progress=progress, echo=note)
    after = os.times()
    total = len(plan.cells)
    results = result.results
    sweep_dir = Path(result.sweep_dir)
    report = LoadReport(
        cells=total, models=len(plan.models), attack_tasks=len(plan.attacks),
        landed=int(results["cell_key"].nunique()) if not results.empty else 0, rows=len(results),
        failures=list(result.failures), wall_s=sampler.marks["end"][0] - sampler.marks["start"][0],
        cells_s=sampler.seconds_at_cells(1.0, total), first_cell_s=sampler.seconds_at_cells(1 / total, total),
        driver_cpu_s=(after.user - cpu.user) + (after.system - cpu.system),
        rss_start=sampler.marks["start"][1], rss_planned=sampler.marks.get("planned", (0, 0))[1],
        rss_at_10=sampler.rss_at_cells(0.1, total), rss_at_25=sampler.rss_at_cells(0.25, total),
        rss_at_100=sampler.rss_at_cells(1.0, total), rss_peak_cells=sampler.peak_while_cells(total),
        rss_peak=sampler.peak(), rss_end=sampler.marks["end"][1],
        slope_mb_per_1000=sampler.slope_mb_per_1000_cells(total), sweep_dir=sweep_dir,
        samples=len(sampler.samples), sampler=sampler,
    )
    report.frontier_s, _ = time_frontier(sweep_dir)
    if frontier_command:
        report.frontier_s["python -m sweeper.cli.frontier_command"] = time_frontier_command(sweep_dir)
    return report


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.load", description=__doc__.split("\n\n")[0],
        epilog="Compare `--cells 500` with `--cells 2000`: with flat driver memory the peaks "
               "differ by little more than the results table.")
    parser.add_argument("--cells", type=int, default=500,
                        help=f"at least this many cells (default 500); the grid grows by trials of "
                             f"{cells_per_trial()} cells and {len(EPSILONS) * len(SAMPLING_RATES)} targets")
    parser.add_argument("--store", metavar="DIR",
                        help="store.root parent folder (default: a temporary folder, removed after)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary store")
    parser.add_argument("--model", default="logistic_regression",
                        choices=["logistic_regression", "tanh_mlp64"], help="tiny model (default: %(default)s)")
    parser.add_argument("--attacks", default=",".join(ATTACKS),
                        help="comma-separated grid.attack (default: %(default)s)")
    parser.add_argument("--policies", default=",".join(POLICIES),
                        help="comma-separated grid.policy (default: %(default)s; 'calibrated' "
                             "doubles the cells without more Ray tasks)")
    parser.add_argument("--pool", type=int, default=200, help="pool records (default 200)")
    parser.add_argument("--eval-records", type=int, default=100, help="evaluated records (default 100)")
    parser.add_argument("--shadows", type=int, default=2, help="shadow models per ε (default 2)")
    parser.add_argument("--batch-size", type=int, default=256,
                        help="expected DP-SGD batch (default 256 ≥ the pool: one full-batch step "
                             "per model, so the sweep machinery is what is loaded; 64 gives 1-3 "
                             "Poisson steps, and Opacus's noise calibration then dominates training)")
    parser.add_argument("--trim-heap", action="store_true",
                        help="call glibc malloc_trim(0) before each RSS sample: RSS then shows "
                             "memory still held, not freed heap the allocator keeps")
    parser.add_argument("--samples", metavar="CSV", help="write the RSS samples (s, MB, cells) here")
    parser.add_argument("--num-cpus", type=int, default=2, help="local Ray CPUs (default 2)")
    parser.add_argument("--interval", type=float, default=0.5, help="RSS sampling period, s (default 0.5)")
    parser.add_argument("--no-progress", action="store_true", help="no tqdm bars")
    parser.add_argument("--no-frontier-command", action="store_true",
                        help="do not also time `python -m sweeper.cli.frontier_command` in a subprocess")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    os.environ.setdefault("MLFLOW_ENABLE_ASYNC_LOGGING", "false")
    attacks = tuple(a for a in args.attacks.split(",") if a)
    policies = tuple(p for p in args.policies.split(",") if p)
    temporary = args.store is None
    root = Path(tempfile.mkdtemp(prefix="sweeper-load-")) if temporary else Path(args.store)
    cfg = load_config(root, args.cells, attacks=attacks, policies=policies, model=args.model,
                      pool=args.pool, eval_records=args.eval_records, shadows=args.shadows,
                      batch_size=args.batch_size, num_cpus=args.num_cpus)
    try:
        report = run_load(cfg, args.interval, progress=not args.no_progress,
                          frontier_command=not args.no_frontier_command, trim=args.trim_heap)
        print(f"\n{len(cfg.grid.trial)} trials × {len(cfg.grid.epsilon)} ε × {len(cfg.grid.p)} p × "
              f"{len(attacks)} attacks × {len(policies)} policies; model {cfg.model.name}, pool "
              f"{cfg.dataset.pool_size}, eval {cfg.dataset.eval_records}, batch {cfg.train.batch_size}, "
              f"{cfg.shadow.count} shadows/ε" + ("; RSS sampled after malloc_trim" if args.trim_heap else ""))
        print("\n".join(report.lines()))
        if args.samples:
            if report.sampler is None:
                raise RuntimeError("run_load returned no RSS sampler to write the samples of")
            report.sampler.write_csv(args.samples)
            print(f"samples        {args.samples}")
        print(f"sweep folder   {report.sweep_dir}" + ("  (removed)" if temporary and not args.keep else ""))
        ok = not report.failures and report.landed == report.cells
        return 0 if ok else 1
    finally:
        if temporary and not args.keep:
            with contextlib.suppress(OSError):
                shutil.rmtree(root)


if __name__ == "__main__":
    sys.exit(main())
