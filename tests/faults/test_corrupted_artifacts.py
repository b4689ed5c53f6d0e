"""Fault 5: a truncated or altered file in the store is detected by its checksum and recomputed,
never used.  Real sweep on real Ray; the damage is done to the real files on disk."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sweeper.store.results import compact, load_results
from sweeper.runner import run_sweep
from sweeper.store.artifacts import ArtifactStore, CorruptArtifact

ROW_FIGURES = ["precision", "tp", "fp", "threshold", "auc", "model_key", "epsilon_spent"]


def _flip_byte(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.fixture(scope="module")
def sweep(ray_local, make_tiny_config, tmp_path_factory):
    cfg = make_tiny_config(tmp_path_factory.mktemp("corrupt"))
    cfg.name = "corrupt"
    cfg.grid.epsilon = [4.0]
    cfg.grid.attack = ["loss", "lira_offline"]
    first = run_sweep(cfg, progress=False)
    assert not first.failures
    return cfg, first


def test_damaged_results_and_model_are_recomputed_not_used(sweep):
    cfg, first = sweep
    root = Path(cfg.store.root)
    rows = first.results.set_index("cell_key")
    victim = rows[rows.attack == "loss"].iloc[0]
    target = victim.model_key
    target_cells = rows[rows.model_key == target].index
    # Truncate the target's logits, alter one byte of the cell's Parquet and of another cell's.
    logits = root / "models" / target / "pool_logits.npy"
    logits.write_bytes(logits.read_bytes()[:-40])
    cells_dir = root / "sweeps" / cfg.name / "cells"
    altered = [key for key in rows.index if key not in target_cells][0]
    _flip_byte(cells_dir / f"{target_cells[0]}.parquet", 200)
    for key in target_cells[1:]:
        (cells_dir / f"{key}.parquet").write_bytes(b"PAR1")  # truncated to its magic
    _flip_byte(cells_dir / f"{altered}.parquet", 300)

    store = ArtifactStore(root)
    assert not store.has_model(target)
    with pytest.raises(CorruptArtifact):
        store.read_model_outputs(target)
    # The damaged cell files read as corrupt; the compacted dataset, checked by its own checksum,
    # still holds every row.
    damaged = {*target_cells, altered}
    assert {key for key in rows.index if store.cell_state(cfg.name, key) == "corrupt"} == damaged
    assert set(load_results(store, cfg.name).frame.cell_key) == set(rows.index)

    said: list[str] = []
    second = run_sweep(cfg, progress=False, echo=said.append)
    assert not second.failures
    assert f"recomputed {len(damaged)} of {len(damaged)} cells whose files failed their checksum" \
        in said
    assert second.models_trained == 1  # the damaged target; its shadows are intact
    assert second.cells_computed == len(target_cells) + 1
    again = second.results.set_index("cell_key").sort_index()
    assert list(again.index) == sorted(rows.index)  # whole, no duplicates
    # Training and attacks are deterministic: the recomputed rows are the rows that were damaged.
    pd.testing.assert_frame_equal(again[ROW_FIGURES], rows.sort_index()[ROW_FIGURES])
    assert store.has_model(target)


def test_altered_model_weights_are_refused_on_read(sweep):
    cfg, first = sweep
    store = ArtifactStore(cfg.store.root)
    key = first.results.model_key.iloc[-1]
    weights = Path(cfg.store.root) / "models" / key / "model.pt"
    original = weights.read_bytes()
    _flip_byte(weights, len(original) // 2)
    try:
        with pytest.raises(CorruptArtifact, match="model.pt"):
            store.read_state_dict(key)
        assert not store.has_model(key)
    finally:
        weights.write_bytes(original)
    assert store.has_model(key)


def test_a_model_without_its_meta_is_absent(tmp_path):
    store = ArtifactStore(tmp_path)
    store.write_model("m", {"w": __import__("torch").zeros(2)}, np.zeros((3, 2)), np.ones(3, bool),
                      {"role": "target"})
    meta = tmp_path / "models" / "m" / "meta.json"
    checksums = json.loads(meta.read_text())["checksums"]
    assert set(checksums) == {"model.pt", "pool_logits.npy", "mask.npy"}
    meta.unlink()  # a crash between the files and their meta
    assert not store.has_model("m")


@pytest.mark.parametrize("damage", ["truncate", "alter", "lose checksum"])
def test_damaged_query_answers_read_as_absent(tmp_path, damage):
    store = ArtifactStore(tmp_path)
    answer = np.arange(12, dtype=np.float32).reshape(3, 4)
    store.write_query("q", answer)
    np.testing.assert_array_equal(store.read_query("q"), answer)
    path = tmp_path / "queries" / "q.npy"
    if damage == "truncate":
        path.write_bytes(path.read_bytes()[:-8])
    elif damage == "alter":
        _flip_byte(path, len(path.read_bytes()) - 1)
    else:
        path.with_suffix(".npy.sha256").unlink()
    assert not store.has_query("q")
    with pytest.raises((CorruptArtifact, FileNotFoundError)):
        store.read_query("q")


def test_damaged_scores_are_refused(tmp_path):
    store = ArtifactStore(tmp_path)
    frame = pd.DataFrame({"record_id": np.arange(5), "score": np.linspace(0, 1, 5),
                          "member": [True, False, True, False, True], "model_key": "m",
                          "attack": "loss"})
    store.write_scores("s", frame)
    pd.testing.assert_frame_equal(store.read_scores("s"), frame)
    _flip_byte(tmp_path / "scores" / "s.parquet", 40)
    with pytest.raises(CorruptArtifact):
        store.read_scores("s")


def _scores_dataset(root: Path, sweep: str) -> pd.DataFrame:
    """The store's readable per-record scores of `sweep`, in a fixed order."""
    frame = pd.read_parquet(root / "results" / "scores" / f"sweep={sweep}" / "part-0.parquet")
    return frame.sort_values(["scores_key", "record_id"], ignore_index=True)


def test_scores_that_fail_their_checksum_are_recomputed_and_a_grow_keeps_every_row(
        ray_local, make_tiny_config, tmp_path):
    """Issue 44.4: a damaged scores/<key>.parquet went unnoticed on a rerun, and growing the sweep
    then rebuilt results/scores without that attack's rows."""
    cfg = make_tiny_config(tmp_path)
    cfg.name = "scores"
    cfg.grid.epsilon, cfg.grid.p = [4.0], [0.5]
    cfg.grid.attack = ["loss", "lira_offline"]
    first = run_sweep(cfg, progress=False)
    assert not first.failures
    root, store = Path(cfg.store.root), ArtifactStore(cfg.store.root)
    held = _scores_dataset(root, cfg.name)
    by_attack = first.results.set_index("attack")
    loss_key = by_attack.loc["loss", "scores_key"]
    lira_key = by_attack.loc["lira_offline", "scores_key"]
    assert set(held.scores_key) == {loss_key, lira_key}

    # A rerun notices the damaged file and recomputes it from the stored models.
    _flip_byte(root / "scores" / f"{loss_key}.parquet", 100)
    with pytest.raises(CorruptArtifact):
        store.read_scores(loss_key)
    said: list[str] = []
    second = run_sweep(cfg, progress=False, echo=said.append)
    assert not second.failures and second.models_trained == 0 and second.cells_computed == 1
    assert "recomputed 1 of 1 cells whose files failed their checksum" in said, said
    pd.testing.assert_frame_equal(store.read_scores(loss_key),  # the file, recomputed
                                  held[held.scores_key == loss_key].drop(columns="scores_key")
                                  .reset_index(drop=True))
    pd.testing.assert_frame_equal(_scores_dataset(root, cfg.name), held)

    # Damaged again, its target gone too, and the sweep grown: the target is trained again, the
    # attack recomputed, and every row the results held is still there.
    target = by_attack.loc["lira_offline", "model_key"]
    _flip_byte(root / "scores" / f"{lira_key}.parquet", 100)
    shutil.rmtree(root / "models" / target)
    cfg.grid.attack = [*cfg.grid.attack, "always_member"]
    third = run_sweep(cfg, progress=False)
    assert not third.failures and third.models_trained == 1 and store.has_model(target)
    assert len(store.read_scores(lira_key)) == (held.scores_key == lira_key).sum()
    grown = _scores_dataset(root, cfg.name)
    kept = held.merge(grown, on=["scores_key", "record_id"], suffixes=("", "_now"))
    assert len(kept) == len(held), "rows the results held were dropped"
    np.testing.assert_array_equal(kept.score_now, kept.score)  # deterministic: the same scores
    assert set(grown.scores_key) == {loss_key, lira_key, *third.results.scores_key}

    # A rebuild that meets a damaged scores file (no rerun to recompute it first) keeps that
    # attack's rows from the dataset compacted before, checked by its own checksum.
    _flip_byte(root / "scores" / f"{loss_key}.parquet", 100)
    rows = third.results
    compact(store, cfg.name, list(rows.cell_key[rows.attack != "always_member"]))
    rebuilt = _scores_dataset(root, cfg.name)
    pd.testing.assert_frame_equal(
        rebuilt[rebuilt.scores_key == loss_key].reset_index(drop=True),
        held[held.scores_key == loss_key].reset_index(drop=True))
