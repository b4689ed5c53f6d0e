"""`sweeper bounds`: each subcommand, its --json, and its refusal of bad input.

Reference values are derived by hand from the formulas (comments), not from the library.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from sweeper.cli.bounds_command import main

E = math.e
REPO = Path(__file__).resolve().parents[3]


def run_json(capsys, *argv: str):
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_precision_json_matches_hand_values(capsys):
    out = run_json(capsys, "precision", "--epsilon", "2", "--p", "0.01")
    (row,) = out["rows"]
    # U = p·e²/(p·e² + 1 − p) = 0.0738906/1.0638906 = 0.0694532 (the 2022 paper's "6.9%")
    assert row["upper"] == pytest.approx(0.01 * E**2 / (0.01 * E**2 + 0.99), rel=1e-12)
    # lower = 1/(1 + e²·0.99/0.01) = 1/(1 + 99e²) = 0.001365
    assert row["lower"] == pytest.approx(1.0 / (1.0 + 99.0 * E**2), rel=1e-12)
    assert row["tpr"] == 0.01 and row["delta"] == 0.0
    assert out["form"] == "derived"  # the default


def test_precision_form_flag_on_the_counterexample(capsys):
    # Randomized response, ε = ln 3, is (0, 1/2)-DP; at p = 1/4 the attack "output 1" has s = 3/4
    # and precision 1/2.  derived U(0, 1/2, 1/4, 3/4) = 1/(1 + 3·(1 − (1/2)/(3/4))) = 1/2;
    # printed U = 1/(1 + 3 − (1/2)·(3/4)/(3/4)) = 1/3.5 = 2/7.
    argv = ["precision", "--epsilon", "0", "--p", "0.25", "--delta", "0.5", "--tpr", "0.75"]
    out = run_json(capsys, *argv)
    assert out["form"] == "derived" and out["rows"][0]["upper"] == pytest.approx(0.5, rel=1e-15)
    out = run_json(capsys, *argv, "--form", "printed")
    assert out["form"] == "printed" and out["rows"][0]["upper"] == pytest.approx(2 / 7, rel=1e-15)
    assert main(argv + ["--form", "printed"]) == 0
    assert "printed form" in capsys.readouterr().out


def test_precision_table_over_lists(capsys):
    assert main(["precision", "--epsilon", "1,2,inf", "--p", "0.01,0.5", "--delta", "1e-5"]) == 0
    text = capsys.readouterr().out
    lines = text.strip().splitlines()
    assert "upper U" in lines[1] and "lower" in lines[1]
    assert len(lines) == 3 + 6  # intro, header, rule, 3×2 rows
    # ε = 2, p = 0.01, δ = 1e-5, s = 0.01, derived: 1/(1 + e^-2·99·(1 − 1e-5/0.01))
    #   = 1/(1 + 13.398197·0.999) = 1/14.384799 = 0.069518 (δ = 0 gives 0.069453)
    assert "0.06952" in text
    assert main(["precision", "--epsilon", "1,2,inf", "--p", "0.01,0.5", "--delta", "1e-5",
                 "--form", "printed"]) == 0
    # printed: 1/(1 + e^-2·99 − 1e-5·e^-2·0.99/0.01) = 1/(1 + 13.398197·(1 − 1e-5)) = 0.069454
    assert "0.06945" in capsys.readouterr().out
    assert len({len(line) for line in lines[1:]}) == 1  # aligned columns
    out = run_json(capsys, "precision", "--epsilon", "1,inf", "--p", "0.5")
    # ε = 1, p = 0.5, δ = 0: 1/(1 + e^-1); ε = ∞ is written as the string "inf", bound 1
    assert out["rows"][0]["upper"] == pytest.approx(1 / (1 + math.exp(-1)))
    assert out["rows"][1]["epsilon"] == "inf" and out["rows"][1]["upper"] == 1.0


def test_plan_epsilon_for_each_p(capsys):
    out = run_json(capsys, "plan", "--target", "0.8", "--p", "0.1,0.3,0.5")
    # δ = 0: ε = ln[(1−p)/p / (1/0.8 − 1)] = ln[4(1−p)/p] → ln 36, ln 9.333, ln 4
    got = [row["epsilon"] for row in out["rows"]]
    assert got == pytest.approx([math.log(36.0), math.log(4 * 0.7 / 0.3), math.log(4.0)])
    assert out["mode"] == "epsilon_for_p"


def test_plan_for_the_papers_fixed_targets(capsys):
    argv = ["plan", "--target", "0.953,0.881,0.731", "--p", "0.1,0.5", "--delta", "1e-5"]
    out = run_json(capsys, *argv, "--form", "printed")
    assert out["form"] == "printed"
    # printed, default s = 0.01: ε = ln[(1−p)(1/p − 1e-3) / (1/β − 1)]
    for row in out["rows"]:
        beta, p = row["target"], row["p"]
        expected = math.log((1 - p) * (1 / p - 1e-3) / (1 / beta - 1))
        assert row["epsilon"] == pytest.approx(expected, rel=1e-12)
    # β = 0.953 at p = 0.1: ln[0.9·9.999/(0.047/0.953)] = ln 182.47 = 5.2066: ε nearly doubles
    assert out["rows"][0]["epsilon"] == pytest.approx(5.2066, abs=1e-4)
    out = run_json(capsys, *argv)
    assert out["form"] == "derived"
    # derived: ε = ln[(1−p)/p·(1 − 1e-5/0.01) / (1/β − 1)] = ln[(1−p)/p·0.999 / (1/β − 1)]
    for row in out["rows"]:
        beta, p = row["target"], row["p"]
        expected = math.log((1 - p) / p * 0.999 / (1 / beta - 1))
        assert row["epsilon"] == pytest.approx(expected, rel=1e-12)
    # β = 0.953 at p = 0.1: ln[9·0.999·0.953/0.047] = ln 182.31 = 5.2057
    assert out["rows"][0]["epsilon"] == pytest.approx(5.2057, abs=1e-4)


def test_plan_largest_p_with_delta_in_both_forms(capsys):
    argv = ["plan", "--target", "0.8", "--epsilon", "3", "--delta", "1e-5"]
    # derived: p = 1/(1 + k/(1 − δ/s)), k = 0.25e³ = 5.021384, 1 − δ/s = 0.999 → 0.165936
    (row,) = run_json(capsys, *argv)["rows"]
    assert row["p"] == pytest.approx(1 / (1 + 0.25 * math.exp(3) / 0.999), rel=1e-12)
    # printed: smaller root of δp² − (δ + s + k·s)p + s = 0, bq = δ + s + k·s
    d, s, k = 1e-5, 0.01, 0.25 * math.exp(3)
    bq = d + s + k * s
    out = run_json(capsys, *argv, "--form", "printed")
    assert out["form"] == "printed" and out["mode"] == "p_for_epsilon"
    assert out["rows"][0]["p"] == pytest.approx((bq - math.sqrt(bq * bq - 4 * d * s)) / (2 * d),
                                                rel=1e-9)
    # derived with δ ≥ s: vacuous for every p > 0, so 0 and a note; ε-for-p rows say why
    (row,) = run_json(capsys, "plan", "--target", "0.8", "--epsilon", "1", "--delta", "0.02")["rows"]
    assert row["p"] == 0.0 and "vacuous" in row["note"]
    (row,) = run_json(capsys, "plan", "--target", "0.8", "--p", "0.3", "--delta", "0.02")["rows"]
    assert row["epsilon"] is None and "vacuous for every ε and every p > 0" in row["note"]


def test_plan_reports_impossible_rows_without_crashing(capsys):
    assert main(["plan", "--target", "0.8", "--p", "0.5,0.9"]) == 0
    text = capsys.readouterr().out
    row = next(line for line in text.splitlines() if line.lstrip().startswith("0.8  0.9"))
    assert "below the prior p=0.9" in row and "p ≤ 0.8" in row
    out = run_json(capsys, "plan", "--target", "0.8", "--p", "0.5,0.9")
    assert out["rows"][0]["epsilon"] == pytest.approx(math.log(4.0)) and out["rows"][0]["note"] == ""
    assert out["rows"][1]["epsilon"] is None and "no training can push" in out["rows"][1]["note"]


def test_plan_largest_p_for_each_epsilon(capsys):
    out = run_json(capsys, "plan", "--target", "0.8", "--epsilon", "1,3,8,inf")
    # δ = 0: k = 0.25·e^ε, p = 1/(1 + k): 0.59542, 0.16605, 0.0013401; ε = ∞ → 0
    got = [row["p"] for row in out["rows"]]
    assert got[:3] == pytest.approx([1 / (1 + 0.25 * math.exp(e)) for e in (1, 3, 8)], rel=1e-12)
    assert got[3] == 0.0 and "non-private" in out["rows"][3]["note"]
    assert out["mode"] == "p_for_epsilon"


def test_compare_table_and_json(capsys):
    assert main(["compare", "--p", "0.5"]) == 0
    text = capsys.readouterr().out
    for name in ("Thudi U", "Sablayrolles", "Mahloujifar", "Jayaraman", "Humphries", "Erlingsson",
                 "Yeom"):
        assert name in text
    out = run_json(capsys, "compare", "--p", "0.5", "--epsilon-grid", "0.5,1")
    row = out["rows"][1]  # ε = 1
    assert row["thudi_precision"] == pytest.approx(1 / (1 + math.exp(-1)))  # 0.731059
    assert row["mahloujifar_precision"] == pytest.approx(1 / (1 + math.exp(-1)))
    assert row["humphries_accuracy"] == pytest.approx(E / (E + 1))  # (e^ε + 0)/(e^ε + 1)
    assert row["erlingsson_accuracy"] == pytest.approx(1 - math.exp(-1) / 2)  # 0.816060
    assert row["sablayrolles_precision"] == pytest.approx(0.75)  # 0.5 + 1/4
    assert row["yeom_accuracy"] == 1.0  # e/2 = 1.36, clipped
    assert out["rows"][0]["yeom_accuracy"] == pytest.approx(math.exp(0.5) / 2)  # 0.824361
    assert out["form"] == "derived"
    # With δ = 0.01, s = 0.1, p = 0.1, ε = 1: derived U = 1/(1 + e^-1·9·(1 − 0.1)) = 1/(1 + 8.1/e);
    # printed U = 1/(1 + 9/e − 0.01·0.9/(0.1e)) = 1/(1 + 8.91/e).  At p = 0.5 ("accuracy"):
    # derived 1/(1 + 0.9/e), printed 1/(1 + 1/e − 0.01·0.5/(0.1e)) = 1/(1 + 0.95/e).
    argv = ["compare", "--p", "0.1", "--epsilon-grid", "1", "--delta", "0.01", "--tpr", "0.1"]
    (row,) = run_json(capsys, *argv)["rows"]
    assert row["thudi_precision"] == pytest.approx(1 / (1 + 8.1 / E), rel=1e-12)
    assert row["thudi_accuracy"] == pytest.approx(1 / (1 + 0.9 / E), rel=1e-12)
    out = run_json(capsys, *argv, "--form", "printed")
    assert out["form"] == "printed"
    assert out["rows"][0]["thudi_precision"] == pytest.approx(1 / (1 + 8.91 / E), rel=1e-12)
    assert out["rows"][0]["thudi_accuracy"] == pytest.approx(1 / (1 + 0.95 / E), rel=1e-12)
    out = run_json(capsys, "compare", "--p", "0.1", "--epsilon-grid", "1", "--fpr", "0.2")
    row = out["rows"][0]
    assert row["mahloujifar_precision"] is None  # only defined at p = 0.5
    # Jayaraman at γ = 9, α = 0.2, ε = 1, δ = 0: f = max(0, 1 − 0.2e, e^-1·0.8) = 0.456343
    f = max(0.0, 1 - 0.2 * E, math.exp(-1) * 0.8)
    assert row["jayaraman_ppv"] == pytest.approx((1 - f) / (1 - f + 9 * 0.2))
    # Thudi at p = 0.1: 0.1e/(0.1e + 0.9) = 0.231969
    assert row["thudi_precision"] == pytest.approx(0.1 * E / (0.1 * E + 0.9))


def test_plot_writes_pngs(tmp_path, capsys):
    out_dir = tmp_path / "figs"
    assert main(["plot", "--out", str(out_dir)]) == 0
    printed = capsys.readouterr().out.split()
    assert len(printed) == 3
    for path in map(Path, printed):
        assert path.parent == out_dir and path.stat().st_size > 1000
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    files = run_json(capsys, "plot", "--out", str(tmp_path / "again"))["files"]
    assert sorted(Path(f).name for f in files) == ["bound_vs_p.png", "compare_vs_epsilon.png",
                                                   "compare_vs_p.png"]


@pytest.mark.parametrize("argv, message", [
    (["precision", "--epsilon", "2", "--p", "1.5"], "p=1.5"),
    (["precision", "--epsilon", "-1", "--p", "0.5"], "epsilon"),
    (["precision", "--epsilon", "2", "--p", "0.5", "--delta", "1"], "delta"),
    (["precision", "--epsilon", "2", "--p", "0.5", "--tpr", "0"], "tpr"),
    (["precision", "--epsilon", "abc", "--p", "0.5"], "comma-separated numbers"),
    (["precision", "--p", "0.5"], "--epsilon"),
    (["plan", "--target", "0.8"], "--p --epsilon"),
    (["plan", "--target", "0.8", "--p", "0.5", "--epsilon", "1"], "not allowed"),
    (["plan", "--target", "1.5", "--p", "0.5"], "target"),
    (["plan", "--target", "0.8", "--p", "-0.1"], "p=-0.1"),
    (["compare", "--fpr", "2"], "fpr"),
    (["precision", "--epsilon", "2", "--p", "0.5", "--form", "corrected"], "invalid choice"),
    (["plan", "--target", "0.8", "--p", "0.5", "--form", "Derived"], "--form"),
    (["compare", "--form", "x"], "derived"),
    (["nonsense"], "invalid choice"),
    ([], "required"),
])
def test_bad_input_exits_2_with_a_clear_message(argv, message, capsys):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.out == ""


@pytest.mark.parametrize("command, words", [
    ("precision", ["upper U", "lower", "TPR floor", "--form", "printed"]),
    ("plan", ["largest ε", "largest sampling rate", "target precision", "--form", "printed"]),
    ("compare", ["Sablayrolles", "Jayaraman", "FPR", "--form"]),
    ("plot", ["bound_vs_p.png", "Fig. 11"]),
])
def test_help_explains_each_quantity(command, words, capsys):
    assert main([command, "--help"]) == 0
    text = capsys.readouterr().out
    for word in words + ["--json"]:
        assert word in text


def test_module_entry_point_runs():
    done = subprocess.run([sys.executable, "-m", "sweeper.cli.bounds_command", "precision", "--epsilon", "2",
                           "--p", "0.01", "--json"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["rows"][0]["upper"] == pytest.approx(0.0694532, abs=1e-7)
    bad = subprocess.run([sys.executable, "-m", "sweeper.cli.bounds_command", "plan", "--target", "2",
                          "--p", "0.5"], cwd=REPO, capture_output=True, text=True)
    assert bad.returncode == 2 and "target" in bad.stderr


# --------------------------------------------------------------------------- compare's figure

NAMES = ("Thudi", "Sablayrolles", "Mahloujifar", "Jayaraman", "Humphries", "Erlingsson", "Yeom")


def _lines(ax) -> dict[str, object]:
    return {line.get_label(): line for line in ax.get_lines()}


def test_compare_plot_draws_every_bound_of_the_table_on_labelled_panels(tmp_path, capsys):
    png = tmp_path / "compare.png"
    out = run_json(capsys, "compare", "--p", "0.5", "--epsilon-grid", "0.5,1,2", "--plot", str(png))
    assert out["plot"] == str(png) and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert set(out["rows"][0]) - {"epsilon"} == {  # the table's bounds, each plotted below
        "thudi_precision", "sablayrolles_precision", "mahloujifar_precision", "jayaraman_ppv",
        "thudi_accuracy", "humphries_accuracy", "erlingsson_accuracy", "yeom_accuracy"}
    from sweeper.bounds.compare import Settings
    from sweeper.bounds.plots import compare_figure

    precision, accuracy = compare_figure(Settings(p=0.5), [0.5, 1, 2]).axes
    assert "precision" in precision.get_ylabel() and "accuracy" in accuracy.get_ylabel()
    labels = list(_lines(precision)) + list(_lines(accuracy))
    for name in NAMES:
        assert any(name in label for label in labels), name
    # precision and accuracy bounds never share a panel
    assert not any(n in label for label in _lines(precision) for n in ("Humphries", "Erlingsson", "Yeom"))
    assert not any(n in label for label in _lines(accuracy) for n in ("Sablayrolles", "Mahloujifar"))
    # Mahloujifar's curve is 1/(1 + e^-ε): at ε = 1, 0.731059
    mahloujifar = next(line for label, line in _lines(precision).items() if "Mahloujifar" in label)
    x, y = mahloujifar.get_data()
    assert y[list(x).index(1.0)] == pytest.approx(1 / (1 + math.exp(-1)))


def test_compare_plot_says_which_curves_coincide():
    from sweeper.bounds.compare import Settings
    from sweeper.bounds.plots import compare_figure

    # δ = 0, p = 0.5: Humphries (e^ε + 0)/(e^ε + 1) = U(ε, 1/2) = 1/(1 + e^-ε) = Mahloujifar,
    # so both are marked as coinciding with Thudi's U, drawn with different styles.
    precision, accuracy = compare_figure(Settings(p=0.5), [1, 2]).axes
    humphries = next(label for label in _lines(accuracy) if label.startswith("Humphries"))
    mahloujifar = next(label for label in _lines(precision) if label.startswith("Mahloujifar"))
    assert "coincide" in humphries and "coincide" in mahloujifar
    styles = {(line.get_linestyle(), line.get_marker()) for line in accuracy.get_lines()}
    assert len(styles) == 4
    # δ = 0.01 > 0: Humphries (e + 0.01)/(e + 1) = 0.73375 at ε = 1, U derived (s = 0.01) = 1:
    # they part, and the label no longer claims they coincide.
    _, accuracy = compare_figure(Settings(p=0.5, delta=0.01), [1, 2]).axes
    assert not any("coincide" in label for label in _lines(accuracy))
    # p = 0.1: Mahloujifar is undefined there and the legend says it is not drawn.
    precision, _ = compare_figure(Settings(p=0.1), [1, 2]).axes
    entry = next(label for label in _lines(precision) if label.startswith("Mahloujifar"))
    assert "not drawn" in entry and len(_lines(precision)[entry].get_xdata()) == 0


def test_epsilon_is_written_one_way_in_text_and_one_way_in_json(capsys):
    """Text for people: ∞; JSON: the string "inf" (plain JSON has no infinity; null loses it)."""
    assert main(["plan", "--target", "0.8", "--epsilon", "inf"]) == 0
    text = capsys.readouterr().out
    assert "∞" in text and "inf" not in text.replace("information", "")
    out = run_json(capsys, "plan", "--target", "0.8", "--epsilon", "inf")
    assert out["rows"][0]["epsilon"] == "inf"
