"""How ε = ∞ is written: one rule for people, one for machines.

Non-private training is ε = ∞, and it shows up everywhere a sweep reports: task names in the
Ray dashboard, MLflow run names, tables, figure legends, JSON.  Writing it differently in each
(`ε=inf` here, `ε=∞` there, `null` in one JSON and `"inf"` in another) makes the same cell look
like two, and `null` loses the value.  So there are exactly two rules, both here:

- text for people (`format_epsilon`): `∞`, every other ε in its shortest exact form (`0.5`, `8`);
- machine-readable values (`jsonable`, and MLflow params and metric-name suffixes, which share
  its spelling): the string `"inf"` (`"-inf"`), which `float()` in Python, `pd.to_numeric`,
  `json` readers with a one-line conversion and every command's own `--epsilon` accept back.
  Plain JSON has no infinity, and `Infinity` (Python's default) is not JSON at all.  NaN, an
  absent value, is `null`.
"""

from __future__ import annotations

import math
from typing import Any

#: ε = ∞ (and every other infinity) in machine-readable output.
INF_TEXT = "inf"


def format_epsilon(value: float) -> str:
    """ε as people write it: ∞ for non-private training, else the shortest exact form."""
    if math.isinf(value):
        return "∞" if value > 0 else "-∞"
    return f"{float(value):g}"


def epsilon_name(value: float) -> str:
    """ε inside a machine-read name (an MLflow metric key such as `…/epsilon_inf`): "inf" or its
    shortest form, as MLflow's `epsilon` params read (names cannot hold ∞)."""
    return INF_TEXT if math.isinf(value) and value > 0 else f"{float(value):g}"


def machine_number(value: float) -> float | str | None:
    """A float for JSON and other machine-read text: ±∞ as "inf"/"-inf", NaN as None (null)."""
    value = float(value)
    if math.isnan(value):
        return None
    if math.isinf(value):
        return INF_TEXT if value > 0 else f"-{INF_TEXT}"
    return value


def jsonable(value: Any) -> Any:
    """`value` with every float made valid JSON by `machine_number`, through dicts and lists.

    NumPy scalars become Python ones (`.item()`); anything else JSON cannot hold (timestamps,
    paths) becomes its text, so a results row always serialises.
    """
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return machine_number(value)
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item):
        return jsonable(item())
    return str(value)
