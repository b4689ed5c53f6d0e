"""`sweeper report`: a sweep's self-contained HTML report written again from what the store
holds, or elsewhere (`--out`); the page is `sweeper.html_report`'s (`write_report`).

Command line: `sweeper report --help` (or `python -m sweeper.cli.report_command`); exit codes in
`EXIT_CODES` (those of `sweeper frontier`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional, Sequence

from sweeper import VERSION_TEXT
from sweeper.cli.sweep_options import SweepNotOpened, add_sweep_location, opened_sweep
from sweeper.html_report import REPORT_FILE, write_report
from sweeper.paths import file_problem

#: The command's exit codes.
EXIT_OK, EXIT_REFUSED, EXIT_INCOMPLETE = 0, 2, 3
EXIT_CODES = {EXIT_OK: "the report was written and every cell of the sweep is present",
              EXIT_REFUSED: "bad arguments, no such sweep, an unreadable store or sweep.json",
              EXIT_INCOMPLETE: "the report was written, but some cells are missing, failed or "
                               "corrupt (the report says which; --allow-partial exits 0)"}


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Write a sweep's report: one self-contained HTML file (figures inline, "
                    "its data downloadable from the page, no request to any other address) "
                    "with the claim, the frontier, the audits by threat model, the controls, "
                    "provenance and limits.  Every sweep writes it beside its frontier; this "
                    "writes it again from the store.")
    add_sweep_location(parser)
    parser.add_argument("--out", metavar="PATH",
                        help=f"where to write it (default: <run dir>/{REPORT_FILE}, for a remote "
                             "store a local cache and the store)")
    parser.add_argument("--allow-partial", action="store_true",
                        help=f"exit {EXIT_OK} even when some of the sweep's cells are missing")
    parser.add_argument("--version", action="version", version=VERSION_TEXT)
    parser.epilog = "exit codes: " + "; ".join(f"{code}: {text}" for code, text in EXIT_CODES.items())
    return parser


def main(argv: Optional[Sequence[str]] = None,
         prog: str = "python -m sweeper.cli.report_command") -> int:
    args = _parser(prog).parse_args(argv)
    if args.out is not None and file_problem("--out", args.out):
        print(f"error: {file_problem('--out', args.out)}", file=sys.stderr)
        return EXIT_REFUSED
    try:
        store, name, results = opened_sweep(args, then=lambda store, name: store.read_manifest(name))
    except SweepNotOpened as refused:
        print(f"error: {refused}", file=sys.stderr)
        return EXIT_REFUSED
    path = write_report(store, name, Path(args.out).expanduser() if args.out else None)
    print(f"report: {path}")
    if results.coverage.complete or args.allow_partial:
        return EXIT_OK
    print(f"INCOMPLETE {results.coverage.summary()} (the report says which cells)", file=sys.stderr)
    return EXIT_INCOMPLETE


if __name__ == "__main__":
    sys.exit(main())
