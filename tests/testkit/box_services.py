"""The cluster box's shared services, run as the first process of a box host
(`testkit.cluster_box.Box.start_services`):

    python -m testkit.box_services services IP READY_JSON   MLflow on PostgreSQL, and Redis
    python -m testkit.box_services s3 IP READY_JSON         moto's S3 with one bucket

Each starts its servers on the host's address, writes what a client needs (addresses, the S3
credentials moto handed out) to READY_JSON once all answer, and waits: the host's death (its PID
namespace's first process is this one) ends them with it.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from testkit.cluster_box import BUCKET, MLFLOW_PORT, REDIS_PORT, S3_PORT
from testkit.servers import MlflowServer, PostgresServer, S3Server


def services(ip: str) -> dict[str, str]:
    """PostgreSQL (loopback of this host only), MLflow on it and Redis, on `ip`."""
    root = Path(tempfile.mkdtemp(prefix="box-services-"))
    postgres = PostgresServer().start()
    mlflow = MlflowServer(root, port=MLFLOW_PORT, backend_uri=postgres.uri(), host=ip).start()
    redis = subprocess.Popen(["redis-server", "--bind", ip, "--port", str(REDIS_PORT),
                              "--save", "", "--appendonly", "no", "--protected-mode", "no"],
                             stdout=open(root / "redis.log", "w"), stderr=subprocess.STDOUT)
    _wait_redis(ip, redis)
    return {"mlflow": f"{ip}:{mlflow.port}", "redis": f"{ip}:{REDIS_PORT}",
            "postgres_uri": postgres.uri()}


def _wait_redis(ip: str, redis: subprocess.Popen) -> None:
    import socket
    import time

    deadline = time.monotonic() + 60
    while True:
        with socket.socket() as probe:
            probe.settimeout(1)
            if probe.connect_ex((ip, REDIS_PORT)) == 0:
                return
        if redis.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("redis-server did not start")
        time.sleep(0.1)


def s3(ip: str) -> dict[str, str]:
    root = Path(tempfile.mkdtemp(prefix="box-s3-"))
    server = S3Server(root, bucket=BUCKET, port=S3_PORT, host=ip).start()
    return {"s3": server.endpoint, **server.env}


def main(argv: list[str]) -> None:
    role, ip, ready = argv
    found = {"services": services, "s3": s3}[role](ip)
    part = Path(ready + ".part")
    part.write_text(json.dumps(found))
    part.rename(ready)
    signal.pause()


if __name__ == "__main__":
    main(sys.argv[1:])
