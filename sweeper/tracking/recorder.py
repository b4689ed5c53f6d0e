"""MLflow records: one run per sweep, one nested run per cell, written by the driver only.

Runs are found again by tags (the sweep's plan key, each cell's content key), so rerunning a
sweep reuses its run and logs only cells not logged before: MLflow holds one run per cell no
matter how often the sweep is resumed or synced.  Tracking is best effort: results live in
Parquet, so when the tracking server fails the tracker stops calling it (one timeout, not one
per cell), the sweep goes on, and `sweeper sync` logs what was missed later.

Opening MLflow costs seconds (its import, the SQLite schema check, the searches), so a sweep that
has nothing new to log does not open it: after a run whose logging went through whole, the
driver keeps a stamp of what MLflow holds (`tracking_stamp`), and a rerun that would log exactly
that again skips MLflow.  For a SQLite tracking store the stamp includes the database file's size
and modification time, so any change to it (runs deleted, the file removed, another sweep
logging) reopens MLflow and backfills what is missing.

What each run holds is computed in `sweeper.tracking.run_records`; here it is logged.  The records read
like a model-training experiment in MLflow's UI: the experiment is tagged as one
(`mlflow.experimentKind`) and described (`EXPERIMENT_DESCRIPTION`); the sweep's run carries
MLflow's standard source tags, a description, its dataset as an input (`dataset_input`), a
summary of the sweep and, as artifacts, its figures and its pooled frontier as a table the UI
shows (`FRONTIER_TABLE`).  A cell's run is named by its attack, policy, ε, p, δ and trial and
logs what a reader compares first and little else (`run_records.CELL_METRICS`; the rest is in Parquet),
every metric stamped with the time its cell landed; ε is also a numeric metric (`epsilon_value`,
with `EPSILON_INF_VALUE` standing in for ∞) so it can be plotted.  Its per-record scores are
summarised as a table artifact (`SCORE_TABLE`: quantiles of the members' and the non-members'
scores), so one run shows how far apart the two are, not only where the threshold cut.  A
sweep's last lines name the experiment's page (`experiment_page`) and how to open it.

A rerun of the same sweep (a resume after a crash, a backfill) reopens its run rather than making
another, so the run keeps every cell of the sweep under it; its Duration is then the time the
sweep's invocations held it, added up (as a resumed run's runtime is elsewhere), not the time
since the first one started: see `SweepTracker.terminate`.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

import pandas as pd

from sweeper.console import one_line_records
from sweeper.tracking.database import (UnknownSchema, database_identity, database_path,
                                       database_state, relocate_artifacts)
from sweeper.credentials import redact, scrub
from sweeper.store.files import disk_full
from sweeper.interrupts import deferred, raise_swallowed, release_unwound
from sweeper.tracking.ui import (MAX_TAG_VALUE, experiment_page, tracking_server, view_tag,
                               view_tag_value)
from sweeper.tracking.run_records import (FRONTIER_IMAGE_KEY, cell_metrics, cell_run_name,
                                      dataset_input, frontier_series, frontier_view,
                                      score_quantiles, source_tags, swept_recipe)
from sweeper.axes import COORDINATES

SWEEP_KEY_TAG = "sweeper.sweep_key"
CELL_KEY_TAG = "sweeper.cell_key"
PARENT_TAG = "mlflow.parentRunId"
#: MLflow 3's UI reads this experiment tag to pick its layout: without it an experiment with no
#: runs yet is shown as GenAI (traces, "Detect issues"); "custom_model_development" opens it on
#: Runs and Models, as a training experiment.  (Values: the UI's ExperimentKind enum.)
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
SCORE_TABLE = "score_quantiles.json"
#: Where MLflow keeps a run's logged images (`MlflowClient.log_image` with a key).
LOGGED_IMAGES = "images"
#: The width of the frontier figure's thumbnail, which MLflow's image card shows at its own
#: size: about a 1500-px window's card one to a row (`FRONTIER_IMAGE_SECTION`).
IMAGE_CARD_WIDTH = 820
#: The sweep's frontier, trials pooled (`sweeper.frontier.summarize_frontier`), on its run.
FRONTIER_TABLE = "frontier_summary.json"
#: Its first columns, what a reader scans for: which attack at which ε and p, the precision
#: against the bound and whether it broke it; the interval, the trials and the coordinates the
#: whole sweep shares (dataset, model, δ) follow.
FRONTIER_TABLE_FIRST = ["attack", "epsilon", "p", "precision", "bound", "violations",
                        "precision_ci_low", "precision_ci_high", "n_trials", "policy"]
#: MLflow's description tag (experiments and runs): markdown the UI shows on their page.
NOTE_TAG = "mlflow.note.content"
EXPERIMENT_DESCRIPTION = (
    "Membership-inference sweeps (sweeper): for each grid cell (dataset, attack, policy, ε, δ, "
    "p, trial) the attack's measured precision with its 95 % Clopper–Pearson interval next to "
    "Thudi et al.'s bound U (TMLR 2024, Thm 3.3). One parent run per sweep (its figures, its "
    "frontier table with trials pooled, its dataset); one child run per cell. A `violation` of 1 "
    "means the data prove a precision above U: a bug in training or accounting.")
#: On a reopened sweep run: the time its earlier invocations held it, and when this one opened it
#: (ms), so that an invocation killed before it closed the run still counts (`SweepTracker`).
DURATION_BEFORE_TAG = "sweeper.duration_before_ms"
OPENED_TAG = "sweeper.opened_ms"

logger = logging.getLogger(__name__)


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
            "database": database_state(uri)}


def mlflow_artifact_location(store, uri: str) -> Optional[str]:
    """Where a new experiment keeps its artifacts.  With a tracking server, the server's choice
    (None): an `mlflow server --serve-artifacts` (the default of `--artifacts-destination`)
    hands out `mlflow-artifacts:/…`, so figures go up through the server and another machine's
    UI shows them; a `file://` folder of this machine would be a dead link there.  With a store
    this process opens (the embedded SQLite default), a folder beside the results for a local
    store (an `ArtifactStore`), MLflow's default otherwise."""
    if tracking_server(uri) or store.local_root is None:
        return None
    return (store.local_root / "mlartifacts").as_uri()


def logged_image_names(key: str, step: int, timestamp_ms: int) -> tuple[str, str]:
    """The file names, in a run's `LOGGED_IMAGES` folder, of an image MLflow's
    `MlflowClient.log_image(key=key, step=step)` logs and its UI reads back: the image (PNG)
    and its thumbnail (`+compressed.webp`), key, step and time in the name."""
    import uuid

    stem = f"{key.replace('/', '~')}+step+{step}+timestamp+{timestamp_ms}+{uuid.uuid4()}"
    return f"{stem}.png", f"{stem}+compressed.webp"


def card_tile(image, width: int):
    """`image` scaled to `width` (Lanczos: its text stays legible) at the top of a white
    square: MLflow's image card shows a thumbnail in a square tile, centred, so a wide figure
    would sit below a grey band."""
    from PIL import Image

    scale = width / max(image.size)
    scaled = image.resize((round(image.size[0] * scale), round(image.size[1] * scale)),
                          Image.Resampling.LANCZOS)
    tile = Image.new("RGB", (width, width), "white")
    tile.paste(scaled, ((width - scaled.size[0]) // 2, 0))
    return tile


def _now_ms() -> int:
    return int(time.time() * 1000)


class SweepTracker:
    """The sweep's MLflow run, opened (created, or reopened by its plan key) for one invocation.

    `read_scores(scores_key)` returns a cell's per-record scores (a table with `score` and
    `member`), for the table each cell run carries (`score_quantiles`); without it cells carry
    their row's metrics only.
    """

    def __init__(self, uri: str, experiment: str, sweep_name: str, sweep_key: str,
                 params: dict[str, Any], artifact_location: Optional[str],
                 read_scores: Optional[Callable[[str], Any]] = None,
                 earlier_keys: Iterable[str] = ()):
        from mlflow import MlflowClient

        # MLflow prints "View run … at: URL" and "View experiment at: URL" for every run it
        # ends on a tracking server: two lines per cell, through the progress bars.  The sweep
        # prints where its results are once, at the end.
        os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
        library = logging.getLogger("mlflow")  # set up by the import above
        # Silent while the store opens: a failure there (a full disk under its database) is said
        # once, by whoever opened it (`open_tracker`'s warning, sync's error), not also by MLflow.
        library.setLevel(logging.CRITICAL)
        one_line_records(library, scrub)  # its tracebacks (`_logger.exception`), secrets masked
        self.uri, self.sweep_name, self.read_scores = uri, sweep_name, read_scores
        self.swept = swept_recipe(params)  # the training settings its cell runs are named by
        self.opened_ms = _now_ms()
        relocate_artifacts(uri, artifact_location)
        self.client = MlflowClient(tracking_uri=uri)
        self.failure: Optional[str] = None  # why tracking stopped, once it has
        self.missed_cells: set[str] = set()
        self.missed_artifacts = 0
        self.logged_now = 0
        self._score_summaries: dict[str, Optional[pd.DataFrame]] = {}  # by scores key
        self._last_cell_end_ms = 0  # of the cells logged before this invocation
        self.orphans: dict[str, str] = {}  # cell key → its unfinished run, reused (`_log_cell`)
        self.view: Optional[str] = None  # the sweep's saved view, once logged
        self.frontier_image = False  # the frontier figure is on the sweep's run (`log_frontier_image`)
        found = self.client.get_experiment_by_name(experiment)
        self.experiment_id = found.experiment_id if found else self.client.create_experiment(
            experiment, artifact_location=artifact_location)
        for tag, value in ((EXPERIMENT_KIND_TAG, EXPERIMENT_KIND), (NOTE_TAG, EXPERIMENT_DESCRIPTION)):
            if found is None or found.tags.get(tag) is None:  # an older sweep's experiment, too
                self.client.set_experiment_tag(self.experiment_id, tag, value)
        existing = self._sweep_run(sweep_key, earlier_keys)
        tags = source_tags()
        if existing:
            self.run_id = existing[0].info.run_id
            self.logged_cells = self._logged_cell_keys()
            self.start_ms = existing[0].info.start_time
            self.duration_before_ms = self._duration_before(existing[0])
            self.client.update_run(self.run_id, status="RUNNING")
            tags.update({DURATION_BEFORE_TAG: str(self.duration_before_ms),
                         OPENED_TAG: str(self.opened_ms), SWEEP_KEY_TAG: sweep_key})
            for key, value in tags.items():  # who ran it last, from which commit
                self.client.set_tag(self.run_id, key, value)
        else:
            run = self.client.create_run(self.experiment_id, run_name=sweep_name,
                                         start_time=self.opened_ms, tags={
                **tags, SWEEP_KEY_TAG: sweep_key, "sweeper.sweep": sweep_name,
                NOTE_TAG: f"Sweep `{sweep_name}`: one child run per cell; the figures and "
                          f"`{FRONTIER_TABLE}` (the frontier, trials pooled) are this run's "
                          "artifacts."})
            self.run_id = run.info.run_id
            self.start_ms, self.duration_before_ms = self.opened_ms, 0
            self._log_params(self.run_id, params)
            if any(key.startswith("dataset.") for key in params):
                self.client.log_inputs(self.run_id, datasets=[dataset_input(params)])
            self.logged_cells = set()
        self.database = database_identity(uri)  # the SQLite file MLflow opened, if one
        library.setLevel(logging.WARNING)  # from now on its warnings, not its chatter

    def _sweep_run(self, sweep_key: str, earlier_keys: Iterable[str]) -> list:
        """The sweep's run: the one of its plan key, else (a grown sweep) the newest of the keys
        it had before, which is then the grown sweep's, with the cells it logged: one run per
        sweep and per cell across growth."""
        for key in (sweep_key, *reversed(list(earlier_keys))):
            found = self.client.search_runs(
                [self.experiment_id], filter_string=f"tags.`{SWEEP_KEY_TAG}` = '{key}'",
                max_results=1)
            if found:
                return found
        return []

    def _logged_cell_keys(self) -> set[str]:
        """Cells with a FINISHED run.  A run left unfinished (the sweep interrupted or the server
        killed mid-log: RUNNING or KILLED) is kept in `orphans` by its cell key and reused when
        the cell is logged again, so each cell has one run, even counting deleted ones."""
        keys: set[str] = set()
        token = None
        while True:
            page = self.client.search_runs(
                [self.experiment_id], filter_string=f"tags.`{PARENT_TAG}` = '{self.run_id}'",
                max_results=1000, page_token=token)
            for run in page:
                key = run.data.tags.get(CELL_KEY_TAG, "")
                if run.info.status == "FINISHED":
                    keys.add(key)
                    self._last_cell_end_ms = max(self._last_cell_end_ms, run.info.end_time or 0)
                elif key in self.orphans:  # two unfinished runs of one cell: keep one
                    self.client.delete_run(run.info.run_id)
                else:
                    self.orphans[key] = run.info.run_id
            token = page.token
            if not token:
                for key in keys & self.orphans.keys():  # finished after all: the orphan goes
                    self.client.delete_run(self.orphans.pop(key))
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
        """`call(*args)`; a failure of tracking is kept in `failure`, never raised.  On a
        database this process writes itself (SQLite), SIGINT and SIGTERM wait for the call to
        end (`deferred`): one mid-statement would leave the clean-up's writes locked out."""
        handling = sys.exception()
        try:
            with contextlib.nullcontext() if tracking_server(self.uri) else deferred():
                call(*args)
        except KeyboardInterrupt as stop:  # the clean-up will write to the database it locked
            release_unwound(stop)
            raise
        except Exception as error:  # noqa: BLE001 - tracking must never cost results
            raise_swallowed(error, handling)  # but Ctrl-C that MLflow turned into its error stops
            lines = str(error).strip().splitlines()
            full = tracking_disk_full(self.uri, error)
            self.failure = scrub(f"disk full at {full}" if full else
                                 f"{type(error).__name__}: {lines[0] if lines else ''}")

    def _log_cell(self, row: dict[str, Any]) -> None:
        """The cell's coordinates as params and its figures as metrics, stamped now: the driver
        logs a cell as soon as it lands, so now is when the cell finished (a cell logged later,
        after tracking was down, is stamped when it was logged)."""
        from mlflow.entities import Metric

        key = row["cell_key"]
        quantiles = self._score_summary(row["scores_key"])
        now_ms = _now_ms()
        run_id = self.orphans.pop(key, None)
        created = run_id is None
        if run_id is None:
            run_id = self.client.create_run(self.experiment_id,
                                            run_name=cell_run_name(row, self.swept),
                                            start_time=now_ms,
                                            tags={PARENT_TAG: self.run_id, CELL_KEY_TAG: key,
                                                  "sweeper.model_key": row["model_key"]}).info.run_id
        else:  # the run an interrupted logging left: its params are these (a cell's coordinates)
            self.client.update_run(run_id, status="RUNNING")
        self._log_params(run_id, {k: row[k] for k in COORDINATES if k in row})
        metrics = [Metric(name, value, now_ms, 0) for name, value in cell_metrics(row)]
        self.client.log_batch(run_id, metrics=metrics)
        if quantiles is not None:
            self._log_table(run_id, quantiles, SCORE_TABLE, created)
        self.client.set_terminated(run_id)
        self.logged_cells.add(key)
        self.logged_now += 1

    def _score_summary(self, scores_key: str) -> Optional[pd.DataFrame]:
        """`score_quantiles` of a cell's scores, read once per scores key (the cells of one
        attack's policies share them); None when they cannot be read (missing, or failed their
        checksum): the cell's row, its result, is logged all the same, with a warning."""
        if self.read_scores is None:
            return None
        if scores_key not in self._score_summaries:
            try:
                self._score_summaries[scores_key] = score_quantiles(self.read_scores(scores_key))
            except (OSError, ValueError) as error:  # missing, or failed its checksum
                logger.warning("cell run without its score summary: scores %s unreadable (%s)",
                               scores_key, error)
                self._score_summaries[scores_key] = None
        return self._score_summaries[scores_key]

    def log_artifact(self, path: Path) -> None:
        if self.failure is None:
            self._guarded(self.client.log_artifact, self.run_id, str(path))
        if self.failure is not None:
            self.missed_artifacts += 1

    def log_frontier_image(self, path: Path, card: Optional[Path] = None) -> None:
        """The frontier figure (`frontier.png`) as MLflow's logged image `FRONTIER_IMAGE_KEY` on
        the sweep's run, which the sweep's view shows first (`frontier_view`).

        As `MlflowClient.log_image(key=…, step=0)` logs one (`logged_image_names`: the figure
        and the thumbnail MLflow's image card shows, and the run's `mlflow.loggedImages` tag),
        except that the thumbnail is `IMAGE_CARD_WIDTH` wide, not MLflow's 256 px, at which the
        figure's text cannot be read, square and lossless (`card_tile`), and drawn from `card`
        when given (`sweeper.reports.frontier_chart.frontier_card_figure`: legible at the
        ~417 px a card gets beside MLflow's Assistant panel); the full figure opens on a click.  The one an earlier
        invocation logged is removed first: MLflow keeps every image logged at a step, and its
        card would show an old one beside the new."""
        if self.failure is None:
            self._guarded(self._log_frontier_image, path, card)
        if self.failure is not None:
            self.missed_artifacts += 1

    def _log_frontier_image(self, path: Path, card: Optional[Path]) -> None:
        import tempfile

        from mlflow.utils.mlflow_tags import MLFLOW_LOGGED_IMAGES
        from PIL import Image

        old = [item.path for item in self.client.list_artifacts(self.run_id, LOGGED_IMAGES)
               if Path(item.path).name.startswith(f"{FRONTIER_IMAGE_KEY}+")]
        if old:
            from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

            repository = get_artifact_repository(self.client.get_run(self.run_id).info.artifact_uri)
            for item in old:
                repository.delete_artifacts(item)
        figure, thumbnail = logged_image_names(FRONTIER_IMAGE_KEY, 0, _now_ms())
        with Image.open(path) as opened, Image.open(card or path) as small, \
                tempfile.TemporaryDirectory() as folder:
            opened.convert("RGB").save(Path(folder) / figure)
            card_tile(small.convert("RGB"), IMAGE_CARD_WIDTH).save(Path(folder) / thumbnail,
                                                                    lossless=True)
            for name in (figure, thumbnail):
                self.client.log_artifact(self.run_id, str(Path(folder) / name), LOGGED_IMAGES)
        self.client.set_tag(self.run_id, MLFLOW_LOGGED_IMAGES, True)
        self.frontier_image = True

    def log_frontier_table(self, results: pd.DataFrame, complete: bool = True) -> None:
        """The sweep's frontier with its trials pooled (`summarize_frontier`) as a table on its
        run: the UI shows it (Artifacts, and the table view), sortable, with no code; and, when
        the sweep is `complete`, as MLflow's charts (`_log_frontier_charts`)."""
        from sweeper.formats import jsonable
        from sweeper.frontier import summarize_frontier

        table = summarize_frontier(results)
        first = [column for column in FRONTIER_TABLE_FIRST if column in table]
        table = table[first + [column for column in table if column not in first]]
        if self.failure is None and not table.empty:
            rows = pd.DataFrame(jsonable(table.to_dict("records")))  # ∞ as "inf": JSON has none
            self._guarded(self._log_table, self.run_id, rows, FRONTIER_TABLE)
            if complete and self.failure is None:
                self._guarded(self._log_frontier_charts, table)
        if self.failure is not None:
            self.missed_artifacts += 1

    def _log_frontier_charts(self, summary: pd.DataFrame) -> None:
        """The frontier where MLflow's charts draw it: its series over ε on the sweep's run
        (`frontier_series`) and the sweep's saved view (`frontier_view`) on the experiment.

        Only a complete sweep's: MLflow keeps every point it was given, so a partial frontier's
        points would stay beside the complete one's.  Points are stamped at the run's start,
        so a rerun of a complete sweep gives MLflow the points it holds (kept once), and a sweep
        grown by an ε or a p adds points at steps of their own (`epsilon_step`).  A sweep at
        ε = ∞ alone has no frontier over ε: no view.  A view over MLflow's tag limit is made
        smaller (no hidden cards), or left out with a note: never a tracking failure."""
        from mlflow.entities import Metric

        series = frontier_series(summary)
        metrics = [Metric(name, value, self.start_ms, step)
                   for name, points in series.items() for step, value in points]
        for start in range(0, len(metrics), 1000):  # MLflow's batch limit
            self.client.log_batch(self.run_id, metrics=metrics[start : start + 1000])
        if len(series) < 2:
            return
        for hidden_cards in (True, False):
            value = view_tag_value(self.sweep_name,
                                   frontier_view(series, hidden_cards, self.frontier_image),
                                   self.start_ms)
            if len(value) <= MAX_TAG_VALUE:
                self.client.set_experiment_tag(self.experiment_id, view_tag(self.sweep_name), value)
                self.view = self.sweep_name
                return
        logger.info("sweep %s: %d frontier series are too many for MLflow's saved view; the "
                    "series are on the sweep's run", self.sweep_name, len(series) - 1)

    def _log_table(self, run_id: str, data: pd.DataFrame, artifact_file: str,
                   created: bool = False) -> None:
        """`MlflowClient.log_table`, except that a table the run has already (a rerun's, a cell
        run reused) is replaced: MLflow appends to it, so each rerun would repeat every row.
        A run `created` by this call's caller has none: its artifacts are not listed first."""
        if not created and any(item.path == artifact_file
                               for item in self.client.list_artifacts(run_id)):
            self.client.log_text(run_id, data.to_json(orient="split", index=False,
                                                      date_format="iso"), artifact_file)
        else:  # as a table, so that the UI's table view lists it
            self.client.log_table(run_id, data=data, artifact_file=artifact_file)

    def page(self) -> str:
        """The sweep's experiment's page in MLflow's UI (`experiment_page`), on the sweep's
        frontier once it is logged."""
        return experiment_page(self.experiment_id, self.view)

    def log_summary(self, metrics: dict[str, float]) -> None:
        """The sweep run's own metrics (see `sweeper.tracking.run_records.summary_metrics`), stamped now."""
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

    def interrupt(self) -> None:
        """SIGINT/SIGTERM: the sweep's run and every cell run still open end KILLED (a rerun
        reuses them), never left RUNNING.  The open cell runs are searched for, not remembered:
        the signal can land after MLflow created a run and before the call returned its id."""
        end_ms = self.start_ms + self.duration_before_ms + max(0, _now_ms() - self.opened_ms)
        self._guarded(self._kill_open_cell_runs)
        self._guarded(self.client.set_terminated, self.run_id, "KILLED", end_ms)

    def _kill_open_cell_runs(self) -> None:
        open_runs = self.client.search_runs(
            [self.experiment_id], max_results=1000,
            filter_string=f"tags.`{PARENT_TAG}` = '{self.run_id}' and attributes.status = 'RUNNING'")
        for run in open_runs:  # one at most, unless an earlier invocation was killed at once
            self.client.set_terminated(run.info.run_id, "KILLED")

    def finish(self, failed: bool) -> Optional[str]:
        """Close the sweep's run (`terminate`); a warning of what was not logged when tracking
        went down."""
        self.terminate(failed)
        if self.failure is None and database_identity(self.uri) != self.database:
            # SQLite writes on through a deleted file's open handle without an error: what was
            # logged went nowhere anyone can open.
            self.failure = "its database file was deleted or replaced while the sweep ran"
            self.missed_cells = set(self.logged_cells)
        if self.failure is None:
            return None
        then = ("once there is space again" if self.failure.startswith("disk full at ")
                else "once the server is back")
        message = (f"MLflow tracking at {redact(self.uri)} failed mid-sweep ({self.failure}): "
                   f"{len(self.missed_cells)} cell run(s) and {self.missed_artifacts} artifact(s) were "
                   f"not logged. The results are whole in Parquet; {then}, run "
                   f"`sweeper sync --experiment {self.sweep_name} --store-root STORE` "
                   "to log them.")
        logger.warning(message)
        return message


def open_tracker(uri: str, experiment: str, sweep_name: str, sweep_key: str,
                 params: dict[str, Any], artifact_location: Optional[str],
                 read_scores: Optional[Callable[[str], Any]] = None,
                 earlier_keys: Iterable[str] = ()) -> Optional[SweepTracker]:
    """A tracker, or None with a warning when the tracking store cannot be reached."""
    try:
        return SweepTracker(uri, experiment, sweep_name, sweep_key, params, artifact_location,
                            read_scores, earlier_keys)
    except UnknownSchema as error:  # waiting will not help: say what will
        logger.warning("MLflow tracking is off for this sweep; results still land in Parquet: %s",
                       error)
        return None
    except Exception as error:  # noqa: BLE001 - any tracking failure must not stop the sweep
        full = tracking_disk_full(uri, error)
        if full is not None:  # not an outage: waiting will not free the space
            logger.warning("%s", scrub(
                f"MLflow tracking is off for this sweep: disk full at {full}; results still land "
                "in Parquet, but no runs are logged. Free space there, then run `sweeper sync "
                f"--experiment {sweep_name} --store-root STORE`."))
            return None
        logger.warning("MLflow tracking at %s is unavailable (%s); results still land in Parquet, "
                       "but no runs are logged. Once it is back, run `sweeper sync "
                       "--experiment %s --store-root STORE`.", redact(uri), type(error).__name__,
                       sweep_name)
        return None


def tracking_disk_full(uri: str, error: BaseException) -> Optional[str]:
    """Where the disk was full when that is why MLflow failed (`sweeper.store.files.disk_full`),
    or None; SQLite's "database or disk is full" names no file, so a `sqlite:///` store's is
    named for it."""
    where = disk_full(error)
    database = database_path(uri)
    if where is None or database is None or not where.startswith("an unnamed file"):
        return where
    return f"{database} (MLflow's SQLite database: {where.partition('(')[2].rstrip(')')})"


def import_mlflow() -> None:
    """Import the MLflow modules the tracker uses: most of the time opening it takes (the sweep
    does it in the background while Ray starts)."""
    with contextlib.suppress(ImportError):
        import mlflow.tracking  # noqa: F401
