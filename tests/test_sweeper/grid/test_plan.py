"""The plan: content keys share exactly the work that is the same, and nothing else."""

from __future__ import annotations

import math

from sweeper.config import SweepConfig
from sweeper.grid.plan import build_plan


def grid_config(**grid) -> SweepConfig:
    cfg = SweepConfig()
    for axis, values in grid.items():
        setattr(cfg.grid, axis, values)
    return cfg


def roles(plan, role):
    return [m for m in plan.models.values() if m.role == role]


def test_three_values_of_p_train_the_shadows_once_per_epsilon():
    cfg = grid_config(epsilon=[1.0, 8.0], p=[0.2, 0.5, 0.8], attack=["lira_online", "loss"])
    plan = build_plan(cfg)
    shadows = roles(plan, "shadow")
    assert len(shadows) == 2 * cfg.shadow.count
    for epsilon in (1.0, 8.0):
        assert sum(m.train.epsilon == epsilon for m in shadows) == cfg.shadow.count
    assert len(roles(plan, "target")) == 2 * 3
    # Every LiRA cell at one ε points at the same shadow keys, whatever its p.
    lira = [c for c in plan.cells if c.attack == "lira_online"]
    for epsilon in (1.0, 8.0):
        assert len({c.scores.shadows for c in lira if c.epsilon == epsilon}) == 1
    # The loss attack needs no shadows.
    assert all(c.scores.shadows == () for c in plan.cells if c.attack == "loss")


def test_shadow_masks_come_in_complementary_pairs():
    plan = build_plan(grid_config(epsilon=[1.0]))
    shadows = sorted(roles(plan, "shadow"), key=lambda m: m.index)
    for first, second in zip(shadows[::2], shadows[1::2]):
        assert first.mask_seed == second.mask_seed
        assert (first.mask_complement, second.mask_complement) == (False, True)
    assert len({m.mask_seed for m in shadows}) == len(shadows) // 2


def test_trials_share_shadows_but_not_targets():
    plan = build_plan(grid_config(epsilon=[2.0], p=[0.5], trial=[0, 1, 2]))
    assert len(roles(plan, "shadow")) == SweepConfig().shadow.count
    targets = roles(plan, "target")
    assert len(targets) == 3 and len({m.mask_seed for m in targets}) == 3


def test_infinite_epsilon_ignores_delta():
    plan = build_plan(grid_config(epsilon=[math.inf, 3.0], delta=[1e-5, 1e-3], p=[0.5]))
    infinite = [m for m in plan.models.values() if math.isinf(m.train.epsilon)]
    finite = [m for m in plan.models.values() if not math.isinf(m.train.epsilon)]
    per_setting = SweepConfig().shadow.count + 1
    assert len(infinite) == per_setting  # one set for both δ
    assert len(finite) == 2 * per_setting
    assert len(plan.cells) == 2 * 2 * 1 * len(SweepConfig().grid.attack)


def test_keys_are_stable_and_sensitive_to_what_matters():
    base = build_plan(grid_config(epsilon=[1.0], p=[0.5]))
    again = build_plan(grid_config(epsilon=[1.0], p=[0.5]))
    assert set(base.models) == set(again.models)
    assert [c.key for c in base.cells] == [c.key for c in again.cells]
    changed = grid_config(epsilon=[1.0], p=[0.5])
    changed.train.lr = 0.07
    assert not set(build_plan(changed).models) & set(base.models)
    # Evaluating more records re-scores attacks but retrains nothing: logits cover the pool.
    more = grid_config(epsilon=[1.0], p=[0.5])
    more.dataset.eval_records = 500
    plan = build_plan(more)
    assert set(plan.models) == set(base.models)
    assert not set(plan.attacks) & set(base.attacks)


def test_no_shadows_are_trained_when_no_attack_needs_them():
    plan = build_plan(grid_config(epsilon=[1.0, 8.0], p=[0.5], attack=["loss", "always_member"]))
    assert roles(plan, "shadow") == []
    assert len(plan.models) == 2


def test_synthetic_stand_in_data_never_shares_artifacts_with_the_real_dataset():
    real = grid_config(epsilon=[1.0], p=[0.5])
    synthetic = grid_config(epsilon=[1.0], p=[0.5])
    synthetic.dataset.synthetic = True
    other_shape = grid_config(epsilon=[1.0], p=[0.5])
    other_shape.dataset.synthetic, other_shape.dataset.input_shape = True, [3, 32, 32]
    keys = [set(build_plan(cfg).models) for cfg in (real, synthetic, other_shape)]
    assert not keys[0] & keys[1] and not keys[1] & keys[2] and not keys[0] & keys[2]


def test_pdtp_queries_do_not_depend_on_how_many_records_are_evaluated():
    plans = []
    for records in (1000, 500):
        cfg = grid_config(epsilon=[1.0], p=[0.5], attack=["pdtp", "loss"])
        cfg.dataset.eval_records = records
        plans.append(build_plan(cfg))
    assert set(plans[0].queries) == set(plans[1].queries)


def ppv_config(disjoint: bool) -> SweepConfig:
    """Jayaraman et al.'s shape: a fixed member count, pools of members/p records."""
    cfg = grid_config(epsilon=[1.0], p=[], gamma=[1.0, 3.0], attack=["loss", "shokri", "morgan"],
                      policy=["calibrated"])
    cfg.dataset.members, cfg.dataset.eval_records = 1000, 500
    cfg.shadow.count, cfg.shadow.disjoint_data = 4, disjoint
    return cfg


def test_disjoint_shadow_data_trains_shadows_past_every_target_pool():
    shared, disjoint = build_plan(ppv_config(False)), build_plan(ppv_config(True))
    targets = roles(disjoint, "target")
    # γ = 1, 3 → p = 1/2, 1/4 → pools of 2000 and 4000 records from record 0.
    assert sorted((m.data.offset, m.data.pool_size) for m in targets) == [(0, 2000), (0, 4000)]
    # Shadows (p = 0.5 → 2000 records) start past the largest: records 4000..5999.
    assert {(m.data.offset, m.data.pool_size) for m in roles(disjoint, "shadow")} == {(4000, 2000)}
    assert {(m.data.offset, m.data.pool_size) for m in roles(shared, "shadow")} == {(0, 2000)}
    # The setting changes the shadows' keys (other records), not the targets'.
    assert set(m.key for m in targets) == set(m.key for m in roles(shared, "target"))
    assert not {m.key for m in roles(disjoint, "shadow")} & {m.key for m in roles(shared, "shadow")}
    # Scores read the shadows' own evaluation records; their keys differ too.
    assert {spec.shadow_records_from for spec in disjoint.attacks.values()} == {4000}
    assert {spec.shadow_records_from for spec in shared.attacks.values()} == {0}
    assert not set(disjoint.attacks) & set(shared.attacks)


def test_shared_pool_keys_are_those_of_before_the_offset_existed():
    # The key of a model on the target's pool is the hash of its settings without `offset`, as
    # it was before disjoint shadow data existed, and without `precision` at fp32, as it was
    # before the bf16 switch: stores keep their artifacts.
    import dataclasses

    from sweeper.grid.plan import content_key

    plan = build_plan(grid_config(epsilon=[1.0], p=[0.5], attack=["lira_online"]))
    for model in plan.models.values():
        settings = dataclasses.asdict(model)
        del settings["role"], settings["index"], settings["data"]["offset"]
        del settings["train"]["precision"], settings["train"]["secure_noise"]
        del settings["canaries"]  # and without canaries or secure noise
        if settings["public_size"] is None:  # q from the private |D|, as before it existed
            del settings["public_size"]
        assert model.key == content_key("model", settings)
    for spec in plan.attacks.values():
        settings = dataclasses.asdict(spec)
        del settings["shadow_records_from"]
        assert spec.key == content_key("scores", settings)


def test_dp_models_take_their_rate_from_the_expected_size_unless_told_otherwise():
    # dataset.members = 100: a target at p draws from round(100/p) records, so its expected
    # training set is pool × p = 100 at p = 0.2 (pool 500) and at p = 0.8 (pool 125); the
    # shadows (p = 0.5, pool 200) and their complements expect 100 too.
    cfg = grid_config(epsilon=[2.0, math.inf], p=[0.2, 0.8], attack=["lira_online"])
    cfg.dataset.members = 100
    plan = build_plan(cfg)
    private = [m for m in plan.models.values() if math.isfinite(m.train.epsilon)]
    assert {m.public_size for m in private} == {100}
    assert all(m.public_size is None for m in plan.models.values() if m not in private)
    cfg.grid.p = [0.3]  # pool round(100/0.3) = 333, expected round(333 · 0.3) = 100
    assert {m.public_size for m in roles(build_plan(cfg), "target")} - {None} == {100}

    # Shadows at shadow.p = 0.25 draw from 400 records: 100 expected, their complements 300.
    cfg.shadow.p = 0.25
    shadows = roles(build_plan(cfg), "shadow")
    assert {(m.mask_complement, m.public_size) for m in shadows if m.public_size} == {
        (False, 100), (True, 300)}
    cfg.shadow.p = 0.5
    cfg.train.rate_from, cfg.train.public_size = "declared", 321
    assert {m.public_size for m in build_plan(cfg).models.values()} == {321, None}
    cfg.train.rate_from, cfg.train.public_size = "actual", None
    actual = build_plan(cfg)
    assert all(m.public_size is None for m in actual.models.values())
    # From the private |D|, a DP model's key is the one it had before the setting existed.
    import dataclasses

    from sweeper.grid.plan import content_key

    for model in actual.models.values():
        settings = dataclasses.asdict(model)
        del settings["role"], settings["index"], settings["data"]["offset"], settings["public_size"]
        del settings["train"]["precision"], settings["train"]["secure_noise"], settings["canaries"]
        assert model.key == content_key("model", settings)


def test_disjoint_shadow_data_is_refused_without_room_or_with_lira():
    import pytest

    from sweeper.config import ConfigError
    from sweeper.checks.validation import validate

    no_room = grid_config(epsilon=[1.0], p=[0.5], attack=["loss"], policy=["calibrated"])
    no_room.shadow.disjoint_data = True
    lira = ppv_config(True)
    lira.grid.attack = ["lira_online", "loss"]
    with pytest.raises(ConfigError) as refused:
        validate(no_room)
    assert "dataset.members or dataset.pool_size" in str(refused.value)
    with pytest.raises(ConfigError) as refused:
        validate(lira)
    assert "['lira_online']" in str(refused.value)
    with pytest.raises(ConfigError) as refused:  # mnist_subset's pool: 4 000 records of 6 000
        validate(ppv_config(True))
    assert "has 4000 pool records" in str(refused.value) and "needs 6000" in str(refused.value)
    fits = ppv_config(True)
    fits.dataset.synthetic = True  # the stand-in has as many records as the plan reaches
    validate(fits)


def test_the_coordinates_are_declared_once():
    """`sweeper.axes.AXES` are the rows' first columns and the keys of `Cell.coordinates`: an
    axis added there reaches the rows, the plan and MLflow's parameters, or fails here."""
    from sweeper.axes import AXES, COORDINATES
    from sweeper.store.columns import CELL_COLUMNS

    assert [column.name for column in CELL_COLUMNS[:len(AXES)]] == list(COORDINATES)
    assert [column.doc for column in CELL_COLUMNS[:len(AXES)]] == [axis.doc for axis in AXES]
    cell = build_plan(grid_config(epsilon=[1.0], p=[0.5], attack=["loss"])).cells[0]
    assert list(cell.coordinates) == list(COORDINATES)
    # Unswept, a recipe axis reads the sweep's train setting.
    defaults = SweepConfig().train
    assert (cell.coordinates["max_grad_norm"], cell.coordinates["epochs"],
            cell.coordinates["batch_size"]) == (defaults.max_grad_norm, defaults.epochs,
                                                defaults.batch_size)


def test_a_swept_training_setting_trains_its_own_models_and_keeps_old_keys():
    cfg = grid_config(epsilon=[2.0], p=[0.5], attack=["lira_online"])
    plain = build_plan(cfg)
    cfg.grid.max_grad_norm = [0.5, 2.0]
    swept = build_plan(cfg)
    # Each clip norm has its own targets and shadows: twice the models and the cells.
    assert len(swept.models) == 2 * len(plain.models) and len(swept.cells) == 2 * len(plain.cells)
    assert {m.train.max_grad_norm for m in swept.models.values()} == {0.5, 2.0}
    assert {c.coordinates["max_grad_norm"] for c in swept.cells} == {0.5, 2.0}
    assert all(c.swept == ("max_grad_norm",) for c in swept.cells)
    assert len({c.key for c in swept.cells}) == len(swept.cells)
    # A value equal to train.max_grad_norm gives the very models a sweep without the axis has.
    cfg.grid.max_grad_norm = [SweepConfig().train.max_grad_norm, 2.0]
    assert set(plain.models) < set(build_plan(cfg).models)
    # Without DP the clip norm has no effect: one model serves both values, whose cells differ.
    cfg.grid.epsilon, cfg.grid.max_grad_norm = [math.inf], [0.5, 2.0]
    private_free = build_plan(cfg)
    assert len(private_free.models) == len(plain.models)
    assert len({c.key for c in private_free.cells}) == len(private_free.cells) == 2 * len(plain.cells)
    cfg.grid.epsilon, cfg.grid.max_grad_norm = [2.0], [SweepConfig().train.max_grad_norm, 2.0]
    # Two axes cross: 2 clip norms × 2 batch sizes.
    cfg.grid.batch_size = [32, 64]
    crossed = build_plan(cfg)
    assert {(m.train.max_grad_norm, m.train.batch_size) for m in crossed.models.values()} == {
        (SweepConfig().train.max_grad_norm, 32), (SweepConfig().train.max_grad_norm, 64),
        (2.0, 32), (2.0, 64)}


def test_a_sweep_is_planned_once_and_runs_the_plan_its_checks_built(tmp_path, make_tiny_overrides,
                                                                     monkeypatch):
    """The preflight's validation builds the plan to check it and hands it on: the runner runs
    that very plan (`prepare`), and a command line plans its sweep once.  Given a configuration
    instead, `prepare` validates and plans it itself, once."""
    import sweeper.grid.plan as planner
    from sweeper.checks.preflight import composed
    from sweeper.runner import prepare

    built = []
    build_plan = planner.build_plan

    def counted(cfg):
        built.append(cfg)
        return build_plan(cfg)

    monkeypatch.setattr(planner, "build_plan", counted)
    plan, _ = composed(make_tiny_overrides(str(tmp_path / "runs")))
    sweep = prepare(plan)
    assert sweep.plan is plan and sweep.cfg is plan.config
    assert built == [plan.config]
    again = prepare(plan.config)
    assert again.plan.key == plan.key and len(built) == 2
