"""`python -m bench.grid`: what an experiment's training costs on this machine, and its whole grid.

For an experiment (default `cifar10_lira`) it reads the plan a sweep would run — its model,
training recipe, how many models and how many records each trains on — and trains models of
that shape on synthetic records of the dataset's shape (uniform noise: no download; the cost of
a step does not depend on the values), through `jobs` exactly as a sweep's training tasks do:

* the steps alone, interleaved, medians: a plain PyTorch step (forward, backward, SGD, eager),
  the plain step as training takes it (the ε = ∞ models' path through the same loop: on a GPU
  padded and replayed as a CUDA graph, `jobs.engine.steps`), the engine's DP step eagerly, and the DP
  step as training takes it, all at the recipe's batch size; then DP ÷ plain like for like
  (each as trained, and both eager);
* whole models, one at a time (K = 1, N = 1), K per task (one process, each model on its own
  CUDA stream) and N tasks side by side (N processes, as Ray packs N tasks on one GPU with
  `resources.train.num_gpus` = 1/N): per model its wall, steps, the share of the wall spent
  outside its steps (wall − steps × DP step as trained, over wall) and the peak memory;
* the query task's time: the model's logits on the whole pool, from host memory, as the query
  and attack tasks read them;
* a model's fixed costs, each timed where training spends it (`fixed_costs`): its start, its
  first (eager) step, the graphs it captures (count, seconds beyond a steady step each) and
  the padded batch sizes it meets (how many are rare: fewer than `RARE_STEPS` steps), and its
  pool logits from device memory (`jobs.engine.training.launch_logits`);
* on a GPU, exactness: a short training replayed as graphs against the same training eagerly.

Then the grid's training wall, extrapolated from the measured seconds per model and per step
(each model's time = a fixed cost + its steps × the cost of a step, both from the models
measured), at the experiment's shipped settings (`train.models_per_task`, and N = 1 /
`resources.train.num_gpus`) and at the best packing measured.

`--reduced` shrinks everything (records, epochs, batch) so that it runs in under a minute on a
CPU: what CI runs, to keep this command working.  `--steps-only` stops after the step times
(seconds: for comparing training options, given as overrides such as `train.tf32=false`), and
`--profile ROWS` adds the eager DP step's costliest kernels.  Figures are medians of one run in one
process; the machine and its load are printed first.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from jobs.datasets import ArrayDataset
from jobs.engine.accounting import PoissonSchedule, calibrate_noise, training_steps
from jobs.engine.host_memory import keep_freed_memory
from jobs.engine.training import (Member, TrainOptions, TrainSettings, draw_mask, predict_logits,
                                  resolve_device)

DEFAULT_EXPERIMENT = "cifar10_lira"


@dataclass(frozen=True)
class GridShape:
    """What the experiment's plan trains: per model its expected training-set size and steps."""

    experiment: str
    dataset: str
    input_shape: tuple[int, ...]
    num_classes: int
    pool_size: int
    test_size: int
    settings: TrainSettings  # the recipe, at the grid's first finite ε
    shadow_rate: float
    models: tuple[tuple[str, float, int], ...]  # (role, p, expected |D|) per model
    shipped_k: int
    shipped_n: int
    options: TrainOptions = TrainOptions()  # how the sweep's tasks train (`train.*` options)

    def steps(self, records: int) -> int:
        return training_steps(self.settings.epochs, PoissonSchedule(records, self.settings.batch_size).sample_rate)

    @property
    def total_steps(self) -> int:
        return sum(self.steps(records) for _, _, records in self.models)


def grid_shape(experiment: str, overrides: list[str]) -> GridShape:
    """The experiment's plan, composed, scaled and planned as `python -m sweeper` would (its GPU
    request set aside, so that a machine without one can plan it too).  Raises ConfigError,
    naming every problem, for an experiment or overrides the preflight refuses."""
    from omegaconf import OmegaConf

    from jobs.datasets import DATASETS
    from sweeper.grid.plan import group_resources, models_per_task, train_options_of
    from sweeper.checks.preflight import CONF_DIR, composed

    plan, _ = composed([f"+experiment={experiment}", *overrides, "resources.train.num_gpus=0"])
    cfg = plan.config  # at its `scale`, as the sweep runs it
    shipped = OmegaConf.load(CONF_DIR / "experiment" / f"{experiment}.yaml")
    gpus = float(OmegaConf.select(shipped, "resources.train.num_gpus", default=0.0) or 0.0)
    shipped_k = models_per_task(dataclasses.replace(
        cfg, resources=dataclasses.replace(cfg.resources, train=dataclasses.replace(
            cfg.resources.train, num_gpus=gpus))))
    task_gpus = group_resources(gpus, shipped_k, 1.0)  # what a task of K asks of one GPU
    spec = DATASETS[cfg.dataset.name]
    full_pool = spec.pool_records(cfg.dataset.test_size)
    models, settings, pools = [], None, set()
    for model in plan.models.values():
        pool = model.data.pool_size or full_pool
        pools.add(pool)
        models.append((model.role, model.sample_rate, int(round(pool * model.sample_rate))))
        if settings is None and math.isfinite(model.train.epsilon):
            settings = model.train
    settings = settings or next(iter(plan.models.values())).train
    # The records drawn are the largest pool a model reads (`scale=smoke`'s few hundred).
    return GridShape(experiment, cfg.dataset.name, tuple(spec.input_shape), spec.num_classes,
                     max(pools), cfg.dataset.test_size, settings, cfg.shadow.p, tuple(models),
                     shipped_k, max(1, int(round(1 / task_gpus))) if task_gpus > 0 else 1,
                     train_options_of(cfg))


def reduce(shape: GridShape) -> GridShape:
    """`--reduced`: 1 epoch of batch 32 over a pool of 640 records, 200 test records."""
    settings = dataclasses.replace(shape.settings, epochs=1, batch_size=32)
    scale = 640 / shape.pool_size
    models = tuple((role, p, max(1, int(records * scale))) for role, p, records in shape.models)
    return dataclasses.replace(shape, settings=settings, pool_size=640, test_size=200,
                               models=models)


def noise_records(shape: GridShape, seed: int = 0) -> ArrayDataset:
    """Uniform noise of the dataset's shape, random labels."""
    rng = np.random.default_rng(seed)
    return ArrayDataset(shape.dataset, rng.random((shape.pool_size, *shape.input_shape), dtype=np.float32),
                        rng.integers(0, shape.num_classes, shape.pool_size),
                        rng.random((shape.test_size, *shape.input_shape), dtype=np.float32),
                        rng.integers(0, shape.num_classes, shape.test_size),
                        num_classes=shape.num_classes)


class DictCache(dict):
    """A `NoiseCache` in memory, filled once by the parent and handed to each process."""

    def put(self, key: str, value: float) -> None:
        self[key] = value


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# --- the steps alone ---------------------------------------------------------------------------


def step_times(shape: GridShape, data: ArrayDataset, device: torch.device,
               rounds: int, profile: int = 0) -> dict[str, float]:
    from jobs.engine.clipping import tf32_convolutions

    with tf32_convolutions(shape.options.on(device).tf32):  # as `jobs.engine.training.train_runs`
        return _step_times(shape, data, device, rounds, profile)


def _step_times(shape: GridShape, data: ArrayDataset, device: torch.device,
                rounds: int, profile: int) -> dict[str, float]:
    """Median seconds of a step on full batches of the recipe's size, interleaved: a plain
    PyTorch step, the plain step as training takes it (ε = ∞ through the same loop), the
    engine's DP step eagerly, and the DP step as training takes it (on a GPU both "as trained"
    replayed as CUDA graphs), all at the recipe's precision and with the sweep's training
    options (cuDNN's TF32 as `train.tf32` says); with `profile`, a table of the eager DP step's
    costliest kernels."""
    from jobs.engine.steps import EagerSteps
    from jobs.engine.training import _stepper, on_device, start_run
    from jobs.models import build_model

    settings, batch, options = shape.settings, shape.settings.batch_size, shape.options.on(device)
    mask = np.ones(len(data.pool_y), bool)
    index = torch.arange(len(data.pool_y))
    batches = [torch.arange(start, start + batch) % len(data.pool_y) for start in range(0, 64 * batch, batch)]
    pool_x, pool_y = on_device(data.pool_x, data.pool_y, device)
    torch.manual_seed(0)
    model = build_model(settings.model, shape.input_shape, shape.num_classes).to(device)
    if options.channels_last:
        model = model.to(memory_format=torch.channels_last)
    steps = {"plain": _plain_step(model, settings, pool_x[:batch], pool_y[:batch])}
    plain_settings = dataclasses.replace(settings, epsilon=math.inf, delta=None)
    for mode in ("plain as trained", "DP eager", "DP as trained"):
        run = start_run(plain_settings if mode.startswith("plain") else settings, mask,
                        shape.input_shape, shape.num_classes, 1, device,
                        channels_last=options.channels_last)
        stepper = _stepper(run, pool_x, pool_y, index, device, options)
        if mode == "DP eager":
            stepper = EagerSteps(run, pool_x, pool_y, index, stepper.clipper)
        with _stream(stepper.stream):
            stepper.begin_epoch(batches)
        steps[mode] = _replayed(stepper, len(batches))
    for step in steps.values():  # warm-up: the first (eager) step, graph capture, cuDNN's choice
        for _ in range(3):
            step()
    _sync(device)
    times: dict[str, list[float]] = {mode: [] for mode in steps}
    for _ in range(rounds):
        for mode, step in steps.items():
            _sync(device)
            start = time.perf_counter()
            step()
            _sync(device)
            times[mode].append(time.perf_counter() - start)
    if profile:
        _profile(steps["DP eager"], device, profile)
    return {mode: statistics.median(values) for mode, values in times.items()}


def _profile(step, device: torch.device, rows: int) -> None:
    """The device's own time per kernel over 10 eager DP steps: the `rows` costliest."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as trace:
        for _ in range(10):
            step()
        _sync(device)
    sort = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    print(trace.key_averages().table(sort_by=sort, row_limit=rows, max_name_column_width=60),
          flush=True)


def _plain_step(model, settings: TrainSettings, x: torch.Tensor, y: torch.Tensor):
    """A plain step as a user writes it (at the recipe's precision): no clipping, no noise."""
    from jobs.engine.steps import mean_gradient

    optimizer = torch.optim.SGD(model.parameters(), lr=settings.lr, momentum=settings.momentum)

    def step() -> None:
        mean_gradient(model, optimizer, x, y, settings.precision)
        optimizer.step()
    return step


def _replayed(stepper, count: int):
    positions = iter(range(10 ** 9))

    def step() -> None:
        with _stream(stepper.stream):
            stepper.step(next(positions) % count)
    return step


def _stream(stream):
    import contextlib

    return torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()


# --- whole models --------------------------------------------------------------------------------


@dataclass
class Trained:
    """One packing's measure: how many models, over what wall, their steps and peak memory."""

    k: int
    n: int
    records: int
    models: int
    wall: float  # seconds from the first model's start to the last model's end
    steps: int  # per model
    peak_gb: float  # per process

    @property
    def seconds_per_model(self) -> float:
        return self.wall / self.models


def _train_k(settings: TrainSettings, data: ArrayDataset, records: int, k: int, seed: int,
             device: torch.device, cache: DictCache,
             options: TrainOptions) -> tuple[float, int, float]:
    """Train K models of about `records` records in one task; (wall, steps, peak GB)."""
    from jobs.engine.stacked import train_models

    rate = records / len(data.pool_y)
    members = [Member(draw_mask(len(data.pool_y), rate, seed + i, False), seed + i) for i in range(k)]
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    _sync(device)
    start = time.perf_counter()
    steps = [trained.steps for _, trained in train_models(settings, data, members, device, cache,
                                                          options)]
    _sync(device)
    wall = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated(device) / 1e9 if device.type == "cuda" else math.nan
    return wall, int(statistics.median(steps)), peak


def _process(args: tuple) -> tuple[float, float, int, float]:
    """One of N processes: load the records, wait for the others, train K models."""
    path, shape, records, k, seed, device_name, cache, barrier, n, options = args
    torch.set_num_threads(max(1, (os.cpu_count() or 2) // n))
    keep_freed_memory()  # as a sweep's task does (`sweeper.cluster.tasks`)
    with np.load(path) as arrays:
        data = ArrayDataset(shape.dataset, arrays["pool_x"], arrays["pool_y"], arrays["test_x"],
                            arrays["test_y"], num_classes=shape.num_classes)
    device = torch.device(device_name)
    barrier.wait()
    start = time.time()
    wall, steps, peak = _train_k(shape.settings, data, records, k, seed, device, cache, options)
    return start, start + wall, steps, peak


def train_packed(shape: GridShape, data: ArrayDataset, path: str, records: int, k: int, n: int,
                 device: torch.device, cache: DictCache, options: TrainOptions) -> Trained:
    """K models per task, N tasks side by side (N processes when N > 1)."""
    if n == 1:
        wall, steps, peak = _train_k(shape.settings, data, records, k, 100, device, cache, options)
        return Trained(k, n, records, k, wall, steps, peak)
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        barrier = manager.Barrier(n)
        with context.Pool(n) as pool:
            spans = pool.map(_process, [(path, shape, records, k, 100 + 10 * i, str(device), cache,
                                         barrier, n, options) for i in range(n)])
    wall = max(end for _, end, _, _ in spans) - min(start for start, _, _, _ in spans)
    return Trained(k, n, records, k * n, wall, spans[0][2], max(peak for *_, peak in spans))


#: A padded batch size met in fewer steps than this over a model's training is a rare one: its
#: graph's capture costs more than its replays save (H200, `cifar10_cnn`: a replay ≈ 2 ms
#: quicker than an eager step; a capture ≈ 0.1 s, issue 48's 0.8 s for 6–8 graphs and the
#: first step).
RARE_STEPS = 50


@dataclass
class FixedCosts:
    """What one model costs besides its steady steps, each measured where training spends it
    (every step synchronized, so that each is timed alone)."""

    start: float  # `start_run`: weights, optimizer, the noise multiplier, the accountant
    first_step: float  # eager (the optimizer's state, cuDNN's and the per-record routes' choices)
    step: float  # a steady step (median of those that captured nothing)
    captures: int  # CUDA graphs captured (0 on a CPU)
    capture_seconds: float  # the steps that captured one, less a steady step each
    padded_sizes: dict[int, int]  # steps per padded batch size (a graph each on a GPU)
    pool_logits: float  # the pool's logits from device memory, as `finish_run` takes them

    def rare(self) -> int:
        return sum(1 for count in self.padded_sizes.values() if count < RARE_STEPS)


def fixed_costs(shape: GridShape, data: ArrayDataset, records: int, device: torch.device,
                cache: DictCache, options: TrainOptions) -> FixedCosts:
    """Train one model of about `records` records as `jobs.engine.training.train_runs` does, timing
    its start, each step (which captured a graph, on a GPU) and its pool logits."""
    from jobs.engine.clipping import tf32_convolutions
    from jobs.engine.steps import padded_size
    from jobs.engine.training import _stepper, launch_logits, on_device, start_run

    settings = shape.settings
    mask = draw_mask(len(data.pool_y), records / len(data.pool_y), 100, False)
    pool_x, pool_y = on_device(data.pool_x, data.pool_y, device)
    with tf32_convolutions(options.tf32):
        _sync(device)
        began = time.perf_counter()
        run = start_run(settings, mask, shape.input_shape, shape.num_classes, 100, device,
                        noise_cache=cache, channels_last=options.channels_last)
        _sync(device)
        start = time.perf_counter() - began
        stepper = _stepper(run, pool_x, pool_y, torch.as_tensor(np.flatnonzero(mask)), device,
                           options)
        times: list[float] = []
        captured: list[bool] = []
        sizes: dict[int, int] = {}
        for _ in range(settings.epochs):
            with _stream(stepper.stream):
                stepper.begin_epoch(run.batches())
            for position, batch in enumerate(stepper.batches):
                size = padded_size(len(batch))
                sizes[size] = sizes.get(size, 0) + 1
                graphs = len(getattr(stepper, "graphs", ()))
                _sync(device)
                began = time.perf_counter()
                with _stream(stepper.stream):
                    stepper.step(position)
                _sync(device)
                times.append(time.perf_counter() - began)
                captured.append(len(getattr(stepper, "graphs", ())) > graphs)
        steady = [t for t, new in zip(times[1:], captured[1:]) if not new] or times
        step = statistics.median(steady)
        _sync(device)
        began = time.perf_counter()
        with _stream(stepper.stream):
            launch_logits(run.model, pool_x).numpy()
        pool_logits = time.perf_counter() - began
    capturing = [t for t, new in zip(times, captured) if new]
    return FixedCosts(start, times[0], step, len(capturing), sum(capturing) - step * len(capturing),
                      dict(sorted(sizes.items())), pool_logits)


def fixed_costs_line(costs: FixedCosts, pool: int) -> str:
    graphs = (f"{costs.captures} graphs captured in {costs.capture_seconds:.2f} s beyond their "
              "steps" if costs.captures else "no graphs (steps eagerly)")
    return (f"  a model's fixed costs (shadow-sized, alone): start {costs.start:.2f} s; first "
            f"step {costs.first_step:.3f} s (eager; a steady step {costs.step * 1e3:.2f} ms); "
            f"{graphs}; padded batch sizes met {len(costs.padded_sizes)}, {costs.rare()} of them "
            f"in fewer than {RARE_STEPS} steps ({costs.padded_sizes}); pool logits "
            f"{costs.pool_logits:.2f} s ({pool} records from device memory)")


def query_seconds(shape: GridShape, data: ArrayDataset, device: torch.device) -> float:
    """The logits of an untrained model of the recipe's architecture on the whole pool, from
    host memory (as the query and attack tasks read a model's pool), median of 3."""
    from jobs.models import build_model

    model = build_model(shape.settings.model, shape.input_shape, shape.num_classes).to(device)
    times = []
    for _ in range(3):
        start = time.perf_counter()
        predict_logits(model, data.pool_x, device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def exactness(shape: GridShape, data: ArrayDataset, device: torch.device,
              options: TrainOptions) -> Optional[float]:
    """On a GPU: the largest relative difference between a short training's weights replayed
    as CUDA graphs and the same training eagerly on the same padded batches (None elsewhere)."""
    if device.type != "cuda":
        return None
    from jobs.engine.steps import PaddedSteps
    import jobs.engine.training as training

    settings = dataclasses.replace(shape.settings, epochs=2)
    mask = draw_mask(len(data.pool_y), min(1.0, 4 * settings.batch_size / len(data.pool_y)), 7, False)
    captured = training.train_model(settings, data, mask, 3, device, options=options)
    real = training._stepper

    def padded_eagerly(run, pool_x, pool_y, index, device_, options_):
        stepper = real(run, pool_x, pool_y, index, device_, options_)
        return PaddedSteps(run, pool_x, pool_y, index, stepper.clipper)

    training._stepper = padded_eagerly
    try:
        eager = training.train_model(settings, data, mask, 3, device, options=options)
    finally:
        training._stepper = real
    return max(float((captured.state_dict[name] - tensor).abs().max() / tensor.abs().max().clamp_min(1e-12))
               for name, tensor in eager.state_dict.items())


# --- the report ----------------------------------------------------------------------------------


def ratios(seconds: dict[str, float]) -> dict[str, float]:
    """DP ÷ plain like for like: each step as training takes it (on a GPU both graphed and
    padded), and both eager."""
    return {"as trained": seconds["DP as trained"] / seconds["plain as trained"],
            "eager": seconds["DP eager"] / seconds["plain"]}


def extrapolate(shape: GridShape, fixed: float, per_step: float) -> float:
    """Seconds to train the grid: every model's fixed cost plus its steps at `per_step` each."""
    return len(shape.models) * fixed + shape.total_steps * per_step



def minutes(seconds: float) -> str:
    """A wall in minutes as the report prints it: one decimal from a minute up, four below
    (a smoke grid's seconds would read 0.0, which `bench.gpu_sweep` cannot compare with)."""
    return f"{seconds / 60:.1f}" if seconds >= 60 else f"{seconds / 60:.4f}"

def machine() -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan
    if torch.cuda.is_available():
        return f"{torch.cuda.get_device_name()}, torch {torch.__version__}, load {load:.2f}"
    return f"CPU ({os.cpu_count()} cores), torch {torch.__version__}, load {load:.2f}"


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.grid", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--experiment", default=DEFAULT_EXPERIMENT, help="an experiment of conf/experiment")
    parser.add_argument("--device", default="auto", help="cpu, cuda or auto (cuda when present)")
    parser.add_argument("--packings", default=None,
                        help="KxN to measure, comma-separated: K models per task, N tasks side "
                             "by side (the shipped KxN is always measured too; default "
                             "1x1,2x1,4x1,1x2,1x4, with --reduced 1x1,2x1,1x2)")
    parser.add_argument("--rounds", type=int, default=20, help="interleaved rounds of the step times")
    parser.add_argument("--reduced", action="store_true",
                        help="a pool of 640 records, 1 epoch of batch 32, packings 1x1, 2x1, 1x2 "
                             "and the shipped one: about a minute on a CPU")
    parser.add_argument("--steps-only", action="store_true",
                        help="the step times alone (seconds, not minutes: for comparing options)")
    parser.add_argument("--profile", type=int, default=0, metavar="ROWS",
                        help="also print the eager DP step's ROWS costliest kernels (torch.profiler)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for the experiment (key=value)")
    args = parser.parse_args(argv)
    keep_freed_memory()  # as a sweep's task does (`sweeper.cluster.tasks`)
    if args.packings is None:
        args.packings = "1x1,2x1,1x2" if args.reduced else "1x1,2x1,4x1,1x2,1x4"
    if args.reduced:
        args.rounds = 5
    try:
        packings = {tuple(int(v) for v in item.split("x")) for item in args.packings.split(",") if item}
    except ValueError:
        packings = {(0, 0)}
    if any(len(p) != 2 or min(p) < 1 for p in packings):
        parser.error(f"--packings {args.packings!r}: give KxN pairs of integers ≥ 1, e.g. 1x1,4x1")
    from sweeper.config import ConfigError
    from sweeper.credentials import hide_secret_values

    device = resolve_device(args.device)
    try:
        shape = grid_shape(args.experiment, args.overrides)
    except ConfigError as refused:  # as `python -m sweeper` says it: one message, exit 2
        print(f"error: {hide_secret_values(str(refused))}", file=sys.stderr)
        sys.exit(2)
    if args.reduced:
        shape = reduce(shape)
    settings, options = shape.settings, shape.options.on(device)
    print(f"bench.grid {shape.experiment}: {machine()}", flush=True)
    print(f"  plan: {len(shape.models)} models of {settings.model}, {settings.epochs} epochs of batch "
          f"{settings.batch_size}, pool {shape.pool_size} records, {shape.total_steps} steps in all; "
          f"shipped K = {shape.shipped_k}, N = {shape.shipped_n}", flush=True)
    print(f"  precision {settings.precision}; channels_last {options.channels_last}, tf32 "
          f"{options.tf32}", flush=True)
    data = noise_records(shape)
    shadow_records = int(round(shape.pool_size * shape.shadow_rate))
    small_records = min(records for _, _, records in shape.models)
    cache = DictCache()
    for records in {shadow_records, small_records}:
        calibrate_noise(settings, PoissonSchedule(records, settings.batch_size).sample_rate, cache)

    seconds = step_times(shape, data, device, args.rounds, args.profile)
    plain = seconds["plain"]
    print(f"  a step at batch {settings.batch_size} (median of {args.rounds}; × plain):", flush=True)
    for mode, value in seconds.items():
        print(f"    {mode:28s} {value * 1e3:8.2f} ms  {value / plain:5.2f}×", flush=True)
    print(f"  DP ÷ plain, like for like: {ratios(seconds)['as trained']:.2f}× as trained "
          f"(ε = ∞ through the same loop), {ratios(seconds)['eager']:.2f}× both eager", flush=True)
    if args.steps_only:
        return
    dp_step = seconds["DP as trained"]
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "records.npz")
        np.savez(path, pool_x=data.pool_x, pool_y=data.pool_y, test_x=data.test_x, test_y=data.test_y)
        measured = [train_packed(shape, data, path, small_records, 1, 1, device, cache, options),
                    train_packed(shape, data, path, shadow_records, 1, 1, device, cache, options)]
        for k, n in sorted(packings | {(shape.shipped_k, shape.shipped_n)}):
            if (k, n) == (1, 1):
                continue
            try:
                measured.append(train_packed(shape, data, path, shadow_records, k, n, device, cache,
                                             options))
            except Exception as error:  # noqa: BLE001 - say which packing failed, measure the rest
                print(f"  K = {k}, N = {n} failed: {type(error).__name__}: {error}", flush=True)
    print(f"\n  {'K':>2} {'N':>2} {'records':>8} {'models':>6} {'s/model':>8} {'steps':>6} "
          f"{'outside':>8} {'peak GB':>8}")
    for m in measured:  # outside the steps: only meaningful for a model trained alone
        outside = f"{1 - m.steps * dp_step / m.wall:.0%}" if m.models == 1 else "-"
        print(f"  {m.k:>2} {m.n:>2} {m.records:>8} {m.models:>6} {m.seconds_per_model:>8.2f} "
              f"{m.steps:>6} {outside:>8} {m.peak_gb:>8.2f}", flush=True)
    small, alone = measured[0], measured[1]
    # Alone: wall = fixed + steps × per_step, through the small and the shadow-sized model
    # (a slope lost in noise, as for tiny models on a busy CPU: no fixed part).
    slope = ((alone.wall - small.wall) / (alone.steps - small.steps)
             if alone.steps > small.steps else 0.0)
    per_step = slope if slope > 0 else alone.wall / alone.steps
    fixed = max(alone.wall - alone.steps * per_step, 0.0)
    query = query_seconds(shape, data, device)
    print(f"\n  query task (logits of the {shape.pool_size}-record pool from host memory): {query:.2f} s")
    print(f"  one model alone: {fixed:.2f} s fixed + {per_step * 1e3:.2f} ms a step")
    print(fixed_costs_line(fixed_costs(shape, data, shadow_records, device, cache, options),
                           shape.pool_size), flush=True)
    walls = {}
    for m in measured[1:]:
        # K·N models at once overlap their fixed costs as well as their steps.
        shared_fixed = fixed / m.models
        packed_step = max(m.seconds_per_model - shared_fixed, 0.0) / m.steps
        walls[(m.k, m.n)] = extrapolate(shape, shared_fixed, packed_step)
    shipped = walls.get((shape.shipped_k, shape.shipped_n), math.nan)
    best = min(walls, key=walls.__getitem__)
    print(f"  the grid's training ({len(shape.models)} models, {shape.total_steps} steps): "
          f"{minutes(shipped)} min at the shipped K = {shape.shipped_k}, N = {shape.shipped_n}; "
          f"{minutes(walls[best])} min at the best measured, K = {best[0]}, N = {best[1]} "
          f"({walls[best] / len(shape.models):.2f} s a model)")
    difference = exactness(shape, data, device, options)
    if difference is not None:
        print(f"  graphs against eager, 2 epochs: largest relative weight difference {difference:.1e}")


if __name__ == "__main__":
    main()
