"""Experiments, the first-update comparison and the grid: they run at small sizes and write tidy, complete tables.

These test the outputs, not the findings (the findings are in the closing notes, measured at full size).
"""

from __future__ import annotations

import csv
import json
import math

import pytest
from typer.testing import CliRunner

from wqk.cli import app
from wqk.sim.analysis import attention_to
from wqk.sim.config import default_config
from wqk.sim.experiments import COLUMNS, EXPERIMENTS, run_experiment
from wqk.sim.first_update import batch_updates, cosine, predictions
from wqk.sim.grid import (
    AXES,
    agreement_rates,
    agreement_rows,
    all_cells,
    classify,
    classify_over_seeds,
    run_grid,
    select_cells,
)
from wqk.sim.train import Simulation


def read(path) -> list[dict]:
    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("name", sorted(EXPERIMENTS))
def test_every_arm_builds(name: str) -> None:
    for arm, cfg in EXPERIMENTS[name].arms().items():
        cfg.validate()
        assert cfg.seeds == 8, arm
        Simulation(cfg.with_overrides(seeds=1))  # model and task build (one-hot room, processes, masks)


def test_an_experiment_writes_long_tidy_rows_resumes_and_prints(tmp_path) -> None:
    rows = run_experiment("claim8", tmp_path, seeds=2, steps=3, progress=False)
    table = read(tmp_path / "claim8" / "summary.csv")
    assert list(table[0]) == COLUMNS and len(table) == len(rows)
    arms = set(EXPERIMENTS["claim8"].arms())
    assert {r["arm"] for r in table} == arms
    quantities = {r["quantity"] for r in table}
    assert {"s", "delta", "delta_pr", "norm_share", "pos_key_slope", "attention_pos0", "bos_key/typical"} <= quantities
    assert {r["block"] for r in table} >= {"all", "token-token", "position-position", "evaluated"}
    for r in rows:
        assert math.isfinite(r["mean"]) and r["seeds"] <= 2
        if r["quantity"] in ("s", "delta", "delta_pr") and r["block"] in ("all", "evaluated"):
            assert math.isfinite(r["z"])
    meta = json.loads((tmp_path / "claim8" / "experiment.json").read_text())
    assert set(meta["arms"]) == arms and "git_commit" in meta
    runs = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert (tmp_path / "claim8" / "scores.png").stat().st_size > 10_000
    runner = CliRunner()  # the same runs, reused through the command line
    ok = runner.invoke(
        app, ["experiment", "claim8", "--out", str(tmp_path), "--seeds", "2", "--steps", "3", "--no-progress"]
    )
    assert ok.exit_code == 0, ok.output
    assert "claim8" in ok.output and sorted(p.name for p in (tmp_path / "runs").iterdir()) == runs
    assert read(tmp_path / "claim8" / "summary.csv") == table
    bad = runner.invoke(app, ["experiment", "claim8", "--out", str(tmp_path), "--steps", "0"])
    assert bad.exit_code == 2 and "--steps" in bad.output


def test_attention_mass_of_uniform_attention() -> None:
    """With W_q = 0 every causal query i attends uniformly over j <= i: the weight on position 0 is 1 / (i + 1)."""
    import torch

    cfg = default_config("autoregressive", seeds=2, n=10, batch=4, model__d=24, data__vocab=8, data__lag=2)
    sim = Simulation(cfg.with_overrides(data__process="topic", data__topics=2))
    with torch.no_grad():
        sim.model.w_q.zero_()
    expected = sum(1 / (i + 1) for i in range(1, cfg.n)) / (cfg.n - 1)
    for value in attention_to(sim, 0):
        assert value == pytest.approx(expected, rel=1e-6)
    topic = attention_to(sim, 1)  # queries 2.. see position 1 with weight 1 / (i + 1)
    assert topic[0] == pytest.approx(sum(1 / (i + 1) for i in range(2, cfg.n)) / (cfg.n - 2), rel=1e-6)


def test_first_update_cli_writes_predictions_and_measurements(tmp_path) -> None:
    args = ["first-update", "--objective", "autoregressive", "--out", str(tmp_path), "--steps", "1,2"]
    args += ["--seeds", "2", "--batch", "8", "--mc-sequences", "32", "--set", "n=10", "--set", "model__d=24"]
    args += ["--set", "data__vocab=8", "--set", "data__lag=2", "--set", "optimizer=sgd", "--set", "lr=0.5"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = read(tmp_path / "first_update_summary.csv")
    assert {(r["prediction"], r["step"]) for r in summary} == {
        (p, s) for p in ("averaged", "gradient", "update") for s in ("1", "2")
    }
    for r in summary:
        assert -1 <= float(r["cosine"]) <= 1 and 0 <= float(r["ceiling"]) <= 1
    bad = CliRunner().invoke(app, ["first-update", "--set", "model__residual=true", "--out", str(tmp_path)])
    assert bad.exit_code == 2 and "one softmax attention layer" in bad.output


def test_grid_cells_and_selection() -> None:
    cells = all_cells()
    assert len(cells) == 156 and len({c.name for c in cells}) == 156
    assert {c.data for c in cells if c.objective == "classification"} == {"exchangeable"}
    some = select_cells(objective=["mae"], optimizer=["adam"], positions=["none"])
    assert len(some) == 9 and all(c.objective == "mae" for c in some)
    for cell in cells[::13]:
        cell.config().validate()
    with pytest.raises(ValueError, match="unknown param"):
        select_cells(param=["lowrank"])
    assert set(AXES) == {"objective", "data", "param", "optimizer", "positions"}


def test_agreement_rule() -> None:
    """Same sign outside the null band, or both inside, agree; anything else does not."""
    assert classify(0.3, 5.0) == 1 and classify(-0.3, -2.5) == -1 and classify(0.3, 1.9) == 0
    assert math.isnan(classify(math.nan, 3.0))
    assert classify_over_seeds(0.3, 0.1, 5.0, 0.0) == 1 and classify_over_seeds(0.3, 0.5, 5.0, 0.0) == 0  # spread
    assert math.isnan(classify_over_seeds(math.nan, 0.1, math.nan, 0.0))

    def row(cell, phase, mean, z):
        cls = classify(mean, z)
        return {"cell": cell, "phase": phase, "score": "s", "mean": mean, "z": z, "class": cls, "class_seeds": cls}

    base = {"objective": "x", "data": "x", "param": "x", "optimizer": "x", "positions": "x"}
    rows = [
        row("a", "predicted", 0.2, 3.0) | base,
        row("a", "early", 0.1, 4.0) | base,  # agree: both positive outside
        row("a", "final", 0.1, 1.0) | base,  # disagree: outside vs inside
        row("a", "averaged", -0.1, -1.0) | base,
    ]
    agreement = {(r["theory"], r["simulated"]): r["agree"] for r in agreement_rows(rows)}
    assert agreement[("predicted", "early")] == 1.0 and agreement[("predicted", "final")] == 0.0
    assert agreement[("averaged", "early")] == 0.0 and agreement[("averaged", "final")] == 1.0
    rates = {
        (r["theory"], r["simulated"], r["score"]): r["rate"]
        for r in agreement_rates(agreement_rows(rows))
        if r["rule"] == "z"
    }
    assert rates[("predicted", "early", "s")] == 1.0 and rates[("predicted", "final", "both")] == 0.0


def test_grid_runs_a_subset_and_writes_its_tables(tmp_path) -> None:
    cells = select_cells(objective=["autoregressive", "classification"], data=["exchangeable"], param=["factored"])
    cells = [c for c in cells if c.optimizer == "adam" and c.positions == "onehot"]
    result = run_grid(tmp_path, seeds=2, steps=4, cells=cells, mc_sequences=32, progress=False)
    grid = read(tmp_path / "grid.csv")
    phases = {"predicted", "predicted_batch", "averaged", "early", "early_3", "final", "final_W_qk"}
    assert {r["phase"] for r in grid} == phases
    assert len(grid) == len(cells) * len(phases) * 2
    assert len(read(tmp_path / "agreement.csv")) == len(cells) * 2 * 6
    assert {r["score"] for r in result["rates"]} == {"s", "delta_pr", "both"}
    assert (tmp_path / "grid.png").stat().st_size > 10_000
    meta = json.loads((tmp_path / "grid.json").read_text())
    assert meta["cells"] == [c.name for c in cells] and meta["seeds"] == 2


def test_sgd_batch_updates_average_to_the_expected_update() -> None:
    """For SGD the first update is linear in the gradient, so batch updates average to the expected update."""
    import torch

    cfg = default_config("denoising", seeds=2, n=6, batch=8, optimizer="sgd", lr=0.5, model__d=16)
    cfg = cfg.with_overrides(model__heads=1, model__d_head=4, data__channels=8, data__lag=2)
    sim = Simulation(cfg)
    expected = predictions(sim, mc_sequences=4096)["update"]  # (S, d, d)
    batches = batch_updates(sim, draws=256)  # (S, 256, d, d): one batch of 8 each
    assert batches.shape == (2, 256, 16, 16)
    agreement = cosine(batches.mean(1), expected)
    single = cosine(batches[:, 0], expected)
    assert bool((agreement > 0.9).all()) and bool((agreement > single).all()), (agreement, single)
    assert torch.isfinite(batches).all()
