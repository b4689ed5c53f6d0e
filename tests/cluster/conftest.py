"""The cluster tier's box (`testkit.cluster_box`): one per session, its services (S3, MLflow on
PostgreSQL, Redis) and Ray (a head with GCS fault tolerance, two workers, the driver's host)
shared by the tests, which run one after the other in the order of the file.  A test that kills
or replaces a node leaves the box with as many live workers as it found."""

from __future__ import annotations

import pytest

from testkit.cluster_box import Box, namespaces_problem


@pytest.fixture(scope="session")
def box(tmp_path_factory) -> Box:
    problem = namespaces_problem()
    if problem:
        pytest.skip(problem)
    box = Box(tmp_path_factory.mktemp("box"))
    try:
        box.start_services()
        box.start_ray()
        yield box
    finally:
        box.close()
