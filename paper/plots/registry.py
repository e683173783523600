"""The paper's figures by name, and drawing them: :data:`FIGURES` (each figure function with the experiments it
reads) and :func:`render_figures`, which saves each as ``figures/NAME.png`` and ``NAME.pdf``
(:func:`wqk.common.figures.save_figure`) and redraws only a figure whose code or input files changed since it was last
drawn (:data:`INDEX`). A figure whose tables are missing or empty raises :class:`FigureDataError` with what it
needed, and is skipped with that line.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from wqk.common.figures import save_figure
from wqk.common.io import write_json
from wqk.paper.codeversion import code_version
from wqk.paper.plots.causal_dit import dit_causal
from wqk.paper.plots.language import control_scale, language_control
from wqk.paper.plots.nulls import checkpoints, nulls_vs_d
from wqk.paper.plots.panels import FigureDataError
from wqk.paper.plots.theory import attribution, grid_cells, self_cross, theory_vs_sim
from wqk.paper.plots.toy import claim7_bos, denoising_data, masking, parameterisation, toy_training, toy_wqk
from wqk.paper.plots.vision import STUDIES, init_curves, init_samples, init_steps, matched_contrasts, vision_layers
from wqk.paper.results import MissingResult, Results
from wqk.vision.task_records import VISION_TASKS

#: Figures of optional experiments (given checkpoints, slots, or --standard only): the report links them only
#: when drawn.
OPTIONAL_FIGURES = (
    "checkpoints",
    "grid",
    "language_control",
    "control_scale",
    "init_samples",
    "matched_contrasts",
    "dit_causal",
)
#: name -> (figure function, the experiments it reads). The report template embeds each by name.
FIGURES: dict[str, tuple[Callable, tuple[str, ...]]] = {
    "toy_wqk": (toy_wqk, ("sim_objectives",)),
    "toy_training": (toy_training, ("sim_objectives",)),
    "claim7_bos": (claim7_bos, ("sim_claim7",)),
    "theory_vs_sim": (theory_vs_sim, ("compare_theory",)),
    "self_cross": (self_cross, ("sim_objectives", "predictions")),
    "attribution": (attribution, ("predictions", "sim_attribution")),
    "denoising_data": (denoising_data, ("sim_denoising",)),
    "parameterisation": (parameterisation, ("sim_parameterisation",)),
    "masking": (masking, ("sim_masking",)),
    "vision_layers": (vision_layers, ("vision_classify", "vision_mae", "vision_causal", "vision_dit")),
    "matched_contrasts": (matched_contrasts, ("vision_matched",)),
    "dit_causal": (dit_causal, ("vision_dit_confirm", "vision_dit_causal")),
    "init_curves": (init_curves, STUDIES),
    "init_steps": (init_steps, STUDIES),
    "init_samples": (init_samples, STUDIES),
    "grid": (grid_cells, ("sim_grid",)),
    # the nulls against d, with the trained forms of the toy and of every vision objective as points
    "nulls_vs_d": (nulls_vs_d, ("nulls", "sim_objectives", *(f"vision_{t}" for t in VISION_TASKS))),
    "checkpoints": (checkpoints, ("checkpoints",)),
    "language_control": (language_control, ("language_control",)),
    "control_scale": (control_scale, ("control_scale",)),
}
#: Which figures were drawn from which results: ``{name: key}``, kept beside the result tables.
INDEX = "figures.json"


def figure_key(results: Results, name: str) -> str:
    """What a figure is drawn from: its code version and the bytes of every file of the experiments it reads."""
    import hashlib

    function, needs = FIGURES[name]
    digest = hashlib.sha256(code_version(function).digest.encode())
    for experiment in needs:
        directory = results.root / experiment
        for path in sorted(p for p in directory.glob("*") if p.is_file()) if directory.is_dir() else ():
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def render_figures(results: Results, directory: str | Path, names: list[str] | None = None) -> tuple[list[Path], dict]:
    """Save every figure whose experiments have results as PNG and PDF, skipping one whose inputs and code are
    those it was last drawn from (``results/figures.json``); returns (paths drawn or kept, {name: why skipped})."""
    import json

    directory = Path(directory)
    index_path = results.root / INDEX
    index = json.loads(index_path.read_text()) if index_path.is_file() else {}
    written, skipped = [], {}
    for name, (function, needs) in FIGURES.items():
        if names is not None and name not in names:
            continue
        if not any(results.has(e) for e in needs):
            skipped[name] = f"no results of {', '.join(needs)}"
            index.pop(name, None)
            continue
        paths = [directory / f"{name}.png", directory / f"{name}.pdf"]
        key = figure_key(results, name)
        if index.get(name) == key and all(p.is_file() for p in paths):
            written += paths
            continue
        try:
            fig = function(results)
        except (FigureDataError, MissingResult) as err:
            skipped[name] = str(err)
            index.pop(name, None)
            continue
        written.append(save_figure(fig, paths[0], close=False))
        written.append(save_figure(fig, paths[1]))
        index[name] = key
    write_json(index_path, index)
    return written, skipped
