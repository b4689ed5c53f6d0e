"""Each attack setting is declared once, beside its attack, with its default and rule; the
`attack.*` section, its checks and its YAML agree with the declarations."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from jobs.attacks.contract import ATTACKS, register_attack
from jobs.attacks.section import AttackSettings
from jobs.settings import AtLeast, Between, OneOf, Setting, config_dataclass, problems
from sweeper.config import SweepConfig
from sweeper.checks.validation import find_problems

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"


def refused_value(rule):
    """A value the rule must refuse, chosen from the rule's own wording by hand."""
    if isinstance(rule, OneOf):
        return "no_such_choice"
    if rule.low > -math.inf:
        return rule.low if rule.low_open else rule.low - 1
    return rule.high if rule.high_open else rule.high + 1


RULED = [spec.name for spec in dataclasses.fields(AttackSettings)
         if spec.metadata["setting"].rule is not None]


def test_the_section_holds_every_attacks_settings_and_only_those():
    read = {spec.name for attack in ATTACKS.values()
            for spec in dataclasses.fields(attack.settings_type)}
    assert {spec.name for spec in dataclasses.fields(AttackSettings)} == read
    # Each default is the default of the attack that reads it.
    for attack in ATTACKS.values():
        own = attack.settings_type()
        assert attack.settings_from(AttackSettings()) == own


@pytest.mark.parametrize("name", RULED)
def test_each_settings_rule_refuses_a_bad_value_by_name(name):
    cfg = SweepConfig()
    rule = dataclasses.fields(AttackSettings)[[f.name for f in dataclasses.fields(AttackSettings)]
                                              .index(name)].metadata["setting"].rule
    setattr(cfg.attack, name, refused_value(rule))
    found = [p for p in find_problems(cfg) if p.startswith(f"attack.{name}=")]
    assert len(found) == 1, find_problems(cfg)
    # And the default passes.
    assert not [p for p in find_problems(SweepConfig()) if p.startswith(f"attack.{name}=")]


def test_rules_say_what_they_hold_to_a_person():
    assert str(Between(0, 0.5, high_open=True)) == "must be in [0, 0.5)"
    assert str(Between(0, low_open=True)) == "must be > 0 and finite"
    assert str(AtLeast(1)) == "must be an integer ≥ 1"
    assert str(Between(1)) == "must be ≥ 1 and finite"
    assert AtLeast(0).holds(0) and not AtLeast(0).holds(0.5) and not AtLeast(0).holds(-1)
    assert str(Between(0, 1, nullable=True, null_means="searched")) == \
        "must be in [0, 1] (or null: searched)"
    assert Between(0, 1).holds(1) and not Between(0, 1, high_open=True).holds(1)
    assert not Between(0).holds(math.nan) and not Between(0).holds(math.inf)
    assert not Between(0).holds(True) and not Between(0).holds(None)
    assert Between(0, nullable=True).holds(None)
    assert OneOf(("a", "b")).holds("a") and not OneOf(("a", "b")).holds("c")


def test_an_unknown_choice_is_named_with_the_close_matches():
    cfg = SweepConfig()
    cfg.attack.lira_variance = "globl"
    (problem,) = [p for p in find_problems(cfg) if p.startswith("attack.lira_variance")]
    assert problem == ("attack.lira_variance='globl': unknown; known variances are "
                       "['auto', 'global', 'per_record']; did you mean 'global'?")


def test_one_name_declared_twice_differently_is_refused():
    @dataclass(frozen=True)
    class First:
        knob: int = Setting(1, AtLeast(0)).field()

    @dataclass(frozen=True)
    class Second:
        knob: int = Setting(1, AtLeast(0)).field()  # the same default, yet another declaration

    with pytest.raises(TypeError, match="declared twice"):
        config_dataclass("Section", [First, Second], "")
    shared = Setting(2)

    @dataclass(frozen=True)
    class Third:
        knob: int = shared.field()

    @dataclass(frozen=True)
    class Fourth:
        knob: int = shared.field()

    section = config_dataclass("Section", [Third, Fourth], "")
    assert [f.name for f in dataclasses.fields(section)] == ["knob"] and section().knob == 2
    assert problems(section(), "x.") == []


def test_an_attack_reading_an_undeclared_setting_is_refused_at_registration():
    @dataclass(frozen=True)
    class Plain:
        knob: int = 1

    with pytest.raises(TypeError, match="Setting"):
        register_attack("not_registered", Plain, needs_shadows=False)
    assert "not_registered" not in ATTACKS


def test_an_attack_declaring_a_fact_attack_does_not_have_is_refused_at_registration():
    """What an attack declares is `Attack`'s fields by name: a misspelt or unknown fact, or a
    threat model not in `THREAT_MODELS`, is refused before anything is registered."""
    from jobs.attacks.contract import NoSettings

    with pytest.raises(TypeError, match=r"\['reads_modle'\] are not facts an attack declares"):
        register_attack("not_registered", NoSettings, needs_shadows=False, reads_modle=False)
    with pytest.raises(TypeError, match="threat model 'grey_box' is not one of"):
        register_attack("not_registered", NoSettings, needs_shadows=False, threat_model="grey_box")
    assert "not_registered" not in ATTACKS


def test_the_attack_yamls_show_the_declared_defaults():
    """conf/attack/*.yaml document the settings a user overrides: each value there is the
    declaration's default, so the YAML cannot quietly change a default."""
    defaults = AttackSettings()
    for path in sorted((CONF_DIR / "attack").glob("*.yaml")):
        for key, value in OmegaConf.to_container(OmegaConf.load(path)).items():
            assert value == getattr(defaults, key), (path.name, key)


def test_a_query_that_transforms_images_needs_an_image_dataset():
    cfg = SweepConfig()
    cfg.dataset.name, cfg.dataset.input_shape, cfg.dataset.num_classes = "adult", [107], 2
    cfg.model.name = "logistic_regression"
    cfg.attack.augment_flip = True
    found = find_problems(cfg)
    assert [p for p in found if "needs an image dataset" in p and p.startswith("lira_online")]
    cfg.grid.attack = ["loss"]  # no attack asks the augmentations: nothing to refuse
    assert not [p for p in find_problems(cfg) if "image dataset" in p]


def test_the_fewest_shadows_come_from_the_attacks_own_settings():
    cfg = SweepConfig()
    cfg.grid.attack, cfg.shadow.count = ["rmia_offline"], 2
    cfg.attack.rmia_offline_a = None
    assert [p for p in find_problems(cfg) if "rmia_offline needs shadow.count ≥ 4 (got 2)" in p]
    cfg.attack.rmia_offline_a = 0.33
    assert not [p for p in find_problems(cfg) if "shadow.count" in p]


def test_every_attack_yaml_is_composed():
    """Hydra's defaults list cannot glob: an attack YAML left out of it would compose nothing,
    and a user's edit to it would change nothing."""
    defaults = OmegaConf.load(CONF_DIR / "config.yaml").defaults
    (listed,) = [entry["attack"] for entry in defaults if not isinstance(entry, str) and "attack" in entry]
    assert sorted(listed) == sorted(path.stem for path in (CONF_DIR / "attack").glob("*.yaml"))
