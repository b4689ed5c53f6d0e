"""Credentials never reach a log, an MLflow param or sweep.json: the redaction, by hand."""

from __future__ import annotations

from sweeper.credentials import (redact, redact_tree, scrub, scrub_override, uri_credentials,
                                 value_credentials)
from sweeper.store.artifacts import is_uri, split_sweep_location
from sweeper.tracking.run_records import config_params


def test_uris_lose_passwords_tokens_and_secret_queries():
    assert redact("http://alice:hunter2@mlflow:5000/x") == "http://alice:***@mlflow:5000/x"
    assert redact("https://tok3n@host/api") == "https://***@host/api"
    assert redact("s3://b/p?endpoint_override=h:9000&secret_key=s&scheme=http") == \
        "s3://b/p?endpoint_override=h:9000&secret_key=***&scheme=http"
    assert redact("runs/local") == "runs/local"  # not a URI: as it is
    assert uri_credentials("s3://b/p?access_key=a") == ["query parameter 'access_key'"]
    assert uri_credentials("http://127.0.0.1:5000") == []


def test_a_config_tree_is_masked_everywhere_lists_included():
    config = {"cluster": {"runtime_env": {
        "pip": ["--index-url https://u:p4ss@pypi.example/simple", "numpy"],
        "env_vars": {"DB_URL": "postgresql://u:pw@db/x", "HF_TOKEN": "hf_abc",
                     "DB_PASS": "plain1", "OMP_NUM_THREADS": "1"}}},
        "store": {"root": "s3://b/runs?endpoint_override=h:1"}, "seed": 3}
    params = config_params(config)
    assert params["cluster.runtime_env.pip"] == ["--index-url https://u:***@pypi.example/simple",
                                                 "numpy"]
    # Every environment value is masked, whatever its name says: only the names are shown.
    for name in ("DB_URL", "HF_TOKEN", "DB_PASS", "OMP_NUM_THREADS"):
        assert params[f"cluster.runtime_env.env_vars.{name}"] == "***"
    assert params["store.root"] == "s3://b/runs?endpoint_override=h:1" and params["seed"] == 3
    flat = repr(redact_tree(config))
    assert "p4ss" not in flat and ":pw@" not in flat and "hf_abc" not in flat and "plain1" not in flat


def test_free_text_loses_passwords_tokens_and_secret_assignments():
    text = ("MlflowException: API request to http://alice:hunter2@127.0.0.1:5000/api failed; "
            "retry https://tok3n@host/x with AWS_SECRET_ACCESS_KEY=abc123 and "
            "{'DB_PASS': 'pw9', 'OMP_NUM_THREADS': '1'}; write key=value")
    assert scrub(text) == (
        "MlflowException: API request to http://alice:***@127.0.0.1:5000/api failed; "
        "retry https://***@host/x with AWS_SECRET_ACCESS_KEY=*** and "
        "{'DB_PASS': '***', 'OMP_NUM_THREADS': '1'}; write key=value")
    # An override that sets an environment variable is echoed without its value at all.
    assert scrub_override("+cluster.runtime_env.env_vars.DB=hunter2") == \
        "+cluster.runtime_env.env_vars.DB=***"
    assert scrub_override("++cluster.runtime_env={env_vars:{DB:hunter2}}") == \
        "++cluster.runtime_env=***"
    assert scrub_override("grid.p=[0.5]") == "grid.p=[0.5]"


def test_values_holding_a_uri_with_a_password_are_credentials():
    assert value_credentials("see postgresql://u:pw@db/x") == ["a password"]
    assert value_credentials("https://tok@host/api") == ["a user name (often a token)"]
    assert value_credentials("plain value, http://127.0.0.1:8080/x") == []


def test_sweep_locations_split_into_store_and_name():
    assert split_sweep_location("runs/sweeps/exp") == ("runs", "exp")
    assert split_sweep_location("sweeps/exp") == (".", "exp")
    assert split_sweep_location("/data/run#1/sweeps/exp") == ("/data/run#1", "exp")
    assert split_sweep_location("s3://b/r/sweeps/x?endpoint_override=h:1") == \
        ("s3://b/r?endpoint_override=h:1", "x")
    assert is_uri("s3://b/r") and is_uri("file:///tmp/r")
    assert not is_uri("C:/runs") and not is_uri("my-store:2024")


def test_a_failed_cells_record_keeps_no_credentials():
    from sweeper.failures import classify

    error = ConnectionError("cannot read s3://b/x: endpoint http://alice:hunter2@minio:9000 refused")
    record = classify(error, 3, task="attack loss").record("loss ε=1", "k", {"p": 0.5})
    assert record["reason"] == ("ConnectionError: cannot read s3://b/x: endpoint "
                                "http://alice:***@minio:9000 refused (still failing after 3 retries)")
    assert "hunter2" not in repr(record)
