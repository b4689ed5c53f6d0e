"""`python -m bench.train`: what a DP-SGD step costs next to a plain one, per shipped model.

For each model and batch size it times, in interleaved rounds in this one process (machines are
shared and noisy: compare the ratios, which are taken within a round's conditions):

* `plain`  — forward, backward, optimizer step, no clipping or noise;
* `engine` — the training engine's DP step (`jobs.clipping` + noise), what sweeps run;
* `opacus` — Opacus 1.6's hooks-mode DP step (GradSampleModule + DPOptimizer), the previous
  engine, for reference;

and prints medians and the ratios DP ÷ plain.  `--memory` adds each mode's peak resident memory,
measured in a fresh subprocess per (model, batch, mode), as a ratio to plain.  On CUDA (when
present, or with `--device cuda`) the same runs on the GPU, synchronised around each step.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import warnings
from typing import Callable

import torch
from torch import nn

from jobs.clipping import PerSampleClipper
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


def _step_function(mode: str, name: str, batch: int, device: torch.device) -> Callable[[], None]:
    """One training step of `mode` on a fixed random batch (the cost does not depend on values)."""
    shape, classes = MODELS[name]
    torch.manual_seed(0)
    model = build_model(name, shape, classes).to(device)
    x = torch.rand(batch, *shape, device=device)
    y = torch.randint(0, classes, (batch,), device=device)
    if mode == "plain":
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

        def step():
            optimizer.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
        return step
    if mode == "engine":
        from jobs.training import _dp_step, _Rng

        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        clipper, rng = PerSampleClipper(model, 1.0), _Rng(0, device)
        return lambda: _dp_step(model, clipper, optimizer, x, y, 1.0, batch, rng)
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


def _timed(step: Callable[[], None], device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def time_modes(name: str, batch: int, rounds: int, device: torch.device) -> dict[str, float]:
    """Median seconds per step of each mode, over `rounds` interleaved rounds after a warm-up."""
    steps = {mode: _step_function(mode, name, batch, device) for mode in MODES}
    for step in steps.values():
        step()
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    for index in range(rounds):
        order = MODES[index % len(MODES):] + MODES[:index % len(MODES)]  # rotate who goes first
        for mode in order:
            times[mode].append(_timed(steps[mode], device))
    return {mode: statistics.median(values) for mode, values in times.items()}


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
    parser.add_argument("--memory", action="store_true",
                        help="also peak memory per mode (a subprocess each: slower)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--probe-memory", nargs=4, metavar=("MODEL", "BATCH", "MODE", "DEVICE"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.probe_memory:
        name, batch, mode, device = args.probe_memory
        _probe_memory(name, int(batch), mode, device)
        return
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available()
                          else "cpu" if args.device == "auto" else args.device)
    rows = []
    names = [n for n in args.models.split(",") if n]
    unknown = sorted(set(names) - set(MODELS))
    if unknown:
        parser.error(f"unknown model(s) {unknown}; choose from {sorted(MODELS)}")
    for name in names:
        for batch in (int(b) for b in args.batch_sizes.split(",")):
            rounds = max(3, args.rounds // 3) if name == "cifar10_cnn" else args.rounds
            seconds = time_modes(name, batch, rounds, device)
            row = {"model": name, "batch": batch, "device": device.type,
                   **{f"{mode}_ms": 1e3 * s for mode, s in seconds.items()},
                   "engine_ratio": seconds["engine"] / seconds["plain"],
                   "opacus_ratio": seconds["opacus"] / seconds["plain"]}
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
                print(f"{name:20s} batch {batch:5d} {device.type}: plain {row['plain_ms']:9.2f} ms  "
                      f"engine {row['engine_ms']:9.2f} ms ({row['engine_ratio']:.2f}×)  opacus "
                      f"{row['opacus_ms']:9.2f} ms ({row['opacus_ratio']:.2f}×){memory}", flush=True)
    if args.json:
        print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
