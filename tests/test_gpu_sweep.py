"""`python -m bench.gpu_sweep`'s arithmetic and parsing, on outputs written by hand (and the
summary line as `sweeper.task_times` writes it)."""

from __future__ import annotations

import math

import pytest

from bench.gpu_sweep import (busy_share, devices, extrapolate, parse_gpu_samples,
                             parse_grid_extrapolation, parse_wall_split, report)
from sweeper.task_times import kind_times, wall_split_line

SWEEP_LOG = """
done in 100.0 s: trained 12 of 12 models, computed 8 of 8 cells
""" + wall_split_line(kind_times({"training": [(0.0, 60.0), (10.0, 70.0)],
                                  "attacks": [(65.0, 75.0), (70.0, 80.0)]}))
GRID_LOG = ("  the grid's training (12 models, 480 steps): 1.0 min at the shipped K = 4, N = 1; "
            "0.9 min at the best measured, K = 8, N = 1 (4.50 s a model)\n")


def test_the_summary_line_parses_back():
    assert parse_wall_split(SWEEP_LOG) == {
        "training": {"wall": 70.0, "tasks": 2, "task_seconds": 120.0},
        "queries": {"wall": 0.0, "tasks": 0, "task_seconds": 0.0},
        "attacks": {"wall": 15.0, "tasks": 2, "task_seconds": 20.0},
        "sweep": {"wall": 100.0}}
    assert parse_wall_split("Traceback ...") == {}


def test_nvidia_smi_samples_and_the_busy_share():
    samples = parse_gpu_samples("utilization.gpu [%]\n90\n[N/A]\n 70 %\n0\n")
    assert samples == [90.0, 70.0, 0.0]
    assert busy_share(samples) == pytest.approx(160 / 3 / 100)
    assert busy_share([]) is None


def test_devices_are_counted_and_a_model_without_one_shows():
    assert devices([{"device": "cuda:0 (NVIDIA H100)"}, {"device": "cuda:0 (NVIDIA H100)"},
                    {"device": "cpu"}, {}]) == {"cuda:0 (NVIDIA H100)": 2, "cpu": 1, "none": 1}


def test_the_full_grid_scales_training_by_steps_and_the_rest_by_tasks():
    split = parse_wall_split(SWEEP_LOG)
    walls = extrapolate(split, 480, {"steps": 4800, "queries": 0, "attacks": 20})
    assert walls == {"training": 700.0, "queries": 0.0, "attacks": 150.0}
    assert math.isnan(extrapolate(split, 480, {"steps": 1, "queries": 5, "attacks": 1})["queries"])


def test_the_report_compares_with_bench_grid_and_names_a_model_off_the_gpu():
    assert parse_grid_extrapolation(GRID_LOG) == (12, 480, 60.0)
    metas = [{"device": "cuda:0 (NVIDIA H100)", "steps": 40}] * 11 + [{"device": "cpu", "steps": 40}]
    lines = report("mnist_lira", SWEEP_LOG, "50\n100\n", GRID_LOG, metas,
                   {"steps": 4800, "queries": 0, "attacks": 20})
    text = "\n".join(lines)
    assert "at least 15.0 s outside every task" in text  # 100 − 70 − 15
    assert "GPU busy share over the sweep: 75%" in text
    assert "on a GPU: 11 (NOT every one)" in text
    assert "training wall 70.0 s (12 models, 480 steps) against bench.grid's 60.0 s (the same " \
           "models): 1.17× (NOT within 15 %)" in text
    assert "training 11.7 min; queries 0.0 min; attacks 2.5 min" in text
    assert "NOT the same models" in "\n".join(report("mnist_lira", SWEEP_LOG, "", GRID_LOG,
                                                    metas[:3], {"steps": 1, "queries": 0,
                                                                "attacks": 1}))
