"""Settings that carry their own default, rule and meaning, declared where they are read.

Why.  A setting's range check used to live in the configuration checks and its default and
comment in a config dataclass, both far from the code that reads it, so adding an attack took
edits in five files.  Here a setting is declared once (`Setting`), beside its attack, as LeakPro
keeps a typed, self-validating settings model beside each attack; the `attack.*` config section
and its checks are derived from the declarations (`config_dataclass`, `problems`).

- `Setting(default, rule, doc)`: one declaration; `.field()` puts it in a frozen settings
  dataclass (a setting two attacks read is the same `Setting` object in both).
- Rules (`Between`, `AtLeast`, `OneOf`): what a value must be, worded for a person.
- `config_dataclass`: one mutable dataclass with every setting of some settings types, for
  Hydra's schema; a setting declared twice under one name differently is refused.
- `problems`: each value a setting's rule refuses, named as `attack.<name>=<value>: must …`
  (with the close names of an unknown choice, `did_you_mean`); the `train`, `shadow`,
  `metrics` and `calibration` sections declare their fields' own rules the same way, and
  their checks add only what relates fields to one another.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import typing
from dataclasses import dataclass
from typing import Any, Iterable, Optional

__all__ = ["AtLeast", "Between", "OneOf", "Rule", "Setting", "config_dataclass", "declared",
           "problems"]


def did_you_mean(value: object, known: Iterable[str], prefix: str = "") -> str:
    """"; did you mean 'x'?" for the known names close to `value` (typos, prefixes), or "".

    Names are matched bare and shown with `prefix` ("grid." → 'grid.epsilon').
    """
    text, known = str(value), [str(name) for name in known]
    close = difflib.get_close_matches(text, known, n=3, cutoff=0.6)
    if len(text) >= 3:
        close += [name for name in known if name.startswith(text) and name not in close]
    if not close:
        return ""
    names = [repr(prefix + name) for name in close[:3]]
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]
    return f"; did you mean {listed}?"


class Rule:
    """What a setting's value must be: `holds(value)`, and `str(rule)` says it to a person
    (`refusal(value)`: what the refusal of one value says)."""

    def holds(self, value: Any) -> bool:
        raise NotImplementedError

    def refusal(self, value: Any) -> str:
        return str(self)


@dataclass(frozen=True)
class Between(Rule):
    """A finite number within `low`…`high`, each end open or closed; `None` allowed if `nullable`."""

    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False
    nullable: bool = False
    null_means: str = ""
    integer: bool = False
    note: str = ""  # what a boundary value means ("0: every epoch"), said with the rule

    def holds(self, value: Any) -> bool:
        if value is None:
            return self.nullable
        if isinstance(value, bool) or not isinstance(value, int if self.integer else (int, float)):
            return False
        if not math.isfinite(value):
            return False
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below

    def __str__(self) -> str:
        if self.high == math.inf and self.integer:
            said = f"must be an integer {'>' if self.low_open else '≥'} {self.low:g}"
        elif self.high == math.inf:
            said = f"must be {'>' if self.low_open else '≥'} {self.low:g} and finite"
        else:
            said = (f"must be in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}"
                    f"{')' if self.high_open else ']'}")
        return (said + (f" ({self.note})" if self.note else "")
                + (f" (or null: {self.null_means})" if self.nullable else ""))


def AtLeast(low: int) -> Between:  # noqa: N802 - reads as the rule it builds
    """An integer ≥ `low` (a count, a seed)."""
    return Between(low=low, integer=True)


@dataclass(frozen=True)
class OneOf(Rule):
    """One of the named `choices` (`what` names them in plural: "variances")."""

    choices: tuple[str, ...]
    what: str = "values"

    def holds(self, value: Any) -> bool:
        return value in self.choices

    def __str__(self) -> str:
        return f"unknown; known {self.what} are {list(self.choices)}"

    def refusal(self, value: Any) -> str:
        return str(self) + did_you_mean(value, self.choices)


@dataclass(frozen=True, eq=False)
class Setting:
    """One setting: its default, the rule its values obey (None: any value of its type) and
    what it means (shown where the config is documented).  Compared by identity: two attacks
    that read one setting name the same declaration."""

    default: Any
    rule: Optional[Rule] = None
    doc: str = ""
    # A size `scale=smoke` caps (records, seeds, canaries), so any experiment runs in seconds;
    # None: kept as it is.
    smoke: Optional[int] = None

    def field(self) -> Any:
        """The dataclass field of a settings class that reads this setting."""
        return dataclasses.field(default=self.default, metadata={"setting": self})


def declared(settings_type: type) -> dict[str, tuple[Any, Setting]]:
    """A settings dataclass's settings: name → (type, declaration), in field order.

    Raises:
        TypeError: a field not declared through `Setting.field()`.
    """
    hints = typing.get_type_hints(settings_type)
    out = {}
    for spec in dataclasses.fields(settings_type):
        setting = spec.metadata.get("setting")
        if setting is None:
            raise TypeError(f"{settings_type.__name__}.{spec.name} is not declared with "
                            "Setting(...).field()")
        out[spec.name] = (hints[spec.name], setting)
    return out


def config_dataclass(name: str, settings_types: Iterable[type], doc: str) -> type:
    """One mutable dataclass holding every setting of `settings_types` (in order of first
    appearance), each with its default: a config section's schema for Hydra.

    Raises:
        TypeError: one name declared by two different `Setting`s.
    """
    fields: dict[str, tuple[Any, Setting]] = {}
    for settings_type in settings_types:
        for field_name, (kind, setting) in declared(settings_type).items():
            known = fields.setdefault(field_name, (kind, setting))
            if known[1] is not setting:
                raise TypeError(f"setting {field_name!r} of {settings_type.__name__} is declared "
                                "twice differently: read the one declaration instead")
    section = dataclasses.make_dataclass(name, [
        (field_name, kind, dataclasses.field(default=setting.default, metadata={"setting": setting}))
        for field_name, (kind, setting) in fields.items()])
    section.__doc__ = doc
    return section


def smoke_caps(values: Any) -> dict[str, int]:
    """Each size of a `config_dataclass` instance that `scale=smoke` caps: name → cap."""
    return {spec.name: spec.metadata["setting"].smoke for spec in dataclasses.fields(values)
            if spec.metadata["setting"].smoke is not None}


def problems(values: Any, prefix: str) -> list[str]:
    """Each value of a dataclass instance (a `config_dataclass`, or a config section whose
    fields are declared with `Setting.field()`) its setting's rule refuses; a field declared
    without a rule, or not declared, is not looked at.

    Returns:
        One line per problem, e.g. "attack.rmia_trim=0.7: must be in [0, 0.5)"; [] if none.
    """
    found = []
    for spec in dataclasses.fields(values):
        setting = spec.metadata.get("setting")
        value = getattr(values, spec.name)
        if setting is not None and setting.rule is not None and not setting.rule.holds(value):
            shown = repr(value) if isinstance(value, str) else value
            found.append(f"{prefix}{spec.name}={shown}: {setting.rule.refusal(value)}")
    return found
