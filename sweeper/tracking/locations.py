"""Where MLflow would track, checked before any work: a tracking URI's scheme, its database
driver, its folder or SQLite file, its Databricks profile.

MLflow itself finds each of these only after its retries, minutes into a sweep, or calls them an
outage; here each is one problem in words (None: fine), for the sweep's config check and for
`sweeper sync`.  Light: SQLAlchemy and the database check are imported when a URI needs them.
"""

from __future__ import annotations

import os
from typing import Optional
from urllib.parse import unquote, urlsplit

from sweeper.paths import control_problem, folder_problem


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
    that is not MLflow's database (`sweeper.tracking.database.database_problem`, read
    without writing)
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
        from sweeper.tracking.database import database_problem

        problem = database_problem(database)  # first: a file not MLflow's is not even probed
        if problem:
            return f"{field}={uri!r}: {problem}"
        return folder_problem(field, uri, os.path.dirname(os.path.abspath(database)))
    return _driver_problem(field, uri, scheme)
