"""`python -m bench.attacks_priced`: each attack's strength against the models it needed.

Users with a training budget ask which attack gives the strongest frontier per model trained.
This benchmark runs one real sweep per experiment (by default the quickstart's MNIST and real
Fashion-MNIST, `fmnist_lira`) with every attack of `--attacks` at ε = ∞ and one finite ε, then
reads each attack's stored per-record scores and prints its AUC and TPR at 0.1 % and 1 % FPR
beside what it cost: the models it read (targets, shadows, QMIA's regressor), the seconds those
models took to train (each model's own `train_seconds`) and the seconds its scoring took
(`attack_seconds`).  LiRA online at `--shadows` shadows (16) is the yardstick.  The scores of
all `--trials` targets are pooled before the metrics (as Carlini et al. pool); with 500 records
per target TPR at 0.1 % FPR rests on < 1 false positive per 1 000 non-members: read it as
"TPR at no false positive" at this size.

The sweeps land in `--store` (a temporary folder unless given), so a rerun with the same store
trains nothing and only scores again.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from jobs.attacks.contract import ATTACKS
from jobs.metrics import roc_auc, tpr_at_fpr

DEFAULT_EXPERIMENTS = ("quickstart", "fmnist_lira")
DEFAULT_ATTACKS = ("lira_online", "rmia", "rmia_low_cost", "base", "qmia", "loss")
YARDSTICK = "lira_online"
#: What the regressor-trained attacks train beside the models: one regressor per target.
REGRESSORS = {"qmia": 1}


def sweep_overrides(experiment: str, store: Path, attacks: Sequence[str], epsilon: float,
                    shadows: int, trials: int) -> list[str]:
    """The command line of one sweep: the experiment, every attack, ε ∈ {∞, `epsilon`}, p = ½."""
    return [f"+experiment={experiment}", f"name=priced_{experiment}", f"store.root={store}",
            f"grid.attack=[{','.join(attacks)}]", f"grid.epsilon=[{epsilon},.inf]", "grid.p=[0.5]",
            f"grid.trial=[{','.join(str(t) for t in range(trials))}]", f"shadow.count={shadows}",
            "grid.policy=[quantile_max]", "cluster.include_dashboard=false"]


def priced_rows(store: Path, sweep: str, shadows: int) -> list[dict]:
    """One row per (ε, attack): metrics over the pooled targets' scores and the cost."""
    from sweeper.store.artifacts import ArtifactStore

    artifacts = ArtifactStore(str(store))
    cells = pd.read_parquet(store / "results" / "cells")
    cells = cells[cells["sweep"] == sweep]
    metas = [json.loads(path.read_text()) for path in (store / "models").glob("*/meta.json")]
    train = pd.DataFrame([{"role": m["role"], "epsilon": m["epsilon"], "seconds": m["train_seconds"]}
                          for m in metas if "train_seconds" in m])
    rows = []
    for (epsilon, attack), group in cells.groupby(["epsilon", "attack"], sort=False):
        scores = pd.concat([artifacts.read_scores(key) for key in group["scores_key"].unique()])
        values, members = scores["score"].to_numpy(float), scores["member"].to_numpy(bool)
        at = train[np.isclose(train["epsilon"], epsilon) | (np.isinf(train["epsilon"]) & math.isinf(epsilon))]
        per_shadow = float(at.loc[at["role"] == "shadow", "seconds"].median()) if (at["role"] == "shadow").any() else 0.0
        read = ATTACKS[attack].shadows_it_reads(ATTACKS[attack].settings_type(), shadows)
        targets = group["model_key"].nunique()
        rows.append({
            "epsilon": epsilon, "attack": attack, "auc": roc_auc(values, members),
            "tpr@0.1%": tpr_at_fpr(values, members, 0.001), "tpr@1%": tpr_at_fpr(values, members, 0.01),
            "targets": targets, "shadows": read, "regressors": REGRESSORS.get(attack, 0) * targets,
            "train_s": float(group.drop_duplicates("model_key")["train_seconds"].sum()) + read * per_shadow,
            "attack_s": float(group.drop_duplicates("scores_key")["attack_seconds"].sum()),
        })
    return rows


def table(rows: list[dict]) -> str:
    """The rows as docs/attacks.md's markdown table."""
    lines = ["| ε | attack | AUC | TPR@0.1% | TPR@1% | targets | shadows | regressors | train s | attack s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['epsilon']:g} | `{row['attack']}` | {row['auc']:.3f} | {row['tpr@0.1%']:.3f} | "
                     f"{row['tpr@1%']:.3f} | {row['targets']} | {row['shadows']} | {row['regressors']} | "
                     f"{row['train_s']:.0f} | {row['attack_s']:.1f} |")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.attacks_priced", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--experiments", nargs="+", default=list(DEFAULT_EXPERIMENTS))
    parser.add_argument("--attacks", nargs="+", default=list(DEFAULT_ATTACKS))
    parser.add_argument("--epsilon", type=float, default=4.0, help="the finite ε beside ε = ∞")
    parser.add_argument("--shadows", type=int, default=16, help="shadow.count (LiRA's yardstick)")
    parser.add_argument("--trials", type=int, default=1, help="targets per ε")
    parser.add_argument("--store", type=Path, default=None, help="the sweeps' store (default: temporary)")
    args = parser.parse_args(argv)
    if YARDSTICK not in args.attacks:
        parser.error(f"--attacks must hold the yardstick {YARDSTICK}")
    unknown = [a for a in args.attacks if a not in ATTACKS]
    if unknown:
        parser.error(f"unknown attacks {unknown}; known: {list(ATTACKS)}")
    store = args.store or Path(tempfile.mkdtemp(prefix="attacks_priced_"))
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; store {store}")
    for experiment in args.experiments:
        started = time.perf_counter()
        command = [sys.executable, "-m", "sweeper", *sweep_overrides(
            experiment, store, args.attacks, args.epsilon, args.shadows, args.trials)]
        done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            print(done.stderr[-3000:], file=sys.stderr)
            return done.returncode
        rows = priced_rows(store, f"priced_{experiment}", args.shadows)
        print(f"\n{experiment} (sweep wall {time.perf_counter() - started:.0f} s, load average "
              f"{os.getloadavg()[0]:.1f}):")
        print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
