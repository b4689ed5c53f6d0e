"""Thudi et al.'s bound next to the earlier ones: the one list `bounds compare` tabulates and plots.

Why a list of its own: the table and the figure must show the same bounds, or a reader finds one
in the table that the plot left out (Mahloujifar et al. once was).  Each bound says which
question it answers — the *precision* of an attack at the sampling rate p, or the *accuracy* of
one in Yeom's balanced experiment (p = 0.5) — because the two are different quantities and must
not share an axis unlabelled.  Pure NumPy: importing this never loads matplotlib.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

from sweeper.bounds import (
    DEFAULT_TPR_FLOOR,
    erlingsson_accuracy_bound,
    humphries_accuracy_bound,
    jayaraman_ppv_bound,
    mahloujifar_precision_bound,
    precision_bound,
    sablayrolles_precision_bound,
    yeom_accuracy_bound,
)

PRECISION = "precision"
ACCURACY = "accuracy"


@dataclass(frozen=True)
class Settings:
    """What every bound of the comparison is evaluated at (`bounds compare`'s options)."""

    p: float = 0.5
    delta: float = 0.0
    tpr: float = DEFAULT_TPR_FLOOR
    fpr: float = 0.01
    form: str = "derived"

    @property
    def gamma(self) -> float:
        """Non-members per member, (1 − p)/p (Jayaraman et al.'s γ)."""
        return math.inf if self.p == 0 else (1.0 - self.p) / self.p


@dataclass(frozen=True)
class Bound:
    key: str  # the JSON row's key
    header: str  # the text table's column
    label: str  # who, and the formula in words (the figure's legend)
    kind: str  # PRECISION (at p) or ACCURACY (balanced, p = 0.5)
    value: Callable[[np.ndarray, Settings], Optional[np.ndarray | float]]  # None: undefined here


BOUNDS: tuple[Bound, ...] = (
    Bound("thudi_precision", "Thudi U", "Thudi et al. U", PRECISION,
          lambda e, s: precision_bound(e, s.p, s.delta, s.tpr, form=s.form)),
    Bound("sablayrolles_precision", "Sablayrolles", "Sablayrolles et al. p + ε/4 (ε-DP only)", PRECISION,
          lambda e, s: sablayrolles_precision_bound(e, s.p)),
    Bound("mahloujifar_precision", "Mahloujifar", "Mahloujifar et al. 1/(1 + e^-ε) (p = 0.5 only)", PRECISION,
          lambda e, s: mahloujifar_precision_bound(e) if s.p == 0.5 else None),
    Bound("jayaraman_ppv", "Jayaraman@FPR", "Jayaraman et al. PPV at the FPR", PRECISION,
          lambda e, s: jayaraman_ppv_bound(e, s.delta, s.fpr, s.gamma)),
    Bound("thudi_accuracy", "Thudi U(p=.5)", "Thudi et al. U at p = 0.5", ACCURACY,
          lambda e, s: precision_bound(e, 0.5, s.delta, s.tpr, form=s.form)),
    Bound("humphries_accuracy", "Humphries", "Humphries et al.", ACCURACY,
          lambda e, s: humphries_accuracy_bound(e, s.delta)),
    Bound("erlingsson_accuracy", "Erlingsson", "Erlingsson et al.", ACCURACY,
          lambda e, s: erlingsson_accuracy_bound(e, s.delta)),
    Bound("yeom_accuracy", "Yeom", "Yeom et al. e^ε/2", ACCURACY, lambda e, s: yeom_accuracy_bound(e)),
)


def compare_rows(epsilons: list[float], settings: Settings) -> list[dict[str, Any]]:
    """One row per ε with every bound of `BOUNDS` (None where a bound is undefined)."""
    grid = np.asarray(epsilons, float)
    values = {bound.key: bound.value(grid, settings) for bound in BOUNDS}
    return [{"epsilon": float(eps),
             **{key: None if column is None else float(np.asarray(column)[i])
                for key, column in values.items()}}
            for i, eps in enumerate(grid)]


def coincident(curves: dict[str, Optional[np.ndarray | float]], order: list[str]) -> dict[str, str]:
    """For each curve equal (to 1e-9) everywhere to one listed before it: that earlier curve's key.

    Thudi et al.'s U at p = 0.5 and δ = 0 is Humphries et al.'s and Mahloujifar et al.'s bound,
    exactly: drawn alike, one would hide the others, so the figure says so instead."""
    same: dict[str, str] = {}
    for i, key in enumerate(order):
        curve = curves.get(key)
        if curve is None:
            continue
        for earlier in order[:i]:
            other = curves.get(earlier)
            if other is not None and earlier not in same and np.allclose(
                    curve, other, rtol=0.0, atol=1e-9):
                same[key] = earlier
                break
    return same
