"""Validation names every problem before any work starts."""

from __future__ import annotations

import pytest

from sweeper.config import ConfigError, SweepConfig, validate


def problems_of(**changes) -> list[str]:
    cfg = SweepConfig()
    for path, value in changes.items():
        section, _, key = path.partition("__")
        setattr(getattr(cfg, section), key, value) if key else setattr(cfg, section, value)
    with pytest.raises(ConfigError) as refused:
        validate(cfg)
    return refused.value.problems


def test_the_default_config_is_valid():
    validate(SweepConfig())


@pytest.mark.parametrize("changes, fragment", [
    ({"calibration__objective": "auc"}, "calibration.objective='auc'"),
    ({"calibration__fpr": 0.0}, "calibration.fpr=0.0"),
    ({"grid__policy": ["calibrated"], "shadow__count": 2}, "need at least 4 shadows"),
    ({"grid__policy": ["oracle"]}, "'oracle' is unknown"),
    ({"metrics__bound_form": "paper"}, "metrics.bound_form='paper'"),
    ({"metrics__violation_alpha": 1.0}, "metrics.violation_alpha=1.0"),
    ({"model__name": "membership_mechanism"}, "goes with the 'membership_bits' dataset"),
    ({"grid__attack": ["output_threshold"]}, "only attack 'membership_mechanism'"),
])
def test_each_bad_value_is_named(changes, fragment):
    assert any(fragment in problem for problem in problems_of(**changes))


def test_every_problem_is_reported_at_once():
    found = problems_of(grid__p=[0.0, 1.5], calibration__fpr=2.0, metrics__bound_form="x")
    assert len(found) >= 4
