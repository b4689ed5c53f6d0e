"""A sweep of the shadow-free attack trains no shadow, and QMIA and BASE land like any attack:
in the results, the frontier and MLflow (real Ray, real MLflow, real Parquet)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from mlflow.tracking import MlflowClient

from sweeper.runner import run_sweep
from sweeper.tracking.recorder import PARENT_TAG


def test_a_shadow_free_sweep_trains_no_shadow_and_lands_qmia_everywhere(ray_local, make_tiny_config,
                                                                         tmp_path):
    cfg = make_tiny_config(tmp_path)
    cfg.grid.attack, cfg.attack.qmia_public, cfg.attack.qmia_iterations = ["qmia", "loss"], 100, 5
    first = run_sweep(cfg, progress=False)
    assert not first.failures
    roles = [pd.read_json(path / "meta.json", typ="series")["role"]
             for path in (Path(cfg.store.root) / "models").iterdir()]
    assert roles and set(roles) == {"target"}  # no shadow was trained
    assert set(first.results.attack) == {"qmia", "loss"}
    assert first.results.loc[first.results.attack == "qmia", "auc"].notna().all()
    assert set(pd.read_csv(first.csv_path).attack) == {"qmia", "loss"}  # the frontier's table
    client = MlflowClient(tracking_uri=first.tracking_uri)
    runs = client.search_runs([client.get_experiment_by_name(cfg.tracking.experiment).experiment_id],
                              max_results=100)
    assert {r.data.params["attack"] for r in runs if PARENT_TAG in r.data.tags} == {"qmia", "loss"}

    # BASE reads shadows: adding it trains them, and reuses the targets.
    cfg.grid.attack = ["qmia", "base"]
    cfg.store.replace = True
    second = run_sweep(cfg, progress=False)
    assert not second.failures
    assert second.models_trained == cfg.shadow.count * len(cfg.grid.epsilon)
    assert set(second.results.attack) == {"qmia", "base"}
