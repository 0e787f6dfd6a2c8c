"""Steady glibc malloc thresholds for training loops (Linux).

glibc serves blocks above its mmap threshold (128 KiB at start) with fresh `mmap`s and raises
the threshold only after such a block is freed; its heap is trimmed back to the OS whenever
the free top exceeds the trim threshold. A training process whose first large free comes late
returns its per-step activations to the OS and faults them back in at every step: about
340,000 minor page faults per round of FedAvg on MNIST (100 clients, 10 per round, batch 32)
and ~30 % more CPU time (docs/performance.md). Fixing both thresholds when a simulation starts
keeps those blocks in the heap, as every long-lived training process ends up doing anyway.

The cost: up to `TRIM_THRESHOLD` bytes of freed heap stay mapped, and blocks below
`MMAP_THRESHOLD` come from the heap (they can fragment it). Users who set glibc's own
variables (`MALLOC_MMAP_THRESHOLD_`, `MALLOC_TRIM_THRESHOLD_`, `MALLOC_TOP_PAD_`) or
`FEDSHARE_MALLOC=default` keep glibc's behaviour.
"""

import ctypes
import os
import sys

MMAP_THRESHOLD = 32 * 2**20  # glibc's largest allowed value on 64-bit
TRIM_THRESHOLD = 128 * 2**20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # <malloc.h>
GLIBC_VARIABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")
_done: list[bool] = []


def steady_malloc() -> bool:
    """Fix glibc's mmap and trim thresholds once per process; True if they are now fixed.

    Does nothing (False) off Linux, without glibc, or where the user chose (see module doc)."""
    if _done:
        return _done[0]
    _done.append(_apply())
    return _done[0]


def _apply() -> bool:
    if not sys.platform.startswith("linux") or os.environ.get("FEDSHARE_MALLOC") == "default":
        return False
    if any(name in os.environ for name in GLIBC_VARIABLES):
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):  # not glibc (musl, …)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return (
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
        and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    )
