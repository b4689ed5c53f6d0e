"""The frontier explains itself: its title, legend, caption and drawing read from the Figure's
artists (never from pixels), on a hand-made results table."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import LineCollection
from scipy.stats import beta

from sweeper.reports import frontier_figure, frontier_title

DELTA = 1e-5


def derived_u(eps: float, p: float, s: float = 0.01) -> float:
    """Thudi et al., Theorem 3.3, with the derived δ-term: 1/(1 + e^-ε·(1−p)/p·(1 − δ/s))."""
    return 1.0 / (1.0 + math.exp(-eps) * (1 - p) / p * (1 - DELTA / s))


def cells(violation_at=None, trials=(0,)) -> pd.DataFrame:
    rows = []
    for attack in ("lira_online", "loss", "always_member"):
        for eps in (2.0, 16.0, math.inf):
            for p in (0.2, 0.5, 0.8):
                for trial in trials:
                    precision = p + (0.1 if attack != "always_member" else 0.0)
                    rows.append(dict(
                        dataset="mnist_subset", model="mnist_cnn", attack=attack,
                        policy="quantile_max", policy_uses_target_labels=attack != "always_member",
                        epsilon=eps, delta=DELTA, p=p, trial=trial, precision=precision,
                        precision_ci_low=precision - 0.05, precision_ci_high=precision + 0.05,
                        tp=round(precision * 20), fp=20 - round(precision * 20),
                        violation=(attack, eps, p) == violation_at, tpr_floor=0.01,
                        bound_form="derived"))
    return pd.DataFrame(rows)


def legend_texts(fig) -> list[str]:
    (legend,) = fig.legends
    return [text.get_text() for text in legend.get_texts()]


def test_title_names_dataset_model_delta_shadows_and_trials():
    title = frontier_title(cells(trials=(0, 1)), "quickstart", shadows=16)
    for part in ("quickstart", "mnist_subset", "mnist_cnn", "δ = 1e-05", "16 shadow models",
                 "2 trials", "pooled over trials"):
        assert part in title
    assert "1 trial" in frontier_title(cells(), "quickstart")


def test_one_shared_legend_says_what_every_mark_means():
    fig = frontier_figure(cells(violation_at=("loss", 2.0, 0.2)), "title")
    assert all(axis.get_legend() is None for axis in fig.axes)  # one legend, for the figure
    texts = legend_texts(fig)
    assert {"ε = 2", "ε = 16", "ε = ∞"} <= set(texts)  # ε written as people write it
    joined = "\n".join(texts)
    for meaning in ("pooled precision ΣTP/(ΣTP+ΣFP) over trials",
                    "exact 95 % Clopper–Pearson interval", "bound U", "grey diagonal", "always-member",
                    "violation"):
        assert meaning in joined
    caption = "\n".join(text.get_text() for text in fig.texts)
    assert "oracle" in caption and "membership labels" in caption
    assert [axis.get_title().splitlines()[0] for axis in fig.axes] == ["lira_online", "loss"]
    assert all("oracle" in axis.get_title() for axis in fig.axes)


def test_no_violation_no_violation_entry():
    assert not any("violation" in text for text in legend_texts(frontier_figure(cells())))


def test_bounds_at_one_are_labelled():
    fig = frontier_figure(cells())
    # U(16, 0.2) = 0.99999…, U(∞, ·) = 1: both sit on the top edge; U(2, 0.2) = 0.65 does not.
    assert derived_u(16.0, 0.2) > 0.99 > derived_u(2.0, 0.2)
    notes = [text.get_text() for axis in fig.axes for text in axis.texts]
    assert notes and all(note == "U ≈ 1 for ε = 16, ∞" for note in notes)
    assert all(axis.get_ylim()[1] > 1.0 for axis in fig.axes)  # the line at 1 is inside the panel


def test_measurements_are_points_not_curves_and_bounds_are_curves():
    fig = frontier_figure(cells())
    lira = fig.axes[0]
    dashed = [line for line in lira.get_lines() if line.get_linestyle() == "--"]
    assert len(dashed) == 3  # one bound curve per ε
    x, y = dashed[0].get_data()  # drawn in ε order: ε = 2 first
    at = np.flatnonzero(np.isclose(x, 0.5))
    assert at.size and y[at[0]] == pytest.approx(derived_u(2.0, 0.5))
    markers = [line for line in lira.get_lines() if line.get_marker() in ("o", "s")]
    assert markers and all(line.get_linestyle() in ("None", "none", "") for line in markers)
    bars = [c for c in lira.collections if isinstance(c, LineCollection)]
    # ε = 2 at p = 0.5: the bar spans the exact interval of 12 of 20 flagged (one trial)
    spans = {(round(float(seg[0][1]), 6), round(float(seg[1][1]), 6))
             for c in bars for seg in c.get_segments()}
    assert (round(beta.ppf(0.025, 12, 9), 6), round(beta.ppf(0.975, 13, 8), 6)) in spans


def test_bars_are_the_exact_interval_of_the_trials_pooled():
    """Two trials flag 20 records each: at p = 0.5 the pooled precision is (12 + 12) / 40 and
    its bar is Clopper–Pearson's exact interval of 24 of 40 (Beta quantiles, by definition),
    not the mean of the trials' own ±0.05 ends."""
    fig = frontier_figure(cells(trials=(0, 1)))
    lira = fig.axes[0]
    bars = [c for c in lira.containers if hasattr(c, "has_yerr") and c.has_yerr]
    tops = {}
    for bar in bars:
        (vertical,) = [lines for lines in bar.lines[2] if isinstance(lines, LineCollection)]
        for (x, low), (_, high) in vertical.get_segments():
            tops[round(x, 3)] = (low, high)
    low, high = beta.ppf(0.025, 24, 17), beta.ppf(0.975, 25, 16)
    # ε = 16 is drawn in the middle, at p itself (the others 0.012 to either side).
    assert tops[0.5] == pytest.approx((low, high))
    assert high - low > 0.3 > 0.1  # wider than the ±0.05 a mean of the trials' ends would draw


def test_a_bound_profile_mark_never_hides_its_point():
    """Issue 32.6: at lira_offline, p = 0.2 a profile mark at 0.776 was drawn over the point at
    0.769.  The marks now sit under the points, beside the point they belong to."""
    frame = cells().assign(bound_profile=lambda f: f["precision"] + 0.007)
    lira = frontier_figure(frame).axes[0]
    marks = [c for c in lira.collections if not isinstance(c, LineCollection)
             and c.get_offsets().size and c.get_offsets()[0][1] > 0]
    points = [line for line in lira.get_lines() if line.get_marker() == "o"]
    assert marks and points
    assert max(mark.get_zorder() for mark in marks) < min(line.get_zorder() for line in points)
    xs = {round(float(x), 4) for mark in marks for x, _ in mark.get_offsets()}
    dodged = {round(float(x), 4) for line in points for x in line.get_xdata()}
    assert xs == dodged  # each mark at its point's (dodged) p
