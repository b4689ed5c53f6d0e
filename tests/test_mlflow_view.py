"""The frontier where MLflow's UI draws it (issue 32): series over ε on the sweep's run, paired
by step with the ε series (MLflow's line charts take a metric as x-axis and pair by step), and
the saved view MLflow's UI reads from an experiment tag (`mlflow.sharedViewState.<id>`: an
envelope {name, createdAt, state} whose state is JSON or `deflate;` + base64 of zlib).  Expected
values by hand from a small pooled table."""

from __future__ import annotations

import base64
import json
import math
import zlib

import pandas as pd
import pytest

from sweeper.run_records import CELL_METRICS, FRONTIER_EPSILON, frontier_series, frontier_view
from sweeper.mlflow_ui import experiment_url, view_tag, view_tag_value


def summary(policies=("quantile_max",)) -> pd.DataFrame:
    rows = []
    for policy in policies:
        for attack in ("loss", "lira_online"):
            for epsilon in (4.0, 1.0, math.inf):
                for p in (0.2, 0.5):
                    rows.append({"attack": attack, "policy": policy, "epsilon": epsilon,
                                 "delta": 1e-5, "p": p, "precision": p + epsilon / 100,
                                 "bound": 1.0 if math.isinf(epsilon) else p + 0.3})
    return pd.DataFrame(rows)


def test_the_frontier_is_a_series_over_epsilon_per_attack_and_p():
    series = frontier_series(summary())
    # ε's step is ε in thousandths, so a grown sweep shifts no point; ∞ is on no axis.
    assert series[FRONTIER_EPSILON] == [(1000, 1.0), (4000, 4.0)]
    steps, values = zip(*series["loss frontier/precision p 0.2"])
    assert steps == (1000, 4000) and values == pytest.approx((0.21, 0.24))
    steps, values = zip(*series["loss frontier/bound p 0.5"])
    assert steps == (1000, 4000) and values == pytest.approx((0.8, 0.8))
    grown = frontier_series(pd.concat([summary(), summary().assign(epsilon=2.0)]))
    assert grown["loss frontier/precision p 0.2"][0] == series["loss frontier/precision p 0.2"][0]
    assert frontier_series(summary()[summary()["epsilon"] == math.inf]) == {FRONTIER_EPSILON: []}
    assert len(series) == 1 + 2 * 2 * 2  # ε, then 2 attacks × 2 p × (precision, bound)
    # The policy names the chart only when the sweep has several.
    several = frontier_series(summary(("quantile_max", "best_threshold")))
    assert "loss best_threshold frontier/precision p 0.2" in several
    assert not any(key.startswith("loss frontier/") for key in several)


def test_the_always_member_baseline_is_charted_last():
    frame = pd.concat([summary(), summary().assign(attack="always_member")])
    sections = [section["name"] for section in
                frontier_view(frontier_series(frame))["compareRunSections"]]
    assert sections == ["lira_online frontier", "loss frontier", "always_member frontier"]


def test_the_view_opens_on_one_frontier_chart_per_attack_with_epsilon_as_x_axis():
    view = frontier_view(frontier_series(summary()))
    live = [card for card in view["compareRunCharts"] if not card["deleted"]]
    sections = {section["uuid"]: section["name"] for section in view["compareRunSections"]}
    assert sorted(sections[card["metricSectionId"]] for card in live) == \
        ["lira_online frontier", "loss frontier"]
    for card in live:
        assert card["type"] == "LINE" and card["xAxisKey"] == "metric"
        assert card["selectedXAxisMetricKey"] == FRONTIER_EPSILON
        assert card["useGlobalXaxisKey"] is False  # else MLflow's global "step" overrides it
        assert len(card["selectedMetricKeys"]) == 4  # 2 p × (precision, bound)
    hidden = {card["metricKey"] for card in view["compareRunCharts"] if card["deleted"]}
    assert set(CELL_METRICS) <= hidden  # ten-run bar charts of single numbers: not drawn
    assert {"cells", "violations", "headroom/epsilon_4"} <= hidden  # nor the sweep's own
    # MLflow draws a card of its own for every metric that has none: each series has one, hidden.
    assert {key for card in live for key in card["selectedMetricKeys"]} <= hidden
    assert view["runsHiddenMode"] == "SHOW_ALL"  # the sweep's run is created first: listed last
    assert "metrics.`precision`" in view["selectedColumns"]
    assert "metrics.`bound`" in view["selectedColumns"]


def test_the_view_tag_is_mlflows_envelope_and_the_url_opens_it():
    state = frontier_view(frontier_series(summary()))
    value = view_tag_value("quickstart", state, 1_700_000_000_000)
    assert len(value) <= 20_000  # MLflow's limit on an experiment tag's value
    envelope = json.loads(value)
    assert envelope["name"] == "quickstart: frontier" and envelope["createdAt"] == 1_700_000_000_000
    method, packed = envelope["state"].split(";", 1)
    assert method == "deflate" and json.loads(zlib.decompress(base64.b64decode(packed))) == state
    assert view_tag("quickstart") == "mlflow.sharedViewState.quickstart"
    url = experiment_url("sqlite:///x.db", "7", "quickstart")
    assert url == ("http://127.0.0.1:5000/#/experiments/7/runs?viewStateShareKey=quickstart"
                   "&compareRunsMode=CHART&workflowType=machine_learning")
