"""Where a sweep's Ray cluster is (`cluster.address`, or the cluster running it as a Ray job) and
whether it answers, asked before `ray.init` is given its address.

`ray.init(address=HOST:PORT)` with nothing there retries "Failed to connect to GCS" in practice
for ever: the address is probed first (`require_reachable`: a TCP connection, then gRPC's health
check as Ray's GCS answers it), until `cluster.connect_timeout_s`, and refused if it never
answers (exit 2, nothing written).  What `ray.init` itself then takes is bounded apart
(`sweeper.cluster.bounded_connect`).  "auto" never means "any Ray process found here"
(`resolved_address`).
"""

from __future__ import annotations

import os
import socket
import time
from typing import Optional

from sweeper.config import ConfigError, SweepConfig

#: How long to wait between two probes of an address that refused the connection.
PROBE_INTERVAL_S = 0.5


def bootstrap_address(address: str) -> Optional[tuple[str, int]]:
    """(host, port) that `cluster.address` makes Ray connect to first, or None when it names
    none (a malformed address: Ray itself says why).  "auto" is RAY_ADDRESS or the cluster
    `ray start` recorded on this machine (`resolved_address`)."""
    if address == "auto":
        address = resolved_address(address)
    if "://" in address:
        address = address.split("://", 1)[1]
    address = address.split("/", 1)[0]
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def resolved_address(address: str) -> str:
    """`address` as `ray.init` is to be given it: "auto" becomes RAY_ADDRESS or the address `ray
    start` recorded on this machine, never "any Ray process found here" (Ray's own fallback for
    "auto", which would join another sweep's private local Ray).  Raises ConfigError when
    "auto" finds neither."""
    if address != "auto":
        return address
    found = os.environ.get("RAY_ADDRESS") or _recorded_cluster()
    if found and found != "auto":
        return found
    raise ConfigError([
        "cluster.address='auto': no Ray cluster is running here: RAY_ADDRESS is not set and "
        "`ray start` recorded none on this machine. Start one (`ray start --head`), give its "
        "address (cluster.address=HOST:6379 or ray://HOST:10001), or use cluster.address=null "
        "(cluster=local) for a Ray of this sweep's own"])


#: Set by Ray's job supervisor in the environment of a job's driver (with RAY_ADDRESS).
JOB_CONFIG_VARIABLE = "RAY_JOB_CONFIG_JSON_ENV_VAR"


def submitted_job_address() -> Optional[str]:
    """The cluster that runs this process as a Ray job (`ray job submit -- sweeper …`), else None.

    Ray's job supervisor starts the driver with the job's config and RAY_ADDRESS, the cluster's
    GCS.  A sweep started that way joins that cluster rather than starting a Ray of its own, so its
    tasks, logs and progress live in the dashboard the job was submitted to."""
    if JOB_CONFIG_VARIABLE not in os.environ:
        return None
    return os.environ.get("RAY_ADDRESS") or "auto"


def joins_cluster(cfg: SweepConfig) -> bool:
    """Whether the sweep runs on a Ray cluster it does not start (`cluster.address`, or a Ray
    job's), whose nodes may be other machines, rather than on a local Ray of its own."""
    return cfg.cluster.address is not None or submitted_job_address() is not None


def _recorded_cluster() -> Optional[str]:
    """The address the last `ray start` on this machine recorded (in Ray's temp folder), if any."""
    from ray._private.utils import read_ray_address

    return read_ray_address() or None


def require_reachable(address: str, timeout_s: float) -> str:
    """Refuse `cluster.address` unless the cluster answers within `timeout_s` seconds; return
    the address to give `ray.init` (`resolved_address`).

    Ray dials the machine's own address for 127.0.0.1/localhost, and that is what is probed.
    A TCP connection is retried (a head node still starting refuses them for a few seconds),
    then a GCS address (not ray://) must answer gRPC's health check as Ray's GCS does: a port
    that accepts connections but is not Ray's would leave `ray.init` waiting for ever.  Raises
    ConfigError otherwise.
    """
    address = resolved_address(address)
    target = bootstrap_address(address)
    if target is None:
        return address
    host, port = target
    client = address.startswith("ray://")
    if not client:
        from ray._private.services import resolve_ip_for_localhost

        host = resolve_ip_for_localhost(host)
    dialed = f"{host}:{port}" + ("" if host == target[0] else
                                 f" (Ray dials this machine's address for {target[0]})")
    deadline = time.monotonic() + timeout_s
    last_error: Optional[BaseException] = None
    while True:
        remaining = deadline - time.monotonic()
        try:
            with socket.create_connection((host, port), timeout=max(remaining, 0.1)):
                break
        except OSError as error:
            last_error = error
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ConfigError([
                f"cluster.address={address!r}: nothing answered at {dialed} within "
                f"cluster.connect_timeout_s={timeout_s:g} s "
                f"({getattr(last_error, 'strerror', None) or last_error}). Check that the cluster's "
                "head is running (`ray status` on it), that the port is its GCS port (6379 by "
                "default; 10001 for ray://), that no firewall between here and there drops it, or "
                "raise cluster.connect_timeout_s for a head still starting"])
        time.sleep(min(PROBE_INTERVAL_S, remaining))
    if not client:
        reason = gcs_health(f"{host}:{port}", max(deadline - time.monotonic(), 1.0))
        if reason is not None:
            raise ConfigError([
                f"cluster.address={address!r}: {dialed} accepts connections but is not a Ray "
                f"cluster's GCS ({reason}); give the head's GCS port (6379 by default, "
                "`ray start --head --port`), or ray://HOST:10001 for Ray Client"])
    return address


#: gRPC's standard health check, which Ray's GCS server answers (its default health service).
HEALTH_CHECK_METHOD = "/grpc.health.v1.Health/Check"


#: HealthCheckResponse{status: SERVING} as protobuf bytes (field 1, varint 1).
SERVING = b"\x08\x01"


def gcs_health(target: str, timeout_s: float) -> Optional[str]:
    """None when `target` (host:port) answers gRPC's health check SERVING within `timeout_s`,
    else why not, in words."""
    import grpc

    with grpc.insecure_channel(target) as channel:
        check = channel.unary_unary(HEALTH_CHECK_METHOD, request_serializer=lambda raw: raw,
                                    response_deserializer=lambda raw: raw)
        try:
            answer = check(b"", timeout=timeout_s)
        except grpc.RpcError as error:
            code = error.code()
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                return f"no gRPC answer within {timeout_s:.3g} s"
            return f"gRPC {code.name}: {(error.details() or '').splitlines()[0][:160]}"
    return None if answer == SERVING else f"its health check answered {answer!r}, not SERVING"
