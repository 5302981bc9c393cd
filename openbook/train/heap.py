"""Training's heap: hand large freed blocks back to the operating system at once (glibc).

A training step allocates and frees activations of a few megabytes each, of sizes that change with every example.
glibc serves blocks above its mmap threshold with their own mappings, returned when freed, but it raises that
threshold to the size of any such block freed (up to 32 MiB): after the first steps, activations come from the heap
instead, where freed blocks between live ones stay resident. A run's peak RSS then creeps up with its steps, above
what it ever holds at once (docs/benchmarks.md, "Training over a large book: peak memory").
:func:`map_large_blocks` fixes the threshold (as ``MALLOC_MMAP_THRESHOLD_`` would), so every block of at least
:data:`MMAP_THRESHOLD_BYTES` is mapped and unmapped on its own. Elsewhere than glibc it does nothing. The fresh
mappings cost page faults, so a step takes longer; a larger threshold costs less and saves less memory (both
measured by ``bench/train_heap.py``; the figures are in docs/benchmarks.md).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter (malloc.h)
MMAP_THRESHOLD_BYTES = 1 << 20


def _libc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "gnu_get_libc_version") else None


def map_large_blocks(threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Serve every allocation of at least ``threshold`` bytes with its own mapping from now on, in this process;
    True if glibc took the setting."""
    libc = _libc()
    if libc is None:
        return False
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(libc.mallopt(M_MMAP_THRESHOLD, int(threshold)))
