"""Ray as a neighbour on the network and in the process table (issue 13, items 3-5): a cluster
address where nothing listens is refused in bounded time."""

from __future__ import annotations

SMOKE = ["dataset=synthetic", "scale=smoke", "cluster.include_dashboard=false"]


def test_unreachable_cluster_address_is_refused_within_connect_timeout(procs, tmp_path):
    """Nothing listens on port 1: before the fix `ray.init` retried "Failed to connect to GCS"
    without end (the wait below ran out).  Now: exit 2 within cluster.connect_timeout_s, a message
    naming the address and the setting, and nothing written."""
    root = tmp_path / "runs"
    driver = procs.run_sweep_cli([*SMOKE, f"store.root='{root}'", "cluster.address=127.0.0.1:1",
                                  "cluster.connect_timeout_s=3"], cwd=tmp_path)
    code = driver.wait(timeout=120)
    _, err = procs.output(driver)
    assert code == 2, err[-2000:]
    assert "cluster.address='127.0.0.1:1'" in err and "cluster.connect_timeout_s=3" in err, err
    assert "Traceback" not in err
    assert not root.exists()
