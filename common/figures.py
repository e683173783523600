"""One way to make and save figures: a headless pyplot, a colour-blind-safe palette, atomic PNG/PDF writes.

Colours are Okabe & Ito's palette (distinguishable under the common colour-vision deficiencies); every
figure that shows an objective draws it in the objective's own colour (``wqk.theory.objectives.color_of``), so a
reader learns it once.
"""

from __future__ import annotations

import io
from pathlib import Path

from wqk.common.io import atomic_write_bytes

#: Okabe-Ito: black, orange, sky blue, bluish green, yellow, blue, vermillion, reddish purple.
PALETTE = ("#000000", "#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7")
NULL_COLOR = "0.55"  # the null band, gray in every figure


def pyplot():
    """``matplotlib.pyplot`` on the non-interactive Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def palette_color(index: int) -> str:
    """The palette's ``index``-th colour after black, cycled."""
    return PALETTE[1:][index % (len(PALETTE) - 1)]


def save_figure(fig, path: str | Path, dpi: int = 130, close: bool = True) -> Path:
    """Write a figure atomically in the format of ``path``'s suffix (PNG by default) and close it (unless not
    ``close``: to save it in a second format)."""
    path = Path(path)
    buf = io.BytesIO()
    kind = path.suffix.lstrip(".").lower() or "png"
    metadata = {"CreationDate": None} if kind == "pdf" else None  # no date: the same figure gives the same bytes
    fig.savefig(buf, format=kind, dpi=dpi, bbox_inches="tight", metadata=metadata)
    if close:
        pyplot().close(fig)
    atomic_write_bytes(path, buf.getvalue())
    return path
