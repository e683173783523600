"""A registry whose one experiment runs real smoke units in other processes (tests/test_paper_executor.py names it
``tests.paper_unit_registry:registry``, as a worker rebuilds it): the ViT classifier at smoke size, one unit per
seed, where a seed fails while a file ``fail-seedN`` is in the work directory (a unit made to fail)."""

from wqk.paper.experiment import Experiment
from wqk.paper.registry import EXPERIMENTS, seed_units
from wqk.paper.runners.vision import vision_task


def classify_or_fail(config: dict, ctx) -> dict:
    """:func:`wqk.paper.runners.vision.vision_task`, failing for a seed that ``fail-seedN`` in the work directory
    names."""
    for seed in config["seed_list"]:
        if (ctx.work / f"fail-seed{seed}").exists():
            raise RuntimeError(f"seed {seed} made to fail")
    return vision_task(config, ctx)


def registry(checkpoint_paths: list[str] | None = None) -> dict[str, Experiment]:
    base = EXPERIMENTS["vision_classify"]
    smoke = {**base.config("smoke"), "units": 1}  # two seeds: two units
    # fingerprint=None: the units' own runs only (tests/test_paper_units.py covers fingerprints)
    return {
        "units": Experiment("units", base.title, classify_or_fail, {"smoke": smoke}, units=seed_units, fingerprint=None)
    }
