"""`sweeper bounds` (`python -m sweeper.cli.bounds_command`): the membership-inference bounds at
the command line.

Subcommands answer the questions a team asks before training: how far can any attacker's
precision go (`precision`), which ε or which sampling rate p keeps it under a target (`plan`),
how this bound compares with earlier ones (`compare`), and the papers' figures (`plot`).
Every subcommand takes --json for machine-readable output.  ε = ∞ is written as every sweeper
command writes it (`sweeper.formats`): `∞` in tables, the string "inf" in JSON.
The subcommands whose numbers depend on δ take --form: "derived" (default) is Theorem 3.3's proof
carried through, "printed" the formula as the papers print it (not a valid bound for δ > 0 and
p < 1; see `sweeper.bounds`).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from typing import Any, Callable, Optional, Sequence

from sweeper import VERSION_TEXT
from sweeper.bounds import (
    BOUND_FORMS,
    DEFAULT_TPR_FLOOR,
    epsilon_for_precision,
    jayaraman_ppv_bound,
    max_sampling_rate,
    precision_bound,
    precision_lower_bound,
)
from sweeper.bounds.compare import ACCURACY, BOUNDS, PRECISION, Settings, compare_rows
from sweeper.formats import format_epsilon, jsonable

Row = dict[str, Any]

HELP_EPSILON = "DP budget ε of the training run (comma list; 'inf' = non-private)"
HELP_P = "sampling probability p = P(x* is drawn into the training set) (comma list)"
HELP_DELTA = "DP δ of the training run; 0 gives the pure ε-DP bound (default 0)"
HELP_TPR = (f"TPR floor s: the bound covers every attack that flags x* at least this often when "
            f"x* was trained on; only matters when δ > 0 (default {DEFAULT_TPR_FLOOR})")
HELP_TARGET = "target precision β: the most any attacker's precision may reach (comma list)"
HELP_JSON = "print machine-readable JSON instead of a table"
HELP_FORM = ("δ-term of Theorem 3.3: 'derived' (default, the proof carried through) or 'printed' "
             "(the papers' formula, invalid for δ > 0 and p < 1); only matters when δ > 0")


def _floats(text: str) -> list[float]:
    """Parse a comma-separated list of numbers ('inf' allowed)."""
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one number")
    return values


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    return format_epsilon(value) if math.isinf(value) else f"{value:.4g}"


def _table(columns: Sequence[tuple[str, str]], rows: Sequence[Row]) -> str:
    """Aligned text table; `columns` are (key, header).  Numbers right-aligned, the last text
    column (a note) left-aligned."""
    cells = [[_fmt(row.get(key)) for key, _ in columns] for row in rows]
    widths = [max([len(header)] + [len(r[i]) for r in cells]) for i, (_, header) in enumerate(columns)]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if i < len(columns) - 1 or columns[-1][0] != "note" else v
                 for i, (v, w) in enumerate(zip(values, widths))]
        return "  ".join(parts).rstrip()

    head = line([header for _, header in columns])
    return "\n".join([head, "-" * len(head)] + [line(r) for r in cells])


def _emit(args: argparse.Namespace, payload: dict[str, Any], text: str) -> None:
    if args.json:
        print(json.dumps(jsonable(payload), indent=2, allow_nan=False))
    else:
        print(text)


def _validate(parser: argparse.ArgumentParser, check: Callable[[], Any]) -> None:
    """Run the library's own validation on the whole argument set; a bad value exits 2."""
    try:
        check()
    except ValueError as err:
        parser.error(str(err))


# --------------------------------------------------------------------------- subcommands


def cmd_precision(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    _validate(parser, lambda: precision_bound(args.epsilon, 0.5, args.delta, args.tpr))
    _validate(parser, lambda: precision_bound(0.0, args.p))
    rows = []
    for eps, p in itertools.product(args.epsilon, args.p):
        rows.append({"epsilon": eps, "p": p, "delta": args.delta, "tpr": args.tpr,
                     "lower": precision_lower_bound(eps, p),
                     "upper": precision_bound(eps, p, args.delta, args.tpr, form=args.form)})
    columns = [("epsilon", "ε"), ("p", "p"), ("delta", "δ"), ("tpr", "s"),
               ("lower", "lower (δ=0)"), ("upper", "upper U")]
    text = (f"Every attack's precision P(x* ∈ D | flagged) lies in [lower, U] "
            f"(U: {args.form} form):\n" + _table(columns, rows))
    _emit(args, {"form": args.form, "rows": rows}, text)
    return 0


def cmd_plan(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    by_p = args.p is not None
    if by_p:
        _validate(parser, lambda: precision_bound(0.0, args.p, args.delta, args.tpr))
    else:
        _validate(parser, lambda: precision_bound(args.epsilon, 0.5))
    _validate(parser, lambda: max_sampling_rate(args.target, 0.0, args.delta, args.tpr,
                                                form=args.form))
    rows = []
    for target, value in itertools.product(args.target, args.p if by_p else args.epsilon):
        row: Row = {"target": target, "delta": args.delta, "tpr": args.tpr}
        if by_p:
            row.update(p=value, epsilon=None, note="")
            try:
                row["epsilon"] = epsilon_for_precision(target, value, args.delta, args.tpr,
                                                       form=args.form)
            except ValueError as err:  # an impossible combination: say why on its row
                row["note"] = str(err)
        else:
            row.update(epsilon=value, note="",
                       p=max_sampling_rate(target, value, args.delta, args.tpr, form=args.form))
            if value == math.inf and target < 1.0:
                row["note"] = "non-private: only an empty training set meets a target below 1"
            elif args.form == "derived" and args.delta >= args.tpr and target < 1.0:
                row["note"] = (f"δ ≥ s = {args.tpr:g}: the bound is vacuous for every p > 0; "
                               f"raise the TPR floor s above δ or lower δ")
        rows.append(row)
    if by_p:
        columns = [("target", "target β"), ("p", "p"), ("epsilon", "largest ε"), ("note", "note")]
        intro = "Largest ε that keeps every attacker's precision ≤ β at each p:"
    else:
        columns = [("target", "target β"), ("epsilon", "ε"), ("p", "largest p"), ("note", "note")]
        intro = "Largest sampling rate p that keeps every attacker's precision ≤ β at each ε:"
    if args.delta > 0:
        intro += f"  (δ = {args.delta:g}, TPR floor s = {args.tpr:g}, {args.form} form)"
    _emit(args, {"mode": "epsilon_for_p" if by_p else "p_for_epsilon", "form": args.form,
                 "rows": rows},
          intro + "\n" + _table(columns, rows))
    return 0


def cmd_compare(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    p = args.p
    _validate(parser, lambda: jayaraman_ppv_bound(args.epsilon_grid, args.delta, args.fpr, 1.0))
    _validate(parser, lambda: precision_bound(args.epsilon_grid, p, args.delta, args.tpr))
    settings = Settings(p=p, delta=args.delta, tpr=args.tpr, fpr=args.fpr, form=args.form)
    rows = compare_rows(args.epsilon_grid, settings)
    headers = {b.key: b.header.replace("@FPR", f"@FPR={args.fpr:g}") for b in BOUNDS}
    precision_cols = [("epsilon", "ε")] + [(b.key, headers[b.key]) for b in BOUNDS
                                            if b.kind == PRECISION]
    accuracy_cols = [("epsilon", "ε")] + [(b.key, headers[b.key]) for b in BOUNDS
                                           if b.kind == ACCURACY]
    text = (f"Precision bounds at p = {p:g} (δ = {args.delta:g}, Thudi U in {args.form} form; "
            f"Sablayrolles is ε-DP only, "
            f"Mahloujifar only at p = 0.5, Jayaraman at γ = (1−p)/p):\n"
            + _table(precision_cols, rows)
            + "\n\nAccuracy bounds in Yeom's balanced experiment (p = 0.5), clipped to 1:\n"
            + _table(accuracy_cols, rows))
    payload = {"p": p, "delta": args.delta, "tpr": args.tpr, "fpr": args.fpr,
               "form": args.form, "rows": rows}
    if args.plot:
        from sweeper.bounds.plots import plot_compare  # matplotlib only when plotting

        payload["plot"] = str(plot_compare(args.plot, settings, args.epsilon_grid))
        text += f"\n\nplot: {payload['plot']}"
    _emit(args, payload, text)
    return 0


def cmd_plot(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from sweeper.paths import folder_problem

    problem = folder_problem("--out", args.out, args.out)  # before matplotlib, not after
    if problem:
        parser.error(problem)
    from sweeper.bounds.plots import write_figures  # matplotlib only when plotting

    paths = [str(path) for path in write_figures(args.out)]
    _emit(args, {"files": paths}, "\n".join(paths))
    return 0


# --------------------------------------------------------------------------- parser


def _shared_options() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """Parent parsers for the options several subcommands repeat: the δ-term's (--delta, --tpr,
    --form; `precision`, `plan`, `compare`) and the output's (--json; every subcommand).

    Declared once so that a default or a help text cannot drift between subcommands.  Each sits
    in its own titled group, which `--help` lists after the subcommand's own options.
    """
    delta_term = argparse.ArgumentParser(add_help=False)
    group = delta_term.add_argument_group("δ-term options")
    group.add_argument("--delta", type=float, default=0.0, help=HELP_DELTA)
    group.add_argument("--tpr", type=float, default=DEFAULT_TPR_FLOOR, help=HELP_TPR)
    group.add_argument("--form", choices=BOUND_FORMS, default="derived", help=HELP_FORM)
    output = argparse.ArgumentParser(add_help=False)
    output.add_argument_group("output").add_argument("--json", action="store_true", help=HELP_JSON)
    return delta_term, output


def build_parser(prog: str = "python -m sweeper.cli.bounds_command") -> argparse.ArgumentParser:
    delta_term, output = _shared_options()
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Bounds on membership-inference precision from (ε, δ)-DP and the sampling "
                    "rate p (Thudi et al. 2022/2024).")
    parser.add_argument("--version", action="version", version=VERSION_TEXT)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    fmt = argparse.RawDescriptionHelpFormatter

    precision = sub.add_parser(
        "precision", formatter_class=fmt, parents=[delta_term, output],
        help="bounds on any attack's precision",
        description="Print, for each (ε, p), the interval every attack's precision lies in.\n"
                    "  upper U: Theorem 3.3, the most precision any attack flagging x* can have\n"
                    "  lower:   the least precision any attack that flags x* can have (ε-DP)")
    precision.add_argument("--epsilon", type=_floats, required=True, help=HELP_EPSILON)
    precision.add_argument("--p", type=_floats, required=True, help=HELP_P)
    precision.set_defaults(func=cmd_precision, parser=precision)

    plan = sub.add_parser(
        "plan", formatter_class=fmt, parents=[delta_term, output],
        help="which ε or which p keeps precision under a target",
        description="Invert the bound for planning.\n"
                    "  with --p:       the largest ε whose bound U stays ≤ target at each p\n"
                    "  with --epsilon: the largest sampling rate p whose U stays ≤ target at each ε\n"
                    "Impossible combinations (target below the prior) say why on their row.")
    plan.add_argument("--target", type=_floats, required=True, help=HELP_TARGET)
    which = plan.add_mutually_exclusive_group(required=True)
    which.add_argument("--p", type=_floats, help=HELP_P + "; solve for ε")
    which.add_argument("--epsilon", type=_floats, help=HELP_EPSILON + "; solve for p")
    plan.set_defaults(func=cmd_plan, parser=plan)

    compare = sub.add_parser(
        "compare", formatter_class=fmt, parents=[delta_term, output],
        help="this bound next to earlier ones over an ε grid",
        description="Compare Thudi et al.'s bound with earlier bounds (2022 paper, Table 1).\n"
                    "  precision bounds: Thudi U, Sablayrolles p + ε/4, Mahloujifar 1/(1+e^-ε),\n"
                    "                    Jayaraman PPV at a given FPR\n"
                    "  accuracy bounds (p = 0.5): Humphries, Erlingsson, Yeom e^ε/2")
    compare.add_argument("--p", type=float, default=0.5, help="sampling probability p (default 0.5)")
    compare.add_argument("--epsilon-grid", type=_floats, default=[0.1, 0.25, 0.5, 1, 2, 3, 4, 6, 8],
                         help="ε values to tabulate (comma list)")
    compare.add_argument("--fpr", type=float, default=0.01,
                         help="attack FPR α at which Jayaraman et al.'s PPV bound is taken (default 0.01)")
    compare.add_argument("--plot", metavar="PNG",
                         help="also draw every bound of the table against ε into this PNG: "
                              "precision bounds (at p) and accuracy bounds (p = 0.5) in two panels")
    compare.set_defaults(func=cmd_compare, parser=compare)

    plot = sub.add_parser(
        "plot", formatter_class=fmt, parents=[output], help="write the papers' bound figures as PNG",
        description="Write PNGs:\n"
                    "  bound_vs_p.png:         U against p for ε ∈ {0.1, 1, 2, 5} (2024 Fig. 1)\n"
                    "  compare_vs_epsilon.png: every bound of `compare` against ε at p = 0.5 (2022 Fig. 11)\n"
                    "  compare_vs_p.png:       U vs Sablayrolles et al. against p (2022 Fig. 12)")
    plot.add_argument("--out", default="bounds_plots", help="directory for the PNGs (default ./bounds_plots)")
    plot.set_defaults(func=cmd_plot, parser=plot)
    return parser


def main(argv: Optional[Sequence[str]] = None, prog: str = "python -m sweeper.cli.bounds_command") -> int:
    """Run the command line; return the exit status (2 for bad input, as argparse does)."""
    parser = build_parser(prog)
    try:
        args = parser.parse_args(argv)
        return args.func(args, args.parser)
    except SystemExit as exit_:  # argparse's --help (0) and usage errors (2)
        return 0 if exit_.code is None else exit_.code if isinstance(exit_.code, int) else 2


if __name__ == "__main__":
    sys.exit(main())
