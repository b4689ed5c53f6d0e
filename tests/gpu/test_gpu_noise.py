"""A DP step captured as a CUDA graph draws fresh noise at every replay (`jobs.engine.steps`: the
noise generator is registered with the graph), and without the registration it would not."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import torch

from jobs.engine.steps import CapturedSteps
from testkit.gpu_checks import GPU_ONLY, clean_sum, drawn_noise, noise_problems, noise_run

pytestmark = GPU_ONLY


def replays(data, device) -> tuple[list, float]:
    """Three replays' noise of one captured step (positions 1–3: the first step runs eagerly,
    the second captures the graph and replays it), and σC."""
    clean = clean_sum(data, device)
    run, stepper = noise_run(data, device, 1.5, CapturedSteps)
    with torch.cuda.stream(stepper.stream):
        stepper.step(0)
    draws = [drawn_noise(run, stepper, position, clean) for position in (1, 2, 3)]
    assert len(stepper.graphs) == 1  # one padded size: the same graph replayed
    return draws, run.noise_std


def test_each_replay_of_a_captured_step_draws_fresh_gaussian_noise(gpu_digits, cuda):
    draws, std = replays(gpu_digits, cuda)
    assert noise_problems(draws, std) == []


def test_a_graph_captured_without_registering_the_generator_fails_the_noise_check(tmp_path):
    """The negative control: the same step captured with `register_generator_state` a no-op.
    PyTorch then either refuses the capture or bakes one draw into the graph; either way the
    check above must not pass.  In a process of its own: a refused capture may leave the CUDA
    context unusable for the tests after it."""
    here = Path(__file__).resolve().parent
    code = textwrap.dedent(f"""
        import torch
        from jobs.datasets import load_dataset
        from testkit.gpu_checks import noise_problems
        from test_gpu_noise import replays
        torch.cuda.CUDAGraph.register_generator_state = lambda self, generator: None
        data = load_dataset("mnist_subset", __import__("pathlib").Path({str(tmp_path)!r}), False,
                            test_size=200).first_records(1000)
        try:
            draws, std = replays(data, torch.device("cuda"))
        except RuntimeError as refused:
            print("REFUSED", refused, flush=True)
        else:
            print("PROBLEMS", len(noise_problems(draws, std)), flush=True)
    """)
    paths = [str(here.parents[1]), str(here.parent), str(here), os.environ.get("PYTHONPATH", "")]
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, paths))})
    said = done.stdout.split()
    assert "REFUSED" in said or ("PROBLEMS" in said and said[said.index("PROBLEMS") + 1] != "0"), (
        done.stdout[-2000:], done.stderr[-3000:])
