"""The command-line front ends, apart from the library they drive, and `sweeper`, the console
script: one command for a sweep and for the tools around it.

    sweeper [+experiment=NAME] [key=value ...]   run a sweep (exactly `python -m sweeper`)
    sweeper frontier [...]                        the frontier table and plots (`python -m sweeper.cli.frontier_command`)
    sweeper report [...]                          the sweep's self-contained HTML report (`python -m sweeper.cli.report_command`)
    sweeper bounds COMMAND [...]                  the bounds (`python -m sweeper.cli.bounds_command`)
    sweeper sync [...]                            log a sweep to MLflow again (`python -m sweeper.cli.sync_command`)
    sweeper --version

One module a command, each with its `main(argv) -> int` and its `--help`: `frontier_command`,
`report_command`, `bounds_command`, `sync_command`, and the maintainers' `columns_command` (the docs' generated
tables) and `doc_figures_command` (the docs' figures); the options of a command that reads one
sweep are `sweep_options`'.  A module's name says it is a command (`*_command`): a basename is
never shared (`tests/product/test_layers.py`), and the library keeps the plain one.  What they print
or write is library code that parses no command line (`sweeper.frontier`, `sweeper.html_report`,
`sweeper.tracking.sync`, `sweeper.store.columns`, `sweeper.doc_figures`): a notebook imports it
without argparse.  The sweep's own front end is `sweeper/__main__.py` (`python -m sweeper`
needs it there; Hydra composes its command line).

Why one script with subcommands rather than `sweeper-frontier`, `sweeper-bounds`: one name to
install, complete and remember, as `mlflow ui` and `ray job` are.  The sweep keeps the bare
form because that is Hydra's command line (`app key=value …`): a Hydra override always holds
`=` or starts with `+`/`~`/`-`, so a first word that is a subcommand's name is never one.

The installed script is also what makes Hydra's shell completion work: the bash function that
`sweeper -sc install=bash` prints completes the program named by its argv[0] and asks it
`sweeper -sc query=bash`, which `python -m sweeper` cannot answer (argv[0] is a path to
`__main__.py`).  `eval "$(sweeper -sc install=bash)"` turns it on.
"""

from __future__ import annotations

import importlib
import sys
from typing import Optional, Sequence

#: Subcommand → the module whose `main(argv) -> int` runs it.
SUBCOMMANDS = {
    "frontier": "sweeper.cli.frontier_command",
    "report": "sweeper.cli.report_command",
    "bounds": "sweeper.cli.bounds_command",
    "sync": "sweeper.cli.sync_command",
}


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Dispatch on the first word: a subcommand's name runs that tool, anything else a sweep."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in SUBCOMMANDS:
        tool = importlib.import_module(SUBCOMMANDS[argv[0]])
        sys.exit(tool.main(argv[1:], prog=f"sweeper {argv[0]}"))
    from sweeper.__main__ import cli  # Hydra, the schema: only for a sweep

    cli(argv)
