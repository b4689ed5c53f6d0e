"""Fault 3: the driver (`python -m sweeper`) is SIGKILLed mid-sweep, alone or with its local Ray.  Rerunning the same command
finishes the sweep: no duplicate rows, no finished model trained again, and the models that were
in flight resume from their checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from mlflow import MlflowClient

from sweeper.store.artifacts import ArtifactStore
from sweeper.tracking.recorder import CELL_KEY_TAG, PARENT_TAG
from testkit.checkpoints import saved_epoch

#: The kill is timed against the sweep's training: alone, as its epochs were sized (`make test`'s
#: serial run).
pytestmark = pytest.mark.serial


def finished_models(root: Path) -> dict[str, int]:
    """Each stored model's meta.json inode and mtime: a retrained model would change them."""
    return {path.parent.name: (path.stat().st_ino, path.stat().st_mtime_ns)
            for path in (root / "models").glob("*/meta.json")}


def checkpoints(root: Path) -> dict[str, int]:
    """Each checkpointed model's last saved epoch."""
    store = ArtifactStore(root)
    epochs = {path.stem: saved_epoch(store, path.stem)
              for path in (root / "checkpoints").glob("*.pt")}
    return {key: epoch for key, epoch in epochs.items() if epoch is not None}


@pytest.mark.parametrize("with_its_ray", [
    pytest.param(False, id="driver"),
    # The same resume with the driver's Ray killed too (34 s).
    pytest.param(True, id="driver and its Ray")])
def test_rerun_after_driver_sigkill_finishes_without_duplicates_or_retraining(
        procs, make_tiny_overrides, tmp_path, with_its_ray):
    root = tmp_path / "runs"
    args = make_tiny_overrides(root, name="killed_driver", **{
        "dataset.pool_size": 1500, "dataset.eval_records": 200, "train.epochs": 5,
        "grid.epsilon": "[4]", "grid.p": "[0.3,0.5,0.7]", "grid.attack": "[loss,lira_offline]"})
    driver = procs.run_sweep_cli(args, cwd=tmp_path)
    procs.wait_for(lambda: finished_models(root) and checkpoints(root), timeout=400, interval=0.1,
                   message="a model stored and another in flight")
    procs.sigkill([driver])
    if with_its_ray:  # as when the machine running them goes: training is left in flight
        procs.kill_tree(driver)
    else:  # the local Ray shares the driver's fate; its workers may finish their models first
        procs.wait_for(lambda: not procs.find_ray_workers("train"), timeout=120,
                       message="orphaned trainers gone")
    before = finished_models(root)
    in_flight = {key: epoch for key, epoch in checkpoints(root).items() if key not in before}
    assert before and (in_flight or not with_its_ray)
    assert not procs.find_ray_workers("train")

    rerun = procs.run_sweep_cli(args, cwd=tmp_path)
    assert rerun.wait(timeout=600) == 0, procs.output(rerun)[1][-3000:]
    out, _ = procs.output(rerun)
    store = ArtifactStore(root)
    manifest = store.read_manifest("killed_driver")
    planned = set(manifest["cells"])
    assert len(planned) == 3 * 2

    cell_files = sorted((root / "sweeps" / "killed_driver" / "cells").glob("*.parquet"))
    rows = pd.concat([pd.read_parquet(path) for path in cell_files], ignore_index=True)
    assert len(rows) == len(planned) and set(rows.cell_key) == planned  # none lost, none twice
    after = finished_models(root)
    assert {key: after[key] for key in before} == before  # not one finished model retrained
    assert f"{len(after) - len(before)} to train" in out
    for key, epoch in in_flight.items():
        resumed = store.read_model_meta(key)["resumed_from"]
        assert resumed and resumed[0] >= epoch  # picked up where the killed run left off
    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("sweeper")
    runs = [r for r in client.search_runs([experiment.experiment_id], max_results=1000)
            if PARENT_TAG in r.data.tags]
    assert sorted(r.data.tags[CELL_KEY_TAG] for r in runs) == sorted(planned)  # one run per cell
    assert json.loads((root / "sweeps" / "killed_driver" / "sweep.json").read_text())["cells"]
