"""Nothing a test does may land in the checkout: every file a test writes belongs under its own
temporary folder.  The files git does not know and does not ignore are listed as the session
starts and as it ends; any new one fails the session, by name (a test's MLflow once wrote
`./mlruns` here, and it was committed)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Optional

import pytest

CHECKOUT = Path(__file__).resolve().parents[2]


def untracked(root: Path) -> Optional[set[str]]:
    """The files under `root` that git neither tracks nor ignores; None outside a git checkout
    (an unpacked sdist: nothing to guard)."""
    try:
        done = subprocess.run(["git", "-C", str(root), "ls-files", "--others", "--exclude-standard"],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return set(done.stdout.splitlines()) if done.returncode == 0 else None


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_BEFORE] = untracked(CHECKOUT)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    before = session.config.stash.get(_BEFORE, None)
    after = untracked(CHECKOUT) if before is not None else None
    if before is None or after is None:
        return
    written = sorted(after - before)
    if written:
        listed = ", ".join(written[:5]) + (f" and {len(written) - 5} more" if len(written) > 5 else "")
        session.config.get_terminal_writer().line(
            f"\nFAILED checkout guard: the tests wrote into the checkout ({CHECKOUT}): {listed}",
            red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_BEFORE = pytest.StashKey[Optional[set]]()
