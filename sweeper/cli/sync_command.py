"""`sweeper sync`: log to MLflow what a sweep's Parquet results hold and MLflow lacks, once its
tracking server is back; the sync itself is `sweeper.tracking.sync.sync`.

Command line: `sweeper sync --help` (or `python -m sweeper.cli.sync_command`): exit 0 when logged, 1
when MLflow is still unavailable (run it again), 2 when refused.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Optional, Sequence

from sweeper import VERSION_TEXT
from sweeper.console import shown
from sweeper.credentials import scrub
from sweeper.errors import error_chain
from sweeper.store.files import DiskFull
from sweeper.tracking.database import UnknownSchema
from sweeper.tracking.sync import SyncRefused, Unreachable, sync

logger = logging.getLogger(__name__)


def _parser(prog: str = "python -m sweeper.cli.sync_command") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Log a sweep's results to MLflow after its tracking server was down: one "
                    "run per cell not logged yet, and the figures. Safe to run again: a second "
                    "sync logs nothing.")
    parser.add_argument("--experiment", default="quickstart",
                        help="sweep name, i.e. the experiment's `name` (default: quickstart)")
    parser.add_argument("--store-root", default="runs",
                        help="the sweep's store.root, a folder or a URI (default: runs)")
    parser.add_argument("--tracking-uri",
                        help="MLflow tracking URI (default: the sweep's tracking.uri, else "
                             "MLFLOW_TRACKING_URI, else the SQLite file under the store)")
    parser.add_argument("--version", action="version", version=VERSION_TEXT)
    return parser


def main(argv: Optional[Sequence[str]] = None,
         prog: str = "python -m sweeper.cli.sync_command") -> int:
    """The command: the sync's report printed (its output), what went wrong logged (`shown`)."""
    args = _parser(prog).parse_args(argv)
    with shown():
        try:
            report = sync(args.store_root, args.experiment, args.tracking_uri, progress=True)
        except (FileNotFoundError, SyncRefused, UnknownSchema) as error:
            logger.error("%s", scrub(str(error)))
            return 2
        except Unreachable as error:
            logger.error("%s; nothing was logged, run this again once it is back.", error)
            return 1
        except DiskFull as error:
            logger.error("%s", scrub(f"{error}: what was logged is kept; free space there, then "
                                     "run this again to log the rest."))
            return 1
        except Exception as error:  # noqa: BLE001 - the server is down still: say so, exit 1
            if any(isinstance(link, ImportError) or "out-of-date database schema" in str(link)
                   for link in error_chain(error)):  # not an outage: a driver, a server's schema
                logger.error("%s", scrub(f"MLflow cannot open this tracking store "
                                         f"({type(error).__name__}: {error}); running this again "
                                         "will not help: name a tracking URI it can open."))
                return 2
            logger.error("%s", scrub(f"MLflow is unavailable ({type(error).__name__}: {error}); "
                                     "nothing lost, run this again once it is back."))
            return 1
    print(f"MLflow {report.tracking_uri}: {report.cells} cells in the store, {report.logged} "
          f"logged now ({report.cells - report.logged} were already there), "
          f"{report.artifacts} figure(s) attached")
    return 0


if __name__ == "__main__":
    sys.exit(main())
