"""What sweeper reads and writes of a SQLite MLflow database itself, around MLflow's client.

`database_state` and `database_identity` let the tracker's stamp and its end-of-sweep check
see the file (a rerun with nothing to log opens no MLflow; a database deleted under a running
sweep is noticed); `relocate_artifacts` makes a copied or moved store's own database point at
its own artifact folder before MLflow is asked anything.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Optional
from urllib.parse import unquote, urlsplit

from sweeper.credentials import redact

logger = logging.getLogger(__name__)


def database_path(uri: str) -> Optional[Path]:
    """The file of a `sqlite:///` tracking store (SQLAlchemy's form: sqlite:///relative,
    sqlite:////absolute); None for a server."""
    parts = urlsplit(uri)
    return Path(unquote(parts.path[1:])) if parts.scheme == "sqlite" else None


def _stat(uri: str):
    """The `sqlite:///` tracking store's file's `os.stat` ("absent" when there is none); None
    for a server."""
    path = database_path(uri)
    if path is None:
        return None
    try:
        return path.stat()
    except OSError:
        return "absent"


def database_state(uri: str) -> Optional[list[int]]:
    """[size, mtime in ns] of a `sqlite:///` tracking store's file ([] when it is absent); None for
    a server, whose state the stamp cannot see."""
    state = _stat(uri)
    return state if state is None else [] if state == "absent" else [state.st_size,
                                                                        state.st_mtime_ns]


def database_identity(uri: str) -> Optional[tuple[int, int]]:
    """(device, inode) of a `sqlite:///` tracking store's file, () when it is absent; None for
    a server.  A file deleted (or replaced) under a running sweep changes it."""
    state = _stat(uri)
    return state if state is None else () if state == "absent" else (state.st_dev, state.st_ino)


def relocate_artifacts(uri: str, artifact_location: Optional[str]) -> None:
    """Point a copied or moved store's MLflow runs at its own artifact folder.

    MLflow keeps an experiment's artifact folder, and each run's, as absolute URIs in its
    database.  A store's own SQLite database (the default, `<store.root>/mlflow.db`) copied or
    moved with the store still names the old store's `mlartifacts/`: every run of the copy would
    write its figures into the original (onto another disk, or a store given away).  So when the
    database lives in the store whose artifact folder is `artifact_location`, every experiment
    whose artifacts are another store's `mlartifacts` folder is rewritten to this one, with its
    runs: the copy is self-contained.  Databases elsewhere (a shared file, a server) are left as
    they are."""
    import sqlite3

    database = database_path(uri)
    here = urlsplit(artifact_location or "")
    if database is None or here.scheme != "file" or not database.is_file():
        return
    folder = Path(unquote(here.path))
    if database.resolve().parent != folder.parent.resolve():
        return
    with contextlib.closing(sqlite3.connect(database, timeout=30)) as db, db:
        try:
            rows = db.execute("SELECT experiment_id, artifact_location FROM experiments").fetchall()
        except sqlite3.DatabaseError:  # not (yet) MLflow's: nothing to relocate
            return
        for experiment_id, old in rows:
            parts = urlsplit(old or "")
            if (parts.scheme != "file" or old == artifact_location
                    or Path(unquote(parts.path)).name != folder.name):
                continue
            logger.warning("the store was copied or moved from %s: its MLflow runs keep their "
                           "artifacts in %s from now on", redact(old), folder)
            db.execute("UPDATE experiments SET artifact_location = ? WHERE experiment_id = ?",
                       (artifact_location, experiment_id))
            db.execute("UPDATE runs SET artifact_uri = ? || substr(artifact_uri, ?) WHERE "
                       "experiment_id = ? AND substr(artifact_uri, 1, ?) = ?",
                       (artifact_location, len(old) + 1, experiment_id, len(old), old))
