"""Malformed configurations are refused before Ray starts: one message, every problem, exit code 2.

Each case is a command line (Hydra overrides) run through `sweeper.checks.preflight.preflight`, the check
`python -m sweeper` makes before anything else.  Each refusal must name the field, the value given
and what is allowed (or the close matches), and leave nothing behind: the sweep's store folder is
never created, and no MLflow database appears.  The command's own refusals (exit code 2, one
`error:` message) run in this process (`testkit.in_process`); a few run the real command as a
subprocess, for the process boundary: the exit status, no traceback, Hydra's launcher, signals.
"""

from __future__ import annotations

import math
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import pytest

from sweeper.config import ConfigError, SweepConfig
from sweeper.checks.preflight import preflight
from testkit.in_process import run_command

REPO = Path(__file__).resolve().parents[3]
EXPERIMENTS = sorted(path.stem for path in (REPO / "conf" / "experiment").glob("*.yaml"))


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def refused(tmp_path: Path, overrides: list[str]) -> str:
    """The message of the ConfigError that `overrides` earn; asserts nothing was written."""
    store = tmp_path / "runs"
    argv = [o.format(tmp=tmp_path) for o in overrides]
    if not any(o.lstrip("+").startswith("store.root=") for o in argv):
        argv.append(f"store.root={store}")
    with pytest.raises(ConfigError) as error:
        preflight(argv)
    assert not store.exists(), "a refused configuration created its store folder"
    assert not list(tmp_path.rglob("mlflow.db")), "a refused configuration created an MLflow store"
    assert not list(tmp_path.rglob("mlruns")), "a refused configuration created an MLflow store"
    message = str(error.value)
    assert message.startswith("invalid configuration:") and error.value.problems
    return message


# (id, overrides, fragments the message must hold: the field, the value given, what is allowed)
CASES = [
    # Ranges.
    ("epsilon_zero", ["grid.epsilon=[0,8]"], ["grid.epsilon: 0.0", "must be > 0", "inf allowed"]),
    ("epsilon_negative", ["grid.epsilon=[-1]"], ["grid.epsilon: -1.0", "must be > 0"]),
    ("epsilon_nan", ["grid.epsilon=[nan]"], ["grid.epsilon: nan", "must be > 0"]),
    ("delta_one", ["grid.delta=[1]"], ["grid.delta: 1.0", "[0, 1)"]),
    ("delta_negative", ["grid.delta=[-1e-5]"], ["grid.delta: -1e-05", "[0, 1)"]),
    ("p_zero", ["grid.p=[0]"], ["grid.p: 0.0", "(0, 1]"]),
    ("p_above_one", ["grid.p=[0.5,1.5]"], ["grid.p: 1.5", "(0, 1]"]),
    ("gamma_zero", ["grid.p=[]", "grid.gamma=[0]"], ["grid.gamma: 0.0", "> 0"]),
    ("shadow_count_odd", ["shadow.count=3"], ["shadow.count=3", "even number ≥ 2"]),
    ("shadow_count_zero", ["shadow.count=0"], ["shadow.count=0", "even number ≥ 2"]),
    ("shadow_p_one", ["shadow.p=1"], ["shadow.p=1.0", "(0, 1)"]),
    ("momentum_one", ["train.momentum=1"], ["train.momentum=1.0", "[0, 1)"]),
    ("negative_trial", ["grid.trial=[-1]"], ["grid.trial: -1", "≥ 0"]),
    ("negative_seed", ["seed=-1"], ["seed=-1", "≥ 0"]),
    ("num_classes_one", ["dataset.num_classes=1"], ["dataset.num_classes=1", "≥ 2"]),
    ("input_shape_zero", ["dataset.input_shape=[0,28,28]"], ["dataset.input_shape=[0, 28, 28]", "each > 0"]),
    ("dashboard_port", ["cluster.dashboard_port=70000"], ["cluster.dashboard_port=70000", "0..65535"]),
    ("cluster_num_cpus_zero", ["cluster.num_cpus=0"], ["cluster.num_cpus=0", "≥ 1"]),
    ("fractional_cpus_above_one", ["resources.attack.num_cpus=1.5"],
     ["resources.attack.num_cpus=1.5", "fractions only below 1"]),
    ("cluster_address_http", ["cluster.address=http://head:8265"],
     ["cluster.address='http://head:8265'", "ray://HOST:10001"]),
    # Types, as Hydra reads them.
    ("type_list_entry", ["grid.epsilon=[abc]"], ["grid.epsilon=[abc]", "'abc'", "a number"]),
    ("type_int", ["train.epochs=two"], ["train.epochs=two", "train.epochs takes an integer"]),
    ("type_float_for_int", ["train.batch_size=1.5"], ["train.batch_size=1.5", "takes an integer"]),
    ("type_bool", ["dataset.synthetic=maybe"], ["dataset.synthetic=maybe", "true or false"]),
    ("type_null", ["train.epochs=null"], ["train.epochs=null", "not Optional", "an integer"]),
    ("type_section", ["grid=5"], ["grid=5", "a mapping with keys", "'epsilon'"]),
    ("unparsable", ["grid.epsilon=[1,"], ["grid.epsilon=[1,", "cannot be read", "key=[a,b]"]),
    ("sweep_without_multirun", ["grid.epsilon=1,2"], ["grid.epsilon=1,2", "key=[value1,value2]"]),
    # Unknown keys, with the close matches.
    ("unknown_top_key_appended", ["+foo=1"], ["+foo=1", "foo is not a key", "the top level takes"]),
    ("unknown_top_key", ["foo=1"], ["foo=1", "foo is not a key", "'grid'"]),
    ("unknown_nested_key", ["grid.epsilonn=[1]"],
     ["grid.epsilonn=[1]", "not a key", "did you mean 'grid.epsilon'?"]),
    ("unknown_nested_key_appended", ["+train.epochz=3"],
     ["+train.epochz=3", "not a key", "did you mean 'train.epochs'?"]),
    # Unknown names, with the close matches.
    ("unknown_dataset", ["dataset.name=cifar11"],
     ["dataset.name='cifar11'", "known datasets are", "did you mean 'cifar10'"]),
    ("unknown_dataset_group", ["dataset=mnst"],
     ["dataset=mnst", "no option 'mnst'", "'fashion_mnist'", "did you mean 'mnist'?"]),
    ("unknown_experiment", ["+experiment=cifar10_lria"],
     ["+experiment=cifar10_lria", "no option", "did you mean 'cifar10_lira'"]),
    ("unknown_model", ["model.name=mnist_cn"], ["model.name='mnist_cn'", "known models are",
                                                "did you mean 'mnist_cnn'"]),
    ("unknown_attack", ["grid.attack=[lira_onlin,loss]"],
     ["grid.attack: 'lira_onlin' is unknown", "known attacks are", "did you mean 'lira_online'"]),
    ("unknown_policy", ["grid.policy=[calibrate]"],
     ["grid.policy: 'calibrate' is unknown", "did you mean 'calibrated'?"]),
    ("unknown_report", ["report=frontiers"], ["report='frontiers'", "did you mean 'frontier'?"]),
    ("unknown_accountant", ["train.accountant=rpd"],
     ["train.accountant='rpd'", "['rdp', 'prv']", "did you mean 'rdp'?"]),
    # GDP under-states ε over few steps (tests/test_jobs/engine/test_accounting.py): refused, naming the others.
    ("gdp_accountant", ["train.accountant=gdp"],
     ["train.accountant='gdp'", "refused", "asymptotic", "rdp", "prv"]),
    ("unknown_optimizer", ["train.optimizer=adamw"],
     ["train.optimizer='adamw'", "['sgd', 'adam']", "did you mean 'adam'?"]),
    ("unknown_scale", ["scale=smok"], ["scale='smok'", "did you mean 'smoke'?"]),
    # Combinations that cannot run.
    ("image_model_on_tabular_data", ["dataset=adult", "model=mnist_cnn"],
     ["model.name='mnist_cnn' does not fit dataset.name='adult'", "[107]", "image model",
      "'logistic_regression'"]),
    ("calibrated_policy_without_enough_shadows",
     ["grid.policy=[calibrated]", "shadow.count=2", "grid.attack=[lira_online,loss]"],
     ["shadow.count=2", "calibrated policy", "at least 4 shadows"]),
    ("both_p_and_gamma", ["grid.gamma=[1]"], ["grid.p=[0.2, 0.5, 0.8], grid.gamma=[1.0]",
                                              "give exactly one of them"]),
    ("fixed_bound_unreachable", ["grid.epsilon=[]", "grid.precision_target=[0.3]", "grid.p=[0.5]"],
     ["grid.precision_target: 0.3 at p=0.5"]),
    ("duplicate_grid_values", ["grid.p=[0.5,0.5]"], ["grid.p=[0.5, 0.5]", "has duplicates"]),
    ("empty_attack_list", ["grid.attack=[]"], ["grid.attack", "at least one value"]),
    ("grid_over_limit", ["max_cells=10"],
     ["3 ε × 1 δ × 3 p × 4 attack × 1 policy × 4 trial = 144 cells", "max_cells=10",
      "raise max_cells on purpose"]),
    ("max_cells_zero", ["max_cells=0"], ["max_cells=0", "≥ 1"]),
    # Names that would escape their folder, or be empty.
    ("name_traversal", ["name=../evil"], ["name='../evil'", "no leading '.' or '..'"]),
    ("name_absolute", ["name=/abs"], ["name='/abs'", "no '/'"]),
    ("empty_tracking_experiment", ["tracking.experiment=''"], ["tracking.experiment=''"]),
    # Where results would go.
    ("store_path_is_a_file", ["store.root={tmp}/file"], ["store.root=", "/file", "is a file"]),
    ("store_under_a_file", ["store.root={tmp}/file/runs"],
     ["store.root=", "/file/runs", "cannot be created", "is a file, not a folder"]),
    ("store_bad_scheme", ["store.root=ftp://x/y"],
     ["store.root='ftp://x/y'", "scheme 'ftp'", "'s3://'", "'gs://'", "'file://'"]),
    ("store_bucket_missing", ["store.root=s3:///prefix"], ["store.root='s3:///prefix'", "name a bucket"]),
    ("store_uri_credentials", ["store.root='s3://bucket/runs?access_key=AKIAX&secret_key=hunter2'"],
     ["store.root='s3://bucket/runs?access_key=***&secret_key=***'",
      "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY"]),
    ("tracking_uri_credentials", ["tracking.uri=http://alice:hunter2@mlflow:5000"],
     ["tracking.uri='http://alice:***@mlflow:5000'", "MLFLOW_TRACKING_PASSWORD"]),
    # Settings the data cannot meet, found before Ray starts (mnist_subset: 5 000 records, 1 000
    # of them the test set, so a pool of 4 000 when nothing cuts it).
    ("eval_records_over_the_pool", ["dataset.members=null", "dataset.eval_records=4001"],
     ["dataset.eval_records=4001", "larger than the pool", "4000 records",
      "dataset.test_size=1000"]),
    ("store_under_proc", ["store.root=/proc/sweeper-runs"],
     ["store.root='/proc/sweeper-runs'", "cannot be created", "/proc is not writable"]),
    # Numbers a float cannot hold: Hydra would read inf and 0 without a word.
    ("epsilon_overflows", ["grid.epsilon=[1e400]"],
     ["grid.epsilon=[1e400]", "1e400 overflows", "write inf"]),
    ("delta_underflows", ["grid.delta=[1e-400]"],
     ["grid.delta=[1e-400]", "1e-400 underflows", "write 0"]),
    ("p_as_a_mapping", ["grid.p={{a: 1}}"],
     ["grid.p={{a: 1}}", "grid.p takes a list of numbers"]),
    # Config group options that are paths would load a YAML from outside conf/.
    ("experiment_outside_conf", ["+experiment=../../../x"],
     ["+experiment=../../../x", "'../../../x' is a path", "known options are", "'quickstart'"]),
    ("dataset_from_another_group", ["dataset=../model/mnist_cnn"],
     ["dataset=../model/mnist_cnn", "is a path", "'mnist_subset'"]),
    # The cluster: runtime environment.
    ("runtime_env_unknown_key", ["+cluster.runtime_env.workdir=."],
     ["cluster.runtime_env.workdir", "unknown key", "did you mean 'working_dir'?"]),
    ("runtime_env_credential", ["+cluster.runtime_env.env_vars.AWS_SECRET_ACCESS_KEY=hunter2"],
     ["cluster.runtime_env.env_vars.AWS_SECRET_ACCESS_KEY", "looks like a credential",
      "nodes' own environment"]),
    ("runtime_env_db_pass", ["+cluster.runtime_env.env_vars.DB_PASS=hunter2"],
     ["cluster.runtime_env.env_vars.DB_PASS", "looks like a credential", "runtime_env_agent.log"]),
    # Values Hydra lets through inside lists, which crashed the validator (TypeError: unhashable).
    ("grid_nested_list", ["grid.epsilon=[[1]]"],
     ["grid.epsilon=[[1]]", "[1] is not a number", "a flat list of numbers"]),
    ("grid_nested_names", ["grid.attack=[[loss]]"],
     ["grid.attack=[['loss']]", "['loss'] is not a string", "a flat list of strings"]),
    ("grid_mapping_in_list", ["grid.epsilon=[1,{{a:1}}]"],
     ["{{'a': 1}} is not a number", "grid.epsilon takes a flat list of numbers"]),
    # Names the OS or MLflow cannot carry (MLflow decodes '%00' in its SQLite URI to a NUL).
    ("store_percent_nul", ["store.root={tmp}/a%00b"],
     ["/a%00b'", "'%00' would be read as an escape by MLflow", "without '%'"]),
    ("store_name_too_long", ["store.root={tmp}/" + "x" * 5000],
     ["(5", "characters)'", "too long for the file system", "give a shorter path"]),
    ("store_name_component_too_long", ["store.root={tmp}/" + "y" * 300 + "/runs"],
     ["too long for the file system", "255 bytes per folder name"]),
    # Requests local Ray can never meet: it would queue them for ever.
    ("local_cpus_beyond_the_machine", ["resources.train.num_cpus=64", "cluster.num_cpus=2"],
     ["resources.train.num_cpus=64", "local Ray has 2 CPUs (cluster.num_cpus)", "at most 2"]),
    # Late refusals, now before Ray: a test set the dataset cannot hold, a trial beyond int64,
    # a pool smaller than the grid (digits: 1 797 records, 297 the test set; members 500 at p = 0.3
    # reach 500/0.3 = 1 667 records, as the planner rounds up).
    ("test_size_beyond_the_dataset", ["dataset.test_size=100000"],
     ["dataset.test_size=100000", "'mnist_subset' has 5000 records", "at most 4999"]),
    ("trial_beyond_int64", ["grid.trial=[99999999999999999999]"],
     ["grid.trial: 99999999999999999999 is beyond a 64-bit integer", str(2**63 - 1)]),
    ("pool_smaller_than_the_grid", ["dataset=digits", "model=logistic_regression", "dataset.members=500",
                                    "dataset.test_size=297", "grid.p=[0.3]"],
     ["dataset.name='digits' has 1500 pool records", "the grid needs 1667", "dataset.members=500"]),
    # Tracking URIs MLflow cannot use, found without it (it retried sqlite:////proc/x.db 115 s).
    ("tracking_unknown_scheme", ["tracking.uri=foo://x"],
     ["tracking.uri='foo://x'", "scheme 'foo' is not a tracking store", "'sqlite://'"]),
    ("tracking_file_under_proc", ["tracking.uri=file:///proc/mlruns"],
     ["tracking.uri='file:///proc/mlruns'", "/proc is not writable"]),
    ("tracking_sqlite_under_proc", ["tracking.uri=sqlite:////proc/x.db"],
     ["tracking.uri='sqlite:////proc/x.db'", "/proc is not writable"]),
    # Issue 30.6-8: refused late (a 7 TiB MemoryError after Ray started), or not at all.
    ("canaries_beyond_the_first_layer", ["+experiment=dpsgd_audit",
                                         "attack.canary_gradient_count=1000000000000"],
     ["attack.canary_gradient_count=1000000000000", "tanh_mlp64's first layer, which has 50176"]),
    ("canaries_beyond_the_first_layer_by_little", ["+experiment=dpsgd_audit",
                                                   "attack.canary_gradient_count=100000"],
     ["attack.canary_gradient_count=100000", "which has 50176"]),
    ("crafted_weights_without_public_records", ["+experiment=bb_audit_mnist_logreg",
                                                "dataset.members=null"],
     ["canary_crafted_final: the crafted weights are pre-trained on pool records past every "
      "model's pool"]),
    ("boolean_given_a_number", ["train.secure_noise=2", "train.compile=yes"],
     ["train.secure_noise=2: train.secure_noise takes true or false",
      "train.compile=yes: train.compile takes true or false"]),
    ("postgresql_without_its_default_driver", ["tracking.uri=postgresql://127.0.0.1:5432/mlflow"],
     ["tracking.uri: postgresql:// is opened with the database driver 'psycopg'",
      "postgresql+psycopg2://"]),
    # Issue 54: the audits' counts and labels, bounded by a cap and by the dataset's facts.
    ("audit_runs_beyond_the_cap", ["+experiment=bb_audit_mnist_logreg",
                                   "attack.canary_final_runs=1000000000000"],
     ["attack.canary_final_runs=1000000000000: must be in [2, 100000]"]),
    ("audit_label_beyond_the_classes", ["+experiment=bb_audit_mnist_logreg", "attack.canary_final_label=10"],
     ["attack.canary_final_label=10: dataset.name='mnist_subset' has 10 classes, labelled 0 … 9"]),
    ("audit_without_out_runs", ["+experiment=bb_audit_mnist_logreg", "grid.p=[0.5,1]"],
     ["grid.p=1 with ['canary_crafted_final']: an audit compares models (runs) holding its "
      "canaries with models without them", "use p < 1"]),
    ("audit_crafting_unknown", ["+experiment=bb_audit_mnist_cnn",
                                "attack.canary_final_crafting=plan"],
     ["attack.canary_final_crafting='plan'", "known recipes are ['decoy', 'plain']",
      "did you mean 'plain'"]),
    ("canary_audit_without_out_models", ["+experiment=dpsgd_audit", "grid.gamma=[0]", "grid.p=[]"],
     ["grid.p=1 with ['canary_gradient_iterates', 'canary_gradient_final', 'canary_input_lira', "
      "'canary_input_loss']"]),
    ("noise_canaries_beyond_the_pool", ["+experiment=dpsgd_audit", "grid.attack=[canary_input_loss]",
                                        "attack.canary_input_recipe=noise",
                                        "attack.canary_input_count=100000000"],
     ["attack.canary_input_count=100000000: more input canaries than dataset.name='mnist_subset' "
      "has pool records (4000)"]),
    ("sequential_settings_out_of_range",
     ["sequential.enabled=true", "sequential.level=1", "sequential.width=0",
      "sequential.margin=-0.1", "sequential.max_trials=3", "sequential.min_trials=5"],
     ["sequential.level=1.0: must be in (0, 1)", "sequential.width=0.0: must be in (0, 1]",
      "sequential.margin=-0.1: must be in [0, 1)",
      "sequential.min_trials=5: more than the 3 trial(s) a cell may get"]),
    ("runtime_env_uri_with_password",
     ["+cluster.runtime_env.env_vars.DB_URL='postgresql://app:hunter2@db:5432/x'"],
     ["cluster.runtime_env.env_vars.DB_URL", "its value holds a password", "secret store"]),
]


@pytest.mark.parametrize("overrides, fragments", [case[1:] for case in CASES],
                         ids=[case[0] for case in CASES])
def test_malformed_input_is_refused_naming_it(overrides, fragments, tmp_path):
    (tmp_path / "file").write_text("not a folder\n")
    message = refused(tmp_path, overrides)
    for fragment in fragments:
        assert fragment.format(tmp=tmp_path) in message, f"{fragment!r} not in:\n{message}"
    assert "hunter2" not in message, "a secret was echoed"


def test_a_word_for_a_boolean_is_named_once(tmp_path):
    """`train.compile=maybe` is refused by the boolean check and by OmegaConf: one line."""
    message = refused(tmp_path, ["train.compile=maybe", "train.tf32=maybe"])
    for override in ("train.compile=maybe", "train.tf32=maybe"):
        assert message.count(f"{override}:") == 1, message


@pytest.mark.parametrize("value", ["1.5", "big", "1e15"])
def test_a_mistyped_public_size_is_one_line(value, tmp_path):
    """Issue 44.6: the type refusal came with a second line, public_size=None "set it exactly
    when train.rate_from=declared", about the default its refusal left."""
    message = refused(tmp_path, ["train.rate_from=declared", f"train.public_size={value}"])
    _, line = message.splitlines()  # "invalid configuration:", then the one problem
    assert line.startswith(f"  - train.public_size={value}:") and "integer" in line, message


def test_a_public_size_beyond_the_pools_scale_is_refused(tmp_path):
    """Issue 44.6: 10**15 was accepted and planned ~1.6e13 steps an epoch.  The bound is 10 × the
    dataset's pool (the synthetic stand-in's 2000 records, `STAND_IN_POOL`: 20000); 10**15 / 64
    is 1.5625e13 steps."""
    base = ["dataset.synthetic=true", "train.rate_from=declared", "train.batch_size=64"]
    message = refused(tmp_path, [*base, f"train.public_size={10**15}"])
    assert f"train.public_size={10**15}: over 20000, 10 × the 2000 records" \
        in message and "1.56e+13 steps an epoch" in message, message
    refused(tmp_path, [*base, "train.public_size=20001"])
    preflight([*base, "train.public_size=20000", f"store.root={tmp_path / 'runs'}"])


@pytest.mark.parametrize("host", ["10.255.255.1", "203.0.113.7", "no-such-host.invalid"])
def test_a_dashboard_host_this_machine_cannot_bind_is_a_configuration_error(host, tmp_path):
    """Issue 44.7: local Ray started first, then failed after 66 s blaming the port.  Only a bind
    here (port 0) tells: nothing is sent to the address."""
    message = refused(tmp_path, [f"cluster.dashboard_host={host}"])
    assert f"cluster.dashboard_host='{host}': this machine cannot listen there" in message, message
    assert "dashboard_port" not in message, message
    for fine in ("127.0.0.1", "localhost"):
        preflight([f"cluster.dashboard_host={fine}", f"store.root={tmp_path / 'runs'}"])
    # A cluster's dashboard is the cluster's: not bound here.
    preflight(["cluster.dashboard_host=203.0.113.7", "cluster.address=ray://head:10001",
               f"store.root={tmp_path / 'runs'}"])


def test_command_refuses_an_unbindable_dashboard_host_before_ray(tmp_path):
    result, seconds = run_module("sweeper", "cluster.dashboard_host=10.255.255.1",
                                 "cluster.include_dashboard=true", f"store.root={tmp_path / 'runs'}",
                                 cwd=tmp_path)
    clean_refusal(result, ["cluster.dashboard_host='10.255.255.1': this machine cannot listen"])
    said = result.stdout + result.stderr
    assert "ERROR" not in said and "Ray dashboard" not in said and "port" not in said, said
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "Ray or the store wrote files"
    assert seconds < BOUND_S


def test_pdtp_records_beyond_a_targets_members(tmp_path):
    # The quickstart's target at p = 0.5 (trial 0; the quickstart runs four) draws from a pool of 500/0.5 = 1000 records, each a
    # member when its uniform draw from the target's seed is below p (jobs.engine.training.draw_mask):
    # the seed is sha256 of the JSON ["0", "target", 0]'s first 8 hex digits, as the planner
    # derives it, so the member count is known here without the project's code.
    import hashlib
    import json

    import numpy as np

    seed = int(hashlib.sha256(json.dumps([0, "target", 0]).encode()).hexdigest()[:8], 16)
    members = int((np.random.default_rng(seed).random(1000) < 0.5).sum())
    assert 450 < members < 550
    message = refused(tmp_path, ["grid.attack=[pdtp]", "grid.p=[0.5]", "grid.trial=[0]",
                                 f"attack.pdtp_records={members + 1}"])
    assert f"attack.pdtp_records={members + 1}" in message
    assert f"holds only {members} members" in message and "p=0.5, trial=0" in message
    # As many as it holds is fine.
    preflight(["grid.attack=[pdtp]", "grid.p=[0.5]", "grid.trial=[0]",
               f"attack.pdtp_records={members}", f"store.root={tmp_path / 'runs'}"])


def test_an_experiment_outside_conf_is_never_loaded(tmp_path):
    # A YAML that would pass as an experiment, reached by a relative path from conf/experiment.
    evil = tmp_path / "evil.yaml"
    evil.write_text("# @package _global_\nname: evil\n")
    relative = os.path.relpath(evil.with_suffix(""), REPO / "conf" / "experiment")
    message = refused(tmp_path, [f"+experiment={relative}"])
    assert f"'{relative}' is a path" in message


def test_credentials_in_mlflows_own_variable_are_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://alice:hunter2@127.0.0.1:5000")
    message = refused(tmp_path, [])
    assert "MLFLOW_TRACKING_URI='http://alice:***@127.0.0.1:5000'" in message
    assert "MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD" in message
    assert "hunter2" not in message
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")  # no userinfo: fine
    preflight([f"store.root={tmp_path / 'runs'}"])


def test_there_are_at_least_thirty_distinct_inputs():
    assert len({case[0] for case in CASES}) == len(CASES) >= 30
    assert len({tuple(case[1]) for case in CASES}) == len(CASES)


@pytest.mark.skipif(_has_gpu(), reason="this machine has a GPU: local Ray can run the task")
@pytest.mark.parametrize("overrides, field", [
    (["resources.train.num_gpus=0.25"], "resources.train.num_gpus=0.25"),
    (["resources.attack.num_gpus=1"], "resources.attack.num_gpus=1.0"),
    (["train.device=cuda"], "train.device='cuda'"),
], ids=["train_gpus", "attack_gpus", "cuda_device"])
def test_gpu_asked_of_local_ray_without_one(overrides, field, tmp_path):
    message = refused(tmp_path, overrides)
    assert field in message and "cluster.address is null (local Ray)" in message


def test_gpu_asked_of_a_remote_cluster_is_left_to_the_cluster(tmp_path):
    cfg = preflight(["resources.train.num_gpus=0.25", "cluster.address=ray://head:10001",
                     f"store.root={tmp_path / 'runs'}"])
    assert cfg.resources.train.num_gpus == 0.25
    assert not (tmp_path / "runs").exists()


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="root writes through any mode bits (the under-a-file case covers root)")
def test_store_in_a_read_only_folder(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        message = refused(tmp_path, [f"store.root={locked / 'runs'}"])
        assert f"store.root='{locked / 'runs'}'" in message and "not writable" in message
        assert not (locked / "runs").exists()
    finally:
        locked.chmod(0o700)


def test_every_problem_is_named_in_one_message(tmp_path):
    message = refused(tmp_path, ["grid.epsilon=[0]", "grid.epsilonn=[1]", "dataset=mnst",
                                 "train.epochs=two", "shadow.count=3", "train.optimizer=adm",
                                 "store.root=ftp://x/y"])
    fragments = ["grid.epsilon: 0.0", "did you mean 'grid.epsilon'?", "did you mean 'mnist'?",
                 "train.epochs=two", "shadow.count=3", "did you mean 'adam'?", "scheme 'ftp'"]
    missing = [f for f in fragments if f not in message]
    assert not missing, f"{missing} not in:\n{message}"
    assert message.count("\n  - ") == len(fragments)


def test_a_valid_command_line_passes_and_writes_nothing(tmp_path):
    cfg = preflight(["grid.epsilon=[1,inf]", "grid.p=[0.5,1]", f"store.root={tmp_path / 'runs'}"])
    assert isinstance(cfg, SweepConfig) and cfg.name == "quickstart"
    assert cfg.grid.p == [0.5, 1.0]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("epsilon, expected", [
    ("[.inf]", [math.inf]), ("[4,.inf]", [4.0, math.inf]), ("[.Inf,8]", [math.inf, 8.0]),
    ("[+.INF]", [math.inf]), ("[inf]", [math.inf])])
def test_yamls_inf_is_infinity_alone_or_in_a_list(epsilon, expected, tmp_path):
    # Hydra's grammar reads `.inf` (YAML's spelling, the experiment files') as the string '.inf'.
    cfg = preflight([f"grid.epsilon={epsilon}", "tracking.experiment=.inf",
                     f"store.root={tmp_path / 'runs'}"])
    assert cfg.grid.epsilon == expected
    assert cfg.tracking.experiment == ".inf"  # a string field keeps what was typed
    assert list(tmp_path.iterdir()) == []


def test_yamls_negative_inf_is_refused_as_a_number(tmp_path):
    message = refused(tmp_path, ["grid.epsilon=[4,-.inf]"])
    assert "grid.epsilon: -inf must be > 0 (inf allowed: no privacy)" in message
    assert "could not be converted" not in message


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_passes_preflight(experiment, tmp_path):
    # No GPU here: the experiments that ask for a fraction of one are checked on the CPU.
    cfg = preflight([f"+experiment={experiment}", "resources.train.num_gpus=0",
                     f"store.root={tmp_path / 'runs'}"])
    assert cfg.max_cells == SweepConfig.max_cells
    assert list(tmp_path.iterdir()) == []


def test_runtime_env_is_taken_whole_or_key_by_key(tmp_path):
    store = f"store.root={tmp_path / 'runs'}"
    cfg = preflight(["++cluster.runtime_env={working_dir:.,excludes:[runs]}", store])
    assert cfg.cluster.runtime_env == {"working_dir": ".", "excludes": ["runs"]}
    cfg = preflight(["+cluster.runtime_env.env_vars.OMP_NUM_THREADS='1'", store])
    assert cfg.cluster.runtime_env == {"env_vars": {"OMP_NUM_THREADS": "1"}}
    # Without the +, Hydra's struct mode refuses a new key: the message says how to add it.
    message = refused(tmp_path, ["cluster.runtime_env.working_dir=."])
    assert "+cluster.runtime_env.working_dir=" in message


# The real command, as a person runs it: exit code 2, `error:` on stderr, nothing written.

def run_sweeper(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "sweeper", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_command_refuses_hydra_composition_errors_with_exit_code_2(tmp_path):
    # Hydra alone exits 1 with its own text for these; the preflight names them all, exit code 2.
    result = run_sweeper("dataset=mnst", "grid.epsilonn=[1]", "train.epochs=two",
                         f"store.root={tmp_path / 'runs'}", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: invalid configuration:")
    for fragment in ("did you mean 'mnist'?", "did you mean 'grid.epsilon'?", "train.epochs=two"):
        assert fragment in result.stderr
    assert "Traceback" not in result.stderr and "Ray" not in result.stdout
    assert list(tmp_path.iterdir()) == []


def test_command_never_echoes_credentials(tmp_path):
    # A real process: whatever reaches the terminal (a log line too) is searched for the secret.
    result = run_sweeper("tracking.uri=https://alice:hunter2@mlflow.example:443",
                         f"store.root={tmp_path / 'runs'}", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "error:" in result.stderr and "MLFLOW_TRACKING_PASSWORD" in result.stderr
    assert "hunter2" not in result.stderr + result.stdout
    assert list(tmp_path.iterdir()) == []


def test_a_multirun_writes_nothing_outside_its_store_and_no_override_on_disk(tmp_path):
    """Issue 30.5: Hydra's launcher wrote multirun/<date>/<time>/multirun.yaml and a folder per
    job into the working folder, every override in clear.  Both jobs here
    pass the preflight and are refused by their sweep (no CIFAR-10 files), each through
    sweeper's own job loop."""
    data = tmp_path / "no_data"
    result = run_sweeper("--multirun", "+experiment=cifar10_lira", "resources.train.num_gpus=0",
                         "grid.p=[0.1],[0.2]", f"dataset.data_dir={data}",
                         f"store.root={tmp_path / 'runs'}",
                         "+cluster.runtime_env.env_vars.GREETING=hunter2", cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.count("Dataset 'cifar10' is not available") == 2  # each job, by itself
    assert "job 1 of 2" in result.stdout and "job 2 of 2" in result.stdout
    assert not (tmp_path / "multirun").exists() and sorted(p.name for p in tmp_path.iterdir()) == []


def test_command_checks_every_job_of_a_multirun_before_the_first(tmp_path):
    result, _ = run_command("sweeper", "--multirun", "train.epochs=1,0", "grid.p=[0.5]",
                         f"store.root={tmp_path / 'runs'}", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "job #1 (train.epochs=0): train.epochs=0: must be ≥ 1" in result.stderr
    assert "job #0" not in result.stderr
    assert list(tmp_path.iterdir()) == []  # not even Hydra's multirun/ folder


# Issue 24, items 7-16: the real commands, each refused or ended in bounded time, one message,
# no traceback, nothing written.  Refusals before Ray take seconds (Python, Hydra, torch); the
# hangs they replace took minutes or for ever.

#: What "bounded" means here, generous for a loaded CI machine: the waits these tests replace
#: were 115 s, 248 s or for ever, and the refusals take a few seconds on a quiet one.
BOUND_S = 90


def run_module(module: str, *args: str, cwd: Path, env: Optional[dict] = None,
               timeout: float = 2 * BOUND_S) -> tuple[subprocess.CompletedProcess, float]:
    """`python -m module args` as a person runs it; (the result, seconds it took)."""
    environment = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    environment.pop("RAY_ADDRESS", None)
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env=environment,
                            capture_output=True, text=True, timeout=timeout)
    return result, time.monotonic() - started


def clean_refusal(result: subprocess.CompletedProcess, fragments: list[str]) -> None:
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr + result.stdout, result.stderr[-3000:]
    missing = [f for f in fragments if f not in result.stderr]
    assert not missing, f"{missing} not in:\n{result.stderr[-3000:]}"


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def tabular_archive_truncated(data_dir: Path) -> None:
    """A Purchase-100 archive whose gzip stream stops half way (a download cut short): its magic
    bytes pass the old check, its CRC and end-of-stream marker do not."""
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        payload = os.urandom(100_000)  # incompressible, so the cut falls inside the member
        info = tarfile.TarInfo("dataset_purchase")
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    (data_dir / "purchase100").mkdir(parents=True)
    raw = buffer.getvalue()
    (data_dir / "purchase100" / "dataset_purchase.tgz").write_bytes(raw[:len(raw) // 2])


# (id, overrides, fragments of the one message); {tmp}: the test's folder, {port}: a closed port.
# The validator's cases are in CASES too (in process); here, one command per path through the
# command (validator, runner before Ray, dataset check), several problems at once where the
# validator sees them together.
COMMAND_CASES = [
    ("every_problem_at_once", ["store.root={tmp}/a%00b", "tracking.uri=foo://x",  # 9, 16
                               "resources.train.num_cpus=64", "cluster.num_cpus=2",  # 8
                               "dataset.test_size=100000", "grid.trial=[99999999999999999999]"],
     ["'%00' would be read as an escape", "scheme 'foo'", "local Ray has 2 CPUs",
      "dataset.test_size=100000", "beyond a 64-bit integer"]),  # 15
    ("nested_grid_value", ["grid.epsilon=[[1]]"], ["[1] is not a number"]),  # item 11
    ("store_too_long", ["store.root={tmp}/" + "x" * 5000], ["too long for the file system"]),  # 12
    ("store_symlink_loop", ["store.root={tmp}/loop/a/runs"], ["symbolic link loop"]),  # 12
    ("s3_endpoint_closed", ["store.root='s3://bucket/runs?endpoint_override=127.0.0.1:{port}"  # 15
                            "&scheme=http'", "tracking.uri=sqlite:///{tmp}/m/mlflow.db"],
     ["nothing answers at its endpoint_override 127.0.0.1:{port}"]),
    ("corrupt_archive", ["+experiment=purchase100_ppv", "scale=smoke",  # 15
                         "dataset.data_dir={tmp}/data"], ["is corrupt or truncated"]),
    ("tracking_server_closed", ["tracking.uri=http://127.0.0.1:{port}"],  # 16
     ["tracking.uri='http://127.0.0.1:{port}': the MLflow server does not answer"]),
    ("audit_beyond_its_data", ["+experiment=bb_audit_mnist_logreg", "grid.p=[1]",  # issue 54
                               "attack.canary_final_runs=1000000000000",
                               "attack.canary_final_label=10"],
     ["attack.canary_final_runs=1000000000000: must be in [2, 100000]",
      "attack.canary_final_label=10: dataset.name='mnist_subset' has 10 classes",
      "grid.p=1 with ['canary_crafted_final']"]),
]


#: `cluster.address=auto` asks whether this machine runs a Ray cluster: only a process of its own
#: can answer (this one may hold the session's Ray, which `auto` would join and sweep on).
NO_CLUSTER_CASES = [
    ("auto_with_no_cluster", ["cluster.address=auto"],  # item 14
     ["cluster.address='auto': no Ray cluster is running here", "ray start --head"]),
    ("remote_with_no_cluster", ["cluster=remote"], ["cluster.address='auto': no Ray cluster"]),
]


@pytest.mark.parametrize("name, overrides, fragments", NO_CLUSTER_CASES,
                         ids=[case[0] for case in NO_CLUSTER_CASES])
def test_command_without_a_cluster_refuses_auto_before_ray(tmp_path, name, overrides, fragments):
    env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}
    env.update(PYTHONPATH=str(REPO), RAY_TMPDIR=str(tmp_path))  # no `ray start` record there
    (tmp_path / "work").mkdir()
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "sweeper", *overrides,
                             f"store.root={tmp_path / 'work' / 'runs'}"], cwd=tmp_path / "work",
                            env=env, capture_output=True, text=True, timeout=300)
    clean_refusal(result, fragments)
    assert "Ray dashboard" not in result.stdout and "models trained" not in result.stderr
    assert sorted(p.name for p in (tmp_path / "work").iterdir()) == [], "it wrote files"
    assert time.monotonic() - started < BOUND_S


def test_command_refuses_issue_24_inputs_before_ray(tmp_path, closed_port):
    """Each case, run as `python -m sweeper` (in this process: `run_command`), was a traceback,
    a hang or a refusal after Ray had started on main."""
    (tmp_path / "loop").mkdir()
    (tmp_path / "loop" / "a").symlink_to(tmp_path / "loop" / "b")
    (tmp_path / "loop" / "b").symlink_to(tmp_path / "loop" / "a")
    tabular_archive_truncated(tmp_path / "data")

    def one(case):
        name, overrides, fragments = case
        folder = tmp_path / name
        folder.mkdir()
        store = [] if any(o.startswith(("store.root", "'store.root")) for o in overrides) else \
            [f"store.root={folder / 'runs'}"]
        args = [o.format(tmp=tmp_path, port=closed_port) for o in overrides] + store
        result, seconds = run_command("sweeper", *args, cwd=folder, unset=("RAY_ADDRESS",),
                                      env={"RAY_TMPDIR": str(folder)})  # no `ray start` record
        return name, result, seconds, [f.format(tmp=tmp_path, port=closed_port) for f in fragments]

    outcomes = [one(case) for case in COMMAND_CASES]
    for name, result, seconds, fragments in outcomes:
        clean_refusal(result, fragments)
        assert "Ray dashboard" not in result.stdout and "models trained" not in result.stderr, name
        assert sorted(p.name for p in (tmp_path / name).iterdir()) == [], f"{name} wrote files"
        assert seconds < BOUND_S, name
    assert not (tmp_path / "m").exists() and not list(tmp_path.glob("a*b"))


class SilentPort:
    """A loopback port that accepts connections and never says a word (not Ray, not HTTP)."""

    def __init__(self):
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(8)
        self.port = self.server.getsockname()[1]

    def close(self):
        self.server.close()


@pytest.fixture
def silent_port():
    port = SilentPort()
    yield port.port
    port.close()


@pytest.fixture
def health_only_server():
    """A gRPC server on loopback that answers the standard health check SERVING, as Ray's GCS
    does, and nothing else: it passes the probe, and `ray.init` then retries without end."""
    import concurrent.futures

    import grpc

    handler = grpc.method_handlers_generic_handler("grpc.health.v1.Health", {
        "Check": grpc.unary_unary_rpc_method_handler(
            lambda request, context: b"\x08\x01",  # HealthCheckResponse{status: SERVING}
            request_deserializer=lambda raw: raw, response_serializer=lambda raw: raw)})
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield port
    server.stop(grace=None)


#: Ray dials the machine's outward address for 127.0.0.1 unless this is "0"; the fakes listen
#: on loopback only, so the sweep is told to stay there (as a single-machine Ray is).
LOOPBACK_RAY = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


def test_a_port_that_answers_but_is_not_ray_is_refused(tmp_path, silent_port):
    """Item 7: on main `ray.init` waited for ever on such a port."""
    result, seconds = run_module("sweeper", f"cluster.address=127.0.0.1:{silent_port}",
                                 "cluster.connect_timeout_s=2", f"store.root={tmp_path / 'runs'}",
                                 cwd=tmp_path, env=LOOPBACK_RAY)
    clean_refusal(result, [f"cluster.address='127.0.0.1:{silent_port}'",
                           "accepts connections but is not a Ray cluster's GCS"])
    assert seconds < BOUND_S and list(tmp_path.iterdir()) == []


def test_ray_init_is_bounded_by_connect_timeout(tmp_path, health_only_server):
    """Item 7: past the probe, Ray's own connection (here: "Failed to get cluster ID", retried
    in C++) ends at cluster.connect_timeout_s with exit 2."""
    result, seconds = run_module("sweeper", f"cluster.address=127.0.0.1:{health_only_server}",
                                 "cluster.connect_timeout_s=4", f"store.root={tmp_path / 'runs'}",
                                 cwd=tmp_path, env=LOOPBACK_RAY)
    clean_refusal(result, ["Ray did not connect within cluster.connect_timeout_s=4 s"])
    assert seconds < BOUND_S and list(tmp_path.iterdir()) == []


@pytest.mark.serial  # the signal's effect is bounded in seconds
def test_sigterm_ends_a_connection_that_hangs(tmp_path, health_only_server):
    """Item 7: on main SIGTERM was ignored while `ray.init` waited (Ray's Python handler never
    ran).  Now the command ends at once with 143 and one line."""
    environment = {**os.environ, "PYTHONPATH": str(REPO), **LOOPBACK_RAY}
    environment.pop("RAY_ADDRESS", None)
    driver = subprocess.Popen(
        [sys.executable, "-m", "sweeper", f"cluster.address=127.0.0.1:{health_only_server}",
         "cluster.connect_timeout_s=300", f"store.root={tmp_path / 'runs'}"],
        cwd=tmp_path, env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        waited = time.monotonic()
        lines = []
        for line in driver.stderr:  # Ray's C++ client logs each failed attempt
            lines.append(line)
            if "cluster ID" in line or time.monotonic() - waited > BOUND_S:
                break
        assert any("cluster ID" in line for line in lines), "".join(lines)[-2000:]
        driver.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        code = driver.wait(timeout=60)
        ended = time.monotonic() - sent
        rest = driver.stderr.read()
    finally:
        if driver.poll() is None:
            driver.kill()
    assert code == 143, rest[-2000:]
    assert "interrupted while connecting to cluster.address=" in rest and "Traceback" not in rest
    assert ended < 20  # at once, but for a loaded machine: it waited for ever on main
    assert not (tmp_path / "runs").exists()


def test_sync_probes_a_dead_tracking_server_once(tmp_path, closed_port):
    """Item 10: on main `sweeper sync` against a closed port took 248 s in MLflow's retries."""
    sweep = tmp_path / "runs" / "sweeps" / "q"
    sweep.mkdir(parents=True)
    uri = f"http://127.0.0.1:{closed_port}"
    (sweep / "sweep.json").write_text(
        '{"name": "q", "sweep_key": "k", "cells": ["c"], "config": {"tracking": '
        f'{{"uri": "{uri}", "experiment": "sweeper"}}}}}}')
    for args in (["--tracking-uri", uri], []):  # named on the command line, or the sweep's own
        result, seconds = run_command("sweeper.cli.sync_command", "--experiment", "q",
                                      "--store-root", str(tmp_path / "runs"), *args, cwd=tmp_path)
        assert result.returncode == 1, result.stderr[-2000:]
        assert f"'{uri}': the MLflow server does not answer" in result.stderr
        assert "nothing was logged" in result.stderr and "Traceback" not in result.stderr
        assert seconds < BOUND_S


def test_frontier_checks_its_output_files_before_the_table(tmp_path):
    """Item 13: on main the table printed, then a traceback for /proc/x.csv."""
    result, _ = run_command("sweeper.cli.frontier_command", "--run-dir", str(tmp_path / "runs" / "sweeps" / "q"),
                            "--csv", "/proc/x.csv", "--plot", "/proc/x.png", cwd=tmp_path)
    clean_refusal(result, ["--csv='/proc/x.csv'", "--plot='/proc/x.png'", "/proc is not writable"])
    assert result.stdout == ""


@pytest.mark.parametrize("argv, said", [
    (["--replace=yes"], ["--replace=yes: --replace takes no value; write --replace alone"]),
    (["--wiat"], ["--wiat: no such option; did you mean '--wait'?"]),
    (["--replace=1", "--wiat", "--cfgg"],
     ["--replace=1: --replace takes no value", "--wiat: no such option",
      "--cfgg: no such option; did you mean '--cfg'?"]),
])
def test_a_mistyped_option_is_named_once_among_the_options_there_are(argv, said, tmp_path):
    """Issue 30.9: the usage and the error printed twice, the program called `__main__.py`, no
    word of --replace or --wait, and every override after the option "unrecognized"."""
    result, _ = run_command("sweeper", *argv, f"store.root={tmp_path / 'runs'}", cwd=tmp_path)
    clean_refusal(result, said)
    assert "usage:" not in result.stderr and "__main__" not in result.stderr
    assert "store.root" not in result.stderr  # an override is never called an option
    assert "sweeper's own are --replace and --wait" in result.stderr or len(said) == 1
    assert not (tmp_path / "runs").exists()


def test_frontier_says_a_store_root_that_is_a_file_is_one(tmp_path):
    """Issue 30.10: `--store-root <a file>` printed a raw `[Errno 20]` (every bad filter named
    at once: tests/test_sweeper/cli/test_frontier_view.py)."""
    (tmp_path / "afile").write_text("not a store\n")
    result, _ = run_command("sweeper.cli.frontier_command", "--store-root", str(tmp_path / "afile"), cwd=tmp_path)
    clean_refusal(result, [f"{tmp_path / 'afile'}: is a file, not a store's folder"])
    assert "Errno" not in result.stderr



def test_requests_no_node_can_meet_are_refused_before_submitting(ray_local):
    """Item 8, a cluster's side: on main a task asking 64 CPUs of 2-CPU nodes waited for ever
    ("No available node types can fulfill resource request").  The sweep reads the cluster's
    nodes once Ray is up and refuses before anything is submitted or written."""
    from sweeper.cluster.submission import check_cluster_resources

    cpus = max(node["Resources"].get("CPU", 0) for node in ray_local.nodes() if node["Alive"])
    cfg = SweepConfig()
    cfg.resources.train.num_cpus, cfg.resources.attack.num_gpus = cpus + 1, 64
    with pytest.raises(ConfigError) as refused:
        check_cluster_resources(cfg)
    message = str(refused.value)
    assert f"resources.train.num_cpus={cpus + 1:g}: the Ray cluster's largest node has {cpus:g} " \
           "CPUs" in message
    assert "resources.attack.num_gpus=64: the Ray cluster's largest node has" in message
    cfg.resources.train.num_cpus, cfg.resources.attack.num_gpus = cpus, 0
    check_cluster_resources(cfg)  # what the largest node has is fine
