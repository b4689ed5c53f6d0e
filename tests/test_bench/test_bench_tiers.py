"""`python -m bench.tiers`: each of `make test`'s tiers timed alone, with the machine's CPU."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

from bench.tiers import Jiffies

ROOT = Path(__file__).resolve().parents[2]


def test_the_machines_busy_time_counts_a_child_processes_cpu():
    """The figure is the whole machine's: work done by a tier's children (sweeps, Ray workers)
    must count, which the tier's own process times would miss."""
    spin = "import time\nend = time.process_time() + 1.0\nwhile time.process_time() < end: pass"
    ticks = os.sysconf("SC_CLK_TCK")
    children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    before = Jiffies.now()
    subprocess.run([sys.executable, "-c", spin], check=True, timeout=120)
    after = Jiffies.now()
    children_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    child_cpu = sum(getattr(children_after, f) - getattr(children_before, f)
                    for f in ("ru_utime", "ru_stime"))
    assert child_cpu >= 1.0
    # Everything else on the machine only adds to the busy count; one tick of rounding either way.
    assert (after.busy - before.busy) / ticks >= child_cpu - 2 / ticks


def test_a_tier_is_timed_as_make_runs_it_and_its_output_kept(tmp_path):
    done = subprocess.run([sys.executable, "-m", "bench.tiers", "lint", "--logs", str(tmp_path)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = {line.split()[0]: line.split() for line in done.stdout.splitlines() if line.strip()}
    wall, cpu, busy = rows["lint"][1:4]
    assert float(wall) >= 0 and float(cpu) >= 0 and busy.endswith("%")
    assert rows["lint"][-1] == "0"  # make's exit status
    assert "Success: no issues found" in (tmp_path / "lint.log").read_text()
