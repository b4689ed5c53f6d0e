"""`sweeper frontier` as a person reads it: one line per coordinate with its trials pooled (the
figures' rule), `--trials` for every cell, filters that refuse a value the sweep lacks.  The
sweep is written through the store's own path (real Parquet); expected numbers by hand."""

from __future__ import annotations

import json
import math

import pytest
from scipy.stats import beta

from sweeper.cli.frontier_command import EXIT_OK, EXIT_REFUSED, _parser, main as frontier_main
from sweeper.store.results import compact
from sweeper.store.artifacts import ArtifactStore

#: (attack, ε, p, trial) → (TP, FP, violation): two trials per coordinate.
CELLS = {
    ("loss", 4.0, 0.5, 0): (3, 2, False), ("loss", 4.0, 0.5, 1): (6, 1, False),
    ("loss", math.inf, 0.5, 0): (8, 2, True), ("loss", math.inf, 0.5, 1): (9, 1, False),
    ("lira_online", 4.0, 0.2, 0): (1, 3, False), ("lira_online", 4.0, 0.2, 1): (2, 2, False),
}


@pytest.fixture
def sweep(tmp_path) -> str:
    return write_sweep(tmp_path)


def write_sweep(root, bound_at_tpr=lambda attack: 0.95) -> str:
    """The sweep `view` of `CELLS` in a store at `root`; every cell's bound is 0.9, its
    bound_at_tpr `bound_at_tpr(attack)`."""
    store = ArtifactStore(root)
    keys = [f"cell{i}" for i in range(len(CELLS))]
    store.write_manifest("view", {"name": "view", "cells": keys})
    for key, ((attack, eps, p, trial), (tp, fp, violation)) in zip(keys, CELLS.items()):
        precision = tp / (tp + fp)
        store.write_cell("view", key, {
            "dataset": "digits", "model": "mlp", "epsilon": eps, "delta": 1e-5, "p": p,
            "attack": attack, "policy": "quantile_max", "trial": trial, "precision": precision,
            "precision_ci_low": 0.0, "precision_ci_high": 1.0, "tp": tp, "fp": fp,
            "baseline": p, "bound": 0.9, "bound_at_tpr": bound_at_tpr(attack),
            "tpr_at_fpr_0.01": 0.1,
            "auc": 0.6, "test_accuracy": 0.8, "violation": violation, "tpr_floor": 0.01,
            "bound_form": "derived",
            "violation_reason": "precision" if violation else "", "model_key": f"m{key}",
            "scores_key": f"s{key}", "cell_key": key, "schema_version": 3})
    compact(store, "view", keys)
    return str(root)


def exact(k: int, n: int) -> str:
    """k/n and Clopper & Pearson's exact 95 % interval (Beta quantiles), as the table prints it."""
    return f"{k / n:.3f} [{beta.ppf(0.025, k, n - k + 1):.3f}, {beta.ppf(0.975, k + 1, n - k):.3f}]"


def frontier(capsys, store_root: str, *args: str) -> tuple[int, list[str], str]:
    code = frontier_main(["--store-root", store_root, "--experiment", "view", "--no-plot", *args])
    out, err = capsys.readouterr()
    return code, [line for line in out.splitlines() if line.strip()], err


def test_default_view_pools_the_trials_of_each_coordinate(sweep, capsys):
    code, lines, _ = frontier(capsys, sweep)
    assert code == EXIT_OK
    table = [line for line in lines if line.split()[0] in ("loss", "lira_online")]
    assert len(table) == 3  # six cells, three coordinates
    by_eps = {line.split()[1]: line for line in table if line.startswith("loss")}
    assert exact(9, 12) in by_eps["4"]  # (3 + 6) / (3 + 2 + 6 + 1), not the mean 0.729
    assert exact(17, 20) in by_eps["∞"]
    assert "VIOLATION (1 of 2 trials)" in by_eps["∞"] and "VIOLATION" not in by_eps["4"]
    (lira,) = [line for line in table if line.startswith("lira_online")]
    assert exact(3, 8) in lira and " 2 " in lira  # two trials


def test_trials_prints_every_cell(sweep, capsys):
    _, lines, _ = frontier(capsys, sweep, "--trials")
    assert len([line for line in lines if line.split()[0] in ("loss", "lira_online")]) == 6


def test_filters_select_and_refuse_what_the_sweep_lacks(sweep, capsys):
    _, lines, _ = frontier(capsys, sweep, "--attack", "loss", "--epsilon", "inf", "--trials")
    shown = [line for line in lines if line.split()[0] in ("loss", "lira_online")]
    assert len(shown) == 2 and all(line.split()[1] == "∞" for line in shown)
    assert "shown: 2 of 6 cells" in "\n".join(lines)
    _, lines, _ = frontier(capsys, sweep, "--p", "0.2")
    assert [line.split()[0] for line in lines if line.split()[0] in ("loss", "lira_online")] \
        == ["lira_online"]
    code, lines, err = frontier(capsys, sweep, "--attack", "lira", "--epsilon", "8")
    assert code == EXIT_REFUSED and not lines
    assert "--attack lira: the sweep has none (it has lira_online, loss)" in err
    assert "--epsilon 8: the sweep has none (it has 4, ∞)" in err
    assert "Traceback" not in err


def test_help_reads_as_written():
    text = _parser().format_help()
    assert "%%" not in text and "95 %" in text
    assert ".pdf" in text and ".svg" in text and "PNG path" not in text


def test_every_bad_filter_is_named_at_once(sweep, capsys):
    """Issue 30.10: `--epsilon abc` stopped the command in argparse, naming it alone."""
    code, lines, err = frontier(capsys, sweep, "--attack", "nosuch", "--epsilon", "abc",
                                "--p", "2", "--epsilon", "∞")
    assert code == EXIT_REFUSED and not lines and err.count("error:") == 1
    for said in ("--epsilon abc: not a number (inf or ∞ for none)",
                 "--attack nosuch: the sweep has none (it has lira_online, loss)",
                 "--p 2: the sweep has none (it has 0.2, 0.5)"):
        assert said in err, err


def columns(header: str) -> list[str]:
    return header.replace("[95% CI]", "[95%_CI]").replace("test acc", "test_acc").split()


def test_trials_read_in_the_summarys_layout(sweep, capsys):
    """Issue 32.7: `--trials` had a layout of its own; now the trial stands where the trial
    count stands, and every other column is the summary's, in its order."""
    _, summary, _ = frontier(capsys, sweep)
    _, trials, _ = frontier(capsys, sweep, "--trials")
    pooled, per_trial = columns(summary[0]), columns(trials[0])
    assert per_trial == [{"trials": "trial", "pooled": None}.get(name, name) for name in pooled
                         if name != "pooled"], (pooled, per_trial)
    rows = {tuple(line.split()[:5]): line for line in trials[1:]}
    assert "0.857 [0.000, 1.000]   6   1" in rows[("loss", "4", "1e-05", "0.50", "1")]  # as stored
    assert "VIOLATION (precision)" in rows[("loss", "∞", "1e-05", "0.50", "0")]


def test_shown_names_the_filters_given_and_only_those(sweep, capsys):
    _, lines, _ = frontier(capsys, sweep, "--p", "0.2")
    assert "shown: 2 of 6 cells (--p 0.2)" in lines
    _, lines, _ = frontier(capsys, sweep, "--attack", "loss", "--epsilon", "inf", "--trials")
    assert "shown: 2 of 6 cells (--attack loss, --epsilon inf)" in lines


def test_an_unknown_sweep_lists_the_sweeps_the_store_has(sweep, capsys, tmp_path):
    code, lines, err = frontier(capsys, sweep, "--experiment", "nosuch")
    assert code == EXIT_REFUSED and not lines
    assert "This store has: view (--experiment NAME)." in err and "Traceback" not in err
    code, _, err = frontier(capsys, str(tmp_path / "empty"), "--experiment", "nosuch")
    assert code == EXIT_REFUSED and "Run `sweeper` (a sweep) first" in err
    # A --run-dir that is no sweep folder names no store's sweeps (and does not crash).
    assert frontier_main(["--run-dir", str(tmp_path / "not-a-sweep")]) == EXIT_REFUSED
    err = capsys.readouterr().err
    assert "is not a sweep folder" in err and "Traceback" not in err and "This store" not in err


def test_json_draws_no_figure_unless_a_path_is_given(sweep, capsys, tmp_path):
    figure = tmp_path / "sweeps" / "view" / "frontier.png"
    assert frontier_main(["--store-root", sweep, "--experiment", "view", "--json"]) == EXIT_OK
    out, err = capsys.readouterr()
    assert out.lstrip().startswith("[") and "plot:" not in err and not figure.exists()
    chosen = tmp_path / "chosen.png"
    assert frontier_main(["--store-root", sweep, "--experiment", "view", "--json",
                          "--plot", str(chosen)]) == EXIT_OK
    assert chosen.stat().st_size > 0 and f"plot: {chosen}" in capsys.readouterr().err
    unasked = tmp_path / "unasked.png"  # --no-plot wins over --plot, as before
    assert frontier_main(["--store-root", sweep, "--experiment", "view", "--no-plot",
                          "--plot", str(unasked)]) == EXIT_OK
    assert not unasked.exists()


def test_json_is_what_the_table_shows_and_with_trials_the_cells(sweep, capsys):
    """Issue 43.5: `--json` printed the cells (one per trial) while the table showed the pooled
    rows."""
    _, table, _ = frontier(capsys, sweep)
    code, lines, _ = frontier(capsys, sweep, "--json")
    pooled = json.loads("\n".join(lines))
    assert code == EXIT_OK and len(pooled) == 3  # the table's three lines, not six cells
    rows = {(row["attack"], row["epsilon"]): row for row in pooled}
    loss = rows[("loss", 4.0)]
    assert (loss["tp"], loss["fp"], loss["n_trials"]) == (9, 3, 2)
    assert loss["precision"] == pytest.approx(9 / 12)  # pooled: ΣTP/(ΣTP+ΣFP)
    assert rows[("loss", "inf")]["violations"] == 1  # ∞ as JSON's "inf"
    for row in pooled:  # each JSON row is a line of the table, with its numbers
        line = next(line for line in table if line.split()[:2] ==
                    [row["attack"], "∞" if row["epsilon"] == "inf" else f"{row['epsilon']:g}"])
        assert f"{row['precision']:.3f} [{row['precision_ci_low']:.3f}" in line
    _, lines, _ = frontier(capsys, sweep, "--json", "--trials")
    cells = json.loads("\n".join(lines))
    assert sorted(row["cell_key"] for row in cells) == [f"cell{i}" for i in range(6)]
    _, lines, _ = frontier(capsys, sweep, "--json", "--p", "0.2")  # filters, then pools
    assert [(row["attack"], row["n_trials"]) for row in json.loads("\n".join(lines))] == \
        [("lira_online", 2)]


def header_and_rows(lines: list[str]) -> tuple[list[str], dict[str, str]]:
    """The table's header's columns and its lines by (attack, ε)."""
    rows = {" ".join(line.split()[:2]): line for line in lines
            if line.split()[0] in ("loss", "lira_online")}
    return columns(lines[0]), rows


def test_bound_at_tpr_is_shown_only_where_it_differs_from_bound(tmp_path, capsys):
    """Issue 43.5: bound@TPR equalled bound in all 36 rows of the quickstart, unexplained."""
    same = write_sweep(tmp_path / "same", bound_at_tpr=lambda attack: 0.9)
    _, lines, _ = frontier(capsys, same)
    header, _ = header_and_rows(lines)
    assert "bound" in header and "bound@TPR" not in header
    assert "U at the attack's own TPR) equals bound in every row" in \
        legend_entry(lines, "bound@TPR (")
    one = write_sweep(tmp_path / "one", bound_at_tpr=lambda attack: 0.97 if attack == "loss" else 0.9)
    for args in ((), ("--trials",)):
        _, lines, _ = frontier(capsys, one, *args)
        header, rows = header_and_rows(lines)
        assert "bound@TPR" in header
        assert all("0.970" in line for key, line in rows.items() if key.startswith("loss"))
        assert all("0.970" not in line and line.count("0.900") == 1  # bound alone
                   for key, line in rows.items() if key.startswith("lira_online"))
        assert any(line.startswith("bound@TPR: U at the attack's own TPR") for line in lines)


def legend_entry(lines: list[str], start: str) -> str:
    """The legend entry under the table that starts with `start`, its wrapped lines joined."""
    first = next(i for i, line in enumerate(lines) if line.startswith(start))
    entry = [lines[first]]
    for line in lines[first + 1:]:
        if not line.startswith("  "):
            break
        entry.append(line.strip())
    return " ".join(entry)


def test_a_legend_for_the_flag_column_is_printed_under_the_table(sweep, capsys):
    _, lines, _ = frontier(capsys, sweep)
    last_row = max(i for i, line in enumerate(lines) if line.split()[0] in ("loss", "lira_online"))
    assert "VIOLATION (k of n trials)" in legend_entry(lines[last_row + 1:], "flag: ")
    _, lines, _ = frontier(capsys, sweep, "--trials")
    legend = legend_entry(lines, "flag: ")
    assert "VIOLATION (tests)" in legend and "violation_reason" in legend
    for test in ("precision", "rates", "audit_*", "profile", "accounting"):
        assert f"({test})" in legend  # every test `violation_reason` can name
