"""How a person opens a sweep in MLflow's UI: the light `mlflow ui` command a sweep prints, the URL
that opens the sweep in model-training mode on its frontier, and the saved view that URL opens
(MLflow's `mlflow.sharedViewState.<id>` experiment tag).  No MLflow import: strings only.

MLflow 3.17's UI picks GenAI or model training from the URL (`workflowType`) or from a switch
the browser keeps, never from an experiment tag, so the URL is what sweeper can choose.
"""

from __future__ import annotations

import base64
import json
import shlex
import sys
import zlib
from pathlib import Path
from typing import Any, Optional
from urllib.parse import urlsplit

from sweeper.credentials import redact

#: MLflow's experiment tag prefix for a saved view of its runs page (`view_tag`).
VIEW_TAG_PREFIX = "mlflow.sharedViewState."
#: Where `mlflow ui` listens by default: the URL a local store's experiment opens at.
LOCAL_UI = "http://127.0.0.1:5000"

#: What makes `mlflow ui` light: by default it starts 4 uvicorn workers and the job consumers of
#: MLflow's GenAI features (about 13 processes); one worker and no jobs are two processes.
UI_LIGHT_ENVIRONMENT = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
UI_LIGHT_OPTIONS = ["--workers", "1"]


def ui_command(uri: str) -> str:
    """The `mlflow ui` command for `uri`, runnable as printed: the `mlflow` script beside this
    interpreter (so no activated venv is needed), bound to the loopback interface only, light
    (`UI_LIGHT_ENVIRONMENT`, `UI_LIGHT_OPTIONS`)."""
    program = Path(sys.executable).parent / "mlflow"
    return shlex.join(["env", *(f"{key}={value}" for key, value in UI_LIGHT_ENVIRONMENT.items()),
                       str(program), "ui", "--backend-store-uri", uri, "--host", "127.0.0.1",
                       *UI_LIGHT_OPTIONS])

def tracking_link(uri: str, url: Optional[str] = None) -> str:
    """How to open the tracking store `uri` (credentials redacted): the server's address, or the
    `mlflow ui` command for a local store; with the experiment's `url` (`experiment_url`) known,
    that URL, after the command that serves it for a local store."""
    if tracking_server(uri):
        return url or redact(uri)
    return f"{ui_command(uri)}  then open {url}" if url else ui_command(uri)


def experiment_url(uri: str, experiment_id: str, view: Optional[str] = None) -> str:
    """The experiment's page in MLflow's UI, on the server (or, for a local store, where `mlflow
    ui` listens), in model-training mode (`workflowType=machine_learning`: MLflow 3.17 reads no
    experiment tag for it, only the URL or a switch the browser keeps, and defaults to GenAI);
    with a sweep's saved `view` (`view_tag`), on its charts: the frontier."""
    base = redact(uri).rstrip("/") if tracking_server(uri) else LOCAL_UI
    opened = f"viewStateShareKey={view}&compareRunsMode=CHART&" if view else ""
    return f"{base}/#/experiments/{experiment_id}/runs?{opened}workflowType=machine_learning"


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
