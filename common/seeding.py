"""One definition of a run's random streams: ``(seed, stream...)`` -> an independent generator.

Every random draw of a training run (init, data, noise, nulls of a check) comes from its own named
stream, so adding a draw to one stream never shifts another, and seed ``s`` of a batch of seeds
equals seed ``s`` run alone. Streams are keyed through numpy's ``SeedSequence``, which hashes the
key into well-separated states (unlike ``seed * 1000 + stream``, which collides across seeds).
"""

from __future__ import annotations

import numpy as np
import torch


def stream_seed(seed: int, *stream: int) -> int:
    """A 64-bit seed for the stream ``stream`` (a tuple of ints naming it) of run ``seed``."""
    return int(np.random.SeedSequence([seed, *stream]).generate_state(1, dtype=np.uint64)[0])


def generator(seed: int, *stream: int) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded for the stream ``stream`` of run ``seed``."""
    return torch.Generator().manual_seed(stream_seed(seed, *stream))
