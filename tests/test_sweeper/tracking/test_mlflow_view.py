"""The frontier where MLflow's UI draws it (issue 32): series over ε on the sweep's run, paired
by step with the ε series (MLflow's line charts take a metric as x-axis and pair by step), and
the saved view MLflow's UI reads from an experiment tag (`mlflow.sharedViewState.<id>`: an
envelope {name, createdAt, state} whose state is JSON or `deflate;` + base64 of zlib).  Expected
values by hand from a small pooled table."""

from __future__ import annotations

import base64
import json
import math
import re
import zlib
from pathlib import Path

import pandas as pd
import pytest

from sweeper.tracking.run_records import CELL_METRICS, FRONTIER_EPSILON, frontier_series, frontier_view
from sweeper.tracking.ui import experiment_page, experiment_url, view_tag, view_tag_value


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
    url = experiment_url("sqlite:///x.db", experiment_page("7", "quickstart"))
    assert url == ("http://127.0.0.1:5000/#/experiments/7/runs?viewStateShareKey=quickstart"
                   "&compareRunsMode=CHART&workflowType=machine_learning")


def test_the_view_opens_on_the_frontier_figure_when_it_is_logged():
    """Issue 43.2: the first card is the frontier figure itself (each ε its colour, ε = ∞
    labelled, the intervals: MLflow's line charts colour by run, so one run's six series were
    one red), one card to a row, tall; the line charts follow."""
    series = frontier_series(summary())
    view = frontier_view(series, image=True)
    first_section, *others = view["compareRunSections"]
    assert first_section["name"] == "frontier figure" and first_section["columns"] == 1
    assert first_section["cardHeight"] >= 700  # MLflow's default card is 360 px tall
    first_card = view["compareRunCharts"][0]
    assert first_card["type"] == "IMAGE" and first_card["imageKeys"] == ["frontier"]
    assert first_card["metricSectionId"] == first_section["uuid"] and not first_card["deleted"]
    assert [section["name"] for section in others] == ["lira_online frontier", "loss frontier"]
    plain = frontier_view(series)  # no figure logged: no card showing "no image"
    assert all(card["type"] != "IMAGE" for card in plain["compareRunCharts"])


def test_the_sweep_run_holds_its_summary_first_and_its_figure_as_a_logged_image(tmp_path):
    """On a real SQLite store, as the sweep's end logs them: the summary metrics come first in
    the run's metric list (the order MLflow's run page shows), the frontier figure is a logged
    image (once, however often it is logged) and the saved view's first card shows it."""
    from mlflow import MlflowClient
    from PIL import Image

    from sweeper.tracking.run_records import LARGEST_EXCESS, summary_metrics
    from sweeper.tracking.recorder import IMAGE_CARD_WIDTH, SweepTracker

    cells = summary().assign(dataset="digits", model="mlp", trial=0, tp=3, fp=2,
                             violation=False)
    cells.loc[(cells.attack == "loss") & (cells.epsilon == 4.0) & (cells.p == 0.2), "precision"] = 0.9
    png, card = tmp_path / "frontier.png", tmp_path / "card.png"
    Image.new("RGB", (900, 500), "navy").save(png)
    Image.new("RGB", (820, 700), "orange").save(card)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = SweepTracker(uri, "sweeper", "summed", "key", {}, (tmp_path / "mlartifacts").as_uri())
    for _ in range(2):  # a rerun logs the figure again
        tracker.log_frontier_image(png, card)
        tracker.log_summary(summary_metrics(cells))
        tracker.log_frontier_table(cells)
    assert tracker.failure is None
    client = MlflowClient(uri)
    run = client.get_run(tracker.run_id)
    keys = [metric.key for metric in run.to_proto().data.metrics]  # MLflow's own order
    assert keys[:3] == ["cells", "violations", LARGEST_EXCESS]
    # By hand: bounds below 0.99 are p + 0.3 at finite ε; the largest precision − bound is the
    # cell set to 0.9 at p = 0.2 (bound 0.5): +0.4.  Elsewhere precision − bound = ε/100 − 0.3.
    assert run.data.metrics[LARGEST_EXCESS] == pytest.approx(0.4)
    assert run.data.metrics["cells"] == len(cells)
    images = sorted(item.path for item in client.list_artifacts(tracker.run_id, "images"))
    # Named as MLflow's own log_image names an image and its thumbnail (which its UI parses):
    # the same names but for the time and the uuid.
    other = client.create_run(tracker.experiment_id).info.run_id
    client.log_image(other, Image.new("RGB", (40, 20)), key="frontier", step=0)
    theirs = sorted(item.path for item in client.list_artifacts(other, "images"))
    assert [shape(path) for path in images] == [shape(path) for path in theirs]
    assert len(images) == 2  # once, however often it was logged
    assert run.data.tags["mlflow.loggedImages"] == "True"
    # The thumbnail the card shows: wide enough to read, square (the card's tile), the figure at
    # its top; the image behind it (a click) is the figure itself.
    figure, thumbnail = (Path(client.download_artifacts(tracker.run_id, path)) for path in
                         sorted(images, key=lambda path: path.endswith(".webp")))
    with Image.open(thumbnail) as small, Image.open(figure) as whole:
        assert small.size == (IMAGE_CARD_WIDTH, IMAGE_CARD_WIDTH) and IMAGE_CARD_WIDTH > 256
        assert small.getpixel((IMAGE_CARD_WIDTH // 2, IMAGE_CARD_WIDTH - 1)) == (255, 255, 255)
        assert small.getpixel((10, 10)) == (255, 165, 0)  # drawn from the card figure
        assert whole.size == (900, 500) and whole.getpixel((10, 10)) == (0, 0, 128)
    tag = client.get_experiment(tracker.experiment_id).tags["mlflow.sharedViewState.summed"]
    state = json.loads(zlib.decompress(base64.b64decode(json.loads(tag)["state"].split(";", 1)[1])))
    assert state["compareRunSections"][0]["name"] == "frontier figure"
    assert state["compareRunCharts"][0]["imageKeys"] == ["frontier"]


def shape(path: str) -> str:
    """A logged image's artifact path with its time and uuid blanked."""
    return re.sub(r"\+timestamp\+\d+\+[0-9a-f-]{36}", "+timestamp+T+U", path)


def test_the_card_figure_is_legible_at_the_width_mlflow_gives_its_card():
    """Issue 51: beside MLflow 3.17's Assistant panel, a 1400-px browser gives the frontier's
    card about 417 px, where the thumbnail (`IMAGE_CARD_WIDTH` square, the card figure scaled
    to fit) is shown; every word of the card figure must then be at least 10 px high, where
    the full figure's smallest are under 8 (one panel; more panels, smaller)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from sweeper.reports.frontier_chart import frontier_card_figure, frontier_figure
    from sweeper.tracking.recorder import IMAGE_CARD_WIDTH
    from testkit.report_frames import lira_frame

    def smallest_word_on_card(figure, dpi: float) -> float:
        FigureCanvasAgg(figure)
        renderer = figure.canvas.get_renderer()
        width = figure.get_tightbbox(renderer).width * dpi  # px, as saved tight
        on_card = 417 / IMAGE_CARD_WIDTH * min(1.0, IMAGE_CARD_WIDTH / width)
        sizes = [text.get_fontsize() for text in figure.findobj(lambda a: hasattr(a, "get_fontsize"))
                 if getattr(text, "get_text", lambda: "")() and text.get_visible()]
        return min(sizes) * dpi / 72 * on_card

    assert smallest_word_on_card(frontier_card_figure(lira_frame(), "lira"), 100) >= 10
    assert smallest_word_on_card(frontier_figure(lira_frame(), "lira"), 120) < 8

