"""Argument checks and return conventions shared by every family of bounds.

Why one place.  Every bound promises the same contract (module docstring of `sweeper.bounds`):
broadcast over arrays, a Python float back when every argument is a scalar, and a ValueError that
names the argument and its offending value when a parameter leaves its domain.  Keeping the checks
here keeps that contract, and its error messages, identical across the families.
"""

from __future__ import annotations

import math
from typing import Any, Sequence, Union

import numpy as np

ArrayLike = Union[float, Sequence[float], np.ndarray]
Result = Union[float, np.ndarray]

#: Readings of Theorem 3.3's δ-term that a `form` argument accepts: "derived" (the proof carried
#: through, the default) and "printed" (the papers' formula, invalid for δ > 0 and p < 1; see
#: `sweeper.bounds.thudi`).
BOUND_FORMS = ("derived", "printed")


def is_scalar(*values: Any) -> bool:
    return all(np.ndim(v) == 0 for v in values)


def out(values: np.ndarray, scalar: bool) -> Result:
    return float(values) if scalar else values


def check(name: str, value: ArrayLike, low: float, high: float, *, low_open: bool = False,
          high_open: bool = False, allow_nan: bool = False) -> np.ndarray:
    """Return `value` as a float array, or raise ValueError naming the argument and its value."""
    array = np.asarray(value, dtype=float)
    nan_ok = np.isnan(array) if allow_nan else np.zeros(array.shape, bool)
    below = (array <= low) if low_open else (array < low)
    above = (array >= high) if high_open else (array > high)
    bad = ~nan_ok & (below | above | np.isnan(array))
    if np.any(bad):
        offending = array[bad].flat[0] if array.ndim else float(array)
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        raise ValueError(f"{name} must lie in {interval}; got {name}={offending:g}")
    return array


def check_epsilon(value: ArrayLike) -> np.ndarray:
    return check("epsilon", value, 0.0, math.inf)


def check_delta(value: ArrayLike) -> np.ndarray:
    return check("delta", value, 0.0, 1.0, high_open=True)


def check_prob(name: str, value: ArrayLike) -> np.ndarray:
    return check(name, value, 0.0, 1.0)


def check_rate(name: str, value: ArrayLike) -> np.ndarray:
    return check(name, value, 0.0, 1.0, low_open=True)


def check_target(value: ArrayLike) -> np.ndarray:
    return check("target", value, 0.0, 1.0, low_open=True)


def check_form(value: Any) -> str:
    """Return `value` if it is one of BOUND_FORMS, else raise ValueError naming `form`."""
    if not isinstance(value, str) or value not in BOUND_FORMS:
        raise ValueError(f"form must be one of {', '.join(map(repr, BOUND_FORMS))}; "
                         f"got form={value!r}")
    return value


def check_counts(name: str, value: ArrayLike) -> np.ndarray:
    """`value` as a float array of non-negative integers, or ValueError naming the argument."""
    array = check(name, value, 0.0, math.inf)
    bad = np.isinf(array) | (array != np.floor(array))
    if np.any(bad):
        raise ValueError(f"{name} must be a non-negative integer (a count); "
                         f"got {name}={array[bad].flat[0]:g}")
    return array


def check_at_most(name: str, small: np.ndarray, limit_name: str, limit: np.ndarray) -> None:
    bad = small > limit
    if np.any(bad):
        raise ValueError(f"{name} must not exceed {limit_name}; got {name}={small[bad].flat[0]:g} "
                         f"> {limit_name}={limit[bad].flat[0]:g}")


def check_level(alpha: ArrayLike) -> np.ndarray:
    return check("alpha", alpha, 0.0, 1.0, low_open=True, high_open=True)


def check_guesses(correct: ArrayLike, guesses: ArrayLike, canaries: ArrayLike, delta: ArrayLike,
                  alpha: ArrayLike, p: ArrayLike) -> tuple[np.ndarray, ...]:
    """A one-run audit's arguments, checked and broadcast: (correct, guesses, canaries, δ,
    alpha, p), correct ≤ guesses ≤ canaries."""
    v, r, m = (check_counts("correct", correct), check_counts("guesses", guesses),
               check_counts("canaries", canaries))
    arrays = np.broadcast_arrays(v, r, m, check_delta(delta), check_level(alpha),
                                 check("p", p, 0.0, 1.0, low_open=True, high_open=True))
    check_at_most("correct", arrays[0], "guesses", arrays[1])
    check_at_most("guesses", arrays[1], "canaries", arrays[2])
    return arrays
