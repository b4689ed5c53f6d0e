"""The per-experiment reports: files written, CSVs holding exactly the plotted numbers.

Every expected number is derived by hand from the small synthetic tables below, never by calling
the report's own helpers.
"""

from __future__ import annotations

import inspect

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sweeper.reports import REPORTS, load_scores
from sweeper.store.artifacts import ArtifactStore
from testkit import report_frames
from testkit.report_frames import (DELTA, FIXED_BOUND_ACCURACY, FLAGGED, LIRA, derived_u,
                                   fixed_bound_frame, generalization_inputs, pdtp_inputs,
                                   ppv_frame, row)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# Student's t at 0.975 with 1 degree of freedom (two trials): tan(π·0.475), from the Cauchy
# distribution's quantile function, = 12.7062…
Z = math.tan(math.pi * (0.975 - 0.5))


def clopper_pearson(k: int, n: int) -> tuple[float, float]:
    """Clopper & Pearson's exact 95 % interval of k/n, by its definition: Beta quantiles."""
    from scipy.stats import beta

    return (0.0 if k == 0 else beta.ppf(0.025, k, n - k + 1),
            1.0 if k == n else beta.ppf(0.975, k + 1, n - k))


@pytest.fixture
def lira_frame() -> pd.DataFrame:
    return report_frames.lira_frame()


def assert_png(path: Path) -> None:
    assert path.exists() and path.read_bytes()[:8] == PNG_MAGIC


def outputs(paths: list[Path], suffix: str) -> list[Path]:
    return [p for p in paths if p.suffix == suffix]


def test_every_report_is_registered():
    assert set(REPORTS) == {"frontier", "thudi_lira", "fixed_bound", "ppv", "pdtp", "generalization",
                            "audit"}


def test_a_report_reads_the_scores_exactly_when_it_can_be_given_the_store():
    """`draw` passes `store_root` only to reports registered with reads_scores=True: a report
    that reads the scores but is not marked would be drawn without them, and vice versa."""
    for name, report in REPORTS.items():
        takes_store = "store_root" in inspect.signature(report.draw).parameters
        assert report.reads_scores == takes_store, name


def test_frontier_delegates_and_writes_its_numbers(lira_frame, tmp_path):
    paths = REPORTS["frontier"](lira_frame, tmp_path)
    assert_png(tmp_path / "frontier.png")
    table = pd.read_csv(tmp_path / "frontier.csv")
    cell = table[(table["attack"] == "lira_online") & (table["epsilon"] == 1.0) & (table["p"] == 0.5)]
    # Pooled: (60 + 35) / (100 + 50); the trials' mean, (0.60 + 0.70) / 2, beside it.
    assert cell["precision"].item() == pytest.approx(95 / 150)
    assert (cell["precision_ci_low"].item(), cell["precision_ci_high"].item()) == pytest.approx(
        clopper_pearson(95, 150))
    assert cell["mean_precision"].item() == pytest.approx(0.65)
    assert cell["bound"].item() == pytest.approx(derived_u(1.0, 0.5))
    assert set(paths) == {tmp_path / "frontier.png", tmp_path / "frontier.csv"}


def test_thudi_figure3_points_are_pooled_with_exact_bars(lira_frame, tmp_path):
    paths = REPORTS["thudi_lira"](lira_frame, tmp_path)
    for png in outputs(paths, ".png"):
        assert_png(png)
    assert len(outputs(paths, ".png")) == 2 and len(outputs(paths, ".csv")) == 2
    fig3 = pd.read_csv(tmp_path / "thudi_lira_precision.csv")
    assert set(fig3["attack"]) == {"lira_online"}  # the baseline is a line, not a panel
    assert fig3["oracle"].all()
    points = fig3[fig3["series"] == "precision"]
    assert len(points) == 4
    for (eps, p), trials in LIRA.items():
        tp = sum(round(t[0] * n) for t, n in zip(trials, FLAGGED))
        point = points[(points["epsilon"] == eps) & (points["p"] == p)]
        assert point["value"].item() == pytest.approx(tp / sum(FLAGGED))
        assert (point["low"].item(), point["high"].item()) == pytest.approx(
            clopper_pearson(tp, sum(FLAGGED)))
        assert point["n_trials"].item() == 2
        bound = fig3[(fig3["series"] == "bound U") & (fig3["epsilon"] == eps)
                     & np.isclose(fig3["p"], p)]
        assert bound["value"].item() == pytest.approx(derived_u(eps, p))
    baseline = fig3[fig3["series"] == "always-member baseline"].set_index("p")["value"]
    assert baseline[0.2] == pytest.approx((0.21 + 0.19 + 0.20 + 0.22) / 4)
    assert baseline[0.5] == pytest.approx((0.50 + 0.52 + 0.49 + 0.51) / 4)


def test_thudi_figure4_improvement_and_its_two_trial_interval(lira_frame, tmp_path):
    REPORTS["thudi_lira"](lira_frame, tmp_path)
    fig4 = pd.read_csv(tmp_path / "thudi_lira_improvement.csv")
    per_eps = fig4[fig4["series"] == "improvement"]
    assert len(per_eps) == 4
    # ε = 1, p = 0.5: differences 0.60 − 0.50 = 0.10 and 0.70 − 0.52 = 0.18.
    cell = per_eps[(per_eps["epsilon"] == 1.0) & (per_eps["p"] == 0.5)]
    sd = abs(0.18 - 0.10) / math.sqrt(2)
    half = Z * sd / math.sqrt(2)
    assert cell["value"].item() == pytest.approx(0.14)
    assert cell["low"].item() == pytest.approx(0.14 - half)
    # 0.14 + 0.508 is cut to what the mean difference can be: 1 − (0.50 + 0.52)/2 = 0.49.
    assert half > 0.49 - 0.14 and cell["high"].item() == pytest.approx(1 - 0.51)
    for (eps, p), trials in LIRA.items():
        d = [prec - base for prec, base, _, _ in trials]
        got = per_eps[(per_eps["epsilon"] == eps) & (per_eps["p"] == p)]["value"].item()
        assert got == pytest.approx(sum(d) / 2)
    # The paper's own curve: pooled over ε and trials (4 differences at p = 0.2).
    pooled = fig4[fig4["series"] == "improvement, all ε pooled"].set_index("p")
    d = np.array([0.30 - 0.21, 0.26 - 0.19, 0.40 - 0.20, 0.36 - 0.22])
    assert pooled.loc[0.2, "value"] == pytest.approx(d.mean())
    t_3 = 3.182446  # Student's t at 0.975 with 3 degrees of freedom (four differences), from tables
    assert pooled.loc[0.2, "high"] - pooled.loc[0.2, "value"] == pytest.approx(
        t_3 * d.std(ddof=1) / 2, rel=1e-6)


def test_improvement_interval_of_equal_differences_is_a_point():
    """No spread over trials, no width (scipy's t refuses a zero scale: the report must not)."""
    from sweeper.reports import improvement_interval

    mean, low, high, n = improvement_interval([0.6, 0.7, 0.8], [0.5, 0.6, 0.7],
                                              [0.4, 0.5, 0.6], [0.8, 0.9, 0.95])
    assert (mean, low, high, n) == pytest.approx((0.1, 0.1, 0.1, 3))
    nan_trial = improvement_interval([0.6, math.nan], [0.5, 0.5], [0.4, 0.4], [0.8, 0.8])
    assert nan_trial == pytest.approx((0.1, 0.4 - 0.5, 0.8 - 0.5, 1))  # one trial left: its CP


def test_reports_and_figures_never_import_the_frontier_command():
    """The frontier command draws with the reports, never the other way round: no import cycle."""
    import ast

    root = Path(__file__).resolve().parents[3] / "sweeper"
    for path in [*sorted((root / "reports").glob("*.py")), root / "figures.py"]:
        imported = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
        assert "sweeper.frontier" not in imported, path
        if path.name == "figures.py":  # the drawing module sits below every figure
            assert not any(name.startswith("sweeper.reports") for name in imported), path


def test_thudi_one_trial_uses_clopper_pearson_minus_baseline(lira_frame, tmp_path):
    one = lira_frame[(lira_frame["trial"] == 0) & (lira_frame["epsilon"] == 1.0)]
    REPORTS["thudi_lira"](one, tmp_path)
    fig4 = pd.read_csv(tmp_path / "thudi_lira_improvement.csv")
    assert set(fig4["series"]) == {"improvement"}  # a single ε: nothing to pool
    cell = fig4[fig4["p"] == 0.5]
    assert cell["value"].item() == pytest.approx(0.60 - 0.50)
    assert cell["low"].item() == pytest.approx(0.45 - 0.50)
    assert cell["high"].item() == pytest.approx(0.74 - 0.50)
    fig3 = pd.read_csv(tmp_path / "thudi_lira_precision.csv")
    point = fig3[(fig3["series"] == "precision") & (fig3["p"] == 0.5)]
    assert (point["low"].item(), point["high"].item()) == pytest.approx(clopper_pearson(60, 100))


def test_fixed_bound_plots_best_and_final_accuracy_per_target(tmp_path):
    paths = REPORTS["fixed_bound"](fixed_bound_frame(), tmp_path)
    assert len(outputs(paths, ".png")) == 2
    for png in outputs(paths, ".png"):
        assert_png(png)
    for name, index in (("best", 0), ("final", 1)):
        table = pd.read_csv(tmp_path / f"fixed_bound_{name}_accuracy.csv")
        assert len(table) == 4
        for (beta, p), trials in FIXED_BOUND_ACCURACY.items():
            values = [t[index] for t in trials]
            mean, half = sum(values) / 2, Z * abs(values[0] - values[1]) / math.sqrt(2) / math.sqrt(2)
            cell = table[(table["target_precision"] == beta) & (table["p"] == p)]
            assert cell["n_trials"].item() == 2  # one attack, one policy: no double counting
            assert cell["accuracy"].item() == pytest.approx(mean)
            assert cell["ci_low"].item() == pytest.approx(mean - half)
            assert cell["ci_high"].item() == pytest.approx(mean + half)


def test_ppv_against_gamma_with_both_bounds(tmp_path):
    paths = REPORTS["ppv"](ppv_frame(), tmp_path)
    assert_png(outputs(paths, ".png")[0])
    table = pd.read_csv(tmp_path / "ppv_vs_gamma.csv")
    assert "always_member" not in set(table["series"])
    loss = table[(table["series"] == "loss") & (table["policy"] == "calibrated")]
    assert sorted(loss["gamma"]) == pytest.approx([1.0, 9.0])
    at9 = loss[np.isclose(loss["gamma"], 9.0)]
    assert at9["value"].item() == pytest.approx(0.22)
    assert table[table["policy"] == "quantile_max"]["oracle"].all()
    assert not table[table["policy"] == "calibrated"]["oracle"].any()
    thudi = table[(table["series"] == "Thudi U") & np.isclose(table["gamma"], 9.0)
                  & (table["policy"] == "calibrated")]
    assert thudi["value"].item() == pytest.approx(derived_u(2.0, 0.1))
    # Jayaraman et al. Thm 4.2 at α = 0.2, γ = 9: f = max{0, 1 − δ − e²·0.2, e^-2·(1 − δ − 0.2)}.
    e = math.exp(2.0)
    f = max(0.0, 1 - DELTA - e * 0.2, (1 - DELTA - 0.2) / e)
    jay = table[(table["series"] == "Jayaraman bound at FPR (loss)") & np.isclose(table["gamma"], 9.0)
                & (table["policy"] == "calibrated")]
    assert jay["value"].item() == pytest.approx((1 - f) / (1 - f + 9 * 0.2))


def _pearson(x: np.ndarray, y: np.ndarray) -> float:
    return ((x - x.mean()) * (y - y.mean())).sum() / math.sqrt(
        ((x - x.mean()) ** 2).sum() * ((y - y.mean()) ** 2).sum())


def test_pdtp_per_record_accuracy_and_correlations(tmp_path):
    frame, scores, values = pdtp_inputs()
    paths = REPORTS["pdtp"](frame, tmp_path, scores=scores, pdtp_values=values)
    assert_png(outputs(paths, ".png")[0])
    points = pd.read_csv(tmp_path / "pdtp_vs_accuracy.csv").set_index("record_id")
    assert sorted(points.index) == [1, 2, 3, 4]  # record 0 is never a member: no PDTP
    # Record r is a member of r of the 4 targets (record 4: all four), said "member" on all
    # of them except record 3 on target 3 (NaN score → non-member, right: not a member there).
    want_acc = {1: 1 / 4, 2: 2 / 4, 3: 4 / 4, 4: 4 / 4}
    want_ours = {1: 0.1, 2: 0.4, 3: 0.9, 4: (3.5 + 2.5 + 2.5 + 2.5) / 4}
    want_paper = {1: 1.2, 2: 1.6, 3: 0.7, 4: (2.0 + 2.0 + 4.0 + 2.0) / 4}
    for record in want_acc:
        assert points.loc[record, "accuracy"] == pytest.approx(want_acc[record])
        assert points.loc[record, "evaluations"] == 4
        assert points.loc[record, "pdtp_seed_averaged"] == pytest.approx(want_ours[record])
        assert points.loc[record, "pdtp_seed_mean"] == pytest.approx(want_paper[record])
    x = np.array([want_acc[r] for r in (1, 2, 3, 4)])
    ours = np.array([want_ours[r] for r in (1, 2, 3, 4)])
    paper = np.array([want_paper[r] for r in (1, 2, 3, 4)])
    # Spearman by hand: ranks of x (3 and 4 tied → 3.5) against ranks of y.
    rx = np.array([1, 2, 3.5, 3.5])
    spearman_ours = _pearson(rx, np.array([1, 2, 3, 4.0]))
    spearman_paper = _pearson(rx, np.array([2, 3, 1, 4.0]))  # 1.2, 1.6, 0.7, 2.5
    summary = pd.read_csv(tmp_path / "pdtp_correlations.csv")
    # The figure's correlations and DTP-1 share are the paper's estimator's ...
    assert summary["pearson"].item() == pytest.approx(_pearson(x, paper))
    assert summary["spearman"].item() == pytest.approx(spearman_paper)
    assert summary["dtp1_share_seed_mean"].item() == 0.75  # 1.2, 1.6, 2.5 > 1; 0.7 is not
    # ... ours stands beside them.
    assert summary["pearson_seed_averaged"].item() == pytest.approx(_pearson(x, ours))
    assert summary["spearman_seed_averaged"].item() == pytest.approx(spearman_ours)
    assert summary["dtp1_share_seed_averaged"].item() == 0.25  # only 2.75 > 1
    assert summary["records"].item() == 4
    assert points["pearson"].unique() == pytest.approx([_pearson(x, paper)])


def test_pdtp_perfectly_monotone_gives_spearman_one(tmp_path):
    frame, scores, values = pdtp_inputs()
    # Without record 3's NaN score it is wrong on target 3: accuracies 1/4, 2/4, 3/4, 4/4, all
    # distinct and rising with our PDTP.
    scores.loc[(scores["attack"] == "loss") & scores["score"].isna(), "score"] = 1.0
    REPORTS["pdtp"](frame, tmp_path, scores=scores, pdtp_values=values)
    summary = pd.read_csv(tmp_path / "pdtp_correlations.csv")
    assert summary["spearman_seed_averaged"].item() == pytest.approx(1.0)


def test_pdtp_reads_scores_and_pdtp_tables_from_the_store(tmp_path):
    frame, scores, values = pdtp_inputs()
    frame["scores_key"] = frame["model_key"] + "-" + frame["attack"]
    root = tmp_path / "runs"
    store = ArtifactStore(root)
    for (key, attack), part in scores.groupby(["model_key", "attack"]):
        store.write_scores(f"{key}-{attack}", part.reset_index(drop=True))
    for trial, part in values.groupby(values["model_key"].str[-1].astype(int)):
        # The query answer's layout: record id, single, seed-averaged, mean over seeds.
        ids = part["record_id"].to_numpy(float)
        store.write_query(f"query{trial}", np.column_stack(
            [ids, np.zeros_like(ids), np.zeros_like(ids), part["pdtp_seed_mean"].to_numpy()]))
    loaded = load_scores(frame, root)
    assert len(loaded) == len(scores) and {"policy", "trial"} <= set(loaded.columns)
    from_store = REPORTS["pdtp"](frame, tmp_path / "a", store_root=root)
    direct = REPORTS["pdtp"](frame, tmp_path / "b", scores=scores, pdtp_values=values)
    pd.testing.assert_frame_equal(pd.read_csv(from_store[1]), pd.read_csv(direct[1]))
    with pytest.raises(ValueError, match="scores"):
        REPORTS["pdtp"](frame, tmp_path / "c", scores=scores)


def test_generalization_figures_on_a_hand_score_table(tmp_path):
    frame, scores = generalization_inputs()
    paths = REPORTS["generalization"](frame, tmp_path, scores=scores)
    assert_png(outputs(paths, ".png")[0])
    table = pd.read_csv(tmp_path / "generalization.csv").set_index(["model_key", "series"])
    got = lambda key, series: table.loc[(f"target{key}", series)]  # noqa: E731
    yeom, best = "loss: Yeom's threshold (mean training loss)", "loss: best threshold (max TPR − FPR)"
    # Target A.  Gap 0.9 − 0.7 = 0.2.  Mean training loss (0.1 + 0.2 + 0.3 + 0.6)/4 = 0.3;
    # loss ≤ 0.3: members 0.1, 0.2, 0.3 (TPR 3/4), non-member 0.25 (FPR 1/4) → 0.5.  Best:
    # loss ≤ 0.6 accepts every member and 0.25 only → 1 − 1/4 = 0.75.
    assert got("A", yeom)["x"] == pytest.approx(0.2) and got("A", best)["x"] == pytest.approx(0.2)
    assert got("A", yeom)["yeom_threshold_loss"] == pytest.approx(0.3)
    assert got("A", yeom)["y"] == pytest.approx(0.5)
    assert got("A", best)["y"] == pytest.approx(0.75)
    # Adversary 1 on A: decisions (1, 1, 1, 0) on members, (1, 0, 0, 0) on non-members → 3/4 − 1/4.
    # Its line: B = −ln(1e-6) (the default clamp); E[loss] non-members (0.25 + 0.8 + 1.5 + 2)/4
    # = 1.1375, members 0.3 → 0.8375 / B.
    randomized = got("A", "loss_randomized: Adversary 1")
    assert randomized["y"] == pytest.approx(0.5)
    assert randomized["x"] == pytest.approx(0.8375 / (6 * math.log(10)))
    # Target B.  Gap 0.4.  Mean training loss (0 + 0 + 0.05 + 0.1)/4 = 0.0375: the two zeros
    # only → TPR 1/2, FPR 0 → 0.5.  Best: loss ≤ 0.1 → 1 − 0 = 1.  No loss_randomized rows.
    assert got("B", yeom)["x"] == pytest.approx(0.4)
    assert got("B", yeom)["y"] == pytest.approx(0.5) and got("B", best)["y"] == pytest.approx(1.0)
    assert ("targetB", "loss_randomized: Adversary 1") not in table.index
    assert len(table) == 5  # one point per target and series, whatever the policies
    assert set(table["epsilon"]) == {1.0, math.inf}  # the colour of each point


def test_generalization_theorem_2_line_uses_the_loss_bound(tmp_path):
    frame, scores = generalization_inputs()
    REPORTS["generalization"](frame, tmp_path, scores=scores, loss_bound=1.0)
    table = pd.read_csv(tmp_path / "generalization.csv")
    line = table[table["series"] == "loss_randomized: Adversary 1"]
    # min(loss, 1): non-members 0.25, 0.8, 1, 1 → 0.7625; members 0.3 → 0.4625 / 1.
    assert line["x"].item() == pytest.approx(0.4625) and line["loss_bound"].item() == 1.0


def test_generalization_reads_the_loss_bound_each_row_used(tmp_path):
    """A sweep with attack.loss_bound=1 records B = 1 on its loss_randomized rows; the report
    divides by that, not by the default −ln(loss_clamp)."""
    frame, scores = generalization_inputs()
    frame["loss_bound"] = np.where(frame["attack"] == "loss_randomized", 1.0, np.nan)
    REPORTS["generalization"](frame, tmp_path, scores=scores)
    table = pd.read_csv(tmp_path / "generalization.csv")
    line = table[table["series"] == "loss_randomized: Adversary 1"]
    assert line["x"].item() == pytest.approx(0.4625) and line["loss_bound"].item() == 1.0


def test_generalization_finds_its_adversaries_by_what_they_declare(tmp_path, monkeypatch):
    """The report reads the attack that scores −loss and the one with a loss bound, found by
    those declarations (`Attack.scores_losses`, `Attack.loss_bound`), never by name: renamed,
    they are still found; a second attack declaring −loss scores is refused, not guessed."""
    import dataclasses

    from jobs.attacks.contract import ATTACKS
    frame, scores = generalization_inputs()
    entries = dict(ATTACKS._entries)
    renamed = {"loss": "threshold_loss", "loss_randomized": "adversary_one"}
    monkeypatch.setattr(ATTACKS, "_entries", {renamed.get(name, name): attack
                                              for name, attack in entries.items()})
    frame["attack"], scores["attack"] = frame["attack"].replace(renamed), scores["attack"].replace(renamed)
    REPORTS["generalization"](frame, tmp_path, scores=scores)
    series = set(pd.read_csv(tmp_path / "generalization.csv")["series"])
    assert series == {"threshold_loss: Yeom's threshold (mean training loss)",
                      "threshold_loss: best threshold (max TPR − FPR)", "adversary_one: Adversary 1"}
    ATTACKS._entries["canary_loss"] = dataclasses.replace(ATTACKS["canary_input_loss"], scores_losses=True)
    with pytest.raises(LookupError, match="2 registered attacks score each record's −loss"):
        REPORTS["generalization"](frame, tmp_path, scores=scores)


def test_best_advantage_accepts_ties_together_and_nan_never():
    from sweeper.reports import best_advantage

    # Scores 1, 1 (two members), 0.5 (a non-member), NaN (a member): at t = 1 both
    # ties are accepted, TPR 2/3, FPR 0 → 2/3; at t = 0.5 TPR 2/3, FPR 1; the NaN is never accepted.
    assert best_advantage(np.array([1.0, 1.0, 0.5, math.nan]),
                          np.array([True, True, False, True])) == pytest.approx(2 / 3)
    # A tie across a member and a non-member: one threshold takes both (1/2 − 1 < 0) or none (0).
    assert best_advantage(np.array([1.0, 1.0]), np.array([True, False])) == 0.0


def test_generalization_before_and_after_on_a_separable_loss_table(tmp_path):
    # Issue 12, item 5: 200 members with losses evenly over [0, 0.6], 200 non-members over
    # [0.3, 2.0].  The old report plotted the loss attack at quantile_max's best-precision cut;
    # the 10 lowest losses (2.5 % of 400) are all members, precision 1, so that cut has
    # TPR 10/200, FPR 0: advantage 0.05.  Yeom's rule (mean training loss 0.3): TPR 100/200, FPR
    # 1/200 (the non-member at exactly 0.3) → 0.495.  Best: loss ≤ 0.6 → TPR 1, FPR =
    # #{0.3 + 1.7·i/199 ≤ 0.6} / 200 = 36/200 → 0.82.
    members, others = np.linspace(0, 0.6, 200), np.linspace(0.3, 2.0, 200)
    frame = pd.DataFrame([row(attack="loss", epsilon=math.inf, p=0.5, trial=0, model_key="t",
                              scores_key="t-loss", train_accuracy=1.0, test_accuracy=0.665,
                              advantage=0.05, precision=1.0, baseline=0.5,
                              precision_ci_low=0.9, precision_ci_high=1.0)])
    scores = pd.DataFrame({"record_id": np.arange(400), "score": -np.r_[members, others],
                           "member": np.r_[np.ones(200, bool), np.zeros(200, bool)],
                           "model_key": "t", "attack": "loss"})
    REPORTS["generalization"](frame, tmp_path, scores=scores)
    table = pd.read_csv(tmp_path / "generalization.csv").set_index("series")
    yeom = table.loc["loss: Yeom's threshold (mean training loss)", "y"]
    best = table.loc["loss: best threshold (max TPR − FPR)", "y"]
    print(f"\ngap 0.335: before (quantile_max cut) advantage 0.050; after: Yeom's threshold "
          f"{yeom:.3f}, best threshold {best:.3f}")
    assert yeom == pytest.approx(0.495) and best == pytest.approx(0.82)


MISSING = {
    "frontier": ["violation", "bound_form"],
    "thudi_lira": ["baseline", "precision_ci_high"],
    "fixed_bound": ["target_precision", "best_test_accuracy"],
    "ppv": ["gamma", "fpr"],
    "pdtp": ["threshold"],
    "generalization": ["train_accuracy", "scores_key"],
}


@pytest.mark.parametrize("name", sorted(MISSING))
def test_missing_columns_are_named(name, lira_frame, tmp_path):
    frame = lira_frame.assign(target_precision=0.9, best_test_accuracy=0.9, model_key="k",
                              scores_key="s")
    frame = frame.drop(columns=MISSING[name])
    with pytest.raises(ValueError) as error:
        REPORTS[name](frame, tmp_path, **({"scores": pd.DataFrame(), "pdtp_values": pd.DataFrame()}
                                          if name == "pdtp" else {}))
    for column in MISSING[name]:
        assert column in str(error.value)


def test_missing_score_columns_are_named(tmp_path):
    frame, scores, values = pdtp_inputs()
    with pytest.raises(ValueError, match="member.*score table|scores table lacks column\\(s\\) member"):
        REPORTS["pdtp"](frame, tmp_path, scores=scores.drop(columns=["member"]), pdtp_values=values)
    with pytest.raises(ValueError, match="PDTP table lacks column\\(s\\) pdtp_seed_mean"):
        REPORTS["pdtp"](frame, tmp_path, scores=scores,
                        pdtp_values=values.drop(columns=["pdtp_seed_mean"]))


def test_an_improvement_interval_stays_where_precision_minus_baseline_can_be():
    """Issue 32.6: with two trials t's ends reached −1.5…2.7.  d = 0.9 − 0.5 and 0.2 − 0.5:
    mean 0.05, t half-width 12.706·0.495/√2 ≈ 4.45, cut to [−0.5, 1 − 0.5]."""
    from sweeper.reports import improvement_interval

    mean, low, high, n = improvement_interval([0.9, 0.2], [0.5, 0.5], [0.8, 0.1], [0.95, 0.3])
    assert (mean, low, high, n) == pytest.approx((0.05, -0.5, 0.5, 2))
    # Inside the range, t's interval is left whole: sd 0.02/√2, half-width 12.706·sd/√2 = 0.127.
    mean, low, high, _ = improvement_interval([0.61, 0.63], [0.5, 0.5], [0, 0], [1, 1])
    assert (low, high) == pytest.approx((0.12 - 12.706205 * 0.01, 0.12 + 12.706205 * 0.01))


def test_thudi_figure4_says_what_its_bars_are_and_compares_panels(lira_frame):
    """Issue 32.6: Fig. 4's legend said "95 % intervals" for Student t over trials; its points
    were joined by lines; each panel had its own y-scale."""
    from sweeper.reports.stats import IMPROVEMENT_TEXT
    from sweeper.reports.thudi_figures import thudi_lira_figures

    two_panels = pd.concat([lira_frame, lira_frame.assign(policy="other")])
    _, _, figure4, _ = thudi_lira_figures(two_panels)
    (legend,) = figure4.legends
    title = legend.get_title().get_text().replace("\n", " ")
    assert IMPROVEMENT_TEXT in title and "Student-t" in title
    panels = [axis for axis in figure4.axes if axis.get_lines()]
    assert len(panels) == 2 and panels[0].get_ylim() == panels[1].get_ylim()
    # One legend for both panels, naming every series either drew: with ε = 1 only in the
    # second panel, its entry is still there.
    one_short = two_panels[~((two_panels["policy"] != "other") & (two_panels["epsilon"] == 1.0))]
    _, _, short, _ = thudi_lira_figures(one_short)
    drawn = {label for axis in short.axes for label in axis.get_legend_handles_labels()[1]}
    (legend,) = short.legends
    assert drawn and {text.get_text() for text in legend.get_texts()} == drawn
    assert panels[1].get_shared_y_axes().joined(panels[0], panels[1])
    for axis in panels:
        points = [line for line in axis.get_lines() if line.get_marker() not in ("None", None, "")]
        assert points and all(line.get_linestyle() == "None" for line in points)


def declared(rule) -> list[str]:
    """The registered attacks whose declaration (`jobs.attacks.contract.Attack`) satisfies `rule`."""
    from jobs.attacks.contract import ATTACKS
    return [name for name, attack in ATTACKS.items() if rule(attack)]


BASELINES = declared(lambda attack: attack.baseline)
MEASURES = declared(lambda attack: attack.measures_records)


def test_the_reports_baselines_and_measures_are_what_the_attacks_declare():
    """Issue 31: no report names an attack.  A baseline is declared (`baseline=True`): it
    says "member" for everyone and its precision is the share of members; a per-record measure
    (PDTP) is no test.  Both read from the declarations."""
    from jobs.attacks.contract import ATTACKS, AttackInputs
    from sweeper.reports import baseline_attacks, measure_attacks, not_tests

    assert BASELINES and MEASURES  # else every check below checks nothing
    assert list(baseline_attacks()) == BASELINES and list(measure_attacks()) == MEASURES
    assert list(not_tests()) == [name for name in ATTACKS if name in BASELINES + MEASURES]
    rng = np.random.default_rng(0)
    inputs = AttackInputs(rng.normal(size=(6, 3)), np.arange(6) % 3)
    for name in BASELINES:  # what makes its precision the share of members
        attack = ATTACKS[name]
        assert attack.decides and (attack.score(inputs, attack.settings_type()) == 1).all(), name


@pytest.mark.parametrize("baseline", BASELINES)
def test_every_declared_baseline_is_drawn_as_the_baseline(baseline, lira_frame, tmp_path):
    """Its rows are the grey baseline in each test's panel, never a panel of their own; alone,
    they are the one panel, named after it; the Thudi figures take them as no test."""
    from sweeper.reports import frontier_figure

    frame = lira_frame.replace({"attack": {"always_member": baseline}})
    titles = [axis.get_title().splitlines()[0] for axis in frontier_figure(frame).axes
              if axis.get_title()]
    assert titles == ["lira_online"]
    alone = frame[frame["attack"] == baseline]
    assert [axis.get_title().splitlines()[0] for axis in frontier_figure(alone).axes
            if axis.get_title()] == [baseline]
    table = pd.read_csv(REPORTS["frontier"](frame, tmp_path)[1])
    assert set(table["attack"]) == {"lira_online", baseline}
    with pytest.raises(ValueError, match="no attack rows besides"):
        REPORTS["thudi_lira"](alone, tmp_path / "thudi")


def test_an_attack_that_reads_no_model_is_a_test_unless_declared_a_baseline(lira_frame,
                                                                           monkeypatch):
    """Issue 42: a random guess reads nothing of the model, as the always-member baseline does,
    but its precision is its own: it is drawn in a panel of its own, and the grey baseline
    squares stay the always-member rows' mean (on main it was pooled into them)."""
    from jobs.attacks.contract import NoSettings, register_attack, ATTACKS
    from sweeper.reports import baseline_attacks, frontier_figure

    monkeypatch.setattr(ATTACKS, "_entries", dict(ATTACKS._entries))  # registered for this test

    @register_attack("random_guess", NoSettings, needs_shadows=False, decides=True,
                     reads_model=False)
    def random_guess(inputs, settings):
        """Say "member" by a fair coin."""
        return np.random.default_rng(0).integers(0, 2, len(inputs.labels)).astype(float)

    assert baseline_attacks() == ("always_member",)
    guesses = lira_frame[lira_frame["attack"] == "always_member"].assign(
        attack="random_guess", precision=0.8)
    frame = pd.concat([lira_frame, guesses], ignore_index=True)
    figure = frontier_figure(frame)
    panels = [axis for axis in figure.axes if axis.get_title()]
    assert [axis.get_title().splitlines()[0] for axis in panels] == ["lira_online", "random_guess"]
    members = lira_frame[lira_frame["attack"] == "always_member"].groupby("p")["precision"].mean()
    for axis in panels:
        squares = [line for line in axis.get_lines() if line.get_marker() == "s"]
        assert len(squares) == 1
        assert squares[0].get_ydata() == pytest.approx(members.to_numpy())
    with pytest.raises(TypeError, match="a baseline reads no model"):
        register_attack("reads_the_model", NoSettings, needs_shadows=False, decides=True,
                        baseline=True)


@pytest.mark.parametrize("measure", MEASURES)
def test_every_declared_measure_is_no_test(measure, lira_frame, tmp_path):
    """A per-record measure's rows (no precision) are in no frontier panel nor Thudi figure."""
    from sweeper.reports import frontier_figure

    measured = lira_frame[lira_frame["attack"] == "lira_online"].assign(
        attack=measure, precision=math.nan, tp=0, fp=0)
    frame = pd.concat([lira_frame, measured], ignore_index=True)
    titles = [axis.get_title().splitlines()[0] for axis in frontier_figure(frame).axes
              if axis.get_title()]
    assert titles == ["lira_online"]
    REPORTS["thudi_lira"](frame, tmp_path)
    drawn = pd.concat([pd.read_csv(path) for path in tmp_path.glob("thudi_lira_*.csv")])
    assert set(drawn["attack"]) == {"lira_online"}
    with pytest.raises(ValueError, match="no attack rows besides"):
        REPORTS["thudi_lira"](measured, tmp_path / "alone")


def test_a_sweep_prints_its_audits_by_threat_model(tmp_path):
    """Issue 41: an audit sweep prints, per claimed ε, the accountant's ε, the last-iterate
    heuristic and the best valid audit of each threat model (from the CSV the report wrote);
    a sweep whose reports wrote no such table prints nothing of it."""
    from sweeper.reports import summaries
    from sweeper.reports.engine_audit import THREAT_MODELS_CSV

    table = tmp_path / THREAT_MODELS_CSV
    pd.DataFrame({"epsilon": [1.0, 8.0], "delta": [1e-5, 1e-5], "p": [0.5, 0.5],
                  "epsilon_spent_max": [0.9996, 7.9945], "epsilon_last_iterate": [0.9748, 5.866],
                  "best_audit_black_box_final": [float("nan"), 1.2317],
                  "best_audit_white_box_iterates": [0.85, 6.72]}).to_csv(table, index=False)
    (text,) = summaries([tmp_path / "audit_epsilon.png", table])
    header, first, second = text.splitlines()[3:6]
    assert header.split() == ["ε", "δ", "p", "ε", "spent", "ε", "last", "iterate",
                              "black_box_final", "white_box_iterates"]
    assert first.split() == ["1", "1e-05", "0.5", "1.00", "0.97", "–", "0.85"]
    assert second.split() == ["8", "1e-05", "0.5", "7.99", "5.87", "1.23", "6.72"]
    assert str(table) in text
    assert summaries([tmp_path / "audit_epsilon.png"]) == []
