"""`python -m bench.gpu_sweep`'s arithmetic and parsing, on outputs written by hand (and the
summary line as `sweeper.task_times` writes it)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from bench.gpu_sweep import (busy_share, devices, differences, extrapolate, main,
                             model_shapes, parse_gpu_samples, parse_grid_extrapolation,
                             parse_wall_split, report, stand_in, sweep_plan)
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


def test_a_grid_too_small_to_time_says_so_rather_than_divide_by_nothing():
    """A smoke grid on the CPU trains in seconds: bench.grid prints minutes to four places under
    one (it printed 0.0, and the report divided by it: `make test-slow`'s GPU session failed)."""
    from bench.grid import minutes

    assert (minutes(1.44), minutes(59.9), minutes(60.0), minutes(0.0)) == (
        "0.0240", "0.9983", "1.0", "0.0000")
    tiny = GRID_LOG.replace("1.0 min at the shipped", f"{minutes(0.0)} min at the shipped")
    metas = [{"device": "cpu", "steps": 40}] * 12
    text = "\n".join(report("mnist_lira", SWEEP_LOG, "", tiny, metas,
                            {"steps": 4800, "queries": 0, "attacks": 20}))
    assert "against bench.grid's 0 s: no ratio" in text


SHRINK = ["grid.epsilon=[1,8]", "grid.p=[0.3,0.7]", "grid.trial=[0]", "shadow.count=4"]


def test_the_stand_in_has_the_grids_pool_size():
    """CIFAR-10 holds 60 000 images and MNIST 70 000; the experiments hold 10 000 out for
    testing, so the grid's models draw from 50 000 and 60 000 records."""
    assert stand_in("cifar10_lira", []) == ["dataset.synthetic=true", "dataset.pool_size=50000"]
    assert stand_in("mnist_lira", SHRINK) == ["dataset.synthetic=true", "dataset.pool_size=60000"]


def test_a_sweep_of_other_models_is_refused_with_each_difference_named():
    """Issue 48.3: `dataset.synthetic=true` alone drew 2 000-record pools, so the reduced
    cifar10_lira trained 65 steps a model (the issue's 780 in all) where the grid's take 1 477
    (672 000 steps over 455 models), and its wall, scaled up
    by steps, scaled every model's fixed costs with it."""
    grid = model_shapes(sweep_plan("cifar10_lira", []))
    assert {shape.pool for shape in grid} == {50000}
    stand_in_pool = model_shapes(sweep_plan("cifar10_lira", ["dataset.synthetic=true", *SHRINK]))
    found = differences(stand_in_pool, grid)
    assert found[0] == "pool size (records) 2000 where the grid's is 50000"
    assert found[1].startswith("65 steps a model where the grid's models take 1477"), found
    real_size = model_shapes(sweep_plan("cifar10_lira", [*stand_in("cifar10_lira", []), *SHRINK]))
    assert len(real_size) == 12 and differences(real_size, grid) == []
    # every other way a model differs, planted one at a time on the grid's own shape
    first = grid[0]
    for changed, named in ((dataclasses.replace(first, model="mnist_cnn"), "architecture mnist_cnn"),
                           (dataclasses.replace(first, epochs=1), "epochs 1"),
                           (dataclasses.replace(first, batch_size=64), "batch size 64"),
                           (dataclasses.replace(first, precision="bf16"), "precision bf16")):
        assert [item.split(" where")[0] for item in differences([changed] * 12, grid)
                if not item[0].isdigit()] == [named]


def test_the_command_refuses_other_models_and_says_what_it_extrapolated_from(tmp_path, capsys):
    log = tmp_path / "sweep.log"
    log.write_text(SWEEP_LOG)
    with pytest.raises(SystemExit) as refused:
        main(["--experiment", "cifar10_lira", "--store", str(tmp_path), "--sweep-log", str(log),
              "--", "dataset.synthetic=true", *SHRINK])
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the sweep's models are not cifar10_lira's grid's") and \
        "pool size (records) 2000 where the grid's is 50000" in err, err
    main(["--experiment", "cifar10_lira", "--store", str(tmp_path), "--sweep-log", str(log),
          "--", *stand_in("cifar10_lira", []), *SHRINK])
    out = capsys.readouterr().out.splitlines()
    assert out[1] == ("  extrapolated from 12 models of cifar10_cnn (30 epochs of batch 512, fp32, "
                      "pools of 50000 records: the grid's), 1475 steps a model against the grid's "
                      "1477, to the grid's 455 models"), out
