"""How a person opens a sweep in MLflow's UI: the light `mlflow ui` command a sweep prints, the URL
that opens the sweep in model-training mode on its frontier, and the saved view that URL opens
(MLflow's `mlflow.sharedViewState.<id>` experiment tag).  No MLflow import: strings only.

MLflow 3.17's UI picks GenAI or model training from the URL (`workflowType`) or from a switch
the browser keeps, never from an experiment tag, so the URL is what sweeper can choose.

What a sweep prints (`open_lines`) is pasted: the command on a line of its own (a shell reads
the URL's `&` as "run in the background"), naming the port it listens on (`ui_port`), and the
URL on the next, at that port.
"""

from __future__ import annotations

import base64
import contextlib
import json
import shlex
import socket
import sys
import zlib
from pathlib import Path
from typing import Any, Optional
from urllib.parse import urlsplit

from sweeper.credentials import redact

#: MLflow's experiment tag prefix for a saved view of its runs page (`view_tag`).
VIEW_TAG_PREFIX = "mlflow.sharedViewState."
#: The port `mlflow ui` listens on by default, and the one a printed command names when it is free.
DEFAULT_UI_PORT = 5000

#: What makes `mlflow ui` light: by default it starts 4 uvicorn workers and the job consumers of
#: MLflow's GenAI features (about 13 processes); one worker and no jobs are two processes.
UI_LIGHT_ENVIRONMENT = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
UI_LIGHT_OPTIONS = ["--workers", "1"]


def ui_port() -> int:
    """The port a printed `mlflow ui` command names: MLflow's default (`DEFAULT_UI_PORT`) when
    nothing holds it on the loopback interface now, else one the system hands out free (another
    MLflow, or another sweep's, may hold 5000)."""
    for port in (DEFAULT_UI_PORT, 0):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return probe.getsockname()[1]
    raise OSError("no free port on 127.0.0.1")  # bind to port 0 does not fail short of that


def ui_command(uri: str, port: int = DEFAULT_UI_PORT) -> str:
    """The `mlflow ui` command for `uri`, runnable as printed: the `mlflow` script beside this
    interpreter (so no activated venv is needed), bound to the loopback interface only on
    `port`, light (`UI_LIGHT_ENVIRONMENT`, `UI_LIGHT_OPTIONS`)."""
    program = Path(sys.executable).parent / "mlflow"
    return shlex.join(["env", *(f"{key}={value}" for key, value in UI_LIGHT_ENVIRONMENT.items()),
                       str(program), "ui", "--backend-store-uri", uri, "--host", "127.0.0.1",
                       "--port", str(port), *UI_LIGHT_OPTIONS])


def open_lines(uri: str, page: Optional[str] = None, port: Optional[int] = None,
               ui_ports: tuple[int, ...] = (DEFAULT_UI_PORT,)) -> list[str]:
    """How to open the tracking store `uri` (credentials redacted), one thing to paste per line.
    A server: its URL, on the experiment's `page` (`experiment_page`) when known.  A local
    store that an MLflow UI on one of `ui_ports` already serves (`serving_port`): the page's URL
    there, alone — not a second UI on another port.  Any other local store: the `mlflow ui`
    command that serves it on `port` (`ui_port` when not given), then, when the page is known,
    its URL at that port."""
    if tracking_server(uri):
        return [experiment_url(uri, page) if page else redact(uri)]
    serving = serving_port(uri, page, ui_ports) if page and port is None else None
    if serving is not None and page:
        return [experiment_url(uri, page, serving)]
    port = ui_port() if port is None else port
    return [ui_command(uri, port), *([experiment_url(uri, page, port)] if page else [])]


#: How long the look at a UI already on a port waits (it answers in milliseconds when it is one).
UI_PROBE_TIMEOUT_S = 2.0


def serving_port(uri: str, page: str, ports: tuple[int, ...]) -> Optional[int]:
    """The first of `ports` on 127.0.0.1 where an MLflow UI serves the SQLite store `uri`, or
    None.  One UI is told from another by the page's experiment: the UI must hold that id with
    the artifact location the store's own database gives it, a folder of that very store.
    Standard library only, a bounded request per held port; any other store: None."""
    import re
    import sqlite3
    import urllib.request

    found = re.search(r"#/experiments/([^/?]+)/", page)
    path = uri.removeprefix("sqlite:///") if uri.startswith("sqlite:///") else None
    if found is None or path is None or not Path(path).is_file():
        return None
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as database:
            row = database.execute("SELECT artifact_location FROM experiments WHERE "
                                   "experiment_id = ?", (found.group(1),)).fetchone()
    except sqlite3.Error:
        return None
    if row is None:
        return None
    for port in ports:
        request = (f"http://127.0.0.1:{port}/ajax-api/2.0/mlflow/experiments/get?"
                   f"experiment_id={found.group(1)}")
        try:
            with urllib.request.urlopen(request, timeout=UI_PROBE_TIMEOUT_S) as answer:
                served = json.loads(answer.read()).get("experiment", {})
        except (OSError, ValueError):
            continue
        if served.get("artifact_location") == row[0]:
            return port
    return None


def experiment_page(experiment_id: str, view: Optional[str] = None) -> str:
    """The experiment's page in MLflow's UI, after its address: in model-training mode
    (`workflowType=machine_learning`: MLflow 3.17 reads no experiment tag for it, only the URL
    or a switch the browser keeps, and defaults to GenAI); with a sweep's saved `view`
    (`view_tag`), on its charts: the frontier."""
    opened = f"viewStateShareKey={view}&compareRunsMode=CHART&" if view else ""
    return f"#/experiments/{experiment_id}/runs?{opened}workflowType=machine_learning"


def experiment_url(uri: str, page: str, port: int = DEFAULT_UI_PORT) -> str:
    """The URL of `page` (`experiment_page`): on the server, or, for a local store, where its
    `mlflow ui` listens on `port`."""
    base = redact(uri).rstrip("/") if tracking_server(uri) else f"http://127.0.0.1:{port}"
    return f"{base}/{page}"


def view_tag(sweep_name: str) -> str:
    """The experiment tag that holds a sweep's saved view in MLflow's UI (its "Views" menu):
    MLflow's `mlflow.sharedViewState.<id>`, the id the sweep's name."""
    return f"{VIEW_TAG_PREFIX}{sweep_name}"


#: The longest experiment tag value MLflow stores (`MAX_EXPERIMENT_TAG_VAL_LENGTH`).
MAX_TAG_VALUE = 20_000


def view_tag_value(sweep_name: str, state: dict[str, Any], created_ms: int) -> str:
    """The tag's value as MLflow's UI writes it: its name, when it was made and the state,
    deflated and base64-encoded (`deflate;…`) to stay under `MAX_TAG_VALUE` where it can."""
    packed = base64.b64encode(zlib.compress(json.dumps(state).encode())).decode()
    return json.dumps({"name": f"{sweep_name}: frontier", "createdAt": created_ms,
                       "updatedAt": created_ms, "state": f"deflate;{packed}"})


def tracking_server(uri: str) -> bool:
    """Whether `uri` is a tracking server (http, https, databricks) rather than a store this
    process opens itself (a SQLite file, a database)."""
    return urlsplit(uri).scheme in ("http", "https", "databricks")
