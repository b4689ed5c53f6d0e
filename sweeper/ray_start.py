"""How the sweep meets Ray: a cluster that does not answer is refused in bounded time.

`ray.init(address=HOST:PORT)` with nothing at that address retries "Failed to connect to GCS"
for as long as Ray's own timeouts allow, which in practice hangs the command.  Before Ray is
asked, the address is probed with plain TCP connections until `cluster.connect_timeout_s`; one
that never answers is a refused configuration (exit 2, nothing written), naming the address and
what to check.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from typing import Optional

from sweeper.config import ConfigError

logger = logging.getLogger(__name__)

#: How long to wait between two probes of an address that refused the connection.
PROBE_INTERVAL_S = 0.5


def bootstrap_address(address: str) -> Optional[tuple[str, int]]:
    """(host, port) that `cluster.address` makes Ray connect to first, or None when it cannot be
    known here ("auto" with no running cluster recorded: Ray itself says so at once)."""
    if address == "auto":
        address = os.environ.get("RAY_ADDRESS") or _recorded_cluster()
        if address is None:
            return None
    if "://" in address:
        address = address.split("://", 1)[1]
    address = address.split("/", 1)[0]
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def _recorded_cluster() -> Optional[str]:
    """The address `ray start` recorded on this machine (what Ray's "auto" reads), if any."""
    from ray._private.services import get_ray_address_from_environment

    return get_ray_address_from_environment("auto", None)


def require_reachable(address: str, timeout_s: float) -> None:
    """Refuse `cluster.address` unless a TCP connection to it opens within `timeout_s` seconds.

    Connections are retried (a head node still starting refuses them for a few seconds), so a
    cluster that comes up within the timeout is joined.  Raises ConfigError otherwise.
    """
    target = bootstrap_address(address)
    if target is None:
        return
    host, port = target
    deadline = time.monotonic() + timeout_s
    while True:
        remaining = deadline - time.monotonic()
        try:
            with socket.create_connection((host, port), timeout=max(remaining, 0.1)):
                return
        except OSError as error:
            last_error = error
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        time.sleep(min(PROBE_INTERVAL_S, remaining))
    raise ConfigError([
        f"cluster.address={address!r}: nothing answered at {host}:{port} within "
        f"cluster.connect_timeout_s={timeout_s:g} s ({last_error.strerror or last_error}). "
        "Check that the cluster's head is running (`ray status` on it), that the port is its GCS "
        "port (6379 by default; 10001 for ray://), that no firewall between here and there drops "
        "it, or raise cluster.connect_timeout_s for a head still starting"])
