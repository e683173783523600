"""One definition of a run's random streams: ``(seed, stream...)`` -> an independent generator.

Every random draw of a training run (init, data, noise, nulls of a check) comes from its own named
stream, so adding a draw to one stream never shifts another, and seed ``s`` of a batch of seeds
equals seed ``s`` run alone. Streams are keyed through numpy's ``SeedSequence``, which hashes the
key into well-separated states (unlike ``seed * 1000 + stream``, which collides across seeds).

:func:`gaussian` draws large standard normal tensors on all of torch's threads (torch's CPU ``normal_``
runs on one), with values that do not depend on the number of threads.
"""

from __future__ import annotations

import functools
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

#: Entries per independently seeded block of :func:`gaussian` (16 MiB of float32).
GAUSSIAN_BLOCK = 1 << 22


def stream_seed(seed: int, *stream: int) -> int:
    """A 64-bit seed for the stream ``stream`` (a tuple of ints naming it) of run ``seed``."""
    return int(np.random.SeedSequence([seed, *stream]).generate_state(1, dtype=np.uint64)[0])


def generator(seed: int, *stream: int) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded for the stream ``stream`` of run ``seed``."""
    return torch.Generator().manual_seed(stream_seed(seed, *stream))


@functools.cache
def _pool(threads: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=threads, thread_name_prefix="gaussian")


if hasattr(os, "register_at_fork"):  # a forked child has none of the parent's threads: it starts its own pool
    os.register_at_fork(after_in_child=_pool.cache_clear)


def gaussian(shape: tuple[int, ...], gen: torch.Generator, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """i.i.d. ``N(0, 1)`` of ``shape`` (contiguous, CPU), drawn a block of :data:`GAUSSIAN_BLOCK` entries at a time.

    A draw of at most one block is ``torch.randn(shape, generator=gen)`` itself. A larger one takes one seed
    per block from ``gen`` and fills the blocks from their own generators on torch's threads (about twice as
    fast on two cores); the values depend on ``gen`` and ``shape`` only, never on the thread count.
    """
    if int(np.prod(shape)) <= GAUSSIAN_BLOCK:
        return torch.randn(shape, generator=gen, dtype=dtype)
    out = torch.empty(shape, dtype=dtype)
    flat = out.view(-1)
    starts = range(0, flat.numel(), GAUSSIAN_BLOCK)
    seeds = torch.randint(2**62, (len(starts),), generator=gen).tolist()

    def fill(i: int) -> None:
        block = flat[starts[i] : starts[i] + GAUSSIAN_BLOCK]
        block.normal_(generator=torch.Generator().manual_seed(seeds[i]))

    list(_pool(max(1, torch.get_num_threads())).map(fill, range(len(starts))))
    return out
