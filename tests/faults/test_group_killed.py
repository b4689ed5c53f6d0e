"""A worker training a group of models (`train.models_per_task`) is SIGKILLed mid-training.
Ray retries the group's task; each of its models resumes from its own last checkpoint, and ends
where an uninterrupted group ends."""

from __future__ import annotations


import pytest
import torch

from sweeper.grid.plan import build_plan, training_groups
from sweeper.runner import run_sweep
from sweeper.store.artifacts import ArtifactStore
from testkit.checkpoints import checkpoint_epoch

#: The kill is timed against the group's epochs: alone, as they were sized (`make test`'s
#: serial run).
pytestmark = pytest.mark.serial


def group_config(make_tiny_config, root, name):
    """Two targets of one ε (p = 0.3 and 0.7: one pool, one recipe) stacked in one task, with
    enough epochs of a small MLP to kill the task between two of them."""
    cfg = make_tiny_config(root)
    cfg.name = name
    cfg.model.name = "tanh_mlp64"
    cfg.dataset.pool_size = 1500
    cfg.dataset.eval_records = 200
    cfg.train.epochs = 60
    cfg.train.models_per_task = 2
    cfg.grid.epsilon = [4.0]
    cfg.grid.p = [0.3, 0.7]
    cfg.grid.attack = ["loss", "always_member"]
    cfg.resources.train.max_retries = 2
    return cfg


def test_a_killed_group_resumes_each_model_and_equals_an_uninterrupted_group(
        ray_local, make_tiny_config, tmp_path, procs):
    import threading

    cfg = group_config(make_tiny_config, tmp_path / "killed", "group_killed")
    plan = build_plan(cfg)
    [group] = training_groups(list(plan.models.values()), 2)
    assert len(group) == 2
    store = ArtifactStore(cfg.store.root)
    killed_at: dict[str, int] = {}  # each model's checkpointed epoch when the worker died
    errors: list[Exception] = []

    def kill_once():
        try:
            procs.wait_for(lambda: checkpoint_epoch(store, group[0].key) >= 10, timeout=240,
                           interval=0.05, message="epoch 10 saved")
            workers = procs.wait_for(lambda: procs.find_ray_workers("train 2 models"),
                                     timeout=120, interval=0.05, message="worker found")
            killed_at.update({spec.key: checkpoint_epoch(store, spec.key) for spec in group})
            procs.sigkill(workers)
            procs.wait_gone(workers)
        except Exception as error:  # noqa: BLE001 - reported by the test
            errors.append(error)

    killer = threading.Thread(target=kill_once, daemon=True)
    killer.start()
    killed = run_sweep(cfg, progress=False)
    killer.join(timeout=60)
    assert not errors, errors
    assert killed_at and not killed.failures

    calm = group_config(make_tiny_config, tmp_path / "calm", "group_calm")
    run_sweep(calm, progress=False)
    calm_store = ArtifactStore(calm.store.root)
    for spec in group:
        meta, calm_meta = store.read_model_meta(spec.key), calm_store.read_model_meta(spec.key)
        # Each model restarted from its own checkpoint: no epoch lost, at most one redone.
        assert len(meta["resumed_from"]) == 1 and calm_meta["resumed_from"] == []
        assert killed_at[spec.key] <= meta["resumed_from"][0] <= killed_at[spec.key] + 1
        assert meta["steps"] == calm_meta["steps"]
        assert meta["epsilon_spent"] == calm_meta["epsilon_spent"]
        # The same model to float summation order: after the resume the two models' batches
        # may be padded to other lengths than in the calm run.
        weights, calm_weights = store.read_state_dict(spec.key), calm_store.read_state_dict(spec.key)
        for name, tensor in calm_weights.items():
            torch.testing.assert_close(weights[name], tensor, rtol=1e-4, atol=1e-4)
