"""The fault tests' fixtures, a pytest plugin (`pytest_plugins` in tests/conftest.py): real
components to break, and helpers to break them with.  The components live in
`testkit.ray_cluster`, `testkit.servers` and `testkit.processes`; this module only wires them
to tests and tears them down.

``two_node_cluster`` (function scope: fault tests break their cluster, so each test gets a
    fresh one) -- a :class:`~testkit.ray_cluster.RayCluster`, head (1 CPU) and worker node
    (2 CPUs): ``address``, ``env``, ``head_node_id``, ``worker_node_id``,
    ``kill_worker_node()``, ``start_worker_node()``, ``kill_head_node()``, ``nodes()``,
    ``wait_node_dead(node_id)``, ``python(code)``.
``ray_cluster_factory`` (function scope) -- ``factory(head_cpus=1, worker_cpus=2,
    health_check=None, object_store_mb=512, extra_env=None)`` starts a RayCluster with other
    settings (``extra_env`` goes to the nodes and to ``env``); all are torn down after the test.
``mlflow_server`` (function scope) -- a started :class:`~testkit.servers.MlflowServer`.
``s3_server`` (function scope) -- a started :class:`~testkit.servers.S3Server`.
``procs`` (function scope) -- a :class:`~testkit.processes.Procs`: ``find_ray_workers(name,
    scope="mine")``, ``sigkill(procs)``, ``wait_gone(procs, timeout)``, ``wait_for(predicate,
    timeout, interval)``, ``descendants(p)``, ``kill_tree(p)``, ``spawn(argv, env, cwd)``,
    ``run_sweep_cli(args, env, cwd)``, ``output(popen)``, ``free_port()``.  Whatever spawn /
    run_sweep_cli started is killed (with its whole tree) when the test ends.
"""

from __future__ import annotations

import pytest

from testkit.processes import Procs
from testkit.ray_cluster import RayCluster, start_cluster
from testkit.servers import MlflowServer, S3Server, started_server


@pytest.fixture
def ray_cluster_factory():
    clusters: list[RayCluster] = []

    def factory(**options) -> RayCluster:
        clusters.append(start_cluster(**options))
        return clusters[-1]

    yield factory
    errors = []
    for cluster in reversed(clusters):
        try:
            cluster.shutdown()
        except Exception as error:
            errors.append(error)
    if errors:
        raise errors[0]


@pytest.fixture
def two_node_cluster(ray_cluster_factory) -> RayCluster:
    """A fresh head (1 CPU) + worker (2 CPUs) Ray cluster for one test; see RayCluster."""
    return ray_cluster_factory()


@pytest.fixture
def mlflow_server(tmp_path) -> MlflowServer:
    root = tmp_path / "mlflow"
    root.mkdir()
    yield from started_server(lambda: MlflowServer(root))


@pytest.fixture
def s3_server(tmp_path) -> S3Server:
    root = tmp_path / "s3"
    root.mkdir()
    yield from started_server(lambda: S3Server(root))


@pytest.fixture
def procs(tmp_path) -> Procs:
    """Process helpers; what they started is killed, with its Ray, when the test ends."""
    log_dir = tmp_path / "procs"
    log_dir.mkdir()
    helpers = Procs(log_dir)
    yield helpers
    helpers.close()
