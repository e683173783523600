"""Runners over the simulator (:mod:`wqk.sim`): the arms of an experiment, and the first steps vs the theory.

Arms are trained into ``WORK/sim/<sim code version>-<config hash>/`` and resumed from there, so an arm that
two experiments share (the default autoregressive run is in four of them) trains once, and an arm is never
reused across a change to the simulator's code.
"""

from __future__ import annotations

import math

from wqk.paper.experiment import Context, Tables

#: The arms of the ``objectives`` experiment: the four default simulations of ``cli.py simulate``.
OBJECTIVES_ARMS = "objectives"


def arm_configs(config: dict) -> dict:
    """``{arm: SimConfig}``: the arms of ``config["arms"]`` (``objectives`` or a :data:`wqk.sim.experiments.EXPERIMENTS`
    name) with the mode's overrides (seeds, steps, record_every, null_samples, ...) applied to every arm."""
    from wqk.sim.config import SIM_OBJECTIVES, default_config
    from wqk.sim.experiments import EXPERIMENTS

    name = config["arms"]
    if name == OBJECTIVES_ARMS:
        arms = {objective: default_config(objective) for objective in SIM_OBJECTIVES}
    elif name in EXPERIMENTS:
        arms = EXPERIMENTS[name].arms()
    else:
        raise ValueError(f"unknown simulator experiment {name!r}; choose from {[OBJECTIVES_ARMS, *EXPERIMENTS]}")
    return {arm: _resized(cfg, config.get("overrides", {})) for arm, cfg in arms.items()}


def _resized(cfg, overrides: dict):
    """``cfg`` with the mode's overrides; the early dense recording (``record_dense``) never runs past the last
    step."""
    extra = {"record_dense": min(cfg.record_dense, overrides["steps"])} if "steps" in overrides else {}
    return cfg.with_overrides(**overrides, **extra)


def coordinate_blocks(sim) -> list[dict]:
    """Which coordinate of the model's input space is which token, special token or position (one-hot bases only)."""
    from wqk.sim.model import SPECIALS

    cfg, model = sim.cfg.model, sim.model
    if cfg.embed != "onehot":
        return []
    if model.vocab is not None:
        names = [("token", f"t{i}") for i in range(model.vocab)] + [("special", s.upper()) for s in SPECIALS]
    else:
        names = [("channel", f"c{i}") for i in range(model.channels)]
    if cfg.positions == "onehot":
        names += [("position", f"p{i}") for i in range(model.n_positions)]
    return [{"index": i, "block": block, "label": label} for i, (block, label) in enumerate(names)]


def sim_arms(config: dict, ctx: Context) -> Tables:
    """Train (or reuse) every arm; per-seed per-layer scores over training, their nulls, BOS dominance, and with
    ``config["matrices"]`` the first seed's learned ``W_qk`` of the last layer with its coordinate labels."""
    from wqk.paper.codeversion import modules_version
    from wqk.paper.runners.nulls import null_rows
    from wqk.sim.experiments import bos_dominance, config_key
    from wqk.sim.train import run

    arms = arm_configs(config)
    version = modules_version(["wqk.sim.train", "wqk.sim.experiments"])
    tables: Tables = {"scores": [], "nulls": [], "arms": {}}
    if config.get("matrices"):
        tables["matrix"], tables["coords"] = [], []
    for i, (arm, cfg) in enumerate(arms.items()):
        ctx.note(f"arm {i + 1}/{len(arms)}: {arm}")
        directory = ctx.scratch("sim", f"{version}-{config_key(cfg)}")
        with ctx.locked(directory):
            sim = run(cfg, directory, resume=True, progress=False, threads=ctx.threads)
        dominance = bos_dominance(sim)
        for row in sim.rows:
            if row["head"] != "all":
                continue
            out = {"arm": arm, **{k: v for k, v in row.items() if k != "head" and not k.endswith("_p")}}
            if row["step"] == cfg.steps and row["form"] == "W_qk" and row["layer"] == 0:
                # ||M x_BOS|| over the mean ||M x|| of data inputs, layer 0 (wqk.sim.experiments.bos_dominance)
                out["bos_key_typical"] = dominance[cfg.seed_list.index(row["seed"])]
            tables["scores"].append(out)
        d = cfg.model.d
        ranks = {"W_qk": sim.model.forms().rank("layer")}
        for form in dict.fromkeys(r["form"] for r in sim.rows):
            tables["nulls"] += null_rows({"arm": arm, "form": form}, d, ranks.get(form, d), cfg.null_samples)
        tables["nulls"] += final_spectrum_rows(arm, sim, dominance)
        # the run is named by its config key: the code version in its directory name is provenance (the manifest)
        tables["arms"][arm] = {"run": config_key(cfg), "config": cfg.to_dict()}
        if config.get("matrices"):
            m = sim.model.matrices()[0, -1].sum(0).numpy()  # first seed, last layer, summed over heads
            tables["matrix"] += [
                {"arm": arm, "row": a, "col": b, "value": float(f"{m[a, b]:.6g}")} for a in range(d) for b in range(d)
            ]
            tables["coords"] += [{"arm": arm, **c} for c in coordinate_blocks(sim)]
    return tables


def final_spectrum_rows(arm: str, sim, dominance: list[float]) -> list[dict]:
    """Spectrum-matched nulls (:mod:`wqk.theory.spectrum_null`) of the final learned ``W_qk`` of every seed: each
    layer's per-layer form (``block = all``), layer 0's diagonal coordinate blocks (each with its own spectrum), and the
    BOS norm ratios (``bos_key_query`` per layer, ``bos_key_typical`` at layer 0) against random forms of that spectrum.
    """
    import torch

    from wqk.paper.runners.nulls import ratio_row, spectrum_rows
    from wqk.sim.analysis import dominance_inputs
    from wqk.sim.coordinates import input_coordinates
    from wqk.theory.blocks import blocks_of
    from wqk.theory.scores import SCORE_NAMES
    from wqk.theory.spectrum_null import form_spectrum

    cfg, step = sim.cfg, sim.cfg.steps
    final = {
        (r["seed"], r["layer"], r["block"]): r
        for r in sim.rows
        if r["step"] == step and r["form"] == "W_qk" and r["head"] == "all"
    }
    layers, d = cfg.model.layers, cfg.model.d
    sigma = form_spectrum(*sim.model.forms().factors("layer")).reshape(cfg.seeds, layers, -1)
    coords = input_coordinates(sim)
    diagonal = [b for b in blocks_of(coords.labels) if b.rows == b.cols and len(b.rows) > 1]
    blocks = coords.of(sim.model.matrices()[:, 0].sum(1))  # (S, D, D): layer 0 in its input coordinates
    inputs = dominance_inputs(sim)
    rows = []
    for i, seed in enumerate(cfg.seed_list):
        for layer in range(layers):
            ids = {"arm": arm, "form": "W_qk", "seed": seed, "layer": layer, "step": step, "block": "all"}
            row = final[(seed, layer, "all")]
            rows += spectrum_rows(ids, sigma[i, layer], d, {n: row[n] for n in SCORE_NAMES}, cfg.null_samples)
            if inputs is not None:
                x = inputs[0][i]
                value = row["bos_key_norm"] / row["bos_query_norm"] if row["bos_query_norm"] else math.nan
                rows.append(ratio_row(ids, "bos_key_query", sigma[i, layer], d, ("key", x), ("query", x), value))
                if layer == 0:
                    top, bottom = ("key", x), ("key", inputs[1][i])
                    rows.append(ratio_row(ids, "bos_key_typical", sigma[i, 0], d, top, bottom, dominance[i]))
        for block in diagonal:
            row = final.get((seed, 0, block.name))
            if row is None:
                continue
            index = torch.tensor(block.rows)
            spectrum = torch.linalg.svdvals(blocks[i][index][:, index]).numpy()
            ids = {"arm": arm, "form": "W_qk", "seed": seed, "layer": 0, "step": step, "block": block.name}
            values = {n: row[n] for n in SCORE_NAMES}
            rows += spectrum_rows(ids, spectrum, len(block.rows), values, cfg.null_samples)
    return rows


def _split_plus_minus(text) -> tuple[float, float]:
    """``"+0.123 ± 0.045"`` (wqk.sim.compare's cells) -> ``(0.123, 0.045)``; a bare number has no half-width."""
    if isinstance(text, (int, float)):
        return float(text), math.nan
    mean, _, half = str(text).partition("±")
    return (float(mean) if mean.strip() else math.nan), (float(half) if half.strip() else math.nan)


def compare_theory(config: dict, ctx: Context) -> Tables:
    """The first steps' ``dL/dM`` of the simulator vs the theory's expected update, per objective, data and part.

    ``config["data"]`` names data variants (``reversible``: the defaults; ``irreversible``: the cyclic chain for
    token objectives, the rotation AR(1) for denoising), each run for every objective.
    """
    from wqk.sim.compare import CompareRow
    from wqk.sim.compare import compare_theory as compare
    from wqk.sim.config import DEFAULTS, default_config

    variants = {
        "reversible": ({}, {}),
        "irreversible": ({"data__transition": "cycle"}, {"data__process": "var_irreversible"}),
    }
    rows = []
    for data in config["data"]:
        tokens, continuous = variants[data]
        configs = {
            objective: default_config(
                objective, **(continuous if DEFAULTS[objective].data.continuous else tokens), **config["overrides"]
            )
            for objective in config["objectives"]
        }
        ctx.note(f"{data} data: {', '.join(configs)}")
        out = ctx.scratch("compare", data)
        compare(configs, out, mc_sequences=config["mc_sequences"], progress=False, threads=ctx.threads)
        from wqk.paper.results import read_csv

        for row in read_csv(out / "compare_theory.csv"):
            flat = {"objective": row["objective"], "data": data, "part": row["part"], "theory": row["theory"]}
            flat["seeds"] = row["seeds"]
            for column in CompareRow.columns()[4:]:
                flat[column], flat[f"{column}_ci"] = _split_plus_minus(row[column])
            rows.append(flat)
    return {"compare": rows}


def sim_grid(config: dict, ctx: Context) -> Tables:
    """Theory vs simulation cell by cell (:func:`wqk.sim.grid.run_grid`): every value (``values``: cell x phase x score,
    seed mean with CI and z), every comparison of a prediction with a simulated phase and whether their classes
    agree (``agreement``), and the agreement rates (``rates``)."""
    from wqk.paper.codeversion import modules_version
    from wqk.sim.grid import all_cells, run_grid

    cells = all_cells()[: config.get("max_cells")]
    ctx.note(f"{len(cells)} cells x {config['seeds']} seeds x {config['steps']} steps")
    tables = run_grid(
        ctx.scratch("grid", modules_version(["wqk.sim.grid"])),  # its cells are reused by config: name them by code
        seeds=config["seeds"],
        steps=config["steps"],
        cells=cells,
        mc_sequences=config["mc_sequences"],
        progress=False,
        threads=ctx.threads,
    )
    return {"values": tables["grid"], "agreement": tables["agreement"], "rates": tables["rates"]}
