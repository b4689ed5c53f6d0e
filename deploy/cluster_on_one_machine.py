"""A Ray cluster on one machine whose nodes share nothing, the quickstart run across it.

    sudo .venv/bin/python deploy/cluster_on_one_machine.py [--workers N] [--keep] [-- OVERRIDE ...]

The same box the cluster tier tests on (tests/testkit/cluster_box.py): a head, worker nodes and
the driver's host, each in network, mount and PID namespaces of its own (no shared disk, /tmp,
home folder or address; the working tree hidden from the nodes), S3 (moto) and MLflow on
PostgreSQL on hosts of their own, Ray's token authentication on.  It runs `python -m sweeper
cluster=remote …` (the quickstart, or the overrides after `--`) from the driver's host, prints the
Ray dashboard's and MLflow's URLs, forwarded to this machine's loopback, and tears everything
down when you press Enter (at once with `--no-wait`).  Needs root; nothing leaves the box's own
subnet (RFC 2544's 198.18.0.0/24, on a bridge with no other leg) but the two forwards, which
listen on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import ctypes
import select
import socket
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from testkit.cluster_box import DASHBOARD_PORT, Box, RayHost, namespaces_problem  # noqa: E402

CLONE_NEWNET = 0x40000000


def forward(local_port: int, netns: str, target: tuple[str, int]) -> int:
    """Serve 127.0.0.1:`local_port` (or any free port when taken) on this machine, each
    connection relayed to `target` as dialed from inside network namespace `netns`: a thread
    enters it (`setns` is per thread) before it connects.  Returns the port it listens on."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("127.0.0.1", local_port))
    except OSError:
        listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    libc = ctypes.CDLL(None, use_errno=True)

    def relay(client: socket.socket) -> None:
        with open(f"/run/netns/{netns}") as namespace:
            if libc.setns(namespace.fileno(), CLONE_NEWNET) != 0:
                client.close()
                return
        with client, socket.create_connection(target, timeout=10) as server:
            server.settimeout(None)
            ends = {client: server, server: client}
            while True:
                ready, _, _ = select.select(list(ends), [], [], 60)
                if not ready:
                    continue
                for end in ready:
                    data = end.recv(65536)
                    if not data:
                        return
                    ends[end].sendall(data)

    def serve() -> None:
        while True:
            client, _ = listener.accept()
            threading.Thread(target=relay, args=(client,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return listener.getsockname()[1]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="cluster_on_one_machine.py", description=__doc__.split("\n\n")[0],
        epilog="Overrides after `--` go to `python -m sweeper` (default: the quickstart).")
    parser.add_argument("--workers", type=int, default=2, help="worker nodes (default 2)")
    parser.add_argument("--worker-cpus", type=int, default=1, help="CPUs of each (default 1)")
    parser.add_argument("--no-wait", action="store_true",
                        help="tear the box down as soon as the sweep ends")
    args, overrides = parser.parse_known_args(argv)
    overrides = [item for item in overrides if item != "--"]
    problem = namespaces_problem()
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    box = Box(Path(tempfile.mkdtemp(prefix="sweeper-box-")))
    try:
        print("starting S3, MLflow on PostgreSQL and Redis …", flush=True)
        box.start_services()
        print(f"starting Ray: a head, {args.workers} workers and the driver's host …", flush=True)
        box.start_ray(workers=args.workers, worker_cpus=args.worker_cpus, dashboard=True)
        head = box.hosts["head"]
        assert isinstance(head, RayHost)
        mlflow_host, mlflow_port = box.services["mlflow"].split(":")
        dashboard = forward(DASHBOARD_PORT, box.hosts["driver"].netns, (head.ip, DASHBOARD_PORT))
        mlflow = forward(int(mlflow_port), box.hosts["driver"].netns, (mlflow_host, int(mlflow_port)))
        token = box.root / "auth_token"  # as Ray keeps one (~/.ray/auth_token): root's alone
        token.touch(mode=0o600)
        token.write_text(box.token)
        print(f"Ray dashboard: http://127.0.0.1:{dashboard}  (the head's {head.ip}:{DASHBOARD_PORT}; "
              f"its token: sudo cat {token})")
        print(f"MLflow:        http://127.0.0.1:{mlflow}  (the services host's {box.services['mlflow']})")
        sweep_args = [f"{key}={value}" for key, value in box.cluster_overrides("runs").items()]
        print("running: python -m sweeper " + " ".join(sweep_args + overrides), flush=True)
        sweep = box.sweep(sweep_args + overrides, "quickstart")
        with open(sweep.stdout_path, errors="replace") as out, \
                open(sweep.stderr_path, errors="replace") as err:
            while True:
                done = sweep.poll() is not None
                sys.stdout.write(out.read())
                sys.stderr.write(err.read())
                sys.stdout.flush()
                if done:
                    break
                threading.Event().wait(0.5)
        code = sweep.returncode
        if not args.no_wait:
            input("\nThe box is up (the URLs above). Press Enter to tear it down. ")
        return code
    finally:
        box.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
