"""Transparent huge pages for torch's large CPU tensors, and freed blocks kept for reuse, set up before torch
first allocates.

Scoring a 7B-shaped layer allocates and frees several 64 MiB temporaries (the ``d x d`` product, its
transpose). Each fresh block is mapped anew by the kernel, 4 KiB at a time: 16K page faults, about 20 ms
to allocate and fill 64 MiB on the 2-core machine, against 4 ms with 2 MiB pages (545 faults). torch's
CPU allocator asks for huge pages (``madvise``) for blocks of 2 MiB or more when ``THP_MEM_ALLOC_ENABLE=1``
is in the environment at its first allocation. It is a hint: no result changes, and where the kernel's
THP setting is ``never`` nothing does.

Huge pages alone make the many 2-8 MiB temporaries of the per-head scores slower: glibc's ``malloc`` maps
each such block afresh and unmaps it when freed, so every one costs a new huge page zeroed by the kernel
(a 2 MiB elementwise product took 600-670 us instead of 40 us on a Zen 5 EPYC). :func:`keep_freed_blocks`
has glibc serve blocks up to 32 MiB (its largest setting) from its heap and keep what is freed there for the
next allocation (``mallopt``), so a temporary reuses pages that are already mapped.

``cli.py`` and the benchmarks call :func:`enable_huge_pages` before they import torch; a Python session
that scores large checkpoints does the same (or exports the variable) before ``import torch``.
"""

from __future__ import annotations

import ctypes
import os

#: The variable torch's CPU allocator reads (once, at its first allocation).
VARIABLE = "THP_MEM_ALLOC_ENABLE"
#: glibc's ``mallopt`` parameters and the values set: blocks below the threshold come from the heap (32 MiB is
#: glibc's maximum on 64-bit), and freed heap memory is returned to the kernel only above the trim threshold.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 1 << 30


def enable_huge_pages() -> None:
    """Set ``THP_MEM_ALLOC_ENABLE=1`` unless it is set already (a user's ``0`` stands); keep freed blocks."""
    os.environ.setdefault(VARIABLE, "1")
    keep_freed_blocks()


def keep_freed_blocks() -> bool:
    """Have glibc's ``malloc`` reuse freed blocks of up to 32 MiB instead of mapping each one afresh.

    Returns whether it took effect (``False`` off glibc, e.g. macOS or musl, where nothing changes).
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library the interpreter runs on
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
