"""A sweep as one self-contained HTML page: what it claims, what it measured, what that proves.

A sweep's findings otherwise live in four places (the terminal table, `frontier.png`, Parquet,
MLflow) and none of them can be mailed to a reviewer or filed with a paper.  `sweep_page` turns
the store's frames into one HTML string that needs nothing else: the frontier drawn inline as
SVG (its words stay text: searchable, copyable, sharp at any zoom), the experiment's own figures
as PNG data, every table behind them downloadable from the page itself (`data:` links), and a
Content-Security-Policy that forbids the page any request at all, so it reads the same offline.
It links nowhere outside itself: papers are cited by name.

Pure: frames, the configuration and the provenance record in, a string out; the store is read
and the file written by `sweeper.html_report`.  Sections (their `id`s are `SECTIONS`): the
claim, the frontier, the audits by threat model, the controls, provenance, limits, and the data.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Sequence

import numpy as np
import pandas as pd

from sweeper.axes import pooling_keys, swept
from sweeper.formats import format_epsilon, jsonable
from sweeper.bounds.audit_columns import AUDIT_COLUMNS
from sweeper.reports.engine_audit import ESTIMATORS
from sweeper.reports.stats import pooled_table
from sweeper.reports.tables import baseline_attacks, not_tests

#: The page's sections, by `id`, in order, with their headings.
SECTIONS = {"claim": "The claim", "frontier": "The frontier", "audits": "Audits by threat model",
            "controls": "Controls", "provenance": "Provenance", "limits": "Limits",
            "data": "The data"}
#: What the page may load: nothing but its own inline style and `data:` images.  A browser
#: refuses anything else, so a page that grew a link to elsewhere fails closed.
CONTENT_SECURITY_POLICY = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"

THREAT_MODEL_TEXT = {
    "black_box_final": "sees the final model's outputs only (what a user of a released model sees)",
    "white_box_final": "sees the final model's weights",
    "white_box_iterates": "sees every iterate of training (the threat model DP-SGD's accounting "
                          "assumes: the strongest adversary)",
}
#: Panels (attacks) to one frontier figure: more would be drawn too small to read at a page's width.
PANELS_PER_FIGURE = 3
HOW_TO_READ = (
    "A point is what an attack achieved: its precision, the share of members among the records "
    "it flagged, pooled over trials, with the exact 95 % Clopper–Pearson interval of that pooled "
    "count.  The dashed line of its colour is U, the most any attack can reach at that ε (Thudi "
    "et al., TMLR 2024, Theorem 3.3).  A point whose interval lies wholly above its line is a "
    "violation, drawn as a red cross: the data prove the training was not (ε, δ)-DP, a bug in "
    "training or accounting.  The grey diagonal is the prior p, what guessing “member” for "
    "everyone gets; points near it mean the attack did no better than that.")
LIMITS = [
    "An attack's precision is what that attack reached, not what the best attacker could: the "
    "bound U holds for every attacker, a measured point only for the ones run.  A point well "
    "under U says these attacks failed, not that no attack succeeds.",
    "An audit proves a lower bound on the true ε (at its confidence); it never proves the "
    "claimed ε holds.  An audit ε below the claim says the audit did not reach the claim, which "
    "a weak attack or too few observations also explain.",
    "A threshold chosen on the evaluation records' own membership (an oracle policy) is an upper "
    "estimate of what a real attacker reaches, not an attack one could deploy; the audits and "
    "the violation test correct for the thresholds searched (Bonferroni).",
    "Each precision interval is the exact Clopper–Pearson interval of the pooled TP/(TP + FP): "
    "it treats each flagged record as an independent draw with one membership rate, across the "
    "trials pooled.  Records of one model are not independent draws of the training mechanism, "
    "so it is an interval about these targets' evaluation sets.",
    "Every interval is 95 % for one cell; across many cells some miss by chance.  The violation "
    "test runs at its own, stricter level (metrics.violation_alpha) for that reason.",
    "Gaussian-DP audits prove only where training is a Gaussian mechanism (full batch, q = 1); "
    "under sampling (q < 1) they are estimates and are labelled so.  The last-iterate ε is a "
    "heuristic (Steinke et al. 2025), the ceiling of audits that see only the final model, not "
    "a guarantee.",
    "The μ-GDP figure under Poisson sampling is the central-limit approximation (Bu et al. "
    "2020): asymptotic, not a guarantee.  At q = 1 it is exact.",
    "ε spent is the accountant's figure for the training as run (every iterate released); the "
    "claim the sweep tests is the grid's ε.",
]

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:0;
color:#1d1d1f;background:#fff;line-height:1.45}
main{max-width:1180px;margin:0 auto;padding:1.2rem 1.6rem 3rem}
header{border-bottom:1px solid #ddd;margin-bottom:1rem}
h1{font-size:1.6rem;margin:.4rem 0}h2{font-size:1.3rem;margin-top:2.2rem;border-bottom:1px solid #eee}
h3{font-size:1.05rem;margin-top:1.4rem}
nav a{margin-right:1rem;color:#0b57d0;text-decoration:none}
table{border-collapse:collapse;font-size:.86rem;margin:.6rem 0;font-variant-numeric:tabular-nums}
th,td{border:1px solid #ddd;padding:.2rem .5rem;text-align:right;vertical-align:top;white-space:nowrap}
th{background:#f4f4f6}td.text,th.text{text-align:left;white-space:normal}
.verdict{font-weight:600}.bad{color:#b00020}.good{color:#1b6e20}.note{color:#555}
figure{margin:1rem 0}figure svg,figure img{max-width:100%;height:auto;display:block}
figcaption{color:#555;font-size:.9rem}
pre{background:#f6f8fa;padding:.6rem;overflow:auto;font-size:.8rem;max-height:32rem}
.summary{font-size:1.05rem}
"""


@dataclass(frozen=True)
class PageFigure:
    """A figure drawn elsewhere (an experiment's report), as PNG bytes, with its caption."""

    caption: str
    png: bytes


@dataclass(frozen=True)
class PageInputs:
    """Everything the page shows, read from the store by `sweeper.html_report.page_inputs`."""

    name: str
    cells: pd.DataFrame  # the sweep's results (`sweeper.store.results`), one row per cell
    config: dict[str, Any]  # the sweep's configuration (sweep.json, credentials masked)
    coverage: list[str] = field(default_factory=list)  # how whole the sweep is, its notes
    complete: bool = True
    audits: Optional[pd.DataFrame] = None  # the audit report's pooled audits (audit_epsilon.csv)
    figures: list[PageFigure] = field(default_factory=list)  # the experiment's report, drawn
    data: dict[str, bytes] = field(default_factory=dict)  # more files to download, by name
    provenance: dict[str, Any] = field(default_factory=dict)  # `sweeper.provenance` record
    devices: dict[str, int] = field(default_factory=dict)  # device → target models trained on it
    title_note: str = ""  # the frontier figure's title line (`frontier_title`)


def sweep_page(inputs: PageInputs) -> str:
    """The sweep's report as one HTML document (a string): every section of `SECTIONS`."""
    cells = inputs.cells
    pooled = pooled_rows(cells)
    sections = {
        "claim": claim_section(cells, inputs.config),
        "frontier": frontier_section(cells, pooled, inputs),
        "audits": audits_section(cells, inputs.audits, inputs.config),
        "controls": controls_section(cells),
        "provenance": provenance_section(inputs),
        "limits": "<ul>" + "".join(f"<li>{_e(text)}</li>" for text in LIMITS) + "</ul>",
        "data": data_section(cells, pooled, inputs),
    }
    violations = int(cells["violation"].sum()) if "violation" in cells and len(cells) else 0
    verdict = (f'<span class="verdict bad">{violations} cell(s) prove a violation</span>'
               if violations else
               '<span class="verdict good">no cell proves a violation</span>')
    summary = (f"{len(cells)} cells; {verdict}; "
               + ("every cell of the sweep is present" if inputs.complete
                  else '<span class="bad">the sweep is incomplete (see the frontier)</span>'))
    nav = "".join(f'<a href="#{key}">{_e(title)}</a>' for key, title in SECTIONS.items())
    body = "".join(f'<section id="{key}"><h2>{_e(SECTIONS[key])}</h2>{sections[key]}</section>'
                   for key in SECTIONS)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{CONTENT_SECURITY_POLICY}">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>sweeper report: {_e(inputs.name)}</title><style>{STYLE}</style></head>"
            f"<body><main><header><h1>sweeper report: {_e(inputs.name)}</h1>"
            f'<p class="summary">{summary}</p><nav>{nav}</nav></header>{body}</main></body></html>\n')


# --- the claim ----------------------------------------------------------------------------


def mu_gdp(sample_rate: float, steps: int, noise_multiplier: float) -> tuple[float, bool]:
    """DP-SGD's μ-GDP figure and whether it is exact.  At q = 1 every step is the Gaussian
    mechanism with μ = 1/σ and T of them compose to μ = √T/σ exactly (Dong, Roth & Su); under
    Poisson sampling the central-limit approximation μ ≈ q·√(T·(e^{1/σ²} − 1)) (Bu et al. 2020),
    asymptotic only.  NaN without noise."""
    if not noise_multiplier or not math.isfinite(noise_multiplier) or steps <= 0:
        return math.nan, False
    if sample_rate >= 1.0:
        return math.sqrt(steps) / noise_multiplier, True
    return sample_rate * math.sqrt(steps * math.expm1(noise_multiplier ** -2)), False


def claim_rows(cells: pd.DataFrame, config: dict[str, Any]) -> list[dict[str, str]]:
    """One row per claimed (ε, δ) and training recipe: what the training promised and how."""
    train = config.get("train", {}) if isinstance(config, dict) else {}
    accountant = str(train.get("accountant", "?"))
    rate_from = str(train.get("rate_from", "expected"))
    keys = ["epsilon", "delta", *(axis.name for axis in swept(cells))]
    rows = []
    for key, group in cells.groupby(keys, sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        eps, delta = float(key[0]), float(key[1])
        row = {"ε claimed": format_epsilon(eps), "δ": f"{delta:g}",
               **{axis.label: axis.text(value) for axis, value in zip(swept(cells), key[2:])}}
        q = _first(group, "dp_sample_rate")
        sigma = _first(group, "noise_multiplier")
        steps = _first(group, "steps")
        if not math.isfinite(eps):
            row.update(sampler="none: non-private training (shuffled batches)", accountant="—",
                       **{"ε spent": "—", "μ-GDP": "—", "ε last iterate": "—"})
        elif not math.isfinite(q):
            row.update(sampler="no DP-SGD: an exact mechanism (its own release)",
                       accountant="closed form", **{"ε spent": _num(_max(group, "epsilon_spent")),
                                                    "μ-GDP": "—", "ε last iterate": "—"})
        else:
            mu, exact = mu_gdp(q, int(steps), sigma)
            sampler = ("full batch: every record in every step (q = 1)" if q >= 1 else
                       f"Poisson: each record joins each step with probability q = {q:.4g} "
                       f"(train.rate_from={rate_from})")
            row.update(sampler=f"{sampler}; {int(steps)} steps, noise σ = {sigma:.4g}",
                       accountant=accountant,
                       **{"ε spent": _num(_max(group, "epsilon_spent")),
                          "μ-GDP": (f"{mu:.3g} (exact)" if exact else
                                    f"≈ {mu:.3g} (CLT approximation)") if math.isfinite(mu) else "—",
                          "ε last iterate": _num(_max(group, "epsilon_last_iterate"))})
        rows.append(row)
    return rows


def claim_section(cells: pd.DataFrame, config: dict[str, Any]) -> str:
    if cells.empty:
        return "<p>The sweep holds no cells yet.</p>"
    text = ("<p>Each row is one training promise the sweep tests: DP-SGD at (ε, δ), the sampler "
            "as the engine runs it, the accountant that set the noise and the ε it reports "
            "spent (max over the row's targets), the μ-GDP equivalent where it exists, and the "
            "last iterate's heuristic ε (what an adversary who sees only the final model could "
            "reach at best).</p>")
    return text + _table(claim_rows(cells, config), text_columns=("sampler", "accountant"))


# --- the frontier -------------------------------------------------------------------------


def pooled_rows(cells: pd.DataFrame) -> pd.DataFrame:
    """The frontier table's rows: each coordinate's trials pooled (the figures' rule), PDTP
    cells left out (no precision)."""
    if cells.empty or "precision" not in cells:
        return pd.DataFrame()
    tests = cells[cells["precision"].notna()]
    if tests.empty:
        return pd.DataFrame()
    return pooled_table(tests, pooling_keys(tests), ["baseline", "bound", "auc", "test_accuracy"])


def frontier_svg(cells: pd.DataFrame, title: str) -> str:
    """The frontier figure (`frontier_figure`, as `frontier.png` draws it) as inline SVG markup,
    its text kept as text, with no reference to anything outside it."""
    import matplotlib

    from sweeper.figures import fit_canvas
    from sweeper.reports.frontier_chart import frontier_figure

    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "sweeper"}):
        figure = frontier_figure(cells, title)
        fit_canvas(figure)
        buffer = io.StringIO()
        figure.savefig(buffer, format="svg", bbox_inches="tight",
                       metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    return inline_svg(buffer.getvalue())


def inline_svg(document: str) -> str:
    """An SVG file's `<svg>` element alone, for an HTML page: no XML declaration, no doctype
    (which names a DTD's URL), no namespace declarations (HTML's parser supplies them) and no
    metadata block."""
    import re

    start = document.index("<svg")
    svg = document[start:]
    svg = re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", svg, count=0)
    svg = re.sub(r"<metadata>.*?</metadata>", "", svg, flags=re.S)
    return svg.strip()


def frontier_section(cells: pd.DataFrame, pooled: pd.DataFrame, inputs: PageInputs) -> str:
    parts = []
    if inputs.coverage:
        parts.append("<p>" + "<br>".join(_e(line) for line in inputs.coverage) + "</p>")
    drawn = cells[cells["precision"].notna()] if "precision" in cells else cells.iloc[:0]
    if drawn.empty:
        return "".join(parts) + "<p>No cell has a precision to draw.</p>"
    tests = [a for a in dict.fromkeys(drawn["attack"]) if a not in baseline_attacks()]
    chunks = [tests[i:i + PANELS_PER_FIGURE] for i in range(0, len(tests), PANELS_PER_FIGURE)]
    for number, chunk in enumerate(chunks or [[]]):
        shown = cells[cells["attack"].isin([*chunk, *baseline_attacks()])]
        parts.append(f"<figure>{frontier_svg(shown, inputs.title_note if not number else '')}"
                     "</figure>")
    parts.append("<p class=\"note\">The frontier: attack precision against p, one panel per "
                 f"attack (at most {PANELS_PER_FIGURE} to a figure), one colour per ε; U dashed. "
                 "Its numbers: <code>frontier_pooled.csv</code> under "
                 '<a href="#data">The data</a>.</p>')
    parts.append(f"<h3>How to read it</h3><p>{_e(HOW_TO_READ)}</p>")
    parts.append("<h3>The pooled table</h3>" + _table(_pooled_display(pooled),
                                                         text_columns=("attack", "policy", "flag")))
    parts.append("<h3>Violations</h3>" + violations_html(cells))
    for figure in inputs.figures:
        data = base64.b64encode(figure.png).decode()
        parts.append(f'<figure><img alt="{_e(figure.caption)}" src="data:image/png;base64,{data}">'
                     f"<figcaption>{_e(figure.caption)}</figcaption></figure>")
    return "".join(parts)


def _pooled_display(pooled: pd.DataFrame) -> list[dict[str, str]]:
    rows = []
    recipe = [axis for axis in swept(pooled)] if not pooled.empty else []
    for row in pooled.to_dict("records"):
        rows.append({"attack": str(row["attack"]),
                     **({"policy": str(row["policy"])} if "policy" in pooled
                        and pooled["policy"].nunique() > 1 else {}),
                     "ε": format_epsilon(row["epsilon"]), "δ": f"{row['delta']:g}",
                     "p": f"{row['p']:.2f}",
                     **{axis.label: axis.text(row[axis.name]) for axis in recipe},
                     "trials": str(row["n_trials"]),
                     "precision [95% CI]": f"{row['precision']:.3f} [{row['precision_ci_low']:.3f}, "
                                           f"{row['precision_ci_high']:.3f}]",
                     "TP": str(row["tp"]), "FP": str(row["fp"]),
                     "baseline": _num(row.get("baseline", math.nan), 3),
                     "bound U": _num(row.get("bound", math.nan), 3),
                     "AUC": _num(row.get("auc", math.nan), 3),
                     "flag": (f"VIOLATION ({row['violations']} of {row['n_trials']})"
                              if row["violations"] else "")})
    return rows


def violations_html(cells: pd.DataFrame) -> str:
    flagged = cells[cells["violation"].fillna(False).astype(bool)] if "violation" in cells else cells.iloc[:0]
    if flagged.empty:
        return ("<p class=\"good\">None: no cell's data prove, at level "
                "metrics.violation_alpha, a precision above U or an ε above the claimed one.</p>")
    rows = [{"attack": str(r["attack"]), "policy": str(r.get("policy", "")),
             "ε": format_epsilon(r["epsilon"]), "p": f"{r['p']:g}", "trial": str(r.get("trial", "")),
             "precision": _num(r.get("precision", math.nan), 3),
             "bound U": _num(r.get("bound", math.nan), 3),
             "tests that fired": str(r.get("violation_reason") or "precision")}
            for r in flagged.to_dict("records")]
    return (f'<p class="bad">{len(rows)} cell(s) prove the training was not (ε, δ)-DP: a bug in '
            "training or accounting.</p>" + _table(rows, text_columns=("attack", "policy",
                                                                       "tests that fired")))


# --- audits -------------------------------------------------------------------------------

#: The pooled audits' estimator columns and their names, as the audit report names them.
ESTIMATOR_NAMES = {column: name for column, name in ESTIMATORS.items()
                   if column in AUDIT_COLUMNS}


def policy_text(name: str) -> str:
    """How a threshold policy picks its operating point, as the policy's own declaration says."""
    from jobs.policies import POLICIES

    if name not in POLICIES:
        return name
    policy = POLICIES[name]
    doc = (policy.point.__doc__ or "").strip().split("\n")[0].rstrip(".")
    oracle = " (an oracle: it reads the evaluation records' membership)" if policy.uses_target_labels else ""
    return f"{name}: {doc}{oracle}"


def audits_section(cells: pd.DataFrame, audits: Optional[pd.DataFrame],
                   config: dict[str, Any]) -> str:
    tests = cells[~cells["attack"].isin(not_tests())] if "attack" in cells else cells
    if tests.empty:
        return "<p>The sweep ran no membership test.</p>"
    metrics = config.get("metrics", {}) if isinstance(config, dict) else {}
    alpha = _first(tests, "audit_alpha")
    intro = (f"<p>Every ε below is proven at confidence {1 - alpha:.0%} (audit_alpha = "
             f"{alpha:g}, one-sided, corrected for the thresholds searched); the violation test "
             f"runs at metrics.violation_alpha = {metrics.get('violation_alpha', '?')}.  "
             "An estimate is labelled as one: it is not a proof.</p>") if math.isfinite(alpha) else ""
    policies = sorted(tests["policy"].dropna().unique()) if "policy" in tests else []
    intro += ("<p>How thresholds were chosen: " + "; ".join(_e(policy_text(p)) for p in policies)
              + ".</p>") if policies else ""
    models = tests["threat_model"].fillna("black_box_final") if "threat_model" in tests else \
        pd.Series("black_box_final", index=tests.index)
    parts = [intro]
    for threat_model in [m for m in THREAT_MODEL_TEXT if m in set(models)]:
        at = tests[models == threat_model]
        parts.append(f"<h3>{_e(threat_model)}</h3><p>The adversary "
                     f"{_e(THREAT_MODEL_TEXT[threat_model])}.</p>")
        pooled = None if audits is None or audits.empty else \
            audits[audits.get("threat_model", pd.Series(dtype=object)) == threat_model]
        if pooled is not None and not pooled.empty:
            parts.append(_table(pooled_audit_rows(pooled), text_columns=("attack", "proofs",
                                                                        "estimates (not proofs)")))
        else:
            parts.append("<p>Estimator: the exact Clopper–Pearson ends of one cell's precision "
                         "(at δ = 0) and of its (TPR, FPR) (at δ), the largest over the cells of "
                         "each row; trials not pooled.</p>"
                         + _table(cell_audit_rows(at), text_columns=("attack",)))
    return "".join(parts)


def pooled_audit_rows(audits: pd.DataFrame) -> list[dict[str, str]]:
    """The canary audits (every trial's observations joined, `pooled_audits`): per attack, ε
    and p, the observations, each valid estimator's ε (a proof) and the others (estimates)."""
    rows = []
    for row in audits.to_dict("records"):
        valid = {f"epsilon_audit_{name}" for name in str(row.get("valid", "")).split("+") if name}
        proofs: list[str] = []
        estimates: list[str] = []
        for column, name in ESTIMATOR_NAMES.items():
            value = row.get(column, math.nan)
            if value is None or not math.isfinite(float(value)):
                continue
            (proofs if column in valid else estimates).append(f"{name} {float(value):.2f}")
        if math.isfinite(float(row.get("estimate_gdp_uncorrected", math.nan) or math.nan)):
            estimates.append(f"Gaussian DP, thresholds uncorrected {row['estimate_gdp_uncorrected']:.2f}")
        rows.append({"attack": str(row["attack"]), "ε claimed": format_epsilon(row["epsilon"]),
                     "p": f"{row['p']:g}", "trials": str(row.get("trials", "")),
                     "observations (members)": f"{row.get('observations', '')} "
                                               f"({row.get('members', '')})",
                     "best proven ε": _num(row.get("epsilon_audit_best", math.nan), 2),
                     "proofs": ", ".join(proofs) or "—",
                     "estimates (not proofs)": ", ".join(estimates) or "—"})
    return rows


def cell_audit_rows(tests: pd.DataFrame) -> list[dict[str, str]]:
    """Audits of attacks on records (no canary pooling): per attack and ε, the largest ε one
    cell's counts prove, with the records and runs behind it."""
    rows = []
    for (attack, eps), at in tests.groupby(["attack", "epsilon"], sort=True):
        records = _first(at, "eval_records")
        rows.append({"attack": str(attack), "ε claimed": format_epsilon(eps),
                     "records × runs": f"{_num(records, 0)} × {at['trial'].nunique() if 'trial' in at else 1} "
                                       f"trials × {at['p'].nunique()} p",
                     "ε proven (precision)": _num(_max(at, "epsilon_audit"), 2),
                     "ε proven (rates)": _num(_max(at, "epsilon_audit_rates"), 2)})
    return rows


# --- controls -----------------------------------------------------------------------------


def controls_section(cells: pd.DataFrame) -> str:
    parts = []
    tests = cells[~cells["attack"].isin(not_tests())] if "attack" in cells else cells
    tests = tests[tests["precision"].notna()] if "precision" in tests else tests
    open_cells = tests[~np.isfinite(tests["epsilon"])] if len(tests) else tests
    parts.append("<h3>Signal at ε = ∞</h3>")
    if open_cells.empty:
        parts.append('<p class="bad">Not run: the sweep has no ε = ∞ cell, so nothing here shows '
                     "that its attacks find members when nothing protects them.</p>")
    else:
        rows = []
        for row in pooled_table(open_cells, ["attack", "policy", "p"], ["baseline", "auc"]).to_dict("records"):
            found = row["precision_ci_low"] > row["baseline"]
            rows.append({"attack": str(row["attack"]), "policy": str(row["policy"]), "p": f"{row['p']:g}",
                         "precision [95% CI]": f"{row['precision']:.3f} [{row['precision_ci_low']:.3f}, "
                                               f"{row['precision_ci_high']:.3f}]",
                         "baseline": _num(row["baseline"], 3), "AUC": _num(row.get("auc", math.nan), 3),
                         "verdict": "signal: interval above the baseline" if found else
                                    "no signal: this attack shows nothing here"})
        parts.append("<p>Without DP an attack that works must beat the share of members: a "
                     "frontier of attacks that find nothing even here says nothing about DP.</p>"
                     + _table(rows, text_columns=("attack", "policy", "verdict")))
    parts.append("<h3>The always-member and random baselines</h3>")
    base = cells[cells["attack"].isin(baseline_attacks())] if "attack" in cells else cells.iloc[:0]
    if base.empty:
        parts.append("<p>The sweep ran no always-member baseline.</p>")
    else:
        rows = []
        for (attack, eps, p), at in base.groupby(["attack", "epsilon", "p"], sort=True):
            measured = float((at["tp"].sum()) / max(1, at["tp"].sum() + at["fp"].sum()))
            share = float(at["members"].sum() / at["eval_records"].sum()) \
                if {"members", "eval_records"} <= set(at) else float(at["baseline"].mean())
            rows.append({"attack": str(attack), "ε": format_epsilon(eps), "p": f"{p:g}",
                         "measured precision": f"{measured:.3f}",
                         "share of members (random guessing's expected precision)": f"{share:.3f}",
                         "verdict": "agrees" if abs(measured - share) < 1e-9 else "DIFFERS: a counting bug"})
        parts.append("<p>Flagging everyone must give exactly the share of members evaluated; a "
                     "guesser that flags records at random has that same precision in "
                     "expectation, at any rate (computed, not run).</p>"
                     + _table(rows, text_columns=("attack", "verdict")))
    parts.append("<h3>Planted-bug check</h3><p>This sweep ran none.  The engine's DP-bug "
                 "detector is the test suite's (tests/test_sweeper/bounds/test_dp_audit.py): the engine broken "
                 "three ways (half the noise, clipping off, the accountant told q/2) is flagged "
                 "as a violation each time.</p>")
    return "".join(parts)


# --- provenance ---------------------------------------------------------------------------


def provenance_section(inputs: PageInputs) -> str:
    record = inputs.provenance or {}
    runs = record.get("runs", [])
    parts = []
    if runs:
        last = runs[-1]
        commit = last.get("commit") or "unknown (not a git checkout)"
        clean = {True: "clean", False: "with uncommitted changes", None: "unknown"}[last.get("clean")]
        parts.append(f"<p>Code: commit <code>{_e(str(commit))}</code>, its tree {clean} (the "
                     "latest run that computed something).</p>")
        rows = [{"finished": str(run.get("finished", "")), "commit": str(run.get("commit") or "?")[:12],
                 "tree": {True: "clean", False: "changed", None: "?"}[run.get("clean")],
                 "models trained": str(run.get("models_trained", "")),
                 "wall s": _num(run.get("wall_seconds", math.nan), 1),
                 **{f"{kind} wall s (tasks)": f"{_num(times.get('wall', math.nan), 1)} ({times.get('tasks', 0)})"
                    for kind, times in run.get("task_times", {}).items()}}
                for run in runs]
        parts.append("<h3>Runs</h3><p>Each run of the sweep that computed something; wall by "
                     "task kind is each kind's union of task spans (the kinds overlap).</p>"
                     + _table(rows, text_columns=("finished", "commit", "tree")))
        environment = last.get("environment", {})
        if environment:
            versions = environment.get("packages", {})
            parts.append("<h3>Software and hardware</h3>" + _table(
                [{"what": key, "value": str(value)} for key, value in
                 [("python", environment.get("python")), ("platform", environment.get("platform")),
                  ("CPUs", environment.get("cpus")), *versions.items()]],
                text_columns=("what", "value")))
    else:
        parts.append("<p>No run record: the sweep ran before sweeper kept one "
                     "(provenance.json); a rerun that computes something writes it.</p>")
    if inputs.devices:
        parts.append("<p>Target models trained on: " + "; ".join(
            f"{_e(device)}: {count}" for device, count in inputs.devices.items()) + ".</p>")
    if not inputs.cells.empty and "model_key" in inputs.cells:
        parts.append(f"<p>Models: {inputs.cells['model_key'].nunique()} target models behind "
                     f"the {len(inputs.cells)} cells (shadow models besides).</p>")
    dataset = record.get("dataset") or {}
    if dataset:
        files = dataset.get("files", [])
        described = (_table([{"file": f["name"], "MD5": f["md5"] or "not pinned"} for f in files],
                            text_columns=("file", "MD5")) if files else
                     f"<p>{_e(dataset.get('source', ''))}</p>")
        parts.append(f"<h3>Dataset: {_e(str(dataset.get('name', '')))}</h3>{described}")
    parts.append("<h3>The whole configuration</h3><pre>"
                 + _e(json.dumps(jsonable(inputs.config), indent=1, sort_keys=True)) + "</pre>")
    return "".join(parts)


# --- data ---------------------------------------------------------------------------------


def data_files(cells: pd.DataFrame, pooled: pd.DataFrame,
               inputs: PageInputs) -> dict[str, bytes]:
    """Every table behind the page, as the files its download links hold."""
    files = {"cells.csv": cells.to_csv(index=False).encode()}
    if not pooled.empty:
        files["frontier_pooled.csv"] = pooled.to_csv(index=False).encode()
    if inputs.audits is not None and not inputs.audits.empty:
        files["audits_pooled.csv"] = inputs.audits.to_csv(index=False).encode()
    files.update(inputs.data)
    files["configuration.json"] = json.dumps(jsonable(inputs.config), indent=1).encode()
    return files


def data_section(cells: pd.DataFrame, pooled: pd.DataFrame, inputs: PageInputs) -> str:
    links = []
    for name, content in data_files(cells, pooled, inputs).items():
        kind = "application/json" if name.endswith(".json") else "text/csv"
        encoded = base64.b64encode(content).decode()
        links.append(f'<li><a download="{_e(name)}" href="data:{kind};base64,{encoded}">{_e(name)}'
                     f"</a> ({len(content) / 1024:.1f} kB)</li>")
    return ("<p>The data behind every figure and table, inside this page (nothing is fetched): "
            "<code>cells.csv</code> holds one row per cell (every column of the results "
            "dataset), <code>frontier_pooled.csv</code> the frontier's pooled points.</p><ul>"
            + "".join(links) + "</ul>")


# --- helpers ------------------------------------------------------------------------------


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _table(rows: Sequence[dict[str, str]], text_columns: Iterable[str] = ()) -> str:
    if not rows:
        return "<p>(none)</p>"
    columns = list(dict.fromkeys(key for row in rows for key in row))
    text = set(text_columns)

    def cls(column: str) -> str:
        return ' class="text"' if column in text else ""
    head = "".join(f"<th{cls(c)}>{_e(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td{cls(c)}>{_e(row.get(c, ''))}</td>" for c in columns)
                   + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _first(frame: pd.DataFrame, column: str) -> float:
    if column not in frame:
        return math.nan
    values = pd.to_numeric(frame[column], errors="coerce").dropna()
    return float(values.iloc[0]) if len(values) else math.nan


def _max(frame: pd.DataFrame, column: str) -> float:
    if column not in frame:
        return math.nan
    values = pd.to_numeric(frame[column], errors="coerce").dropna()
    return float(values.max()) if len(values) else math.nan


def _num(value: Any, places: int = 2) -> str:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return "—"
    if math.isnan(number):
        return "—"
    return format_epsilon(number) if math.isinf(number) else f"{number:.{places}f}"
