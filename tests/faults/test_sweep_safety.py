"""Nothing lost, nothing leaked, nothing hangs (issue 24): a sweep's name is one computation held by
one process, interrupts end in one line, secrets that arrive by interpolation stay out, a full
disk and an unsafe checkpoint are said and recovered from.  Real Ray, MLflow (SQLite), Parquet,
torch and real signals; the faults are injected (a second process holding the lock, a real
SIGINT, a secret in the environment, a tmpfs filled to the last byte, a pickle that runs code)."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow.entities import ViewType

from sweeper.__main__ import run
from sweeper.claim import SweepRefused, held
from sweeper.checks.validation import validate
from sweeper.checks.validation import find_problems
from sweeper.credentials import redact_tree, scrub
from sweeper.interrupts import RESUME_LINE
from sweeper.cluster.dashboard import auth_hint
from sweeper.runner import run_sweep
from sweeper.store.artifacts import MARKER, ArtifactStore, CorruptArtifact
from sweeper.tracking.recorder import CELL_KEY_TAG, PARENT_TAG
from testkit.in_process import run_command

SECRET = "sk-4f9c2e71d3b8a6"  # the value of a secret-looking environment variable in these tests


def tiny(cfg):
    """The suite's tiny sweep cut to one ε and p: 4 models, 6 cells (two policies)."""
    cfg.name = "safety"
    cfg.grid.epsilon = [float("inf")]
    cfg.grid.p = [0.5]
    cfg.grid.attack = ["loss", "always_member"]
    cfg.grid.policy = ["quantile_max", "calibrated"]
    return cfg


@pytest.fixture(scope="module")
def landed(ray_local, make_tiny_config, tmp_path_factory):
    cfg = tiny(make_tiny_config(tmp_path_factory.mktemp("safety")))
    return cfg, run_sweep(cfg, progress=False)


def test_always_member_accepts_everyone_under_every_policy(landed):
    # Issue 24.21: under `calibrated` the constant score met no FPR limit and nobody was accepted.
    _, result = landed
    baseline = result.results[result.results.attack == "always_member"]
    assert set(baseline.policy) == {"quantile_max", "calibrated"}
    assert (baseline.tp + baseline.fp == baseline.eval_records).all()
    assert (baseline.precision == baseline.members / baseline.eval_records).all()


def test_other_grid_under_a_taken_name_is_refused_unless_replaced(landed, capsys, tmp_path):
    # Issue 24.1: a second ad-hoc grid under the same name replaced the first one's cells.
    cfg, first = landed
    manifest = (Path(first.sweep_dir) / "sweep.json").read_text()
    other = dataclasses.replace(cfg, grid=dataclasses.replace(cfg.grid, p=[0.9]))
    with pytest.raises(SweepRefused) as refused:
        run_sweep(other, progress=False)
    message = str(refused.value)
    assert "grid.p: [0.5] → [0.9]" in message and "4 of its 4 cells are not in this run" in message
    assert "name=NEW_NAME" in message and "--replace" in message
    assert run(other) == 2 and "already holds the results of another grid" in capsys.readouterr().err
    assert (Path(first.sweep_dir) / "sweep.json").read_text() == manifest  # nothing replaced

    copy = tmp_path / "copy"  # replacing on purpose, on a copy of the store
    shutil.copytree(cfg.store.root, copy)
    fewer = dataclasses.replace(other, grid=dataclasses.replace(cfg.grid, attack=["loss"]),
                                store=dataclasses.replace(cfg.store, root=str(copy), replace=True))
    replaced = run_sweep(fewer, progress=False)
    assert replaced.cells_computed == 0 and set(replaced.results.attack) == {"loss"}
    assert len(ArtifactStore(copy).read_manifest(cfg.name)["cells"]) == len(replaced.results)


def test_interrupted_cell_run_is_reused_and_stale_parts_swept(landed):
    # Issue 24.3: an interrupted logging left a RUNNING cell run; the rerun logged a second one.
    # Issue 24.5: partial files a killed writer left outlived every later run.
    cfg, first = landed
    client = MlflowClient(tracking_uri=first.tracking_uri)
    experiment = client.get_experiment_by_name(cfg.tracking.experiment).experiment_id
    key = first.results.cell_key.iloc[0]
    [cell_run] = client.search_runs([experiment], f"tags.`{CELL_KEY_TAG}` = '{key}'")
    client.update_run(cell_run.info.run_id, status="RUNNING")  # as a killed logging leaves it
    (Path(first.sweep_dir) / "tracked.json").unlink()  # MLflow's state is unknown to the rerun
    stale = Path(cfg.store.root) / "models" / ".model.pt.abc123.part"
    stale.write_bytes(b"half")
    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    young = Path(cfg.store.root) / "scores" / ".x.parquet.def456.part"
    young.write_bytes(b"being written")

    rerun = run_sweep(cfg, progress=False)

    assert rerun.cells_computed == 0
    runs = client.search_runs([experiment], f"tags.`{CELL_KEY_TAG}` = '{key}'",
                              run_view_type=ViewType.ALL)
    assert [(r.info.run_id, r.info.status) for r in runs] == [(cell_run.info.run_id, "FINISHED")]
    children = client.search_runs([experiment], f"tags.`{PARENT_TAG}` != ''",
                                  run_view_type=ViewType.ALL, max_results=100)
    assert len(children) == len(first.results)
    assert not stale.exists() and young.exists()
    young.unlink()


def test_weights_that_fail_weights_only_are_quarantined(landed, tmp_path):
    # Issue 24.6: a model.pt or checkpoint torch refuses to load safely failed its cell on every
    # rerun, and torch's message suggested weights_only=False.
    import torch

    from jobs.engine.training import ModelRun, _resume

    cfg, _ = landed
    source = Path(cfg.store.root) / "models"
    key = sorted(p.name for p in source.iterdir() if not p.name.startswith("."))[0]
    store = ArtifactStore(tmp_path / "store")
    shutil.copytree(source / key, tmp_path / "store" / "models" / key)
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    buffer = io.BytesIO()
    torch.save({"weight": Payload()}, buffer)
    evil = buffer.getvalue()
    meta_path = tmp_path / "store" / "models" / key / "meta.json"
    meta = json.loads(meta_path.read_text())
    (tmp_path / "store" / "models" / key / "model.pt").write_bytes(evil)
    meta["checksums"]["model.pt"] = hashlib.sha256(evil).hexdigest()
    meta_path.write_text(json.dumps(meta))  # its checksum holds: only loading can tell
    assert store.has_model(key)

    with pytest.raises(CorruptArtifact) as corrupt:
        store.read_state_dict(key)
    assert "quarantine" in str(corrupt.value) and "weights_only=False" not in str(corrupt.value)
    assert not store.has_model(key)  # absent: the rerun trains it again
    assert list((tmp_path / "store" / "quarantine").rglob("model.pt"))

    checkpoint = store.checkpoint(key)
    checkpoint.save(evil)
    assert checkpoint.load() == evil  # checksummed as written
    run = ModelRun(settings=None, model=None, optimizer=None, rng=None, checkpoint=checkpoint,
                   train_size=0)
    _resume(run)  # would run the payload if it loaded it unsafely; fails loudly if it restored
    assert (run.start_epoch, run.steps, run.best, run.resumed_from) == (0, 0, -float("inf"), [])
    assert checkpoint.load() is None  # set aside: training starts over
    assert len(list((tmp_path / "store" / "quarantine").rglob("*.pt"))) == 2
    assert not marker.exists()


def hold_lock(procs, cfg, seconds: float):
    """Another process holding the sweep's lock for `seconds`, once it holds it."""
    code = textwrap.dedent(f"""
        import time
        from sweeper.claim import held
        from sweeper.store.artifacts import ArtifactStore
        with held(ArtifactStore({cfg.store.root!r}), {cfg.name!r}):
            print("held", flush=True)
            time.sleep({seconds})
    """)
    holder = procs.spawn([sys.executable, "-c", code], name="holder")
    procs.wait_for(lambda: "held" in procs.output(holder)[0], timeout=60)
    return holder


@pytest.mark.serial  # the wait for a lock held 2 s is bounded in seconds
def test_lock_refuses_a_second_process_takes_over_a_dead_ones_and_waits(landed, tmp_path,
                                                                         procs, caplog):
    # Issue 24.2: two sweeps of one name on one store both trained everything.
    cfg, _ = landed
    store = ArtifactStore(cfg.store.root)
    holder = hold_lock(procs, cfg, 600)

    with pytest.raises(SweepRefused) as refused:
        with held(store, cfg.name):
            pass
    assert f"pid {holder.pid}" in str(refused.value) and "--wait" in str(refused.value)

    procs.sigkill([holder])
    holder.wait(timeout=30)
    with caplog.at_level("WARNING", logger="sweeper.claim"), held(store, cfg.name):
        pass
    assert "took over the lock left by host" in caplog.text and f"pid {holder.pid}" in caplog.text

    brief = hold_lock(procs, cfg, 2)
    started = time.monotonic()
    with held(store, cfg.name, wait=True):
        waited = time.monotonic() - started
    assert brief.wait(timeout=30) == 0 and 0.5 < waited < 30
    assert not (Path(cfg.store.root) / "sweeps" / cfg.name / ".lock").exists()


@pytest.mark.parametrize("planted", ["symlink", "folder", "fifo"])
def test_a_lock_that_is_not_a_regular_file_is_refused_and_nothing_written_through(tmp_path,
                                                                                  planted):
    # Issue 30.3: `.lock` → any file was "taken over" and the file replaced with the holder line.
    store = ArtifactStore(tmp_path / "store")
    lock = tmp_path / "store" / "sweeps" / "victim" / ".lock"
    lock.parent.mkdir(parents=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    if planted == "symlink":
        lock.symlink_to(victim)
    elif planted == "folder":
        lock.mkdir()
    else:
        os.mkfifo(lock)
    with pytest.raises(SweepRefused) as refused:
        with held(store, "victim"):
            pass
    message = str(refused.value)
    assert str(lock) in message and "not the lock this program makes" in message
    assert {"symlink": "a symbolic link", "folder": "a folder", "fifo": "not a regular file"}[
        planted] in message
    assert victim.read_text() == "precious\n"
    assert lock.is_symlink() if planted == "symlink" else lock.exists()  # left for a person


def test_a_copied_store_keeps_its_mlflow_artifacts_to_itself(tmp_path):
    # Issue 30.4: mlflow.db names its artifact folder by absolute path, so every run of a copied
    # store wrote its figures into the original.
    from sweeper.tracking.recorder import (SweepTracker, default_tracking_uri,
                                           mlflow_artifact_location)

    figure = tmp_path / "figure.txt"
    figure.write_text("a figure\n")
    original = tmp_path / "original"
    store = ArtifactStore(original)
    uri = default_tracking_uri(store.local_root)
    first = SweepTracker(uri, "sweeper", "copied", "key", {}, mlflow_artifact_location(store, uri))
    first.client.log_artifact(first.run_id, str(figure))
    first.terminate(failed=False)
    copy = tmp_path / "copy"
    shutil.copytree(original, copy)
    before = sorted(p.relative_to(original) for p in original.rglob("*") if "mlartifacts" in p.parts)

    # A sweep on the copy is another process (MLflow keeps each run's artifact folder for the
    # process's life).
    code = textwrap.dedent(f"""
        from sweeper.store.artifacts import ArtifactStore
        from sweeper.tracking.recorder import (SweepTracker, default_tracking_uri,
                                               mlflow_artifact_location)
        store = ArtifactStore({str(copy)!r})
        uri = default_tracking_uri(store.local_root)
        second = SweepTracker(uri, "sweeper", "copied", "key", {{}}, mlflow_artifact_location(store, uri))
        second.client.log_artifact(second.run_id, {str(figure)!r}, "again")
        second.terminate(failed=False)
        print(second.run_id, second.client.get_run(second.run_id).info.artifact_uri)
        print(sorted(item.path for item in second.client.list_artifacts(second.run_id)))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0, done.stderr[-3000:]
    run_line, listed = done.stdout.strip().splitlines()[-2:]
    run_id, artifact_uri = run_line.split()
    assert run_id == first.run_id  # the same sweep's run, in the copy
    assert artifact_uri.startswith((copy / "mlartifacts").as_uri())
    assert listed == "['again', 'figure.txt']"
    after = sorted(p.relative_to(original) for p in original.rglob("*") if "mlartifacts" in p.parts)
    assert after == before  # nothing written into the original


def together(*commands, cwd) -> list[subprocess.CompletedProcess]:
    """`python -m sweeper ARGS` for each (args, env), run side by side; their results in order."""
    started = [(args, subprocess.Popen([sys.executable, "-m", "sweeper", *args], cwd=cwd,
                                       env={**os.environ, **env}, text=True,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE))
               for args, env in commands]
    done = []
    for args, proc in started:
        out, err = proc.communicate(timeout=240)
        done.append(subprocess.CompletedProcess(args, proc.returncode, out, err))
    return done


def test_command_line_refusals(landed, make_tiny_overrides, tmp_path, procs):
    """Each refused before Ray starts, exit 2, in its own words: the lock held by another process
    (through --multirun, whose job line must not show a runtime_env value), a
    secret interpolated into the name and the experiment, Ray's token auth turned off, Hydra's
    clear-text .hydra folder.  The lock (Hydra's launcher) and the token (checked only where this
    process would start its own Ray, which the suite's process never does) are refused to real
    processes; the preflight's two refusals in this process (`testkit.in_process`)."""
    cfg, _ = landed
    holder = hold_lock(procs, cfg, 600)
    store = tmp_path / "runs"

    locked, no_auth = together(
        (["-m", *make_tiny_overrides(cfg.store.root, name=cfg.name),
          f"+cluster.runtime_env.env_vars.GREETING={SECRET}x"], {}),
        (make_tiny_overrides(store, name="noauth"), {"RAY_AUTH_MODE": "disabled"}), cwd=tmp_path)
    from_env = "${oc.env:SWEEPER_TEST_SECRET_TOKEN}"
    secret, _ = run_command(
        "sweeper", *make_tiny_overrides(store, name=from_env, **{"tracking.experiment": from_env}),
        cwd=tmp_path, env={"SWEEPER_TEST_SECRET_TOKEN": SECRET})
    subdir, _ = run_command(
        "sweeper", *make_tiny_overrides(store, name="subdir"), "hydra.output_subdir=.hydra",
        f"+cluster.runtime_env.env_vars.GREETING={SECRET}x", cwd=tmp_path)
    assert locked.returncode == 2 and f"pid {holder.pid}" in locked.stderr, locked.stderr[-2000:]
    assert "job 1 of 1: " in locked.stdout + locked.stderr
    assert SECRET not in locked.stdout + locked.stderr
    assert secret.returncode == 2, secret.stderr[-2000:]
    assert "name: holds the value of the secret environment variable SWEEPER_TEST_SECRET_TOKEN" \
        in secret.stderr and "tracking.experiment: holds the value" in secret.stderr
    assert SECRET not in secret.stdout + secret.stderr
    assert not any(SECRET in str(path) for path in tmp_path.rglob("*"))
    assert no_auth.returncode == 2 and "RAY_AUTH_MODE=disabled" in no_auth.stderr
    assert "cluster.allow_no_auth=true" in no_auth.stderr, no_auth.stderr[-2000:]
    assert subdir.returncode == 2 and "hydra.output_subdir" in subdir.stderr
    assert SECRET not in subdir.stdout + subdir.stderr
    assert not (tmp_path / ".hydra").exists() and not store.exists()
    assert "Traceback" not in locked.stderr + secret.stderr + no_auth.stderr + subdir.stderr


def test_secrets_are_masked_by_value_wherever_they_appear(monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", SECRET)
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # a setting, not a secret: never masked
    assert scrub(f"experiment {SECRET} failed (disabled)") == "experiment *** failed (disabled)"
    assert redact_tree({"tracking": {"experiment": SECRET, "uri": f"http://h/{SECRET}"}}) == \
        {"tracking": {"experiment": "***", "uri": "http://h/***"}}
    assert "token:" not in auth_hint() and "no token authentication" in auth_hint()


def test_file_uri_with_a_host_is_refused(make_tiny_config, tmp_path):
    # Issue 24.4: file://relative/x wrote the whole store to /x.
    cfg = make_tiny_config(tmp_path)
    for root in ("file://relative/x", "file:///tmp/a%20b", "file:///tmp/x?y=1"):
        cfg.store.root = root
        problems = find_problems(cfg)
        assert any(p.startswith(f"store.root='{root}'") and "file:///ABSOLUTE/PATH" in p
                   for p in problems), problems
    cfg.store.root = (tmp_path / "ok").as_uri()
    validate(cfg)


UNSHARE = shutil.which("unshare")


def process_names(popen) -> list[str]:
    import psutil

    names = []
    for proc in psutil.Process(popen.pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            names.append(proc.name())
    return names


@pytest.mark.skipif(UNSHARE is None or sys.platform != "linux", reason="needs unshare (Linux)")
def test_disk_full_is_said_in_one_line_and_leaves_no_partial_file(make_tiny_overrides, tmp_path):
    # Issue 24.5: ENOSPC gave a traceback and left .part files behind.  A 64 KiB tmpfs, filled,
    # mounted in a private mount namespace (unprivileged: a user namespace).
    disk = tmp_path / "disk"
    disk.mkdir()
    probe = tmp_path / "probe.py"
    probe.write_text(textwrap.dedent(f"""
        import glob
        import numpy
        from sweeper.store.artifacts import ArtifactStore
        try:
            ArtifactStore({str(disk / 'probe')!r}).write_query("q", numpy.zeros(100_000))
        except OSError as error:
            print("raised:", error)
        print("parts:", glob.glob({str(disk)!r} + "/**/.*.part", recursive=True))
    """))
    sweep = [sys.executable, "-m", "sweeper", *make_tiny_overrides(disk / "runs", name="full")]
    script = (f"mount -t tmpfs -o size=64k tmpfs {disk} || exit 77; "
              f"head -c 40000 /dev/zero > {disk}/filler; "
              f"{shlex.join([sys.executable, str(probe)])}; "
              f"head -c 1000000 /dev/zero > {disk}/filler2 2>/dev/null; "
              f"{shlex.join(sweep)}; echo rc=$?")
    done = in_mount_namespace(script, tmp_path)
    out = done.stdout + done.stderr
    assert f"raised: disk full at {disk}/probe/queries/q.npy" in out, out[-3000:]
    assert "parts: []" in out
    assert f"error: disk full at {disk}/runs/sweeps/full/.lock" in out, out[-3000:]
    assert "rc=1" in out and "Traceback" not in out


def in_mount_namespace(script: str, cwd) -> subprocess.CompletedProcess:
    """`script` under sh in a private user and mount namespace (its tmpfs mounts are its own);
    the test is skipped where such a tmpfs cannot be mounted (the script exits 77)."""
    done = subprocess.run([UNSHARE, "-rm", "sh", "-c", script], capture_output=True, text=True,
                          timeout=240, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    if done.returncode == 77:
        pytest.skip("no tmpfs in a user namespace here")
    return done


@pytest.mark.skipif(UNSHARE is None or sys.platform != "linux", reason="needs unshare (Linux)")
def test_a_model_the_disk_cannot_hold_stops_the_sweep_naming_its_path(make_tiny_overrides,
                                                                      tmp_path):
    # Issue 44.5: "models trained: 1/1 (100 %)" for a model that was never stored, Ray retried
    # its training 3 times, and the last line named no file.  models/ is a 16 KiB tmpfs in a
    # private mount namespace: the rest of the store has room, a model's weights do not fit.
    root = tmp_path / "runs"
    (root / "models").mkdir(parents=True)
    (root / MARKER).write_text("a store\n")  # a store already: models/ alone is not one
    sweep = [sys.executable, "-m", "sweeper", *make_tiny_overrides(root, name="full", **{
        "grid.epsilon": "[4]", "grid.p": "[0.5]", "grid.attack": "[loss]"})]
    script = (f"mount -t tmpfs -o size=16k tmpfs {root / 'models'} || exit 77; "
              f"{shlex.join(sweep)}; echo rc=$? >&2")
    done = in_mount_namespace(script, tmp_path)
    err = done.stderr.rstrip().splitlines()
    assert err[-1] == "rc=1", done.stderr[-3000:]
    assert re.fullmatch(rf"error: disk full at {re.escape(str(root))}/models/[0-9a-f]+/model\.pt: "
                        r"what finished is kept in the store; free space and rerun the same "
                        r"command to resume", err[-2]), done.stderr[-3000:]
    said = done.stdout + done.stderr
    assert "retries remaining" not in said and "will be retried" not in said, said[-3000:]
    assert "models trained: 1/1" not in said and "trained 1 of 1" not in said, said[-3000:]
    assert "Traceback" not in said


@pytest.mark.skipif(UNSHARE is None or sys.platform != "linux", reason="needs unshare (Linux)")
def test_full_disks_under_results_and_mlflows_database_are_said_as_full_disks(make_tiny_overrides,
                                                                             tmp_path):
    # Issue 54: a full disk under results/ was a warning and exit 0; one under MLflow's SQLite
    # database was called an outage ("once it is back, run `sweeper sync`"), by the sweep and by
    # sync.  results/ and the database's folder are 4 KiB tmpfs in a private mount namespace.
    root, disk = tmp_path / "runs", tmp_path / "disk"
    (root / "results").mkdir(parents=True)
    (root / MARKER).write_text("a store\n")
    disk.mkdir()
    database = disk / "mlflow.db"
    sweep = [sys.executable, "-m", "sweeper", *make_tiny_overrides(root, name="full", **{
        "grid.epsilon": "[4]", "grid.p": "[0.5]", "grid.attack": "[loss]",
        "tracking.uri": f"sqlite:///{database}"})]
    sync = [sys.executable, "-m", "sweeper.cli.sync_command", "--store-root", str(root),
            "--experiment", "full", "--tracking-uri", f"sqlite:///{database}"]
    script = (f"mount -t tmpfs -o size=4k tmpfs {root / 'results'} || exit 77; "
              f"mount -t tmpfs -o size=4k tmpfs {disk} || exit 77; "
              f"{shlex.join(sweep)}; echo sweep rc=$? >&2; "
              f"{shlex.join(sync)}; echo sync rc=$? >&2")
    done = in_mount_namespace(script, tmp_path)
    err = done.stderr.rstrip().splitlines()
    said = done.stdout + done.stderr
    assert err[-1] == "sync rc=1", done.stderr[-3000:]
    sweep_end = err.index("sweep rc=1")
    assert re.fullmatch(rf"error: disk full at {re.escape(str(root))}/results/(cells|scores)/"
                        r"sweep=full/part-0\.parquet: what finished is kept in the store; free "
                        r"space and rerun the same command to resume", err[sweep_end - 1]), said
    full_db = rf"disk full at {re.escape(str(database))} \(MLflow's SQLite database: "
    assert re.search(rf"MLflow tracking is off for this sweep: {full_db}", said), said[-3000:]
    assert re.search(rf"{full_db}.*\): what was logged is kept; free space there, then run this "
                     r"again to log the rest\.", err[-2]), said[-3000:]
    assert "once it is back" not in said and "unavailable" not in said, said[-3000:]
    assert "Traceback" not in said


def test_a_link_a_task_meets_stops_the_sweep_in_one_line_never_retried(make_tiny_overrides,
                                                                      tmp_path):
    # Issue 54: `LinkInStore` is an OSError, so Ray retried the training that met it three times,
    # printing raw tracebacks, before the sweep exited 1.  A link at each model's folder, deeper
    # than the preflight looks (something put it there while the sweep ran).
    from sweeper.checks.preflight import preflight
    from sweeper.grid.plan import build_plan
    from sweeper.grid.scale import scaled

    root, outside = tmp_path / "runs", tmp_path / "outside"
    overrides = make_tiny_overrides(root, name="linked", **{
        "grid.epsilon": "[4]", "grid.p": "[0.5]", "grid.attack": "[loss]"})
    keys = list(build_plan(scaled(preflight(overrides))).models)
    (root / "models").mkdir(parents=True)
    (root / MARKER).write_text("a store\n")
    outside.mkdir()
    for key in keys:
        (root / "models" / key).symlink_to(outside, target_is_directory=True)
    done = subprocess.run([sys.executable, "-m", "sweeper", *overrides], capture_output=True,
                          text=True, timeout=600, cwd=tmp_path)
    err = done.stderr.rstrip().splitlines()
    assert done.returncode == 1, done.stderr[-3000:]
    assert re.fullmatch(rf"error: {re.escape(str(root))}/models/[0-9a-f]+ is a symbolic link "
                        r"inside the store, which writes only into its own folders, never through "
                        r"a link: something else put it there\. Remove it once you know what it is "
                        r"\(move what it points at into the store, if that is what was meant\)\. "
                        r"The sweep stopped: what finished is kept in the store; rerun the same "
                        r"command to resume", err[-1]), done.stderr[-3000:]
    said = done.stdout + done.stderr
    assert "retries remaining" not in said and "will be retried" not in said, said[-3000:]
    assert "Traceback" not in said and "LinkInStore" not in said, said[-3000:]
    assert os.listdir(outside) == []  # nothing written through the links
    assert all((root / "models" / key).is_symlink() for key in keys)  # left for a person


@pytest.mark.serial  # each signal is timed against the sweep's progress
def test_sigint_and_sigterm_end_in_one_line_with_the_shells_codes(make_tiny_overrides, tmp_path,
                                                                   procs):
    # Issue 24.17: SIGINT ended in a KeyboardInterrupt traceback, SIGTERM in SIGABRT (134).
    # SIGTERM once a cell has landed (Ray up, MLflow's runs open), SIGINT to the rerun while its
    # Ray starts; the grid leaves the rerun work to do.
    root = tmp_path / "runs"
    args = make_tiny_overrides(root, name="stopped", **{
        "grid.epsilon": "[.inf]", "grid.p": "[0.3,0.5,0.7]", "grid.attack": "[loss]",
        "grid.trial": "[0,1]", "train.epochs": 3})
    cells = root / "sweeps" / "stopped" / "cells"
    codes = {}

    def mlflow_runs() -> list:
        client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
        return client.search_runs([e.experiment_id for e in client.search_experiments()],
                                  run_view_type=ViewType.ALL)

    for signum, running in ((signal.SIGTERM, lambda: any(cells.glob("*.parquet"))),
                            (signal.SIGINT, lambda: "raylet" in process_names(sweep))):
        sweep = procs.run_sweep_cli(args, cwd=tmp_path)
        procs.wait_for(running, timeout=240, interval=0.1, message="the sweep running")
        started = time.monotonic()
        os.kill(sweep.pid, signum)
        codes[signum.name] = sweep.wait(timeout=120), round(time.monotonic() - started, 1)
        _, err = procs.output(sweep)
        assert err.rstrip().splitlines()[-1] == RESUME_LINE, f"{codes}\n{err[-6000:]}"
        assert "Traceback" not in err, f"{codes}\n{err[-6000:]}"
        # every run the sweep opened ended, whichever signal stopped it and wherever it landed
        runs = [(r.info.run_name, r.info.status, PARENT_TAG in r.data.tags) for r in mlflow_runs()]
        assert runs and {status for _, status, _ in runs} <= {"FINISHED", "KILLED"}, (
            f"after {signum.name} {codes}: {runs}\n{err[-3000:]}")
    assert codes["SIGTERM"][0] == 143 and codes["SIGINT"][0] == 130, codes
    assert len(list(cells.glob("*.parquet"))) < 6  # the rerun was stopped with work left
    assert "KILLED" in {r.info.status for r in mlflow_runs() if PARENT_TAG not in r.data.tags}
    print("signal → (exit code, seconds to exit):", codes)


def test_replace_and_wait_flags_are_their_overrides():
    from sweeper.checks.preflight import command_line

    line = command_line(["--replace", "grid.p=[0.5]", "--wait"])
    assert "store.replace=true" in line and "store.wait=true" in line
    assert "--replace" not in line and "--wait" not in line
