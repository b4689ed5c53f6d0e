"""The readable results dataset: pandas, pyarrow.dataset and DuckDB each read several sweeps in one
call; stale cells leave it; its checksum is checked; the frontier says what is missing, failed or
corrupt and exits accordingly.  Rows go through the store's own write path (real Parquet files);
what the tests expect is counted by hand from the rows they wrote."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import json
import math
import stat

import duckdb
import numpy as np
import pandas as pd
import pyarrow.dataset as ds
import pytest

from sweeper.store.columns import SchemaError
from sweeper.cli.frontier_command import EXIT_INCOMPLETE, EXIT_OK, EXIT_REFUSED, main as frontier_main
from sweeper.store.results import compact, load_results
from sweeper.store.artifacts import ArtifactStore

RECORDS = 4  # per-record scores per attack


def cell_row(sweep: str, i: int) -> dict:
    """A row of the declared schema, as `sweeper.grid.cells.cell_row` would build it."""
    return {
        "dataset": "digits", "model": "mlp", "epsilon": [4.0, math.inf][i % 2], "delta": 1e-5,
        "p": 0.5, "target_precision": math.nan, "attack": "loss", "policy": "quantile_max",
        "trial": i, "precision": 0.6, "precision_ci_low": 0.2, "precision_ci_high": 0.9, "tp": 3,
        "fp": 2, "baseline": 0.5, "bound": 0.9, "bound_at_tpr": 0.95, "tpr_at_fpr_0.01": 0.0,
        "auc": 0.55, "test_accuracy": 0.8, "violation": False, "violation_reason": "",
        "model_key": f"model{i}", "scores_key": f"{sweep}-scores{i}", "cell_key": f"{sweep}-cell{i}",
        "schema_version": 3,
    }


def land_sweep(store: ArtifactStore, sweep: str, cells: int, planned: int | None = None) -> list[str]:
    """Plan `planned` cells (default: `cells`), land the first `cells` with their scores."""
    keys = [f"{sweep}-cell{i}" for i in range(planned or cells)]
    store.write_manifest(sweep, {"name": sweep, "cells": keys})
    for i in range(cells):
        store.write_cell(sweep, keys[i], cell_row(sweep, i))
        store.write_scores(f"{sweep}-scores{i}", pd.DataFrame({
            "record_id": np.arange(RECORDS), "score": np.linspace(0, 1, RECORDS),
            "member": [True, False] * (RECORDS // 2), "model_key": f"model{i}", "attack": "loss"}))
    return keys


@pytest.fixture
def two_sweeps(tmp_path):
    store = ArtifactStore(tmp_path)
    for sweep, cells in (("alpha", 3), ("beta", 2)):
        compact(store, sweep, land_sweep(store, sweep, cells))
    return tmp_path


def test_pandas_pyarrow_and_duckdb_read_two_sweeps_in_one_call(two_sweeps):
    cells, scores = two_sweeps / "results" / "cells", two_sweeps / "results" / "scores"
    # pandas (pandas 3 reads the hive partition as a category)
    frame = pd.read_parquet(cells)
    assert isinstance(frame["sweep"].dtype, pd.CategoricalDtype)
    assert frame["sweep"].astype(str).value_counts().to_dict() == {"alpha": 3, "beta": 2}
    assert sorted(frame.cell_key) == ["alpha-cell0", "alpha-cell1", "alpha-cell2",
                                      "beta-cell0", "beta-cell1"]
    # pyarrow.dataset
    table = ds.dataset(cells, partitioning="hive").to_table()
    assert table.num_rows == 5
    assert sorted(table["sweep"].to_pylist()) == ["alpha"] * 3 + ["beta"] * 2
    # DuckDB, cells joined to their per-record scores on (sweep, scores_key)
    counts = duckdb.sql(f"select sweep, count(*) from read_parquet('{cells}/**/*.parquet', "
                        "hive_partitioning=true) group by sweep order by sweep").fetchall()
    assert counts == [("alpha", 3), ("beta", 2)]
    joined = duckdb.sql(
        f"select c.sweep, count(*) from read_parquet('{cells}/**/*.parquet', hive_partitioning=true) c "
        f"join read_parquet('{scores}/**/*.parquet', hive_partitioning=true) s "
        "using (sweep, scores_key) group by 1 order by 1").fetchall()
    assert joined == [("alpha", 3 * RECORDS), ("beta", 2 * RECORDS)]


def test_results_files_are_readable_by_all_and_checksummed_outside_the_dataset(two_sweeps):
    parts = sorted((two_sweeps / "results").rglob("*"))
    files = [path for path in parts if path.is_file()]
    assert [path.name for path in files] == ["part-0.parquet"] * 4  # nothing a reader trips on
    assert all(stat.S_IMODE(path.stat().st_mode) == 0o644 for path in files)
    manifest = json.loads((two_sweeps / "sweeps" / "alpha" / "results.json").read_text())
    part = two_sweeps / "results" / "cells" / "sweep=alpha" / "part-0.parquet"
    assert manifest["files"]["results/cells/sweep=alpha/part-0.parquet"] == \
        hashlib.sha256(part.read_bytes()).hexdigest()


def test_a_rerun_with_fewer_cells_drops_the_stale_rows(two_sweeps):
    store = ArtifactStore(two_sweeps)
    keys = land_sweep(store, "alpha", 2)  # the rerun plans two of the three cells
    compact(store, "alpha", keys)
    frame = pd.read_parquet(two_sweeps / "results" / "cells", filters=[("sweep", "==", "alpha")])
    assert sorted(frame.cell_key) == ["alpha-cell0", "alpha-cell1"]
    assert len(list((two_sweeps / "sweeps" / "alpha" / "cells").glob("*.parquet"))) == 3  # landing
    scores = pd.read_parquet(two_sweeps / "results" / "scores", filters=[("sweep", "==", "alpha")])
    assert sorted(set(scores.scores_key)) == ["alpha-scores0", "alpha-scores1"]


def test_a_damaged_dataset_is_detected_and_read_around(two_sweeps):
    part = two_sweeps / "results" / "cells" / "sweep=alpha" / "part-0.parquet"
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0xFF
    part.write_bytes(bytes(data))
    store = ArtifactStore(two_sweeps)
    loaded = load_results(store, "alpha")
    assert any("failed its checksum" in note for note in loaded.coverage.notes)
    assert sorted(loaded.frame.cell_key) == ["alpha-cell0", "alpha-cell1", "alpha-cell2"]
    compact(store, "alpha", [f"alpha-cell{i}" for i in range(3)])  # the next compaction repairs it
    assert hashlib.sha256(part.read_bytes()).digest() != hashlib.sha256(bytes(data)).digest()
    assert load_results(store, "alpha").coverage.notes == []


def test_rows_are_validated_against_the_schema_before_anything_is_written(tmp_path):
    store = ArtifactStore(tmp_path)
    with pytest.raises(SchemaError, match="unknown column 'precison'"):
        store.write_cell("s", "c", {**cell_row("s", 0), "precison": 0.5})
    with pytest.raises(SchemaError, match="column 'tp'"):
        store.write_cell("s", "c", {**cell_row("s", 0), "tp": "three"})
    with pytest.raises(SchemaError, match="column 'cell_key' is required"):
        store.write_cell("s", "c", {**cell_row("s", 0), "cell_key": None})
    assert not (tmp_path / "sweeps").exists()


def gappy_sweep(tmp_path) -> ArtifactStore:
    """Five planned cells: two landed, one damaged, one failed (with its record), one never stored."""
    store = ArtifactStore(tmp_path)
    keys = land_sweep(store, "gaps", 3, planned=5)
    damaged = tmp_path / "sweeps" / "gaps" / "cells" / f"{keys[2]}.parquet"
    damaged.write_bytes(damaged.read_bytes()[:-10])
    store.write_failure("gaps", keys[3], {"cell": "loss ε=4 trial=3", "cell_key": keys[3],
                                          "reason": "ValueError: bad data"})
    return store


def test_the_frontier_counts_missing_failed_and_corrupt_cells_and_exits_3(tmp_path, capsys):
    gappy_sweep(tmp_path)
    args = ["--store-root", str(tmp_path), "--experiment", "gaps", "--no-plot"]
    assert frontier_main(args) == EXIT_INCOMPLETE == 3
    out, err = capsys.readouterr()
    assert out.count("loss") == 2  # the two present cells are shown
    assert "2 of 5 present, 1 failed, 1 corrupt (failed their checksum), 1 missing" in err
    assert "FAILED loss ε=4 trial=3: ValueError: bad data" in err
    assert "no compacted results dataset yet" in err  # read from the landing zone, and said so
    assert frontier_main([*args, "--allow-partial"]) == EXIT_OK


def test_a_whole_sweep_exits_0(two_sweeps, capsys):
    assert frontier_main(["--store-root", str(two_sweeps), "--experiment", "beta", "--json",
                          "--trials", "--no-plot"]) == EXIT_OK
    out, err = capsys.readouterr()
    assert {row["cell_key"] for row in json.loads(out)} == {"beta-cell0", "beta-cell1"}
    assert "2 of 2 present" in err and "note:" not in err


@pytest.mark.parametrize("content, message", [
    (b'{"name": "x", "cells": [', "sweep.json is corrupt (not JSON"),
    (b'{"name": "x"}', "has no `cells` list"),
])
def test_a_damaged_sweep_json_is_one_line(tmp_path, capsys, content, message):
    (tmp_path / "sweeps" / "x").mkdir(parents=True)
    (tmp_path / "sweeps" / "x" / "sweep.json").write_bytes(content)
    assert frontier_main(["--store-root", str(tmp_path), "--experiment", "x"]) == EXIT_REFUSED
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("name", ["../../../x", "..", "a/b", ".hidden"])
def test_a_sweep_name_that_leaves_its_folder_is_refused(tmp_path, capsys, name):
    store_root = tmp_path / "store" / "inner"
    outside = tmp_path / "x" / "sweeps"
    assert frontier_main(["--store-root", str(store_root), "--experiment", name]) == EXIT_REFUSED
    assert f"sweep name={name!r}" in capsys.readouterr().err
    assert not outside.exists() and not (tmp_path / "store").exists()


def test_a_row_that_cannot_be_stored_leaves_a_failure_record(ray_local, tiny_config, capsys):
    from sweeper.listeners import Listeners, RowWriter
    from sweeper.grid.plan import build_plan
    from sweeper.runner import _land

    cells = build_plan(tiny_config).cells[:2]
    store = ArtifactStore(tiny_config.store.root)
    store.write_manifest("tiny", {"name": "tiny", "cells": [cell.key for cell in cells]})
    rows = [{**cell_row("tiny", 0), "cell_key": cells[0].key},
            {**cell_row("tiny", 1), "cell_key": cells[1].key, "precison": 0.5}]  # misspelt
    landing = store.local_root / "sweeps" / "tiny" / "cells"
    landing.write_text("")  # a file where the cells' folder goes: the first row's write fails
    failed = _land(ray_local.put(rows), cells, [], Listeners([RowWriter(store, "tiny", {})]), 0, 0)
    assert [reason.split(":")[0] for _, reason in failed] == ["storing the row"] * 2
    records = {record["cell_key"]: record for record in store.read_failures("tiny")}
    assert records[cells[0].key]["kind"] == "transient"  # the store's I/O: a rerun retries it
    assert records[cells[1].key]["kind"] == "deterministic"
    assert "unknown column 'precison'" in records[cells[1].key]["reason"]
    assert frontier_main(["--store-root", str(store.local_root), "--experiment", "tiny",
                          "--no-plot"]) == EXIT_INCOMPLETE
    assert capsys.readouterr().err.count("FAILED ") == 2


def test_a_dataset_that_cannot_be_written_leaves_the_rows_readable(tmp_path, caplog):
    store = ArtifactStore(tmp_path)
    keys = land_sweep(store, "blocked", 2)
    (tmp_path / "results").write_text("")  # a file where the datasets' folder goes
    with caplog.at_level(logging.WARNING, logger="sweeper.store.results"):
        assert len(compact(store, "blocked", keys).frame) == 2
    assert any("results dataset was not written" in record.getMessage()
               for record in caplog.records if record.levelno == logging.WARNING)
    loaded = load_results(store, "blocked")
    assert sorted(loaded.frame.cell_key) == keys and loaded.coverage.complete
    assert any("no compacted results dataset yet" in note for note in loaded.coverage.notes)


def test_the_docs_column_tables_are_the_declared_schema(capsys):
    """docs/results.md's column tables are `sweeper.store.columns`'s, verbatim: regenerate them with
    `python -m sweeper.cli.columns_command --markdown` when a column changes."""
    from pathlib import Path

    from sweeper.cli.columns_command import main
    from sweeper.store.columns import CELL_COLUMNS, SCORE_COLUMNS, markdown, marked_section

    page = (Path(__file__).resolve().parents[3] / "docs" / "results.md").read_text(encoding="utf-8")
    section = marked_section(page)
    assert section is not None, "docs/results.md lacks the generated column tables' markers"
    assert section == markdown(), ("docs/results.md's column tables differ from sweeper/store/columns.py: "
                                   "run `python -m sweeper.cli.columns_command --markdown --write`")
    for column in (*CELL_COLUMNS, *SCORE_COLUMNS):  # every declared column, with its doc
        assert f"| `{column.name}` |" in section and column.doc.replace("|", "\\|") in section
    assert main(["--markdown"]) == 0
    assert capsys.readouterr().out == markdown() + "\n"


def test_the_docs_attack_table_is_the_attack_registry(capsys):
    """docs/attacks.md lists the attacks from their registrations (what each is, needs, reads),
    as docs/results.md does the columns: regenerate it with `python -m sweeper.cli.columns_command --attacks`."""
    from pathlib import Path

    from jobs.attacks.contract import ATTACKS
    from sweeper.cli.columns_command import main
    from sweeper.store.columns import ATTACKS_BEGIN, ATTACKS_END, attack_markdown, marked_section

    page = (Path(__file__).resolve().parents[3] / "docs" / "attacks.md").read_text(encoding="utf-8")
    section = marked_section(page, ATTACKS_BEGIN, ATTACKS_END)
    assert section is not None, "docs/attacks.md lacks the generated attack table's markers"
    assert section == attack_markdown(), ("docs/attacks.md's attack table differs from the registry: "
                                          "run `python -m sweeper.cli.columns_command --attacks --write`")
    for name, attack in ATTACKS.items():  # every attack, with each setting it reads
        (row,) = [line for line in section.splitlines() if line.startswith(f"| `{name}` |")]
        assert f"`{attack.threat_model}`" in row
        for spec in dataclasses.fields(attack.settings_type):
            assert f"`attack.{spec.name}`" in row
    assert main(["--attacks"]) == 0
    assert capsys.readouterr().out == attack_markdown() + "\n"


def test_write_rewrites_a_stale_generated_table_in_place(tmp_path, capsys):
    """`--write` puts the declared tables between their pages' markers, leaving the rest of
    each page as it was; a page without the markers is refused, not appended to."""
    import shutil

    from sweeper.cli.columns_command import main
    from sweeper.store.columns import (ATTACKS_BEGIN, ATTACKS_END, DOCS, attack_markdown, markdown,
                                       marked_section)

    for page in ("results.md", "attacks.md"):
        shutil.copy(DOCS / page, tmp_path / page)
    stale = (tmp_path / "results.md").read_text(encoding="utf-8").replace("| `trial` |", "| `trail` |")
    (tmp_path / "results.md").write_text(stale, encoding="utf-8")
    assert main(["--markdown", "--write", "--docs", str(tmp_path)]) == 0
    rewritten = (tmp_path / "results.md").read_text(encoding="utf-8")
    assert marked_section(rewritten) == markdown()
    assert rewritten == (DOCS / "results.md").read_text(encoding="utf-8")
    assert main(["--attacks", "--write", "--docs", str(tmp_path)]) == 0
    assert marked_section((tmp_path / "attacks.md").read_text(encoding="utf-8"), ATTACKS_BEGIN,
                          ATTACKS_END) == attack_markdown()
    (tmp_path / "results.md").write_text("no markers here\n", encoding="utf-8")
    with pytest.raises(SystemExit):
        main(["--markdown", "--write", "--docs", str(tmp_path)])
    assert "lacks the table's markers" in capsys.readouterr().err
    assert (tmp_path / "results.md").read_text(encoding="utf-8") == "no markers here\n"


def test_a_dataset_compacted_before_the_recipe_columns_reads_beside_newer_cells(two_sweeps):
    """A store compacted by the code before `sweeper.axes`' recipe columns, grown by a cell that
    has them: both read as one table, the old rows null there (pyarrow refused to concatenate
    the two schemas before the compacted part was conformed)."""
    import io

    import pyarrow.parquet as pq

    from sweeper.axes import RECIPE_AXES
    from sweeper.store.files import sha256_hex
    from sweeper.store.results import CELLS_DATASET, part_path

    store = ArtifactStore(two_sweeps)
    rel = part_path(CELLS_DATASET, "alpha")
    old = pq.read_table(two_sweeps / rel).drop_columns([axis.name for axis in RECIPE_AXES])
    sink = io.BytesIO()
    pq.write_table(old, sink)
    (two_sweeps / rel).write_bytes(sink.getvalue())
    manifest = store.read_results_manifest("alpha")
    manifest["files"][rel] = sha256_hex(sink.getvalue())
    store.write_results_manifest("alpha", manifest)
    keys = [f"alpha-cell{i}" for i in range(4)]
    store.write_manifest("alpha", {"name": "alpha", "cells": keys})
    store.write_cell("alpha", keys[3], {**cell_row("alpha", 3), "max_grad_norm": 0.5})
    loaded = load_results(store, "alpha")
    assert loaded.coverage.complete and sorted(loaded.frame.cell_key) == keys
    assert loaded.frame.set_index("cell_key")["max_grad_norm"].isna().to_dict() == {
        "alpha-cell0": True, "alpha-cell1": True, "alpha-cell2": True, "alpha-cell3": False}
