"""The private Hydra parts the command line relies on, each behind one function here.

Hydra has no public API for reading its own command line (`hydra._internal.utils.
get_args_parser`) or for expanding a `--multirun` sweep into its jobs without running them
(`hydra._internal.core_plugins.basic_sweeper.BasicSweeper.split_arguments`), and the preflight
needs both to check a command line before Hydra's launcher starts.  Private functions may change
in any Hydra release: tests/test_sweeper/checks/test_hydra_adapter.py pins what these give on concrete inputs, so an
upgrade that changes them fails there, in one place, rather than somewhere in the preflight.
The basic launcher's logger (`LAUNCHER_LOGGER`) echoes each `--multirun` job's overrides as
typed: `mask_launcher_echo` masks what is secret in them.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra._internal.utils import get_args_parser
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override


def _parser() -> argparse.ArgumentParser:
    parser = get_args_parser()
    parser.prog = "sweeper"  # not __main__.py, what `python -m sweeper` would show
    return parser


def option_names() -> list[str]:
    """Every option Hydra's command line takes (`--multirun`, `-m`, `--cfg` …)."""
    return sorted(get_args_parser()._option_string_actions)


def parse_command_line(argv: list[str]) -> argparse.Namespace:
    """Hydra's reading of `argv` (options first, then overrides), as `@hydra.main` reads it:
    `.overrides`, `.multirun`, `.cfg`, `.help`, `.config_name` …; exits 2 on a bad option."""
    return _parser().parse_args(argv)


def overrides_anywhere(argv: list[str]) -> list[str]:
    """The overrides of `argv`, whose options may stand between or after them (Hydra's own
    parser refuses `grid.p=[0.5] --cfg job`); exits 2, silently, on what is not Hydra's
    command line (the caller's `parse_command_line` then says why, once)."""
    with contextlib.redirect_stderr(io.StringIO()):
        return list(_parser().parse_intermixed_args(argv).overrides)


def sweep_jobs(overrides: list[str]) -> tuple[list[Override], list[list[str]]]:
    """The parsed overrides and the jobs a `--multirun` of them runs, in Hydra's order (the
    cross product, last key fastest): `a=1,2 b=x` → [[a=1, b=x], [a=2, b=x]].

    Raises OverrideParseException for an override that cannot be read, HydraException for a
    sweep the basic sweeper cannot expand (interval(), glob with no list).
    """
    parsed = OverridesParser.create().parse_overrides(overrides)
    return parsed, BasicSweeper.split_arguments(parsed, None)[0]


#: The logger of Hydra's basic launcher, which logs `#0 : key=value …` for each job it starts.
LAUNCHER_LOGGER = "hydra._internal.core_plugins.basic_launcher"


class _MaskOverrides(logging.Filter):
    """Each echoed override through `scrub_override` (runtime_env values, credentials), and the
    environment's secrets by value."""

    def filter(self, record: logging.LogRecord) -> bool:
        from sweeper.credentials import hide_secret_values, scrub_override

        text = record.getMessage()
        record.msg = hide_secret_values(" ".join(scrub_override(word) for word in text.split(" ")))
        record.args = ()
        return True


def mask_launcher_echo() -> None:
    """Mask secrets in the job lines Hydra's basic launcher logs (once per process)."""
    launcher = logging.getLogger(LAUNCHER_LOGGER)
    if not any(isinstance(f, _MaskOverrides) for f in launcher.filters):
        launcher.addFilter(_MaskOverrides())
