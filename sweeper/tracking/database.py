"""What sweeper reads and writes of a SQLite MLflow database itself, around MLflow's client.

`database_problem` tells a file that cannot be MLflow's database (not SQLite, truncated, not
writable, another program's) before any work, reading it without writing a byte: MLflow would
find out only when the sweep logs, minutes in, and call it an outage.
`database_state` and `database_identity` let the tracker's stamp and its end-of-sweep check
see the file (a rerun with nothing to log opens no MLflow; a database deleted under a running
sweep is noticed); `relocate_artifacts` makes a copied or moved store's own database point at
its own artifact folder before MLflow is asked anything.

MLflow has no API that moves an experiment's or a run's artifact folder (its client renames an
experiment, nothing more), so that rewrite is SQL on MLflow's tables: it is made only on a schema
revision it was tested on (`TESTED_REVISIONS`, MLflow's `alembic_version`), and refused on any
other (`UnknownSchema`), never written blind into a schema MLflow has since migrated.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import stat
from pathlib import Path
from typing import Optional
from urllib.parse import unquote, urlsplit

from sweeper.credentials import redact

logger = logging.getLogger(__name__)

#: The MLflow schema revisions (`alembic_version`) whose `experiments.artifact_location` and
#: `runs.artifact_uri` `relocate_artifacts` rewrites: the head of MLflow 3.17's migrations, the
#: schema tests/test_sweeper/tracking/test_mlflow_db.py checks the rewrite on (a database `mlflow db upgrade` made).
#: MLflow bumped (pyproject.toml) brings its own head: that test then fails until the rewrite is
#: checked on it and its revision added here.
TESTED_REVISIONS = ("dc11669786a5",)


class UnknownSchema(RuntimeError):
    """A copied or moved store's MLflow database is of a schema revision the artifact rewrite
    was not tested on: it is not touched, and the sweep logs no runs to it."""


def database_path(uri: str) -> Optional[Path]:
    """The file of a `sqlite:///` tracking store (SQLAlchemy's form: sqlite:///relative,
    sqlite:////absolute); None for a server."""
    parts = urlsplit(uri)
    return Path(unquote(parts.path[1:])) if parts.scheme == "sqlite" else None


#: The first 16 bytes of every SQLite database file.
SQLITE_HEADER = b"SQLite format 3\x00"
#: Tables of MLflow's tracking schema: a database holding tables, but not these, is another
#: program's (MLflow would add its own beside them, or fail on a name they share).
MLFLOW_TABLES = ("alembic_version", "experiments", "runs")


def database_problem(database: os.PathLike | str) -> Optional[str]:
    """Why the file `database` cannot be the SQLite database of an MLflow tracking store, in
    words, or None (absent or empty: MLflow creates its tables; MLflow's, whole and writable).

    Never writes: the header is read as bytes (a truncated file holds fewer pages than it
    declares), the tables are listed through a read-only, immutable connection (SQLite makes no
    journal beside the file, takes no lock), and writability is asked by opening the file for
    writing, which changes nothing (a read-only mount, an immutable file: refused, for root
    too)."""
    path = Path(os.path.abspath(os.path.expanduser(os.fspath(database))))
    try:
        info = path.stat()
    except FileNotFoundError:
        return None
    except OSError as error:
        return f"{path} cannot be read ({error.strerror or error})"
    if stat.S_ISDIR(info.st_mode):
        return f"{path} is a folder, not a database file; name the file, e.g. {path / 'mlflow.db'}"
    if not stat.S_ISREG(info.st_mode):
        return f"{path} is not a regular file, so it cannot be a database"
    try:
        with open(path, "rb") as handle:
            header = handle.read(100)
    except OSError as error:
        return f"{path} cannot be read ({error.strerror or error})"
    problem = _content_problem(path, header, info.st_size) if info.st_size else None
    if problem:
        return problem
    try:  # last: only a file that is a database is opened for writing (and nothing written)
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    except OSError as error:
        return (f"{path} is not writable ({error.strerror or error}); MLflow writes every run "
                "into it")
    return None


def _content_problem(path: Path, header: bytes, size: int) -> Optional[str]:
    """Why the bytes of the non-empty file `path` are not MLflow's SQLite database, or None."""
    if not header.startswith(SQLITE_HEADER):
        return (f"{path} is not a SQLite database (it does not start with SQLite's header); name "
                "MLflow's database file, or a new one")
    import sqlite3

    if _short_of(header, size) and _short_of(*_locked_look(path)):
        return (f"{path} is truncated: it holds {size} bytes of the {_declared_size(header)} its "
                "header declares (a copy cut short?); restore it, or name a new file")
    try:
        tables, revisions = _tables(path, "mode=ro&immutable=1")
    except sqlite3.DatabaseError:
        try:  # immutable takes no lock: a sweep writing it now may have shown a half-written page
            tables, revisions = _tables(path, "mode=ro")
        except sqlite3.DatabaseError as error:
            if "locked" in str(error):  # a writer holds it: a database in use, MLflow's to open
                return None
            return (f"{path} is not a readable SQLite database ({error}); restore it, or name a "
                    "new file")
    if tables and not set(MLFLOW_TABLES) <= tables:
        shown = ", ".join(sorted(tables)[:5]) + (" …" if len(tables) > 5 else "")
        return (f"{path} is a SQLite database, but not MLflow's (it has no "
                f"{'/'.join(sorted(set(MLFLOW_TABLES) - tables))} table; it holds {shown}); "
                "name MLflow's database file, or a new one")
    return _revision_problem(path, revisions) if tables else None


def _revision_problem(path: Path, revisions: list[str]) -> Optional[str]:
    """Why MLflow will not open its database `path`, at schema revision(s) `revisions`: MLflow
    opens only its own head revision (an older one needs `mlflow db upgrade`, a newer one the
    MLflow that wrote it), and says so only when the sweep logs; or None."""
    known = schema_revisions()
    if known is None or len(revisions) == 1 and revisions[0] == known[0]:
        return None
    head, older = known
    found = ", ".join(revisions) or "none"
    what = (f"run `mlflow db upgrade sqlite:///{path}` after a backup (revision {found} is an "
            "older MLflow's)" if revisions and set(revisions) <= older else
            f"use the MLflow that wrote it (revision {found} is none this MLflow knows), or name "
            "another database")
    return (f"{path} is an MLflow database at schema revision {found}, but the MLflow installed "
            f"here ({_mlflow_version()}) opens only revision {head}: running this again will not "
            f"help; {what}")


#: MLflow's migration scripts, under its package: one file per schema revision.
MIGRATIONS = Path("store") / "db_migrations" / "versions"


@functools.lru_cache(maxsize=1)
def schema_revisions() -> Optional[tuple[str, frozenset[str]]]:
    """(the head, the older revisions) of the installed MLflow's tracking schema, read from its
    migration scripts' `revision` and `down_revision` lines (alembic imports every script to
    say it: seconds), or None when MLflow or one head is not found."""
    import importlib.util

    spec = importlib.util.find_spec("mlflow")
    if spec is None or spec.origin is None:
        return None
    revisions, parents = set(), set()
    for script in (Path(spec.origin).parent / MIGRATIONS).glob("*.py"):
        text = script.read_text(encoding="utf-8", errors="replace")
        revision = re.search(r"^revision\s*=\s*['\"]([0-9a-f]+)['\"]", text, re.MULTILINE)
        down = re.search(r"^down_revision\s*=\s*(.+)$", text, re.MULTILINE)
        if revision:
            revisions.add(revision.group(1))
        if down:
            parents.update(re.findall(r"['\"]([0-9a-f]+)['\"]", down.group(1)))
    heads = revisions - parents
    if len(heads) != 1:
        return None
    (head,) = heads
    return head, frozenset(revisions - heads)


def _mlflow_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"MLflow {version('mlflow')}"
    except PackageNotFoundError:
        return "MLflow"


def _short_of(header: bytes, size: int) -> bool:
    """Whether a file of `size` bytes is shorter than its SQLite `header` declares."""
    declared = _declared_size(header)
    return declared is not None and size < declared


def _locked_look(path: Path) -> tuple[bytes, int]:
    """(header, size) of the SQLite file `path` read again under SQLite's shared lock, which waits
    for a writer to finish its commit (one mid-commit may have written the header before the
    pages it declares); a file SQLite cannot lock or read is given as it is."""
    import sqlite3

    with contextlib.ExitStack() as stack:
        with contextlib.suppress(sqlite3.DatabaseError):  # a lock not had: the look is unlocked
            db = stack.enter_context(contextlib.closing(sqlite3.connect(
                f"{path.as_uri()}?mode=ro", uri=True, timeout=5, isolation_level=None)))
            db.execute("BEGIN")
            db.execute("SELECT count(*) FROM sqlite_master").fetchall()  # holds SHARED till the end
        with open(path, "rb") as handle:
            return handle.read(100), os.fstat(handle.fileno()).st_size


def _tables(path: Path, mode: str) -> tuple[set[str], list[str]]:
    """The tables of the SQLite database `path`, read through a read-only connection (`mode`: its
    URI parameters), which never writes beside it, and for MLflow's its schema revisions."""
    import sqlite3

    revisions: list[str] = []
    with contextlib.closing(sqlite3.connect(f"{path.as_uri()}?{mode}", uri=True, timeout=5)) as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if set(MLFLOW_TABLES) <= tables:
            revisions = sorted(str(row[0]) for row in
                               db.execute("SELECT version_num FROM alembic_version").fetchall())
    return tables, revisions


def _declared_size(header: bytes) -> Optional[int]:
    """The size in bytes a SQLite header declares (page size × page count), or None when the
    count is not kept valid (written by SQLite before 3.7.0: its change counters differ)."""
    if len(header) < 100 or header[24:28] != header[92:96]:
        return None
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    return page_size * pages if pages else None


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


def database_identity(uri: str) -> Optional[tuple[()] | tuple[int, int]]:
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
    they are.  A rewrite on a schema revision not in `TESTED_REVISIONS` raises `UnknownSchema`
    before anything is written."""
    import sqlite3

    database = database_path(uri)
    here = urlsplit(artifact_location or "")
    if (artifact_location is None or database is None or here.scheme != "file"
            or not database.is_file()):
        return
    folder = Path(unquote(here.path))
    if database.resolve().parent != folder.parent.resolve():
        return
    with contextlib.closing(sqlite3.connect(database, timeout=30)) as db, db:
        try:
            rows = db.execute("SELECT experiment_id, artifact_location FROM experiments").fetchall()
        except sqlite3.DatabaseError:  # not (yet) MLflow's: nothing to relocate
            return
        moved = [(experiment_id, old) for experiment_id, old in rows
                 if old is not None and _elsewhere(old, artifact_location, folder.name)]
        if moved:
            _check_revision(db, database, moved[0][1])
        for experiment_id, old in moved:
            logger.warning("the store was copied or moved from %s: its MLflow runs keep their "
                           "artifacts in %s from now on", redact(old), folder)
            db.execute("UPDATE experiments SET artifact_location = ? WHERE experiment_id = ?",
                       (artifact_location, experiment_id))
            db.execute("UPDATE runs SET artifact_uri = ? || substr(artifact_uri, ?) WHERE "
                       "experiment_id = ? AND substr(artifact_uri, 1, ?) = ?",
                       (artifact_location, len(old) + 1, experiment_id, len(old), old))


def _elsewhere(old: Optional[str], artifact_location: str, name: str) -> bool:
    """Whether an experiment's artifact folder `old` is another store's `name` folder (a
    `file:` URI other than `artifact_location`)."""
    parts = urlsplit(old or "")
    return (parts.scheme == "file" and old != artifact_location
            and Path(unquote(parts.path)).name == name)


def _check_revision(db, database: Path, old: str) -> None:
    """`UnknownSchema` unless the database's MLflow schema revision is in `TESTED_REVISIONS`."""
    import sqlite3

    try:
        found = db.execute("SELECT version_num FROM alembic_version").fetchall()
    except sqlite3.DatabaseError:
        found = []
    revisions = sorted(str(revision) for (revision,) in found)
    if len(revisions) == 1 and revisions[0] in TESTED_REVISIONS:
        return
    raise UnknownSchema(
        f"{database} was copied or moved from {redact(old)} and its MLflow runs must be pointed "
        f"at this store's artifacts, but its MLflow schema revision ({', '.join(revisions) or 'none'}"
        f") is not one sweeper rewrites (tested: {', '.join(TESTED_REVISIONS)}); nothing was "
        "changed and no runs are logged to it. Use the MLflow version sweeper pins "
        "(pyproject.toml), or set tracking.uri to another database.")
