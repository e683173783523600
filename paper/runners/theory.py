"""Runners over the theory layer (:mod:`wqk.theory`): the claim checks, exact first-update predictions, nulls vs
``d``."""

from __future__ import annotations

from wqk.paper.experiment import Context, Tables


def null_reference(score: str, d: int) -> tuple[float | None, float | None]:
    """docs/theory.md section 2's approximate mean and sd of a full-rank null (None where it states none):
    s has mean about 1/d and sd about 1.4/d; delta has mean 0 and sd about 0.6 at d = 64, falling like 1/sqrt(d)."""
    if score == "symmetry":
        return 1 / d, 1.4 / d
    if score == "directionality":
        return 0.0, 0.6 * (64 / d) ** 0.5
    return None, None


def theory_check(config: dict, ctx: Context) -> Tables:
    """Every row of ``theory check`` (claims 1-6) for each seed."""
    from wqk.theory.check import run_checks

    rows = []
    for seed in config["seeds"]:
        ctx.note(f"seed {seed}")
        rows += [{"seed": seed, **r.row()} for r in run_checks(seed, tuple(config["claims"]))]
    return {"checks": rows}


def predictions(config: dict, ctx: Context) -> Tables:
    """Exact expected first update at ``M = 0`` per objective and data setting: scores per part, attribution."""
    from wqk.theory.attribution import predict_first_update

    scores, attribution = [], []
    for data in config["data"]:
        ctx.note(f"data {data}")
        rows, attr = predict_first_update(data, config["n"], config["d"], config["head"], config["seed"])
        # "setting" names the data setting; a row's own "data" says forward or time-reversed sequences
        scores += [{"setting": data, **{k.replace("/", "_"): v for k, v in r.items()}} for r in rows]
        attribution += [{"setting": data, **r} for r in attr]
    return {"predictions": scores, "attribution": attribution}


def nulls_vs_d(config: dict, ctx: Context) -> Tables:
    """The null distributions of the scores for full-rank and head-rank Gaussian factors, over ``d``."""
    from wqk.paper.runners.nulls import null_rows

    rows = []
    for d in config["d"]:
        ctx.note(f"d = {d}")
        rows += null_rows({"kind": "full rank"}, d, d, config["samples"], config["k"])
        if config["head_rank"] < d:
            rows += null_rows(
                {"kind": f"rank {config['head_rank']}"}, d, config["head_rank"], config["samples"], config["k"]
            )
    for row in rows:
        mean, sd = null_reference(row["score"], row["d"]) if row["kind"] == "full rank" else (None, None)
        row.update(reference_mean=mean, reference_sd=sd)
    return {"nulls": rows}
