"""The sequential frontier (`sweeper.sequential`) end to end on real Ray, Opacus and Parquet: a
tiny grid decided cell by cell, rerun as a resume; and its settings' refusals and its driver's
bookkeeping, which need no Ray."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path

import pytest
from scipy.stats import binomtest

from sweeper.config import ConfigError
from sweeper.checks.validation import validate
from sweeper.grid.plan import build_plan
from sweeper.grid.scale import scaled
from sweeper.sequential import Decisions, frontier_key

MAX_TRIALS = 4


def sequential_config(cfg):
    """The tiny grid, two cheap attacks (no shadows), decided on margin alone (the width goal
    is out of reach), at most four trials a cell."""
    cfg.grid.attack = ["loss", "always_member"]
    cfg.sequential.enabled = True
    cfg.sequential.max_trials = MAX_TRIALS
    cfg.sequential.width = 0.01
    return cfg


@pytest.fixture(scope="module")
def sequential_sweep(ray_local, make_tiny_config, tmp_path_factory):
    """The sweep; its rerun (nothing left to do); and a resume from the state a kill leaves
    (`killed`), rerun."""
    from sweeper.runner import run_sweep

    cfg = sequential_config(make_tiny_config(tmp_path_factory.mktemp("sequential")))
    first = run_sweep(cfg, progress=False)
    again = run_sweep(cfg, progress=False)
    lost = killed(Path(cfg.store.root), cfg.name, first.results)
    resumed = run_sweep(cfg, progress=False)
    return cfg, first, again, (lost, resumed)


def killed(root: Path, name: str, rows) -> tuple[set[str], set[str]]:
    """The store as a kill mid-sweep leaves it: the cell that took the most trials lost its later
    rows (half of them, at least one) and their target models, and the manifest says nothing of
    the cells the finished sweep did not need.  The cells and models removed."""
    longest = rows.loc[rows["decided_at"].idxmax()]
    cell = rows[(rows["epsilon"] == longest["epsilon"]) & (rows["p"] == longest["p"])
                & (rows["attack"] == longest["attack"])]
    gone = cell[cell["trial"] >= int(longest["decided_at"]) // 2]
    for key in gone["cell_key"]:
        for suffix in ("", ".sha256"):
            (root / "sweeps" / name / "cells" / f"{key}.parquet{suffix}").unlink()
    for key in gone["model_key"]:
        shutil.rmtree(root / "models" / key)
    manifest = root / "sweeps" / name / "sweep.json"
    written = json.loads(manifest.read_text())
    del written["sequential"]
    manifest.write_text(json.dumps(written))
    return set(gone["cell_key"]), set(gone["model_key"])


def test_each_cell_stops_at_its_decision_with_an_interval_that_meets_its_goal(sequential_sweep):
    """Every frontier cell is decided or has all its trials; none has a trial past its decision;
    each decided cell's interval, recomputed by SciPy's exact binomial interval at the level the
    union bound spends at that look, meets the goal it names."""
    cfg, first, *_ = sequential_sweep
    assert not first.failures
    rows = first.results
    settings = cfg.sequential
    for _, cell in rows.groupby(["epsilon", "p", "attack"]):
        cell = cell.sort_values("trial")
        decision, at = cell["decision"].iloc[0], cell["decided_at"].iloc[0]
        assert cell["trial"].tolist() == list(range(len(cell)))
        if decision == "undecided":
            assert len(cell) == MAX_TRIALS
            continue
        assert decision in ("below", "violation", "width") and len(cell) == at
        tp, fp = int(cell["tp"].sum()), int(cell["fp"].sum())
        spent = (1 - settings.level) * 6 / (math.pi ** 2 * at ** 2)
        ci = binomtest(tp, tp + fp).proportion_ci(1 - spent, method="exact")
        bound = float(cell["bound"].iloc[0])
        assert {"below": ci.high < bound - settings.margin, "violation": ci.low > bound,
                "width": ci.high - ci.low < settings.width}[decision]
        # earlier looks (past min_trials) met no goal: the cell went on for a reason
        for look in range(settings.min_trials, at):
            early = cell.iloc[:look]
            t, f = int(early["tp"].sum()), int(early["fp"].sum())
            e = binomtest(t, t + f).proportion_ci(
                1 - (1 - settings.level) * 6 / (math.pi ** 2 * look ** 2), method="exact")
            assert not (e.high < bound - settings.margin or e.low > bound)


def test_it_trains_fewer_target_models_than_the_fixed_grid(sequential_sweep):
    cfg, first, *_ = sequential_sweep
    fixed = len(cfg.grid.epsilon) * len(cfg.grid.p) * MAX_TRIALS
    summary = first.sequential
    assert summary["models_fixed"] == fixed == first.models_total
    assert summary["models_used"] == first.models_trained < fixed
    assert len(list((Path(cfg.store.root) / "models").iterdir())) == first.models_trained
    assert sum(summary["decisions"].values()) == len(cfg.grid.epsilon) * len(cfg.grid.p) * 2


def test_a_rerun_resumes_with_the_decisions_it_had_and_trains_nothing(sequential_sweep):
    cfg, first, again, _ = sequential_sweep
    assert again.models_trained == 0 and again.cells_computed == 0
    assert again.sequential == first.sequential
    columns = ["epsilon", "p", "attack", "trial", "tp", "fp", "decision", "decided_at"]
    assert again.results[columns].equals(first.results[columns])
    from sweeper.frontier import load_frontier

    read = load_frontier(run_dir=Path(cfg.store.root) / "sweeps" / cfg.name)
    assert len(read) == len(first.results) and read["decision"].notna().all()
    # whole: the cells past each decision are counted as not needed, not as missing
    from sweeper.frontier import open_sweep

    coverage = open_sweep(cfg.store.root, cfg.name)[1].coverage
    assert coverage.complete and coverage.not_needed == first.cells_total - len(first.results)
    assert "not needed (sequential" in coverage.summary()


def test_a_killed_sweep_resumes_computing_only_what_it_lost_with_the_same_decisions(
        sequential_sweep):
    """A kill's state: a cell's later rows and their models gone, the manifest unfinished.  The
    resume retrains exactly those models and lands exactly those cells (the stored rows before
    them are read back, not recomputed), and the same seeds give the same rows and decisions."""
    _, first, _, ((cells, models), resumed) = sequential_sweep
    assert resumed.models_trained == len(models) and resumed.cells_computed == len(cells)
    columns = ["epsilon", "p", "attack", "trial", "tp", "fp", "decision", "decided_at"]
    assert resumed.results[columns].equals(first.results[columns])
    assert resumed.sequential == first.sequential


def test_the_driver_asks_each_undecided_cell_for_its_next_trial_only(tiny_config):
    """No barrier: a cell whose trial landed undecided asks for its next one at once, a decided
    cell for none, a cell whose rows are read back (a resume) goes on from where they leave it;
    `max_models` holds back trials whose target would pass it."""
    cfg = scaled(sequential_config(tiny_config))
    cfg.sequential.min_trials = 2
    plan = build_plan(cfg)
    decisions = Decisions(plan, cfg.sequential)
    first = decisions.next_cells()
    assert sorted({c.trial for c in first}) == [0, 1]  # min_trials at once
    assert len(first) == len(plan.cells) // MAX_TRIALS * 2
    assert decisions.next_cells() == []  # all in flight
    cells = {(c.epsilon, c.p, c.attack, c.trial): c for c in plan.cells}
    sure, unsure = (4.0, 0.3, "always_member"), (4.0, 0.3, "loss")
    for trial in (0, 1):
        decisions.record(cells[(*sure, trial)], 30, 90, 0.96)  # far below U − margin
        decisions.record(cells[(*unsure, trial)], 1, 1, 0.96)  # two records: undecided
    asked = decisions.next_cells()
    assert [(c.attack, c.trial) for c in asked] == [("loss", 2)]
    assert frontier_key(asked[0]) == frontier_key(cells[(*unsure, 0)])

    assert decisions.next_cells() == []  # nothing landed since: nothing more to ask

    # a measure per record (PDTP) has no precision: its min_trials and no more
    cfg.grid.attack = ["loss", "pdtp"]
    measured = Decisions(build_plan(cfg), cfg.sequential)
    for cell in measured.next_cells():
        measured.record(cell, 0, 0, 0.96)
    assert {c.attack for c in measured.next_cells()} == {"loss"}

    budget = dataclasses.replace(cfg.sequential, max_models=4)
    capped = Decisions(plan, budget)
    assert len({c.scores.target for c in capped.next_cells()}) == 4


def test_bad_sequential_settings_are_refused_each_named(tiny_config):
    cfg = sequential_config(tiny_config)
    cfg.sequential.level = 1.5
    cfg.sequential.width = 0.0
    cfg.sequential.min_trials = 9
    cfg.sequential.max_models = 0
    with pytest.raises(ConfigError) as refused:
        validate(scaled(cfg))
    said = str(refused.value)
    for part in ("sequential.level=1.5", "sequential.width=0.0", "sequential.max_models=0",
                 "sequential.min_trials=9: more than the 4 trial(s)"):
        assert part in said


def test_mlflow_logs_each_cells_decision(sequential_sweep):
    """The sweep's run holds the frontier table with each cell's decision and its trial."""
    import json

    from mlflow import MlflowClient

    from sweeper.tracking.recorder import FRONTIER_TABLE, PARENT_TAG

    cfg, first, *_ = sequential_sweep
    client = MlflowClient(first.tracking_uri)
    experiment = client.get_experiment_by_name(cfg.tracking.experiment)
    (sweep_run,) = [run for run in client.search_runs([experiment.experiment_id])
                    if PARENT_TAG not in run.data.tags]
    with open(client.download_artifacts(sweep_run.info.run_id, FRONTIER_TABLE)) as handle:
        stored = json.load(handle)
    table = [dict(zip(stored["columns"], row)) for row in stored["data"]]
    decided = first.results.groupby(["epsilon", "p", "attack"])["decided_at"].first()
    assert len(table) == len(decided)
    for row in table:
        epsilon = math.inf if row["epsilon"] == "inf" else row["epsilon"]
        assert row["decision"] in ("below", "violation", "width", "undecided")
        assert row["decided_at"] == decided[(epsilon, row["p"], row["attack"])]


def test_the_figure_marks_undecided_cells_hollow(sequential_sweep):
    """A cell the budget left undecided is drawn hollow, said in the legend; a decided one is
    not, and the bars are the anytime intervals."""
    from sweeper.reports.frontier_chart import UNDECIDED_TEXT, frontier_figure, pooled_by_p

    _, first, *_ = sequential_sweep
    rows = first.results.copy()
    texts = lambda figure: [t.get_text() for legend in figure.legends for t in legend.get_texts()]
    assert UNDECIDED_TEXT not in texts(frontier_figure(rows))
    loss = rows["attack"] == "loss"
    rows.loc[loss & (rows["p"] == 0.3), "decision"] = "undecided"
    assert UNDECIDED_TEXT in texts(frontier_figure(rows))
    at = pooled_by_p(rows[loss & (rows["epsilon"] == 4.0)])
    assert at["undecided"].tolist() == [True, False]
    assert at["high"].tolist() == rows[loss & (rows["epsilon"] == 4.0)].groupby("p")[
        "sequential_high"].first().tolist()


def _rows(counts: dict[str, list[tuple[int, int]]]):
    """A frontier's rows at one (ε, p): per attack, its trials' (TP, FP) in order."""
    import pandas as pd

    return pd.DataFrame([
        dict(dataset="mnist_subset", model="mnist_cnn", attack=attack, policy="quantile_max",
             epsilon=4.0, delta=1e-5, p=0.5, target_precision=math.nan, trial=trial, tp=tp, fp=fp,
             precision=tp / (tp + fp), bound=0.98, violation=False, baseline=0.5)
        for attack, trials in counts.items() for trial, (tp, fp) in enumerate(trials)])


def test_the_frontier_reads_each_cells_decision_from_its_rows_and_config():
    """A sequential sweep's rows (its manifest's config) get their decisions: decided below U −
    margin at trial 1, undecided after all 3 trials, still running after 1 of 3; the pooled
    table shows the anytime interval (SciPy's exact interval at the spent level) and the
    decision; a fixed sweep's rows and table are left as they were."""
    from sweeper.decisions import summary_line, with_decisions
    from sweeper.frontier import format_summary, summarize_frontier

    rows = _rows({"loss": [(40, 60)], "lira_online": [(2, 1), (3, 1), (1, 1)], "rmia": [(2, 1)]})
    settings = {"enabled": True, "min_trials": 1, "max_trials": 3, "level": 0.95, "width": 0.1,
                "margin": 0.05}
    config = {"sequential": settings, "grid": {"trial": [0, 1, 2]}}
    summary = summarize_frontier(with_decisions(rows, config)).set_index("attack")
    assert summary["decision"].to_dict() == {"loss": "below", "lira_online": "undecided",
                                             "rmia": "running"}
    assert summary.loc["loss", "decided_at"] == 1
    for attack, (tp, n, look) in {"loss": (40, 100, 1), "lira_online": (6, 9, 3)}.items():
        ci = binomtest(tp, n).proportion_ci(1 - 0.05 * 6 / (math.pi ** 2 * look ** 2), "exact")
        assert summary.loc[attack, "precision_ci_low"] == pytest.approx(ci.low, rel=1e-9)
        assert summary.loc[attack, "precision_ci_high"] == pytest.approx(ci.high, rel=1e-9)
    text = format_summary(with_decisions(rows, config))
    assert "below @1" in text and "undecided" in text and "decision (sequential)" in text

    fixed = {"sequential": {**settings, "enabled": False}, "grid": {"trial": [0, 1, 2]}}
    assert with_decisions(rows, fixed) is rows
    assert "decision" not in summarize_frontier(rows) and "decision" not in format_summary(rows)
    assert summary_line({"decisions": {"below": 2, "undecided": 1}, "models_used": 5,
                         "models_fixed": 12, "max_trials": 3}) == (
        "sequential: trained 5 of the 12 target models the fixed grid of 3 trials would (42%; "
        "shadows as the fixed grid); cells: 2 below, 1 undecided")


def test_the_driver_says_what_it_did_not_need_once_done(tiny_config):
    """Once every cell is decided, the trials past each decision are the cells it skipped, and
    its summary counts the decisions and the target models used against the fixed grid's."""
    cfg = scaled(sequential_config(tiny_config))
    plan = build_plan(cfg)
    decisions = Decisions(plan, cfg.sequential)
    for cell in decisions.next_cells():  # every trial 0, each far below U − margin
        decisions.record(cell, 30, 90, 0.96)
    assert decisions.next_cells() == []
    skipped = set(decisions.skipped())
    assert skipped == {cell.key for cell in plan.cells if cell.trial > 0}
    assert decisions.summary() == {"decisions": {"below": 8}, "models_used": 4,
                                   "models_fixed": 16, "max_trials": MAX_TRIALS}
