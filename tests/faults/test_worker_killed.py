"""Fault 1: the worker training a model is SIGKILLed, repeatedly, mid-training.  Ray retries
the task; it resumes from the last per-epoch checkpoint (model, optimizer, accountant, RNG), so
each kill costs at most one epoch and the model, its accountant's ε and its rows equal those of
an uninterrupted run.  Killed more often than `max_retries`, it fails as transient with the bound
in its reason, and the other cells complete (fault 6, transient half)."""

from __future__ import annotations

import threading

import pytest

from sweeper.runner import run_sweep
from sweeper.store.artifacts import ArtifactStore
from testkit.checkpoints import checkpoint_epoch

#: The kills are timed against the sweep's epochs: alone, as they were sized (`make test`'s
#: serial run).
pytestmark = pytest.mark.serial

ROW_FIGURES = ["precision", "tp", "fp", "threshold", "auc", "epsilon_spent", "steps",
               "noise_multiplier", "test_accuracy"]


def slow_config(make_tiny_config, root, name):
    """One target per p, trained for 10 epochs (a fraction of a second each on a quiet machine,
    seconds at load 10): room for two kills that each land a few epochs late."""
    cfg = make_tiny_config(root)
    cfg.name = name
    cfg.dataset.pool_size = 1500
    cfg.dataset.eval_records = 200
    cfg.train.epochs = 10
    cfg.grid.epsilon = [4.0]
    cfg.grid.attack = ["loss", "always_member"]
    return cfg


class Killer(threading.Thread):
    """Kills the worker training `key` each time its checkpoint reaches the next epoch in
    `at_epochs` and is past the one the previous kill left, so that each kill hits an attempt
    that saved (and so recorded where it resumed); records the epoch saved at each kill.  On a
    quiet machine an epoch takes a fraction of a second and a kill can land epochs after the one
    it waited for: without the second condition, a first kill that left epoch 4 saved lets the
    second (due at 4) hit the retry before its first save, and the model records one resume."""

    def __init__(self, procs, store: ArtifactStore, key: str, label: str, at_epochs: list[int]):
        super().__init__(daemon=True)
        self.procs, self.store, self.key, self.label = procs, store, key, label
        self.at_epochs, self.killed_at, self.error = list(at_epochs), [], None

    def run(self):
        try:
            left = 0
            for epoch in self.at_epochs:
                due = max(epoch, left + 1)
                self.procs.wait_for(lambda e=due: checkpoint_epoch(self.store, self.key) >= e,
                                    timeout=240, interval=0.05, message=f"epoch {due} saved")
                workers = self.procs.wait_for(lambda: self.procs.find_ray_workers(self.label),
                                              timeout=120, interval=0.05, message="worker found")
                saved = checkpoint_epoch(self.store, self.key)
                self.procs.sigkill(workers)
                self.procs.wait_gone(workers)
                self.killed_at.append(saved)
                # Where the retry resumes from, or past it once the retry has saved.
                left = checkpoint_epoch(self.store, self.key)
        except Exception as error:  # noqa: BLE001 - reported by the test
            self.error = error


def sweep_with_kills(cfg, procs, p: float, at_epochs: list[int]):
    """Run the sweep while its target at `p` is killed at `at_epochs`: (result, killer, spec)."""
    from sweeper.grid.plan import build_plan

    spec = next(s for s in build_plan(cfg).models.values()
                if s.role == "target" and s.sample_rate == p)
    killer = Killer(procs, ArtifactStore(cfg.store.root), spec.key, spec.label, at_epochs)
    killer.start()
    result = run_sweep(cfg, progress=False)
    killer.join(timeout=60)
    assert killer.error is None, killer.error
    return result, killer, spec


def test_killed_twice_resumes_and_equals_an_uninterrupted_run(ray_local, make_tiny_config,
                                                              tmp_path, procs):
    cfg = slow_config(make_tiny_config, tmp_path / "killed", "killed")
    cfg.grid.p = [0.5]
    cfg.resources.train.max_retries = 3
    killed, killer, spec = sweep_with_kills(cfg, procs, 0.5, at_epochs=[2, 4])
    assert len(killer.killed_at) == 2 and not killed.failures

    meta = ArtifactStore(cfg.store.root).read_model_meta(spec.key)
    # Each retry started from the checkpoint the kill left: no epoch is lost, at most one redone.
    assert len(meta["resumed_from"]) == 2, (killer.killed_at, meta["resumed_from"])
    for saved, resumed in zip(killer.killed_at, meta["resumed_from"]):
        assert saved <= resumed <= saved + 1

    calm = slow_config(make_tiny_config, tmp_path / "calm", "calm")
    calm.grid.p = [0.5]
    uninterrupted = run_sweep(calm, progress=False)
    calm_meta = ArtifactStore(calm.store.root).read_model_meta(spec.key)
    assert calm_meta["resumed_from"] == []
    assert meta["epsilon_spent"] == calm_meta["epsilon_spent"] and meta["steps"] == calm_meta["steps"]
    assert meta["checksums"] == calm_meta["checksums"]  # the very same weights and logits
    a = killed.results.set_index("attack")[ROW_FIGURES].sort_index()
    b = uninterrupted.results.set_index("attack")[ROW_FIGURES].sort_index()
    assert a.equals(b)


def test_killed_beyond_its_retries_fails_as_transient_and_others_complete(
        ray_local, make_tiny_config, tmp_path, procs):
    cfg = slow_config(make_tiny_config, tmp_path / "doomed", "doomed")
    cfg.grid.p = [0.3, 0.7]
    cfg.resources.train.max_retries = 1
    result, _, spec = sweep_with_kills(cfg, procs, 0.3, at_epochs=[1, 2])
    store = ArtifactStore(cfg.store.root)

    assert set(result.results.p) == {0.7} and len(result.results) == len(cfg.grid.attack)
    assert len(result.failures) == len(cfg.grid.attack)
    records = store.read_failures(cfg.name)
    assert {r["kind"] for r in records} == {"transient"}
    assert all("after 1 retries" in r["reason"] for r in records)
    assert {r["task"] for r in records} == {spec.label}
    assert all("p=0.3" in label for label, _ in result.failures)
    assert not store.has_model(spec.key)
