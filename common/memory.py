"""Keep large freed blocks in the process heap, so big temporaries are reused instead of faulted in anew.

glibc serves an allocation above its mmap threshold (at most 32 MiB by default) with fresh pages and
unmaps them on free, so every 64 MiB ``d x d`` temporary of a 7B-shaped layer (the form, its transpose,
the converted weights) costs 16k page faults that zero a page each: a quarter of ``analyze``'s time per
layer on this project's machines (0.74-0.78 s per layer without, 0.54-0.56 s with, measured in one
process). :func:`reuse_freed_memory` raises glibc's mmap and trim thresholds (``mallopt``), so such blocks
stay in the heap for the next layer or null draw. The price: memory freed is kept by the process until
it exits (its peak is unchanged). Elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import functools
import sys

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters
#: Blocks up to this size come from the heap once :func:`reuse_freed_memory` has run.
HEAP_BLOCKS_UP_TO = 1 << 30


@functools.cache
def reuse_freed_memory() -> bool:
    """Ask glibc to keep freed blocks up to :data:`HEAP_BLOCKS_UP_TO` for reuse (once per process).

    Returns whether glibc took both settings (False on other C libraries and platforms).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mapped = mallopt(_M_MMAP_THRESHOLD, HEAP_BLOCKS_UP_TO)  # larger blocks only are mapped afresh
    kept = mallopt(_M_TRIM_THRESHOLD, 2 * HEAP_BLOCKS_UP_TO)  # free memory kept before returning any
    return bool(mapped) and bool(kept)
