"""`python -m bench.gpu_sweep`: what one reduced sweep of `bench/gpu_session.sh` says about the
full grid — read from the sweep's own output, its store, GPU samples and `bench.grid`'s log.

It prints the sweep's wall split into training, queries and attacks (the summary's `wall by
task kind` line, `sweeper.task_times`), the GPU's busy share over the sweep (`nvidia-smi`'s
utilization, sampled while it ran), the device every trained model's metadata names (so that a
task that fell back to the CPU shows), the training wall against `bench.grid`'s extrapolation
for the same models, and the full grid's wall extrapolated from the sweep: its training by
steps, its queries and attacks by tasks.  Each step is a pure function, tested on the CPU
(`tests/test_gpu_sweep.py`).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Optional

#: `sweeper.task_times.wall_split_line`'s parts.
_KIND = re.compile(r"(training|queries|attacks) ([\d.]+) s \((\d+) tasks, ([\d.]+) task-s\)")


def parse_wall_split(log: str) -> dict[str, dict[str, float]]:
    """The summary's `wall by task kind` line as {kind: {wall, tasks, task_seconds}}, and the
    sweep's wall (`done in … s`) as {"sweep": {"wall": …}}; empty when the sweep printed none."""
    split: dict[str, dict[str, float]] = {}
    line = next((row for row in log.splitlines() if row.startswith("wall by task kind:")), "")
    for kind, wall, tasks, seconds in _KIND.findall(line):
        split[kind] = {"wall": float(wall), "tasks": int(tasks), "task_seconds": float(seconds)}
    done = re.search(r"^done in ([\d.]+) s", log, re.M)
    if done:
        split["sweep"] = {"wall": float(done.group(1))}
    return split


def parse_gpu_samples(text: str) -> list[float]:
    """Utilization percentages from `nvidia-smi --query-gpu=utilization.gpu --format=csv,
    noheader,nounits -lms …` (one GPU a line; anything else, a header or "[N/A]", skipped)."""
    values = []
    for line in text.splitlines():
        field = line.rsplit(",", 1)[-1].strip().rstrip("%").strip()
        try:
            values.append(float(field))
        except ValueError:
            continue
    return values


def busy_share(samples: list[float]) -> Optional[float]:
    """The GPU's mean utilization over the samples, as a share (None without samples)."""
    return sum(samples) / len(samples) / 100 if samples else None


def devices(metas: list[dict]) -> dict[str, int]:
    """How many models trained on each device their metadata names ("none": not recorded)."""
    counts: dict[str, int] = {}
    for meta in metas:
        name = str(meta.get("device") or "none")
        counts[name] = counts.get(name, 0) + 1
    return counts


def parse_grid_extrapolation(log: str) -> Optional[tuple[int, int, float]]:
    """`bench.grid`'s plan and extrapolated training wall at the shipped packing: (models,
    steps, seconds); None when it printed none."""
    found = re.search(r"the grid's training \((\d+) models, (\d+) steps\): ([\d.]+) min at the "
                      r"shipped", log)
    return (int(found.group(1)), int(found.group(2)), float(found.group(3)) * 60) if found else None


def extrapolate(split: dict[str, dict[str, float]], sweep_steps: int,
                full: dict[str, int]) -> dict[str, float]:
    """The full grid's wall per kind, in seconds: training scaled by steps (`full["steps"]`
    against the sweep's), queries and attacks by their task counts (`full["queries"]`,
    `full["attacks"]`); a kind the sweep did not run scales to NaN if the grid has some."""
    scaled = {}
    for kind, measure, count in (("training", sweep_steps, full["steps"]),
                                 ("queries", split.get("queries", {}).get("tasks", 0), full["queries"]),
                                 ("attacks", split.get("attacks", {}).get("tasks", 0), full["attacks"])):
        wall = split.get(kind, {}).get("wall", 0.0)
        scaled[kind] = wall * count / measure if measure else (0.0 if not count else float("nan"))
    return scaled


def full_grid_counts(experiment: str) -> dict[str, int]:
    """The shipped experiment's steps, model queries and attack tasks (as the sweep plans them)."""
    from bench.grid import grid_shape
    from sweeper.grid.plan import build_plan
    from sweeper.checks.preflight import composed

    cfg, _ = composed([f"+experiment={experiment}", "resources.train.num_gpus=0"])
    plan = build_plan(cfg)
    return {"steps": grid_shape(experiment, []).total_steps, "queries": len(plan.queries),
            "attacks": len({cell.scores.key for cell in plan.cells})}


def model_metas(store: Path) -> list[dict]:
    """Every trained model's metadata in a local store (`models/<key>/meta.json`)."""
    return [json.loads(path.read_text()) for path in sorted((store / "models").glob("*/meta.json"))]


def report(experiment: str, sweep_log: str, smi: str, grid_log: str, metas: list[dict],
           full: dict[str, int]) -> list[str]:
    """The lines `main` prints."""
    split = parse_wall_split(sweep_log)
    lines = [f"== {experiment}: the real command's sweep"]
    if "sweep" not in split:
        return lines + ["  the sweep printed no summary: it did not finish (see its log)"]
    kinds = [kind for kind in ("training", "queries", "attacks") if kind in split]
    outside = split["sweep"]["wall"] - sum(split[kind]["wall"] for kind in kinds)
    lines.append(f"  sweep wall {split['sweep']['wall']:.1f} s; " + "; ".join(
        f"{kind} {split[kind]['wall']:.1f} s over {split[kind]['tasks']:.0f} tasks"
        for kind in kinds) + f"; at least {max(outside, 0.0):.1f} s outside every task "
        "(Ray's start, the data, collecting)")
    share = busy_share(parse_gpu_samples(smi))
    lines.append("  GPU busy share over the sweep: " + (f"{share:.0%}" if share is not None
                                                         else "not sampled (no nvidia-smi)"))
    counts = devices(metas)
    on_gpu = sum(n for name, n in counts.items() if name.startswith("cuda"))
    lines.append(f"  models trained: {len(metas)}, on a GPU: {on_gpu} "
                 f"({'every one' if metas and on_gpu == len(metas) else 'NOT every one'}); "
                 f"devices {counts}")
    predicted = parse_grid_extrapolation(grid_log)
    training = split.get("training", {}).get("wall", 0.0)
    steps = sum(int(meta.get("steps") or 0) for meta in metas)
    if predicted:
        models, planned, seconds = predicted
        # bench.grid plans each model's expected |D|; a sweep draws it: steps within 2 %
        alike = models == len(metas) and abs(planned - steps) <= 0.02 * planned
        same = "the same models" if alike else (
            f"NOT the same models: bench.grid planned {models} models, {planned} steps")
        lines.append(f"  training wall {training:.1f} s ({len(metas)} models, {steps} steps) "
                     f"against bench.grid's {seconds:.1f} s ({same}): {training / seconds:.2f}× "
                     f"({'within' if abs(training / seconds - 1) <= 0.15 else 'NOT within'} 15 %)")
    walls = extrapolate(split, steps, full)
    lines.append(f"  the full grid ({full['steps']} steps, {full['queries']} queries, "
                 f"{full['attacks']} attack tasks), extrapolated from this sweep's {steps} steps: "
                 + "; ".join(f"{kind} {seconds / 60:.1f} min" for kind, seconds in walls.items()))
    return lines


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_sweep", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--experiment", required=True)
    parser.add_argument("--store", required=True, type=Path, help="the sweep's store.root")
    parser.add_argument("--sweep-log", required=True, type=Path)
    parser.add_argument("--smi", type=Path, help="nvidia-smi's samples over the sweep")
    parser.add_argument("--grid-log", type=Path, help="bench.grid's output for the same models")
    args = parser.parse_args(argv)

    def read(path: Optional[Path]) -> str:
        return path.read_text(errors="replace") if path is not None and path.exists() else ""

    for line in report(args.experiment, read(args.sweep_log), read(args.smi), read(args.grid_log),
                       model_metas(args.store), full_grid_counts(args.experiment)):
        print(line, flush=True)


if __name__ == "__main__":
    main()
