"""The grid entry runs over ``wqk.sim.grid``'s interface (a stand-in module here)."""

import importlib.machinery
import sys
import types

from wqk.paper.derive import grid_summary
from wqk.paper.experiment import Context
from wqk.paper.registry import experiments
from wqk.paper.runners.sim import sim_grid


def _fake_grid(agreement: list[dict]) -> types.ModuleType:
    """A stand-in for science's ``wqk.sim.grid`` with its interface: ``all_cells()`` and ``run_grid(out, *, seeds,
    steps, cells, mc_sequences, progress, threads) -> {"grid", "agreement", "rates"}``."""
    module = types.ModuleType("wqk.sim.grid")
    module.__spec__ = importlib.machinery.ModuleSpec("wqk.sim.grid", None)
    module.all_cells = lambda: ["c0", "c1", "c2", "c3"]

    def run_grid(out, *, seeds, steps, cells, mc_sequences, progress, threads):
        rates = [
            {
                "rule": "z",
                "theory": "predicted",
                "simulated": phase,
                "score": "both",
                "comparisons": 3,
                "agree": sum(r["agree"] == 1 for r in agreement if r["simulated"] == phase),
            }
            for phase in ("early", "final")
        ]
        return {"grid": [{"cell": c, "seeds": seeds} for c in cells], "agreement": agreement, "rates": rates}

    module.run_grid = run_grid
    return module


def test_the_grid_entry_runs_over_sim_grid(monkeypatch, tmp_path):
    agreement = [
        {"cell": f"c{i}", "score": "s", "theory": "predicted", "simulated": phase, "agree": float(i < 2)}
        for phase in ("early", "final")
        for i in range(3)
    ]
    monkeypatch.setitem(sys.modules, "wqk.sim.grid", _fake_grid(agreement))
    assert "sim_grid" in experiments()
    config = experiments()["sim_grid"].config("smoke")
    tables = sim_grid(config, Context(tmp_path))
    assert [r["cell"] for r in tables["values"]] == ["c0", "c1", "c2"]  # smoke: the first max_cells cells
    summary = grid_summary(tables)["summary"]
    early, final = (r for r in summary if r["cells"] == "all")
    assert (early["phase"], final["phase"], early["n"]) == ("early", "final", 3)
    assert abs(early["mean"] - 2 / 3) < 1e-12 and early["lo"] < 2 / 3 < early["hi"]  # Wilson interval
    # no cell is tied here: the untied rows count every comparison, with a bootstrap over cells
    untied = [r for r in summary if r["cells"] == "untied" and r["score"] == "s" and r["rule"] == "z"]
    assert [(r["phase"], r["n"]) for r in untied] == [("early", 3), ("final", 3)]
    assert abs(untied[0]["mean"] - 2 / 3) < 1e-12 and untied[0]["lo"] <= 2 / 3 <= untied[0]["hi"]
    assert not [r for r in summary if r["cells"] == "tied"]
