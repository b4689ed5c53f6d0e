"""`store.root` as an S3 URI, against a real S3-compatible server (moto) on loopback that checks
credentials: the whole sweep runs through `python -m sweeper`, its results read back with
`python -m sweeper.cli.frontier_command`, and the credentials, which come from the environment only, reach
no MLflow param, no log line and no stored object."""

from __future__ import annotations

import sqlite3

import pandas as pd

from sweeper.frontier import load_frontier
from sweeper.cli.frontier_command import main as frontier_main
from sweeper.store.artifacts import ArtifactStore


def test_a_sweep_on_s3_keeps_credentials_out_of_everything(s3_server, procs, make_tiny_overrides,
                                                           tmp_path, monkeypatch, capsys):
    uri = s3_server.uri("runs")
    db = tmp_path / "mlflow.db"
    args = make_tiny_overrides(uri, name="on_s3", **{"grid.epsilon": "[4]",
                                                     "grid.attack": "[loss,lira_offline]",
                                                     "tracking.uri": f"sqlite:///{db}"})
    sweep = procs.run_sweep_cli(args, env=s3_server.env, cwd=tmp_path)
    assert sweep.wait(timeout=600) == 0, procs.output(sweep)[1][-3000:]
    out, err = procs.output(sweep)
    assert "done in" in out

    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    store = ArtifactStore(uri)
    frame = load_frontier(run_dir=store.sweep_uri("on_s3"))
    assert len(frame) == 2 * 2 and frame.cell_key.is_unique and not frame.violation.any()
    assert frontier_main(["--store-root", uri, "--experiment", "on_s3", "--no-plot"]) == 0
    assert "lira_offline" in capsys.readouterr().out
    # Every artifact went to the bucket, none to the working folder.
    bucket = s3_server.filesystem()
    from pyarrow import fs

    objects = [info.path for info in bucket.get_file_info(
        fs.FileSelector(f"{s3_server.bucket}/runs", recursive=True)) if info.type == fs.FileType.File]
    assert any("/models/" in path and path.endswith("meta.json") for path in objects)
    assert sum("/sweeps/on_s3/cells/" in path and path.endswith(".parquet")
               for path in objects) == len(frame)
    # The readable dataset is in the bucket too, and pyarrow reads it there in one call.
    import pyarrow.dataset as ds

    dataset = ds.dataset(f"{s3_server.bucket}/runs/results/cells", filesystem=bucket,
                         partitioning="hive").to_table()
    assert sorted(dataset["cell_key"].to_pylist()) == sorted(frame.cell_key)
    assert set(dataset["sweep"].to_pylist()) == {"on_s3"}
    assert any(path.endswith("frontier.png") for path in objects)
    assert not (tmp_path / "runs").exists()

    secrets = [s3_server.env["AWS_SECRET_ACCESS_KEY"], s3_server.env["AWS_ACCESS_KEY_ID"]]
    stored = b"".join(bucket.open_input_stream(path).readall() for path in objects)
    with sqlite3.connect(db) as connection:
        params = pd.read_sql("select key, value from params", connection)
        tags = pd.read_sql("select key, value from tags", connection)
    assert "store.root" in set(params.key)
    for secret in secrets:
        assert secret not in out and secret not in err
        assert secret.encode() not in stored
        assert secret.encode() not in db.read_bytes()
        assert not params.value.str.contains(secret, regex=False).any()
        assert not tags.value.str.contains(secret, regex=False).any()


def test_without_credentials_the_store_refuses(s3_server, tmp_path, monkeypatch):
    import pytest

    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(key, "wrong")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    store = ArtifactStore(s3_server.uri("runs"))
    with pytest.raises(OSError):
        store.write_manifest("x", {"cells": []})


def test_a_store_in_a_bucket_that_does_not_exist_is_one_line(s3_server, monkeypatch, capsys):
    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    uri = s3_server.uri("x").replace(f"s3://{s3_server.bucket}/", "s3://nobucket/")
    assert frontier_main(["--store-root", uri, "--experiment", "x", "--no-plot"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    assert "bucket 'nobucket' does not exist" in err and "Traceback" not in err
    assert s3_server.env["AWS_SECRET_ACCESS_KEY"] not in err
