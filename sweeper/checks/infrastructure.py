"""Checks of where and how a sweep runs: resources, the cluster, the store, the tracking server
and the secrets that must not reach any of them.  Part of `sweeper.checks.sections`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import socket
from typing import Any, Optional
from urllib.parse import urlsplit

from sweeper.cluster.address import submitted_job_address
from sweeper.config.problems import Check, did_you_mean, local_accelerator
from sweeper.config.schema import SweepConfig, TaskResources
from sweeper.credentials import (ENV_VARS_KEY, looks_secret, redact, secret_in,
                                 tracking_uri_problem, uri_credentials, value_credentials)
from sweeper.paths import control_problem, folder_problem, shortened
from sweeper.tracking.locations import tracking_location_problem


#: Where the store may live besides a local path (pyarrow file systems).
STORE_SCHEMES = ("file", "s3", "gs")


#: The keys `ray.init(runtime_env=...)` understands (Ray 2.60's RuntimeEnv fields and plugins).
RUNTIME_ENV_KEYS = ("working_dir", "py_modules", "py_executable", "pip", "uv", "conda", "env_vars",
                    "excludes", "container", "image_uri", "config", "java_jars",
                    "worker_process_setup_hook", "nsight", "mpi")


def check_resources(cfg: SweepConfig, check: Check) -> None:
    """`resources`: what each Ray task asks for, and whether local Ray could grant it."""
    for role in ("train", "attack"):
        res: TaskResources = getattr(cfg.resources, role)
        for kind, least in (("num_cpus", "> 0"), ("num_gpus", "≥ 0")):
            amount = getattr(res, kind)
            ok = (amount > 0 if kind == "num_cpus" else amount >= 0) and math.isfinite(amount)
            check(ok, f"resources.{role}.{kind}={amount}: must be {least}")
            check(not ok or amount <= 1 or float(amount).is_integer(),
                  f"resources.{role}.{kind}={amount}: Ray takes fractions only below 1; use a "
                  "whole number above it")
        check(res.max_retries >= 0, f"resources.{role}.max_retries={res.max_retries}: must be ≥ 0")
        cpus = cfg.cluster.num_cpus or os.cpu_count() or 1
        if cfg.cluster.address is None and math.isfinite(res.num_cpus) and res.num_cpus > cpus:
            check(False, f"resources.{role}.num_cpus={res.num_cpus:g}: local Ray has {cpus} CPUs "
                         + ("(cluster.num_cpus)" if cfg.cluster.num_cpus else "(this machine's)")
                         + ", so no task could ever start; ask for at most "
                         f"{cpus}, or point cluster.address at a cluster with larger nodes")
        if cfg.cluster.address is None and res.num_gpus > 0:
            check(local_accelerator("cuda"),
                  f"resources.{role}.num_gpus={res.num_gpus}: this machine has no GPU and "
                  "cluster.address is null (local Ray), so no task could start; set it to 0 or "
                  "point cluster.address at a cluster with GPUs")


def check_cluster(cfg: SweepConfig, check: Check) -> None:
    """`cluster`: the Ray address, dashboard and runtime environment (no credentials in it)."""
    cluster = cfg.cluster
    if cluster.address is not None:
        address = cluster.address
        scheme = urlsplit(address).scheme if "://" in address else ""
        check(address.strip() != "" and not re.search(r"\s", address) and scheme in ("", "ray"),
              f"cluster.address={address!r}: use null (local Ray), auto, HOST:PORT of the head's GCS "
              "or ray://HOST:10001 (Ray Client); the dashboard's http:// address is not the cluster's")
    check(cluster.num_cpus is None or cluster.num_cpus >= 1,
          f"cluster.num_cpus={cluster.num_cpus}: must be ≥ 1 (or null: all of this machine's)")
    check(cluster.dashboard_host.strip() != "",
          "cluster.dashboard_host='': give an interface, e.g. 127.0.0.1 (loopback only)")
    if cluster.dashboard_host.strip() and cluster.address is None and not _in_ray_job():
        reason = unbindable(cluster.dashboard_host)
        check(reason is None,
              f"cluster.dashboard_host={cluster.dashboard_host!r}: this machine cannot listen "
              f"there ({reason}), so the local Ray's dashboard could not start; give an address "
              "of one of this machine's interfaces, e.g. 127.0.0.1 (loopback only)")
    check(0 <= cluster.dashboard_port <= 65535,
          f"cluster.dashboard_port={cluster.dashboard_port}: must be a TCP port in 0..65535 "
          "(0: any free port)")
    check(math.isfinite(cluster.connect_timeout_s) and cluster.connect_timeout_s > 0,
          f"cluster.connect_timeout_s={cluster.connect_timeout_s}: must be a number of seconds > 0")
    _check_runtime_env(cluster.runtime_env, check)


def unbindable(host: str) -> Optional[str]:
    """Why this machine cannot listen on `host` (an address none of its interfaces has, a name
    that resolves to nothing), or None when it can: a bind to any free port there, nothing sent."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.bind(address)
    except OSError as error:  # socket.gaierror included
        return error.strerror or str(error)
    return None


def _in_ray_job() -> bool:
    """This process runs as a Ray job (`ray job submit`): the sweep joins that cluster, whose
    dashboard is not started here."""
    return submitted_job_address() is not None


def _check_runtime_env(env: Any, check: Check) -> None:
    if not isinstance(env, dict):
        check(False, f"cluster.runtime_env={env!r}: must be a mapping of Ray runtime_env keys")
        return
    for key in env:
        check(key in RUNTIME_ENV_KEYS,
              f"cluster.runtime_env.{key}: unknown key; Ray's runtime_env takes "
              f"{list(RUNTIME_ENV_KEYS)}{did_you_mean(key, RUNTIME_ENV_KEYS)}")
    variables = env.get("env_vars")
    if variables is None:
        return
    if not isinstance(variables, dict):
        check(False, f"cluster.runtime_env.env_vars={variables!r}: must be a mapping NAME: value")
        return
    for name, value in variables.items():
        check(isinstance(value, str) and bool(re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", str(name))),
              f"cluster.runtime_env.env_vars.{name}: names are letters, digits and '_', values are "
              "strings (quote numbers)")
        found = value_credentials(value) if isinstance(value, str) else []
        check(not looks_secret(str(name)) and not found,
              f"cluster.runtime_env.env_vars.{name}: looks like a credential"
              + (f" (its value holds {', '.join(found)})" if found else "")
              + "; a runtime environment is shown in Ray's dashboard and written to Ray's "
              "runtime_env_agent.log on every node, so set it in the nodes' own environment "
              "(a Kubernetes Secret as env of the RayCluster's pods, the cluster launcher's "
              "setup, see deploy/README.md) or a secret store the tasks read")


def check_store(cfg: SweepConfig, check: Check) -> None:
    """`store.root`: a writable folder or a supported URI without credentials; a local folder
    that is new, empty or a store already (or adopted: `store.adopt`), with no symbolic link
    where the sweep writes."""
    from sweeper.store.files import is_uri

    root = cfg.store.root
    if not root.strip():
        check(False, "store.root='': give a folder or a URI (file://, s3://, gs://)")
        return
    problem = control_problem("store.root", root)
    if problem:
        check(False, problem)
        return
    if is_uri(root):
        parts = urlsplit(root)
        scheme = parts.scheme.lower()
        if scheme not in STORE_SCHEMES:
            check(False, f"store.root={redact(root)!r}: scheme {scheme!r} is not supported; use a "
                         f"local path or one of {[f'{s}://' for s in STORE_SCHEMES]}")
            return
        secrets = uri_credentials(root)
        check(not secrets, f"store.root={redact(root)!r}: holds credentials ({', '.join(secrets)}), "
                           "which would land in logs and the MLflow run; use the environment instead "
                           "(AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, GOOGLE_APPLICATION_CREDENTIALS)")
        if scheme == "file":
            ambiguous = parts.netloc or parts.query or parts.fragment or "%" in parts.path
            check(not ambiguous, f"store.root={redact(root)!r}: a file:// URI here is "
                  "file:///ABSOLUTE/PATH only (no host, query, fragment or %-escapes: "
                  f"{'file://' + parts.netloc + '/…' if parts.netloc else 'this one'} does not "
                  "name one folder unambiguously); or give the folder as a plain path")
            if not ambiguous:
                _check_local_store(cfg, parts.path, root, check)
        else:
            check(parts.netloc != "", f"store.root={redact(root)!r}: name a bucket, {scheme}://BUCKET/PATH")
        return
    _check_local_store(cfg, root, root, check)


def check_secrets(cfg: SweepConfig, check: Check) -> None:
    """No setting holds the value of a secret environment variable (`secret_values`): names,
    paths and labels are printed, become folder names, Parquet partitions and MLflow names.
    A value arrives that way by interpolation (`name=${oc.env:AWS_SECRET_ACCESS_KEY}`)."""
    def walk(key: str, node: Any) -> None:
        if dataclasses.is_dataclass(node):
            node = {f.name: getattr(node, f.name) for f in dataclasses.fields(node)}
        if isinstance(node, dict):
            for name, value in node.items():
                if not (key == "cluster.runtime_env" and name == ENV_VARS_KEY):  # masked, checked
                    walk(f"{key}.{name}" if key else str(name), value)
        elif isinstance(node, (list, tuple)):
            for index, value in enumerate(node):
                walk(f"{key}[{index}]", value)
        elif isinstance(node, str):
            variable = secret_in(node)
            check(variable is None,
                  f"{key}: holds the value of the secret environment variable {variable} (by "
                  "interpolation?); a setting is printed and written into folder names, Parquet "
                  "and MLflow, so no secret may be one: give it a plain value")

    walk("", cfg)


def _check_local_store(cfg: SweepConfig, path: str, given: str, check: Check) -> None:
    """The folder must be writable, or creatable with its parents (`sweeper.paths.folder_problem`
    asks the file system; nothing is left behind), and hold no '%' escape: the SQLite URI of
    the store's MLflow database would decode it (`a%41b` is `aAb` to MLflow, `a%00b` a NUL).
    It must be new, empty or a store, unless adopted (`sweeper.store.artifacts.store_root_problem`), and
    hold no symbolic link where the sweep writes (`sweeper.store.artifacts.links_in`)."""
    from sweeper.paths import name_problem
    from sweeper.store.artifacts import links_in, links_refusal, store_root_problem

    escape = re.search(r"%[0-9A-Fa-f]{2}", path)
    if escape:
        check(False, f"store.root={shortened(given)!r}: {escape.group()!r} would be read as an "
                     "escape by MLflow (the store's SQLite database is named by a URI), which would "
                     "then write elsewhere; give a folder without '%'")
        return
    root = os.path.realpath(os.path.expanduser(path))  # as `ArtifactStore` resolves it
    problem = store_root_problem(root, cfg.store.adopt)
    if problem:  # before the probe: a folder not the store's is not written, not even probed
        check(False, f"store.root={shortened(given)!r}: {problem}")
        return
    problem = folder_problem("store.root", given, path)
    if problem:
        check(False, problem)
        return
    if name_problem("name", cfg.name) is None:  # else: the name's check says
        links = links_in(root, cfg.name)
        check(not links, f"store.root={shortened(given)!r}: {links_refusal(links, 'the sweep')}")


def _check_store_database(cfg: SweepConfig, check: Check) -> None:
    """The default tracking store, `<store.root>/mlflow.db` of a local store, must be MLflow's
    database or absent (`sweeper.tracking.database.database_problem`, read without writing)."""
    from sweeper.store.files import is_uri
    from sweeper.tracking.database import database_problem

    root = cfg.store.root
    if not root.strip() or control_problem("store.root", root):
        return  # the store's check names it
    if is_uri(root):
        parts = urlsplit(root)
        if parts.scheme.lower() == "file" and parts.netloc:
            return  # the store's check names it
        # A remote store's database is in the working folder (`default_tracking_uri`).
        root = parts.path if parts.scheme.lower() == "file" else os.getcwd()
    database = os.path.join(os.path.realpath(os.path.expanduser(root)), "mlflow.db")
    if os.path.islink(database):
        return  # `links_in` names it
    problem = database_problem(database)
    check(problem is None, f"tracking.uri=null (the store's own MLflow database): {problem}; "
                           "or name another with tracking.uri")


def check_tracking(cfg: SweepConfig, check: Check) -> None:
    """`tracking`: the MLflow experiment's name and a tracking URI without credentials."""
    tracking = cfg.tracking
    check(tracking.experiment.strip() != "",
          "tracking.experiment='': give the MLflow experiment's name (default 'sweeper')")
    problem = control_problem("tracking.experiment", tracking.experiment)
    check(problem is None, problem or "")
    if tracking.uri is None:  # MLflow's own variable, when set, is the tracking URI: same rules
        from_environment = os.environ.get("MLFLOW_TRACKING_URI")
        problem = from_environment and (
            tracking_uri_problem(from_environment, "MLFLOW_TRACKING_URI")
            or tracking_location_problem("MLFLOW_TRACKING_URI", from_environment))
        check(not problem, f"{problem} (the environment variable; tracking.uri is null)")
        if not from_environment:
            _check_store_database(cfg, check)
        return
    check(tracking.uri.strip() != "",
          "tracking.uri='': use null for the SQLite file under store.root, or an MLflow URI")
    problem = tracking_uri_problem(tracking.uri, "tracking.uri")
    check(problem is None, problem or "")
    if problem is None and tracking.uri.strip():
        where = tracking_location_problem("tracking.uri", tracking.uri)
        check(where is None, where or "")
