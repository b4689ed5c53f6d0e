"""`sweeper frontier`: the frontier table of a sweep, printed, its rows as JSON or CSV, and its
figures drawn into the store; the library it prints is `sweeper.frontier` (no argparse there,
so a notebook imports it as it is).

Command line: `sweeper frontier --help` (or `python -m sweeper.cli.frontier_command`); exit codes in
`EXIT_CODES`.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import pandas as pd

from sweeper import VERSION_TEXT
from sweeper.axes import BY_NAME, GRID_AXES
from sweeper.cli.sweep_options import SweepNotOpened, add_sweep_location, one_line, opened_sweep
from sweeper.formats import format_epsilon, jsonable
from sweeper.frontier import (draw_figures, format_summary, format_table, select, sweep_location,
                              table_rows, violation_warning)
from sweeper.paths import file_problem
from sweeper.store.artifacts import ArtifactStore, links_on_the_way, links_refusal
from sweeper.store.files import LinkInStore
from sweeper.store.results import CELLS_DATASET, Coverage, sort_frontier

#: The command's exit codes.
EXIT_OK, EXIT_FAILED, EXIT_REFUSED, EXIT_INCOMPLETE = 0, 1, 2, 3
EXIT_CODES = {EXIT_OK: "every cell of the sweep is present (violations are warned about, not an "
                       "exit code)",
              EXIT_FAILED: "a figure or table could not be written (a full disk): said in one line",
              EXIT_REFUSED: "bad arguments, no such sweep, an unreadable store or sweep.json, a "
                            "symbolic link where the command would write in the store",
              EXIT_INCOMPLETE: "some cells are missing, failed or corrupt (the table shows the "
                               "others; --allow-partial exits 0)"}


def _parser(prog: str = "python -m sweeper.cli.frontier_command") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Print the bound-vs-attack frontier of a finished (or running) sweep: for "
                    "every attack, ε, δ and p, the attack's precision pooled over trials with its "
                    "exact 95 % Clopper-Pearson interval next to the Thudi et al. bound U (--trials: "
                    "one line per trial), and draw it as a figure.",
    )
    add_sweep_location(parser)
    parser.add_argument("--trials", action="store_true",
                        help="one line per trial (every cell), not the pooled summary")
    parser.add_argument("--attack", action="append", default=[], metavar="NAME",
                        help="only this attack (repeat for several; default: all)")
    parser.add_argument("--epsilon", action="append", default=[], metavar="ε",
                        help="only this ε (inf or ∞ for none; repeat for several)")
    parser.add_argument("--p", action="append", default=[], metavar="P",
                        help="only this sampling probability p (repeat for several)")
    for axis in FILTERED_AXES:  # every other grid axis, as it declares itself
        parser.add_argument(option_of(axis.name), dest=axis.name, action="append", default=[],
                            type=axis.python_type, metavar=axis.label,
                            help=f"only this {axis.name}: {axis.doc} (repeat for several)")
    parser.add_argument("--json", action="store_true",
                        help="print the table's rows as JSON records (the pooled rows; with "
                             "--trials the cells, one per trial); draws no figure unless --plot "
                             "is given")
    parser.add_argument("--csv", metavar="PATH",
                        help="also write the table's rows as CSV to PATH (the pooled rows; with "
                             "--trials the cells, one per trial)")
    parser.add_argument("--plot", metavar="PATH",
                        help="the figure's path; its suffix picks the format (.png, .pdf, .svg; "
                             "default: <run dir>/frontier.png, for a remote store a local cache). "
                             "The figure always shows the whole sweep")
    parser.add_argument("--no-plot", action="store_true", help="do not draw the figure")
    parser.add_argument("--version", action="version", version=VERSION_TEXT)
    parser.add_argument("--allow-partial", action="store_true",
                        help=f"exit {EXIT_OK} even when some of the sweep's cells are missing, "
                             "failed or corrupt (they are still listed)")
    parser.epilog = "exit codes: " + "; ".join(f"{code}: {text}" for code, text in EXIT_CODES.items())
    return parser


def filter_problems(frame: pd.DataFrame, attacks: Sequence[str], epsilons: Sequence[float],
                    ps: Sequence[float], recipe: Optional[dict[str, Sequence[float]]] = None
                    ) -> list[str]:
    """Every filter value the sweep has no cell at, each named with the values it has: a typo
    must not print an empty table."""
    if frame.empty:
        return []
    problems = []
    filters: list[tuple[str, Sequence[Any], str, Callable[[Any], str]]] = [
        ("--attack", attacks, "attack", str), ("--epsilon", epsilons, "epsilon", format_epsilon),
        ("--p", ps, "p", "{:g}".format),
        *((option_of(name), values, name, BY_NAME[name].text)
          for name, values in (recipe or {}).items())]
    for option, values, column, show in filters:
        have = list(dict.fromkeys(frame[column].dropna())) if column in frame else []
        for value in values:
            if select(frame, **({FILTER_AXES[column]: [value]} if column in FILTER_AXES
                                else {"recipe": {column: [value]}})).empty:
                problems.append(f"{option} {show(value)}: the sweep has none "
                                f"(it has {', '.join(show(v) for v in have) or 'no value'})")
    return problems


def option_of(axis: str) -> str:
    """A grid axis's filter option, in the command's hyphenated style: `--max-grad-norm`."""
    return "--" + axis.replace("_", "-")


#: `select`'s argument for each column filtered by an option of its own (ε is read as a
#: number or inf/∞); every other grid axis but the pooled trial is filtered by its declaration
#: (`FILTERED_AXES`: `--delta`, `--policy`, `--model`, `--max-grad-norm`, …).
FILTER_AXES = {"attack": "attacks", "epsilon": "epsilons", "p": "ps"}


FILTERED_AXES = tuple(axis for axis in GRID_AXES if axis.name not in FILTER_AXES and not axis.pooled)


def parse_epsilon(text: str) -> float:
    """ε as written on a command line: a number, or inf / ∞ for none."""
    return math.inf if text.strip().lower() in ("inf", "∞", "+inf") else float(text)


def parsed_filters(epsilons: Sequence[str], ps: Sequence[str]
                   ) -> tuple[list[float], list[float], list[str]]:
    """The --epsilon and --p values as numbers, and a problem for each that is none (all of
    them, so one run of the command names every bad value)."""
    problems: list[str] = []

    def numbers(option: str, texts: Sequence[str], parse, what: str) -> list[float]:
        values = []
        for text in texts:
            try:
                value = parse(text)
            except ValueError:
                value = math.nan
            if math.isnan(value):
                problems.append(f"{option} {text}: {what}")
            else:
                values.append(value)
        return values

    return (numbers("--epsilon", epsilons, parse_epsilon, "not a number (inf or ∞ for none)"),
            numbers("--p", ps, float, "not a number"), problems)


def main(argv: Optional[Sequence[str]] = None,
         prog: str = "python -m sweeper.cli.frontier_command") -> int:
    args = _parser(prog).parse_args(argv)
    outputs = output_problems(args)
    if any(outputs):  # before the table: a file that cannot be written is known now
        print("error: " + "; ".join(problem for problem in outputs if problem), file=sys.stderr)
        return EXIT_REFUSED
    epsilons, ps, problems = parsed_filters(args.epsilon, args.p)
    def no_links(store: ArtifactStore, name: str) -> None:
        links = writes_links(store, name, args)
        if links:
            raise ValueError(links_refusal(links, "this command"))

    try:
        store, name, results = opened_sweep(args, then=no_links)
    except SweepNotOpened as refused:
        print("error: " + "; ".join([*problems, str(refused)]), file=sys.stderr)
        return EXIT_REFUSED
    frame, coverage = sort_frontier(results.frame), results.coverage
    recipe = {axis.name: getattr(args, axis.name) for axis in FILTERED_AXES}
    problems += filter_problems(frame, args.attack, epsilons, ps, recipe)
    if problems:
        print(f"error: {'; '.join(problems)}", file=sys.stderr)
        return EXIT_REFUSED
    rows = select(frame, args.attack, epsilons, ps, recipe)
    notes = sys.stderr if args.json else sys.stdout
    if args.json:  # ∞ as "inf", NaN null
        print(json.dumps(jsonable(table_rows(rows, args.trials).to_dict("records")), indent=1))
    else:
        print(format_table(rows) if args.trials else format_summary(rows))
    if len(rows) < len(frame):
        given = [f"{option} {value}" for option, values in
                 (("--attack", args.attack), ("--epsilon", args.epsilon), ("--p", args.p),
                  *((option_of(name), values) for name, values in recipe.items()))
                 for value in values]
        print(f"shown: {len(rows)} of {len(frame)} cells ({', '.join(given)})", file=notes)
    try:
        if args.csv:
            store.write_output(args.csv, table_rows(rows, args.trials).to_csv(index=False).encode())
            print(f"CSV: {args.csv}", file=notes)
        if not args.no_plot and (args.plot or not args.json) and not frame.empty:
            for line in draw_figures(store, name, frame, args.plot):
                print(line, file=notes)
    except LinkInStore as link:  # put there since the check above: refused, nothing written through
        print(f"error: {one_line(link)}", file=sys.stderr)
        return EXIT_REFUSED
    except OSError as error:  # a full disk: "disk full at <path>"
        print(f"error: {one_line(error)}: nothing else was written", file=sys.stderr)
        return EXIT_FAILED
    warning = violation_warning(frame)
    if warning:
        print(warning, file=sys.stderr)
    print(f"results dataset: {store.location(CELLS_DATASET)} (sweep={name})", file=notes)
    return report_coverage(coverage, args.allow_partial)


def report_coverage(coverage: Coverage, allow_partial: bool) -> int:
    """Print how whole the sweep is (stderr when it is not) and return the exit code."""
    for note in coverage.notes:
        print(f"note: {note}", file=sys.stderr)
    if coverage.complete:
        print(coverage.summary(), file=sys.stderr)
        return EXIT_OK
    print(f"INCOMPLETE {coverage.summary()}", file=sys.stderr)
    for label in coverage.failed.values():
        print(f"FAILED {label}", file=sys.stderr)
    if coverage.corrupt:
        print(f"CORRUPT {len(coverage.corrupt)} cell file(s) failed their checksum: a rerun "
              "recomputes them", file=sys.stderr)
    if coverage.missing:
        print(f"MISSING {len(coverage.missing)} cell(s) were never stored: the sweep is running, "
              "or was stopped; a rerun computes them", file=sys.stderr)
    if allow_partial:
        return EXIT_OK
    print(f"exit {EXIT_INCOMPLETE}: the table lacks cells (--allow-partial to accept that)",
          file=sys.stderr)
    return EXIT_INCOMPLETE


def output_problems(args: argparse.Namespace) -> list[Optional[str]]:
    """Why --csv or --plot could not be written (`sweeper.paths.file_problem`, which probes the
    folder), each; one with a symbolic link on its way inside the store is not probed through
    the link: it is refused as such (`writes_links`)."""
    try:
        store: Optional[ArtifactStore] = ArtifactStore(
            sweep_location(args.experiment, args.store_root, args.run_dir)[0])
    except (ValueError, OSError):
        store = None
    problems = []
    for flag, path in (("--csv", args.csv), ("--plot", None if args.no_plot else args.plot)):
        rel = None if path is None or store is None else store.rel_of(path)
        if path is not None and not (rel is not None and store is not None
                                     and store.local_root is not None
                                     and links_on_the_way(store.local_root, [rel])):
            problems.append(file_problem(flag, path))
    return problems


def writes_links(store: ArtifactStore, name: str, args: argparse.Namespace) -> list[Path]:
    """The symbolic links on the way to what this command would write in a local store (the
    sweep's figures folder and all in it, a --csv or --plot inside the store), found before the
    table: each would also be refused as it is met (`sweeper.store.files.inside`)."""
    if store.local_root is None:
        return []
    outputs = [store.rel_of(path) for path in (args.csv, None if args.no_plot else args.plot)
               if path is not None]
    return links_on_the_way(store.local_root, ["sweeps", f"sweeps/{name}",
                                               *(rel for rel in outputs if rel is not None)],
                            [f"sweeps/{name}"])


if __name__ == "__main__":
    sys.exit(main())
