"""Record the W_qk scores of any model while it trains: ``track(model, step)`` from any training loop.

``track`` reads a live ``torch.nn.Module`` the way ``cli.py analyze`` reads a checkpoint (the same layout
detection and adapters, applied to the module's parameters under the names its checkpoint would have),
scores every attention layer and head with nulls, and appends tidy rows to a CSV (and TensorBoard
scalars, when asked and installed). :class:`WqkCallback` does it for a ``transformers.Trainer``::

    from wqk.tracking import track
    for step, batch in enumerate(loader):
        ...  # forward, backward, optimizer step
        if step % 100 == 0:
            track(model, step, "runs/wqk.csv")
"""

from __future__ import annotations

from wqk.tracking.tracker import DEFAULT_EVERY, TRACK_COLUMNS, Tracker, track

__all__ = ["DEFAULT_EVERY", "TRACK_COLUMNS", "Tracker", "WqkCallback", "track"]


def __getattr__(name: str):
    if name == "WqkCallback":  # needs transformers: imported on first use only
        from wqk.tracking.callback import WqkCallback

        return WqkCallback
    raise AttributeError(f"module 'tracking' has no attribute {name!r}")
