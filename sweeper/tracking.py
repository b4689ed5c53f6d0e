"""MLflow records: one run per sweep, one nested run per cell, written by the driver only.

Runs are found again by tags (the sweep's plan key, each cell's content key), so rerunning a
sweep reuses its run and logs only cells not logged before: MLflow holds one run per cell no
matter how often the sweep is resumed or synced.  Tracking is best effort: results live in
Parquet, so when the tracking server fails the tracker stops calling it (one timeout, not one
per cell), the sweep goes on, and `python -m sweeper.sync` logs what was missed later.

Opening MLflow costs seconds (its import, the SQLite schema check, the searches), so a sweep that
has nothing new to log does not open it: after a run whose logging went through whole, the
driver keeps a stamp of what MLflow holds (`tracking_stamp`), and a rerun that would log exactly
that again skips MLflow.  For a SQLite tracking store the stamp includes the database file's size
and modification time, so any change to it (runs deleted, the file removed, another sweep
logging) reopens MLflow and backfills what is missing.

The records read like a model-training experiment in MLflow's UI: the experiment is tagged as one
(`mlflow.experimentKind`), the sweep's run carries MLflow's standard source tags and a summary
of the sweep, every metric is stamped with the time its cell landed, and ε is also a numeric
metric (`epsilon_value`, with `EPSILON_INF_VALUE` standing in for ∞) so it can be plotted.  Each
cell's run also summarises its per-record scores (`score_metrics`: quantiles of the members' and
the non-members' scores), so one run shows how far apart the two are, not only where the
threshold cut.

A rerun of the same sweep (a resume after a crash, a backfill) reopens its run rather than making
another, so the run keeps every cell of the sweep under it; its Duration is then the time the
sweep's invocations held it, added up (as a resumed run's runtime is elsewhere), not the time
since the first one started: see `SweepTracker.terminate`.
"""

from __future__ import annotations

import contextlib
import getpass
import hashlib
import logging
import math
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Optional
from urllib.parse import unquote, urlsplit

import numpy as np

from sweeper.credentials import redact, redact_tree, scrub
from sweeper.formats import epsilon_name, format_epsilon

COORDINATES = ("dataset", "model", "epsilon", "delta", "p", "attack", "policy", "trial")
SWEEP_KEY_TAG = "sweeper.sweep_key"
CELL_KEY_TAG = "sweeper.cell_key"
PARENT_TAG = "mlflow.parentRunId"
#: MLflow 3's UI reads this experiment tag to pick its layout: without it an experiment with no
#: runs yet is shown as GenAI (traces, "Detect issues"); "custom_model_development" opens it on
#: Runs and Models, as a training experiment.  (Values: the UI's ExperimentKind enum.)
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
#: ε = ∞ as the numeric metric `epsilon_value` (MLflow metrics are finite floats to its charts):
#: far above any ε a DP guarantee means anything at, so it sorts and plots last.
EPSILON_INF_VALUE = 1e9
#: Logged first, so MLflow's compare views and run tables open on them.
KEY_METRICS = ("precision", "bound", "violation", "epsilon_value")
#: Quantiles of a cell's per-record scores logged on its run, members and non-members apart.
SCORE_QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)
#: On a reopened sweep run: the time its earlier invocations held it, and when this one opened it
#: (ms), so that an invocation killed before it closed the run still counts (`SweepTracker`).
DURATION_BEFORE_TAG = "sweeper.duration_before_ms"
OPENED_TAG = "sweeper.opened_ms"

logger = logging.getLogger(__name__)


def ui_command(uri: str) -> str:
    """The `mlflow ui` command for `uri`, runnable as printed: the `mlflow` script beside this
    interpreter (so no activated venv is needed), bound to the loopback interface only."""
    program = Path(sys.executable).parent / "mlflow"
    return shlex.join([str(program), "ui", "--backend-store-uri", uri, "--host", "127.0.0.1"])


def epsilon_value(epsilon: float) -> float:
    """ε as a plottable number: `EPSILON_INF_VALUE` for ∞ (no DP)."""
    return EPSILON_INF_VALUE if math.isinf(epsilon) else float(epsilon)


def cell_metrics(row: dict[str, Any]) -> list[tuple[str, float]]:
    """A cell's metrics in logging order: `KEY_METRICS` first, then every other finite number
    of the row that is not a coordinate (a NaN, e.g. ε spent at ε = ∞, is left out)."""
    values = {"precision": row["precision"], "bound": row["bound"],
              "violation": float(row["violation"]), "epsilon_value": epsilon_value(row["epsilon"])}
    for name, value in row.items():
        if (name not in COORDINATES and name not in values and isinstance(value, (int, float))
                and not isinstance(value, bool)):
            values[name] = value
    return [(name, float(value)) for name, value in values.items() if math.isfinite(float(value))]


def score_metrics(scores) -> list[tuple[str, float]]:
    """A cell's per-record scores in a few numbers: the `SCORE_QUANTILES` of the members' scores
    (`scores/member_q50`, …) and of the non-members' (`scores/nonmember_q50`, …), numpy's default
    (linear) quantiles over the records that have a score.  Where the two sets of quantiles sit
    apart is what the attack found; the cell's `threshold` metric is where it cut.  `scores` is a
    table with `score` and `member` columns (pyarrow or pandas); a group with no scores, or a
    quantile that is not finite, is left out, as NaN metrics are."""
    score = np.asarray(scores["score"].to_numpy(), dtype=float)  # a null score reads as NaN
    member = np.asarray(scores["member"].to_numpy(), dtype=bool)
    metrics = []
    for group, mask in (("member", member), ("nonmember", ~member)):
        values = score[mask & ~np.isnan(score)]
        if not len(values):
            continue
        for q, value in zip(SCORE_QUANTILES, np.quantile(values, SCORE_QUANTILES)):
            if math.isfinite(value):
                metrics.append((f"scores/{group}_q{round(q * 100):02d}", float(value)))
    return metrics


def summary_metrics(results, models_trained: Optional[int] = None,
                    wall_seconds: Optional[float] = None) -> dict[str, float]:
    """The sweep run's own metrics: cells, violations, (models trained and wall seconds when
    the caller knows them) and per ε the largest precision − bound, the margin a violation would
    make positive (`max_precision_minus_bound/epsilon_inf` for ε = ∞)."""
    metrics = {"cells": float(len(results)),
               "violations": float(results["violation"].sum()) if len(results) else 0.0}
    if models_trained is not None:
        metrics["models_trained"] = float(models_trained)
    if wall_seconds is not None:
        metrics["wall_seconds"] = float(wall_seconds)
    if len(results):
        margins = (results["precision"] - results["bound"]).groupby(results["epsilon"]).max()
        for epsilon, margin in margins.items():
            if math.isfinite(margin):
                metrics[f"max_precision_minus_bound/epsilon_{epsilon_name(epsilon)}"] = float(margin)
    return metrics


def source_tags() -> dict[str, str]:
    """MLflow's standard run tags, as `mlflow.start_run` would set them: the program that ran
    the sweep, its user, and the commit of sweeper's own git checkout (when it is one)."""
    from mlflow.utils import mlflow_tags
    from mlflow.utils.git_utils import get_git_branch, get_git_commit, get_git_repo_url

    main = sys.argv[0] if sys.argv and sys.argv[0] else "python"
    tags = {mlflow_tags.MLFLOW_SOURCE_NAME: str(Path(main).resolve()) if Path(main).exists() else main,
            mlflow_tags.MLFLOW_SOURCE_TYPE: "LOCAL",
            mlflow_tags.MLFLOW_USER: _user()}
    checkout = str(Path(__file__).resolve().parent)
    git = {mlflow_tags.MLFLOW_GIT_COMMIT: get_git_commit(checkout),
           mlflow_tags.MLFLOW_GIT_BRANCH: get_git_branch(checkout),
           mlflow_tags.MLFLOW_GIT_REPO_URL: get_git_repo_url(checkout)}
    tags.update({key: redact(value) for key, value in git.items() if value})
    return tags


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name in a bare container: MLflow's own fallback
        return "unknown"


def default_tracking_uri(local_store_root: Optional[Path]) -> str:
    """MLflow's own `MLFLOW_TRACKING_URI` when set, else a SQLite file beside the results (in the
    working folder when the store is remote)."""
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    folder = local_store_root if local_store_root is not None else Path.cwd()
    return f"sqlite:///{Path(folder).resolve() / 'mlflow.db'}"


def tracking_stamp(uri: str, experiment: str, sweep_key: str, cell_keys: Iterable[str],
                   figures_key: Optional[str]) -> dict[str, Any]:
    """What MLflow holds after a sweep's logging went through whole: the sweep's run (by its
    store, experiment and plan key), one finished run per cell, its figures, and for a SQLite
    store the database file's state.  Two equal stamps mean a rerun would log nothing."""
    where = hashlib.sha256(f"{uri}\n{experiment}".encode()).hexdigest()  # no credentials kept
    cells = hashlib.sha256("\n".join(sorted(cell_keys)).encode()).hexdigest()
    return {"tracking": where, "sweep_key": sweep_key, "cells": cells, "figures": figures_key,
            "database": _database_state(uri)}


def _database_state(uri: str) -> Optional[list[int]]:
    """[size, mtime in ns] of a `sqlite:///` tracking store's file ([] when it is absent); None for
    a server, whose state the stamp cannot see."""
    parts = urlsplit(uri)
    if parts.scheme != "sqlite":
        return None
    path = Path(unquote(parts.path[1:]))  # SQLAlchemy's form: sqlite:///relative, sqlite:////absolute
    try:
        state = path.stat()
    except OSError:
        return []
    return [state.st_size, state.st_mtime_ns]


def _database_identity(uri: str) -> Optional[tuple[int, int]]:
    """(device, inode) of a `sqlite:///` tracking store's file, () when it is absent; None for
    a server.  A file deleted (or replaced) under a running sweep changes it."""
    parts = urlsplit(uri)
    if parts.scheme != "sqlite":
        return None
    try:
        state = Path(unquote(parts.path[1:])).stat()
    except OSError:
        return ()
    return state.st_dev, state.st_ino


def tracking_link(uri: str) -> str:
    """How to open the tracking store `uri` (credentials redacted): the `mlflow ui` command for
    a local store, the server's address otherwise."""
    if urlsplit(uri).scheme in ("http", "https", "databricks"):
        return redact(uri)
    return ui_command(uri)


def mlflow_artifact_location(store) -> Optional[str]:
    """Artifacts beside the results for a local store (an `ArtifactStore`); the tracking server's
    choice otherwise."""
    return (store.local_root / "mlartifacts").as_uri() if store.local_root is not None else None


def config_params(config: dict[str, Any]) -> dict[str, Any]:
    """A sweep's config as MLflow params (dotted keys), with its credentials masked."""
    flat: dict[str, Any] = {}

    def walk(prefix: str, node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(f"{prefix}.{key}" if prefix else str(key), value)
        else:
            flat[prefix] = node

    walk("", redact_tree(config))
    return flat


def cell_run_name(row: dict[str, Any]) -> str:
    return f"{row['attack']} ε={format_epsilon(row['epsilon'])} p={row['p']:g} δ={row['delta']:g} trial={row['trial']}"


def _now_ms() -> int:
    return int(time.time() * 1000)


class SweepTracker:
    """The sweep's MLflow run, opened (created, or reopened by its plan key) for one invocation.

    `read_scores(scores_key)` returns a cell's per-record scores (a table with `score` and
    `member`), for the summary each cell run carries (`score_metrics`); without it cells carry
    their row's metrics only.
    """

    def __init__(self, uri: str, experiment: str, sweep_name: str, sweep_key: str,
                 params: dict[str, Any], artifact_location: Optional[str],
                 read_scores: Optional[Callable[[str], Any]] = None):
        from mlflow import MlflowClient

        # MLflow prints "View run … at: URL" and "View experiment at: URL" for every run it
        # ends on a tracking server: two lines per cell, through the progress bars.  The sweep
        # prints where its results are once, at the end.
        os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
        self.uri, self.sweep_name, self.read_scores = uri, sweep_name, read_scores
        self.opened_ms = _now_ms()
        self.client = MlflowClient(tracking_uri=uri)
        self.failure: Optional[str] = None  # why tracking stopped, once it has
        self.missed_cells: set[str] = set()
        self.missed_artifacts = 0
        self.logged_now = 0
        self._score_summaries: dict[str, list[tuple[str, float]]] = {}  # by scores key
        self._last_cell_end_ms = 0  # of the cells logged before this invocation
        found = self.client.get_experiment_by_name(experiment)
        self.experiment_id = found.experiment_id if found else self.client.create_experiment(
            experiment, artifact_location=artifact_location)
        if found is None or found.tags.get(EXPERIMENT_KIND_TAG) is None:  # an older sweep's, too
            self.client.set_experiment_tag(self.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
        existing = self.client.search_runs(
            [self.experiment_id], filter_string=f"tags.`{SWEEP_KEY_TAG}` = '{sweep_key}'",
            max_results=1)
        tags = source_tags()
        if existing:
            self.run_id = existing[0].info.run_id
            self.logged_cells = self._logged_cell_keys()
            self.start_ms = existing[0].info.start_time
            self.duration_before_ms = self._duration_before(existing[0])
            self.client.update_run(self.run_id, status="RUNNING")
            tags.update({DURATION_BEFORE_TAG: str(self.duration_before_ms),
                         OPENED_TAG: str(self.opened_ms)})
            for key, value in tags.items():  # who ran it last, from which commit
                self.client.set_tag(self.run_id, key, value)
        else:
            run = self.client.create_run(self.experiment_id, run_name=sweep_name,
                                         start_time=self.opened_ms, tags={
                **tags, SWEEP_KEY_TAG: sweep_key, "sweeper.sweep": sweep_name})
            self.run_id = run.info.run_id
            self.start_ms, self.duration_before_ms = self.opened_ms, 0
            self._log_params(self.run_id, params)
            self.logged_cells = set()
        self.database = _database_identity(uri)  # the SQLite file MLflow opened, if one

    def _logged_cell_keys(self) -> set[str]:
        """Cells with a FINISHED run; a run left unfinished (the server died mid-log) is deleted,
        so the cell is logged again, whole, and still has one run."""
        keys: set[str] = set()
        token = None
        while True:
            page = self.client.search_runs(
                [self.experiment_id], filter_string=f"tags.`{PARENT_TAG}` = '{self.run_id}'",
                max_results=1000, page_token=token)
            for run in page:
                if run.info.status == "FINISHED":
                    keys.add(run.data.tags.get(CELL_KEY_TAG, ""))
                    self._last_cell_end_ms = max(self._last_cell_end_ms, run.info.end_time or 0)
                else:
                    self.client.delete_run(run.info.run_id)
            token = page.token
            if not token:
                return keys

    def _duration_before(self, run) -> int:
        """How long (ms) the sweep's earlier invocations held its run: what its Duration said when
        the last of them closed it, and when that one was killed before closing it (the run is
        still RUNNING), the time it held the run until its last cell was logged, added to what
        the earlier ones held it."""
        info, tags = run.info, run.data.tags
        if info.status != "RUNNING":
            return max(0, (info.end_time or info.start_time) - info.start_time)
        before = int(tags.get(DURATION_BEFORE_TAG, 0))
        opened = int(tags.get(OPENED_TAG, info.start_time))
        return before + max(0, self._last_cell_end_ms - opened)

    def _log_params(self, run_id: str, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(k, str(v)[:6000]) for k, v in params.items()]
        for start in range(0, len(items), 100):
            self.client.log_batch(run_id, params=items[start : start + 100])

    def log_cell(self, row: dict[str, Any]) -> None:
        """One nested run per cell, unless it is logged already or tracking is down."""
        if row["cell_key"] in self.logged_cells:
            return
        if self.failure is None:
            self._guarded(self._log_cell, row)
        if self.failure is not None:
            self.missed_cells.add(row["cell_key"])

    def _guarded(self, call, *args) -> None:
        try:
            call(*args)
        except Exception as error:  # noqa: BLE001 - tracking must never cost results
            lines = str(error).strip().splitlines()
            self.failure = scrub(f"{type(error).__name__}: {lines[0] if lines else ''}")

    def _log_cell(self, row: dict[str, Any]) -> None:
        """The cell's coordinates as params and its figures as metrics, stamped now: the driver
        logs a cell as soon as it lands, so now is when the cell finished (a cell logged later,
        after tracking was down, is stamped when it was logged)."""
        from mlflow.entities import Metric

        key = row["cell_key"]
        scores = self._score_summary(row["scores_key"])
        now_ms = _now_ms()
        run = self.client.create_run(self.experiment_id, run_name=cell_run_name(row),
                                     start_time=now_ms,
                                     tags={PARENT_TAG: self.run_id, CELL_KEY_TAG: key,
                                           "sweeper.model_key": row["model_key"]})
        self._log_params(run.info.run_id, {k: row[k] for k in COORDINATES})
        metrics = [Metric(name, value, now_ms, 0) for name, value in [*cell_metrics(row), *scores]]
        self.client.log_batch(run.info.run_id, metrics=metrics)
        self.client.set_terminated(run.info.run_id)
        self.logged_cells.add(key)
        self.logged_now += 1

    def _score_summary(self, scores_key: str) -> list[tuple[str, float]]:
        """`score_metrics` of a cell's scores, read once per scores key (the cells of one attack's
        policies share them); none when they cannot be read (missing, or failed their checksum):
        the cell's row, its result, is logged all the same, with a warning."""
        if self.read_scores is None:
            return []
        if scores_key not in self._score_summaries:
            try:
                self._score_summaries[scores_key] = score_metrics(self.read_scores(scores_key))
            except (OSError, ValueError) as error:  # missing, or failed its checksum
                logger.warning("cell run without its score summary: scores %s unreadable (%s)",
                               scores_key, error)
                self._score_summaries[scores_key] = []
        return self._score_summaries[scores_key]

    def log_artifact(self, path: Path) -> None:
        if self.failure is None:
            self._guarded(self.client.log_artifact, self.run_id, str(path))
        if self.failure is not None:
            self.missed_artifacts += 1

    def log_summary(self, metrics: dict[str, float]) -> None:
        """The sweep run's own metrics (see `summary_metrics`), stamped now."""
        from mlflow.entities import Metric

        now_ms = _now_ms()
        batch = [Metric(name, value, now_ms, 0) for name, value in metrics.items()]
        if self.failure is None:
            self._guarded(lambda: self.client.log_batch(self.run_id, metrics=batch))

    def terminate(self, failed: bool) -> None:
        """Close the sweep's run, its Duration the time its invocations held it: this one's (since
        it opened the run) added to the earlier ones' (`_duration_before`).  A first run ends now;
        a reopened one ends that long after it started, which is earlier than now: MLflow shows
        Duration as end − start, and a rerun a day later must not make a 2-minute sweep a day
        long.  Its cells keep the times they were logged at."""
        end_ms = self.start_ms + self.duration_before_ms + max(0, _now_ms() - self.opened_ms)
        if self.failure is None:
            self._guarded(self.client.set_terminated, self.run_id,
                          "FAILED" if failed else "FINISHED", end_ms)

    def finish(self, failed: bool) -> Optional[str]:
        """Close the sweep's run (`terminate`); a warning of what was not logged when tracking
        went down."""
        self.terminate(failed)
        if self.failure is None and _database_identity(self.uri) != self.database:
            # SQLite writes on through a deleted file's open handle without an error: what was
            # logged went nowhere anyone can open.
            self.failure = "its database file was deleted or replaced while the sweep ran"
            self.missed_cells = set(self.logged_cells)
        if self.failure is None:
            return None
        message = (f"MLflow tracking at {redact(self.uri)} failed mid-sweep ({self.failure}): "
                   f"{len(self.missed_cells)} cell run(s) and {self.missed_artifacts} artifact(s) were "
                   "not logged. The results are whole in Parquet; once the server is back, run "
                   f"`python -m sweeper.sync --experiment {self.sweep_name} --store-root STORE` "
                   "to log them.")
        logger.warning(message)
        return message


def open_tracker(uri: str, experiment: str, sweep_name: str, sweep_key: str,
                 params: dict[str, Any], artifact_location: Optional[str],
                 read_scores: Optional[Callable[[str], Any]] = None) -> Optional[SweepTracker]:
    """A tracker, or None with a warning when the tracking store cannot be reached."""
    logging.getLogger("mlflow").setLevel(logging.WARNING)  # not its schema-migration chatter
    try:
        return SweepTracker(uri, experiment, sweep_name, sweep_key, params, artifact_location,
                            read_scores)
    except Exception as error:  # noqa: BLE001 - any tracking failure must not stop the sweep
        logger.warning("MLflow tracking at %s is unavailable (%s); results still land in Parquet, "
                       "but no runs are logged. Once it is back, run `python -m sweeper.sync "
                       "--experiment %s --store-root STORE`.", redact(uri), type(error).__name__,
                       sweep_name)
        return None


def import_mlflow() -> None:
    """Import the MLflow modules the tracker uses: most of the time opening it takes (the sweep
    does it in the background while Ray starts)."""
    with contextlib.suppress(ImportError):
        import mlflow.tracking  # noqa: F401
