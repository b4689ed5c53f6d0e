"""Shaping a results table for a report: which rows, which panels, which settings, named once.

Every report reads the same results table (`sweeper.store.columns.CELL_COLUMNS`) and cuts it the same
ways: a table without the columns it needs is refused naming them all, panels follow the order
of first appearance, an oracle policy is recognised from the row itself.  Pure pandas: no
drawing and no store here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from jobs.attacks.contract import ATTACKS
from jobs.policies import POLICIES
from sweeper.formats import format_epsilon

# Which attacks are baselines or measures is read from each attack's declaration
# (`jobs.attacks.contract.Attack`), never from a list of names here: a new one is handled by
# what it declares.  Functions, not constants: the registry is read when a report runs.
def baseline_attacks() -> tuple[str, ...]:
    """The registered baselines (`Attack.baseline`), in registration order."""
    return tuple(name for name, attack in ATTACKS.items() if attack.baseline)


def measure_attacks() -> tuple[str, ...]:
    """The per-record measures (PDTP, `Attack.measures_records`): no precision, figures of
    their own."""
    return tuple(name for name, attack in ATTACKS.items() if attack.measures_records)


def not_tests() -> tuple[str, ...]:
    """Attacks that are not membership tests with a precision of their own: baselines and
    per-record measures, in registration order."""
    return tuple(name for name, attack in ATTACKS.items()
                 if attack.baseline or attack.measures_records)


def require(frame: pd.DataFrame, columns: Iterable[str], report: str,
            what: str = "results table") -> None:
    """Refuse a table that lacks columns, naming all of them at once."""
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{report} report: the {what} lacks column(s) {', '.join(missing)}")


def write_csv(table: pd.DataFrame, path: Path) -> Path:
    """`table` as a CSV at `path`, as `sweeper.figures.save_figure` writes a figure."""
    from sweeper.store.files import PUBLIC_MODE, atomic_write_bytes

    atomic_write_bytes(Path(path), table.to_csv(index=False).encode(), PUBLIC_MODE)
    return Path(path)


def is_oracle(rows: pd.DataFrame) -> bool:
    """Whether these rows' thresholds were chosen on the target's own labels.

    The results table says so per row (`policy_uses_target_labels`); older tables without it
    ask the policy registry.
    """
    if "policy_uses_target_labels" in rows.columns:
        return bool(rows["policy_uses_target_labels"].fillna(False).astype(bool).any())
    return any(name in POLICIES and POLICIES[name].uses_target_labels
               for name in rows.get("policy", pd.Series(dtype=object)).unique())


def panel_columns(frame: pd.DataFrame, inner: Sequence[str]) -> list[str]:
    """Panel identity: `inner`, preceded by dataset/model only where the sweep varies them."""
    outer = [c for c in ("dataset", "model") if c in frame.columns and frame[c].nunique() > 1]
    return outer + [c for c in inner if c in frame.columns]


def groups(frame: pd.DataFrame, columns: Sequence[str]) -> list[tuple[tuple, pd.DataFrame]]:
    """Groups in order of first appearance (stable panels), NaN keys kept."""
    if not columns:
        return [((), frame)]
    out = []
    for key, rows in frame.groupby(list(columns), sort=False, dropna=False):
        out.append((key if isinstance(key, tuple) else (key,), rows))
    return out


def privacy_keys(frame: pd.DataFrame) -> list[tuple[float, float]]:
    pairs = frame[["epsilon", "delta"]].drop_duplicates()
    return sorted((float(e), float(d)) for e, d in pairs.itertuples(index=False))


def privacy_label(eps: float, delta: float, several_deltas: bool) -> str:
    return f"ε={format_epsilon(eps)}, δ={delta:g}" if several_deltas else f"ε={format_epsilon(eps)}"


def bound_settings(rows: pd.DataFrame) -> tuple[float, str]:
    """The TPR floor and bound form these rows were computed with (loosest floor if mixed)."""
    forms = rows["bound_form"].dropna()
    return float(rows["tpr_floor"].max()), str(forms.iloc[0]) if len(forms) else "derived"


def p_grid(data_p: Iterable[float]) -> np.ndarray:
    """Where bound curves are evaluated: a fine grid plus the sweep's own p (exact there)."""
    return np.unique(np.r_[np.linspace(0.01, 0.99, 99), np.asarray(list(data_p), float)])


def matching(table: pd.DataFrame, values: dict[str, Any]) -> pd.Series:
    """Which rows of `table` hold every (column, value) of `values` (a panel's key)."""
    return (table[list(values)] == pd.Series(values)).all(axis=1)
