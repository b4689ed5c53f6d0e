"""A training process keeps the host memory it frees (`jobs.engine.host_memory`): a step's large
tensors are reused from one step to the next, not page-faulted back in from the kernel."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from jobs.engine.host_memory import glibc

#: Three "steps" that each allocate and write a 48 MB tensor (above glibc's largest dynamic
#: mmap threshold, 32 MB), after ten others (torch asks for its blocks 64-byte aligned, a little
#: more than a freed one holds, so the heap takes a few steps to hold blocks that fit): the
#: minor page faults they took.
STEPS = """
import resource, sys, torch
from jobs.engine.host_memory import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory()
def step():
    torch.ones(12 << 20)
for _ in range(10):
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(3):
    step()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> int:
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
    out = subprocess.run([sys.executable, "-c", STEPS, mode], capture_output=True, text=True,
                         check=True, cwd=root, timeout=120)
    return int(out.stdout.split()[-1])


@pytest.mark.skipif(not glibc(), reason="glibc's allocator only")
def test_a_process_that_keeps_freed_memory_does_not_fault_its_tensors_in_again():
    """By default each 48 MB tensor is mapped and unmapped: 12 288 pages faulted in a step.
    Kept, the second and later steps reuse the first one's pages."""
    pages = 3 * (48 << 20) // os.sysconf("SC_PAGE_SIZE")
    assert _faults("default") >= pages // 2
    assert _faults("keep") < pages // 50
