"""Whether every node of a Ray cluster sees a local store folder as this machine does.

A cluster's machines share no disk unless one is mounted on each of them.  A local `store.root`
that only the driver's machine has would be written by every worker on its own disk, where the
driver never reads it: the sweep would say it trained everything, and its rerun would train it
all again.  So a sweep with a local store on a cluster it did not start asks each node that can
run its tasks, before anything is trained (`require_shared_store`): a task pinned to that node
reads a probe file this process wrote into the folder, and writes one back that this process
must then see.  The address says nothing about it (a folder can be shared over NFS between
machines, and two Rays on one machine can each have their own), so the nodes are asked.
"""

from __future__ import annotations

import contextlib
import uuid
from pathlib import Path
from typing import Any, Optional

from sweeper.config import ConfigError
from sweeper.store.files import atomic_write_bytes

#: The probe's file name in the store's root: `.sweeper-reach-<token>`, and each node's answer
#: beside it, `.sweeper-reach-<token>.<node id>`; all removed before the sweep goes on.
PROBE_PREFIX = ".sweeper-reach-"
#: How long a node has to answer: its first task may start a worker and set up the runtime
#: environment (the shipped packages) on a busy machine.
ANSWER_TIMEOUT_S = 120.0


def answer_probe(probe: str, token: str, node_id: str) -> Optional[str]:
    """On a node: None when it reads `token` in `probe` and writes its answer beside it; else
    what it found, in words."""
    path = Path(probe)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return f"{path.parent} holds no probe of the driver's there: it is another folder, or none"
    except OSError as error:
        return f"cannot read {path.parent} ({error.strerror or error})"
    if text != token:
        return f"{path.parent} holds another probe there: it is another folder"
    try:
        atomic_write_bytes(path.with_name(f"{path.name}.{node_id}"), token.encode())
    except OSError as error:
        return f"cannot write to {path.parent} ({error.strerror or error})"
    return None


def task_nodes() -> list[dict[str, Any]]:
    """The cluster's live nodes that can run a sweep's tasks (they have CPUs or GPUs)."""
    import ray

    return [node for node in ray.nodes() if node.get("Alive") and (
        node["Resources"].get("CPU", 0) > 0 or node["Resources"].get("GPU", 0) > 0)]


def unshared_nodes(root: Path, timeout_s: float = ANSWER_TIMEOUT_S) -> list[str]:
    """Each node of the cluster (`task_nodes`) that does not share the folder `root` with this
    process, with what it found; empty when all do."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    token = uuid.uuid4().hex
    probe = root / f"{PROBE_PREFIX}{token}"
    atomic_write_bytes(probe, token.encode())
    nodes = task_nodes()
    try:
        ask = ray.remote(num_cpus=0, max_retries=0)(answer_probe)
        asked = {ask.options(name="store probe", scheduling_strategy=NodeAffinitySchedulingStrategy(
            node["NodeID"], soft=False)).remote(str(probe), token, node["NodeID"]): node
                 for node in nodes}
        ready, late = ray.wait(list(asked), num_returns=len(asked), timeout=timeout_s)
        for ref in late:
            ray.cancel(ref, force=True)
        problems = []
        for ref, node in asked.items():
            where = f"{node['NodeManagerAddress']} (node {node['NodeID'][:8]})"
            if ref in late:
                problems.append(f"{where} did not answer within {timeout_s:g} s")
                continue
            try:
                found = ray.get(ref)
            except Exception as error:  # noqa: BLE001 - what the node said, whatever it was
                lines = str(error).strip().splitlines()
                found = f"could not be asked ({type(error).__name__}: {lines[-1] if lines else ''})"
            if found is None and not probe.with_name(f"{probe.name}.{node['NodeID']}").is_file():
                found = f"wrote to {root}, but not where this machine reads it"
            if found is not None:
                problems.append(f"{where}: {found}")
        return problems
    finally:
        for path in [probe, *(probe.with_name(f"{probe.name}.{node['NodeID']}") for node in nodes)]:
            with contextlib.suppress(OSError):
                path.unlink()


def require_shared_store(root: Path, given: str, timeout_s: float = ANSWER_TIMEOUT_S) -> None:
    """Refuse (ConfigError, before anything is trained) a local store folder that a node of the
    cluster does not share with this machine (`unshared_nodes`); `given` is `store.root` as the
    user wrote it."""
    problems = unshared_nodes(root, timeout_s)
    if problems:
        raise ConfigError([
            f"store.root={given!r}: the cluster's nodes do not share this folder with this "
            f"machine ({'; '.join(problems)}), so what they train would land on their own disks, "
            "where this sweep never reads it. Use an object store every node reaches "
            "(store.root='s3://BUCKET/PREFIX', credentials in the nodes' environment) or a folder "
            "mounted at the same path on every node (NFS)"])
