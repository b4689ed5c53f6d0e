"""A store writes only where it must (issue 44, items 1-3): never into a folder that is not a store
(`/`, `/etc`), never through a symbolic link below its root, and never into a tracking store
that is not MLflow's.  Each refusal comes before any work, names what it refused, and leaves
the place it refused as it was (its listing and its mtime: not even a probe or a journal)."""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import pytest

from sweeper.claim import SweepRefused, held
from sweeper.config import ConfigError
from sweeper.store.files import LinkInStore, quarantine
from sweeper.tracking.locations import tracking_location_problem
from sweeper.checks.preflight import preflight
from sweeper.store.artifacts import MARKER, ArtifactStore

REPO = Path(__file__).resolve().parents[3]


def state(folder: Path) -> tuple:
    """What "nothing written into a folder" can be told by: its listing and its own mtime, which
    any entry made and removed again (a probe, a journal) moves.  (Its entries' own times are
    left out: in `/` and `/etc` other processes change them.)"""
    return sorted(os.listdir(folder)), folder.stat().st_mtime_ns


def refusal(overrides: list[str]) -> str:
    with pytest.raises(ConfigError) as refused:
        preflight(overrides)
    return str(refused.value)


# --- item 1: a store.root that is some other folder --------------------------------------------

def foreign_folder(tmp_path: Path) -> Path:
    """A folder a user keeps other things in: files, a subfolder, a hidden file."""
    folder = tmp_path / "home"
    (folder / "projects").mkdir(parents=True)
    (folder / "notes.txt").write_text("mine\n")
    (folder / ".bashrc").write_text("export X=1\n")
    return folder


def project_folder(tmp_path: Path, which: str) -> Path:
    """An ordinary project folder that has one of a store's names in it (issue 54, item 4)."""
    folder = tmp_path / which
    if which == "results_only":
        (folder / "results").mkdir(parents=True)
        (folder / "results" / "accuracy.csv").write_text("epoch,acc\n1,0.9\n")
    elif which == "models_only":
        (folder / "models" / "resnet").mkdir(parents=True)
        (folder / "models" / "resnet" / "model.pt").write_bytes(b"weights")
    elif which == "mlflow_with_train":
        folder.mkdir()
        sqlite3.connect(folder / "mlflow.db").close()
        (folder / "train.py").write_text("print('training')\n")
    else:  # sweeps_with_main
        (folder / "sweeps" / "lr").mkdir(parents=True)
        (folder / "sweeps" / "lr" / "sweep.json").write_text('{"cells": []}')
        (folder / "main.py").write_text("print('main')\n")
    return folder


@pytest.mark.parametrize("which", ["root", "etc", "home", "results_only", "models_only",
                                   "mlflow_with_train", "sweeps_with_main"])
def test_a_folder_that_holds_no_store_is_refused_untouched(tmp_path, which):
    folder = ({"root": Path("/"), "etc": Path("/etc")}.get(which)
              or (foreign_folder(tmp_path) if which == "home" else project_folder(tmp_path, which)))
    before = state(folder)
    message = refusal([f"store.root={folder}"])
    assert f"store.root='{folder}': {folder} already holds files" in message
    assert "but no sweeper store" in message and "store.adopt=true" in message
    assert state(folder) == before  # not a folder made, not even the write probe


def test_a_refused_adopt_writes_nothing_either(tmp_path):
    """`store.adopt=yes` is no boolean: refused, and the folder is not adopted, not even probed."""
    folder = foreign_folder(tmp_path)
    before = state(folder)
    message = refusal([f"store.root={folder}", "store.adopt=yes"])
    assert "store.adopt=yes: store.adopt takes true or false" in message
    assert "but no sweeper store" in message  # composed at its default, false
    assert state(folder) == before


def test_new_empty_and_earlier_stores_are_accepted_and_adopt_makes_a_store(tmp_path,
                                                                           make_tiny_config):
    from sweeper.runner import prepare

    empty = tmp_path / "empty"
    empty.mkdir()
    (tmp_path / "disk" / "lost+found").mkdir(parents=True)  # a new disk's root is empty too
    earlier = tmp_path / "earlier"  # a store made before the marker: recognised by its files
    (earlier / "sweeps" / "old").mkdir(parents=True)
    (earlier / "sweeps" / "old" / "sweep.json").write_text('{"cells": []}')
    (earlier / "models").mkdir()
    killed = tmp_path / "killed"  # an earlier version's sweep killed before it landed a cell
    (killed / "models" / "k").mkdir(parents=True)
    (killed / "calibration").mkdir()
    (killed / "calibration" / f"{'ab' * 32}.json").write_bytes(b"x\n{}")
    marked = tmp_path / "marked"  # this version's store, with a file of its user beside it
    marked.mkdir()
    (marked / MARKER).write_text("a store\n")
    (marked / "notes.txt").write_text("kept beside it\n")
    for root in (tmp_path / "runs", empty, tmp_path / "disk", earlier, killed, marked):
        preflight([f"store.root={root}"])

    home = foreign_folder(tmp_path)
    preflight([f"store.root={home}", "store.adopt=true"])  # on purpose
    cfg = make_tiny_config(tmp_path)
    cfg.store.root, cfg.store.adopt = str(home), True
    with contextlib.ExitStack() as claimed:
        sweep = prepare(cfg, claimed=claimed)
        assert (home / MARKER).is_file()  # marked as the sweep claims its name
    assert not (home / MARKER).exists()  # a sweep that stored nothing leaves no marker
    with contextlib.ExitStack() as claimed:
        sweep = prepare(cfg, claimed=claimed)
        sweep.store.noise_cache().put("k", 1.5)  # the first thing a sweep stores
    assert (home / MARKER).is_file() and (home / "notes.txt").read_text() == "mine\n"
    assert sorted(os.listdir(home)) == sorted([MARKER, ".bashrc", "calibration", "notes.txt",
                                               "projects"])
    preflight([f"store.root={home}"])  # the marker says it is a store: adopt is needed once


# --- item 2: a symbolic link where the store writes ---------------------------------------------

def scores_frame() -> pd.DataFrame:
    return pd.DataFrame({"record_id": np.arange(3, dtype=np.int64), "score": [0.1, 0.2, 0.3],
                         "member": [True, False, True], "model_key": "k", "attack": "loss"})


def write_model(store: ArtifactStore) -> None:
    import torch

    store.write_model("k", {"w": torch.zeros(2)}, np.zeros((3, 2), np.float32),
                      np.array([True, False, True]), {"role": "target"})


def write_cell(store: ArtifactStore) -> None:
    from test_results_dataset import cell_row  # a row of the declared schema

    store.write_cell("s", "c", cell_row("s", 0))


def write_results(store: ArtifactStore) -> None:
    store.write_public("results/cells/sweep=s/part-0.parquet", b"rows")


def quarantined(store: ArtifactStore) -> None:
    (store.local_root / "models" / "q").mkdir(parents=True)
    (store.local_root / "models" / "q" / "model.pt").write_bytes(b"weights")
    quarantine(store.files, ["models/q/model.pt"])


def held_lock(store: ArtifactStore) -> None:
    with held(store, "s"):
        pass


#: (where the link is planted, what writes there): every kind of file the store writes, the
#: link at the top folder, the folder below it, and the file itself.
WRITES = [
    ("models", write_model), ("models/k", write_model), ("models/k/model.pt", write_model),
    ("checkpoints", lambda store: store.checkpoint("k").save(b"state")),
    ("checkpoints/k.pt", lambda store: store.checkpoint("k").save(b"state")),
    ("queries", lambda store: store.write_query("k", np.zeros(3))),
    ("queries/k.npy.sha256", lambda store: store.write_query("k", np.zeros(3))),
    ("scores", lambda store: store.write_scores("k", scores_frame())),
    ("scores/k.parquet", lambda store: store.write_scores("k", scores_frame())),
    ("calibration", lambda store: store.noise_cache().put("k", 1.5)),
    ("quarantine", quarantined),
    ("results", write_results), ("results/cells/sweep=s", write_results),
    ("sweeps", lambda store: store.write_manifest("s", {"cells": []})),
    ("sweeps/s", lambda store: store.write_manifest("s", {"cells": []})),
    ("sweeps/s/sweep.json", lambda store: store.write_manifest("s", {"cells": []})),
    ("sweeps/s/cells", write_cell),
    ("sweeps/s/failures", lambda store: store.write_failure("s", "c", {"why": "x"})),
    ("sweeps/s/results.json", lambda store: store.write_results_manifest("s", {})),
    ("sweeps/s/tracked.json", lambda store: store.write_tracking_stamp("s", {})),
    ("sweeps/s", lambda store: store.figures_dir("s")),
    ("sweeps/s", held_lock),
    ("sweeps", held_lock),
]


@pytest.mark.parametrize("planted, write", WRITES,
                         ids=[f"{rel}-{getattr(w, '__name__', 'lambda')}" for rel, w in WRITES])
def test_a_symbolic_link_where_the_store_writes_is_refused_and_nothing_written_through(
        tmp_path, planted, write):
    outside = tmp_path / "outside"
    (outside / "folder").mkdir(parents=True)
    (outside / "file").write_text("precious\n")
    store = ArtifactStore(tmp_path / "store")
    link = tmp_path / "store" / planted
    link.parent.mkdir(parents=True, exist_ok=True)
    last = planted.rsplit("/", 1)[-1]
    link.symlink_to(outside / ("file" if "." in last and "=" not in last else "folder"))
    before = [state(outside), state(outside / "folder"), (outside / "file").read_text()]
    with pytest.raises((LinkInStore, SweepRefused)) as refused:
        write(store)
    assert f"{link} is a symbolic link inside the store" in str(refused.value)
    assert [state(outside), state(outside / "folder"), (outside / "file").read_text()] == before
    assert link.is_symlink()  # left for a person to look at


@pytest.mark.parametrize("planted", ["sweeps/s", "sweeps/s/report", "sweeps/s/frontier.png",
                                     "mlflow.db", "results/scores/sweep=s", "mlartifacts",
                                     "mlflow.db-journal", "mlartifacts/1"])
def test_the_preflight_names_a_link_the_sweep_would_meet_before_anything_starts(tmp_path, planted):
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "store"
    (root / "sweeps").mkdir(parents=True)
    (root / MARKER).write_text("a store\n")
    (root / planted).parent.mkdir(parents=True, exist_ok=True)
    (root / planted).symlink_to(outside)
    before = state(outside)
    message = refusal([f"store.root={root}", "name=s"])
    assert f"{root / planted} is a symbolic link where the sweep writes" in message
    assert state(outside) == before


# --- item 3: a tracking store that is not MLflow's ----------------------------------------------

def mlflow_database(path: Path) -> Path:
    """A real MLflow SQLite database holding one experiment with runs."""
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{path}")
    experiment = client.create_experiment("e")
    for _ in range(20):
        client.create_run(experiment)
    return path


@pytest.fixture(scope="module")
def whole_database(tmp_path_factory) -> bytes:
    return mlflow_database(tmp_path_factory.mktemp("mlflow") / "mlflow.db").read_bytes()


def unwritable(path: Path) -> None:
    """`path` made unwritable for whoever runs the test: root ignores mode bits, so an immutable
    file there (skipped where the file system has no such attribute)."""
    if os.geteuid() != 0:
        path.chmod(0o444)
        return
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("no immutable files here (chattr) to make a file unwritable for root")


def made_writable(path: Path) -> None:
    if os.geteuid() == 0:
        subprocess.run(["chattr", "-i", str(path)], capture_output=True)


@pytest.mark.parametrize("kind, said", [
    ("text", "is not a SQLite database"),
    ("folder", "is a folder, not a database file"),
    ("truncated", "is truncated: it holds"),
    ("other_program", "is a SQLite database, but not MLflow's (it has no "
                      "alembic_version/experiments/runs table; it holds accounts)"),
    ("unwritable", "is not writable"),
])
def test_a_tracking_database_that_is_not_mlflows_is_refused_without_a_journal(
        tmp_path, whole_database, kind, said):
    folder = tmp_path / "db"
    folder.mkdir()
    target = folder / "mlflow.db"
    if kind == "text":
        target.write_text("root:x:0:0:root:/root:/bin/bash\n")
    elif kind == "folder":
        target.mkdir()
    elif kind == "truncated":
        target.write_bytes(whole_database[:len(whole_database) // 2])
    elif kind == "other_program":
        with contextlib.closing(sqlite3.connect(target)) as db, db:
            db.execute("CREATE TABLE accounts (name TEXT)")
    else:
        target.write_bytes(whole_database)
        unwritable(target)
    before = state(folder)
    try:
        message = refusal([f"tracking.uri=sqlite:///{target}", f"store.root={tmp_path / 'runs'}"])
        assert f"tracking.uri='sqlite:///{target}': {target} {said}" in message
        assert state(folder) == before  # no journal, no probe beside it
    finally:
        made_writable(target)
    assert not (tmp_path / "runs").exists()


def test_the_stores_own_database_is_checked_too_and_mlflows_is_accepted(tmp_path, whole_database):
    store = tmp_path / "runs"
    store.mkdir()
    (store / MARKER).write_text("a store\n")
    (store / "mlflow.db").write_bytes(whole_database)
    preflight([f"store.root={store}"])  # MLflow's own, whole
    (store / "mlflow.db").write_bytes(whole_database[:4096])
    message = refusal([f"store.root={store}"])
    assert "tracking.uri=null (the store's own MLflow database): " in message
    assert f"{store / 'mlflow.db'} is truncated" in message


def test_the_command_refuses_a_system_folder_as_store_and_passwd_as_database(tmp_path):
    """Issue 44.1 and 44.3 as reported: with store.root=/etc and tracking.uri=sqlite:////etc/passwd
    the sweep created seven entries in /etc, trained for minutes, then called MLflow
    "unavailable", with SQLite's journal beside passwd.  Here on a copy of such a folder (where
    this fails, the sweep writes into it; `/` and `/etc` themselves go through the preflight
    above, which writes nothing either way)."""
    etc = tmp_path / "etc"
    (etc / "ssh").mkdir(parents=True)
    shutil.copy("/etc/passwd", etc / "passwd")
    (etc / "hostname").write_text("vm\n")
    before = state(etc), (etc / "passwd").read_bytes()
    done = subprocess.run([sys.executable, "-m", "sweeper", f"store.root={etc}",
                           f"tracking.uri=sqlite:///{etc}/passwd"], cwd=tmp_path, text=True,
                          capture_output=True, timeout=180,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "Ray" not in done.stdout
    assert f"store.root='{etc}': {etc} already holds files (hostname, passwd, ssh)" in done.stderr
    assert f"tracking.uri='sqlite:///{etc}/passwd': {etc}/passwd is not a SQLite database" in \
        done.stderr
    assert (state(etc), (etc / "passwd").read_bytes()) == before
    assert sorted(os.listdir(tmp_path)) == ["etc"]


@pytest.fixture
def plain_web_server(tmp_path):
    """A web server that is not MLflow (Python's http.server) on loopback: its address."""
    served = tmp_path / "served"
    served.mkdir()
    (served / "index.html").write_text("<html>a web site</html>\n")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(Quiet, directory=str(served)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def a_landed_sweep(tmp_path: Path, uri: str) -> Path:
    """A store holding the manifest `sweeper sync` reads first."""
    sweep = tmp_path / "runs" / "sweeps" / "q"
    sweep.mkdir(parents=True)
    (sweep / "sweep.json").write_text(
        '{"name": "q", "sweep_key": "k", "cells": ["c"], "config": {"tracking": '
        f'{{"uri": "{uri}", "experiment": "sweeper"}}}}}}')
    return tmp_path / "runs"


def test_sync_says_a_server_that_is_not_mlflow_is_not_one(tmp_path, plain_web_server, capsys):
    from sweeper.cli.sync_command import main as sync_main

    store = a_landed_sweep(tmp_path, plain_web_server)
    for args in (["--tracking-uri", plain_web_server], []):  # given, or the sweep's own
        assert sync_main(["--store-root", str(store), "--experiment", "q", *args]) == 2
        said = capsys.readouterr().err
        assert f"'{plain_web_server}': the server there answers, but is not an MLflow tracking " \
               "server" in said
        assert "HTTP 404" in said and "once it is back" not in said and "Traceback" not in said


def test_a_sweep_refuses_a_server_that_is_not_mlflow_before_anything(tmp_path, plain_web_server,
                                                                     make_tiny_config):
    from sweeper.runner import prepare

    cfg = make_tiny_config(tmp_path)
    cfg.tracking.uri = plain_web_server
    with pytest.raises(ConfigError) as refused:
        prepare(cfg)
    assert "answers, but is not an MLflow tracking server" in str(refused.value)
    assert not Path(cfg.store.root).exists()


def test_sync_says_a_databricks_uri_has_no_profile(tmp_path, monkeypatch, capsys):
    from sweeper.cli.sync_command import main as sync_main

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("DATABRICKS_HOST", raising=False)
    monkeypatch.delenv("DATABRICKS_CONFIG_FILE", raising=False)
    monkeypatch.delenv("DATABRICKS_CONFIG_PROFILE", raising=False)
    store = a_landed_sweep(tmp_path, "databricks")
    for args, profile in ((["--tracking-uri", "databricks://analytics"], "analytics"),
                          ([], "DEFAULT")):
        assert sync_main(["--store-root", str(store), "--experiment", "q", *args]) == 2
        said = capsys.readouterr().err
        assert f"no Databricks profile {profile!r} is configured" in said
        assert "once it is back" not in said and "Traceback" not in said
    (tmp_path / ".databrickscfg").write_text("[analytics]\nhost = https://x.cloud.databricks.com\n")
    assert tracking_location_problem("tracking.uri", "databricks://analytics") is None


def test_a_real_mlflow_server_passes_the_probes(mlflow_server):
    from sweeper.probes import not_mlflow_problem, tracking_server_problem

    assert tracking_server_problem(mlflow_server.uri, "tracking.uri") is None
    assert not_mlflow_problem(mlflow_server.uri, "tracking.uri") is None


# --- item 9: the schemes a refusal lists ---------------------------------------------------------

def test_the_schemes_a_tracking_refusal_lists_are_each_accepted(tmp_path, monkeypatch):
    """Issue 44.9: `postgres://` was refused with a list that named `postgresql://`, which is
    refused too (SQLAlchemy's default driver for it, psycopg 3, is not installed)."""
    monkeypatch.setenv("DATABRICKS_HOST", "https://x.cloud.databricks.com")
    monkeypatch.delenv("DATABRICKS_CONFIG_PROFILE", raising=False)
    message = tracking_location_problem("tracking.uri", "postgres://mlflow@127.0.0.1:5432/mlflow")
    listed = re.findall(r"'([a-z0-9+]+://)'", message)
    assert "scheme 'postgres' is not a tracking store MLflow has" in message
    assert {"file://", "sqlite://", "http://", "https://"} <= set(listed)
    examples = {"file://": f"file://{tmp_path}/mlruns", "sqlite://": f"sqlite:///{tmp_path}/m.db",
                "databricks://": "databricks://"}
    for scheme in listed:
        uri = examples.get(scheme, f"{scheme}mlflow@127.0.0.1:5432/mlflow")
        assert tracking_location_problem("tracking.uri", uri) is None, (scheme, uri)


# --- issue 54, item 1: every command's writes go through the store's one write path ------------

def outside_targets(tmp_path: Path) -> tuple[Path, Callable[[], list]]:
    """A folder outside the store holding a precious file, and what "untouched" is told by."""
    outside = tmp_path / "outside"
    (outside / "folder").mkdir(parents=True)
    (outside / "file").write_text("precious\n")
    return outside, lambda: [state(outside), state(outside / "folder"),
                             (outside / "file").read_text()]


def plant(root: Path, planted: str, outside: Path) -> Path:
    """A symbolic link at `planted` under `root` to the outside file (a name with a suffix) or
    folder."""
    link = root / planted
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside / ("file" if Path(planted).suffix else "folder"))
    return link


#: Each file the sweep's figure drawer writes (the ppv report's two among them), each folder
#: on their way.
FIGURE_WRITES = ["sweeps/s/frontier.png", "sweeps/s/frontier.csv", "sweeps/s/.figures.json",
                 "sweeps/s/report", "sweeps/s/report/ppv_vs_gamma.png",
                 "sweeps/s/report/ppv_vs_gamma.csv", "sweeps/s"]


@pytest.mark.parametrize("planted", FIGURE_WRITES)
def test_the_sweeps_figures_are_never_written_through_a_link(tmp_path, make_tiny_config,
                                                             planted):
    """Issue 54: the figures folder was checked, then `savefig` followed a link at the file."""
    from testkit.report_frames import ppv_frame

    from sweeper.listeners import publish_figures

    cfg = make_tiny_config(tmp_path)
    cfg.name, cfg.report = "s", "ppv"
    store = ArtifactStore(cfg.store.root)
    outside, untouched = outside_targets(tmp_path)
    link = plant(store.local_root, planted, outside)
    before = untouched()
    with pytest.raises(LinkInStore) as refused:
        publish_figures(cfg, store, ppv_frame())
    assert f"{link} is a symbolic link inside the store" in str(refused.value)
    assert untouched() == before and link.is_symlink()


def landed_store(tmp_path: Path) -> ArtifactStore:
    from test_results_dataset import land_sweep

    from sweeper.store.results import compact

    store = ArtifactStore(tmp_path / "runs")
    compact(store, "s", land_sweep(store, "s", 2))
    return store


@pytest.mark.parametrize("planted", ["sweeps/s/frontier.png", "sweeps/s", "sweeps/s/table.csv",
                                     "sweeps/s/out", "sweeps/s/mine.png"])
def test_the_frontier_command_refuses_a_link_where_it_writes_before_the_table(tmp_path, capsys,
                                                                             planted):
    """Issue 54: `sweeper frontier` overwrote the file a link at `frontier.png` pointed at.  Its
    figures, and a --csv or --plot inside the store, go through the store's write path; the
    links are named before the table, exit 2."""
    from sweeper.cli.frontier_command import main as frontier_main

    store = landed_store(tmp_path)
    outside, untouched = outside_targets(tmp_path)
    sweep = store.local_root / "sweeps" / "s"
    if planted == "sweeps/s":  # the sweep's folder moved elsewhere, a link left in its place
        for entry in sweep.iterdir():
            shutil.move(entry, outside / "folder")
        sweep.rmdir()
    link = plant(store.local_root, planted, outside)
    before = untouched()
    args = ["--store-root", str(store.local_root), "--experiment", "s", "--allow-partial"]
    if planted.endswith(("table.csv", "out")):
        args += ["--csv", str(sweep / ("table.csv" if planted.endswith("csv") else "out/t.csv"))]
    if planted.endswith("mine.png"):
        args += ["--plot", str(sweep / "mine.png")]
    assert frontier_main(args) == 2
    out, err = capsys.readouterr()
    assert f"error: {link} is a symbolic link where this command writes; a store writes only " \
           "into its own folders, never through a link" in err
    assert "Traceback" not in err and "precision" not in out  # refused before the table
    assert untouched() == before and link.is_symlink()


def test_a_link_put_in_the_store_after_the_check_is_refused_as_it_is_met(tmp_path, capsys,
                                                                        monkeypatch):
    """The check before the table cannot see a link made after it: the write path refuses it."""
    import sweeper.cli.frontier_command as frontier

    store = landed_store(tmp_path)
    outside, untouched = outside_targets(tmp_path)
    monkeypatch.setattr(frontier, "writes_links", lambda *args: plant(
        store.local_root, "sweeps/s/table.csv", outside) and [])
    link = store.local_root / "sweeps" / "s" / "table.csv"
    before = untouched()
    assert frontier.main(["--store-root", str(store.local_root), "--experiment", "s",
                          "--csv", str(link), "--no-plot"]) == 2
    assert f"error: {link} is a symbolic link inside the store" in capsys.readouterr().err
    assert untouched() == before and link.is_symlink()


def test_frontier_writes_a_csv_into_a_folder_not_there_yet(tmp_path, capsys):
    """Issue 54: `--csv <missing folder>/x.csv --no-plot` ended in a traceback; the folder is
    made, as for --plot (its creation was checked before the table)."""
    from sweeper.cli.frontier_command import main as frontier_main

    store = landed_store(tmp_path)
    target = tmp_path / "new" / "deeper" / "x.csv"
    assert frontier_main(["--store-root", str(store.local_root), "--experiment", "s",
                          "--csv", str(target), "--no-plot"]) == 0
    assert f"CSV: {target}" in capsys.readouterr().out
    assert pd.read_csv(target)["attack"].tolist() == ["loss", "loss"]


@pytest.mark.parametrize("planted", ["mlflow.db", "mlflow.db-journal", "mlartifacts",
                                     "mlartifacts/1"])
def test_sync_refuses_a_link_where_mlflow_would_write_and_writes_nothing(tmp_path, capsys,
                                                                        planted):
    """Issue 54: with `<store>/mlflow.db` a link to an outside file, `sweeper sync` made that
    file an MLflow database.  What MLflow writes in the store is looked for before it opens."""
    from sweeper.cli.sync_command import main as sync_main

    store = landed_store(tmp_path)
    manifest = store.read_manifest("s")
    store.write_manifest("s", {**manifest, "sweep_key": "k",
                               "config": {"tracking": {"uri": None, "experiment": "sweeper"}}})
    outside, untouched = outside_targets(tmp_path)
    link = plant(store.local_root, planted, outside)
    before = untouched()
    assert sync_main(["--store-root", str(store.local_root), "--experiment", "s"]) == 2
    err = capsys.readouterr().err
    assert f"{link} is a symbolic link where MLflow writes; a store writes only into its own " \
           "folders, never through a link" in err
    assert "Traceback" not in err
    assert untouched() == before and link.is_symlink()
    assert not (store.local_root / "mlflow.db").exists() or planted == "mlflow.db"
