"""MLflow records: one run per sweep, one nested run per cell, written by the driver only.

Runs are found again by tags (the sweep's plan key, each cell's content key), so rerunning a
sweep reuses its run and logs only cells not logged before: MLflow holds one run per cell no
matter how often the sweep is resumed.  Tracking is best effort: a tracking failure warns and
never costs results, which live in Parquet.
"""

from __future__ import annotations

import logging
import math
import warnings
from pathlib import Path
from typing import Any, Optional

COORDINATES = ("dataset", "model", "epsilon", "delta", "p", "attack", "policy", "trial")
SWEEP_KEY_TAG = "sweeper.sweep_key"
CELL_KEY_TAG = "sweeper.cell_key"
PARENT_TAG = "mlflow.parentRunId"


def default_tracking_uri(store_root: Path) -> str:
    return f"sqlite:///{Path(store_root).resolve() / 'mlflow.db'}"


def cell_run_name(row: dict[str, Any]) -> str:
    epsilon = "∞" if math.isinf(row["epsilon"]) else f"{row['epsilon']:g}"
    return f"{row['attack']} ε={epsilon} p={row['p']:g} δ={row['delta']:g} trial={row['trial']}"


class SweepTracker:
    def __init__(self, uri: str, experiment: str, sweep_name: str, sweep_key: str,
                 params: dict[str, Any], artifact_root: Path):
        from mlflow import MlflowClient

        self.client = MlflowClient(tracking_uri=uri)
        found = self.client.get_experiment_by_name(experiment)
        self.experiment_id = found.experiment_id if found else self.client.create_experiment(
            experiment, artifact_location=Path(artifact_root).resolve().as_uri())
        existing = self.client.search_runs(
            [self.experiment_id], filter_string=f"tags.`{SWEEP_KEY_TAG}` = '{sweep_key}'",
            max_results=1)
        if existing:
            self.run_id = existing[0].info.run_id
            self.client.update_run(self.run_id, status="RUNNING")
        else:
            run = self.client.create_run(self.experiment_id, run_name=sweep_name,
                                         tags={SWEEP_KEY_TAG: sweep_key, "sweeper.sweep": sweep_name})
            self.run_id = run.info.run_id
            self._log_params(self.run_id, params)
        self.logged_cells = self._logged_cell_keys()

    def _logged_cell_keys(self) -> set[str]:
        keys: set[str] = set()
        token = None
        while True:
            page = self.client.search_runs(
                [self.experiment_id], filter_string=f"tags.`{PARENT_TAG}` = '{self.run_id}'",
                max_results=1000, page_token=token)
            keys.update(r.data.tags.get(CELL_KEY_TAG, "") for r in page)
            token = page.token
            if not token:
                return keys

    def _log_params(self, run_id: str, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(k, str(v)[:6000]) for k, v in params.items()]
        for start in range(0, len(items), 100):
            self.client.log_batch(run_id, params=items[start : start + 100])

    def log_cell(self, row: dict[str, Any]) -> None:
        """One nested run with the cell's coordinates as params and its figures as metrics."""
        from mlflow.entities import Metric

        key = row["cell_key"]
        if key in self.logged_cells:
            return
        run = self.client.create_run(self.experiment_id, run_name=cell_run_name(row),
                                     tags={PARENT_TAG: self.run_id, CELL_KEY_TAG: key,
                                           "sweeper.model_key": row["model_key"]})
        self._log_params(run.info.run_id, {k: row[k] for k in COORDINATES})
        metrics = [
            Metric(name, float(value), 0, 0) for name, value in row.items()
            if name not in COORDINATES and isinstance(value, (int, float))
            and not isinstance(value, bool) and math.isfinite(value)
        ]
        metrics.append(Metric("violation", float(row["violation"]), 0, 0))
        self.client.log_batch(run.info.run_id, metrics=metrics)
        self.client.set_terminated(run.info.run_id)
        self.logged_cells.add(key)

    def log_artifact(self, path: Path) -> None:
        self.client.log_artifact(self.run_id, str(path))

    def finish(self, failed: bool) -> None:
        self.client.set_terminated(self.run_id, status="FAILED" if failed else "FINISHED")


def open_tracker(uri: str, experiment: str, sweep_name: str, sweep_key: str,
                 params: dict[str, Any], artifact_root: Path) -> Optional[SweepTracker]:
    """A tracker, or None with a warning when the tracking store cannot be reached."""
    logging.getLogger("mlflow").setLevel(logging.WARNING)  # not its schema-migration chatter
    try:
        return SweepTracker(uri, experiment, sweep_name, sweep_key, params, artifact_root)
    except Exception as error:  # noqa: BLE001 - any tracking failure must not stop the sweep
        warnings.warn(f"MLflow tracking at {uri} is unavailable ({error}); results still land "
                      "in Parquet, but no runs are logged.", stacklevel=2)
        return None
