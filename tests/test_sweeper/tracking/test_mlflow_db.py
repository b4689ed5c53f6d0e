"""The SQL sweeper writes into MLflow's own database (`sweeper.tracking.database.relocate_artifacts`: a
copied store's runs pointed at its own artifact folder; MLflow has no API for it), checked on a
database MLflow itself made and migrated (`mlflow db upgrade`) and read back through MLflow's
client; a schema revision it was not tested on is refused before anything is written."""

from __future__ import annotations

import logging
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient

from sweeper.tracking.database import (TESTED_REVISIONS, UnknownSchema, relocate_artifacts,
                                       schema_revisions)
from sweeper.tracking.recorder import open_tracker

MLFLOW = Path(sys.executable).parent / "mlflow"


@pytest.fixture(scope="module")
def original(tmp_path_factory) -> tuple[Path, str, str]:
    """A store folder whose `mlflow.db` MLflow's own `mlflow db upgrade` created, holding an
    experiment whose artifacts are the store's `mlartifacts/` and a run of it: (folder,
    experiment id, run id)."""
    folder = tmp_path_factory.mktemp("original")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    done = subprocess.run([str(MLFLOW), "db", "upgrade", uri], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    client = MlflowClient(uri)
    experiment_id = client.create_experiment("sweeper", (folder / "mlartifacts").as_uri())
    run_id = client.create_run(experiment_id).info.run_id
    return folder, experiment_id, run_id


def copied(original, tmp_path: Path) -> tuple[Path, str, str]:
    """The store copied to `tmp_path/copy`: (its folder, its tracking URI, its artifact URI)."""
    copy = tmp_path / "copy"
    shutil.copytree(original[0], copy)
    return copy, f"sqlite:///{copy / 'mlflow.db'}", (copy / "mlartifacts").as_uri()


def revision(database: Path) -> list[str]:
    with sqlite3.connect(database) as db:
        return [row[0] for row in db.execute("SELECT version_num FROM alembic_version")]


def test_the_rewrite_holds_on_a_database_mlflow_migrated(original, tmp_path):
    """MLflow's migrations end at a revision the rewrite knows; MLflow's client reads the copy's
    experiment and run at the copy's artifact folder, and the original is untouched."""
    folder, experiment_id, run_id = original
    assert revision(folder / "mlflow.db") == list(TESTED_REVISIONS[-1:])  # MLflow's head
    copy, uri, artifacts = copied(original, tmp_path)
    relocate_artifacts(uri, artifacts)
    client = MlflowClient(uri)
    assert client.get_experiment(experiment_id).artifact_location == artifacts
    run_uri = client.get_run(run_id).info.artifact_uri
    assert run_uri.startswith(artifacts + "/") and run_uri.endswith(f"/{run_id}/artifacts")
    before = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    assert before.get_experiment(experiment_id).artifact_location == \
        (folder / "mlartifacts").as_uri()


def test_an_unknown_schema_revision_is_refused_before_anything_is_written(original, tmp_path,
                                                                           caplog):
    folder, experiment_id, run_id = original
    copy, uri, artifacts = copied(original, tmp_path)
    with sqlite3.connect(copy / "mlflow.db") as db:  # a schema MLflow has migrated since
        db.execute("UPDATE alembic_version SET version_num = 'f00dfeedbeef'")
    with pytest.raises(UnknownSchema, match="schema revision \\(f00dfeedbeef\\) is not one"):
        relocate_artifacts(uri, artifacts)
    with sqlite3.connect(copy / "mlflow.db") as db:
        (location,) = db.execute("SELECT artifact_location FROM experiments WHERE "
                                 "experiment_id = ?", (experiment_id,)).fetchone()
    assert location == (folder / "mlartifacts").as_uri()  # not rewritten
    # A sweep says why in one line, logs no runs and writes none into the original store.
    with caplog.at_level(logging.WARNING, logger="sweeper.tracking.recorder"):
        assert open_tracker(uri, "sweeper", "s", "key", {}, artifacts) is None
    (said,) = [r.getMessage() for r in caplog.records if r.name == "sweeper.tracking.recorder"]
    assert "f00dfeedbeef" in said and "no runs are logged to it" in said
    assert "Traceback" not in said


def test_a_store_not_moved_is_not_checked(original, tmp_path):
    """Nothing to rewrite, nothing refused: a revision only matters to the rewrite."""
    folder, experiment_id, _ = original
    home = tmp_path / "home"
    shutil.copytree(folder, home)
    uri = f"sqlite:///{home / 'mlflow.db'}"
    with sqlite3.connect(home / "mlflow.db") as db:
        db.execute("UPDATE alembic_version SET version_num = 'f00dfeedbeef'")
        db.execute("UPDATE experiments SET artifact_location = ?",
                   ((home / "mlartifacts").as_uri(),))
    relocate_artifacts(uri, (home / "mlartifacts").as_uri())  # no error


def test_the_schema_head_read_from_mlflows_scripts_is_alembics():
    """`schema_revisions` reads the migration scripts' lines rather than importing them; alembic,
    which imports them, names the same head (MLflow's own `_get_latest_schema_revision`)."""
    from mlflow.store.db.utils import _get_latest_schema_revision

    head, older = schema_revisions()
    assert head == _get_latest_schema_revision() and head not in older and len(older) > 50


@pytest.mark.parametrize("found, said", [
    ("f00dfeedbeef", "use the MLflow that wrote it (revision f00dfeedbeef is none this MLflow "
                     "knows)"),
    ("older", "run `mlflow db upgrade sqlite:///{db}` after a backup (revision {rev} is an older "
              "MLflow's)"),
])
def test_sync_to_a_database_at_another_revision_is_refused_as_permanent(original, tmp_path, capsys,
                                                                       found, said):
    """Issue 54: `sweeper sync --tracking-uri sqlite:///…` to a database MLflow will not open (its
    schema at another revision) said "run this again once it is back" and exited 1."""
    from sweeper.cli.sync_command import main as sync_main

    database = tmp_path / "elsewhere" / "mlflow.db"
    database.parent.mkdir()
    shutil.copy(original[0] / "mlflow.db", database)
    revision_given = found if found != "older" else sorted(schema_revisions()[1])[0]
    with sqlite3.connect(database) as db:
        db.execute("UPDATE alembic_version SET version_num = ?", (revision_given,))
    before = database.read_bytes()
    sweep = tmp_path / "runs" / "sweeps" / "q"
    sweep.mkdir(parents=True)
    (sweep / "sweep.json").write_text('{"name": "q", "sweep_key": "k", "cells": ["c"], "config": '
                                      '{"tracking": {"uri": null, "experiment": "sweeper"}}}')
    assert sync_main(["--store-root", str(tmp_path / "runs"), "--experiment", "q",
                      "--tracking-uri", f"sqlite:///{database}"]) == 2
    err = capsys.readouterr().err
    assert (f"{database} is an MLflow database at schema revision {revision_given}, but the MLflow "
            "installed here (MLflow ") in err
    assert "running this again will not help" in err
    assert said.format(db=database, rev=revision_given) in err
    assert "once it is back" not in err and "Traceback" not in err
    assert database.read_bytes() == before  # not migrated, not written


def test_a_sweep_refuses_a_tracking_database_at_another_revision_before_anything(original,
                                                                                 tmp_path):
    from sweeper.checks.preflight import preflight
    from sweeper.config import ConfigError

    database = tmp_path / "mlflow.db"
    shutil.copy(original[0] / "mlflow.db", database)
    with sqlite3.connect(database) as db:
        db.execute("UPDATE alembic_version SET version_num = 'f00dfeedbeef'")
    with pytest.raises(ConfigError) as refused:
        preflight([f"store.root={tmp_path / 'runs'}", f"tracking.uri=sqlite:///{database}"])
    assert "schema revision f00dfeedbeef" in str(refused.value)
    assert "running this again will not help" in str(refused.value)
    assert not (tmp_path / "runs").exists()
