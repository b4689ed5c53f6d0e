"""Fault 2: a node of a real two-node Ray cluster (`ray start --head` and a second `ray start
--address`, on loopback, each with its own temp dir, token auth on) is SIGKILLed while it
trains models of a sweep; the sweep, run with the same entry point the deploy manifests run
(`python -m sweeper cluster=remote …`, the project shipped as a runtime environment), completes
on the head node with every cell."""

from __future__ import annotations

import pandas as pd
import pytest


@pytest.mark.slow  # 29 s; test_infrastructure's two-node cluster loses its worker node too
def test_sweep_survives_losing_a_node(two_node_cluster, procs, make_tiny_overrides, tmp_path):
    cluster = two_node_cluster
    root = tmp_path / "runs"
    args = ["cluster=remote", f"cluster.address={cluster.address}",
            *make_tiny_overrides(root, name="node_lost", **{
                "dataset.pool_size": 1500, "dataset.eval_records": 200, "train.epochs": 4,
                "grid.epsilon": "[4]", "grid.p": "[0.3,0.5,0.7]",
                "grid.attack": "[loss,always_member]", "resources.train.max_retries": 3})]
    args = [a for a in args if not a.startswith(("cluster.include_dashboard", "cluster.num_cpus"))]
    sweep = procs.run_sweep_cli(args, env=cluster.env, cwd=tmp_path)

    worker_node = cluster.worker.processes()
    on_worker = procs.wait_for(lambda: procs.find_ray_workers("train", scope=worker_node)
                               or (sweep.poll() is not None and ["sweep ended"]),
                               timeout=300, interval=0.1, message="a trainer on the worker node")
    assert sweep.poll() is None, procs.output(sweep)[1][-3000:]
    assert on_worker
    cluster.kill_worker_node()

    assert sweep.wait(timeout=600) == 0, procs.output(sweep)[1][-3000:]
    out, _ = procs.output(sweep)
    cells = sorted((root / "sweeps" / "node_lost" / "cells").glob("*.parquet"))
    rows = pd.concat([pd.read_parquet(path) for path in cells], ignore_index=True)
    assert len(rows) == 3 * 2 and rows.cell_key.is_unique
    assert "FAILED" not in out
    assert len(list((root / "models").glob("*/meta.json"))) == 3
    assert cluster.nodes() == {cluster.head_node_id: True, cluster.worker_node_id: False}
