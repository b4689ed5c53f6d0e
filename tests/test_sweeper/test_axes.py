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


def test_the_grid_section_and_its_checks_are_the_axes_declarations(tiny_config, monkeypatch):
    """`grid` is derived from `GRID_AXES`: a field per grid axis with its declared default and
    one per alternative; the checks read each axis's declared rules, registry and alternative,
    so a rule changed in the declaration is the rule the config check applies (shown by
    declaring a stricter δ), a name outside the registry is refused with its neighbours, and
    an axis given both ways is refused with what relates them."""
    import dataclasses

    import sweeper.checks.sections as checks
    from sweeper.axes import GRID_AXES
    from sweeper.checks.sections import section_problems
    from sweeper.config.schema import GridConfig

    fields = {spec.name: spec for spec in dataclasses.fields(GridConfig)}
    expected = [axis.name for axis in GRID_AXES] + [axis.alternative.name for axis in GRID_AXES
                                                    if axis.alternative is not None]
    assert list(fields) == expected
    for axis in GRID_AXES:
        assert fields[axis.name].default_factory() == (axis.grid_values() if axis.grid_values else [])
    assert section_problems(tiny_config) == []
    stricter = tuple(dataclasses.replace(axis, rules=((lambda v: v < 1e-6, "must be < 1e-6"),))
                     if axis.name == "delta" else axis for axis in GRID_AXES)
    monkeypatch.setattr(checks, "GRID_AXES", stricter)
    assert section_problems(tiny_config) == [f"grid.delta: {tiny_config.grid.delta[0]} must be < 1e-6"]
    monkeypatch.undo()
    tiny_config.grid.policy, tiny_config.grid.gamma = ["quantile_maxx"], [1.0]
    problems = section_problems(tiny_config)
    assert any(problem.startswith("grid.policy: 'quantile_maxx' is unknown; known policies are")
               and "did you mean 'quantile_max'" in problem for problem in problems), problems
    assert any(problem.startswith(f"grid.p={list(tiny_config.grid.p)}, grid.gamma=[1.0]: give "
                                  "exactly one of them (γ non-members per member")
               for problem in problems), problems


def test_a_cell_run_is_named_by_the_value_of_each_swept_training_setting(tiny_config):
    """MLflow's run list tells two clip norms' cells apart: a swept recipe axis's value joins
    the run name as its axis writes it (`C=0.5`).  Which axes are swept is read from the sweep's
    config (`grid.<name>` lists values), as the plan reads it: every row records its values."""
    from omegaconf import OmegaConf

    from sweeper.axes import BY_NAME, swept_in
    from sweeper.failures import cell_label
    from sweeper.grid.plan import build_plan
    from sweeper.tracking.run_records import cell_run_name, config_params, swept_recipe

    tiny_config.grid.epsilon, tiny_config.grid.p, tiny_config.grid.attack = [2.0], [0.5], ["loss"]
    tiny_config.grid.max_grad_norm = [0.5, 2.0]
    plan = build_plan(tiny_config)
    params = config_params(OmegaConf.to_container(OmegaConf.structured(tiny_config)))
    assert swept_recipe(params) == swept_in(tiny_config.grid) == ("max_grad_norm",)
    assert {cell.swept for cell in plan.cells} == {("max_grad_norm",)}
    row = {"epsilon": 2.0, "p": 0.5, "trial": 1, "attack": "loss", "policy": "quantile_max",
           "delta": 1e-5, **{axis.name: 7 for axis in RECIPE_AXES}, "max_grad_norm": 0.5}
    named = cell_run_name(row, swept_recipe(params))
    assert named == "ε=2 p=0.5 C=0.5 t1 · loss quantile_max δ=1e-05"
    assert cell_run_name({**row, "max_grad_norm": 2.0}, swept_in(tiny_config.grid)).split()[2] == "C=2"
    for cell in plan.cells:  # the Ray task's label and the MLflow run say the same value
        value = dict(cell.recipe)["max_grad_norm"]
        assert BY_NAME["max_grad_norm"].format(value) in cell_label(cell)
        assert BY_NAME["max_grad_norm"].format(value) in cell_run_name(cell.coordinates, cell.swept)
    # Unswept, the values in the row name nothing: `train.max_grad_norm` alone.
    tiny_config.grid.max_grad_norm = []
    unswept = swept_recipe(config_params(OmegaConf.to_container(OmegaConf.structured(tiny_config))))
    assert unswept == () and cell_run_name(row, unswept) == "ε=2 p=0.5 t1 · loss quantile_max δ=1e-05"


def test_a_swept_clip_norm_gives_separate_rows_and_points_end_to_end(ray_local, make_tiny_config,
                                                                     tmp_path, capsys):
    from sweeper.cli.frontier_command import main
    from sweeper.frontier import summarize_frontier
    from sweeper.tracking.run_records import frontier_series
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
    from sweeper.grid.plan import build_plan
    from sweeper.store.artifacts import ArtifactStore

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
    # Each cell's MLflow run is named by its clip norm, as the sweep logged it.
    from mlflow import MlflowClient

    from sweeper.tracking.recorder import PARENT_TAG

    client = MlflowClient(tracking_uri=result.tracking_uri)
    experiment = client.get_experiment_by_name(cfg.tracking.experiment)
    names = [run.info.run_name for run in client.search_runs([experiment.experiment_id])
             if PARENT_TAG in run.data.tags]
    assert sorted(name.split()[2] for name in names) == ["C=0.5", "C=0.5", "C=2", "C=2"]


def test_a_swept_model_trains_each_architecture_and_keeps_them_apart(ray_local, make_tiny_config,
                                                                      tmp_path, capsys):
    """`grid.model` is a recipe axis like the clip norm: each architecture trains its own
    targets and shadows (the model key holds it), its rows carry it, K is chosen per
    architecture, every check that reads the architecture runs for each value, and the
    frontier keeps the architectures apart."""
    from sweeper.checks.sections import section_problems
    from sweeper.cli.frontier_command import main
    from sweeper.frontier import summarize_frontier
    from sweeper.grid.plan import build_plan, models_per_task
    from sweeper.runner import run_sweep

    cfg = make_tiny_config(tmp_path)
    cfg.grid.epsilon, cfg.grid.p, cfg.grid.trial = [2.0], [0.5], [0, 1]
    cfg.grid.attack, cfg.grid.model = ["loss"], [cfg.model.name, "tanh_mlp64"]
    assert section_problems(cfg) == []
    plan = build_plan(cfg)
    assert {spec.train.model for spec in plan.models.values()} == {cfg.model.name, "tanh_mlp64"}
    assert {cell.coordinates["model"] for cell in plan.cells} == {cfg.model.name, "tanh_mlp64"}
    assert models_per_task(cfg, "tanh_mlp64") == 1 and models_per_task(cfg) == 1  # a CPU
    result = run_sweep(cfg, progress=False)
    assert not result.failures
    rows = result.results
    assert sorted(rows["model"]) == sorted([cfg.model.name] * 2 + ["tanh_mlp64"] * 2)
    assert rows.groupby("model")["model_key"].nunique().to_dict() == {cfg.model.name: 2,
                                                                      "tanh_mlp64": 2}
    summary = summarize_frontier(rows)
    assert sorted(summary["model"]) == sorted([cfg.model.name, "tanh_mlp64"])
    assert set(summary["n_trials"]) == {2}
    # The frontier command filters every grid axis by its declaration, names as names.
    where = ["--store-root", cfg.store.root, "--experiment", cfg.name, "--no-plot"]
    assert main([*where, "--model", "tanh_mlp64", "--policy", "quantile_max"]) == 0
    assert "shown: 2 of 4 cells (--model tanh_mlp64, --policy quantile_max)" in capsys.readouterr().out
    assert main([*where, "--model", "relu_mlp256x2"]) == 2
    assert (f"--model relu_mlp256x2: the sweep has none (it has {cfg.model.name}, tanh_mlp64)"
            in capsys.readouterr().err)


def test_each_swept_architecture_is_checked_as_model_name_is(tiny_config):
    """A grid.model value that does not fit the dataset is refused by the same check that
    refuses such a model.name, named by its grid value; an unknown one by the registry."""
    from sweeper.checks.sections import section_problems

    tiny_config.grid.model = [tiny_config.model.name, "membership_mechanism", "tanh_mlp6"]
    problems = section_problems(tiny_config)
    assert any(problem.startswith("grid.model='membership_mechanism': model.name="
                                  "'membership_mechanism' with dataset.name=") for problem in problems), problems
    assert any(problem.startswith("grid.model: 'tanh_mlp6' is unknown; known models are")
               and "did you mean 'tanh_mlp64'" in problem for problem in problems), problems
    assert not any(tiny_config.model.name + "'" in problem.split(":")[0] for problem in problems)
