"""A tiny, synthetic ``results/`` tree in the formats the paper's runners write: no training, built in milliseconds.

Values are drawn around chosen means (``EFFECTS``) so that tests know which verdict each prediction must get;
the formats (columns, JSON shapes, manifests) are those of :mod:`wqk.paper.runners` and :mod:`wqk.paper.pipeline`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from wqk.language.control import step_rows, summary_rows
from wqk.paper.registry import experiments
from wqk.paper.results import write_experiment
from wqk.paper.runners.vision import study_analysis
from wqk.vision.sample_table import image_rows
from wqk.vision.study import STUDY_TASKS

STEPS = (0, 25, 50)
LAYERS = 4
SCORES = ("symmetry", "directionality", "directionality_pr")
#: Null bands of the fixture (the same for every form): the central 95% (q025, q975) and mean/sd.
NULL = {
    "symmetry": (-0.02, 0.06, 0.016, 0.02),
    "directionality": (-1.0, 1.0, 0.0, 0.6),
    "directionality_pr": (-0.1, 0.1, 0.0, 0.05),
}
#: Blocks of the simulator's coordinates the fixture scores, with their share of ||M||^2.
BLOCKS = {"token-token": 0.2, "evaluated": 0.5, "position-position": 0.7}
#: Final means per (arm or task, form, score); everything else sits at the null's mean.
EFFECTS = {
    ("bidirectional", "W_qk", "symmetry"): 0.9,
    ("autoregressive", "W_qk", "symmetry"): -0.3,
    ("autoregressive", "W_qk", "directionality_pr"): -0.4,
    ("denoising", "W_qk", "symmetry"): 0.8,
    ("mae", "update", "symmetry"): 0.3,
    ("dit", "update", "symmetry"): 0.2,
    ("dit_confirm", "update", "symmetry"): 0.2,
    ("dit_causal", "update", "symmetry"): 0.05,
}
#: Question (a)'s pair, on fresh seeds from this one (as the registry runs them).
FRESH_SEED = 100


def _manifest(name: str, seeds: int) -> dict:
    registry = experiments()
    configs = registry[name].configs if name in registry else {}
    # the digits studies have no quick config; question (a)'s pair neither, and its smoke one is on the digits, as the
    # fixture's MAE it is described against
    fallback = "smoke" if name in ("vision_dit_causal", "vision_dit_confirm") else "full"
    config = dict(configs.get("quick") or configs.get(fallback) or {})
    return {
        "experiment": name,
        "title": name,
        "mode": "quick",
        "config": config,
        "seeds": seeds,
        "steps": STEPS[-1],
        "cache_key": "fixture",
        "code_version": "fixture",
        "modules": [],
        "libraries": {},
        "provenance": {"git_commit": "fixture", "versions": {}},
        "command": "fixture",
        "wall_seconds": 1.5,
    }


def _null_row(score: str, d: int) -> dict:
    """A null row's statistics for ``score`` at ``d`` (full rank)."""
    lo, hi, m, sd = NULL[score]
    return {"score": score, "d": d, "rank": d, "k": 2.0, "samples": 64, "mean": m, "sd": sd, "q025": lo, "q975": hi}


def _null_rows(ids: dict) -> list[dict]:
    return [{**ids, "null": "iid", **_null_row(s, 64)} for s in NULL]


def _value(rng, key: tuple, score: str, fraction: float, spread: float) -> float:
    mean = NULL[score][2]
    target = EFFECTS.get((*key, score), mean)
    return float(mean + (target - mean) * fraction + spread * rng.standard_normal())


def _score_columns(rng, key: tuple, fraction: float, spread: float) -> dict:
    out = {}
    for score in SCORES:
        v = _value(rng, key, score, fraction, spread)
        out[score] = v
        out[f"{score}_z"] = (v - NULL[score][2]) / NULL[score][3]
    return out


def sim_tables(arms: list[str], seeds: int, rng, matrices: bool = False) -> dict:
    scores, nulls = [], []
    for arm in arms:
        objective = arm.split(",")[0]
        for step in STEPS:
            for seed in range(seeds):
                for form in ("W_qk", "update", "grad_self", "grad_cross"):
                    if form != "W_qk" and step == 0:
                        continue
                    row = {
                        "arm": arm,
                        "step": step,
                        "seed": seed,
                        "layer": 0,
                        "form": form,
                        "block": "all",
                        **_score_columns(rng, (objective, form), step / STEPS[-1], 0.01),
                        "norm_share": 1.0,
                        "loss": 2.0 - step / 100,
                        "bos_key_norm": 3.0 + rng.random(),
                        "bos_query_norm": 1.0,
                        "mask_key_norm": float("nan"),
                        "mask_query_norm": float("nan"),
                    }
                    if step == STEPS[-1] and form == "W_qk":
                        row["bos_key_typical"] = (1.5 if objective == "autoregressive" else 0.5) + 0.01 * rng.random()
                    scores.append(row)
                    for block, share in BLOCKS.items():  # the blocks the claims read, and the position block
                        scores.append(
                            {
                                **{k: row[k] for k in ("arm", "step", "seed", "layer", "form")},
                                "block": block,
                                **_score_columns(rng, (objective, form), step / STEPS[-1], 0.01),
                                "norm_share": share,
                            }
                        )
        nulls += [
            r for form in ("W_qk", "update", "grad_self", "grad_cross") for r in _null_rows({"arm": arm, "form": form})
        ]
    tables = {
        "scores": scores,
        "nulls": nulls,
        "arms": {
            a: {
                "run": "fixture",
                "config": {
                    "objective": a.split(",")[0],
                    "n": 8,
                    "seeds": seeds,
                    "steps": STEPS[-1],
                    "model": {"d": 4, "heads": 2},
                },
            }
            for a in arms
        },
    }
    if matrices:
        tables["matrix"] = [
            {"arm": a, "row": i, "col": j, "value": float(rng.standard_normal())}
            for a in arms
            for i in range(4)
            for j in range(4)
        ]
        tables["coords"] = [
            {"arm": a, "index": i, "block": "token" if i < 2 else "position", "label": f"c{i}"}
            for a in arms
            for i in range(4)
        ]
    return tables


def vision_tables(task: str, seeds: int, rng, first_seed: int = 0) -> dict:
    forms = ["W_qk", "update"] + (["adaln_t500"] if task == "dit" else []) + (["decoder"] if task == "mae" else [])
    scores = []
    for step in STEPS:
        for seed in range(first_seed, first_seed + seeds):
            for form in forms:
                for layer in range(1 if form == "decoder" else LAYERS):
                    if form == "update" and step == 0:
                        continue
                    row = {
                        "task": task,
                        "step": step,
                        "seed": seed,
                        "init": "default",
                        "form": form,
                        "layer": layer,
                        **_score_columns(rng, (task, form), step / STEPS[-1], 0.01),
                        "loss": 1.0,
                        "test_loss": 1.0 - step / 100,
                    }
                    if task == "classify":
                        row.update(test_accuracy=0.5 + step / 100, cls_key_norm=0.5, cls_query_norm=1.0 + rng.random())
                    if task == "dit":  # a run's sample metrics, the same on each of its rows: seeds spread by 5
                        row.update(sample_fid=400 - 3 * step + 5 * seed, sample_accuracy=0.1 + step / 100)
                    scores.append(row)
    nulls = [r for form in forms for r in _null_rows({"task": task, "form": form})]
    return {"scores": scores, "nulls": nulls, "config": {"seeds": seeds}}


#: vision_matched's fixture: the update's s per arm (MAE and its no-mask arm alike, both above causal) and δ_PR
#: (causal below MAE); layer 0's blocks with their share of ||M||^2 (the position block under the 1% floor).
MATCHED_S = {"classify": 0.25, "mae": 0.3, "mae-no-mask": 0.3, "causal": 0.0}
MATCHED_SHARES = {"content-content": 0.06, "position-position": 0.005, "content-position": 0.1}
MATCHED_FIRST_SEED = 100


def matched_tables(seeds: int, rng) -> dict:
    """``vision_matched``'s merged tables on seeds from 100: per arm, layer and step the whole forms (``block =
    all``), and layer 0's blocks at step 0 (``W_qk``) and at the last step (``W_qk`` and the update)."""
    scores = []
    seed_list = range(MATCHED_FIRST_SEED, MATCHED_FIRST_SEED + seeds)
    for task, s in MATCHED_S.items():
        for step in STEPS:
            for seed in seed_list:
                for form in ("W_qk", "update"):
                    if form == "update" and step == 0:
                        continue
                    delta = -0.4 if task == "causal" else 0.0
                    ids = {"task": task, "step": step, "seed": seed, "init": "default", "form": form}
                    for layer in range(LAYERS):
                        value = s * step / STEPS[-1] if form == "update" else 0.02
                        scores.append({
                            **ids, "layer": layer, "block": "all",
                            "symmetry": value + 0.01 * rng.standard_normal(), "symmetry_z": 1.0,
                            "directionality": 0.0, "directionality_z": 0.0,
                            "directionality_pr": delta * step / STEPS[-1] + 0.01 * rng.standard_normal(),
                            "directionality_pr_z": 0.0, "loss": 1.0, "test_loss": 1.0 - step / 100,
                        })  # fmt: skip
                    if step in (0, STEPS[-1]):
                        scores += [
                            {**ids, "layer": 0, "block": block, "symmetry": value + 0.01 * rng.standard_normal(),
                             "directionality": 0.0, "directionality_pr": 0.0, "norm_share": share}
                            for block, share in MATCHED_SHARES.items()
                        ]  # fmt: skip
    nulls = [r for task in MATCHED_S for form in ("W_qk", "update") for r in _null_rows({"task": task, "form": form})]
    return {"scores": scores, "nulls": nulls}


def sampling_tables(rng, draws: int = 8) -> dict:
    """``dit_sampling_noise``: vision_dit's seed 0 at its last step, its samples drawn ``draws`` times (FID spread
    about 0.5, far under the seeds' 5; the accuracy's spread as large as the seeds' 0)."""
    rows = [
        {
            "task": "dit",
            "init": "default",
            "seed": 0,
            "draw": d,
            "step": STEPS[-1],
            "samples": 500,
            "sample_fid": 400 - 3 * STEPS[-1] + 0.5 * rng.standard_normal(),
            "sample_accuracy": 0.1 + STEPS[-1] / 100 + 0.01 * rng.standard_normal(),
        }
        for d in range(draws)
    ]
    return {"draws": rows}


def gate_tables(seeds: int) -> list[dict]:
    """The DiT study's attention gates: closed at step 0, then ``step / 100 x (layer + 1)`` plus ``0.01 x seed`` (2
    layers), twice that for ``symmetric``."""
    return [
        {
            "task": "dit-mnist",
            "scheme": scheme,
            "seed": seed,
            "step": step,
            "layer": layer,
            "attn_gate_rms": 0.0 if step == 0 else factor * (step / 100 * (layer + 1) + 0.01 * seed),
        }
        for scheme, factor in (("default", 1.0), ("symmetric", 2.0))
        for seed in range(seeds)
        for step in STEPS
        for layer in range(2)
    ]


#: study task -> (metric, higher is better, schemes): the digits studies and the MNIST ones with the published inits.
STUDY_FIXTURES = {
    "vit": ("test_accuracy", True, ("default", "symmetric", "symmetric-indefinite", "directional")),
    "dit": ("test_loss", False, ("default", "symmetric", "symmetric-indefinite", "directional")),
    "vit-mnist": ("test_accuracy", True, ("default", "symmetric", "mimetic", "conditioned")),
    "dit-mnist": ("sample_fid", False, ("default", "symmetric", "mimetic")),
}


def study_tables(task: str, seeds: int, rng, shift: int = 0) -> dict:
    """The init study's tables; ``shift`` delays every arm's steps to the target (another fixture, other values)."""
    metric, higher, schemes = STUDY_FIXTURES[task]
    arms, steps, curves = [], [], []
    for k, scheme in enumerate(schemes):
        own = [20 + 10 * k + s + shift for s in range(seeds)]
        arm = {
            "task": task,
            "scheme": scheme,
            "metric": metric,
            "target": 0.5,
            "seeds": seeds,
            "reached": seeds,
            "steps_median": float(np.median(own)),
            "final_mean": 0.8,
            "final_lo": 0.75,
            "final_hi": 0.85,
            "final_rule": "t",
        }
        if scheme != "default":
            ratio = float(np.mean(own) / np.mean([20 + s for s in range(seeds)]))
            arm.update(
                pairs_reached=seeds,
                arm_reached=seeds,
                baseline_reached=seeds,
                step_ratio=ratio,
                step_ratio_lo=ratio - 0.05,
                step_ratio_hi=ratio + 0.05,
                step_ratio_rule="log-t",
                final_diff=0.0,
                final_diff_lo=-0.01,
                final_diff_hi=0.01,
                final_diff_rule="t",
                at100_diff=0.0,
                at100_diff_lo=-0.01,
                at100_diff_hi=0.01,
                at100_diff_rule="t",
            )
        arms.append(arm)
        steps += [{"task": task, "scheme": scheme, "seed": s, "steps_to_target": own[s]} for s in range(seeds)]
        curves += [
            {
                "task": task,
                "scheme": scheme,
                "seed": s,
                "step": st,
                "loss": 1.0 / (1 + st),
                metric: 0.1 + st / 60 + 0.01 * rng.random(),
            }
            for s in range(seeds)
            for st in STEPS
        ]
    study = {
        "task": task,
        "model": f"{task.split('-')[0]}-tiny",
        "objective": "x",
        "metric": metric,
        "higher_is_better": higher,
        "target": 0.5,
        "target_rule": "fixture",
        "seeds": seeds,
        "steps": STEPS[-1],
        "data": "mnist5k" if task.endswith("mnist") else "digits",
    }
    tables = {"arms": arms, "steps": steps, "curves": curves, "study": study}
    if task == "dit-mnist":  # the MNIST DiT study keeps its final samples: 8 x 8 images of classes 0-2
        import torch

        images = torch.as_tensor(rng.uniform(-1, 1, (len(schemes) * seeds * 3, 1, 8, 8)), dtype=torch.float32)
        ids = [{"task": task, "scheme": scheme, "seed": s} for scheme in schemes for s in range(seeds)]
        tables["samples"] = [r for k, i in enumerate(ids) for r in image_rows(images[3 * k : 3 * k + 3], [0, 1, 2], i)]
    return tables


def theory_tables(rng, shift: float = 0.0) -> dict[str, dict]:
    """The theory layer's and the grid's tables; ``shift`` moves the grid's means (another fixture, other values)."""
    checks = [
        {
            "seed": seed,
            "claim": claim,
            "check": f"check {claim}.{i}",
            "prediction": "0",
            "measured": "1e-15",
            "tolerance": "<= 1e-12",
            "passed": True,
        }
        for seed in (0, 1)
        for claim in range(1, 7)
        for i in range(2)
    ]
    settings = ("exchangeable", "irreversible")
    objectives = ("bidirectional", "autoregressive", "denoising")
    predictions = [
        {
            "setting": st,
            "data": "forward",
            "objective": o,
            "mask": "symmetric",
            "part": p,
            "symmetry": 1.0 if st == "exchangeable" else 0.5,
            "directionality": 0.0,
            "skew_fraction": 0.1,
        }
        for st in settings
        for o in objectives
        for p in ("whole", "self", "cross")
    ]
    attribution = [
        {
            "setting": st,
            "objective": o,
            "mask": "symmetric",
            "skew_total": 0.3,
            "symmetric_mask_part": 0.1,
            "mask_part": 0.2,
            "arrow_part": 0.05,
        }
        for st in settings
        for o in objectives
    ]
    nulls = []
    for d in (16, 32, 64):
        for s in NULL:
            row = {"kind": "full rank", **_null_row(s, d)}
            theory = s != "directionality_pr"  # the theory gives no reference for δ_PR's null
            row.update(reference_mean=row["mean"] if theory else None, reference_sd=row["sd"] if theory else None)
            nulls.append(row)
    compare = []
    for o in objectives:
        for data in ("reversible", "irreversible"):
            for part in ("whole", "self", "cross"):
                row = {"objective": o, "data": data, "part": part, "theory": "monte_carlo", "seeds": 2}
                for q in ("s_measured", "s_theory", "delta_measured", "delta_theory", "rel_error", "rel_noise"):
                    row[q], row[f"{q}_ci"] = float(rng.random()), 0.05
                compare.append(row)
    agreement = [
        {
            "cell": f"{o}/{data}/{param}",
            "objective": o,
            "data": data,
            "score": score,
            "theory": "predicted",
            "simulated": phase,
            "theory_mean": 0.5 + shift,
            "theory_z": 5.0,
            "simulated_mean": (0.4 if o != "autoregressive" else -0.2) + shift,
            "simulated_z": 4.0,
            "agree": float(o != "autoregressive"),
            "agree_seeds": float(o != "autoregressive"),
            "param": param,
        }
        for param in ("factored", "tied")
        for o in objectives
        for data in ("exchangeable", "irreversible")
        for phase in ("early", "final")
        for score in ("s", "delta_pr")
    ]
    rates = [
        {
            "rule": "z",
            "theory": "predicted",
            "simulated": phase,
            "score": "both",
            "comparisons": 16,
            "agree": int(sum(r["agree"] for r in agreement if r["simulated"] == phase)),
            "rate": 0.0,
            "undefined": 0,
        }
        for phase in ("early", "final")
    ]
    grid = {"values": [], "agreement": agreement, "rates": rates}
    return {
        "sim_grid": grid,
        "theory_check": {"checks": checks},
        "predictions": {"predictions": predictions, "attribution": attribution},
        "nulls": {"nulls": nulls},
        "compare_theory": {"compare": compare},
    }


OPTIMISERS = ("adam, onehot", "sgd, onehot", "adam, orthogonal", "sgd, orthogonal")
SIM_ARMS = {
    "sim_objectives": ["bidirectional", "autoregressive", "denoising", "classification"],
    "sim_claim7": ["autoregressive", "bidirectional", "autoregressive, iid tokens", "bidirectional, iid tokens"],
    "sim_attribution": ["bidirectional, reversible chain", "autoregressive, irreversible chain"],
    "sim_denoising": ["denoising, reversible", "denoising, irreversible"],
    "sim_parameterisation": ["bidirectional, factored", "autoregressive, direct", "autoregressive, tied"],
    "sim_masking": ["bidirectional, mask", "bidirectional, keep"],
    "sim_optimizer_basis": [f"{o}, {b}" for o in ("autoregressive", "bidirectional") for b in OPTIMISERS],
}
#: The confirmatory reruns of claims 7 and 8 (fresh seeds) have their originals' arms.
SIM_ARMS |= {f"{name}_confirm": SIM_ARMS[name] for name in ("sim_claim7", "sim_objectives", "sim_optimizer_basis")}


#: The language control's fixture: loss of a model without context, and each arm's time constant of its curve
#: (the paper's symmetric init learns faster on MLM; the symmetric init at the default's scale is the default).
UNIGRAM = 6.5
LANGUAGE_TAU = {"default": 30.0, "paper-symmetric": 15.0, "symmetric": 30.0}
LANGUAGE_S = {"mlm": 0.3, "causal": 0.05}


def language_tables(
    seeds: int, rng, taus: dict = LANGUAGE_TAU, objectives=("mlm", "causal"), first_seed: int = 0, every: int = 5
) -> dict:
    """The positive control's merged tables: held-out loss curves (an exponential approach to 1.5 nats below
    the no-context loss, time constant ``taus[arm]``, the causal model at the default's pace in every arm, evaluated
    every ``every`` of 100 steps), per-layer scores, and the steps and savings of :mod:`wqk.language.control`."""
    curves, scores = [], []
    for objective in objectives:
        for arm, tau in taus.items():
            tau = tau if objective == "mlm" else taus["default"]
            for seed in range(first_seed, first_seed + seeds):
                for step in range(0, 101, every):
                    loss = float(UNIGRAM + 0.5 - 2.0 * (1 - np.exp(-step / tau)) + 0.005 * rng.standard_normal())
                    curves.append({"objective": objective, "arm": arm, "seed": seed, "step": step, "test_loss": loss})
                for layer in range(LAYERS):
                    s = float(LANGUAGE_S[objective] + 0.02 * rng.standard_normal())
                    ids = {"objective": objective, "arm": arm, "seed": seed, "layer": layer, "head": "all"}
                    scores.append({**ids, "symmetry": s, "directionality": -0.1, "directionality_pr": -0.05})
    steps = step_rows(curves)
    corpus = {"sources": ["fixture"], "train_tokens": 1000, "test_tokens": 100, "vocab": 50, "unigram_loss": UNIGRAM}
    savings = summary_rows(steps, curves)
    return {"curves": curves, "scores": scores, "corpus": corpus, "steps": steps, "savings": savings}


#: The scale control's fixture: the paper's scale speeds the encoder up, symmetry and self-similarity do not; each
#: arm's init: (W_q and W_k std, s, trace share, positive share).
SCALE_TAU = {"default": 30.0, "paper-symmetric": 15.0, "symmetric": 30.0, "default-at-paper-scale": 15.0,
             "indefinite-at-paper-scale": 15.0}  # fmt: skip
SCALE_INITS = {"default": (0.02, 0.0, 0.0, 0.5), "paper-symmetric": (0.051, 1.0, 1.0, 1.0),
               "symmetric": (0.02, 1.0, 1.0, 1.0), "default-at-paper-scale": (0.051, 0.0, 0.0, 0.5),
               "indefinite-at-paper-scale": (0.051, 1.0, 0.0, 0.5)}  # fmt: skip


def scale_control_tables(seeds: int, rng) -> dict:
    """``control_scale``'s merged tables: the encoder's curves on fresh seeds (from 100), evaluated every 2% of the
    budget, and each run's init (:data:`SCALE_INITS`, its std drawn about the arm's)."""
    tables = language_tables(seeds, rng, SCALE_TAU, ("mlm",), first_seed=100, every=2)
    tables["inits"] = []
    for arm, (std, s, trace, positive) in SCALE_INITS.items():
        for seed in range(100, 100 + seeds):
            drawn = std * (1 + 0.01 * float(rng.standard_normal()))
            tables["inits"].append({"objective": "mlm", "arm": arm, "seed": seed, "q_std": drawn, "k_std": drawn,
                                    "v_std": 0.02, "proj_std": 0.02, "symmetry": s, "trace_share": trace,
                                    "positive_share": positive})  # fmt: skip
    return tables


def dit_study_tables(name: str, seeds: int, rng) -> dict:
    """A DiT study of fresh seeds with the large evaluation (``init_dit_mechanism``, ``init_dit_plateau``): falling
    FID curves per arm and seed, merged by the study's own analysis (:func:`wqk.paper.runners.vision.study_analysis`),
    so its arms, contrasts and budgets are what a real run's would be."""
    config = {**experiments()[name].configs["standard"], "seeds": seeds}
    task = STUDY_TASKS[config["task"]]
    budget, every = task.steps, task.task_options["fidelity_large_every"]
    steps = np.linspace(0, budget, 17).astype(int)
    curves = []
    for k, scheme in enumerate(config["schemes"]):
        for seed in range(config["first_seed"], config["first_seed"] + seeds):
            fid = 10 + (30 + 2 * k) * np.exp(-3 * steps / budget) + rng.normal(0, 0.3, len(steps))
            for step, value in zip(steps, fid, strict=True):
                large = step > 0 and step % every == 0
                curves.append(
                    {
                        "task": config["task"],
                        "scheme": scheme,
                        "seed": seed,
                        "step": int(step),
                        "loss": 1.0 / (1 + step),
                        "sample_fid": float(value),
                        "sample_kid": float(value) / 1000,
                        "sample_fid_large": float(value) - 1 if large else None,
                        "sample_kid_large": float(value) / 1100 if large else None,
                    }
                )
    scales = [
        {
            "scheme": scheme,
            "q_std_ratio": 1.0,
            "init_symmetry": 0.5,
            "init_trace_share": 0.5,
            "init_positive_share": 0.5,
        }
        for scheme in config["schemes"]
    ]
    unit = {"curves": curves, "scales": scales, "meta": {"fidelity": {}}}
    tables = study_analysis(config, {"all": unit})
    tables["study"] = {**tables["study"], "steps": budget, "model": "dit-mnist", "data": "mnist5k"}
    return tables


def write_fixture(results: Path, seeds: int = 3, seed: int = 0) -> Path:
    """Write every experiment's raw tables and manifest under ``results`` (derive and verdicts not yet run)."""
    rng = np.random.default_rng(seed)
    tables: dict[str, dict] = theory_tables(rng, shift=0.01 * seed)
    for name, arms in SIM_ARMS.items():
        tables[name] = sim_tables(arms, seeds, rng, matrices=name == "sim_objectives")
    for task in ("classify", "mae", "causal", "dit"):
        tables[f"vision_{task}"] = vision_tables(task, seeds, rng)
    for task in ("dit_confirm", "dit_causal"):
        tables[f"vision_{task}"] = vision_tables(task, seeds, rng, first_seed=FRESH_SEED)
    for task in STUDY_FIXTURES:
        tables[f"init_{task.replace('-', '_')}"] = study_tables(task, seeds, rng, shift=seed)
    tables["init_dit_mnist"]["gates"] = gate_tables(seeds)
    tables["language_control"] = language_tables(seeds, rng)
    tables["dit_sampling_noise"] = sampling_tables(rng)
    tables["control_scale"] = scale_control_tables(seeds, rng)
    tables["vision_matched"] = matched_tables(seeds, np.random.default_rng(seed + 1))  # its own draws: the rest stay
    for name in ("init_dit_mechanism", "init_dit_plateau") if seeds >= 2 else ():  # a study pairs two seeds or more
        tables[name] = dit_study_tables(name, seeds, np.random.default_rng(seed + 2))
    for name, t in tables.items():
        write_experiment(results / name, t, _manifest(name, seeds))
    return results
