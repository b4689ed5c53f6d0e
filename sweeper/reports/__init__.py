"""Per-experiment reports: each paper's own figures, redrawn from a sweep's results table.

`sweeper.frontier` answers the product's question (is any measured precision above U?) the same
way for every sweep; each paper an experiment reproduces asks a narrower one in its own figure,
which a reader comparing our numbers with theirs needs, axes and all.  One module per paper, on
shared table shaping (`tables`), statistics (`stats`), store reads (`loading`) and drawing
(`sweeper.figures`):

- ``frontier`` (`frontier`): the bound-vs-attack frontier every sweep draws;
- ``thudi_lira``, ``fixed_bound`` (`thudi`): Thudi et al. (TMLR 2024) Figures 3–4 and 5–6;
- ``ppv`` (`jayaraman`): Jayaraman et al., PPV against γ = non-members per member, per attack;
- ``pdtp`` (`long`): Long et al., per-record PDTP against per-record attack accuracy;
- ``generalization`` (`yeom`): Yeom et al., the loss attack's advantage against the 0–1
  generalization gap, and Adversary 1 against its Theorem 2 line;
- ``audit`` (`audit`): canary audits, the ε they prove against the ε claimed (trials pooled),
  and precision against p with U and `bound_profile`.

Every report:

- writes PNGs and, next to each, a CSV with exactly the numbers drawn (long format: a ``series``
  column says which line a row belongs to), so a figure can be checked or redrawn without this code;
- raises ValueError naming every missing column when its table lacks one: a sweep of another
  experiment fails loudly rather than draw an empty or misleading figure.

The registry (`REPORTS`, `draw`) is in `registry`; this module only re-exports.
"""

from sweeper.reports.engine_audit import audit_report, pooled_audits
from sweeper.reports.frontier_chart import (frontier_card_figure, frontier_figure,
                                             frontier_report, frontier_title, plot_frontier,
                                             plot_frontier_card)
from sweeper.reports.jayaraman import ppv_report
from sweeper.reports.loading import load_pdtp_values, load_scores, load_target_scores
from sweeper.reports.long import pdtp_report
from sweeper.reports.report_registry import REPORTS, draw, register_report, summaries
from sweeper.reports.stats import improvement_interval, per_record_accuracy
from sweeper.reports.tables import baseline_attacks, measure_attacks, not_tests
from sweeper.reports.thudi_figures import fixed_bound_report, thudi_lira_report
from sweeper.reports.yeom import advantage, best_advantage, generalization_report

__all__ = [
    "REPORTS",
    "advantage",
    "audit_report",
    "baseline_attacks",
    "best_advantage",
    "draw",
    "fixed_bound_report",
    "frontier_card_figure",
    "frontier_figure",
    "frontier_report",
    "frontier_title",
    "generalization_report",
    "improvement_interval",
    "load_pdtp_values",
    "load_scores",
    "load_target_scores",
    "measure_attacks",
    "not_tests",
    "pdtp_report",
    "per_record_accuracy",
    "plot_frontier",
    "plot_frontier_card",
    "pooled_audits",
    "ppv_report",
    "register_report",
    "summaries",
    "thudi_lira_report",
]
