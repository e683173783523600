"""Transparent huge pages for torch's large CPU tensors, asked for before torch first allocates.

Scoring a 7B-shaped layer allocates and frees several 64 MiB temporaries (the ``d x d`` product, its
transpose). Each fresh block is mapped anew by the kernel, 4 KiB at a time: 16K page faults, about 20 ms
to allocate and fill 64 MiB on the 2-core machine, against 4 ms with 2 MiB pages (545 faults). torch's
CPU allocator asks for huge pages (``madvise``) for blocks of 2 MiB or more when ``THP_MEM_ALLOC_ENABLE=1``
is in the environment at its first allocation. It is a hint: no result changes, and where the kernel's
THP setting is ``never`` nothing does.

``cli.py`` and the benchmarks call :func:`enable_huge_pages` before they import torch; a Python session
that scores large checkpoints does the same (or exports the variable) before ``import torch``.
"""

from __future__ import annotations

import os

#: The variable torch's CPU allocator reads (once, at its first allocation).
VARIABLE = "THP_MEM_ALLOC_ENABLE"


def enable_huge_pages() -> None:
    """Set ``THP_MEM_ALLOC_ENABLE=1`` unless it is set already (a user's ``0`` stands)."""
    os.environ.setdefault(VARIABLE, "1")
