"""`python -m bench.startup`: how long `python -m sweeper` takes when there is nothing to do.

A finished sweep rerun trains nothing, computes nothing and logs nothing, so all of its wall is
fixed cost: interpreter start, imports, composing and validating the configuration, planning,
scanning the store for finished work, MLflow, figures and interpreter exit.  This benchmark runs
one real tiny sweep into a temporary store (the quickstart on synthetic data at `scale=smoke`
unless `--overrides` says otherwise), then reruns it `--repeat` times as a subprocess exactly as
a person types it, and prints the median wall.  One more rerun goes through an instrumented
launcher that times the phases where the wall goes (a phase's lazy imports count to the phase):

  start      interpreter start, up to the launcher's first line
  import     module imports outside the phases below
  compose    Hydra's composition of the configuration (every time it composes)
  validate   `sweeper.checks.validation.validate`
  plan       `sweeper.grid.plan.build_plan` (the sweep's plan is built inside validate, once, and
             counts there)
  store      scanning the store: finished cells, models, queries, the results table, the manifest
  data       loading the records the sweep trains on
  ray        starting and stopping Ray
  tracking   MLflow: opening the tracker, logging cells and figures, closing the run
  figures    drawing and writing the frontier and the experiment's report
  other      everything else until the command returns (for a sweep that does work: its tasks)
Phases that run in threads beside others (data, MLflow) overlap the wall: their sum can exceed it.
  exit       interpreter shutdown, from the command's return to the process's end

`--overhead` measures instead what a sweep that does work spends around its tasks (by default the
quickstart as shipped, into a temporary store): its wall as a subprocess, the seconds its Ray
tasks ran (Ray's timeline, read before Ray shuts down) and the CPUs Ray had, so that
orchestration overhead = wall − task seconds ÷ CPUs; split into the time before the first task
started (imports, Ray, data, MLflow), the time after the last one ended (figures, MLflow, exit)
and the CPU time left idle in between (worker start-up, the tail where one task runs alone).
It also counts the CPU seconds no task can overlap — the driver's, Ray's own processes' and each
worker's start-up (imports) — whose sum ÷ CPUs is the overhead's floor on this machine; unlike
wall seconds, CPU seconds hold on a machine shared with other work.

`--project DIR` measures another checkout's sweeper (e.g. the main branch, for a before/after
figure) with this same benchmark: `python -m bench.startup --project ../other-checkout`.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence

HERE = Path(__file__).resolve()
DEFAULT_PROJECT = HERE.parents[1]
DEFAULT_OVERRIDES = ("dataset.synthetic=true", "scale=smoke", "cluster.include_dashboard=false")
#: The quickstart as shipped, but its dashboard on any free port (a shared machine may hold 8265).
OVERHEAD_OVERRIDES = ("cluster.dashboard_port=0",)
PHASE_ORDER = ("start", "import", "compose", "validate", "plan", "store", "data", "ray", "tracking",
               "figures", "other", "exit")

#: The functions (module, attribute path) each phase is made of; missing ones are skipped, so the
#: same launcher times older and newer checkouts alike.
PHASES = {
    "compose": [("hydra._internal.hydra", "Hydra.compose_config")],
    "validate": [("sweeper.checks.validation", "validate"), ("sweeper.config", "validate")],
    "plan": [("sweeper.grid.plan", "build_plan")],
    "data": [("sweeper.runner", "sweep_data")],
    "ray": [("ray", "init"), ("ray", "shutdown")],
    "store": [("sweeper.store.artifacts", f"ArtifactStore.{name}") for name in (
        "has_model", "has_query", "read_manifest", "write_manifest", "read_failures",
        "cell_state")] + [("sweeper.runner", "compact")],
    "tracking": [("sweeper.tracking.recorder", "open_tracker"), ("sweeper.tracking.recorder", "SweepTracker.log_cell"),
                 ("sweeper.tracking.recorder", "SweepTracker.log_artifact"),
                 ("sweeper.tracking.recorder", "SweepTracker.finish")],
    "figures": [("sweeper.listeners", "publish_figures")],
}


# --- the launcher, run in the measured subprocess ------------------------------------------------


def _child(record_path: str, argv: list[str]) -> None:
    """Run `python -m sweeper ARGV` in this process with its phases timed into `record_path`."""
    import builtins
    import importlib.abc
    import runpy
    import threading

    begun = time.time()
    spent = dict.fromkeys(PHASE_ORDER, 0.0)
    local = threading.local()  # depth > 0 inside a phase or an import: nested time counts to the outermost

    def timed(phase: str, function):
        def wrapper(*args, **kwargs):
            if getattr(local, "depth", 0):
                return function(*args, **kwargs)
            local.depth = 1
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                spent[phase] += time.perf_counter() - start
                local.depth = 0
        functools.update_wrapper(wrapper, function, assigned=(), updated=())  # __wrapped__ only
        return wrapper

    wanted: dict[str, list[tuple[str, str]]] = {"sweeper.runner": []}
    for phase, targets in PHASES.items():
        for module, attribute in targets:
            wanted.setdefault(module, []).append((phase, attribute))

    tasks: list[tuple[float, float]] = []  # (start, end) of every Ray task, epoch seconds
    cpus = [0.0]
    ray_cpu: dict[str, float] = {}  # CPU seconds of Ray's processes, read before Ray shuts down
    paused = [0.0]  # the wait for the timeline, taken off the wall

    def with_timeline(function):
        def wrapper(*args, **kwargs):
            try:
                return function(*args, **kwargs)
            finally:  # Ray is still up: the runner shuts it down after this returns
                import ray

                cpus[0] = ray.cluster_resources().get("CPU", 0.0)
                time.sleep(2)  # task events reach the timeline a moment after the tasks end
                paused[0] += 2
                tasks.extend((e["ts"] / 1e6, (e["ts"] + e["dur"]) / 1e6) for e in ray.timeline()
                             if str(e.get("cat", "")).startswith("task::") and e.get("ph") == "X")
                ray_cpu.update(_descendants_cpu())
        return wrapper

    def patch(module) -> None:
        if module.__name__ == "sweeper.runner" and hasattr(module, "_execute"):
            module._execute = with_timeline(module._execute)
        for phase, attribute in wanted.get(module.__name__, []):
            owner_name, _, name = attribute.rpartition(".")
            owner = getattr(module, owner_name) if owner_name else module
            if hasattr(owner, name):
                setattr(owner, name, timed(phase, getattr(owner, name)))

    class Patcher(importlib.abc.MetaPathFinder):
        """Wraps a target module's functions the moment it has loaded, before anyone imports them."""

        def find_spec(self, fullname, path, target=None):
            if fullname not in wanted:
                return None
            sys.meta_path.remove(self)
            try:
                from importlib.util import find_spec
                spec = find_spec(fullname)
            finally:
                sys.meta_path.insert(0, self)
            if spec is None or spec.loader is None:
                return spec
            loader = spec.loader
            original = loader.exec_module

            def exec_module(module):
                original(module)
                patch(module)
            loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, Patcher())
    real_import = builtins.__import__
    builtins.__import__ = timed("import", real_import)

    def record(code) -> None:
        spent["other"] = max(0.0, time.perf_counter() - started_at - paused[0] - sum(
            spent[p] for p in PHASE_ORDER if p not in ("start", "other", "exit")))
        Path(record_path).write_text(json.dumps({"begun": begun, "returned": time.time(),
                                                 "spent": spent, "code": code, "tasks": tasks,
                                                 "cpus": cpus[0], "paused": paused[0],
                                                 "driver_cpu": sum(os.times()[:2]),
                                                 "ray_cpu": ray_cpu}))

    real_exit = os._exit

    def fast_exit(code):
        record(code)
        real_exit(code)
    os._exit = fast_exit
    sys.argv = ["sweeper", *argv]
    started_at = time.perf_counter()
    code = 0
    try:
        runpy.run_module("sweeper", run_name="__main__", alter_sys=True)
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        raise
    finally:
        record(code)


def _descendants_cpu() -> dict[str, float]:
    """CPU seconds (user + system) so far of this process's descendants: Ray's own processes
    (GCS, raylet, agents, log monitor, dashboard) apart from its workers (`ray::` titles other
    than the agents'), whose CPU includes the tasks they ran."""
    tick = os.sysconf("SC_CLK_TCK")
    table: dict[int, tuple[int, float, str]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
                title = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
            except OSError:
                continue
            table[int(name)] = (int(stat[1]), (int(stat[11]) + int(stat[12])) / tick, title)
    found, stack = [], [os.getpid()]
    while stack:
        parent = stack.pop()
        for pid, (ppid, _, _) in table.items():
            if ppid == parent:
                found.append(pid)
                stack.append(pid)
    out = {"ray": 0.0, "workers": 0.0, "worker_count": 0}
    for pid in found:
        _, seconds, title = table[pid]
        worker = title.startswith("ray::") and not title.endswith("Agent")
        out["workers" if worker else "ray"] += seconds
        out["worker_count"] += int(worker)
    return out


def _worker_start_cpu(project: Path) -> float:
    """CPU seconds a fresh interpreter takes to import what a worker imports before its first
    task (Ray and the task bodies, with torch): every worker pays it outside any task."""
    code = ("import time; import ray, sweeper.cluster.tasks; "
            "print(time.process_time())")
    done = subprocess.run([sys.executable, "-c", code], env=_environment(project),
                          capture_output=True, text=True, check=True)
    return float(done.stdout.strip().splitlines()[-1])


# --- the benchmark ------------------------------------------------------------------------------


def _environment(project: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env["PYTHONPATH"] = str(project)
    return env


def _sweep(project: Path, folder: Path, args: list[str], timeout: float) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "sweeper", *args], cwd=folder,
                          env=_environment(project), capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"`python -m sweeper {' '.join(args)}` exited {done.returncode}:\n"
                         f"{done.stderr[-3000:]}")
    return wall, done.stdout


def _instrumented(project: Path, folder: Path, args: list[str], timeout: float) -> dict:
    record = folder / "phases.json"
    spawned = time.time()
    done = subprocess.run([sys.executable, str(HERE), "--child", str(record), "--", *args],
                          cwd=folder, env=_environment(project), capture_output=True, text=True,
                          timeout=timeout)
    ended = time.time()
    if done.returncode != 0 or not record.exists():
        raise SystemExit(f"the instrumented rerun exited {done.returncode}:\n{done.stderr[-3000:]}")
    data = json.loads(record.read_text())
    data["spent"]["start"] = data["begun"] - spawned
    data["spent"]["exit"] = ended - data["returned"]
    data.update(spawned=spawned, ended=ended)
    return data


def _overhead(project: Path, folder: Path, args: list[str], timeout: float) -> None:
    """Print the orchestration overhead of one instrumented sweep that does work."""
    data = _instrumented(project, folder, args, timeout)
    wall = data["ended"] - data["spawned"] - data["paused"]
    tasks, cpus = data["tasks"], data["cpus"]
    if not tasks or not cpus:
        raise SystemExit("the sweep ran no Ray task: nothing to measure (is the store empty?)")
    busy = sum(end - start for start, end in tasks)
    first, last = min(s for s, _ in tasks), max(e for _, e in tasks)
    overhead = wall - busy / cpus
    print(f"sweeper of {project}; python -m sweeper {' '.join(args[:-1])}")
    print(f"wall {wall:.1f} s; {len(tasks)} Ray tasks ran {busy:.1f} s on {cpus:g} CPUs "
          f"({busy / cpus:.1f} s of wall at full use)")
    print(f"orchestration overhead: {overhead:.1f} s = {100 * overhead / wall:.1f} % of the wall")
    print(f"  before the first task   {first - data['spawned']:6.1f} s")
    print(f"  idle CPU time between   {(last - first) - busy / cpus:6.1f} s  (warm-up, tail, gaps)")
    print(f"  after the last task     {data['ended'] - last - data['paused']:6.1f} s")
    ray_cpu, workers = data["ray_cpu"], data["ray_cpu"].get("worker_count", 0)
    start_cpu = _worker_start_cpu(project)
    fixed = data["driver_cpu"] + ray_cpu.get("ray", 0.0) + workers * start_cpu
    print(f"CPU seconds that no task overlaps: the driver {data['driver_cpu']:.1f} s (imports, "
          f"Ray's start, data, MLflow, figures), Ray's own processes {ray_cpu.get('ray', 0.0):.1f} s, "
          f"{workers} workers' start-up {workers} × {start_cpu:.1f} s (ray and sweeper.cluster.tasks "
          f"imported, measured apart): {fixed:.1f} s, so at least {fixed / cpus:.1f} s of wall = "
          f"{100 * fixed / cpus / wall:.1f} % even if all of it ran beside the tasks")
    print("phases of the driver (a phase's lazy imports count to it):")
    for phase in PHASE_ORDER:
        print(f"  {phase:<9} {data['spent'][phase]:6.2f} s")


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.startup",
        description="Median wall of a no-op rerun of a finished tiny sweep (`python -m sweeper` "
                    "as a subprocess), and where that time goes.",
        epilog="Phases: " + ", ".join(PHASE_ORDER) + ". See the module's docstring.")
    parser.add_argument("--repeat", type=int, default=5, help="no-op reruns timed (default 5)")
    parser.add_argument("--project", type=Path, default=DEFAULT_PROJECT,
                        help="the checkout whose sweeper is measured (default: this one)")
    parser.add_argument("--overrides", nargs="*", default=None,
                        help="the tiny sweep's overrides (default: "
                             f"{' '.join(DEFAULT_OVERRIDES)}); store.root is added")
    parser.add_argument("--overhead", action="store_true",
                        help="measure the orchestration overhead of one sweep that does work "
                             f"instead (default overrides: {' '.join(OVERHEAD_OVERRIDES)}, i.e. the "
                             "quickstart as shipped)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary store")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per command")
    args = parser.parse_args(argv)

    project = args.project.resolve()
    folder = Path(tempfile.mkdtemp(prefix="bench-startup-"))
    defaults = OVERHEAD_OVERRIDES if args.overhead else DEFAULT_OVERRIDES
    overrides = [*(defaults if args.overrides is None else args.overrides),
                 f"store.root={folder / 'runs'}"]
    try:
        if args.overhead:
            _overhead(project, folder, overrides, args.timeout)
            return 0
        first, _ = _sweep(project, folder, overrides, args.timeout)
        print(f"sweeper of {project}; python -m sweeper {' '.join(overrides[:-1])}")
        print(f"first run (trains the sweep): {first:.1f} s")
        walls = []
        for _ in range(args.repeat):
            wall, stdout = _sweep(project, folder, overrides, args.timeout)
            walls.append(wall)
        if "trained 0 of" not in stdout:
            raise SystemExit("the rerun did work; it is not a no-op:\n" + stdout[-2000:])
        print(f"no-op rerun: median {statistics.median(walls):.2f} s of {args.repeat} "
              f"(min {min(walls):.2f}, max {max(walls):.2f})")
        spent = _instrumented(project, folder, overrides, args.timeout)["spent"]
        total = sum(spent.values())
        print(f"where one instrumented rerun's {total:.2f} s go:")
        for phase in PHASE_ORDER:
            print(f"  {phase:<9} {spent[phase]:6.2f} s  {100 * spent[phase] / total:5.1f} %")
    finally:
        if args.keep:
            print(f"store kept: {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        sys.path.pop(0)  # this file's folder: the measured command sees only the project
        _child(sys.argv[2], sys.argv[4:])
    else:
        sys.exit(main())
