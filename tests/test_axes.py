"""A grid axis is one declaration (`sweeper.axes`, issue 31): a training setting swept by
`grid.<name>` trains its own models, lands as its own rows, and every view keeps its values
apart, pooling over trials alone."""

from __future__ import annotations

import math

import pandas as pd

from sweeper.axes import AXES, COORDINATES, RECIPE_AXES, SORT_ORDER, pooling_keys, swept


def test_the_derived_lists_follow_the_declarations():
    assert COORDINATES == tuple(axis.name for axis in AXES)
    assert {"max_grad_norm", "epochs", "batch_size"} <= {axis.name for axis in RECIPE_AXES}
    assert SORT_ORDER[:6] == ["dataset", "attack", "policy", "epsilon", "delta", "p"]
    assert SORT_ORDER[-1] == "trial"  # the pooled axis last: a table's trials sit together
    assert set(SORT_ORDER[6:-1]) == {axis.name for axis in RECIPE_AXES}
    frame = pd.DataFrame({"attack": ["loss"] * 4, "epsilon": [1.0] * 4, "p": [0.5] * 4,
                          "trial": [0, 1, 0, 1], "max_grad_norm": [0.5, 0.5, 2.0, 2.0],
                          "epochs": [15] * 4, "batch_size": [math.nan] * 4})
    # The trial is pooled; a recipe axis is a key only where the rows vary it.
    assert pooling_keys(frame) == ["epsilon", "p", "attack", "max_grad_norm"]
    assert [axis.name for axis in swept(frame)] == ["max_grad_norm"]
    assert pooling_keys(frame.assign(max_grad_norm=1.0)) == ["epsilon", "p", "attack"]


def test_a_swept_clip_norm_gives_separate_rows_and_points_end_to_end(ray_local, make_tiny_config,
                                                                     tmp_path, capsys):
    from sweeper.frontier import main, summarize_frontier
    from sweeper.run_records import frontier_series
    from sweeper.runner import run_sweep

    cfg = make_tiny_config(tmp_path)
    cfg.grid.epsilon, cfg.grid.p, cfg.grid.trial = [2.0], [0.5], [0, 1]
    cfg.grid.attack, cfg.grid.max_grad_norm = ["loss"], [0.5, 2.0]
    result = run_sweep(cfg, progress=False)
    assert not result.failures
    rows = result.results
    assert len(rows) == 4 and sorted(rows["max_grad_norm"]) == [0.5, 0.5, 2.0, 2.0]
    assert set(rows["epochs"]) == {cfg.train.epochs} and set(rows["batch_size"]) == {cfg.train.batch_size}
    assert rows.groupby("max_grad_norm")["model_key"].nunique().to_dict() == {0.5: 2, 2.0: 2}
    # Each DP model sampled at 1/⌈public size / B⌉ (Opacus's rule on the expected size).
    from sweeper.plan import build_plan
    from sweeper.store import ArtifactStore

    store = ArtifactStore(cfg.store.root)
    for key, spec in build_plan(cfg).models.items():
        meta = store.read_model_meta(key)
        assert meta["public_size"] == spec.public_size
        assert meta["dp_sample_rate"] == 1 / math.ceil(spec.public_size / spec.train.batch_size)
    summary = summarize_frontier(rows)
    assert sorted(summary["max_grad_norm"]) == [0.5, 2.0] and set(summary["n_trials"]) == {2}
    assert {name for name in frontier_series(summary) if "frontier/" in name} == {
        "loss frontier/precision p 0.5".replace("loss", f"loss max_grad_norm {c:g}") for c in (0.5, 2.0)
    } | {"loss frontier/bound p 0.5".replace("loss", f"loss max_grad_norm {c:g}") for c in (0.5, 2.0)}

    where = ["--store-root", cfg.store.root, "--experiment", cfg.name, "--no-plot"]
    assert main(where) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:5] == ["attack", "ε", "δ", "p", "C"]
    assert [line.split()[4] for line in table if line.startswith("loss")] == ["0.5", "2"]
    assert main([*where, "--max-grad-norm", "0.5"]) == 0
    shown = capsys.readouterr().out
    assert "shown: 2 of 4 cells (--max-grad-norm 0.5)" in shown
    assert main([*where, "--max-grad-norm", "3"]) == 2
    assert "--max-grad-norm 3: the sweep has none (it has 0.5, 2)" in capsys.readouterr().err
