"""An attack's scores are keyed by exactly the settings it reads, derived from its registration.

Every test here iterates over the registries, so a newly registered attack is covered without
touching this file.
"""

from __future__ import annotations

import dataclasses
import typing

import numpy as np
import pytest

from jobs.attacks.contract import (ATTACKS, GRADIENT_CANARIES, AttackInputs, holdout_scores,
                                   settings_items)
from jobs.attacks.queries import QUERIES
from jobs.attacks.section import AttackSettings
from jobs.policies import QUANTILE_MAX
from jobs.registry import Registry
from sweeper.config import SweepConfig
from sweeper.grid.plan import AttackSpec, ask_models, build_plan

CONFIG_FIELDS = [field.name for field in dataclasses.fields(AttackSettings)]


def own_fields(attack: str) -> list[str]:
    return [field.name for field in dataclasses.fields(ATTACKS[attack].settings_type)]


def scores_key(attack: str, **changes) -> str:
    """The key of `attack`'s scores in a one-cell plan whose `attack.*` settings are `changes`."""
    cfg = SweepConfig()
    cfg.grid.epsilon, cfg.grid.p, cfg.grid.trial = [1.0], [0.5], [0]
    cfg.grid.attack, cfg.grid.policy = [attack], [QUANTILE_MAX]
    cfg.dataset.members = 200  # mislabeled canaries are taken past every model's pool
    for name, value in changes.items():
        setattr(cfg.attack, name, value)
    (key,) = build_plan(cfg).attacks
    return key


def another(value):
    """A different value of the same kind (validity does not matter: the planner only keys it)."""
    if isinstance(value, bool):
        return not value
    if value is None:
        return 2.0
    if isinstance(value, (int, float)):
        return value + 1
    return f"{value}_changed"


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_every_setting_an_attack_reads_is_in_its_key_and_no_other(attack):
    default = AttackSettings()
    before = scores_key(attack)
    for name in CONFIG_FIELDS:
        after = scores_key(attack, **{name: another(getattr(default, name))})
        if name in own_fields(attack):
            assert after != before, f"{attack}: changing attack.{name} must re-key its scores"
        else:
            assert after == before, f"{attack}: attack.{name}, which it does not read, split its key"


def test_every_attack_setting_of_the_config_is_read_by_some_attack():
    read = {name for attack in ATTACKS for name in own_fields(attack)}
    assert read == set(CONFIG_FIELDS)


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_an_attack_is_handed_its_own_frozen_settings_and_nothing_else(attack):
    registered = ATTACKS[attack]
    assert registered.settings_type.__dataclass_params__.frozen
    # The scoring function (and the query it asks) is declared to take exactly that type.
    hints = typing.get_type_hints(registered.score)
    assert hints["settings"] is registered.settings_type
    # Its key's items give the same settings back, as `sweeper.cluster.tasks.attack_task` rebuilds them.
    settings = registered.settings_from(AttackSettings())
    assert registered.settings_of(settings_items(settings)) == settings
    assert [name for name, _ in settings_items(settings)] == own_fields(attack)
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.anything = 1


def synthetic_inputs(attack: str, settings, n: int = 40, shadows: int = 4, classes: int = 3):
    """Inputs of the shape `attack` reads, with the query it asks answered at random."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, classes, n)
    shadow_logits = rng.normal(size=(shadows, n, classes))
    shadow_members = np.zeros((shadows, n), bool)
    shadow_members[::2, : n // 2] = shadow_members[1::2, n // 2:] = True
    inputs = dict(target_logits=rng.normal(size=(n, classes)), labels=labels,
                  shadow_logits=shadow_logits, shadow_members=shadow_members)
    if ATTACKS[attack].evaluates == GRADIENT_CANARIES:  # white-box statistics, not logits
        inputs.update(observations=rng.normal(size=(n, 3)),
                      shadow_observations=rng.normal(size=(shadows, n, 3)))
    question = ATTACKS[attack].query(settings)
    if question is not None:
        kind = question[0]
        answers = {"augmented_logits": lambda: rng.normal(size=(2, n, classes)),
                   "held_out_logits": lambda: rng.normal(size=(1, n, classes)),
                   "held_out_logits_and_inputs": lambda: rng.normal(size=(1, n, classes + 5)),
                   "held_out_augmented_logits": lambda: rng.normal(size=(2, n, classes)),
                   "merlin": lambda: rng.random(n),
                   "pdtp": lambda: np.column_stack([np.arange(3), rng.random((3, 3))])}[kind]
        inputs["target_query"] = answers()
        inputs["shadow_query"] = np.stack([answers() for _ in range(shadows)])
        if QUERIES[kind].held_out:  # the held-out records' views: the population z (RMIA)
            inputs.update(population_logits=answers(), population_labels=rng.integers(0, classes, n),
                          shadow_population_logits=np.stack([answers() for _ in range(shadows)]))
    return AttackInputs(**inputs)


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_every_attack_scores_with_only_its_own_settings(attack):
    """A setting read outside its dataclass would be an AttributeError here: the attack holds
    nothing else (augmentations on, so LiRA's query is asked too)."""
    registered = ATTACKS[attack]
    settings = registered.settings_from(AttackSettings(augment_flip=True))
    inputs = synthetic_inputs(attack, settings)
    assert registered.score(inputs, settings).shape == (len(inputs.labels),)
    if not registered.measures_records:  # what the calibrated policy scores
        assert holdout_scores(registered, inputs, settings).shape == (4, len(inputs.labels))


def test_every_query_an_attack_asks_is_registered():
    changed = AttackSettings(augment_flip=True)
    for attack in ATTACKS.values():
        question = attack.query(attack.settings_from(changed))
        assert question is None or question[0] in QUERIES


#: Scores keys of each attack as stored before its settings were derived from a dataclass (on a
#: fixed target and shadows): unchanged settings must keep finding their stored scores.
STORED_KEYS = {
    "defaults": {
        "lira_online": "11395c15fb88dfda13eb5392",
        "lira_global": "a4acf7c2552cf3c2f260e89d",
        "lira_offline": "bed467119dd4d5ab911aaf0f",
        "loss": "ef148a179c08a2981ec3f5d9",
        "loss_randomized": "9e102ce58b4b94038a6595b3",
        "always_member": "8ae278c7b107b93e51d5e51f",
        "output_threshold": "d35b9e853aaf077770b3fda2",
        "shokri": "d656008d2caddf9cdfde8eac",
        "pdtp": "ce9f1f449833bf070ec63bdb",
        "merlin": "60332cbc8a7a6498a24865c8",
        "morgan": "d1803507a3f7875261f76909",
    },
    "changed": {
        "lira_online": "f2aa74f6431660bcd98b4535",
        "lira_global": "6352ee3e1610230b69305061",
        "lira_offline": "40a614f7f7d4b4d691717d41",
        "loss": "e67297c8d047c51fb2a63118",
        "loss_randomized": "6c6786715285265e5bf1dc56",
        "always_member": "8ae278c7b107b93e51d5e51f",
        "output_threshold": "d35b9e853aaf077770b3fda2",
        "shokri": "d656008d2caddf9cdfde8eac",
        "pdtp": "be218627d01e599897a526ca",
        "merlin": "930f9a4390d407350629cef8",
        "morgan": "166f155fa349eeb72d6572d0",
    },
}
CHANGED = AttackSettings(lira_variance="global", augment_flip=True, augment_shift=1,
                         lira_offline_combine="zscore", loss_clamp=1e-4, loss_bound=2.0, seed=3,
                         merlin_perturbations=20, merlin_sigma=0.02, merlin_seed=1, morgan_fpr=0.05,
                         morgan_min_tpr=0.1, pdtp_records=4, pdtp_seeds=2)


@pytest.mark.parametrize("label, config", [("defaults", AttackSettings()), ("changed", CHANGED)])
def test_stored_scores_keep_their_keys(label, config, monkeypatch):
    # At the artifact version they were stored under: a version bump re-keys everything on purpose.
    monkeypatch.setattr("sweeper.grid.plan.ARTIFACT_VERSION", 3)
    keys = {}
    for name, attack in ATTACKS.items():
        settings = attack.settings_from(config)
        models = ("target-model", "shadow-0", "shadow-1") if attack.needs_shadows else ("target-model",)
        keys[name] = AttackSpec(name, models[0], models[1:], 500, settings_items(settings),
                                ask_models(attack.query(settings), models, 500, {})).key
    # A new attack has no stored scores to keep; every attack stored before must match.
    assert {name: keys[name] for name in STORED_KEYS[label]} == STORED_KEYS[label]


def test_a_registry_takes_each_name_once_and_names_what_it_lacks():
    registry: Registry[int] = Registry("widget")
    assert registry.add("one", 1) == 1
    registry.add("two", 2)
    assert list(registry) == ["one", "two"] and dict(registry) == {"one": 1, "two": 2}
    with pytest.raises(ValueError, match="widget 'one' is registered twice"):
        registry.add("one", 3)
    with pytest.raises(KeyError, match=r"unknown widget 'three'; known: \['one', 'two'\]"):
        registry["three"]
    assert "three" not in registry
