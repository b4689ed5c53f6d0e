"""A task on a node that does not share the driver's store folder fails loudly, writing nothing,
and is never retried; a node asked whether it shares the folder answers what it found.  (The
sweep-level refusal, on nodes that really share nothing: tests/cluster.)"""

from __future__ import annotations

import pickle

import pytest

from sweeper.cluster.store_reach import answer_probe
from sweeper.cluster.tasks import train_task
from sweeper.failures import Retryable, classify
from sweeper.grid.plan import build_plan
from sweeper.store.artifacts import MARKER, ArtifactStore, StoreUnreachable


def test_a_task_whose_store_folder_is_not_here_fails_loudly_and_writes_nothing(tiny_config,
                                                                              tmp_path):
    plan = build_plan(tiny_config)
    spec = next(iter(plan.models.values()))
    elsewhere = tmp_path / "the-drivers-folder"  # as a worker sees the driver's path: absent
    with pytest.raises(StoreUnreachable, match="is not a store on this machine") as raised:
        train_task(spec, None, str(elsewhere), "cpu", 1)  # refused before the data is read
    assert not elsewhere.exists()
    # An empty folder of the same name (a node's own /tmp/runs, say) is not the store either.
    elsewhere.mkdir()
    with pytest.raises(StoreUnreachable):
        train_task(spec, None, str(elsewhere), "cpu", 1)
    assert list(elsewhere.iterdir()) == []
    # It reaches the driver whole through Ray's pickling, is not retried, and reads as a bug in
    # the set-up, not an outage.
    error = pickle.loads(pickle.dumps(raised.value))
    assert str(error) == str(raised.value) and str(elsewhere) in str(error)
    assert not isinstance(error, Retryable)
    from ray.exceptions import RayTaskError

    as_ray_raises_it = RayTaskError("train_task", "Traceback: ...", error).as_instanceof_cause()
    failure = classify(as_ray_raises_it, 3)
    assert failure.kind == "deterministic" and "StoreUnreachable" in failure.reason


def test_the_store_a_sweep_marked_is_found(tmp_path):
    store = ArtifactStore(tmp_path / "store")
    with pytest.raises(StoreUnreachable):
        store.require_here()
    (tmp_path / "store").mkdir()
    store.mark()
    assert (tmp_path / "store" / MARKER).is_file()
    assert store.require_here() is store


def test_a_node_answers_what_it_sees_at_the_folder(tmp_path):
    probe = tmp_path / ".sweeper-reach-abc"
    assert "holds no probe of the driver's" in answer_probe(str(probe), "abc", "node1")
    probe.write_text("another")
    assert "another folder" in answer_probe(str(probe), "abc", "node1")
    probe.write_text("abc")
    assert answer_probe(str(probe), "abc", "node1") is None
    assert (tmp_path / ".sweeper-reach-abc.node1").read_text() == "abc"
