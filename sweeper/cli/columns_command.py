"""`python -m sweeper.cli.columns_command`: the declared columns of the results and scores
datasets, or the registered attacks, printed, or written into the docs page between its markers
(`--write`, after adding a column or an attack); the tables are `sweeper.store.columns`'.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Optional, Sequence

from sweeper.store.columns import (ATTACKS_BEGIN, ATTACKS_END, CELL_COLUMNS, COLUMNS_BEGIN,
                                   COLUMNS_END, DOCS, SCORE_COLUMNS, SCORES_KEY_COLUMN,
                                   attack_markdown, markdown, marked_section)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sweeper.cli.columns_command",
        description="Print the declared columns of the results and per-record scores datasets, "
                    "or the registered attacks.")
    parser.add_argument("--markdown", action="store_true",
                        help="as docs/results.md's Markdown tables (the text between its markers)")
    parser.add_argument("--attacks", action="store_true",
                        help="docs/attacks.md's attack table, from the attack registry")
    parser.add_argument("--write", action="store_true",
                        help="with --markdown or --attacks: replace the table between its page's "
                             "markers instead of printing it (after adding a column or an attack)")
    parser.add_argument("--docs", type=Path, default=DOCS, help="the docs folder --write rewrites "
                                                                 "(default: this checkout's)")
    args = parser.parse_args(argv)
    if args.write and not (args.attacks or args.markdown):
        parser.error("--write rewrites the table of --markdown or --attacks: give one")
    if args.attacks or args.markdown:
        page, begin, end, table = ((args.docs / "attacks.md", ATTACKS_BEGIN, ATTACKS_END,
                                    attack_markdown()) if args.attacks else
                                   (args.docs / "results.md", COLUMNS_BEGIN, COLUMNS_END, markdown()))
        if not args.write:
            print(table)
            return 0
        text = page.read_text(encoding="utf-8")
        if marked_section(text, begin, end) is None:
            parser.error(f"{page} lacks the table's markers")
        start, stop = text.index(begin) + len(begin), text.index(end)
        page.write_text(text[:start] + "\n" + table + "\n" + text[stop:], encoding="utf-8")
        print(f"rewrote the table in {page}")
    else:
        for column in (*CELL_COLUMNS, SCORES_KEY_COLUMN, *SCORE_COLUMNS):
            print(f"{column.name}\t{column.type}\t{column.doc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
