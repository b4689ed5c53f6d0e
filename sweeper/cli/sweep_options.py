"""What every command that reads one sweep shares: the options that say where the sweep is
(`add_sweep_location`: --experiment, --store-root, --run-dir), the sweep they name opened
(`opened_sweep`), and how one that cannot be opened is said (one line, credentials masked, with
the sweeps the store holds)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable, Optional

from sweeper.frontier import open_sweep, sweep_location
from sweeper.store.artifacts import ArtifactStore, ManifestError
from sweeper.store.results import Results


def add_sweep_location(parser: argparse.ArgumentParser) -> None:
    """--experiment, --store-root and --run-dir: the sweep a command reads
    (`sweeper.frontier.sweep_location` turns them into a store and a name)."""
    parser.add_argument("--experiment", default="quickstart",
                        help="sweep name, i.e. the experiment's `name` (default: quickstart)")
    parser.add_argument("--store-root", default="runs",
                        help="the sweep's store.root, a folder or a URI such as s3://bucket/prefix "
                             "(default: runs)")
    parser.add_argument("--run-dir", help="a sweep folder or URI (<store.root>/sweeps/<name>); "
                                          "overrides --experiment and --store-root")


class SweepNotOpened(Exception):
    """Why the sweep a command names cannot be read, in the words it prints after `error: `."""


def opened_sweep(args: argparse.Namespace,
                 then: Optional[Callable[[ArtifactStore, str], object]] = None
                 ) -> tuple[ArtifactStore, str, Results]:
    """The store, name and results of the sweep `add_sweep_location`'s options name, with
    `then(store, name)` run before anything is written (its errors said alike).  Raises
    `SweepNotOpened`: a sweep that is not there with the sweeps the store holds, anything else
    (a bad name, an unreachable store, an unreadable sweep.json) in its first line."""
    root: Optional[str] = None if args.run_dir else args.store_root  # a --run-dir's, once read
    try:
        root, name = sweep_location(args.experiment, args.store_root, args.run_dir)
        where = store_root_problem(root)
        if where:
            raise ValueError(where)
        store, results = open_sweep(root, name)
        if then is not None:
            then(store, name)
    except FileNotFoundError as error:
        raise SweepNotOpened(f"{error}. {sweeps_held(root)}") from None
    except (ManifestError, ValueError, OSError) as error:  # a bad name, an unreachable store
        raise SweepNotOpened(one_line(error)) from None
    return store, name, results


def store_root_problem(root: str) -> Optional[str]:
    """Why a local store root is no store (a file where its folder would be), or None."""
    if "://" not in root and Path(root).expanduser().exists() and not Path(root).expanduser().is_dir():
        return f"{root}: is a file, not a store's folder (store.root)"
    return None


def sweeps_held(root: Optional[str]) -> str:
    """What to do about a sweep that is not there: the sweeps the store holds, by name (none
    when the store is not known: a --run-dir that names no sweep folder)."""
    try:
        names = ArtifactStore(root).sweep_names() if root is not None else []
    except (OSError, ValueError):
        names = []
    if not names:
        return "Run `sweeper` (a sweep) first, or pass --store-root or --run-dir."
    return f"This store has: {', '.join(names)} (--experiment NAME)."


def one_line(error: BaseException) -> str:
    """An error's first line, credentials masked: what a person needs, not a traceback."""
    from sweeper.credentials import redact_tree

    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return redact_tree(lines[0] if lines else type(error).__name__)
