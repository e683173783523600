"""The registry: every experiment the paper runs, with its config per mode (smoke / quick / standard / full).

Adding an experiment is one entry here (name, runner, configs, derive), one figure function in
:mod:`wqk.paper.figures` (:data:`wqk.paper.figures.FIGURES`) and one section in the report template (with its
predictions in :mod:`wqk.paper.predictions`).

Sizes (the ``quick`` mode is the committed CPU run, about 6 minutes of two cores measured from an empty cache, which
reads the committed ``standard`` results where they exist; ``full`` is the same pipeline at GPU sizes: vision runs use
CUDA when present, the simulator runs on the CPU):

- simulator arms: smoke 2 seeds x 4 steps; quick 8 seeds x 300 steps (the ``simulate`` defaults); full 32 x 1500;
- compare-theory: quick 4 seeds x 2 steps of 1024 sequences, 2048 Monte Carlo sequences; full 16 x 2 x 4096, 8192;
- vision objectives (digits, 8x8, ``vit-tiny``/``dit-tiny``): quick 5 seeds x 400 steps (DiT 1000);
  full ``vit-s``/``dit-s-2`` on the MNIST 5k subset (28x28), 8 seeds x 5000 steps (DiT 10000), batch 128;
- init study, 8x8 digits: full 10 seeds x 4 schemes x 600 (ViT) / 2000 (DiT) steps (not in quick);
- init study, MNIST 5k (28x28): quick ViT 3 seeds x default / symmetric / mimetic / conditioned x 240 steps,
  DiT 3 seeds x default / symmetric / mimetic x 240 steps (sample FID of 100 samples, 10 DDIM steps, every 30);
  full 10 seeds x all six schemes x 480 steps;
- theory check: quick seeds 0-2, full 0-7; nulls vs d: quick d = 16 ... 512 (256 draws), full up to 2048 (1024).

``standard`` (the working scale on these CPUs; hours, in units of one seed that each finish well under an hour,
committed as they land; an entry without a standard config runs its quick one, and ``--quick`` reuses committed
standard results): the vision objectives on MNIST 5k at 28 x 28 (``vit-tiny``, batch 128, lr 2e-3, 3000 steps:
classification, its training images shifted by up to 2 pixels, reaches 0.97; MAE and causal on the same backbone
and budget), the DiT on the ``dit-mnist-fast`` recipe,
the init studies on ``vit-mnist-long`` and ``dit-mnist-fast`` (:data:`wqk.vision.study.STANDARD_TASKS`; DiT arms
with their attention gates open at init too), 5 seeds each, scores and sample metrics every 5% of the budget;
the positive control (``language_control``, 5 seeds) and its scale control (``control_scale``: the encoder in the
five arms of :data:`wqk.language.control.SCALE_ARMS`, fresh seeds 100-109, the held-out loss every 2% of the budget);
``dit_sampling_noise`` (standard and full) draws the samples of the standard DiT's seed 0 sixteen times, the sampling
noise of one logged sample metric beside the seeds' spread; ``vision_dit_causal`` and ``vision_dit_confirm``
(standard, full and smoke only) train the standard DiT with and without a causal mask on fresh seeds 100-109, question
(a)'s pair, one unit per seed. docs/benchmarks.md has each unit's measured wall time.
"""

from __future__ import annotations

from collections.abc import Callable

from wqk.checkpoints.analyze import MIN_NULL_SAMPLES
from wqk.language.control import SCALE_ARMS
from wqk.paper.derive import (
    check_summary,
    checkpoint_summary,
    compare_summary,
    control_scale_summary,
    control_summary,
    grid_summary,
    sampling_summary,
    sim_summary,
    study_summary,
    vision_summary,
)
from wqk.paper.dit_studies import MECHANISM, MECHANISM_SMOKE, PLATEAU, dit_study
from wqk.paper.experiment import Experiment, modes
from wqk.paper.runners.checkpoints import checkpoints, fingerprint, packaged_models
from wqk.paper.runners.language import language_analysis, language_runs
from wqk.paper.runners.sim import compare_theory, sim_arms, sim_grid
from wqk.paper.runners.theory import nulls_vs_d, predictions, theory_check
from wqk.paper.runners.vision import matched_runs, sampling_noise, study_analysis, study_runs, vision_task
from wqk.paper.units import CONFIRM_SEED, arm_seed_units, language_units, matched_units, seed_units
from wqk.vision.recipes import RECIPES

SIM_SIZES = {
    "smoke": {"seeds": 2, "steps": 4, "record_every": 2, "null_samples": 32},
    "quick": {"seeds": 8, "steps": 300, "record_every": 25},
    "full": {"seeds": 32, "steps": 1500, "record_every": 25},
}


def _sim(
    name: str, arms: str, title: str, cost: float, matrices: bool = False, quick_seeds: int = 8, first_seed: int = 0
) -> Experiment:
    """An entry over ``wqk.sim.experiments.EXPERIMENTS[arms]`` (or the default simulations: ``objectives``), its seeds
    from ``first_seed`` on."""
    sizes = {**SIM_SIZES, "quick": {**SIM_SIZES["quick"], "seeds": quick_seeds}}
    if first_seed:
        sizes = {mode: {**size, "first_seed": first_seed} for mode, size in sizes.items()}
    configs = {mode: {"arms": arms, "matrices": matrices, "overrides": size} for mode, size in sizes.items()}
    return Experiment(name, title, sim_arms, configs, derive=sim_summary, cost=cost)


VISION_SMOKE = {"steps": 4, "log_every": 2, "null_samples": 32, "eval_limit": 64, "batch_size": 16}
VISION_FULL = {"model": "vit-s", "data": "mnist5k", "batch_size": 128, "steps": 5000, "log_every": 250}
#: The standard ViT: 28 x 28 MNIST 5k, scored every 5% of the budget (classification reaches 0.97 test accuracy).
VISION_STANDARD = {"model": "vit-tiny", "data": "mnist5k", "batch_size": 128, "lr": 2e-3, "steps": 3000}
STANDARD_SEEDS = 5
#: The standard classifier's training images are translated at random by up to 2 pixels: without it the classifier
#: memorises its 4,000 images (training loss about 1e-4) and ends at 0.957-0.967 test accuracy (seeds 0-3).
CLASSIFY_AUGMENT = {"shift": 2}


def _recipe_train(name: str, **overrides) -> dict:
    """A :mod:`wqk.vision.recipes` recipe as a vision runner's ``train`` config (run-specific fields left out)."""
    run = ("init", "seed", "threads", "progress", "out_dir", "device")
    return {**{k: v for k, v in RECIPES[name].to_dict().items() if k not in run}, **overrides}


#: The standard DiT (``vision_dit``; ``dit_sampling_noise`` shares its runs): the ``dit-mnist-fast`` recipe, scored
#: and its samples measured every 5% of the budget.
DIT_STANDARD_TRAIN = _recipe_train("dit-mnist-fast", log_every=200, fidelity_every=200, checkpoint_every=1000)
#: ``dit_sampling_noise``: vision_dit's standard seed 0 (its runs are shared), 16 draws of its 500 final samples.
SAMPLING_NOISE = {"task": "dit", "seed_list": [0], "draws": 16, "train": DIT_STANDARD_TRAIN}
#: A DiT on digits with sample metrics, in seconds (numbers meaningless).
DIT_SMOKE_TRAIN = {
    "model": "dit-tiny",
    "objective": "denoising",
    "data": "digits",
    **VISION_SMOKE,
    "task_options": {"fidelity_samples": 20, "sampler": {"method": "ddim", "steps": 2, "guidance": 2.0}},
}


def _vision(
    task: str,
    model: str,
    objective: str,
    title: str,
    cost: float,
    quick_steps: int = 400,
    full: dict | None = None,
    standard: dict | None = None,
    standard_options: dict | None = None,
) -> Experiment:
    """A vision objective's entry; ``standard`` replaces its standard training config (a recipe), ``standard_options``
    are the task options of the standard ViT (the classifier's augmentation)."""
    base = {"model": model, "objective": objective, "data": "digits", "steps": quick_steps, "log_every": 25}
    options = {"task_options": standard_options} if standard_options else {}
    standard_train = standard or {**base, **VISION_STANDARD, "log_every": VISION_STANDARD["steps"] // 20, **options}
    configs = modes(
        {"task": task, "seeds": 5, "train": base},
        smoke={"seeds": 2, "train": {**base, **VISION_SMOKE}},
        standard={"seeds": STANDARD_SEEDS, "units": 1, "train": standard_train},
        full={"seeds": 8, "train": {**base, **VISION_FULL, **(full or {})}},
    )
    return Experiment(f"vision_{task}", title, vision_task, configs, derive=vision_summary, cost=cost, units=seed_units)


#: ``vision_matched``'s objective arms, each its name (``arm``) and its training fields over the shared config (issue
#: 43, question (b)): the classifier with the standard one's augmentation, MAE, MAE with no patch masked (its loss on
#: every patch, :mod:`wqk.vision.tasks.mae`: the reconstruction target without the masking) and the causal ViT.
MATCHED_ARMS = [
    {"arm": "classify", "objective": "classification", "task_options": CLASSIFY_AUGMENT},
    {"arm": "mae", "objective": "masked_autoencoding"},
    {"arm": "mae-no-mask", "objective": "masked_autoencoding", "objective_params": {"mask_ratio": 0.0}},
    {"arm": "causal", "objective": "autoregressive"},
]
MATCHED_SEEDS = 10


def _matched_vision() -> Experiment:
    """``vision_matched``: question (b) from matched starts, every objective arm of :data:`MATCHED_ARMS` with the
    backbone of the same seed at step 0 (``matched_init``), on fresh seeds from :data:`CONFIRM_SEED`. No quick
    config: ``--quick`` shows committed ``--standard`` results."""
    matched = {"task_options": {"matched_init": True}}
    base = {"arms": MATCHED_ARMS, "seeds": MATCHED_SEEDS, "first_seed": CONFIRM_SEED}
    smoke = {"model": "vit-tiny", "data": "digits", **VISION_SMOKE, **matched}
    standard = {**VISION_STANDARD, "log_every": VISION_STANDARD["steps"] // 20, **matched}
    configs = {
        "smoke": {**base, "seeds": 2, "train": smoke},
        "standard": {**base, "units": 1, "train": standard},
        "full": {**base, "train": {**VISION_FULL, **matched}},
    }
    title = "question (b) from matched starts: classification, MAE, MAE with no patch masked, causal ViT"
    return Experiment(
        "vision_matched", title, matched_runs, configs, derive=vision_summary, cost=600, units=matched_units
    )


VISION_DIT = _vision(
    "dit",
    "dit-tiny",
    "denoising",
    "DiT denoising on digits",
    255,
    quick_steps=1000,
    full={"model": "dit-s-2", "steps": 10000},
    standard=DIT_STANDARD_TRAIN,
)
CONFIRM_SEEDS = 10


def _dit_confirm(task: str, title: str, causal: bool) -> Experiment:
    """Question (a)'s pair on fresh seeds: ``vision_dit``'s standard (and full) DiT, bidirectional or with a causal
    mask in raster order (task option ``causal``, only where set: the bidirectional train config is ``vision_dit``'s,
    whose runs it shares). No quick config: ``--quick`` shows committed standard results (docs/benchmarks.md has
    the units' expected cost)."""
    masked = lambda train: {**train, "task_options": dict(train.get("task_options", {}), causal=True)}
    mask = masked if causal else lambda train: train
    seeds = {"task": task, "seeds": CONFIRM_SEEDS, "first_seed": CONFIRM_SEED}
    configs = {
        "smoke": {**seeds, "seeds": 2, "train": mask(DIT_SMOKE_TRAIN)},
        "standard": {**seeds, "units": 1, "train": mask(DIT_STANDARD_TRAIN)},
        "full": {**seeds, "train": mask(VISION_DIT.configs["full"]["train"])},
    }
    return Experiment(f"vision_{task}", title, vision_task, configs, derive=vision_summary, cost=9600, units=seed_units)


STUDY_SCHEMES = ("default", "symmetric", "symmetric-indefinite", "directional")


def _study(
    task: str,
    title: str,
    cost: float,
    full: dict,
    name: str | None = None,
    smoke: dict | None = None,
    in_quick: bool = True,
    standard: dict | None = None,
    **quick,
) -> Experiment:
    """An init-study entry; ``in_quick=False`` leaves it out of ``--quick`` (its smoke and full configs remain),
    ``standard`` (the quick config updated) gives it a standard config, split into arm x seed units."""
    base = {
        "task": task,
        "steps": 300,
        "schemes": list(STUDY_SCHEMES),
        "seeds": 4,
        "data": "digits",
        "log_every": 10,
        "target_at": 0.5,
        "null_samples": 256,
        **quick,
    }
    configs = modes(
        base,
        smoke={"steps": 6, "seeds": 2, "log_every": 2, "null_samples": 32, **(smoke or {})},
        full={"seeds": 10, "log_every": 50, **full},
        **({"standard": {"seeds": STANDARD_SEEDS, "units": 1, **standard}} if standard else {}),
    )
    if not in_quick:
        del configs["quick"]
    return Experiment(
        name or f"init_{task}",
        title,
        study_runs,
        configs,
        derive=study_summary,
        cost=cost,
        units=arm_seed_units,
        merge=study_analysis,
    )


FIDELITY_SCHEMES = ("default", "symmetric", "mimetic", "conditioned")
ALL_SCHEMES = ["default", "symmetric", "symmetric-indefinite", "directional", "mimetic", "conditioned"]
#: The standard DiT arms: all six, and the baseline and ours with the adaLN-Zero attention gates open at init.
DIT_STANDARD_SCHEMES = [*ALL_SCHEMES, "default+gates-open", "symmetric+gates-open"]


def _mnist_study(
    task: str,
    title: str,
    cost: float,
    smoke_options: dict | None = None,
    standard: dict | None = None,
    **quick_options,
) -> Experiment:
    """An MNIST study task: quick 3 seeds x 4 schemes at 240 steps (``quick_options`` replace these);
    full 10 seeds x all six at the task's own 480; smoke two schemes, with ``smoke_options`` for the task;
    ``standard`` (a working-scale study task, its schemes) split into arm x seed units."""
    name = f"init_{task.replace('-', '_')}"
    quick = {"steps": 240, "seeds": 3, "data": None, "log_every": 20, "schemes": list(FIDELITY_SCHEMES)}
    smoke = {"schemes": ["default", "symmetric"], **({"task_options": smoke_options} if smoke_options else {})}
    entry = _study(
        task,
        f"init study: {title}",
        cost,
        {"steps": 480, "seeds": 10, "schemes": ALL_SCHEMES},
        name=name,
        smoke=smoke,
        standard=standard,
        **{**quick, **quick_options},
    )
    return entry


#: ``wqk.sim.grid`` at 8 seeds x 200 steps takes about 8 minutes of two cores (its docstring): quick is a quarter of it.
GRID_SIZES = {
    "smoke": {"seeds": 2, "steps": 4, "mc_sequences": 32, "max_cells": 3},
    "quick": {"seeds": 4, "steps": 100, "mc_sequences": 256, "max_cells": None},
    "full": {"seeds": 16, "steps": 400, "mc_sequences": 1024, "max_cells": None},
}


#: The positive control: docstring prose of the standard library, numpy and scipy (about 2.2 million words),
#: an 8k-word vocabulary, encoder and decoder of 4 layers of width 128 over 64 tokens.
LANGUAGE = {
    "sources": ["stdlib", "numpy", "scipy"],
    "vocab_size": 8000,
    "test_fraction": 0.1,
    "objectives": ["mlm", "causal"],
    "arms": ["default", "paper-symmetric", "symmetric"],
}
LANGUAGE_TRAIN = {"dim": 128, "depth": 4, "heads": 4, "length": 64, "batch_size": 64, "lr": 1e-3}
LANGUAGE_CONFIGS = {
    # smoke: one small stdlib package, a tiny model, seconds
    "smoke": {
        **LANGUAGE,
        "sources": ["email"],
        "test_fraction": 0.25,
        "vocab_size": 300,
        "seeds": 2,
        "train": {
            "steps": 4,
            "log_every": 2,
            "warmup": 2,
            "dim": 32,
            "depth": 2,
            "heads": 2,
            "length": 16,
            "batch_size": 8,
            "eval_windows": 16,
            "null_samples": 32,
        },
    },
    # standard: 2000 steps (about 8 million tokens seen, 5 epochs), held-out loss every 5% of the budget
    "standard": {
        **LANGUAGE,
        "seeds": STANDARD_SEEDS,
        "units": 1,
        "train": {**LANGUAGE_TRAIN, "steps": 2000, "log_every": 100, "warmup": 100},
    },
    "full": {
        **LANGUAGE,
        "seeds": 8,
        "train": {**LANGUAGE_TRAIN, "dim": 256, "steps": 20000, "log_every": 1000, "warmup": 1000},
    },
}

#: The positive control without the scale confound (issue 43): the encoder alone, the arms of
#: :data:`wqk.language.control.SCALE_ARMS` on fresh seeds, the language control's training, the held-out loss every
#: 2% of the budget (a step ratio then resolves 0.04 of its reference's median steps, inside its margin of 0.07).
CONTROL_SCALE = {"objectives": ["mlm"], "arms": list(SCALE_ARMS), "first_seed": CONFIRM_SEED, "record_inits": True}
CONTROL_SCALE_CONFIGS = {
    "smoke": {**LANGUAGE_CONFIGS["smoke"], **CONTROL_SCALE},
    "standard": {
        **LANGUAGE_CONFIGS["standard"],
        **CONTROL_SCALE,
        "seeds": 10,
        "train": {**LANGUAGE_CONFIGS["standard"]["train"], "log_every": 40},
    },
    "full": {
        **LANGUAGE_CONFIGS["full"],
        **CONTROL_SCALE,
        "seeds": 10,
        "train": {**LANGUAGE_CONFIGS["full"]["train"], "log_every": 400},
    },
}


def _language(name: str, title: str, configs: dict, derive: Callable) -> Experiment:
    """A positive-control entry over :mod:`wqk.language`, one unit per objective, arm and seed; no quick config:
    ``--quick`` shows committed ``--standard`` results."""
    return Experiment(
        name, title, language_runs, configs, cost=3000, units=language_units, merge=language_analysis, derive=derive
    )


EXPERIMENTS: dict[str, Experiment] = {
    e.name: e
    for e in (
        Experiment(
            "theory_check",
            "claims 1-6 of docs/theory.md as deterministic checks (theory check)",
            theory_check,
            modes(
                {"seeds": [0, 1, 2], "claims": [1, 2, 3, 4, 5, 6]}, smoke={"seeds": [0]}, full={"seeds": list(range(8))}
            ),
            derive=check_summary,
            cost=15,
        ),
        Experiment(
            "nulls",
            "null distributions of s, δ and δ_PR against d (full rank and head rank)",
            nulls_vs_d,
            modes(
                {"d": [16, 32, 64, 128, 256, 512], "head_rank": 32, "samples": 256, "k": 2.0},
                smoke={"d": [8, 16], "samples": 32},
                full={"d": [16, 32, 64, 128, 256, 512, 1024, 2048], "samples": 1024},
            ),
            cost=15,
        ),
        Experiment(
            "predictions",
            "exact expected first update at M = 0 per objective and data setting (theory predict)",
            predictions,
            modes(
                {
                    "data": ["exchangeable", "reversible", "irreversible", "ar1-random", "bos"],
                    "n": 6,
                    "d": 8,
                    "head": "averaged",
                    "seed": 0,
                },
                smoke={"data": ["exchangeable", "bos"], "n": 4, "d": 6},
            ),
            cost=30,
        ),
        Experiment(
            "compare_theory",
            "the simulator's first steps vs the theory's expected update (compare-theory), reversible and irreversible",
            compare_theory,
            modes(
                {
                    "objectives": ["bidirectional", "autoregressive", "denoising", "classification"],
                    "data": ["reversible", "irreversible"],
                    "mc_sequences": 2048,
                    "overrides": {"steps": 2, "batch": 1024, "seeds": 4},
                },
                smoke={"data": ["reversible"], "mc_sequences": 64, "overrides": {"steps": 1, "batch": 16, "seeds": 2}},
                full={"mc_sequences": 8192, "overrides": {"steps": 2, "batch": 4096, "seeds": 16}},
            ),
            derive=compare_summary,
            cost=50,
        ),
        _sim("sim_objectives", "objectives", "the four default simulations: s, δ, δ_PR over training", 35, True),
        _sim("sim_claim7", "claim7", "claim 7: BOS as a key direction, causal vs bidirectional, i.i.d. controls", 35),
        # claims 7 and 8 again on fresh seeds, run after the registry was frozen: their confirmatory rows
        _sim(
            "sim_claim7_confirm",
            "claim7",
            "claim 7 on fresh seeds (100-107): the confirmatory run",
            35,
            first_seed=CONFIRM_SEED,
        ),
        _sim(
            "sim_objectives_confirm",
            "objectives",
            "claim 8 on fresh seeds (100-107): the confirmatory run",
            35,
            first_seed=CONFIRM_SEED,
        ),
        _sim(
            "sim_optimizer_basis_confirm",
            "optimizer_basis",
            "claim 8's early update per optimiser and basis on fresh seeds (100-103): the confirmatory run",
            120,
            quick_seeds=4,
            first_seed=CONFIRM_SEED,
        ),
        _sim("sim_attribution", "attribution", "mask vs data: reversible / irreversible chains, i.i.d. tokens", 45),
        _sim(
            "sim_denoising", "denoising", "denoising on reversible vs irreversible AR(1), with and without residual", 35
        ),
        _sim("sim_parameterisation", "parameterisation", "direct M vs factored vs tied W_q = W_k", 50),
        _sim("sim_masking", "masking", "the masked query: [MASK], BERT 80/10/10, random, keep; two layers", 50),
        _vision(
            "classify",
            "vit-tiny",
            "classification",
            "ViT classification (CLS) on digits",
            120,
            standard_options=CLASSIFY_AUGMENT,
        ),
        _vision("mae", "vit-tiny", "masked_autoencoding", "masked autoencoding ViT on digits", 80),
        _vision("causal", "vit-tiny", "autoregressive", "causal next-patch ViT on digits", 110),
        _matched_vision(),
        VISION_DIT,
        # question (a): the standard DiT with a causal mask, paired seed by seed with the bidirectional one, both on
        # fresh seeds (100-109)
        _dit_confirm("dit_causal", "DiT denoising with a causal mask (raster order), fresh seeds", causal=True),
        _dit_confirm("dit_confirm", "DiT denoising (bidirectional) on fresh seeds: the causal DiT's pair", False),
        Experiment(
            "dit_sampling_noise",
            "sampling noise of the DiT's sample metrics: one trained model's samples drawn again and again",
            sampling_noise,
            {
                "smoke": {**SAMPLING_NOISE, "draws": 3, "train": DIT_SMOKE_TRAIN},
                # no quick config: --quick shows committed --standard results; --full trains on the GPU
                "standard": SAMPLING_NOISE,
                "full": SAMPLING_NOISE,
            },
            derive=sampling_summary,
            cost=300,
        ),
        # the 8x8 digits studies: --full and --smoke only (--quick runs the MNIST studies below in their place)
        _study(
            "vit",
            "init study: ViT classification on digits, steps to a test-accuracy target",
            250,
            {"steps": 600},
            in_quick=False,
        ),
        _study(
            "dit",
            "init study: DiT denoising on digits, steps to a test-loss target",
            340,
            {"steps": 2000},
            in_quick=False,
        ),
        # the simulator's experiments (a)-(d), each with its bidirectional / denoising controls (e)
        _sim(
            "sim_optimizer_basis",
            "optimizer_basis",
            "(a) SGD vs Adam, one-hot vs random orthonormal basis",
            120,
            quick_seeds=4,
        ),
        _sim(
            "sim_positions", "positions", "(b) positions kept out of W_qk (none; targets by content)", 90, quick_seeds=4
        ),
        _sim("sim_shared_key", "shared_key", "(c) a key many queries use: topic, Zipf, packed BOS", 120, quick_seeds=4),
        _sim("sim_length", "length", "(d) sequence length swept (N = 16, 64, 96 at d = 128)", 240, quick_seeds=4),
        Experiment(
            "sim_grid",
            "theory vs simulation, cell by cell (objective x data x parameterisation x optimiser x positions)",
            sim_grid,
            GRID_SIZES,
            derive=grid_summary,
            cost=240,
        ),
        # the init study on MNIST 5k, sample FID for DiT, with the published inits
        # smoke: few, coarse samples (the sample FID of 200 DDIM samples at every evaluation dominates its cost)
        _mnist_study(
            "dit-mnist",
            "DiT on MNIST 5k, steps to a sample-FID target",
            800,
            {"fidelity_samples": 64, "sampler": {"method": "ddim", "steps": 4, "guidance": 2.0}},
            # quick: the baseline, ours and the published anchor; 100 samples of 10 DDIM steps per evaluation (the
            # committed 5-seed, six-arm study at 480 steps is docs/fidelity.md's; --full runs it at 10 seeds)
            schemes=["default", "symmetric", "mimetic"],
            task_options={"fidelity_samples": 100, "sampler": {"method": "ddim", "steps": 10, "guidance": 2.0}},
            # standard: the dit-mnist-fast recipe itself, all six arms and two with the attention gates open at init;
            # one final sample per class of every run for the sample grids
            standard={
                "task": "dit-mnist-fast",
                "steps": None,
                "task_options": None,
                "schemes": DIT_STANDARD_SCHEMES,
                "sample_grid": 1,
            },
        ),
        _language(
            "language_control",
            "the paper's positive control: BERT-style and GPT-style models on English prose, symmetric W_qk inits",
            LANGUAGE_CONFIGS,
            control_summary,
        ),
        _language(
            "control_scale",
            "the positive control without the scale confound: BERT-style encoders, symmetric or not at either scale",
            CONTROL_SCALE_CONFIGS,
            control_scale_summary,
        ),
        _mnist_study(
            "vit-mnist",
            "ViT classification on MNIST 5k, steps to a test-accuracy target",
            480,
            standard={"task": "vit-mnist-long", "steps": None, "schemes": ALL_SCHEMES},
        ),
        dit_study(
            "init_dit_mechanism",
            "init study: what in a symmetric init helps a DiT (symmetry, self-similarity or scale), 10 fresh seeds",
            MECHANISM_SMOKE,
            MECHANISM,
            60 * 20 * 60,
        ),
        dit_study(
            "init_dit_plateau",
            "init study: speed or fidelity? The DiT arms at three times the budget, 10 fresh seeds",
            {**MECHANISM_SMOKE, "task": "dit-mnist-plateau", "contrasts": []},
            PLATEAU,
            30 * 50 * 60,
        ),
    )
}


def checkpoint_experiment(paths: list[str], null_samples: int | None = None) -> Experiment:
    """The optional ``checkpoints`` experiment for ``--checkpoints PATH ...`` (keyed by each file's size and mtime);
    ``--smoke`` draws the fewest null samples analyze allows (its numbers are not read)."""
    config = {"checkpoints": [fingerprint(p) for p in paths], "null_samples": null_samples}
    return Experiment(
        "checkpoints",
        "real checkpoints: per-layer and per-head scores with nulls, grouped by family",
        checkpoints,
        {"smoke": {**config, "null_samples": null_samples or MIN_NULL_SAMPLES}, "quick": config, "full": config},
        derive=checkpoint_summary,
        cost=60,
        optional=True,
        fingerprint=None,  # keyed by the files themselves
    )


def experiments(checkpoint_paths: list[str] | None = None) -> dict[str, Experiment]:
    """The registry to run: every entry, and the checkpoint entry over the paths given and the pretrained models
    that installed packages ship (:data:`wqk.paper.runners.checkpoints.PACKAGED`, the ``weights`` extra)."""
    out = dict(EXPERIMENTS)
    paths = [*(checkpoint_paths or []), *packaged_models()]
    if paths:
        out["checkpoints"] = checkpoint_experiment(paths)
    return out


def derivations() -> dict[str, Callable]:
    """Each experiment's ``derive`` by name, checkpoints included (results may exist for any of them)."""
    return {"checkpoints": checkpoint_summary, **{e.name: e.derive for e in EXPERIMENTS.values() if e.derive}}
