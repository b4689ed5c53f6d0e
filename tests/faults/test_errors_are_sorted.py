"""Fault 6: a deterministic failure (here: an ε no noise can reach, a real ValueError from
Opacus's calibration) fails fast with its traceback in the cell's record and is not retried;
the other cells of the sweep complete, and every summary lists the failed cells."""

from __future__ import annotations

import time

import pytest
from ray.util.state import list_tasks

from sweeper.cli.frontier_command import EXIT_INCOMPLETE
from sweeper.cli.frontier_command import main as frontier_main
from sweeper.runner import run_sweep
from sweeper.store.artifacts import ArtifactStore

UNREACHABLE = 0.001  # below what RDP can certify at δ = 1e-5 (≈ 0.0014: rdp_epsilon_floor)


@pytest.fixture(scope="module")
def sweep(ray_local, make_tiny_config, tmp_path_factory):
    cfg = make_tiny_config(tmp_path_factory.mktemp("errors"))
    cfg.name = "errors"
    cfg.grid.epsilon = [UNREACHABLE, 4.0]
    cfg.grid.attack = ["loss", "always_member"]
    cfg.resources.train.max_retries = 3
    return cfg, run_sweep(cfg, progress=False)


def test_failed_cells_do_not_block_the_others(sweep):
    cfg, result = sweep
    per_epsilon = len(cfg.grid.p) * len(cfg.grid.attack)
    assert len(result.failures) == per_epsilon
    assert all(f"ε={UNREACHABLE:g}" in label for label, _ in result.failures)
    assert len(result.results) == per_epsilon and set(result.results.epsilon) == {4.0}
    assert all("The privacy budget is too low" in reason for _, reason in result.failures)
    assert all(reason.startswith("train target") for _, reason in result.failures)


def test_the_cell_record_keeps_the_traceback(sweep):
    cfg, result = sweep
    records = ArtifactStore(cfg.store.root).read_failures(cfg.name)
    assert len(records) == len(result.failures)
    for record in records:
        assert record["kind"] == "deterministic"
        assert record["coordinates"]["epsilon"] == UNREACHABLE
        assert "calibrate_noise" in record["traceback"] and "ValueError" in record["traceback"]
        assert record["task"].startswith("train target")


def test_a_deterministic_failure_is_not_retried(sweep, ray_dashboard):
    cfg, result = sweep
    task = ArtifactStore(cfg.store.root).read_failures(cfg.name)[0]["task"]
    deadline = time.monotonic() + 60  # task events reach the state API every second or so
    while True:
        attempts = list_tasks(address=ray_dashboard, filters=[("name", "=", task)],
                              raise_on_missing_output=False)
        if {a.state for a in attempts} == {"FAILED"} or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert {a.state for a in attempts} == {"FAILED"}
    assert {a.attempt_number for a in attempts} == {0}  # max_retries=3, none used


def test_summaries_list_the_failed_cells(sweep, capsys):
    cfg, result = sweep
    args = ["--store-root", cfg.store.root, "--experiment", cfg.name, "--no-plot"]
    assert frontier_main(args) == EXIT_INCOMPLETE  # failed cells are a gap, never a silent 0
    err = capsys.readouterr().err
    for label, _ in result.failures:
        assert f"FAILED {label}: " in err
    assert frontier_main([*args, "--allow-partial"]) == 0


def test_a_rerun_retries_only_the_failed_cells(sweep):
    cfg, first = sweep
    again = run_sweep(cfg, progress=False)
    # The targets at the unreachable ε were trained again and failed again: none is stored, so
    # none counts as trained (issue 44.5); their cells' failures name their training tasks.
    assert again.models_trained == 0
    assert sorted(again.failures) == sorted(first.failures)
    assert all(reason.startswith("train target") for _, reason in again.failures)
    assert len(again.results) == len(first.results)


def _attempts(tmp_path, error: BaseException) -> int:
    """How many times Ray runs a task that raises `error`, with a trainer's options (3 retries)."""
    import ray

    from sweeper.config.schema import TaskResources
    from sweeper.cluster.submission import task_options

    tally = tmp_path / f"{type(error).__name__}.attempts"

    def fails() -> None:
        with open(tally, "a") as handle:
            handle.write("x")
        raise error

    options = task_options(TaskResources(num_cpus=1, max_retries=3))
    with pytest.raises(type(error)):
        ray.get(ray.remote(fails).options(**options).remote())
    return len(tally.read_text())


def test_a_task_that_found_the_disk_full_is_not_retried(ray_local, tmp_path):
    """Issue 44.5: Ray retried a model's training 3 times after it could not store the model for
    want of space (DiskFull is an OSError, which store outages are retried for)."""
    import errno

    from sweeper.store.files import DiskFull

    assert _attempts(tmp_path, DiskFull(tmp_path / "models" / "m" / "model.pt")) == 1
    assert _attempts(tmp_path, OSError(errno.ENOSPC, "No space left on device")) == 1
    # A store outage still is retried: 1 + 3 attempts.
    assert _attempts(tmp_path, ConnectionResetError(errno.ECONNRESET, "reset by peer")) == 4
