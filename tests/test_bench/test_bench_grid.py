"""`python -m bench.grid` at its reduced size: the command CI keeps working (its figures are
the machine's, so only their presence and their arithmetic are checked)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

@pytest.mark.slow  # a benchmark's smoke run (20 s of training every packing): `make test-slow`
def test_the_grid_benchmark_runs_reduced_and_reports_every_packing():
    done = subprocess.run([sys.executable, "-m", "bench.grid", "--reduced", "--experiment",
                           "mnist_lira", "--packings", "1x1,1x2"], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "plan: 455 models of mnist_cnn, 1 epochs of batch 32, pool 640 records" in out
    for mode in ("plain", "plain as trained", "DP eager", "DP as trained"):
        assert re.search(rf"^\s+{mode}\s+[\d.]+ ms\s+[\d.]+×$", out, re.M), mode
    rows = re.findall(r"^\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+([\d.]+)\s+(\d+)\s+(\S+)\s+\S+$", out, re.M)
    packings = [(int(k), int(n), int(models)) for k, n, _, models, *_ in rows]
    # the small and the shadow-sized model alone, two processes, and the shipped K = 4 on a GPU
    assert packings == [(1, 1, 1), (1, 1, 1), (1, 2, 2), (4, 1, 4)]
    assert all(float(seconds) > 0 for *_, seconds, _, _ in rows)
    planned = re.search(r"pool 640 records, (\d+) steps in all", out)
    grid = re.search(r"the grid's training \(455 models, (\d+) steps\): ([\d.]+) min at the "
                     r"shipped K = 4, N = 1; ([\d.]+) min at the best measured", out)
    assert planned and grid and grid.group(1) == planned.group(1)
    assert 0 < float(grid.group(3)) <= float(grid.group(2))  # the best is at most the shipped


def test_the_grid_benchmark_trains_with_the_sweeps_options_as_overridden():
    """`bench.grid` measures what a sweep would run: its overrides reach the training options
    (`sweeper.grid.plan.train_options_of`), and the defaults are the sweep's."""
    from bench.grid import grid_shape
    from jobs.engine.training import TrainOptions

    shipped = grid_shape("mnist_lira", []).options
    assert (shipped.tf32, shipped.channels_last) == (True, False)
    changed = grid_shape("mnist_lira", ["train.tf32=false", "train.channels_last=true",
                                        "train.checkpoint_seconds=5"]).options
    assert changed == TrainOptions(tf32=False, channels_last=True, checkpoint_seconds=5.0)


def test_the_step_times_alone_run_in_seconds():
    """`--steps-only` (what `make test` runs of this command): the options line, the three step
    times and `--profile`'s table, no model trained.  On a CPU the GPU-only options are off
    (`TrainOptions.on`), whatever is asked."""
    done = subprocess.run([sys.executable, "-m", "bench.grid", "--reduced", "--steps-only",
                           "--profile", "5", "train.channels_last=true"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    on_gpu = "NVIDIA" in out.splitlines()[0]
    assert f"channels_last {on_gpu}, tf32 {on_gpu}" in out
    assert "Self CPU time total" in out
    for mode in ("plain", "plain as trained", "DP eager", "DP as trained"):
        assert re.search(rf"^\s+{mode}\s+[\d.]+ ms\s+[\d.]+×$", out, re.M), mode
    assert "s/model" not in out  # no model was trained
    times = {mode: float(value) for mode, value in re.findall(
        r"^\s+(plain|plain as trained|DP eager|DP as trained)\s+([\d.]+) ms", out, re.M)}
    like = re.search(r"DP ÷ plain, like for like: ([\d.]+)× as trained \(ε = ∞ through the same "
                     r"loop\), ([\d.]+)× both eager", out)
    assert like, out
    # the printed ratios are the printed times' (to their rounding)
    assert float(like.group(1)) == pytest.approx(times["DP as trained"] / times["plain as trained"],
                                                 rel=0.02, abs=0.01)
    assert float(like.group(2)) == pytest.approx(times["DP eager"] / times["plain"], rel=0.02,
                                                 abs=0.01)


def test_dp_over_plain_is_like_for_like():
    """Each ratio divides a DP step by the plain step taken the same way (figures by hand)."""
    from bench.grid import ratios

    assert ratios({"plain": 5.0, "plain as trained": 2.0, "DP eager": 8.0,
                   "DP as trained": 3.0}) == {"as trained": 1.5, "eager": 1.6}


@pytest.mark.parametrize("override, said", [
    ("+experiment=nope", "+experiment=nope: experiment has no option 'nope'"),
    ("grid.epsilon=[-1]", "grid.epsilon: -1.0 must be > 0"),
])
def test_a_bad_override_is_one_refusal_not_a_traceback(override, said):
    """Issue 44.9: `python -m bench.grid` printed the preflight's ConfigError as a traceback."""
    done = subprocess.run([sys.executable, "-m", "bench.grid", "--reduced", "--steps-only",
                           override], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.startswith("error: invalid configuration:") and said in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
