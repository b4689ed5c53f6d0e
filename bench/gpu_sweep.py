"""`python -m bench.gpu_sweep`: what one reduced sweep of `bench/gpu_session.sh` says about the
full grid — read from the sweep's own output, its store, GPU samples and `bench.grid`'s log.

It prints the sweep's wall split into training, queries and attacks (the summary's `wall by
task kind` line, `sweeper.task_times`), the GPU's busy share over the sweep (`nvidia-smi`'s
utilization, sampled while it ran), the device every trained model's metadata names (so that a
task that fell back to the CPU shows), the training wall against `bench.grid`'s extrapolation
for the same models, and the full grid's wall extrapolated from the sweep: its training by
steps, its queries and attacks by tasks.  Each step is a pure function, tested on the CPU
(`tests/test_bench/test_gpu_sweep.py`).

A model's wall is a fixed part (its start, graph captures, pool logits) and its steps, so a
sweep extrapolates by steps only when its models are the grid's: the same architecture, epochs,
batch, precision and pool size, and about as many steps a model.  Give the sweep's overrides
after `--`: the sweep is planned with them, the grid with only its `scale=…` and `resources.…`
(on its real dataset), and a sweep whose models differ is refused (exit 2, every difference
named) before anything is extrapolated.  `--stand-in` prints the overrides for synthetic
records at the grid's own pool size: models of the grid's size on a machine without the data.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

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


def full_grid_counts(experiment: str, overrides: list[str]) -> dict[str, int]:
    """The experiment's steps, model queries and attack tasks (as the sweep plans them), with
    the grid's `overrides` (`grid_overrides`)."""
    from bench.grid import grid_shape

    plan = sweep_plan(experiment, overrides)
    return {"steps": grid_shape(experiment, overrides).total_steps, "queries": len(plan.queries),
            "attacks": len({cell.scores.key for cell in plan.cells})}


#: The overrides the grid is planned with: the scale (the CPU's smoke run extrapolates to the
#: smoke grid) and resources.  The grid itself trains on the real dataset: stand-in records
#: (`dataset.synthetic`) are its models only at its pool size (`stand_in`).
GRID_KEEPS = ("scale=", "resources.")


def grid_overrides(sweep: list[str]) -> list[str]:
    """Of a reduced sweep's overrides, those the grid it extrapolates to is planned with."""
    return [item for item in sweep if item.startswith(GRID_KEEPS)]


def sweep_plan(experiment: str, overrides: list[str]):
    """The experiment's plan with `overrides`, at their `scale`, as `python -m sweeper` plans it."""
    from sweeper.checks.preflight import composed

    return composed([f"+experiment={experiment}", *overrides, "resources.train.num_gpus=0"])[0]


@dataclass(frozen=True)
class ModelShape:
    """What a model's wall depends on besides its noise: its architecture and recipe, the
    records it draws from (its pool) and its expected steps."""

    model: str
    epochs: int
    batch_size: int
    precision: str
    pool: int
    steps: int


def model_shapes(plan: Any) -> list[ModelShape]:
    """Every model of a sweep plan, as `ModelShape`s (a model without a pool size of its own
    draws from the dataset's whole pool)."""
    from jobs.engine.accounting import PoissonSchedule, training_steps
    from sweeper.config.problems import whole_pool

    shapes = []
    for spec in plan.models.values():
        pool = spec.data.pool_size or whole_pool(plan.config) or 0
        train = spec.train
        records = max(1, int(round(pool * spec.sample_rate)))
        steps = training_steps(train.epochs, PoissonSchedule(records, train.batch_size).sample_rate)
        shapes.append(ModelShape(train.model, train.epochs, train.batch_size, train.precision,
                                 pool, steps))
    return shapes


#: How far the sweep's mean steps a model may be from the grid's (its models' fixed costs are
#: scaled with their steps).
STEPS_TOLERANCE = 0.15


def differences(sweep: list[ModelShape], grid: list[ModelShape]) -> list[str]:
    """How the sweep's models differ from the grid's, each named (empty: the same models, so
    that the sweep's wall scales by steps): any architecture, epochs, batch, precision or pool
    size the grid does not train, and steps a model off the grid's by more than 15 % (and more
    than one: a smoke run's few steps round)."""
    found = []
    for field, what in (("model", "architecture"), ("epochs", "epochs"),
                        ("batch_size", "batch size"), ("precision", "precision"),
                        ("pool", "pool size (records)")):
        ours = sorted({getattr(shape, field) for shape in sweep})
        theirs = sorted({getattr(shape, field) for shape in grid})
        if not set(ours) <= set(theirs):
            found.append(f"{what} {_listed(ours)} where the grid's is {_listed(theirs)}")
    if sweep and grid:
        ours_mean = sum(shape.steps for shape in sweep) / len(sweep)
        theirs_mean = sum(shape.steps for shape in grid) / len(grid)
        if abs(ours_mean - theirs_mean) > max(STEPS_TOLERANCE * theirs_mean, 1.0):
            found.append(f"{ours_mean:.0f} steps a model where the grid's models take "
                         f"{theirs_mean:.0f} (each model's fixed costs would be scaled with "
                         "its steps)")
    return found


def _listed(values: list) -> str:
    return str(values[0]) if len(values) == 1 else "/".join(str(value) for value in values)


def stand_in(experiment: str, overrides: list[str]) -> list[str]:
    """The overrides that replace the experiment's dataset by synthetic records of its shape
    and of its grid's pool size (a GPU machine without the dataset trains models of the real
    size on them)."""
    pools = {shape.pool for shape in model_shapes(sweep_plan(experiment, grid_overrides(overrides)))}
    if len(pools) != 1:
        raise ValueError(f"{experiment}'s models draw from pools of {sorted(pools)} records: "
                         "one stand-in pool cannot be all of them")
    return ["dataset.synthetic=true", f"dataset.pool_size={pools.pop()}"]


def extrapolated_from(sweep: list[ModelShape], grid: list[ModelShape]) -> str:
    """What the extrapolation stands on, in words."""
    first = sweep[0]
    steps = sum(shape.steps for shape in sweep)
    return (f"  extrapolated from {len(sweep)} models of {first.model} ({first.epochs} epochs of "
            f"batch {first.batch_size}, {first.precision}, pools of {_listed(sorted({s.pool for s in sweep}))} "
            f"records: the grid's), {steps / len(sweep):.0f} steps a model against the grid's "
            f"{sum(shape.steps for shape in grid) / len(grid):.0f}, to the grid's {len(grid)} models")


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
    if predicted and predicted[2] > 0:
        models, planned, seconds = predicted
        # bench.grid plans each model's expected |D|; a sweep draws it: steps within 2 %
        alike = models == len(metas) and abs(planned - steps) <= 0.02 * planned
        same = "the same models" if alike else (
            f"NOT the same models: bench.grid planned {models} models, {planned} steps")
        lines.append(f"  training wall {training:.1f} s ({len(metas)} models, {steps} steps) "
                     f"against bench.grid's {seconds:.1f} s ({same}): {training / seconds:.2f}× "
                     f"({'within' if abs(training / seconds - 1) <= 0.15 else 'NOT within'} 15 %)")
    elif predicted:
        lines.append(f"  training wall {training:.1f} s against bench.grid's 0 s: no ratio "
                     "(its models train in no measurable time)")
    walls = extrapolate(split, steps, full)
    lines.append(f"  the full grid ({full['steps']} steps, {full['queries']} queries, "
                 f"{full['attacks']} attack tasks), extrapolated from this sweep's {steps} steps: "
                 + "; ".join(f"{kind} {seconds / 60:.1f} min" for kind, seconds in walls.items()))
    return lines


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_sweep", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--experiment", required=True)
    parser.add_argument("--store", type=Path, help="the sweep's store.root")
    parser.add_argument("--sweep-log", type=Path)
    parser.add_argument("--smi", type=Path, help="nvidia-smi's samples over the sweep")
    parser.add_argument("--grid-log", type=Path, help="bench.grid's output for the same models")
    parser.add_argument("--stand-in", action="store_true",
                        help="print the overrides for synthetic records at the grid's pool size "
                             "(with the overrides given) and stop")
    parser.add_argument("overrides", nargs="*",
                        help="the sweep's Hydra overrides (after --), as given to python -m sweeper")
    args = parser.parse_args(argv)
    from sweeper.config import ConfigError

    try:
        if args.stand_in:
            print(" ".join(stand_in(args.experiment, args.overrides)))
            return
        if args.store is None or args.sweep_log is None:
            parser.error("--store and --sweep-log are required (or --stand-in)")
        sweep = model_shapes(sweep_plan(args.experiment, args.overrides))
        grid_plan_overrides = grid_overrides(args.overrides)
        grid = model_shapes(sweep_plan(args.experiment, grid_plan_overrides))
        counts = full_grid_counts(args.experiment, grid_plan_overrides)
    except ConfigError as refused:
        print(f"error: {refused}", file=sys.stderr)
        sys.exit(2)
    problems = differences(sweep, grid)
    if problems:
        print(f"error: the sweep's models are not {args.experiment}'s grid's, so its wall does not "
              "extrapolate to the grid: " + "; ".join(problems), file=sys.stderr)
        sys.exit(2)

    def read(path: Optional[Path]) -> str:
        return path.read_text(errors="replace") if path is not None and path.exists() else ""

    lines = report(args.experiment, read(args.sweep_log), read(args.smi), read(args.grid_log),
                   model_metas(args.store), counts)
    for line in lines[:1] + [extrapolated_from(sweep, grid)] + lines[1:]:
        print(line, flush=True)


if __name__ == "__main__":
    main()
