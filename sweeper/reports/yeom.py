"""Yeom et al. (CSF 2018): the `generalization` report, membership advantage against overfitting.

Their measures are here too (`advantage`, `best_advantage`, `yeom_threshold`,
`expected_loss_gap`): each is a definition of the paper, computed from a target's per-record
scores.  Writes the PNG and, next to it, a CSV with exactly the points drawn.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import pandas as pd

from sweeper.figures import colours, panel_grid, save_figure
from sweeper.formats import format_epsilon
from sweeper.reports.loading import SCORES_COLUMNS, load_target_scores
from sweeper.reports.report_registry import register_report
from jobs.attacks.contract import ATTACKS
from sweeper.reports.tables import groups, panel_columns, require, write_csv

GENERALIZATION_COLUMNS = ["attack", "epsilon", "model_key", "scores_key", "train_accuracy",
                          "test_accuracy"]


@dataclass(frozen=True)
class Adversaries:
    """The two attacks the report reads, found by what they declare, never by name: the
    threshold adversary, whose scores are each record's −loss (`Attack.scores_losses`), and
    Adversary 1, which divides by a loss bound (`Attack.loss_bound`); and the CSV's series,
    what each plotted point is."""

    loss: str
    randomized: str

    @classmethod
    def registered(cls) -> "Adversaries":
        def the_one(holds: Callable[[Any], bool], what: str) -> str:
            names = [name for name, attack in ATTACKS.items() if holds(attack)]
            if len(names) != 1:
                raise LookupError(f"generalization report: {len(names)} registered attacks "
                                  f"{what} ({names}), not one")
            return names[0]
        return cls(the_one(lambda attack: attack.scores_losses, "score each record's −loss"),
                   the_one(lambda attack: attack.loss_bound is not None, "declare a loss bound"))

    @property
    def threshold_series(self) -> str:
        return f"{self.loss}: Yeom's threshold (mean training loss)"

    @property
    def best_series(self) -> str:
        return f"{self.loss}: best threshold (max TPR − FPR)"

    @property
    def randomized_series(self) -> str:
        return f"{self.randomized}: Adversary 1"


def advantage(decisions: np.ndarray, member: np.ndarray) -> float:
    """Yeom et al.'s membership advantage of yes/no decisions: TPR − FPR (NaN without both kinds)."""
    decisions, member = np.asarray(decisions, bool), np.asarray(member, bool)
    if member.all() or not member.any():
        return math.nan
    return float(decisions[member].mean() - decisions[~member].mean())


def best_advantage(scores: np.ndarray, member: np.ndarray) -> float:
    """max over thresholds t of TPR − FPR for "member iff score ≥ t" (accepting none gives 0).

    The threshold-free advantage (Yeom et al.'s and Jayaraman et al.'s meaning): an upper envelope no
    single rule fixed in advance is promised.  A NaN score is "non-member" at every threshold.
    """
    scores, member = np.asarray(scores, float), np.asarray(member, bool)
    if member.all() or not member.any():
        return math.nan
    finite = ~np.isnan(scores)
    if not finite.any():
        return 0.0
    order = np.argsort(-scores[finite], kind="stable")
    ranked, is_member = scores[finite][order], member[finite][order]
    tpr = np.cumsum(is_member) / member.sum()
    fpr = np.cumsum(~is_member) / (~member).sum()
    last_of_tie = np.r_[ranked[1:] != ranked[:-1], True]  # a threshold accepts all its ties
    return float(max(0.0, (tpr - fpr)[last_of_tie].max(initial=0.0)))


def yeom_threshold(scores: np.ndarray, member: np.ndarray) -> tuple[float, float]:
    """Yeom et al.'s threshold rule for the loss attack: (mean training loss, its advantage).

    The adversary is told the model's average training loss (Yeom et al. §3.3 set the threshold
    at the published training error; Jayaraman et al.'s reference implementation says "member"
    iff per-record loss ≤ the training loss).  `scores` are the loss attack's, −loss with p_y
    clamped; the training loss is estimated by the evaluated members' mean loss (finite scores).
    A NaN score is "non-member".
    """
    loss, member = -np.asarray(scores, float), np.asarray(member, bool)
    known = member & ~np.isnan(loss)
    if not known.any():
        return math.nan, math.nan
    threshold = float(loss[known].mean())
    return threshold, advantage(loss <= threshold, member)


def expected_loss_gap(scores: np.ndarray, member: np.ndarray, bound: float) -> float:
    """Yeom et al.'s Theorem 2 line for Adversary 1: (E_non-member[ℓ] − E_member[ℓ]) / B.

    ℓ = min(loss, B), the loss Adversary 1 reads (`jobs.attacks.basic.loss_randomized`), from the loss
    attack's scores (−loss) of the same target over the same evaluated records, so Adversary 1's
    expected advantage on these records is exactly this value.
    """
    loss = np.minimum(-np.asarray(scores, float), bound)
    member = np.asarray(member, bool)
    keep = ~np.isnan(loss)
    if not (keep & member).any() or not (keep & ~member).any():
        return math.nan
    return float((loss[keep & ~member].mean() - loss[keep & member].mean()) / bound)


def default_loss_bound() -> float:
    """B of rows that do not carry it (`loss_bound`): the attack's default, −ln(loss_clamp)."""
    from jobs.attacks.basic import yeom_loss_bound
    from jobs.attacks.section import AttackSettings
    return yeom_loss_bound(AttackSettings())


def _row_loss_bounds(frame: pd.DataFrame, randomized: str) -> dict[str, float]:
    """B that each target's Adversary 1 cell used, from the row's `loss_bound` column."""
    if "loss_bound" not in frame.columns:
        return {}
    rows = frame[(frame["attack"] == randomized) & frame["loss_bound"].notna()]
    return dict(zip(rows["model_key"], rows["loss_bound"].astype(float)))


def _generalization_table(frame: pd.DataFrame, scores: pd.DataFrame, bound: Optional[float],
                          adversaries: Adversaries) -> pd.DataFrame:
    """One row per (target, series): x, y and what they were computed from (long format).
    B is `bound` when given, else what each target's row says it used, else the default."""
    loss_attack, randomized_attack = adversaries.loss, adversaries.randomized
    row_bounds = _row_loss_bounds(frame, randomized_attack)
    keep = [c for c in ("dataset", "model", "epsilon", "delta", "p", "trial") if c in frame.columns]
    targets = (frame[frame["attack"].isin([loss_attack, randomized_attack])]
               .drop_duplicates(subset="model_key"))
    by_key = {key: rows for key, rows in scores.groupby(["model_key", "attack"], sort=False)}
    out = []
    for target in targets.to_dict("records"):
        key = target["model_key"]
        loss = by_key.get((key, loss_attack))
        if loss is None:
            raise ValueError(f"generalization report: target {key} has no per-record scores of "
                             f"the {loss_attack!r} attack (both figures read its losses)")
        loss = loss.sort_values("record_id")
        base = {c: target[c] for c in keep} | {"model_key": key}
        gap = float(target["train_accuracy"]) - float(target["test_accuracy"])
        threshold, yeom = yeom_threshold(loss["score"], loss["member"])
        out.append({**base, "series": adversaries.threshold_series, "x": gap, "y": yeom,
                    "x_is": "0–1 gap: train − test accuracy", "yeom_threshold_loss": threshold})
        out.append({**base, "series": adversaries.best_series, "x": gap,
                    "y": best_advantage(loss["score"], loss["member"]),
                    "x_is": "0–1 gap: train − test accuracy"})
        randomized = by_key.get((key, randomized_attack))
        if randomized is not None:
            decisions = randomized.sort_values("record_id")
            if not np.array_equal(decisions["record_id"].to_numpy(), loss["record_id"].to_numpy()):
                raise ValueError(f"generalization report: target {key}'s {loss_attack} and "
                                 f"{randomized_attack} scores cover different records")
            target_bound = (bound if bound is not None
                            else row_bounds.get(key, default_loss_bound()))
            out.append({**base, "series": adversaries.randomized_series,
                        "x": expected_loss_gap(loss["score"], loss["member"], target_bound),
                        "y": advantage(decisions["score"].to_numpy(float) >= 0.5,
                                       decisions["member"]),
                        "x_is": "expected loss gap / B", "loss_bound": target_bound})
    return pd.DataFrame(out)


@register_report("generalization", reads_scores=True)
def generalization_report(frame: pd.DataFrame, out_dir: Path, *,
                          scores: Optional[pd.DataFrame] = None,
                          store_root: Optional[str | Path] = None,
                          loss_bound: Optional[float] = None) -> list[Path]:
    """Yeom et al.: membership advantage grows with overfitting, whatever ε says.

    Every figure is computed per target from the stored per-record scores, never from a cell's
    policy threshold: a policy such as `quantile_max` picks the best-*precision* cut (accepting
    2.5 % of records), whose TPR − FPR is far below what Yeom et al. analyse and would seem to
    refute them.  Left panel, against the 0–1 generalization gap (train − test accuracy):
    Yeom's own threshold rule for the loss attack (member iff loss ≤ the mean training loss,
    `yeom_threshold`) and, labelled apart, the best threshold's advantage (`best_advantage`),
    with the line advantage = gap (Theorem 2 with the 0–1 loss, B = 1; the cross-entropy
    threshold may sit on either side of it).  Right panel, `loss_randomized` (Adversary 1, the
    theorem's own adversary) against its own Theorem 2 line: advantage = expected loss gap / B
    (`expected_loss_gap`, on the same cross-entropy Adversary 1 reads), where B is `loss_bound`
    (default: the `loss_bound` its row records, which the sweep's `attack.loss_bound` or
    −ln(loss_clamp) set).  One point per target, coloured by ε.
    """
    require(frame, GENERALIZATION_COLUMNS, "generalization")
    adversaries = Adversaries.registered()
    threshold_series, best_series, randomized_series = (
        adversaries.threshold_series, adversaries.best_series, adversaries.randomized_series)
    if not (frame["attack"] == adversaries.loss).any():
        raise ValueError(f"generalization report: no rows of the {adversaries.loss!r} attack")
    if scores is None:
        if store_root is None:
            raise ValueError("generalization report: needs the per-record scores: pass scores= "
                             "(see load_target_scores) or store_root=")
        scores = load_target_scores(frame, store_root, [adversaries.loss, adversaries.randomized])
    require(scores, SCORES_COLUMNS, "generalization", what="scores table")
    out_dir = Path(out_dir)
    table = _generalization_table(frame, scores, None if loss_bound is None else float(loss_bound),
                                  adversaries)
    panels = panel_columns(table, [])
    panel_groups = groups(table, panels)
    randomized = (table["series"] == randomized_series).any()
    epsilons = sorted(table["epsilon"].unique())
    colour = dict(zip(epsilons, colours(len(epsilons))))
    fig, axes = panel_grid(len(panel_groups) * (2 if randomized else 1), width=5.0,
                           columns=2 if randomized else 3)
    styles = {threshold_series: dict(marker="o", s=30), best_series: dict(marker="x", s=30),
              randomized_series: dict(marker="s", s=26)}
    for index, (key, panel_rows) in enumerate(panel_groups):
        head = " · ".join(str(v) for v in key)
        pairs: list[tuple[Any, tuple[str, ...], str, str]] = [(axes[index * (2 if randomized else 1)], (threshold_series, best_series),
                  "generalization gap (0–1 loss): train − test accuracy",
                  "advantage = gap (Yeom et al., Thm 2 with 0–1 loss, B = 1)")]
        if randomized:
            bounds = panel_rows.loc[panel_rows["series"] == randomized_series, "loss_bound"].unique()
            b_is = f"B = {bounds[0]:.3g}" if len(bounds) == 1 else "B per target"
            pairs.append((axes[index * 2 + 1], (randomized_series,),
                          f"expected loss gap / B (cross-entropy, {b_is})",
                          "advantage = E[loss gap]/B (Yeom et al., Thm 2)"))
        for ax, series, xlabel, line in pairs:
            shown = panel_rows[panel_rows["series"].isin(series)]
            for name in series:
                for eps in epsilons:
                    pts = shown[(shown["series"] == name) & (shown["epsilon"] == eps)]
                    if not pts.empty:
                        ax.scatter(pts["x"], pts["y"], color=colour[eps],
                                   label=f"{name}, ε={format_epsilon(eps)}", **styles[name])
            values = shown[["x", "y"]].to_numpy(float)
            low = min(0.0, float(np.nanmin(values))) if len(values) else 0.0
            high = max(0.05, float(np.nanmax(values)) * 1.1) if len(values) else 1.0
            ax.plot([low, high], [low, high], "--", color="black", lw=1, label=line)
            what = (f"{adversaries.loss} attack: Yeom's threshold and the best one"
                    if series[0] == threshold_series
                    else f"{adversaries.randomized}: Yeom et al.'s Adversary 1")
            ax.set(title=f"{head}\n{what}" if head else what, xlabel=xlabel,
                   ylabel="membership advantage (TPR − FPR)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=6)
    fig.suptitle("Membership advantage against the generalization gap (Yeom et al.)",
                 fontsize=10)
    return [save_figure(fig, out_dir / "generalization.png"),
            write_csv(table, out_dir / "generalization.csv")]
