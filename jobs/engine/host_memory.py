"""A training process keeps the host memory it frees, instead of handing it back to the kernel.

glibc's allocator returns every block above its mmap threshold (128 KB, rising with use to at
most 32 MB) to the kernel the moment it is freed, and trims the heap's free top past 128 KB.
A training step allocates the same large tensors every step — a layer's gathered receptive
fields, its per-record gradients — so each step page-faulted them back in, zeroed by the
kernel: at batch 512 on 2 cores, `mnist_cnn`'s DP step took 2 000–9 500 minor faults (8–38 MB) a
step, and its plain step up to 2 300. Raising both thresholds above any tensor a step makes keeps
those pages in the process, reused from one step to the next. The process's resident memory
then stays at its high-water mark, which a step reaches every step anyway, plus a few steps'
fragmentation (torch asks for 64-byte-aligned blocks a little larger than a freed one holds):
`python -m bench.train --models mnist_cnn,cifar10_cnn`'s whole run peaked at 3.7 GB, against
3.1 GB without.

Not glibc (macOS, musl): nothing changes.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os

logger = logging.getLogger(__name__)

#: glibc's `mallopt` parameters (malloc.h).
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
#: Blocks up to this size come from the heap and are reused, not mapped and unmapped (1 GiB:
#: above any tensor a shipped model's step makes; larger ones are still mapped).
KEPT_BLOCK_BYTES = 1 << 30
#: The heap's free top kept before any is handed back (2 GiB, the most `mallopt`'s int holds).
KEPT_TOP_BYTES = (1 << 31) - 1


def glibc() -> bool:
    """Whether this process's C library is glibc (whose `mallopt` this module sets)."""
    try:
        return (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
    except (ValueError, OSError, AttributeError):  # no such name here: not glibc
        return False


@functools.cache
def keep_freed_memory() -> bool:
    """Ask glibc to keep freed blocks up to `KEPT_BLOCK_BYTES` for reuse; once per process.
    Returns whether the allocator took both settings (False off glibc)."""
    if not glibc():
        return False
    mallopt = ctypes.CDLL(None).mallopt  # this process's own C library, no search for it
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    taken = bool(mallopt(M_MMAP_THRESHOLD, KEPT_BLOCK_BYTES)) and bool(
        mallopt(M_TRIM_THRESHOLD, KEPT_TOP_BYTES))
    if not taken:
        logger.warning("glibc refused to keep freed memory: every training step will page-fault "
                       "its large tensors in again")
    return taken
