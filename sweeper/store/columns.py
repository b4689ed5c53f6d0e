"""The declared schemas of the results table and of the per-record scores, with their versions.

Each column is declared once, here, with its Arrow type and a one-line doc: the store validates
every row against it when it writes (a misspelt or mistyped column fails the write, not a reader
months later), the compacted dataset carries the docs in its Parquet footer (`field.metadata`),
and docs/results.md's column tables are generated from `CELL_COLUMNS` / `SCORE_COLUMNS`
(`python -m sweeper.cli.columns_command --markdown`; a test fails when the page and this module differ).

The `sweep` column of the readable dataset is not in these schemas: it is the hive partition
(`results/cells/sweep=<name>/`), so it comes from the folder name and no file repeats it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import pyarrow as pa

from sweeper.axes import AXES

#: Version of the results table's columns, in every row (`schema_version`) and file footer; bumped
#: when a column is renamed, retyped or dropped (declaring them changed none: still 3).
RESULTS_SCHEMA_VERSION = 3
#: Version of the per-record scores' columns.
SCORES_SCHEMA_VERSION = 1
#: Footer key-value metadata keys every results file carries.
VERSION_KEY = "sweeper.schema_version"


class SchemaError(ValueError):
    """A row or a table that does not fit its declared schema (unknown, missing or mistyped)."""


@dataclass(frozen=True)
class Column:
    """One column of the results (or scores) table, declared once.

    Attributes:
        name: the column's name in the Parquet files and in `load_frontier`'s DataFrame.
        type: its Arrow type (float64, int64, string or bool).
        doc: what it holds, in one line; the Parquet footer carries it as the field's `doc`.
        required: never null: a row without it is refused when it is written.
    """

    name: str
    type: pa.DataType
    doc: str
    required: bool = False

    def field(self) -> pa.Field:
        return pa.field(self.name, self.type, nullable=not self.required,
                        metadata={"doc": self.doc})


F64, I64, STR, BOOL = pa.float64(), pa.int64(), pa.string(), pa.bool_()

#: What a cell cost (`train_seconds`, `attack_seconds`): the columns in which two runs that
#: compute the very same figures may differ.
COST_COLUMNS = ("train_seconds", "attack_seconds")

ARROW_TYPES = {"string": STR, "float64": F64, "int64": I64}

#: Every column of the results table (`results/cells`, `load_frontier`'s DataFrame), in order:
#: the cell's coordinates (dataset, model, attack, policy, ε, δ, p, trial, …), then what was
#: measured and bounded (precision and its exact interval, the bound U, `violation`, rates,
#: audits, costs).  Each is listed with its type and meaning in docs/results.md ("The columns"),
#: generated from this tuple by `python -m sweeper.cli.columns_command --markdown`.
CELL_COLUMNS: tuple[Column, ...] = (
    # the cell's coordinates, each declared once in `sweeper.axes`
    *(Column(axis.name, ARROW_TYPES[axis.type], axis.doc, axis.required) for axis in AXES),
    # the attack at the policy's operating point
    Column("threat_model", STR, "which adversary the attack is: black_box_final (the final "
                                "model's outputs), white_box_final (its weights) or "
                                "white_box_iterates (every iterate; gradient canaries)"),
    Column("policy_uses_target_labels", BOOL, "the threshold was chosen on the evaluation labels"),
    Column("eval_records", I64, "records the attack was evaluated on"),
    Column("members", I64, "members among the evaluated records"),
    Column("baseline", F64, "share of members among the evaluated records (always-member precision)"),
    Column("precision", F64, "the attack's precision TP/(TP+FP) at its threshold (NaN for PDTP)"),
    Column("precision_ci_low", F64, "lower end of the precision's 95 % Clopper-Pearson interval"),
    Column("precision_ci_high", F64, "upper end of the precision's 95 % Clopper-Pearson interval"),
    Column("tp", I64, "members accepted"),
    Column("fp", I64, "non-members accepted"),
    Column("threshold", F64, "score threshold of the operating point (NaN: per-class thresholds)"),
    Column("accepted_fraction", F64, "share of evaluated records accepted"),
    Column("tpr", F64, "true-positive rate at the threshold"),
    Column("fpr", F64, "false-positive rate at the threshold"),
    Column("tpr_at_fpr_0.001", F64, "TPR at FPR 0.1 %, threshold-free"),
    Column("tpr_at_fpr_0.01", F64, "TPR at FPR 1 %, threshold-free"),
    Column("auc", F64, "ROC AUC, threshold-free"),
    Column("advantage", F64, "Yeom et al.'s advantage: max over thresholds of TPR - FPR"),
    Column("advantage_at_threshold", F64, "TPR - FPR at the policy's operating point"),
    Column("loss_bound", F64, "B of loss_randomized (Yeom et al.'s Adversary 1); NaN otherwise"),
    Column("gamma", F64, "non-members per member, (1 - p)/p"),
    Column("ppv_at_gamma", F64, "precision of the operating point's rates at γ (Jayaraman et al.)"),
    # the bounds
    Column("tpr_floor", F64, "least TPR the bound U is taken at"),
    Column("bound_form", STR, "form of the δ-term of U (derived, or the paper's printed one)"),
    Column("bound", F64, "U at the cell's ε, δ, p for any attack with TPR >= tpr_floor"),
    Column("bound_at_tpr", F64, "U at the attack's measured TPR, floored"),
    Column("bound_lower", F64, "the pure ε-DP lower bound on precision"),
    Column("audit_alpha", F64, "level of the one-sided epsilon_audit* claims"),
    Column("epsilon_audit", F64, "ε the precision proves (δ = 0) at level audit_alpha"),
    Column("epsilon_audit_rates", F64, "ε the (TPR, FPR) ends prove at level audit_alpha"),
    Column("precision_proven", F64, "precision's one-sided lower end of the violation test"),
    Column("bound_at_tpr_low", F64, "U at the TPR's one-sided lower end (the violation test)"),
    Column("epsilon_proven_rates", F64, "ε the rates' one-sided ends prove (the violation test)"),
    Column("epsilon_audit_cp", F64, "Clopper-Pearson ε at δ, best of the 40 top-quantile "
                                    "thresholds, Bonferroni over them: confidence 1 - audit_alpha "
                                    "for independent observations (gradient canaries), any "
                                    "mechanism; an estimate for records of one model"),
    Column("epsilon_audit_gdp", F64, "Gaussian-DP ε at δ (μ from the same exact ends): "
                                     "confidence 1 - audit_alpha only for gradient canaries where "
                                     "training is exactly Gaussian (q = 1); an estimate otherwise; "
                                     "NaN at δ = 0"),
    Column("epsilon_audit_one_run", F64, "Steinke et al.'s one-run ε at δ, best of 6 guess counts "
                                         "(Bonferroni): confidence 1 - audit_alpha; NaN at "
                                         "p != 1/2 with δ > 0"),
    Column("epsilon_audit_one_run_fdp", F64, "Mahloujifar et al.'s f-DP reading of the same "
                                             "one-run guesses at δ: confidence 1 - audit_alpha; "
                                             "NaN at p ≠ 1/2 and at δ = 0"),
    Column("epsilon_audit_family", F64, "ε at δ of the least noise the canaries rule out for "
                                        "DP-SGD at the training's q and steps (gradient canaries "
                                        "only): confidence 1 - audit_alpha at any q"),
    Column("epsilon_audit_family_lr", F64, "ε at δ of the weakest DP-SGD engine (any clip norm, "
                                           "any noise) the canaries' summed log-likelihood "
                                           "ratios leave, through their law, claimed only where "
                                           "in and out separate (canary_gradient_iterates at "
                                           "q < 1): confidence 1 - audit_alpha"),
    Column("epsilon_audit_final_law", F64, "ε at δ of the last iterate's mechanism at the "
                                           "weakest engine (any clip norm, any noise) the "
                                           "gradient canaries' final displacements leave, "
                                           "through their law (canary_gradient_final under SGD "
                                           "without momentum): confidence 1 - audit_alpha"),
    Column("epsilon_proven_audit", F64, "the largest ε the audits valid for this cell prove at "
                                        "level violation_alpha (the violation test)"),
    Column("violation", BOOL, "the data prove training was not (ε, δ)-DP: a bug, never noise"),
    Column("violation_reason", STR, "which tests fired, joined by '+': precision, rates, "
                                    "audit_cp, audit_gdp, audit_one_run, audit_one_run_fdp, "
                                    "audit_family, audit_family_lr, audit_final_law (where "
                                    "valid), profile "
                                    "(precision above bound_profile), accounting "
                                    "(epsilon_spent above ε); '' none"),
    Column("audit_departure", STR, "how the gradient canaries' summed log-likelihood ratios, "
                                   "or their final displacements, depart from the mechanism "
                                   "claimed (noise, clip), each with its evidence, at level "
                                   "violation_alpha; '' none"),
    Column("tpr_exact", F64, "exact TPR of a mechanism of known privacy (bound_check); NaN else"),
    Column("precision_exact", F64, "exact precision of that mechanism's threshold attack; NaN else"),
    Column("bound_tight", F64, "least bound over that mechanism's privacy profile; NaN else"),
    Column("bound_profile", F64, "least U over the training's whole privacy profile δ(ε') (its σ,"
                                 " q, steps; PRV accountant, exact at q = 1) at tpr_floor; NaN "
                                 "without DP-SGD"),
    # PDTP cells (Long et al.); null in other cells
    Column("pdtp_records", I64, "records PDTP was measured on"),
    Column("pdtp_mean_single", F64, "mean single-model PDTP"),
    Column("pdtp_mean_averaged", F64, "mean PDTP of the seed-averaged probabilities"),
    Column("pdtp_max_averaged", F64, "max PDTP of the seed-averaged probabilities"),
    Column("dtp1_share_single", F64, "share of records with single-model PDTP above the DTP-1 line"),
    Column("dtp1_share_averaged", F64, "share of records with averaged PDTP above the DTP-1 line"),
    Column("pdtp_seed_mean", F64, "the paper's mean over seeds of per-seed PDTP"),
    Column("dtp1_share_seed_mean", F64, "share of records whose seed-mean PDTP is above the line"),
    Column("pdtp_query_key", STR, "content key of the stored per-record PDTP table"),
    # the target model
    Column("test_accuracy", F64, "target's test accuracy after training"),
    Column("best_test_accuracy", F64, "target's best test accuracy over its epochs"),
    Column("train_accuracy", F64, "target's accuracy on its training set"),
    Column("epsilon_spent", F64, "ε the accountant reports (null: non-private)"),
    Column("epsilon_last_iterate", F64, "the final model's heuristic ε at δ (Steinke et al. 2025: "
                                        "Binomial(T, q) + N(0, σ²T) against N(0, σ²T)), the "
                                        "ceiling of final-model audits; NaN without DP-SGD"),
    Column("noise_multiplier", F64, "DP-SGD noise multiplier (null: non-private)"),
    Column("dp_sample_rate", F64, "DP-SGD's per-step sampling rate q (NaN: non-private)"),
    Column("steps", I64, "optimizer steps of the target's training"),
    Column("optimizer", STR, "the target's optimizer: sgd, or adam (DP-Adam)"),
    Column("momentum", F64, "the SGD momentum of the target's training (0: plain SGD)"),
    Column("train_size", I64, "records in the target's training set"),
    # what the cell cost
    Column("train_seconds", F64, "wall seconds the target's training took (since a resume; its "
                                 "share when K models trained at once; NaN: not recorded)"),
    Column("attack_seconds", F64, "wall seconds of the attack task that scored this cell "
                                  "(shared by the cells of its policies)"),
    # keys
    Column("model_key", STR, "content key of the target model (models/<key>/)", True),
    Column("scores_key", STR, "content key of the attack's per-record scores: joins the scores "
                              "dataset", True),
    Column("cell_key", STR, "content key of the cell: unique within a sweep", True),
    Column("schema_version", I64, "RESULTS_SCHEMA_VERSION of the code that wrote the row", True),
)

#: The per-record scores' columns (`results/scores`): one row per record and attack, joined to
#: the cells on (`sweep`, `scores_key`).
SCORE_COLUMNS: tuple[Column, ...] = (
    Column("record_id", I64, "index of the record in the sweep's pool", True),
    Column("score", F64, "the attack's membership score (higher: more likely a member; null: "
                         "none for this record)"),
    Column("member", BOOL, "ground truth: the record was in the target's training set", True),
    Column("model_key", STR, "content key of the target model", True),
    Column("attack", STR, "membership-inference attack", True),
)

#: In the compacted scores dataset only: which stored scores a row comes from (a cell's
#: `scores_key`; several cells, one per policy, share one).
SCORES_KEY_COLUMN = Column("scores_key", STR, "content key of the scores: joins cells.scores_key",
                           True)


def _schema(columns: tuple[Column, ...], version: int) -> pa.Schema:
    return pa.schema([column.field() for column in columns], metadata={VERSION_KEY: str(version)})


CELLS_SCHEMA = _schema(CELL_COLUMNS, RESULTS_SCHEMA_VERSION)
SCORES_SCHEMA = _schema(SCORE_COLUMNS, SCORES_SCHEMA_VERSION)
SCORES_DATASET_SCHEMA = _schema((SCORES_KEY_COLUMN, *SCORE_COLUMNS), SCORES_SCHEMA_VERSION)


def row_table(row: Mapping[str, Any]) -> pa.Table:
    """One cell's row as a one-row table of `CELLS_SCHEMA`; refuses unknown or mistyped columns and
    missing required ones, naming each (a column a cell has no value for is null)."""
    names = {column.name for column in CELL_COLUMNS}
    problems = [f"unknown column {name!r}" for name in row if name not in names]
    arrays = []
    for column in CELL_COLUMNS:
        value = row.get(column.name)
        if column.required and (value is None or (isinstance(value, float) and math.isnan(value))):
            problems.append(f"column {column.name!r} is required")
            continue
        try:
            arrays.append(pa.array([value], type=column.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as error:
            problems.append(f"column {column.name!r} ({column.type}): {value!r} does not fit ({error})")
    if problems:
        raise SchemaError("results row refused: " + "; ".join(problems))
    return pa.Table.from_arrays(arrays, schema=CELLS_SCHEMA)


def conform(table: pa.Table, schema: pa.Schema, what: str) -> pa.Table:
    """`table` with exactly `schema`'s columns, in order and type (absent nullable ones as nulls):
    cells landed by an older version of the row read into the current schema, anything else
    is refused."""
    if table.schema.equals(schema):  # written by this version: nothing to do
        return table
    problems = [f"unknown column {name!r}" for name in table.column_names
                if schema.get_field_index(name) < 0]
    arrays = []
    for field in schema:
        if field.name not in table.column_names:
            if not field.nullable:
                problems.append(f"column {field.name!r} is required")
                continue
            arrays.append(pa.nulls(len(table), field.type))
            continue
        if not field.nullable and table[field.name].null_count:
            problems.append(f"column {field.name!r} is required, but has nulls")
            continue
        try:
            arrays.append(table[field.name].cast(field.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as error:
            problems.append(f"column {field.name!r} is {table[field.name].type}, not {field.type} "
                            f"({error})")
    if problems:
        raise SchemaError(f"{what} does not fit its schema: " + "; ".join(problems))
    return pa.Table.from_arrays(arrays, schema=schema)


#: Where the generated column tables sit in docs/results.md: everything between these lines is
#: `markdown()`'s output, and is rewritten, never edited by hand.
#: This checkout's docs folder, whose generated tables `--write` rewrites.
DOCS = Path(__file__).resolve().parents[2] / "docs"
COLUMNS_BEGIN = "<!-- columns: generated by `python -m sweeper.cli.columns_command --markdown`; do not edit by hand -->"
COLUMNS_END = "<!-- columns: end -->"


def markdown_table(columns: Sequence[Column]) -> str:
    """`columns` as a Markdown table: name, Arrow type, whether it may be null, and its doc."""
    lines = ["| column | type | null | meaning |", "|---|---|---|---|"]
    for column in columns:
        doc = column.doc.replace("|", "\\|")  # a doc's own bar would split the row
        lines.append(f"| `{column.name}` | {column.type} | {'never' if column.required else 'allowed'}"
                     f" | {doc} |")
    return "\n".join(lines)


def markdown() -> str:
    """docs/results.md's column tables: the results table's and the per-record scores' datasets."""
    return "\n".join([
        f"Results table (`results/cells`, one row per cell; `CELL_COLUMNS`, version "
        f"{RESULTS_SCHEMA_VERSION}):",
        "",
        markdown_table(CELL_COLUMNS),
        "",
        f"Per-record scores (`results/scores`, one row per record and attack; `SCORE_COLUMNS` and "
        f"`scores_key`, version {SCORES_SCHEMA_VERSION}):",
        "",
        markdown_table((SCORES_KEY_COLUMN, *SCORE_COLUMNS)),
    ])


def marked_section(text: str, begin_marker: str = COLUMNS_BEGIN,
                   end_marker: str = COLUMNS_END) -> Optional[str]:
    """What `text` (a docs page) holds between two markers (the column tables' by default), or
    None."""
    begin, end = text.find(begin_marker), text.find(end_marker)
    if begin < 0 or end < begin:
        return None
    return text[begin + len(begin_marker):end].strip("\n")


#: docs/attacks.md's attack table sits between these (`attack_markdown`).
ATTACKS_BEGIN = "<!-- attacks: generated by `python -m sweeper.cli.columns_command --attacks`; do not edit by hand -->"
ATTACKS_END = "<!-- attacks: end -->"


def attack_markdown() -> str:
    """docs/attacks.md's attack table: every registered attack (`jobs.attacks.contract.markdown_table`),
    what each is, needs and reads, as its registration says."""
    from jobs.attacks.contract import markdown_table, ATTACKS
    from jobs.attacks.queries import QUERIES

    return markdown_table(ATTACKS, [name for name, kind in QUERIES.items() if kind.held_out])
