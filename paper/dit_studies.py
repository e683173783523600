"""The DiT studies on fresh seeds (issue 43's factorial and its plateau): what in a symmetric init helps a DiT
(symmetry, self-similarity or scale), and whether a difference at the budget is one of speed or of fidelity."""

from __future__ import annotations

from wqk.paper.derive import study_summary
from wqk.paper.experiment import Experiment
from wqk.paper.runners.vision import study_analysis, study_runs
from wqk.paper.units import CONFIRM_SEED, arm_seed_units

#: The DiT mechanism study (what in a symmetric init helps a DiT: symmetry, self-similarity or scale): the arms at
#: the default's per-parameter scale that pull the ingredients apart, and the published mimetic init at its own.
MECHANISM_SCHEMES = ["default", "symmetric", "symmetric-indefinite", "self-similar", "mimetic-qk", "mimetic"]
#: Its contrasts besides each arm - default: self-similarity at fixed symmetry (s = 1 both), symmetry at fixed
#: self-similarity (both positive semidefinite parts), and mimetic's own scale and value / output parts at fixed
#: query-key structure.
MECHANISM_CONTRASTS = [
    ["symmetric", "symmetric-indefinite"],
    ["symmetric", "self-similar"],
    ["mimetic", "mimetic-qk"],
]
MECHANISM = {
    "task": "dit-mnist-mechanism",
    "steps": None,
    "task_options": None,
    "schemes": MECHANISM_SCHEMES,
    "contrasts": MECHANISM_CONTRASTS,
    "init_structure": True,
    "seeds": 10,
    "first_seed": CONFIRM_SEED,  # fresh seeds, run under the frozen registry
    "units": 1,
    "data": None,
    "log_every": 100,
    "target_at": 0.5,
    "null_samples": 256,
    "sample_grid": 1,
}
MECHANISM_SMOKE = {
    **MECHANISM,
    "steps": 6,
    "seeds": 2,
    "schemes": ["default", "symmetric", "self-similar"],
    "contrasts": [["symmetric", "self-similar"]],
    "null_samples": 32,
    "task_options": {
        "fidelity_samples": 24,
        "fidelity_large": 48,
        "fidelity_large_every": 3,
        "sampler": {"method": "ddim", "steps": 2, "guidance": 2.0},
    },
}


#: The plateau study: the baseline, ours and the published anchor at three times the budget, where the plateau
#: rule (the default's FID on 2,000 samples falls by less than 5% over the last quarter) tells a speed effect
#: (gone at the plateau) from a fidelity effect (still there).
PLATEAU = {
    **MECHANISM,
    "task": "dit-mnist-plateau",
    "schemes": ["default", "symmetric", "mimetic"],
    "contrasts": [],
    "log_every": 300,
}


def dit_study(name: str, title: str, smoke: dict, standard: dict, cost: float) -> Experiment:
    """A DiT study of fresh seeds: smoke, and standard (= full: on a GPU the same units run faster); no quick
    config (``--quick`` shows committed standard results)."""
    return Experiment(
        name,
        title,
        study_runs,
        {"smoke": smoke, "standard": standard, "full": standard},
        derive=study_summary,
        cost=cost,
        units=arm_seed_units,
        merge=study_analysis,
    )
