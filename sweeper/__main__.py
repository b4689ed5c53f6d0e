"""`python -m sweeper [+experiment=NAME] [overrides]`: compose, validate and run a sweep.

With no experiment the quickstart runs: real MNIST digits that install with the package, on
the CPU, in minutes.  Hydra composes the config (`conf/`); `--help` lists every group.

Before anything runs, the preflight (`sweeper.checks.preflight`) composes the configuration and checks
all of it: a refused one prints one `error:` message naming every problem (the field, the value
given, what is allowed) and exits with code 2, before Ray starts and before anything is written.
A plain run (one job, no Hydra options) then runs that same composition directly: Hydra composes
once.  A `--multirun` is run here too, job by job, every job checked before the first starts (Hydra's
launcher would write a `multirun/` folder into the working folder, every override in clear).
Whatever Hydra itself must handle (--help, --cfg, other config trees, `hydra.*` overrides) goes
through Hydra's own entry point, checked by the preflight first.

A successful command ends with `exit_now`: nothing is lost (see its docstring), and the seconds
the interpreter spends tearing down torch, Ray and pandas at exit are not spent.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
import traceback
from typing import TYPE_CHECKING, Optional

import hydra
from omegaconf import DictConfig

from jobs.datasets import DatasetUnavailable
from sweeper import VERSION_TEXT, interrupts
from sweeper.config import ConfigError, SweepConfig, register_schema, to_sweep_config
from sweeper.credentials import hide_secret_values, scrub, scrub_override
from sweeper.checks.hydra_adapter import mask_launcher_echo, parse_command_line
from sweeper.checks.preflight import (CONF_DIR, CONFIG_NAME, check_command_line, command_line,
                                      composed, option_problems, own_jobs)
from sweeper.summary import print_summary

if TYPE_CHECKING:  # the planner imports the engine: not for --help or --version
    from sweeper.grid.plan import SweepPlan

register_schema()  # before `main` composes: conf/config.yaml names the schema
logger = logging.getLogger(__name__)


# An absolute path: imported as `sweeper.__main__` (the `sweeper` console script), a relative one
# would be read as a Python package path (pkg://conf), which the conf folder is not.
@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name=CONFIG_NAME)
def main(raw: DictConfig) -> None:
    try:
        cfg = to_sweep_config(raw)
    except ConfigError as error:
        print(f"error: {hide_secret_values(str(error))}", file=sys.stderr)
        sys.exit(2)
    code = run(cfg)
    if code:
        sys.exit(code)


def run(cfg: SweepConfig | SweepPlan) -> int:
    """Run the sweep and print its summary; the command's exit code (2: refused, 1: failed cells).
    `cfg` may be the plan the preflight checked (`composed`): its checks build networks and
    probe the store, and it planned the sweep, so neither is done twice."""
    from sweeper.console import shown
    from sweeper.runner import run_sweep  # Ray, MLflow: imported once the configuration passed
    from sweeper.store.files import disk_full, link_met
    from sweeper.cluster.start import RayStartFailed

    try:
        with shown():
            result = run_sweep(cfg)
    except (ConfigError, DatasetUnavailable) as error:
        print(f"error: {hide_secret_values(str(error))}", file=sys.stderr)
        return 2
    except RayStartFailed as error:  # an outage of this machine, said in one line
        print(f"error: {error}", file=sys.stderr)
        return 1
    except Exception as error:  # noqa: BLE001 - said here, scrubbed: not by Hydra, raw
        where, link = disk_full(error), link_met(error)
        print(crash_report(error) if where is None and link is None else scrub(
            f"error: {link}. The sweep stopped: what finished is kept in the store; rerun the "
            "same command to resume" if link is not None else
            f"error: disk full at {where}: what finished is kept in the store; free space and "
            "rerun the same command to resume"), file=sys.stderr)
        return 1
    print_summary(result)
    return 1 if result.failures else 0


def crash_report(error: BaseException) -> str:
    """What a sweep that stopped on an unexpected exception prints: its traceback, scrubbed of
    credentials (`sweeper.credentials.scrub`).  It takes the place of Hydra's "Error executing
    job with overrides: [...]", which echoes every override as typed, secrets included."""
    trace = "".join(traceback.format_exception(error)).rstrip()
    return scrub(f"error: the sweep stopped on an unexpected {type(error).__name__}; what is in "
                 f"the store is kept, and a rerun resumes from it.\n{trace}")


def run_directly(argv: list[str]) -> Optional[int]:
    """Compose, check and run the command line's jobs (one, or each of a `--multirun`, every
    job checked before the first starts), each with one composition: the exit code (the worst
    job's), or None when the command line needs Hydra's own entry point (see `own_jobs`)."""
    from hydra.core.utils import configure_log

    if "--version" in argv:
        return None
    args = parse_command_line(argv)
    try:
        jobs = own_jobs(args)
        if jobs is None:
            return None
        refused = check_command_line(argv) if len(jobs) > 1 else []
        if refused:
            raise ConfigError(refused)
        code = 0
        for number, job in enumerate(jobs, 1):
            plan, hydra_cfg = composed(job)
            if number == 1:
                configure_log(hydra_cfg.job_logging, hydra_cfg.verbose)  # as Hydra's launcher would
            if args.multirun:
                logger.info("job %d of %d: %s", number, len(jobs),
                            " ".join(scrub_override(o) for o in job))
            code = max(code, run(plan))
        return code
    except ConfigError as refused:
        print(f"error: {hide_secret_values(str(refused))}", file=sys.stderr)
        return 2


def exit_now(code: int = 0) -> None:
    """End the process at once, after everything an ordinary exit would keep has been kept.

    An ordinary exit joins non-daemon threads, runs the `atexit` handlers (Ray's shutdown,
    MLflow's flushes, `weakref.finalize`, multiprocessing's clean-up), flushes standard streams
    and logging handlers, then tears every module down, which for torch takes seconds.  Here,
    when no non-daemon thread is left (else: the ordinary exit), the handlers run and the streams
    and logging handlers are flushed; only the teardown is skipped.  It writes nothing: every
    file this program writes is closed (and fsynced) where it is written, and SQLite commits
    are durable when they return.  A SIGINT or SIGTERM that only an `atexit` handler or a
    `__del__` saw (`sweeper.interrupts.received_code`) still ends it with the resume line and
    the shell's code.
    """
    if any(t.is_alive() and not t.daemon and t is not threading.main_thread()
           for t in threading.enumerate()):
        sys.exit(code)
    atexit._run_exitfuncs()
    stopped = interrupts.received_code()
    if stopped and not code:  # a signal Python could not raise where it landed (`check`)
        print(interrupts.RESUME_LINE, file=sys.stderr, flush=True)
        code = stopped
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing left to keep
            pass
    os._exit(code)


def cli(argv: Optional[list[str]] = None) -> None:
    """`python -m sweeper` and the `sweeper` console script (`sweeper.cli`): run a sweep, or
    Hydra's help, completion or config printing; `--version` prints sweeper's own version
    (Hydra's would be Hydra's)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--version" in argv:
        print(VERSION_TEXT)
        return
    refused = option_problems(argv)
    if refused:
        print(hide_secret_values("error: " + "\n       ".join(refused)), file=sys.stderr)
        sys.exit(2)
    interrupts.install()
    try:
        sys.argv = [sys.argv[0], *command_line(argv)]
        code = run_directly(sys.argv[1:])
        if code is None:
            refused = check_command_line(sys.argv[1:])
            if refused:
                print(f"error: {hide_secret_values(str(ConfigError(refused)))}", file=sys.stderr)
                sys.exit(2)
            mask_launcher_echo()
            main()
            code = 0
    except KeyboardInterrupt as stop:  # SIGINT or SIGTERM (`sweeper.interrupts`): one line
        print(interrupts.RESUME_LINE, file=sys.stderr, flush=True)
        exit_now(interrupts.exit_code(stop))
    if code:
        sys.exit(code)
    exit_now()


if __name__ == "__main__":
    cli()
