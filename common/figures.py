"""One way to make and save figures: a headless pyplot, a colour-blind-safe palette, atomic PNG/PDF writes.

Colours are Okabe & Ito's palette (distinguishable under the common colour-vision deficiencies); every
figure that shows an objective draws it in :data:`OBJECTIVE_COLORS`' colour, so a reader learns it once.
"""

from __future__ import annotations

import io
from pathlib import Path

from common.io import atomic_write_bytes

#: Okabe-Ito: black, orange, sky blue, bluish green, yellow, blue, vermillion, reddish purple.
PALETTE = ("#000000", "#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7")
#: One colour per objective (and its aliases), the same in every figure.
OBJECTIVE_COLORS = {
    "bidirectional": "#0072B2",
    "masked": "#0072B2",
    "autoregressive": "#D55E00",
    "causal": "#D55E00",
    "denoising": "#009E73",
    "denoise": "#009E73",
    "classification": "#CC79A7",
    "classify": "#CC79A7",
    "masked_autoencoding": "#56B4E9",
    "mae": "#56B4E9",
}
NULL_COLOR = "0.55"  # the null band, gray in every figure


def pyplot():
    """``matplotlib.pyplot`` on the non-interactive Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def color_of(name: str, index: int = 0) -> str:
    """The objective's colour when ``name`` starts with an objective, else the palette's ``index``-th (cycled)."""
    key = str(name).split(",")[0].split(" ")[0].lower()
    return OBJECTIVE_COLORS.get(key, PALETTE[1:][index % (len(PALETTE) - 1)])


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
