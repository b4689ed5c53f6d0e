"""The suite's tiers (tests/README.md): a test's tier is read off what it uses, so a test
written later lands in its tier unmarked, and the unit tier (`make check`) cannot start a
process."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from testkit.tiers import TIER_TIMEOUT_S, tier_of

TESTS = Path(__file__).resolve().parents[1]


def tiers(request, relative: str) -> dict[str, str]:
    """Each test of a module, collected afresh, by name: its tier."""
    module = pytest.Module.from_parent(request.session, path=TESTS / relative)
    return {item.name: tier_of(item) for item in module.collect()}


def test_a_tests_tier_is_what_it_uses(request):
    assert tiers(request, "testkit/tier_samples.py") == {
        "test_in_process": "unit",
        "test_on_the_session_ray": "ray",  # by the fixture it asks for
        "test_with_a_server": "process",
        "test_starting_a_process_itself": "process",  # by its own code
        "test_starting_one_through_a_helper": "process",  # by its module's helper's
        "test_marked_unit_whatever_it_runs": "unit",  # a marker of its own wins
        "test_marked_process": "process",
    }
    # The fault tests' folder, whatever each one asks for.
    assert set(tiers(request, "faults/test_worker_killed.py").values()) == {"process"}
    # The cluster tier's folder likewise.
    assert set(tiers(request, "cluster/test_cluster_box.py").values()) == {"cluster"}


def test_every_tier_has_its_timeout(request):
    """pytest-timeout's limit is on every test: its tier's, unless it names its own."""
    for item in request.session.items:
        marker = item.get_closest_marker("timeout")
        tier = next(m.name for m in item.iter_markers() if m.name in TIER_TIMEOUT_S)
        assert marker is not None and marker.args[0] > 0, item.nodeid
        assert tier in TIER_TIMEOUT_S, item.nodeid


@pytest.mark.unit  # explicit: its own code starts a process, which would make it `process`
def test_a_unit_test_that_starts_a_process_fails():
    with pytest.raises(pytest.fail.Exception, match="is in the unit tier: mark it"):
        subprocess.run(["true"], check=True)
