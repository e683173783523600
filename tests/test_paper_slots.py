"""Slots: registry entries that wait for another part of the project, named with what they wait for, and that join
the registry by themselves once the interface exists."""

import importlib.machinery
import sys
import types

from paper.derive import grid_summary
from paper.experiment import Context
from paper.registry import SLOTS, experiments, waiting_slots
from paper.runners.sim import sim_grid


def test_a_waiting_slot_says_what_it_waits_for():
    for name, why in waiting_slots().items():
        assert name in SLOTS and why.startswith("waiting for"), (name, why)
        assert name not in experiments()


def _fake_grid(rows: list[dict]) -> types.ModuleType:
    module = types.ModuleType("sim.grid")
    module.__spec__ = importlib.machinery.ModuleSpec("sim.grid", None)
    module.run_grid = lambda sizes, out, threads=1: [dict(r, seeds=sizes["seeds"]) for r in rows]
    return module


def test_the_grid_slot_runs_once_sim_grid_exists(monkeypatch, tmp_path):
    cell = {
        "objective": "autoregressive",
        "data": "irreversible",
        "param": "factored",
        "optimizer": "sgd",
        "positions": "none",
        "quantity": "symmetry",
        "predicted": -0.2,
        "measured": -0.1,
        "measured_ci": 0.02,
        "null_lo": -0.05,
        "null_hi": 0.05,
    }
    rows = [{**cell, "phase": p, "agree": a} for p in ("early", "final") for a in (True, True, False)]
    monkeypatch.setitem(sys.modules, "sim.grid", _fake_grid(rows))
    assert "sim_grid" in experiments() and "sim_grid" not in waiting_slots()
    config = experiments()["sim_grid"].config("smoke")
    tables = sim_grid(config, Context(tmp_path))
    assert len(tables["cells"]) == 6 and tables["cells"][0]["seeds"] == config["grid"]["seeds"]
    early, final = grid_summary(tables)["summary"]
    assert final["phase"] == "final"
    assert (early["phase"], early["n"]) == ("early", 3)
    assert abs(early["mean"] - 2 / 3) < 1e-12 and early["lo"] < 2 / 3 < early["hi"]  # Wilson interval
