"""The paper's spectrum-matched null rows: one per score of every final trained form (toy and vision), with the keys
of the form, its value and z, the norm ratios' bands, and ``null = iid`` on the i.i.d. rows."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from wqk.paper.runners.nulls import null_rows, ratio_row, spectrum_rows
from wqk.paper.runners.sim import final_spectrum_rows as sim_spectrum_rows
from wqk.paper.runners.vision import _per_layer
from wqk.paper.runners.vision import final_spectrum_rows as vision_spectrum_rows
from wqk.sim.analysis import bos_dominance
from wqk.sim.config import default_config
from wqk.sim.train import run
from wqk.theory.scores import SCORE_NAMES
from wqk.vision.runs import read_metrics
from wqk.vision.train import TrainConfig, train

pytestmark = pytest.mark.usefixtures("one_thread")


def test_iid_rows_say_so():
    assert {r["null"] for r in null_rows({"arm": "a"}, 8, 4, 8)} == {"iid"}


def test_spectrum_rows_carry_value_and_z():
    values = {"symmetry": 0.5, "directionality": math.nan, "directionality_pr": -0.1}
    rows = spectrum_rows({"arm": "a", "layer": 0}, np.r_[2.0, 1.0, 0.5], 8, values, 32)
    assert [r["score"] for r in rows] == list(values)
    for row in rows:
        assert row["null"] == "spectrum" and row["rank"] == 3 and row["q025"] <= row["mean"] <= row["q975"]
        expected = (row["value"] - row["mean"]) / row["sd"] if math.isfinite(row["value"]) else math.nan
        assert row["z"] == pytest.approx(expected, nan_ok=True)


def test_ratio_row_is_a_band_around_one_for_a_key_query_ratio():
    x = np.eye(8)[0]
    row = ratio_row({"task": "t"}, "cls_key_query", np.r_[2.0, 1.0, 0.5], 8, ("key", x), ("query", x), 1.3)
    assert row["score"] == "cls_key_query" and row["value"] == 1.3
    assert row["q025"] < 1 < row["q975"]  # key and query sides are exchangeable: the law of r is that of 1 / r


def test_sim_final_forms_get_spectrum_rows(tmp_path):
    cfg = default_config(
        "autoregressive", seeds=2, n=8, batch=4, model__d=24, data__vocab=8, data__lag=2, steps=4, null_samples=16
    )
    sim = run(cfg, tmp_path / "run", progress=False)
    dominance = bos_dominance(sim)
    rows = sim_spectrum_rows("ar", sim, dominance)
    final = {
        (r["seed"], r["layer"], r["block"]): r
        for r in sim.rows
        if r["step"] == cfg.steps and r["form"] == "W_qk" and r["head"] == "all"
    }
    scored = [r for r in rows if r["score"] in SCORE_NAMES]
    assert {(r["seed"], r["layer"], r["block"]) for r in scored} <= set(final)
    whole = [r for r in scored if r["block"] == "all"]
    assert len(whole) == cfg.seeds * cfg.model.layers * len(SCORE_NAMES)
    for row in scored:
        assert row["null"] == "spectrum" and row["step"] == cfg.steps and row["form"] == "W_qk"
        assert row["value"] == final[(row["seed"], row["layer"], row["block"])][row["score"]]
        assert row["rank"] <= row["d"]
    assert {r["block"] for r in scored} - {"all"}, "layer 0's diagonal blocks have rows of their own"
    typical = [r for r in rows if r["score"] == "bos_key_typical"]
    assert [r["value"] for r in typical] == pytest.approx(dominance)
    key_query = [r for r in rows if r["score"] == "bos_key_query"]
    assert len(key_query) == cfg.seeds * cfg.model.layers
    for row in key_query:
        form = final[(row["seed"], row["layer"], "all")]
        assert row["value"] == pytest.approx(form["bos_key_norm"] / form["bos_query_norm"])


@pytest.mark.parametrize(("objective", "token"), [("classify", "cls"), ("causal", "bos")])
def test_vision_final_forms_get_spectrum_rows(tmp_path, digits, objective, token):
    cfg = TrainConfig(
        model="vit-tiny",
        objective=objective,
        steps=4,
        batch_size=16,
        warmup=1,
        log_every=2,
        null_samples=16,
        eval_limit=32,
        progress=False,
        task_options={"dim": 16, "depth": 2, "heads": 2},
        out_dir=str(tmp_path / "run"),
    )
    train(replace(cfg), digits)
    metrics = _per_layer(read_metrics(Path(cfg.out_dir) / "metrics.csv"), {"task": "t"})
    rows = vision_spectrum_rows("t", Path(cfg.out_dir), digits, metrics)
    final = {(r["form"], r["layer"]): r for r in metrics if r["step"] == cfg.steps}
    scored = [r for r in rows if r["score"] in SCORE_NAMES]
    assert len(scored) == 2 * len(SCORE_NAMES)  # two layers of W_qk
    for row in scored:
        assert row["value"] == final[(row["form"], row["layer"])][row["score"]] and row["step"] == cfg.steps
        assert row["d"] == 16 and row["rank"] <= 16
    ratios = [r for r in rows if r["score"] == f"{token}_key_query"]
    assert len(ratios) == 2
    for row in ratios:
        form = final[("W_qk", row["layer"])]
        assert row["value"] == pytest.approx(form[f"{token}_key_norm"] / form[f"{token}_query_norm"])
