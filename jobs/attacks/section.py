"""The `attack.*` config section, derived from every registered attack's settings.

Apart from the attacks because it must be built after all of them have registered: importing
this module imports the `jobs.attacks` package first, which imports every attack module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

from jobs.attacks.contract import ATTACKS
from jobs.settings import config_dataclass

#: The `attack.*` config section: every registered attack's settings, each with its default and
#: rule, derived from the attacks' own declarations (`jobs.settings.config_dataclass`).  Built
#: at import from the registry, so a type checker knows no field of it: `Any` to mypy.
if TYPE_CHECKING:
    AttackSettings: TypeAlias = Any
else:
    AttackSettings = config_dataclass(
        "AttackSettings", (attack.settings_type for attack in ATTACKS.values()),
        "Attack knobs of the sweep config (`attack.*`): the union of every attack's settings.  "
        "An attack never sees it whole, only its own settings type (`Attack.settings_from`).")
    AttackSettings.__module__ = __name__
