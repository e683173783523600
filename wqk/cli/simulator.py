"""The simulator's commands: ``simulate``, ``compare-theory``, ``first-update``, ``experiment``, ``grid``.

``simulate``'s config options are generated from :data:`wqk.sim.config.OPTION_FIELDS`: each option's type is its
config field's, its default (per objective) is read from :data:`wqk.sim.config.DEFAULTS`, and only its words and
range are declared here.
"""

from __future__ import annotations

import inspect
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from wqk.cli.errors import fail
from wqk.cli.option_groups import OptionTable, cli_type, option_parameter, with_parameters
from wqk.cli.options import OUTPUT_DIR, SEED_THREADS, Format, Objective, in_open_unit_interval, key_values, positive
from wqk.cli.output import Output
from wqk.sim.config import COMPARE_DEFAULTS, OPTION_FIELDS, DataConfig, ModelConfig, SimConfig, default_text

if TYPE_CHECKING:
    from wqk.sim.report import SimSummaryRow

#: ``simulate``'s config options in help order: (what it sets, click settings: a range, a check, flag names).
SIM_OPTIONS: OptionTable = {
    "d": ("Model dimension", {"min": 2}),
    "n": ("Positions per sequence, BOS/CLS included", {"min": 2}),
    "heads": ("Attention heads per layer", {"min": 1}),
    "d_head": ("Head size; 0 = d / heads", {"min": 0}),
    "layers": ("Attention layers", {"min": 1}),
    "steps": ("Training steps", {"min": 1}),
    "seeds": ("Seeds trained together in one batched model", {"min": 1}),
    "first_seed": ("First seed value (seeds are first, first + 1, ...)", {"min": 0}),
    "batch": ("Sequences per seed per step", {"min": 1}),
    "lr": ("Learning rate", {"callback": positive}),
    "optimizer": ("adam or sgd", {}),
    "process": (
        "Data: lag, markov, iid (tokens); var_reversible, var_irreversible, separable, field (continuous)",
        {},
    ),
    "transition": (
        "Chain transition: involution (reversible), cycle (irreversible drift), copy, random_reversible, uniform",
        {},
    ),
    "strength": ("Probability of the chain's deterministic move", {"min": 0.0, "max": 1.0}),
    "lag": ("Distance k of the dependence x_i <- x_{i-k}", {"min": 1}),
    "vocab": ("Data tokens", {"min": 2}),
    "channels": ("Channels of continuous tokens", {"min": 1}),
    "bos": ("BOS token at position 0 (token objectives)", {"flags": ("--bos/--no-bos",)}),
    "mask_scheme": ("Masked positions get: bert (80/10/10), mask ([MASK] only), random, keep", {}),
    "mask_ratio": ("Fraction of positions masked", {"callback": in_open_unit_interval}),
    "target": ("Denoising target: eps, x0 or v", {}),
    "param": ("W_qk as factored W_q, W_k, direct M, or tied W_q = W_k", {}),
    "attention": ("softmax or linear", {}),
    "residual": ("Residual path around attention", {"flags": ("--residual/--no-residual",)}),
    "mlp": ("MLP block after attention", {"flags": ("--mlp/--no-mlp",)}),
    "init": ("gaussian, or symmetric (W_k = W_q at init, same scale)", {}),
    "init_scale": ("Std of W_q, W_k entries times sqrt(d)", {"callback": positive}),
    "embed": ("Token/channel embedding: onehot, orthogonal, gaussian", {}),
    "positions": ("Position embedding: onehot, orthogonal, gaussian, none", {}),
    "learn_embed": ("Train the embeddings", {"flags": ("--learn-embed/--fixed-embed",)}),
    "record_every": ("Record scores every this many steps", {"min": 1}),
}


def _field_type(option: str) -> type:
    """The command-line type of the config field an option sets (:func:`wqk.cli.option_groups.cli_type`)."""
    part, _, name = OPTION_FIELDS[option].rpartition("__")
    owner = {"": SimConfig, "model": ModelConfig, "data": DataConfig}[part]
    return cli_type(typing.get_type_hints(owner)[name])


def config_parameters() -> list[inspect.Parameter]:
    """``simulate``'s config options as keyword parameters: type from the config, default None (the objective's)."""
    return [
        option_parameter(option, _field_type(option) | None, None, f"{text} ({default_text(option)}).", settings)
        for option, (text, settings) in SIM_OPTIONS.items()
    ]


def register(app: typer.Typer) -> None:
    app.command()(with_parameters(simulate, config_parameters()))
    app.command("compare-theory")(compare_theory)
    app.command("first-update")(first_update)
    app.command()(experiment)
    app.command()(grid)


def simulate(
    *,
    objective: Objective = "denoising",
    out: Annotated[
        Path,
        typer.Option(
            **OUTPUT_DIR, help="Run directory (with 'all': one subdirectory per objective, shared table and figure)."
        ),
    ] = Path("runs/simulate"),
    resume: Annotated[bool, typer.Option(help="Continue from the run directory's checkpoint (exactly).")] = False,
    threads: Annotated[int, SEED_THREADS] = 1,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
    fmt: Format = "table",
    **options,
) -> None:
    """Train minimal attention models (all seeds batched) under an objective and score W_qk as it learns.

    Prints final symmetry s and directionality delta of the per-layer form: mean +- 95% CI over seeds and
    the seeds' null z-scores combined (Stouffer, sum / sqrt(n)), for the learned W_qk, its update M_t - M_0,
    and the self-pair / cross-pair parts of the accumulated gradient. Writes metrics.csv, summary.csv and
    scores.png under --out. Why the defaults are what they are: sim/config.py. Siblings: `experiment` (named
    multi-arm experiments), `compare-theory` (first steps vs the theory's expected update).
    """
    from wqk.sim.config import configs_from_options
    from wqk.sim.simulate import simulate as run_simulation

    show = Output(fmt)
    try:
        configs = configs_from_options(objective, options)
        result = run_simulation(configs, out, resume=resume, progress=progress, threads=threads)
    except (ValueError, TypeError) as err:
        fail(str(err))
    if fmt != "table":  # a pipe gets every summary row (layers, forms, blocks) with its full values
        from wqk.sim.report import SUMMARY_KEYS, SimSummaryRow

        show.table(result.summary, SimSummaryRow.columns(), keys=SUMMARY_KEYS)
    else:
        _print_summary(show, result.summary)
    for path in (*[p / "metrics.csv" for p in result.run_dirs.values()], result.summary_csv, result.figure):
        show.note(f"wrote {path}")


def _print_summary(show: Output, summary: list[SimSummaryRow]) -> None:
    """The final per-layer scores, each objective's loss, and layer 0's blocks, formatted for reading."""
    from wqk.cli.output import once_per
    from wqk.sim.report import (
        BLOCK_DISPLAY_COLUMNS,
        BLOCK_DISPLAY_KEYS,
        DISPLAY_COLUMNS,
        DISPLAY_KEYS,
        OBJECTIVE_COLUMNS,
        OBJECTIVE_KEYS,
        format_blocks,
        format_summary,
    )

    shown = format_summary(summary)
    show.table(
        shown,
        [c for c in DISPLAY_COLUMNS if c in DISPLAY_KEYS or any(row[c] for row in shown)],
        keys=DISPLAY_KEYS,
        title=f"step {summary[0]['step']}, {summary[0]['seeds']} seeds: per-layer scores, mean ± 95% CI "
        "(z = the seeds' null z combined, sum / sqrt(n)); W_qk learned, update = M_t - M_0, "
        "grad_* = self/cross pairs of sum dL/dM",
    )
    show.table(
        once_per(shown, OBJECTIVE_COLUMNS, OBJECTIVE_KEYS),
        OBJECTIVE_COLUMNS,
        keys=OBJECTIVE_KEYS,
        title="final loss per objective (mean over seeds)",
    )
    show.table(
        format_blocks(summary),
        BLOCK_DISPLAY_COLUMNS,
        keys=BLOCK_DISPLAY_KEYS,
        title="layer 0 in its input coordinates: blocks (share of ||M||^2; cross pairs: pair symmetry), entries the "
        "loss can evaluate, and the log-slopes along the sequence of the positions' key / query norms",
    )


#: Config overrides of the simulator's theory comparisons.
SimOverrides = Annotated[
    list[str],
    typer.Option(
        "--set",
        help="Config field key=value, repeatable, as `simulate` names them (d, n, heads, process, optimizer, lr, "
        "...) or SimConfig fields with model__X / data__X.",
    ),
]


def compare_theory(
    objective: Objective = "all",
    set_: SimOverrides = [],
    steps: Annotated[
        int, typer.Option(min=1, help="First steps measured (the gradients are taken within a step or two of init).")
    ] = COMPARE_DEFAULTS["steps"],
    batch: Annotated[
        int, typer.Option(min=1, help="Sequences per seed per step (large, so sampling noise is below the signal).")
    ] = COMPARE_DEFAULTS["batch"],
    seeds: Annotated[int, typer.Option(min=1, help="Seeds.")] = COMPARE_DEFAULTS["seeds"],
    mc_sequences: Annotated[
        int, typer.Option(min=1, help="Monte Carlo sequences per seed for the theory's expectation.")
    ] = COMPARE_DEFAULTS["mc_sequences"],
    out: Annotated[Path, typer.Option(**OUTPUT_DIR, help="Directory of compare_theory.csv.")] = Path(
        "runs/compare_theory"
    ),
    threads: Annotated[int, typer.Option(min=1, help="torch threads.")] = 1,
    progress: Annotated[bool, typer.Option(help="Say which objective runs.")] = True,
    fmt: Format = "table",
) -> None:
    """The first steps' dL/dM of the simulator vs the theory's expected update at init, per objective and part.

    Relative error of the measured update against E[dL/dM] (Monte Carlo, and exact Gaussian where it applies),
    next to the relative error sampling alone produces: near it, the first updates are what the theory predicts.
    One softmax layer without residual or MLP (the theory's head).
    """
    from wqk.sim.compare import COMPARE_KEYS, CompareRow
    from wqk.sim.compare import compare_theory as compare
    from wqk.sim.config import configs_from_options

    show = Output(fmt)
    try:
        configs = configs_from_options(
            objective, {**key_values(set_, "--set"), "steps": steps, "batch": batch, "seeds": seeds}
        )
        rows = compare(configs, out, mc_sequences=mc_sequences, progress=progress, threads=threads)
    except (ValueError, TypeError, NotImplementedError) as err:
        fail(str(err))
    show.table(
        rows,
        [c for c in CompareRow.columns() if c != "seeds"],
        keys=COMPARE_KEYS,
        title="layer-0 dL/dM over the first steps vs the theory's E[dL/dM] at M = 0: "
        "mean ± 95% CI over seeds; rel_noise = relative error from sampling alone",
    )
    show.note(f"wrote {out / 'compare_theory.csv'}")


FIRST_UPDATE_TITLE = "layer-0 first update: theory vs simulator (mean over seeds)"


def first_update(
    objective: Objective = "autoregressive",
    set_: SimOverrides = [],
    steps: Annotated[str, typer.Option(help="Training steps after which the update is measured, comma-separated.")] = (
        "1,3,10"
    ),
    batch: Annotated[
        int, typer.Option(min=1, help="Sequences per seed per step (larger: less noise in the measured step).")
    ] = 256,
    seeds: Annotated[int, typer.Option(min=1, help="Seeds.")] = 8,
    mc_sequences: Annotated[
        int, typer.Option(min=2, help="Monte Carlo sequences per seed for each expectation.")
    ] = 2048,
    out: Annotated[
        Path, typer.Option(**OUTPUT_DIR, help="Directory of first_update.csv and first_update_summary.csv.")
    ] = Path("runs/first_update"),
    threads: Annotated[int, typer.Option(min=1, help="torch threads.")] = 1,
    fmt: Format = "table",
) -> None:
    """The first update of layer 0 predicted three ways vs the simulator's first steps.

    averaged = -E[dL/dM] at M = 0 with the readout init averaged out (theory predict); gradient = -E[dL/dM] at the
    model's own init and drawn readout (keeps the target terms); update = that gradient through the
    parameterisation and optimiser trained (-lr (G W_k W_k^T + W_q W_q^T G) for separate factors, sign-like for
    Adam). Prints s and delta_PR predicted / measured, their cosine, and the cosine the batch noise allows.
    """
    from wqk.common.summary import signed
    from wqk.sim.config import configs_from_options
    from wqk.sim.first_update import FIRST_UPDATE_KEYS, compare_first_update

    parts = [x.strip() for x in steps.split(",") if x.strip()]
    if not parts or not all(x.isdigit() and int(x) >= 1 for x in parts):
        fail(f"--steps takes positive step numbers separated by commas, got {steps!r}")
    chosen = tuple(int(x) for x in parts)
    show = Output(fmt)
    try:
        options = {**key_values(set_, "--set"), "steps": max(chosen), "batch": batch, "seeds": seeds}
        configs = configs_from_options(objective, options)
        rows = compare_first_update(configs, out, chosen, mc_sequences, threads)
    except (ValueError, TypeError) as err:
        fail(str(err))
    if fmt != "table":
        show.table(rows, list(rows[0]), keys=FIRST_UPDATE_KEYS, title=FIRST_UPDATE_TITLE)
    else:
        shown = [
            {
                "name": r["name"],
                "prediction": r["prediction"],
                "step": r["step"],
                "s pred / meas": f"{signed(r['s_pred'])} / {signed(r['s_meas'])}",
                "δ_PR pred / meas": f"{signed(r['delta_pr_pred'])} / {signed(r['delta_pr_meas'])}",
                "cosine": f"{r['cosine']:.3f} ± {r['cosine_ci']:.3f}",
                "ceiling": f"{r['ceiling']:.3f}",
            }
            for r in rows
        ]
        show.table(shown, list(shown[0]), keys=FIRST_UPDATE_KEYS, title=FIRST_UPDATE_TITLE)
    show.note(f"wrote {out / 'first_update.csv'} and {out / 'first_update_summary.csv'}")


def experiment(
    names: Annotated[list[str] | None, typer.Argument(help="Experiment names (see --list), or 'all'.")] = None,
    list_: Annotated[bool, typer.Option("--list", help="List the experiments and what each tests.")] = False,
    out: Annotated[
        Path, typer.Option(**OUTPUT_DIR, help="Root of the experiments' run directories and tables.")
    ] = Path("runs/experiments"),
    seeds: Annotated[int | None, typer.Option(min=1, help="Seeds per arm (default: the arm's own, 8).")] = None,
    steps: Annotated[
        int | None, typer.Option(min=1, help="Training steps per arm (default: the arm's own, 300).")
    ] = None,
    threads: Annotated[int, SEED_THREADS] = 1,
    progress: Annotated[bool, typer.Option(help="Show a progress bar per arm.")] = True,
    fmt: Format = "table",
) -> None:
    """Run named simulator experiments (several arms of 8 seeds each) and print their per-layer scores.

    Writes OUT/NAME/summary.csv (long: one row per arm x step x layer x form x block x quantity, seed mean, 95% CI,
    combined null z), experiment.json and scores.png. Arms with the same configuration share one run, so
    experiments that reuse an arm do not train it twice, and an interrupted experiment resumes.
    """
    from wqk.sim.experiments import ARM_KEYS, EXPERIMENTS, SHOWN_COLUMNS, SHOWN_KEYS, format_experiment, run_experiment

    show = Output(fmt)
    if list_ or not names:
        listed = [{"experiment": k, "what": v.doc} for k, v in EXPERIMENTS.items()]
        show.table(listed, ["experiment", "what"], keys=["experiment"])
        return
    chosen = (
        list(EXPERIMENTS) if names == ["all"] else [n.strip() for name in names for n in name.split(",") if n.strip()]
    )
    unknown = [n for n in chosen if n not in EXPERIMENTS]
    if unknown:
        fail(f"unknown experiment {', '.join(map(repr, unknown))}; choose from {sorted(EXPERIMENTS)} or all")
    for name in chosen:
        try:
            rows = run_experiment(name, out, seeds=seeds, steps=steps, progress=progress, threads=threads)
        except (ValueError, TypeError) as err:
            fail(str(err))
        forms, arms = format_experiment(rows)
        show.table(
            forms,
            SHOWN_COLUMNS,
            keys=SHOWN_KEYS,
            title=f"experiment {name}: {EXPERIMENTS[name].doc} (layer 0, mean ± 95% CI over seeds; z combined)",
        )
        show.table(
            arms,
            list(dict.fromkeys(k for row in arms for k in row)),
            keys=ARM_KEYS,
            title="per arm and step: the loss, and at the end the trained model's attention on position 0 (and on "
            "the topic) and BOS's key norm over a typical token's",
        )
        show.note(f"wrote {out / name}")


def grid(
    objective: Annotated[str | None, typer.Option(help="Objectives, comma-separated (default: all five).")] = None,
    data: Annotated[
        str | None, typer.Option(help="exchangeable, reversible, irreversible, comma-separated (default: all).")
    ] = None,
    param: Annotated[str | None, typer.Option(help="direct, factored, tied, comma-separated (default: all).")] = None,
    optimizer: Annotated[str | None, typer.Option(help="sgd, adam, comma-separated (default: both).")] = None,
    positions: Annotated[str | None, typer.Option(help="onehot, none, comma-separated (default: both).")] = None,
    seeds: Annotated[int, typer.Option(min=2, help="Seeds per cell.")] = 8,
    steps: Annotated[int, typer.Option(min=4, help="Training steps per cell (the first 3 are all recorded).")] = 200,
    mc_sequences: Annotated[
        int, typer.Option(min=2, help="Monte Carlo sequences per seed for the prediction.")
    ] = 1024,  # wqk.sim.grid.DEFAULT_MC_SEQUENCES (not imported here: wqk.sim.grid imports torch)
    out: Annotated[
        Path, typer.Option(**OUTPUT_DIR, help="Directory of the grid's tables, figure and cell runs.")
    ] = Path("runs/grid"),
    threads: Annotated[int, SEED_THREADS] = 1,
    progress: Annotated[bool, typer.Option(help="Say which cell runs.")] = True,
    fmt: Format = "table",
) -> None:
    """Theory vs simulation cell by cell: objective x data x parameterisation x optimiser x positions (156 cells).

    Per cell: s and delta_PR of the theory's first update (at each seed's init and drawn readout, through the
    parameterisation and optimiser) vs the simulator's update after the first step (early) and the last (final);
    agreement = same sign and outside the null band (|combined z| > 2), or both inside. The full grid takes
    about 8 minutes on two cores at the defaults; pick a subset with the axis options. Writes grid.csv,
    agreement.csv, rates.csv, grid.json and grid.png under --out (cells already run are reused).
    """
    from wqk.cli.options import split
    from wqk.common.summary import signed, z_text
    from wqk.sim.grid import run_grid, select_cells

    show = Output(fmt)
    try:
        cells = select_cells(
            objective=split(objective),
            data=split(data),
            param=split(param),
            optimizer=split(optimizer),
            positions=split(positions),
        )
        if not cells:
            raise ValueError("no grid cell matches these options (classification has exchangeable data only)")
        result = run_grid(out, seeds=seeds, steps=steps, cells=cells, mc_sequences=mc_sequences, progress=progress)
    except (ValueError, TypeError) as err:
        fail(str(err))
    show.table(
        [r for r in result["rates"] if r["score"] == "both"],
        ["rule", "theory", "simulated", "comparisons", "agree", "rate", "undefined"],
        keys=["rule", "theory", "simulated"],
        title=f"grid: {len(cells)} cells, {seeds} seeds, {steps} steps; agreement (s and delta_PR) of the theory's "
        "first update (predicted: expected; predicted_batch: from one training batch; averaged: readout-averaged "
        "gradient at M = 0) with the simulated update; rule z: |combined z| > 2 is outside the null band, rule "
        "seeds: and the seeds' 95% interval excludes the null mean; per score in rates.csv",
    )
    bad = [r for r in result["agreement"] if r["theory"] == "predicted" and r["agree"] == 0.0]
    if bad:
        show.table(
            [
                {
                    "cell": r["cell"],
                    "score": r["score"],
                    "vs": r["simulated"],
                    "predicted (z)": f"{signed(r['theory_mean'])} ({z_text(r['theory_z'])})",
                    "simulated (z)": f"{signed(r['simulated_mean'])} ({z_text(r['simulated_z'])})",
                }
                for r in bad
            ],
            ["cell", "score", "vs", "predicted (z)", "simulated (z)"],
            keys=["cell", "score", "vs"],
            title="cells where the predicted first update disagrees",
        )
    show.note(f"wrote {out / 'grid.csv'}, agreement.csv, rates.csv, grid.png")
