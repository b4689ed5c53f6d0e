"""The reports' only reads of the store: per-record scores and the stored PDTP tables.

Most reports draw from the results table alone; two (`pdtp`, `generalization`) also need what
each cell's attack said about each record, which the store keeps apart from the table (one
scores file per attack and target, one PDTP table per target).  Reading them is here, named by
what it returns, so a report module never opens the store itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from sweeper.store.columns import SCORE_COLUMNS
from sweeper.reports.tables import measure_attacks, require
from sweeper.store.artifacts import ArtifactStore

#: The per-record scores' columns, as the store holds them.
SCORES_COLUMNS = [column.name for column in SCORE_COLUMNS]
PDTP_VALUES_COLUMNS = ["model_key", "record_id", "pdtp_seed_mean"]


def load_scores(frame: pd.DataFrame, store_root: str | Path) -> pd.DataFrame:
    """Every per-record score of the sweep's cells, one row per (cell, record), with the
    cell's `scores_key`, policy and trial.

    Scores are stored once per (attack, target) under `scores_key`, while a cell adds its policy
    and trial; joining on `scores_key` gives each cell its own copy of its attack's scores.
    """
    require(frame, ["scores_key", "attack", "policy", "trial"], "pdtp")
    store = ArtifactStore(store_root)
    parts = []
    cells = frame[["scores_key", "policy", "trial"]].drop_duplicates()
    for scores_key, cell_rows in cells.groupby("scores_key", sort=False):
        try:
            scores = store.read_scores(scores_key)
        except FileNotFoundError:
            raise FileNotFoundError(f"pdtp report: per-record scores {scores_key} are missing "
                                    f"from {store.uri}/scores") from None
        parts.append(scores.merge(cell_rows, how="cross"))
    if not parts:
        return pd.DataFrame(columns=SCORES_COLUMNS + ["scores_key", "policy", "trial"])
    return pd.concat(parts, ignore_index=True)


def load_target_scores(frame: pd.DataFrame, store_root: str | Path,
                       attacks: Sequence[str]) -> pd.DataFrame:
    """The per-record scores of `attacks` on each target, each stored table read once."""
    require(frame, ["attack", "scores_key"], "generalization")
    store = ArtifactStore(store_root)
    keys = frame.loc[frame["attack"].isin(attacks), "scores_key"].dropna().unique()
    parts = []
    for key in keys:
        try:
            parts.append(store.read_scores(key))
        except FileNotFoundError:
            raise FileNotFoundError(f"generalization report: per-record scores {key} are missing "
                                    f"from {store.uri}/scores") from None
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=SCORES_COLUMNS)


def load_pdtp_values(frame: pd.DataFrame, store_root: str | Path) -> pd.DataFrame:
    """Long et al.'s per-record PDTP (the mean over seeds of per-seed PDTP values), per target.

    The pdtp attack's per-record score is our seed-averaged PDTP; the paper's estimator is only
    in the stored query answer (`jobs.attacks.pdtp.pdtp_table`), which each pdtp row names in
    `pdtp_query_key`.  Returns model_key, record_id, pdtp_seed_mean.
    """
    # Here, not with the module: jobs.attacks.pdtp loads torch, which no other report needs.
    from jobs.attacks.pdtp import TABLE_COLUMNS as PDTP_TABLE_COLUMNS

    require(frame, ["attack", "model_key", "pdtp_query_key"], "pdtp")
    store = ArtifactStore(store_root)
    rows = frame.loc[frame["attack"].isin(measure_attacks()), ["model_key", "pdtp_query_key"]]
    parts = []
    for model_key, query_key in rows.dropna().drop_duplicates().itertuples(index=False):
        try:
            table = pd.DataFrame(store.read_query(query_key), columns=list(PDTP_TABLE_COLUMNS))
        except FileNotFoundError:
            raise FileNotFoundError(f"pdtp report: the PDTP table {query_key} is missing from "
                                    f"{store.uri}/queries") from None
        parts.append(pd.DataFrame({"model_key": model_key,
                                   "record_id": table["record_id"].astype(np.int64),
                                   "pdtp_seed_mean": table["seed_mean"]}))
    if not parts:
        return pd.DataFrame(columns=PDTP_VALUES_COLUMNS)
    return pd.concat(parts, ignore_index=True)
