"""Log to MLflow what a sweep's Parquet results hold and MLflow lacks (`sync`; the command is
`sweeper sync`, `sweeper.cli.sync_command`).

A sweep keeps going when its tracking server goes down (results land in Parquet either way) and
warns what it could not log.  Once the server is back, this fills MLflow in: the sweep's run
(found by its plan key, or created), one nested run per cell not logged yet, and the figures
when the sweep's run has none.  It is idempotent: a second sync logs nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from sweeper.console import Progress
from sweeper.tracking.database import database_path
from sweeper.store.artifacts import ArtifactStore, links_on_the_way, links_refusal
from sweeper.credentials import redact, tracking_uri_problem
from sweeper.paths import name_problem
from sweeper.tracking.locations import tracking_location_problem
from sweeper.probes import not_mlflow_problem, tracking_server_problem
from sweeper.store.results import load_results, sort_frontier
from sweeper.tracking.run_records import config_params, summary_metrics
from sweeper.store.files import DiskFull
from sweeper.tracking.recorder import (SweepTracker, default_tracking_uri,
                                       mlflow_artifact_location, tracking_disk_full)


@dataclass(frozen=True)
class SyncReport:
    tracking_uri: str
    cells: int  # cells with results in the store
    logged: int  # cell runs this sync created
    artifacts: int  # figures this sync attached


class SyncRefused(ValueError):
    """A command line refused before anything is read or logged (exit 2)."""


class Unreachable(ConnectionError):
    """The MLflow server did not answer one bounded request: nothing was logged (exit 1)."""


def sync(store_root: str, experiment: str, tracking_uri: Optional[str] = None,
         progress: bool = False) -> SyncReport:
    """Log the sweep `experiment` of `store_root` to MLflow (the sweep's own tracking URI unless
    `tracking_uri` is given).  Raises `SyncRefused` for a sweep name that is not one folder name or
    a tracking URI that holds credentials, and what MLflow raises when the server is still down."""
    problems = [name_problem("--experiment", experiment),
                tracking_uri and tracking_uri_problem(tracking_uri, "--tracking-uri")]
    if any(problems):
        raise SyncRefused("; ".join(p for p in problems if p))
    if tracking_uri:  # the server named here is asked once, bounded, before the store is read
        _require_server(tracking_uri, "--tracking-uri")
    store = ArtifactStore(store_root)
    manifest = store.read_manifest(experiment)
    config = manifest["config"]
    uri = tracking_uri or config["tracking"]["uri"] or default_tracking_uri(store.local_root)
    field = "--tracking-uri" if tracking_uri else "tracking.uri"
    links = mlflow_links(store, uri)
    if links:  # MLflow would write through them: SQLite into a link's target, artifacts too
        raise SyncRefused(links_refusal(links, "MLflow"))
    problem = (tracking_uri_problem(uri, "MLFLOW_TRACKING_URI")  # the only source left unchecked
               or tracking_location_problem(field, uri))  # never better on a second try
    if problem:
        raise SyncRefused(problem)
    if not tracking_uri:
        _require_server(uri, "tracking.uri")
    try:
        return _log(store, experiment, manifest, uri, progress)
    except Exception as error:
        full = tracking_disk_full(uri, error)
        if full is not None:  # not an outage: said as what it is
            raise DiskFull(full) from None
        raise


def _log(store: ArtifactStore, experiment: str, manifest: dict, uri: str,
         progress: bool) -> SyncReport:
    """Log what MLflow lacks of the sweep (`sync`, once its command line passed)."""
    config = manifest["config"]
    tracker = SweepTracker(uri, config["tracking"]["experiment"], experiment, manifest["sweep_key"],
                           config_params(config), mlflow_artifact_location(store, uri),
                           store.read_scores_table, manifest.get("earlier_keys", ()))
    results = sort_frontier(load_results(store, experiment).frame)
    with Progress(len(results), "cells synced", "cell", progress) as bar:
        for row in results.to_dict("records"):
            tracker.log_cell(row)
            bar.update()
    tracker.log_summary(summary_metrics(results))  # models trained and wall time: the sweep's own
    if tracker.failure is not None:
        raise _failed(uri, tracker.failure)
    artifacts = 0
    if not tracker.client.list_artifacts(tracker.run_id):
        folder = store.figures_dir(experiment)
        figures = sorted(folder.rglob("*.png")) + sorted(folder.rglob("*.csv")) if folder.is_dir() else []
        for path in figures:
            relative = path.parent.relative_to(folder).as_posix()
            tracker.client.log_artifact(tracker.run_id, str(path), None if relative == "." else relative)
            artifacts += 1
        if (folder / "frontier.png").is_file():  # the first card of the sweep's view
            tracker.log_frontier_image(folder / "frontier.png")
        tracker.log_frontier_table(results)
    tracker.terminate(failed=bool(store.read_failures(experiment, manifest["cells"])))
    if tracker.failure is not None:
        raise _failed(uri, tracker.failure)
    return SyncReport(redact(uri), len(results), tracker.logged_now, artifacts)


def mlflow_links(store: ArtifactStore, uri: str) -> list[Path]:
    """The symbolic links on the way to what MLflow writes in a local store (its SQLite database
    and journals when the database lies in the store, its artifacts folder and all in it): no
    write path of sweeper's reaches those, so they are looked for before MLflow opens."""
    if store.local_root is None:
        return []
    database = database_path(uri)
    rel = None if database is None else store.rel_of(database)
    rels = [] if rel is None else [rel, *(f"{rel}-{journal}" for journal in ("journal", "wal", "shm"))]
    artifacts = mlflow_artifact_location(store, uri) is not None
    return links_on_the_way(store.local_root, rels + (["mlartifacts"] if artifacts else []),
                            ["mlartifacts"] if artifacts else [])


def _failed(uri: str, failure: str) -> OSError:
    """The error of a sync whose logging failed: a full disk as `DiskFull`, else an outage."""
    if failure.startswith("disk full at "):
        return DiskFull(failure[len("disk full at "):])
    return ConnectionError(f"MLflow at {redact(uri)} failed: {failure}")


def _require_server(uri: str, field: str) -> None:
    """Two bounded requests to an MLflow server (`sweeper.probes`); `Unreachable` when it does
    not answer (MLflow's own client would retry it for minutes: 248 s for a closed port),
    `SyncRefused` when what answers is not MLflow."""
    problem = tracking_server_problem(uri, field)
    if problem:
        raise Unreachable(problem)
    problem = not_mlflow_problem(uri, field)
    if problem:
        raise SyncRefused(problem)
