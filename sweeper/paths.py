"""Names and folders that come from the user and become paths: checked before any work.

A sweep's name becomes `sweeps/<name>/` under the store, a config group option becomes
`conf/<group>/<option>.yaml`, an output folder is created and written: a name with `/` or `..`
would read or write outside the folder meant for it, and a folder that cannot be created is
found out only after minutes of training.  Each check returns the problem in words (None: fine),
so every command can name it in its one error message.  Standard library only: the light
commands (`sweeper.sync`, `sweeper.bounds`) use it without importing the sweep's stack.
"""

from __future__ import annotations

import errno
import os
import re
import uuid
from pathlib import Path
from typing import Optional
from urllib.parse import unquote, urlsplit

#: A name that becomes one folder or file name: no separator, no leading '.', no '..'.
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


def name_problem(field: str, value: object) -> Optional[str]:
    """Why `value` cannot be the single folder name `field` becomes, or None."""
    if isinstance(value, str) and NAME_PATTERN.match(value):
        return None
    return (f"{field}={value!r}: use 1 to 100 letters, digits, '_', '-', '.', starting with a letter "
            "or digit (it becomes a folder name: no '/', no leading '.' or '..')")


def option_problem(group: str, value: str) -> Optional[str]:
    """Why `value` cannot be an option of the config group `group` (a file name in the group's
    folder, without its extension), or None: a path would load a YAML from outside the folder."""
    if "/" in value or "\\" in value or ".." in value or value.startswith((".", "~")):
        return (f"{value!r} is a path, but {group} takes the name of an option of its config "
                "group (a file in the group's folder), nothing outside it")
    return None


#: Characters no path or MLflow name may hold: NUL and the other C0 controls, and DEL.  The OS
#: refuses NUL outright, and MLflow retries a request that carries one without end.
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f]")


def control_problem(field: str, value: str) -> Optional[str]:
    """Why `value` cannot be carried by the OS or MLflow (a control character), or None."""
    found = CONTROL_CHARACTERS.search(value)
    if found is None:
        return None
    return (f"{field}={value!r}: holds the control character {found.group()!r} at position "
            f"{found.start()}, which no path or MLflow name can carry; remove it")


def folder_problem(field: str, given: str, path: os.PathLike | str) -> Optional[str]:
    """Why the folder `path` cannot be written (or created with its parents), or None.

    Asks the file system rather than the permission bits: a probe folder is created in `path`
    (or in its nearest existing ancestor) and removed at once, so `/proc`, a read-only mount
    or a file in the way are all found, for root too.  A control character, a name too long for
    the file system and a symlink loop are named too.  Nothing is left behind either way.
    """
    text = os.fspath(path)
    problem = control_problem(field, text)
    if problem:
        return problem
    given = shortened(given)
    try:
        return _folder_problem(field, given, Path(os.path.abspath(os.path.expanduser(text))))
    except RuntimeError:  # pathlib's "Symlink loop from …"
        return f"{field}={given!r}: a symbolic link loop on the way (ELOOP); give a real folder"
    except OSError as error:
        if error.errno == errno.ENAMETOOLONG:
            return (f"{field}={given!r}: too long for the file system ({len(text)} characters; "
                    f"at most {_limit('PC_PATH_MAX', 4096)} in all and "
                    f"{_limit('PC_NAME_MAX', 255)} bytes per folder name); give a shorter path")
        if error.errno == errno.ELOOP:
            return f"{field}={given!r}: a symbolic link loop on the way (ELOOP); give a real folder"
        return f"{field}={given!r}: cannot be used ({error.strerror or error})"


def shortened(value: str, keep: int = 120) -> str:
    """`value` as an error message shows it: a path of thousands of characters is cut in the
    middle (its start and end say which it was), with its length."""
    if len(value) <= keep:
        return value
    return f"{value[:keep - 40]}…{value[-20:]} ({len(value)} characters)"


def _limit(name: str, default: int) -> int:
    try:
        return int(os.pathconf("/", name))
    except (OSError, ValueError):
        return default


def _folder_problem(field: str, given: str, target: Path) -> Optional[str]:
    target.resolve()  # a symlink loop raises here (RuntimeError), a name too long (OSError)
    ancestor = target
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if target.exists() and not target.is_dir():
        return f"{field}={given!r}: {target} is a file; give a folder"
    if not ancestor.is_dir():
        if ancestor.is_symlink():  # exists() is False for a link into a loop or nowhere
            return f"{field}={given!r}: {ancestor} is a symbolic link that leads nowhere"
        return f"{field}={given!r}: cannot be created, {ancestor} is a file, not a folder"
    probe = ancestor / f".sweeper-write-check-{uuid.uuid4().hex}"
    try:
        probe.mkdir()
    except OSError as error:
        if error.errno == errno.ENAMETOOLONG:
            raise
        reason = error.strerror or str(error)
        if ancestor == target:
            return f"{field}={given!r}: the folder {target} is not writable ({reason})"
        return f"{field}={given!r}: cannot be created, {ancestor} is not writable ({reason})"
    probe.rmdir()
    return None


#: The tracking URI schemes MLflow's tracking stores take (a database scheme may name its driver:
#: postgresql+psycopg2://); a bare path is a local folder, as `file://` is.
TRACKING_SCHEMES = ("file", "sqlite", "postgresql", "mysql", "mssql", "http", "https",
                    "databricks")


#: Each database's SQLAlchemy drivers MLflow can use, with the module each imports.
DATABASE_DRIVERS = {
    "postgresql": {"psycopg2": "psycopg2", "psycopg": "psycopg", "pg8000": "pg8000"},
    "mysql": {"pymysql": "pymysql", "mysqldb": "MySQLdb", "mysqlconnector": "mysql.connector"},
    "mssql": {"pyodbc": "pyodbc", "pymssql": "pymssql"},
}


def _driver_problem(field: str, uri: str, scheme: str) -> Optional[str]:
    """Why SQLAlchemy could not open the database `uri` names for want of its driver, or None.
    A bare `postgresql://` means SQLAlchemy's default driver (psycopg 3 since SQLAlchemy 2.1),
    which MLflow would find missing only after the whole sweep ran; the drivers installed here
    are named instead."""
    database, _, driver = scheme.partition("+")
    drivers = DATABASE_DRIVERS.get(database)
    if drivers is None:
        return None
    from sqlalchemy.engine import make_url

    try:
        driver = driver or make_url(uri).get_dialect().driver
    except Exception:  # noqa: BLE001 - an address SQLAlchemy cannot read: MLflow says why
        return None
    if _installed(drivers.get(driver, driver)):
        return None
    installed = [f"{database}+{name}://" for name, module in drivers.items() if _installed(module)]
    return (f"{field}: {scheme}:// is opened with the database driver {driver!r}, which is not "
            f"installed; " + (f"name an installed one: {', '.join(installed)}" if installed else
                              f"install one of {sorted(drivers)}"))


def _installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module.split(".")[0]) is not None


def accepted_tracking_schemes() -> list[str]:
    """The schemes `tracking_location_problem` lets through on this machine, as its refusal
    lists them: a database's bare scheme only when SQLAlchemy's default driver for it is
    installed, and its `+driver` form for each driver that is (none: the database is left out)."""
    from sqlalchemy.engine import make_url

    accepted = []
    for scheme in TRACKING_SCHEMES:
        drivers = DATABASE_DRIVERS.get(scheme)
        if drivers is None:
            accepted.append(f"{scheme}://")
            continue
        installed = [name for name, module in drivers.items() if _installed(module)]
        default = make_url(f"{scheme}://").get_dialect().driver
        if _installed(drivers.get(default, default)):
            accepted.append(f"{scheme}://")
        accepted += [f"{scheme}+{name}://" for name in installed]
    return accepted


#: Where the Databricks SDK (MLflow's client for `databricks` URIs) reads its profiles.
DATABRICKS_CONFIG = "~/.databrickscfg"


def _databricks_problem(field: str, uri: str) -> Optional[str]:
    """Why MLflow could not reach Databricks with `uri` (`databricks`, `databricks://PROFILE`), or
    None: the SDK is missing, or no credentials are configured for the profile (the URI's, else
    DATABRICKS_CONFIG_PROFILE's, else DEFAULT): the environment's DATABRICKS_HOST for the default
    profile, or the profile's section of ~/.databrickscfg (DATABRICKS_CONFIG_FILE).
    MLflow says so only once the sweep logs, and "run sync once it is back" would not help."""
    import configparser

    if not _installed("databricks"):
        return (f"{field}={uri!r}: MLflow reaches Databricks through the databricks-sdk package, "
                "which is not installed: pip install databricks-sdk")
    profile = ((urlsplit(uri).netloc.split(":", 1)[0] if "://" in uri else "")
               or os.environ.get("DATABRICKS_CONFIG_PROFILE") or "DEFAULT")
    if profile == "DEFAULT" and os.environ.get("DATABRICKS_HOST"):
        return None
    config_file = os.path.expanduser(os.environ.get("DATABRICKS_CONFIG_FILE", DATABRICKS_CONFIG))
    parser = configparser.ConfigParser()
    try:
        parser.read(config_file)
    except configparser.Error:
        pass
    found = (parser.defaults().get("host") if profile == "DEFAULT"
             else parser.has_section(profile) and parser[profile].get("host"))
    if found:
        return None
    return (f"{field}={uri!r}: no Databricks profile {profile!r} is configured (no [{profile}] "
            f"section with a host in {config_file}"
            + (", and DATABRICKS_HOST is not set" if profile == "DEFAULT" else "")
            + "); `databricks configure --profile NAME` writes one, then name it: "
            "databricks://NAME")


def tracking_location_problem(field: str, uri: str) -> Optional[str]:
    """Why MLflow could not track to `uri`, found without asking MLflow, or None: a scheme no
    tracking store takes (`foo://x`), a control character, a local folder (`file://`, a bare
    path, the folder of a `sqlite:///` database) that cannot be written, a `sqlite:///` file
    that is not MLflow's database (`sweeper.mlflow_db.database_problem`, read without writing)
    or a Databricks URI with no profile.  MLflow itself finds these only after its retries,
    minutes later, or calls them an outage."""
    problem = control_problem(field, uri)
    if problem:
        return problem
    parts = urlsplit(uri)
    scheme = parts.scheme.lower() if "://" in uri or uri.startswith("sqlite:") else ""
    if scheme and scheme.split("+", 1)[0] not in TRACKING_SCHEMES:
        return (f"{field}={uri!r}: scheme {scheme!r} is not a tracking store MLflow has; use "
                f"{accepted_tracking_schemes()}, or a local folder")
    if scheme == "databricks" or uri.strip().lower() == "databricks":  # MLflow's bare form too
        return _databricks_problem(field, uri)
    if scheme in ("", "file"):
        if scheme == "file" and parts.netloc not in ("", "localhost"):
            return (f"{field}={uri!r}: a file:// URI names no host ({parts.netloc!r} given); "
                    "write file:///ABSOLUTE/PATH or a plain path")
        return folder_problem(field, uri, unquote(parts.path) if scheme else uri)
    if scheme == "sqlite":
        database = unquote(uri.split("://", 1)[1] if "://" in uri else "")
        database = database[1:] if database.startswith("/") else database
        if database in ("", ":memory:"):
            return (f"{field}={uri!r}: MLflow needs a database file, e.g. "
                    "sqlite:////ABSOLUTE/PATH/mlflow.db")
        from sweeper.mlflow_db import database_problem

        problem = database_problem(database)  # first: a file not MLflow's is not even probed
        if problem:
            return f"{field}={uri!r}: {problem}"
        return folder_problem(field, uri, os.path.dirname(os.path.abspath(database)))
    return _driver_problem(field, uri, scheme)


def file_problem(field: str, given: str) -> Optional[str]:
    """Why the file `given` (an output of a command) could not be written, or None: its folder
    cannot be written or created, or it is a folder.  Checked before the work that produces it."""
    path = Path(os.path.abspath(os.path.expanduser(given))) if given else None
    if path is None or given.endswith(os.sep):
        return f"{field}={given!r}: give a file's path"
    problem = folder_problem(field, given, path.parent)
    if problem:
        return problem
    if path.is_dir():
        return f"{field}={given!r}: is a folder; give a file's path"
    if path.exists() and not os.access(path, os.W_OK):
        return f"{field}={given!r}: the file is not writable"
    return None
