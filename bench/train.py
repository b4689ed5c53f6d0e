"""`python -m bench.train`: what a DP-SGD step costs next to a plain one, per shipped model.

For each model and batch size it times, in interleaved rounds in this one process (machines are
shared and noisy: compare the ratios, which are taken within a round's conditions):

* `plain`  — forward, backward, optimizer step, no clipping or noise;
* `engine` — the training engine's DP step (`jobs.engine.clipping` + noise), what sweeps run;
* `opacus` — Opacus 1.6's hooks-mode DP step (GradSampleModule + DPOptimizer), the previous
  engine, for reference;

and prints medians and the ratios DP ÷ plain (on a machine shared with other jobs, `--threads 1
--clock cpu` times each step by the CPU time it took, not by the wall clock, which also counts
its waits for a core).  `--memory` adds each mode's peak resident memory,
measured in a fresh subprocess per (model, batch, mode), as a ratio to plain.  On CUDA (when
present, or with `--device cuda`) the same runs on the GPU, synchronised around each step.

`--routes` times, instead of steps, each convolution's ways to its per-record weight gradients
(`jobs.engine.layer_rules.conv2d.METHODS`) and its two ways to its norms and clipped sum (keeping the
per-record gradients, book-keeping) on the whole batch, and marks what the engine picks.

Two more sets of modes run in the same interleaved rounds:

* `stacked_K` — one DP step of K models trained together (`jobs.engine.stacked`, `--k`, default 4
  and 16): the throughput in models·steps/s next to K = 1 (the engine's own step).  Only
  linear stacks are stacked; a CNN group trains its models one after another, which is K = 1's
  throughput by construction, so it is not timed again;
* the switches (with `--switches`): `plain_bf16` and `engine_bf16` (bfloat16
  autocast, `train.precision`), `plain_compile` (`torch.compile`, `train.compile`; a DP step
  is never compiled: the engine needs every layer's output gradient, which a compiled graph
  does not expose).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import warnings
from typing import Callable, Optional

import torch
from torch import nn

from jobs.engine.clipping import PerSampleClipper
from jobs.engine.host_memory import keep_freed_memory
from jobs.engine.layer_rules.conv2d import METHODS
from jobs.models import build_model

#: Each shipped model with the input shape and classes its experiments train it on.
MODELS = {
    "mnist_cnn": ((1, 28, 28), 10),
    "cifar10_cnn": ((3, 32, 32), 10),
    "relu_mlp256x2": ((600,), 100),   # Purchase-100
    "tanh_mlp64": ((107,), 2),        # UCI Adult
    "logistic_regression": ((107,), 2),
}
MODES = ("plain", "engine", "opacus")


SWITCH_MODES = ("plain_bf16", "engine_bf16", "plain_compile")


def _step_function(mode: str, name: str, batch: int, device: torch.device) -> Callable[[], None]:
    """One training step of `mode` on a fixed random batch (the cost does not depend on values)."""
    shape, classes = MODELS[name]
    if mode.startswith("stacked_"):
        return _stacked_step_function(name, batch, int(mode.split("_")[1]), device)
    torch.manual_seed(0)
    model = build_model(name, shape, classes).to(device)
    x = torch.rand(batch, *shape, device=device)
    y = torch.randint(0, classes, (batch,), device=device)
    if mode.startswith("plain"):
        from jobs.engine.steps import mean_gradient

        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        forward = torch.compile(model) if mode == "plain_compile" else model
        precision = "bf16" if mode == "plain_bf16" else "fp32"

        def plain_step():
            mean_gradient(forward, optimizer, x, y, precision)
            optimizer.step()
        return plain_step
    if mode.startswith("engine"):
        from jobs.engine.randomness import TrainingRng
        from jobs.engine.steps import clipped_sum, noisy_step

        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        clipper, rng = PerSampleClipper(model, 1.0), TrainingRng(0, device)
        precision = "bf16" if mode == "engine_bf16" else "fp32"

        def engine_step():
            clipped_sum(model, clipper, x, y, precision)
            noisy_step(model, optimizer, 1.0, batch, rng)
        return engine_step
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer

    module = GradSampleModule(model)
    optimizer = DPOptimizer(torch.optim.SGD(module.parameters(), lr=0.01, momentum=0.9),
                            noise_multiplier=1.0, max_grad_norm=1.0, expected_batch_size=batch)

    def step():
        optimizer.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(module(x), y).backward()
        optimizer.step()
    return step


def _stacked_step_function(name: str, batch: int, k: int,
                           device: torch.device) -> Callable[[], None]:
    """One DP step of K models stacked (`jobs.engine.stacked`), each on its own batch of `batch`."""
    from jobs.engine.accounting import PoissonSchedule
    from jobs.engine.randomness import TrainingRng
    from jobs.engine.stacked import _Stack, _stacked_step
    from jobs.engine.training import ModelRun, TrainSettings

    shape, classes = MODELS[name]
    settings = TrainSettings(model=name, epochs=1, batch_size=batch, lr=0.01, momentum=0.9,
                             max_grad_norm=1.0, accountant="rdp", epsilon=1.0, delta=1e-5)
    runs = []
    for seed in range(k):
        torch.manual_seed(seed)
        model = build_model(name, shape, classes).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        runs.append(ModelRun(settings, model, optimizer, TrainingRng(seed, device), None, k * batch,
                             schedule=PoissonSchedule(k * batch, k * batch), noise_multiplier=1.0))
    stack = _Stack(runs)
    pool_x = torch.rand(k * batch, *shape, device=device)
    pool_y = torch.randint(0, classes, (k * batch,), device=device)
    index = [torch.arange(k * batch, device=device)] * k
    drawn: list[Optional[torch.Tensor]] = [torch.arange(i * batch, (i + 1) * batch, device=device) for i in range(k)]
    has_bias = [bias is not None for bias in stack.biases]
    empty = torch.zeros(0, dtype=torch.long, device=device)
    return lambda: _stacked_step(stack, runs, list(range(k)), drawn, index, pool_x, pool_y,
                                 has_bias, empty, settings, device)


def route_times(name: str, batch: int, rounds: int, device: torch.device) -> list[dict]:
    """Each convolution of `name` at `batch`, in milliseconds (medians of `rounds` interleaved
    rounds) on the whole batch in the engine's slices: each per-record route of
    `jobs.engine.layer_rules.conv2d.METHODS` that takes the layer, and the route the engine picks (on
    a CPU by geometry, `_cpu_method`; on a GPU by timing, `_fastest`); then both ways to the
    layer's norms and clipped sum, as the engine runs them: keeping the per-record gradients (by the
    picked route, their norms, their weighted sum) and book-keeping (`norms`, Gram or per
    record, then one weighted weight gradient, `accumulate`), and which the engine keeps."""
    from jobs.engine.layer_rules.base import Seen, squared_norms, weighted_sum
    from jobs.engine.layer_rules.conv2d import _Conv2dRule, _cpu_method, _fastest, takes

    shape, classes = MODELS[name]
    torch.manual_seed(0)
    model = build_model(name, shape, classes).to(device)
    convs = [module for module in model.modules() if isinstance(module, nn.Conv2d)]
    inputs, outputs = {}, {}

    def keep(module, args, output):
        inputs[module], outputs[module] = args[0].detach(), output
        output.retain_grad()
    handles = [conv.register_forward_hook(keep) for conv in convs]
    x = torch.rand(batch, *shape, device=device)
    nn.functional.cross_entropy(model(x), torch.randint(0, classes, (batch,), device=device),
                                reduction="sum").backward()
    for handle in handles:
        handle.remove()
    rule, factors = _Conv2dRule(), torch.rand(batch, device=device)
    rows = []
    for conv in convs:
        a, g = inputs[conv], outputs[conv].grad
        seen, step = Seen(conv, a), _Conv2dRule.samples_slice(conv, g)

        def whole_batch(take, conv=conv, a=a, g=g, step=step):
            return lambda: [take(conv, a[i:i + step], g[i:i + step]) for i in range(0, batch, step)]

        def kept(seen=seen, g=g):
            samples = rule.per_sample(seen, g)
            squared_norms(samples, batch, device)
            return [weighted_sum(factors, per_record) for _, per_record in samples]

        def book_kept(seen=seen, g=g):
            rule.norms(seen, g)
            rule.accumulate(seen, g, factors)
        ways = {**{method: whole_batch(take) for method, take in METHODS.items()
                   if takes(method, conv)}, "keep": kept, "book_keep": book_kept}
        times: dict[str, list[float]] = {way: [] for way in ways}
        for run in ways.values():
            run()  # warm-up
        for _ in range(rounds):
            for way, run in ways.items():
                times[way].append(_timed(run, device))
        picked = _fastest(conv, a[:step], g[:step]) if device.type == "cuda" else _cpu_method(conv, g)
        keeps = rule.keeps_samples(seen, g, sum(p.numel() for p in conv.parameters()))
        layer = (f"{conv.in_channels}→{conv.out_channels} k{conv.kernel_size[0]} "
                 f"s{conv.stride[0]} on {a.shape[2]}×{a.shape[3]}")
        rows.append({"model": name, "layer": layer, "picked": picked, "keeps_samples": keeps,
                     "gram_norms": rule._ghost(conv, g.shape[2] * g.shape[3]),
                     **{f"{way}_ms": 1e3 * statistics.median(values)
                        for way, values in times.items()}})
    return rows


#: What a step's time is read from: the wall clock, or this process's CPU time (on a machine
#: shared with other jobs, a step's wall time also counts the time it waited for a core; with
#: `--threads 1`, CPU time is the step's own work).
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def _timed(step: Callable[[], None], device: torch.device, clock: str = "wall") -> float:
    now = CLOCKS[clock]
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = now()
    step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return now() - start


def time_modes(name: str, batch: int, rounds: int, device: torch.device,
               modes: tuple[str, ...] = MODES, clock: str = "wall") -> dict[str, float]:
    """Median seconds per step of each mode, over `rounds` interleaved rounds after a warm-up
    (two for compiled modes, whose first calls compile), on `clock` (`CLOCKS`)."""
    steps = {mode: _step_function(mode, name, batch, device) for mode in modes}
    for mode, step in steps.items():
        for _ in range(2 if mode.endswith("compile") else 1):
            step()
    times: dict[str, list[float]] = {mode: [] for mode in modes}
    for index in range(rounds):
        order = modes[index % len(modes):] + modes[:index % len(modes)]  # rotate who goes first
        for mode in order:
            times[mode].append(_timed(steps[mode], device, clock))
    return {mode: statistics.median(values) for mode, values in times.items()}


def stacks(name: str) -> bool:
    """Whether `jobs.engine.stacked` stacks this model (else a group trains one model after another)."""
    from jobs.engine.linear_stack import is_linear_stack

    shape, classes = MODELS[name]
    return is_linear_stack(build_model(name, shape, classes))


def peak_memory(name: str, batch: int, mode: str, device: str) -> float:
    """Peak memory (GB) that three steps add in a fresh process, above the model and batch
    already in memory: the resident set's high-water mark (Linux's VmHWM, reset after set-up so
    the imports' own peak cannot hide a small model's) on a CPU, the CUDA allocator's on a GPU."""
    out = subprocess.run([sys.executable, "-m", "bench.train", "--probe-memory", name, str(batch),
                          mode, device], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def _resident_kb(field: str) -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field + ":"))


def _probe_memory(name: str, batch: int, mode: str, device: str) -> None:
    device_ = torch.device(device)
    step = _step_function(mode, name, batch, device_)
    if device_.type == "cuda":
        before = torch.cuda.memory_allocated(device_)
        torch.cuda.reset_peak_memory_stats(device_)
    else:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")  # resets VmHWM to the current resident set
        before = _resident_kb("VmRSS") * 1024
    for _ in range(3):
        step()
    peak = (torch.cuda.max_memory_allocated(device_) if device_.type == "cuda"
            else _resident_kb("VmHWM") * 1024)
    print(max(peak - before, 0) / 1e9)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.train", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated model names")
    parser.add_argument("--batch-sizes", default="128,512", help="comma-separated batch sizes")
    parser.add_argument("--rounds", type=int, default=9,
                        help="interleaved rounds per model and batch (median taken); cifar10_cnn "
                             "takes a third of them, at least 3")
    parser.add_argument("--device", default="auto", help="cpu, cuda or auto (cuda when present)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                        help="time steps by the wall clock or by this process's CPU time (on a "
                             "shared machine, with --threads 1: the work itself; CPU only)")
    parser.add_argument("--memory", action="store_true",
                        help="also peak memory per mode (a subprocess each: slower)")
    parser.add_argument("--k", default="4,16",
                        help="comma-separated K (models per task) to time stacked, beside K = 1 "
                             "(empty: none)")
    parser.add_argument("--switches", action="store_true",
                        help="also the bf16 and torch.compile modes (slow on a CPU: bf16 "
                             "cifar10_cnn steps take seconds)")
    parser.add_argument("--routes", action="store_true",
                        help="instead of steps, time each convolution's per-record gradient "
                             "routes and its keep / book-keep ways at each batch size, and mark "
                             "what the engine picks")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--probe-memory", nargs=4, metavar=("MODEL", "BATCH", "MODE", "DEVICE"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    keep_freed_memory()  # as a sweep's task does (`sweeper.cluster.tasks`)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.probe_memory:
        name, batch, mode, device = args.probe_memory
        _probe_memory(name, int(batch), mode, device)
        return
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available()
                          else "cpu" if args.device == "auto" else args.device)
    if args.clock == "cpu" and device.type == "cuda":
        parser.error("--clock cpu times CPU steps only: a GPU's work is not this process's CPU time")
    rows = []
    names = [n for n in args.models.split(",") if n]
    unknown = sorted(set(names) - set(MODELS))
    if unknown:
        parser.error(f"unknown model(s) {unknown}; choose from {sorted(MODELS)}")
    ks = [int(k) for k in args.k.split(",") if k]
    if any(k < 2 for k in ks):
        parser.error(f"--k {args.k}: each K must be ≥ 2 (K = 1 is the engine's own step)")
    if args.routes:
        for name in names:
            for batch in (int(b) for b in args.batch_sizes.split(",")):
                for row in route_times(name, batch, args.rounds, device):
                    rows.append(row)
                    if not args.json:
                        routed = row["keeps_samples"] or not row["gram_norms"]
                        routes = "  ".join(f"{'*' if routed and method == row['picked'] else ' '}{method} "
                                           f"{row[f'{method}_ms']:7.2f}" for method in METHODS
                                           if f"{method}_ms" in row)
                        keep, book = ("*", " ") if row["keeps_samples"] else (" ", "*")
                        norms = "Gram" if row["gram_norms"] else "per record"
                        print(f"{name:12s} batch {batch:5d} {device.type} {row['layer']:22s} "
                              f"ms: {routes} | {keep}keep {row['keep_ms']:7.2f}  {book}book-keep "
                              f"({norms} norms) {row['book_keep_ms']:7.2f}", flush=True)
        if args.json:
            print(json.dumps(rows, indent=2))
        return
    for name in names:
        for batch in (int(b) for b in args.batch_sizes.split(",")):
            rounds = max(3, args.rounds // 3) if name == "cifar10_cnn" else args.rounds
            modes = (*MODES, *(SWITCH_MODES if args.switches else ()),
                     *((f"stacked_{k}" for k in ks) if stacks(name) else ()))
            seconds = time_modes(name, batch, rounds, device, modes, args.clock)
            row = {"model": name, "batch": batch, "device": device.type,
                   **{f"{mode}_ms": 1e3 * s for mode, s in seconds.items()},
                   "engine_ratio": seconds["engine"] / seconds["plain"],
                   "opacus_ratio": seconds["opacus"] / seconds["plain"],
                   # models·steps/s; a CNN group interleaves: K = 1's throughput for every K
                   **{f"k{k}_models_steps_per_s": k / seconds.get(f"stacked_{k}", k * seconds["engine"])
                      for k in [1, *ks]}}
            if args.memory:
                peaks = {mode: peak_memory(name, batch, mode, device.type) for mode in MODES}
                row.update({f"{mode}_peak_gb": peak for mode, peak in peaks.items()},
                           engine_memory_ratio=peaks["engine"] / peaks["plain"],
                           opacus_memory_ratio=peaks["opacus"] / peaks["plain"])
            rows.append(row)
            if not args.json:
                memory = (f"  step memory plain {row['plain_peak_gb']:.3f} GB, engine "
                          f"{row['engine_memory_ratio']:.2f}×, opacus {row['opacus_memory_ratio']:.2f}×"
                          if args.memory else "")
                switches = ("" if not args.switches else
                            f"\n{'':20s} switches: plain bf16 {row['plain_bf16_ms'] / row['plain_ms']:.2f}×, "
                            f"plain compile {row['plain_compile_ms'] / row['plain_ms']:.2f}×, "
                            f"engine bf16 {row['engine_bf16_ms'] / row['engine_ms']:.2f}× of fp32 eager")
                throughput = ", ".join(f"K={k} {row[f'k{k}_models_steps_per_s']:.1f}"
                                       for k in [1, *ks])
                print(f"{name:20s} batch {batch:5d} {device.type}: plain {row['plain_ms']:9.2f} ms  "
                      f"engine {row['engine_ms']:9.2f} ms ({row['engine_ratio']:.2f}×)  opacus "
                      f"{row['opacus_ms']:9.2f} ms ({row['opacus_ratio']:.2f}×){memory}{switches}"
                      f"\n{'':20s} DP models·steps/s: {throughput}"
                      f"{'' if stacks(name) else ' (interleaved: K = 1 throughput)'}", flush=True)
    if args.json:
        print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
