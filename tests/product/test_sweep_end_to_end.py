"""A tiny sweep end to end on real Ray, real Opacus, real Parquet and real MLflow (SQLite)."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pandas as pd
import pytest
from mlflow import MlflowClient

from sweeper.runner import run_sweep
from sweeper.tracking.recorder import CELL_KEY_TAG, PARENT_TAG, SWEEP_KEY_TAG


@pytest.fixture(scope="module")
def finished_sweep(ray_local, make_tiny_config, tmp_path_factory):
    cfg = make_tiny_config(tmp_path_factory.mktemp("sweep"))
    first = run_sweep(cfg, progress=False)
    second = run_sweep(cfg, progress=False)
    return cfg, first, second


def test_table_has_exactly_the_expected_cells(finished_sweep):
    cfg, first, _ = finished_sweep
    expected = set(itertools.product(cfg.grid.epsilon, cfg.grid.delta, cfg.grid.p,
                                     cfg.grid.attack, cfg.grid.policy, cfg.grid.trial))
    got = first.results
    assert not first.failures
    assert len(got) == len(expected)
    assert set(zip(got.epsilon, got.delta, got.p, got.attack, got.policy, got.trial)) == expected


def test_first_run_trains_each_model_once(finished_sweep):
    cfg, first, _ = finished_sweep
    # per ε: the shadows plus one target per p (one trial); ε = ∞ ignores δ.
    per_epsilon = cfg.shadow.count + len(cfg.grid.p) * len(cfg.grid.trial)
    assert first.models_total == first.models_trained == per_epsilon * len(cfg.grid.epsilon)
    models = list((Path(cfg.store.root) / "models").iterdir())
    assert len(models) == first.models_total


def test_the_sweep_knows_where_its_wall_went_and_each_model_its_device(finished_sweep, capsys):
    """Each kind of task's wall (`sweeper.task_times`) from the tasks that ran: every training
    task, every attack task, none left out; each model's metadata names its device and span."""
    from sweeper.store.artifacts import ArtifactStore

    cfg, first, second = finished_sweep
    store = ArtifactStore(cfg.store.root)
    metas = [store.read_model_meta(path.name) for path in (Path(cfg.store.root) / "models").iterdir()]
    assert {meta["device"] for meta in metas} == {"cpu"}
    assert all(meta["started_at"] <= meta["ended_at"] for meta in metas)
    times = first.task_times
    assert times["training"].tasks == len({meta["started_at"] for meta in metas})
    assert times["attacks"].tasks == len({(row.epsilon, row.p, row.trial, row.attack)
                                          for row in first.results.itertuples()})
    for kind in ("training", "attacks"):
        assert 0 < times[kind].wall <= first.seconds
        assert times[kind].wall <= times[kind].task_seconds + 1e-9
    assert all(t.tasks == 0 for t in second.task_times.values())  # the rerun ran no task
    from sweeper.summary import print_summary
    from sweeper.task_times import wall_split_line

    print_summary(first)  # the line `bench.gpu_sweep` reads
    assert wall_split_line(times) in capsys.readouterr().out.splitlines()


def test_rows_are_consistent(finished_sweep):
    _, first, _ = finished_sweep
    rows = first.results
    assert ((rows.precision_ci_low <= rows.precision) & (rows.precision <= rows.precision_ci_high)).all()
    assert (rows.tp + rows.fp > 0).all()
    # The always-member baseline accepts every record: its precision is the member share.
    baseline = rows[rows.attack == "always_member"]
    assert (baseline.tp + baseline.fp == baseline.eval_records).all()
    assert (baseline.precision == baseline.members / baseline.eval_records).all()
    # ε = ∞: no guarantee, the bound is vacuous; the DP models report a finite spent ε ≤ target.
    assert (rows[rows.epsilon == math.inf].bound == 1.0).all()
    private = rows[rows.epsilon < math.inf]
    assert (private.epsilon_spent <= private.epsilon + 1e-6).all()
    assert (private.noise_multiplier > 0).all()
    assert (private.bound < 1).all() and not rows.violation.any()


def test_rerun_trains_nothing_and_adds_no_rows(finished_sweep):
    _, first, second = finished_sweep
    assert second.models_trained == 0 and second.cells_computed == 0
    cells = list((Path(second.sweep_dir) / "cells").glob("*.parquet"))
    assert len(cells) == len(first.results) == len(second.results)
    pd.testing.assert_frame_equal(
        first.results.sort_values("cell_key", ignore_index=True),
        second.results.sort_values("cell_key", ignore_index=True))


def test_mlflow_has_one_nested_run_per_cell(finished_sweep):
    cfg, first, _ = finished_sweep
    client = MlflowClient(tracking_uri=first.tracking_uri)
    experiment = client.get_experiment_by_name(cfg.tracking.experiment)
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    parents = [r for r in runs if SWEEP_KEY_TAG in r.data.tags]
    children = [r for r in runs if PARENT_TAG in r.data.tags]
    assert len(parents) == 1  # the rerun reused the sweep's run
    assert len(children) == len(first.results)
    assert {r.data.tags[PARENT_TAG] for r in children} == {parents[0].info.run_id}
    by_key = {r.data.tags[CELL_KEY_TAG]: r for r in children}
    for row in first.results.to_dict("records"):
        run = by_key[row["cell_key"]]
        assert run.data.params["attack"] == row["attack"]
        assert float(run.data.params["epsilon"]) == row["epsilon"]
        assert float(run.data.params["p"]) == row["p"]
        assert run.data.metrics["precision"] == pytest.approx(row["precision"])
    assert parents[0].data.params["grid.p"] == str(cfg.grid.p)
    attached = {a.path for a in client.list_artifacts(parents[0].info.run_id)}
    assert {"frontier.png", "frontier.csv", "report.html"} <= attached


def test_the_sweep_writes_its_report_beside_its_frontier_with_its_run_recorded(finished_sweep,
                                                                              tmp_path, capsys):
    """Issue 51: report.html beside frontier.png, small, every section there; the run that
    computed the cells is in the sweep's provenance, the rerun that computed nothing is not;
    `sweeper report` writes the same page again from the store."""
    from sweeper.cli.report_command import main as report_main
    from sweeper.reports.sweep_page import SECTIONS
    from sweeper.store.artifacts import ArtifactStore

    cfg, first, second = finished_sweep
    assert first.html_report == Path(first.sweep_dir) / "report.html" == second.html_report
    page = first.html_report.read_text()
    assert len(page.encode()) <= 5_000_000
    assert all(f'<section id="{key}">' in page for key in SECTIONS)
    runs = ArtifactStore(cfg.store.root).read_provenance(cfg.name)["runs"]
    assert len(runs) == 1 and runs[0]["models_trained"] == first.models_trained
    assert runs[0]["environment"]["packages"]["opacus"]
    out = tmp_path / "again.html"
    assert report_main(["--run-dir", first.sweep_dir, "--out", str(out)]) == 0
    assert f"report: {out}" in capsys.readouterr().out
    assert out.read_text() == page


def test_frontier_files_are_written_next_to_the_results(finished_sweep):
    _, first, _ = finished_sweep
    assert first.plot_path == Path(first.sweep_dir) / "frontier.png"
    assert first.plot_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = pd.read_csv(first.csv_path)
    assert sorted(table.cell_key) == sorted(first.results.cell_key)


def test_frontier_command_prints_writes_csv_and_json(finished_sweep, tmp_path, capsys):
    from sweeper.cli.frontier_command import main

    _, first, _ = finished_sweep
    csv_path, png_path = tmp_path / "frontier.csv", tmp_path / "frontier.png"
    assert main(["--run-dir", str(first.sweep_dir), "--trials", "--csv", str(csv_path),
                 "--plot", str(png_path)]) == 0
    printed = capsys.readouterr().out
    assert printed.count("lira_online") == len(first.results[first.results.attack == "lira_online"])
    assert "precision [95% CI]" in printed and png_path.exists()
    assert len(pd.read_csv(csv_path)) == len(first.results)
    assert main(["--run-dir", str(first.sweep_dir), "--json", "--trials", "--no-plot"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert {r["cell_key"] for r in records} == set(first.results.cell_key)


def test_frontier_command_without_a_sweep_says_what_to_do(tmp_path, capsys):
    from sweeper.cli.frontier_command import main

    assert main(["--run-dir", str(tmp_path / "sweeps" / "nothing")]) == 2
    assert main(["--run-dir", str(tmp_path / "not-a-sweep-folder")]) == 2
    assert "Run `sweeper` (a sweep) first" in capsys.readouterr().err


def test_frontier_writes_infinite_epsilon_one_way_in_text_and_in_json(finished_sweep, capsys):
    """People read ∞; JSON carries the string "inf" (plain JSON has no infinity, null loses it)."""
    from sweeper.cli.frontier_command import main

    _, first, _ = finished_sweep
    assert math.inf in set(first.results.epsilon)
    assert main(["--run-dir", str(first.sweep_dir), "--no-plot"]) == 0
    table = capsys.readouterr().out
    assert " ∞ " in table and " inf " not in table
    assert main(["--run-dir", str(first.sweep_dir), "--json", "--trials", "--no-plot"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert {r["epsilon"] for r in records} == {"inf" if math.isinf(e) else e
                                               for e in first.results.epsilon}


def test_the_results_dataset_holds_the_sweeps_rows(finished_sweep):
    _, first, second = finished_sweep
    assert first.results_dir == second.results_dir == str(Path(first.sweep_dir).parents[1] / "results" / "cells")
    frame = pd.read_parquet(first.results_dir, filters=[("sweep", "==", first.name)])
    assert sorted(frame.cell_key) == sorted(first.results.cell_key)
    assert set(frame["sweep"].astype(str)) == {first.name}


def test_listeners_hear_each_landed_cell_in_order_until_one_cannot_keep_it(ray_local, tiny_config):
    """The execution loop's contract with the sinks (`sweeper.listeners`): every listener hears
    each landed row in the list's order; a listener that cannot keep a row (`NotLanded`) stops
    the ones after it and the cell fails with its reason; a failed attack is told to all."""
    from sweeper.failures import cell_label, storing_failure
    from sweeper.listeners import Listener, Listeners, NotLanded
    from sweeper.grid.plan import build_plan
    from sweeper.runner import _land

    heard: list[tuple] = []

    class Recorder(Listener):
        def __init__(self, name: str, refuses: frozenset = frozenset()) -> None:
            self.name, self.refuses = name, refuses

        def on_cell_landed(self, cell, row) -> None:
            heard.append((self.name, row["cell_key"]))
            if row["cell_key"] in self.refuses:
                raise NotLanded(storing_failure(OSError("disk full")))

        def on_cell_failed(self, cell, failure) -> None:
            heard.append((self.name, "failed", cell.key, failure.task))

    cells = build_plan(tiny_config).cells[:3]
    k0, k1, k2 = (cell.key for cell in cells)
    rows = [{"cell_key": cell.key} for cell in cells]
    failed = _land(ray_local.put(rows), cells, [],
                   Listeners([Recorder("first", frozenset({k1})), Recorder("second")]), 0, 0)
    assert failed == [(cell_label(cells[1]), "storing the row: OSError: disk full")]
    assert heard == [("first", k0), ("second", k0), ("first", k1), ("first", k2), ("second", k2)]

    @ray_local.remote(max_retries=0)
    def attack():
        raise ValueError("bad data")

    heard.clear()
    failed = _land(attack.remote(), cells[:2], [], Listeners([Recorder("first"), Recorder("second")]),
                   0, 0)
    assert [label for label, _ in failed] == [cell_label(cells[0]), cell_label(cells[1])]
    assert all("ValueError: bad data" in reason for _, reason in failed)
    assert [entry[:3] for entry in heard] == [(name, "failed", key) for key in (k0, k1)
                                              for name in ("first", "second")]
    assert len({entry[3] for entry in heard}) == 1  # one failure, told of each cell
