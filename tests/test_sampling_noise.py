"""The sampling noise of a DiT's sample metrics: draws of one finished model, their summary and the report's table."""

import math
from dataclasses import replace

import numpy as np
import pytest
from paper_fixture import STEPS, write_fixture

from wqk.paper.derive import sampling_summary
from wqk.paper.pipeline import derive
from wqk.paper.results import Results
from wqk.paper.study_report import gate_text, sampling_noise_text
from wqk.paper.summary import sd_row
from wqk.vision.data import load_data
from wqk.vision.fidelity import FIDELITY_COLUMNS
from wqk.vision.runs import read_metrics
from wqk.vision.sampling_noise import sample_draws
from wqk.vision.train import TrainConfig, train


@pytest.fixture(scope="module")
def finished_dit(tmp_path_factory):
    """A DiT on digits trained for 2 steps with sample metrics of 20 samples (its config, data and logged rows)."""
    import torch

    torch.set_num_threads(1)
    options = {"fidelity_samples": 20, "sampler": {"method": "ddim", "steps": 2, "guidance": 2.0}}
    out = tmp_path_factory.mktemp("dit") / "run"
    cfg = TrainConfig(
        model="dit-tiny",
        objective="denoising",
        data="digits",
        steps=2,
        batch_size=8,
        log_every=2,
        null_samples=16,
        eval_limit=32,
        task_options=options,
        out_dir=str(out),
        progress=False,
    )
    data = load_data(cfg.data, cfg.test_fraction, cfg.split_seed)
    train(cfg, data)
    return cfg, data, read_metrics(out / "metrics.csv")


def test_draw_zero_reproduces_the_logged_final_metrics_and_later_draws_differ(finished_dit):
    cfg, data, logged = finished_dit
    rows = sample_draws(cfg, data, 3, {"task": "dit", "seed": cfg.seed})
    assert [r["draw"] for r in rows] == [0, 1, 2]
    assert all(r["step"] == cfg.steps and r["samples"] == 20 and r["task"] == "dit" for r in rows)
    final = next(r for r in logged if r["step"] == cfg.steps)
    for metric in FIDELITY_COLUMNS:
        assert rows[0][metric] == pytest.approx(final[metric], rel=1e-9, abs=1e-12)
    assert len({r["sample_fid"] for r in rows}) == 3  # independent noise: three different values


def test_draws_refuse_what_gives_no_spread_or_no_metrics(finished_dit, tmp_path):
    cfg, data, _ = finished_dit
    with pytest.raises(ValueError, match="draws >= 2"):
        sample_draws(cfg, data, 1, {})
    with pytest.raises(ValueError, match="stopped at step 2 of 5"):
        sample_draws(replace(cfg, steps=5), data, 2, {})
    with pytest.raises(ValueError, match="no checkpoint"):
        sample_draws(replace(cfg, out_dir=str(tmp_path)), data, 2, {})
    with pytest.raises(ValueError, match="no sample metrics"):
        sample_draws(replace(cfg, task_options={}), data, 2, {})


def test_sd_row_gives_the_sample_sd_inside_its_chi_square_interval():
    row = sd_row({"seed": 0}, "x_sd", [1.0, 2.0, 3.0, 4.0, 5.0])
    assert row["mean"] == pytest.approx(math.sqrt(2.5)) and row["n"] == 5 and row["seed"] == 0
    # chi-square 95% quantiles with 4 degrees of freedom (printed tables): 0.4844 and 11.1433
    assert row["lo"] == pytest.approx(math.sqrt(2.5 * 4 / 11.1433), rel=1e-4)
    assert row["hi"] == pytest.approx(math.sqrt(2.5 * 4 / 0.4844), rel=1e-3)
    assert math.isnan(sd_row({}, "x_sd", [1.0, float("nan")])["mean"])


def test_sampling_summary_gives_each_metric_its_mean_and_its_spread_over_draws():
    rng = np.random.default_rng(0)
    draws = [
        {"task": "dit", "init": "default", "seed": s, "step": 10, "draw": d, "samples": 50}
        | {m: 10.0 * s + rng.standard_normal() for m in FIDELITY_COLUMNS}
        for s in (0, 1)
        for d in range(6)
    ]
    rows = sampling_summary({"draws": draws})["summary"]
    assert {r["quantity"] for r in rows} == {*FIDELITY_COLUMNS, *(f"{m}_sd" for m in FIDELITY_COLUMNS)}
    for seed in (0, 1):
        values = [r["sample_fid"] for r in draws if r["seed"] == seed]
        (mean,) = [r for r in rows if r["seed"] == seed and r["quantity"] == "sample_fid"]
        (sd,) = [r for r in rows if r["seed"] == seed and r["quantity"] == "sample_fid_sd"]
        assert mean["mean"] == pytest.approx(np.mean(values)) and mean["n"] == 6
        assert sd["mean"] == pytest.approx(np.std(values, ddof=1)) and sd["lo"] < sd["mean"] < sd["hi"]


def test_the_report_sets_the_draws_spread_against_the_seeds(tmp_path):
    """The fixture's seeds spread FID by 5 and its draws by about 0.5; its class accuracy does not vary by seed."""
    root = write_fixture(tmp_path / "results")
    derive(root)
    text = sampling_noise_text(Results(root))
    lines = {line.split(" | ")[0].strip("| "): line for line in text.splitlines() if line.startswith("| sample_")}
    assert set(lines) == {"sample_fid", "sample_accuracy"}
    assert "the seeds' spread dominates" in lines["sample_fid"]
    assert "not clearly above the sampling noise" in lines["sample_accuracy"]
    assert "5.000 [2.603, 31.424]" in lines["sample_fid"]  # the seeds' SD of 250, 255, 260 with its interval
    assert "drawn 8 times" in text
    empty = tmp_path / "empty"
    empty.mkdir()
    assert sampling_noise_text(Results(empty)) == ""


def test_the_report_reads_the_dit_attention_gates_per_arm_at_fractions_of_the_budget(tmp_path):
    root = write_fixture(tmp_path / "results")
    derive(root)
    text = gate_text(Results(root))
    rows = {line.split(" | ")[0].strip("| "): line for line in text.splitlines() if line.startswith("| ")}
    assert f"step {STEPS[0]} | " in rows["arm"] and rows["arm"].endswith(f"step {STEPS[-1]} |")
    # the last step, 50: layers 0.5 and 1.0 (+ 0.01 x seed) average to 0.75 + 0.01 x seed; over seeds 0-2 the
    # mean is 0.76 and the t half-width 4.303 x 0.01 / sqrt(3)
    assert rows["default"].startswith("| default | 0.000 ± 0.000 |")
    assert rows["default"].endswith("| 0.760 ± 0.025 |")
    assert rows["symmetric"].endswith("| 1.520 ± 0.050 |")
    assert "over 3 seeds" in text
