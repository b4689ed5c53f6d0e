"""The sinks of a sweep's landed cells: the store's row writer, the figure drawer, the MLflow tracker.

Ray Tune's `Callback` is the model: the runner's execution loop knows no sink, it tells each
`Listener` of the sweep, in order, what happened — start-up begun, the sweep started (it can no
longer be refused), a cell landed or failed, the sweep ended — so adding a sink never touches the
loop.  The order is the runner's list: the row writer first (a row the store could not keep is
not logged anywhere else: `NotLanded`), the figure drawer before the tracker (which attaches the
figures it drew, `SweepEnd.figures`).
"""

from __future__ import annotations

import dataclasses
import contextlib
import hashlib
import importlib
import json
import logging
import tempfile
import time
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import pandas as pd

from sweeper.store.columns import SchemaError
from sweeper.config import SweepConfig
from sweeper.credentials import redact
from sweeper.failures import Failure, cell_label, storing_failure
from sweeper.grid.plan import Cell
from sweeper.html_report import REPORT_FILE, write_report
from sweeper.provenance import code_state, record_run, run_record
from sweeper.reports import draw, plot_frontier, plot_frontier_card
from sweeper.store.files import DiskFull, LinkInStore
from sweeper.store.artifacts import ArtifactStore
from sweeper.task_times import KindTime
from sweeper.tracking.run_records import config_params, summary_metrics
from sweeper.tracking.recorder import (SweepTracker, import_mlflow, mlflow_artifact_location,
                                       open_tracker, tracking_stamp)

logger = logging.getLogger(__name__)


class NotLanded(Exception):
    """Raised by a listener that could not keep a landed cell: the listeners after it are not
    told of the cell, which counts as failed with `failure.reason`."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.reason)
        self.failure = failure


@dataclass(frozen=True)
class SweepEnd:
    """What the listeners hear when the sweep has ended.  Immutable: a listener that adds its
    part (the drawer its figures, the tracker its URL and warning) returns a new one, which the
    next listener hears (`Listeners.on_sweep_end`) and the summary reads."""

    results: pd.DataFrame  # every present cell's row, read back from the store
    failures: list[tuple[str, str]]  # (cell label, reason) of this run's failed cells
    models_trained: int
    started: float  # `time.perf_counter()` when the sweep began
    # Training, queries and attacks: each kind's wall and task seconds (`sweeper.task_times`).
    task_times: dict[str, KindTime] = field(default_factory=dict)
    figures: list[Path] = field(default_factory=list)  # frontier.png, frontier.csv, the report's
    html_report: Optional[Path] = None  # report.html (`sweeper.html_report`), among `figures`
    figures_key: Optional[str] = None  # what they were drawn from (`figures_key`)
    tracking_warning: Optional[str] = None  # what MLflow missed, when it was down
    tracking_page: Optional[str] = None  # the experiment's page in MLflow's UI, when known


class Listener:
    """A sink of the sweep's cells.  Every hook is a no-op unless a sink needs it."""

    def on_start_up(self, background: Executor) -> None:
        """Ray is starting: begin slow preparations (imports) on `background`.  The sweep may still
        be refused, so nothing may be written yet."""

    def on_sweep_start(self) -> None:
        """The sweep is no longer refused: open what writes.  Called also when there is nothing to
        compute (no start-up then)."""

    def on_cell_landed(self, cell: Cell, row: dict[str, Any]) -> None:
        """`cell`'s row came back from its attack task.  Raise `NotLanded` when it cannot be kept."""

    def on_cell_failed(self, cell: Cell, failure: Failure) -> None:
        """`cell`'s attack, or a task it waited on, failed."""

    def on_sweep_end(self, end: SweepEnd) -> SweepEnd:
        """The sweep has ended and its results were read back (`end.results`).

        Returns:
            `end` with this listener's part added (`dataclasses.replace`), or `end` itself.
        """
        return end

    def on_sweep_interrupted(self) -> None:
        """SIGINT or SIGTERM stopped the sweep (`sweeper.interrupts`): close what is open."""


class Listeners(list):
    """The sweep's listeners as one (Ray Tune's `CallbackList`): each hook is told to every
    listener in order.  A `NotLanded` from one stops the ones after it for that cell; the sweep's
    end passes from listener to listener, each adding its part."""

    def on_start_up(self, background: Executor) -> None:
        for listener in self:
            listener.on_start_up(background)

    def on_sweep_start(self) -> None:
        for listener in self:
            listener.on_sweep_start()

    def on_cell_landed(self, cell: Cell, row: dict[str, Any]) -> None:
        for listener in self:
            listener.on_cell_landed(cell, row)

    def on_cell_failed(self, cell: Cell, failure: Failure) -> None:
        for listener in self:
            listener.on_cell_failed(cell, failure)

    def on_sweep_end(self, end: SweepEnd) -> SweepEnd:
        for listener in self:
            end = listener.on_sweep_end(end)
        return end

    def on_sweep_interrupted(self) -> None:
        for listener in self:
            listener.on_sweep_interrupted()


class RowWriter(Listener):
    """The store's landing zone: the sweep's manifest, each landed row (atomically), each failed
    cell's failure record."""

    def __init__(self, store: ArtifactStore, sweep: str, manifest: dict[str, Any]) -> None:
        self.store, self.sweep, self.manifest = store, sweep, manifest

    def on_sweep_start(self) -> None:
        self.store.write_manifest(self.sweep, self.manifest)

    def on_cell_landed(self, cell: Cell, row: dict[str, Any]) -> None:
        try:
            self.store.write_cell(self.sweep, row["cell_key"], row)
        except (DiskFull, LinkInStore):
            raise  # the sweep stops on these: every write after would fail alike
        except (OSError, SchemaError) as error:  # this row, not the others: they still land
            failure = storing_failure(error)
            with contextlib.suppress(OSError):  # the store may be what failed
                self._write_failure(cell, failure)
            raise NotLanded(failure) from error

    def on_cell_failed(self, cell: Cell, failure: Failure) -> None:
        self._write_failure(cell, failure)

    def _write_failure(self, cell: Cell, failure: Failure) -> None:
        self.store.write_failure(self.sweep, cell.key,
                                 failure.record(cell_label(cell), cell.key, cell.coordinates))


#: The code that draws the figures: a change to it redraws them even when the table is the same.
DRAWING_MODULES = ("sweeper.reports", "sweeper.figures", "sweeper.formats", "sweeper.html_report")
FIGURES_STAMP = ".figures.json"


def figures_key(cfg: SweepConfig, table_csv: bytes) -> str:
    """What the figures are drawn from: the table they plot, the report, the title (the name and
    the shadow models it names) and the code."""
    digest = hashlib.sha256(table_csv)
    digest.update(f"\n{cfg.report}\n{cfg.name}\n{cfg.shadow.count}\n".encode())
    for name in DRAWING_MODULES:
        module = importlib.import_module(name)
        if module.__file__ is None:
            raise ValueError(f"{name} has no source file to key the figures on")
        files = (sorted(Path(module.__file__).parent.glob("*.py")) if hasattr(module, "__path__")
                 else [Path(module.__file__)])  # a package: every module of it
        for path in files:
            digest.update(path.read_bytes())
    return digest.hexdigest()


def publish_figures(cfg: SweepConfig, store: ArtifactStore,
                    results: pd.DataFrame) -> tuple[list[Path], Optional[str]]:
    """frontier.png, frontier.csv, the experiment's report and, last, the sweep's HTML report
    (`sweeper.html_report`), drawn on this machine and copied into the store when it is remote;
    none for a sweep without results.  Returns the paths and the figures' key.

    Figures whose inputs are unchanged (`figures_key`, kept in the figures folder) are not drawn
    again: a rerun that computed nothing never loads matplotlib.  Notes the report logged
    when it was drawn are logged again.
    """
    if results.empty:
        return [], None
    folder = store.figures_dir(cfg.name)
    table_csv = results.to_csv(index=False).encode()
    key = figures_key(cfg, table_csv)
    with contextlib.suppress(OSError, ValueError):
        drawn = json.loads((folder / FIGURES_STAMP).read_text())
        paths = [folder / name for name in drawn["paths"]]
        if drawn["key"] == key and all(path.is_file() for path in paths):
            for line in drawn["notes"]:
                logger.info(line)
            return paths, key
    notes: list[str] = []

    def note(line: str) -> None:
        notes.append(line)
        logger.info(line)

    # Drawn in a folder of this process's own, then kept by the store's write path: never
    # written through a link in the store.
    with tempfile.TemporaryDirectory(prefix="sweeper-figures-") as private:
        staging = Path(private)
        plot_path = plot_frontier(results, staging / "frontier.png", title=cfg.name,
                                  shadows=cfg.shadow.count)
        csv_path = staging / "frontier.csv"
        csv_path.write_bytes(table_csv)
        report_paths = draw(cfg.report, results, staging / "report", store.uri, note)
        drawn_paths = [plot_path, csv_path, *report_paths]
        paths = store.keep_figures(cfg.name, staging, drawn_paths)
    # The stamp lists the report before it is written: a report that failed is drawn again by
    # the next run, since a listed file that is not there voids the stamp.
    store.write_figure(cfg.name, FIGURES_STAMP, json.dumps({
        "key": key, "paths": [*(path.relative_to(staging).as_posix() for path in drawn_paths),
                              REPORT_FILE],
        "notes": notes}).encode())
    paths.append(write_report(store, cfg.name))  # last: it embeds the figures kept above
    return paths, key


class FigureDrawer(Listener):
    """The frontier, the experiment's report and the HTML report, drawn once the results are
    read back; before them, a run that computed something is added to the sweep's provenance
    (`sweeper.provenance`), which the HTML report lists."""

    def __init__(self, cfg: SweepConfig, store: ArtifactStore, config: dict[str, Any]) -> None:
        self.cfg, self.store = cfg, store
        self.config = config  # the manifest's: credentials masked
        self.code = code_state()  # now, as the sweep starts: the code it imported

    def on_sweep_end(self, end: SweepEnd) -> SweepEnd:
        if end.models_trained or any(kind.tasks for kind in end.task_times.values()):
            run = run_record(end.models_trained, time.perf_counter() - end.started,
                             end.task_times, self.code)
            self.store.write_provenance(self.cfg.name, record_run(
                self.store.read_provenance(self.cfg.name), run, self.config))
        figures, key = publish_figures(self.cfg, self.store, end.results)
        html = next((path for path in figures if path.name == REPORT_FILE), None)
        return dataclasses.replace(end, figures=figures, figures_key=key, html_report=html)


#: The tracking stamp's entry that keeps the sweep's page in MLflow's UI (`experiment_page`),
#: so a rerun that opens no MLflow still prints how to open it.
PAGE_KEY = "page"


class TrackingListener(Listener):
    """MLflow: the sweep's run, opened in the background while the first models train, and one
    nested run per cell as it lands.  At the end, what MLflow missed (cells computed while it was
    down, an earlier run's) is backfilled, the figures attached and the run closed — unless the
    stamp of the last whole logging (`tracking_stamp`, with the sweep's page: `PAGE_KEY`) says
    there is nothing to log: then a sweep that computed nothing never imports MLflow, and its
    page is the stamp's."""

    def __init__(self, cfg: SweepConfig, sweep_key: str, earlier_keys: list[str],
                 store: ArtifactStore, uri: str, config: dict[str, Any]) -> None:
        self.cfg, self.sweep_key, self.earlier_keys = cfg, sweep_key, earlier_keys
        self.store, self.uri, self.config = store, uri, config
        self._background: Optional[Executor] = None
        self._importing: Optional[Future] = None
        self._ready: Optional[Future] = None  # the tracker (or None: unavailable), once opened

    def open(self) -> Optional[SweepTracker]:
        """The sweep's tracker, or None (with a warning) when MLflow cannot be reached."""
        return open_tracker(self.uri, self.cfg.tracking.experiment, self.cfg.name, self.sweep_key,
                            config_params(self.config),
                            mlflow_artifact_location(self.store, self.uri),
                            self.store.read_scores_table, self.earlier_keys)

    def on_start_up(self, background: Executor) -> None:
        self._background = background
        self._importing = background.submit(import_mlflow)

    def on_sweep_start(self) -> None:
        background, importing = self._background, self._importing
        if background is None or importing is None:  # nothing to compute: opened at the end
            return
        self._ready = background.submit(lambda: (importing.result(), self.open())[1])

    def on_cell_landed(self, cell: Cell, row: dict[str, Any]) -> None:
        if self._ready is None:
            raise RuntimeError("a cell landed before the sweep started")
        tracker = self._ready.result()  # opened while the first models trained
        if tracker is not None:
            tracker.log_cell(row)

    def on_sweep_end(self, end: SweepEnd) -> SweepEnd:
        cfg = self.cfg
        stamp = self.store.read_tracking_stamp(cfg.name)
        stamp = dict(stamp) if isinstance(stamp, dict) else {}
        page = stamp.pop(PAGE_KEY, None)
        if self._ready is not None:
            tracker = self._ready.result()
        elif page is None or stamp != self._stamp(end):
            tracker = self.open()  # something is missing in MLflow, or unknown
        else:  # MLflow holds it all: its page is the one the stamp kept
            return dataclasses.replace(end, tracking_page=page)
        if tracker is None:  # open_tracker warned why
            return dataclasses.replace(
                end, tracking_warning=f"MLflow tracking at {redact(self.uri)} was unavailable")
        for row in end.results.to_dict("records"):  # cells computed while tracking was down, too
            tracker.log_cell(row)
        for path in end.figures:
            tracker.log_artifact(path)
        if end.figures:  # the frontier figure: the first card of the sweep's view, its
            with tempfile.TemporaryDirectory() as folder:  # thumbnail legible at a card's width
                card = plot_frontier_card(end.results, Path(folder) / "card.png", cfg.name)
                tracker.log_frontier_image(end.figures[0], card)
        # Before the frontier's series: MLflow's run page lists metrics in the order first logged.
        tracker.log_summary(summary_metrics(end.results, end.models_trained,
                                            time.perf_counter() - end.started))
        tracker.log_frontier_table(end.results, complete=not end.failures)
        page = tracker.page()
        warning = tracker.finish(failed=bool(end.failures))
        if warning is None:  # after the last write: the database file as MLflow left it
            self.store.write_tracking_stamp(cfg.name, {**self._stamp(end), PAGE_KEY: page})
        return dataclasses.replace(end, tracking_page=page, tracking_warning=warning)

    def on_sweep_interrupted(self) -> None:
        """The runs opened end KILLED, not RUNNING (a rerun reuses the cell run left open)."""
        if self._ready is None:
            return
        with contextlib.suppress(Exception):  # still opening, or MLflow down: left as it is
            tracker = self._ready.result(timeout=5)
            if tracker is not None:
                tracker.interrupt()

    def _stamp(self, end: SweepEnd) -> dict[str, Any]:
        """What MLflow holds of this sweep when it is complete (`tracking_stamp`): compared on a
        rerun that computed nothing, so MLflow is opened only when something is missing."""
        return tracking_stamp(self.uri, self.cfg.tracking.experiment, self.sweep_key,
                              end.results.get("cell_key", []), end.figures_key)
