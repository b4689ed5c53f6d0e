"""What each MLflow run of a sweep holds, computed from results rows and the config (no MLflow
call here): a cell run's few metrics (`CELL_METRICS`) and name, its scores' quantiles as a
table, the sweep run's summary metrics, its dataset as an input, MLflow's source tags and the
config as flat parameters.  `sweeper.tracking.recorder` logs them.
"""

from __future__ import annotations

import getpass
import hashlib
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pandas as pd

from sweeper.axes import BY_NAME, RECIPE_AXES, swept, swept_in
from sweeper.credentials import redact, redact_tree
from sweeper.formats import epsilon_name, format_epsilon

#: ε = ∞ as the numeric metric `epsilon_value` (MLflow metrics are finite floats to its charts):
#: far above any ε a DP guarantee means anything at, so it sorts and plots last.
EPSILON_INF_VALUE = 1e9
#: A cell run's metrics, in this order (MLflow's run table and charts open on the first): the
#: precision and its interval, the bound (and, where they exist, the least U over the training's
#: privacy profile and, for a mechanism of known privacy, the tightest bound), the violation flag, AUC, TPR at 1 % FPR, test accuracy, ε spent, ε as a number.
#: Every other number of the row stays in the results' Parquet: ten more bar charts would bury
#: these.
CELL_METRICS = ("precision", "precision_ci_low", "precision_ci_high", "bound", "bound_profile",
                "bound_tight", "violation", "auc", "tpr_at_fpr_0.01", "test_accuracy",
                "epsilon_spent", "epsilon_value", "train_seconds", "attack_seconds")
#: Quantiles of a cell's per-record scores, members and non-members apart: a table on its run.
SCORE_QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)
#: A bound at or above this bounds nothing an attack could show (`summary_metrics`).
VACUOUS_BOUND = 0.99


def epsilon_value(epsilon: float) -> float:
    """ε as a plottable number: `EPSILON_INF_VALUE` for ∞ (no DP)."""
    return EPSILON_INF_VALUE if math.isinf(epsilon) else float(epsilon)


def cell_metrics(row: dict[str, Any]) -> list[tuple[str, float]]:
    """A cell's `CELL_METRICS` in that order, those the row has as finite numbers (a NaN, e.g. ε
    spent at ε = ∞ or the tightest bound of a trained network, is left out)."""
    values = {**row, "violation": float(row["violation"]),
              "epsilon_value": epsilon_value(row["epsilon"])}
    found = [(name, values.get(name)) for name in CELL_METRICS]
    return [(name, float(value)) for name, value in found
            if isinstance(value, (int, float)) and math.isfinite(float(value))]


def score_quantiles(scores) -> Optional[pd.DataFrame]:
    """A cell's per-record scores in a small table: one row per group (`member`, `nonmember`),
    its records with a score and their `SCORE_QUANTILES` (numpy's default, linear; columns q10,
    q25, …).  Where the two rows sit apart is what the attack found; the cell's threshold (in
    Parquet) is where it cut.  `scores` has `score` and `member` columns (pyarrow or pandas); a
    group without scores is left out, None when neither has any."""
    score = np.asarray(scores["score"].to_numpy(), dtype=float)  # a null score reads as NaN
    member = np.asarray(scores["member"].to_numpy(), dtype=bool)
    rows = []
    for group, mask in (("member", member), ("nonmember", ~member)):
        values = score[mask & ~np.isnan(score)]
        if len(values):
            rows.append({"records": group, "count": len(values),
                         **{f"q{round(q * 100):02d}": float(v) for q, v in
                            zip(SCORE_QUANTILES, np.quantile(values, SCORE_QUANTILES))}})
    return pd.DataFrame(rows) if rows else None


#: The sweep's summary, in the order MLflow's run page lists them (the order first logged):
#: cells, violations and how far the best attack came past a bound that bounds something.
LARGEST_EXCESS = "max precision - bound"


def summary_metrics(results, models_trained: Optional[int] = None,
                    wall_seconds: Optional[float] = None) -> dict[str, float]:
    """The sweep run's own metrics, the summary first: cells, violations (the count a reader
    acts on), the largest precision − bound over the cells whose bound is below
    `VACUOUS_BOUND` (`LARGEST_EXCESS`: negative while every attack stays under its bound), then
    models trained and wall seconds when the caller knows them, and per ε the least bound −
    precision over those cells (`headroom/epsilon_4`): how close the best attack came to a
    bound that bounds something.  Not where U ≈ 1: there precision 1.0 against U = 0.99999997
    reads +3e-8, a gap nobody can act on, so such cells count in neither."""
    metrics = {"cells": float(len(results)),
               "violations": float(results["violation"].sum()) if len(results) else 0.0}
    bounded = results[results["bound"] < VACUOUS_BOUND] if len(results) else results
    excess = float((bounded["precision"] - bounded["bound"]).max()) if len(bounded) else math.nan
    if math.isfinite(excess):
        metrics[LARGEST_EXCESS] = excess
    if models_trained is not None:
        metrics["models_trained"] = float(models_trained)
    if wall_seconds is not None:
        metrics["wall_seconds"] = float(wall_seconds)
    if len(bounded):
        headroom = (bounded["bound"] - bounded["precision"]).groupby(bounded["epsilon"]).min()
        for epsilon, gap in headroom.items():
            if math.isfinite(gap):
                metrics[f"headroom/epsilon_{epsilon_name(epsilon)}"] = float(gap)
    return metrics


def dataset_input(params: dict[str, Any]):
    """The sweep's dataset as an MLflow input (the run page's Datasets column): its name
    (`synthetic` when stand-in records replaced it), a digest of its settings and, as profile,
    what sizes the pool: `members` or `pool_size` as set, else the whole pool's records (the
    stand-in's, or the dataset's), then eval_records and test_size; nothing unset (null)."""
    import json

    from mlflow.entities import Dataset, DatasetInput, InputTag

    from sweeper.config.problems import pool_without_cut

    settings = {key.removeprefix("dataset."): value for key, value in params.items()
                if key.startswith("dataset.") and key != "dataset.data_dir"}
    text = json.dumps(settings, sort_keys=True, default=str)
    name = str(settings.get("name", "dataset")) + (" (synthetic)" if settings.get("synthetic") else "")
    sized = {key: settings.get(key) for key in ("members", "pool_size")}
    if sized["members"] is None and sized["pool_size"] is None:
        sized["pool_size"] = pool_without_cut(str(settings.get("name")),
                                              int(settings.get("test_size") or 0),
                                              bool(settings.get("synthetic")))
    profile = {key: value for key, value in {**sized, "eval_records": settings.get("eval_records"),
                                              "test_size": settings.get("test_size")}.items()
               if value is not None}
    dataset = Dataset(name=name, digest=hashlib.sha256(text.encode()).hexdigest()[:8],
                      source_type="sweeper", source=text,
                      profile=json.dumps(profile, default=str))
    return DatasetInput(dataset, tags=[InputTag("mlflow.data.context", "training")])


def source_tags() -> dict[str, str]:
    """MLflow's standard run tags, as `mlflow.start_run` would set them: the program that ran
    the sweep, its user, and the commit of sweeper's own git checkout (when it is one)."""
    from mlflow.utils import mlflow_tags
    from mlflow.utils.git_utils import get_git_branch, get_git_commit, get_git_repo_url

    main = sys.argv[0] if sys.argv and sys.argv[0] else "python"
    tags = {mlflow_tags.MLFLOW_SOURCE_NAME: str(Path(main).resolve()) if Path(main).exists() else main,
            mlflow_tags.MLFLOW_SOURCE_TYPE: "LOCAL",
            mlflow_tags.MLFLOW_USER: _user()}
    checkout = str(Path(__file__).resolve().parent)
    git = {mlflow_tags.MLFLOW_GIT_COMMIT: get_git_commit(checkout),
           mlflow_tags.MLFLOW_GIT_BRANCH: get_git_branch(checkout),
           mlflow_tags.MLFLOW_GIT_REPO_URL: get_git_repo_url(checkout)}
    tags.update({key: redact(value) for key, value in git.items() if value})
    return tags


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name in a bare container: MLflow's own fallback
        return "unknown"


def config_params(config: dict[str, Any]) -> dict[str, Any]:
    """A sweep's config as MLflow params (dotted keys), with its credentials masked."""
    flat: dict[str, Any] = {}

    def walk(prefix: str, node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(f"{prefix}.{key}" if prefix else str(key), value)
        else:
            flat[prefix] = node

    walk("", redact_tree(config))
    return flat


def cell_run_name(row: dict[str, Any], swept: Sequence[str] = ()) -> str:
    """A cell run's name: every coordinate but the dataset and model (the sweep's), what tells
    cells apart first: MLflow's run list cuts names at about 15 characters, so ε, p and the
    trial lead (`ε=4 p=0.3 t1 · lira_offline quantile_max δ=1e-05`).  Each training setting the
    sweep sweeps (`swept`, from `swept_recipe`) tells cells apart too, so its value joins them
    as its axis writes it, where `sweeper.failures.cell_label` puts it (`ε=4 p=0.3 C=0.5 t1 · …`)."""
    recipe = "".join(f" {BY_NAME[name].format(row[name])}" for name in swept
                     if not pd.isna(row.get(name)))
    return (f"ε={format_epsilon(row['epsilon'])} p={row['p']:g}{recipe} t{row['trial']} · "
            f"{row['attack']} {row['policy']} δ={row['delta']:g}")


def swept_recipe(params: dict[str, Any]) -> tuple[str, ...]:
    """The recipe axes a sweep sweeps (`sweeper.axes.swept_in`), from its config as MLflow params
    (`config_params`): a results row cannot tell, it records every recipe value."""
    return swept_in({key.removeprefix("grid."): value for key, value in params.items()
                     if key.startswith("grid.")})


#: The sweep run's ε as a metric, the x-axis of its frontier charts: MLflow pairs two metrics of
#: a run by step, and ε's step is `epsilon_step(ε)`, so a sweep grown by an ε or a p shifts none.
FRONTIER_EPSILON = "frontier epsilon"
#: ε's step: ε in thousandths (two ε closer than 0.001 would share one).
EPSILON_STEPS_PER_UNIT = 1000


def epsilon_step(epsilon: float) -> int:
    """The step a finite ε's frontier points are logged at."""
    return round(float(epsilon) * EPSILON_STEPS_PER_UNIT)


def frontier_groups(summary: pd.DataFrame) -> list[str]:
    """The coordinates that name one frontier chart: the attack, and the policy, δ and each
    training setting (`sweeper.axes.swept`) when the sweep has several (p is a line of the
    chart, ε its x-axis)."""
    return ["attack", *[column for column in ("policy", "delta")
                        if column in summary and summary[column].nunique() > 1],
            *[axis.name for axis in swept(summary)]]


def frontier_series(summary: pd.DataFrame) -> dict[str, list[tuple[int, float]]]:
    """The frontier as MLflow metric series, from `summarize_frontier`'s table: for each chart
    (`frontier_groups`) and p, `<chart> frontier/precision p <p>` (pooled over trials) and
    `<chart> frontier/bound p <p>`, each point at its ε's `epsilon_step`, and `FRONTIER_EPSILON`.
    ε = ∞ is left out: no axis holds it (a sweep at ∞ alone has no series but ε's, empty).
    The prefix before `/` is the chart's section."""
    finite = summary[np.isfinite(summary["epsilon"].to_numpy(float))]
    step = {epsilon: epsilon_step(epsilon) for epsilon in sorted(finite["epsilon"].unique())}
    series: dict[str, list[tuple[int, float]]] = {
        FRONTIER_EPSILON: [(index, float(epsilon)) for epsilon, index in step.items()]}
    keys = frontier_groups(finite)
    groups = sorted(finite.groupby(keys + ["p"], sort=True, dropna=False),
                    key=lambda group: _is_baseline(group[0][0]))  # stable: baselines last
    for key, rows in groups:
        *chart, p = key
        name = frontier_chart_name(dict(zip(keys, chart)))
        for measure in ("precision", "bound"):
            points = [(step[e], float(v)) for e, v in zip(rows["epsilon"], rows[measure])
                      if math.isfinite(float(v))]
            if points:
                series[f"{name}/{measure} p {p:g}"] = sorted(points)
    return series


def _is_baseline(attack: str) -> bool:
    """Whether `attack` is a baseline (`Attack.baseline`): its chart last."""
    from jobs.attacks.contract import ATTACKS
    return attack in ATTACKS and ATTACKS[attack].baseline


def frontier_chart_name(coordinates: dict[str, Any]) -> str:
    """`lira_offline frontier`, with the policy, δ and swept training settings when they tell
    charts apart (`max_grad_norm 0.5`: MLflow's metric names take no `=`)."""
    parts = [str(coordinates["attack"])]
    if "policy" in coordinates:
        parts.append(str(coordinates["policy"]))
    if "delta" in coordinates:
        parts.append(f"delta {coordinates['delta']:g}")
    parts += [f"{axis.name} {axis.text(coordinates[axis.name])}" for axis in RECIPE_AXES
              if axis.name in coordinates]
    return " ".join(parts) + " frontier"


#: The cell-run columns the runs table shows (MLflow shows no metric by default), and the width
#: of its name column (190 px cuts `ε=4 p=0.3 t1 · lira_offline`).
TABLE_COLUMNS = ("precision", "bound", "violation", "auc", "epsilon_spent")
RUN_NAME_WIDTH = 360


#: The sweep run's own metrics (`summary_metrics`), charted by MLflow unless the view hides them.
SUMMARY_METRICS = ("cells", "violations", LARGEST_EXCESS, "models_trained", "wall_seconds")
#: The frontier figure (`frontier.png`) on the sweep's run, as MLflow's logged image of this key
#: (`MlflowClient.log_image`): the first card of the sweep's view, drawn as the figure is.
FRONTIER_IMAGE_KEY = "frontier"
#: The image card's section: one card a row, tall enough for the figure's square tile (MLflow's
#: default is three cards of 360 px a row).
FRONTIER_IMAGE_SECTION = {"uuid": "section-frontier-figure", "name": "frontier figure",
                          "display": True, "isReordered": True, "deleted": False,
                          "isGenerated": False, "columns": 1, "cardHeight": 900}


def frontier_view(series: dict[str, list[tuple[int, float]]],
                  hidden_cards: bool = True, image: bool = False) -> dict[str, Any]:
    """MLflow's saved-view state for a sweep (its UI's "Views", shared as an experiment tag,
    `sweeper.tracking.recorder.view_tag`): the runs table with the columns a reader compares, and the
    chart view opening on the frontier: with `image`, first the frontier figure itself
    (`FRONTIER_IMAGE_KEY`: each ε its colour, ε = ∞ labelled, the pooled intervals, which
    MLflow's line charts of one run cannot draw: they colour by run, not by series), then one
    line chart per attack whose x-axis is ε (`FRONTIER_EPSILON`), every p's precision and bound
    as its lines; the bar charts MLflow would draw of every other metric (one bar per run, ten
    runs) are left out, unless `hidden_cards` is False (a smaller state: a sweep with hundreds
    of series would pass MLflow's limit)."""
    charts: dict[str, list[str]] = {}
    for key in series:
        if key != FRONTIER_EPSILON:
            charts.setdefault(key.split("/", 1)[0], []).append(key)
    sections = [{"uuid": f"section-{index}", "name": name, "display": True, "isReordered": True,
                 "deleted": False, "isGenerated": False}
                for index, name in enumerate(charts)]
    cards = [{"uuid": f"chart-{index}", "type": "LINE", "metricSectionId": f"section-{index}",
              "deleted": False, "isGenerated": False, "metricKey": keys[0],
              "selectedMetricKeys": keys, "xAxisKey": "metric",
              "selectedXAxisMetricKey": FRONTIER_EPSILON, "useGlobalXaxisKey": False,
              "useGlobalLineSmoothing": False, "lineSmoothness": 0, "scaleType": "linear",
              "xAxisScaleType": "linear", "range": {}, "yAxisKey": "metric",
              "yAxisExpressions": [], "ignoreOutliers": False, "runsCountToCompare": 10,
              "displayPoints": True}
             for index, keys in enumerate(charts.values())]
    # MLflow gives every metric without a card one of its own: each series, ε, the cells' and
    # the sweep's metrics get a card marked deleted, so only the frontier charts are drawn.
    section_of = {key: f"section-{index}" for index, keys in enumerate(charts.values())
                  for key in keys}
    headroom = [f"headroom/epsilon_{epsilon_name(epsilon)}"
                for _, epsilon in series.get(FRONTIER_EPSILON, [])]
    names = [*section_of, *CELL_METRICS, *SUMMARY_METRICS, *headroom, FRONTIER_EPSILON]
    hidden = [{"uuid": f"hidden-{index}", "type": "BAR", "metricKey": name,
               "metricSectionId": section_of.get(name, "section-cells"), "deleted": True,
               "isGenerated": True}
              for index, name in enumerate(names)] if hidden_cards else []
    if image:
        sections.insert(0, dict(FRONTIER_IMAGE_SECTION))
        cards.insert(0, {"uuid": "chart-frontier-figure", "type": "IMAGE",
                         "metricSectionId": FRONTIER_IMAGE_SECTION["uuid"], "deleted": False,
                         "isGenerated": False, "imageKeys": [FRONTIER_IMAGE_KEY], "step": 0,
                         "showRunParams": False})
    return {"runsHiddenMode": "SHOW_ALL", "hideEmptyCharts": True, "isAccordionReordered": True,
            "selectedColumns": [f"metrics.`{name}`" for name in TABLE_COLUMNS],
            "columnOrder": ["attributes.`Run Name`",
                            *(f"metrics.`{name}`" for name in TABLE_COLUMNS)],
            "columnWidths": {"attributes.`Run Name`": RUN_NAME_WIDTH},
            "compareRunSections": sections, "compareRunCharts": cards + hidden}
