"""Bounded looks at the servers a sweep or a sync would talk to, before either talks to them.

MLflow's HTTP client and the S3 SDK retry an address that does not answer for minutes (MLflow:
7 retries with backoff, 248 s for `http://127.0.0.1:1`; an S3 `endpoint_override` that nothing
serves: longer), and a sweep would meet them only after Ray started.  Each probe here is one
connection, bounded by `PROBE_TIMEOUT_S`, and says what it could not reach in words (None: it
answered).  Standard library only: `sweeper.tracking.sync` uses it without the sweep's stack.
"""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from typing import Optional
from urllib.parse import parse_qs, urlsplit

from sweeper.credentials import redact

#: Seconds one probe waits for an answer: a server that answers at all answers far sooner.
PROBE_TIMEOUT_S = 10.0


def tcp_problem(host: str, port: int, timeout_s: float = PROBE_TIMEOUT_S) -> Optional[str]:
    """Why no TCP connection to host:port opened within `timeout_s`, or None."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except socket.timeout:
        return f"no answer within {timeout_s:g} s"
    except OSError as error:
        return error.strerror or str(error)


def tracking_server_problem(uri: str, field: str,
                            timeout_s: float = PROBE_TIMEOUT_S) -> Optional[str]:
    """Why the MLflow server at `uri` (http:// or https://) cannot be reached, or None; other
    schemes are not servers and pass.  One GET of its `/health`: any HTTP answer (401, 404
    included) means a server is there."""
    parts = urlsplit(uri)
    if parts.scheme.lower() not in ("http", "https"):
        return None
    health = f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "") \
        + parts.path.rstrip("/") + "/health"
    try:
        with urllib.request.urlopen(health, timeout=timeout_s):  # noqa: S310 - http(s) only
            return None
    except urllib.error.HTTPError:
        return None
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", error)
        return (f"{field}={redact(uri)!r}: the MLflow server does not answer ({reason}; one "
                f"request, {timeout_s:g} s at most); start it, or fix the address")


#: An MLflow REST call every tracking server answers, with JSON whatever it finds.
MLFLOW_PROBE_PATH = "/api/2.0/mlflow/experiments/get-by-name?experiment_name=sweeper-probe"


#: What MLflow 3's security middleware answers (HTTP 403) to a request whose Host header is not
#: among the server's `--allowed-hosts` (`mlflow.server.security_utils.INVALID_HOST_MSG`).
REFUSED_HOST = b"Invalid Host header"


def not_mlflow_problem(uri: str, field: str, timeout_s: float = PROBE_TIMEOUT_S) -> Optional[str]:
    """Why the server at `uri` (http:// or https://), which answers, is not an MLflow tracking
    server, or None: one GET of an MLflow REST call, which MLflow answers with JSON (the
    experiment, or an `error_code`), or 401/403 when it asks for credentials.  A web server that
    is not MLflow (its 404 page) is a wrong address, not an outage: asking again will not help.
    A server that does not answer is `tracking_server_problem`'s."""
    import json

    parts = urlsplit(uri)
    if parts.scheme.lower() not in ("http", "https"):
        return None
    probe = f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "") \
        + parts.path.rstrip("/") + MLFLOW_PROBE_PATH
    try:
        with urllib.request.urlopen(probe, timeout=timeout_s) as answer:  # noqa: S310 - http(s)
            status, body = answer.status, answer.read(65536)
    except urllib.error.HTTPError as error:
        status, body = error.code, error.read(65536)
        if status == 403 and REFUSED_HOST in body:
            return (f"{field}={redact(uri)!r}: the MLflow server there refuses requests addressed "
                    f"to {parts.netloc.rsplit('@', 1)[-1]} (MLflow 3's DNS-rebinding guard: it "
                    "answers only the host names it was started with); running this again will "
                    f"not help: start it with --allowed-hosts {parts.hostname}:{parts.port or ''}"
                    .rstrip(":") + " (and the names other clients use), or use an address it allows")
        if status in (401, 403):
            return None
    except (urllib.error.URLError, OSError, ValueError):
        return None  # no answer now: an outage, `tracking_server_problem` says so
    try:
        said = json.loads(body)
    except ValueError:
        said = None
    if isinstance(said, dict) and ("error_code" in said or "experiment" in said):
        return None
    return (f"{field}={redact(uri)!r}: the server there answers, but is not an MLflow tracking "
            f"server (GET {parts.path.rstrip('/')}{MLFLOW_PROBE_PATH.split('?')[0]} gave HTTP "
            f"{status}{'' if said is not None else ', not JSON'}); running this again will not "
            "help: name the MLflow server's address")


def store_endpoint_problem(root: str, timeout_s: float = PROBE_TIMEOUT_S) -> Optional[str]:
    """Why the S3-compatible server a store's `?endpoint_override=HOST:PORT` names cannot be
    reached, or None (no override: the provider's own endpoint is not probed)."""
    parts = urlsplit(root)
    if parts.scheme.lower() != "s3":
        return None
    query = parse_qs(parts.query)
    endpoint = (query.get("endpoint_override") or [""])[0]
    if not endpoint:
        return None
    secure = (query.get("scheme") or ["https"])[0].lower() != "http"
    target = urlsplit(endpoint if "://" in endpoint else f"//{endpoint}")
    try:
        port = target.port or (443 if secure else 80)
    except ValueError:
        return f"store.root={redact(root)!r}: endpoint_override={endpoint!r} is not HOST:PORT"
    problem = tcp_problem(target.hostname or "", port, timeout_s)
    if problem is None:
        return None
    return (f"store.root={redact(root)!r}: nothing answers at its endpoint_override "
            f"{target.hostname}:{port} ({problem}; {timeout_s:g} s at most); start the server, "
            "or fix the address")
