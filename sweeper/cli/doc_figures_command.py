"""`python -m sweeper.cli.doc_figures_command`: the docs' figures redrawn by the current code
from the numbers beside them (`--from-store ROOT`: those numbers refreshed first from sweeps run
into ROOT), or checked (`--check`); the figures are `sweeper.doc_figures`'.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional, Sequence

from sweeper import VERSION_TEXT
from sweeper.doc_figures import DATA, DOC_FIGURES, DOCS, redraw, stale_figures


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m sweeper.cli.doc_figures_command",
        description="Redraw the docs' figures (docs/*.png) with the current code from the "
                    "numbers beside them (docs/figures/*.csv).")
    parser.add_argument("--from-store", metavar="ROOT",
                        help="first refresh the numbers from the sweeps run into this store.root "
                             f"({', '.join(sorted({f.sweep for f in DOC_FIGURES}))})")
    parser.add_argument("--check", action="store_true",
                        help="draw nothing: list the figures whose words are not the code's "
                             "(exit 1 when any)")
    parser.add_argument("--version", action="version", version=VERSION_TEXT)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    if args.check:
        problems = stale_figures()
        for problem in problems:
            print(problem, file=sys.stderr)
        return 1 if problems else 0
    for figure in DOC_FIGURES:
        if args.from_store:
            try:
                rows = figure.extract(Path(args.from_store), figure.sweep)
            except (OSError, ValueError) as error:
                print(f"error: {figure.png}: cannot read sweep {figure.sweep!r} in "
                      f"{args.from_store}: {error}", file=sys.stderr)
                return 2
            (DOCS / DATA).mkdir(parents=True, exist_ok=True)
            rows.to_csv(DOCS / figure.data, index=False)
        print(redraw(figure, DOCS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
