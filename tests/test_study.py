"""The init study's statistics (never an idxmax speed-up) and a tiny end-to-end run."""

import csv
import json
import math

import numpy as np
import pytest
import torch

import wqk.vision.train
from wqk.common.intervals import log_ratio_interval, t_interval
from wqk.common.targets import baseline_target, steps_to_target, value_at
from wqk.vision.fidelity import FeatureNetRecipe, save_feature_net, train_feature_net
from wqk.vision.study import (
    StudyConfig,
    StudyTask,
    analyze_task,
    censored_median,
    compare_arm,
    run_study,
    study_tasks,
)


def test_steps_to_target_is_the_first_crossing_or_none():
    steps = np.array([0, 10, 20, 30])
    assert steps_to_target(steps, np.array([0.1, 0.5, 0.9, 0.8]), 0.85, higher_is_better=True) == 20
    assert steps_to_target(steps, np.array([2.0, 1.0, 0.4, 0.6]), 0.5, higher_is_better=False) == 20
    # never reached: None, where an idxmax would have answered step 0 or the best step
    assert steps_to_target(steps, np.array([0.1, 0.2, 0.3, 0.2]), 0.9, higher_is_better=True) is None
    assert steps_to_target(steps, np.array([0.9, 0.9, 0.9, 0.9]), 0.9, higher_is_better=True) == 0


def test_unreached_runs_are_excluded_from_the_ratio_and_counted():
    out = compare_arm([None, None, 50], [100, 80, 100], [0.5, 0.5, 0.9], [0.9, 0.9, 0.9])
    assert out["arm_reached"] == 1 and out["baseline_reached"] == 3 and out["pairs_reached"] == 1
    assert out["step_ratio"] == pytest.approx(0.5)  # only the pair where both reached
    none = compare_arm([None, None], [100, 80], [0.1, 0.1], [0.9, 0.9])
    assert none["pairs_reached"] == 0 and math.isnan(none["step_ratio"])
    assert none["final_diff"] == pytest.approx(-0.8)


def test_baseline_target_is_the_median_at_the_chosen_step():
    steps = np.array([0, 10, 20, 30])
    curves = [
        (steps, np.array([0.1, 0.2, 0.5, 0.9])),
        (steps, np.array([0.1, 0.3, 0.6, 0.9])),
        (steps, np.array([0.1, 0.4, 0.8, 0.9])),
    ]
    assert baseline_target(curves, 15) == pytest.approx(0.6)  # first logged step >= 15 is 20
    assert baseline_target(curves, 20) == pytest.approx(0.6)
    with pytest.raises(ValueError, match="no logged step"):
        baseline_target(curves, 31)


def test_step_ratio_is_the_log_ratio_t_interval_and_differences_the_paired_t():
    """The study's comparisons use wqk.common.intervals' rules (and name them), with the exact sign-flip p beside."""

    arm, base = [80, 90, None, 70, 120], [100, 100, 100, 100, 100]
    final_arm, final_base = [0.9, 0.8, 0.85, 0.95, 0.7], [0.8, 0.8, 0.8, 0.8, 0.8]
    out = compare_arm(arm, base, final_arm, final_base)
    ratio = log_ratio_interval([80, 90, 70, 120], [100, 100, 100, 100])
    diff = t_interval(np.subtract(final_arm, final_base))
    assert (out["step_ratio"], out["step_ratio_lo"], out["step_ratio_hi"]) == (ratio.estimate, ratio.lo, ratio.hi)
    assert (out["final_diff"], out["final_diff_lo"], out["final_diff_hi"]) == (diff.estimate, diff.lo, diff.hi)
    assert (out["step_ratio_rule"], out["final_diff_rule"]) == ("log-t", "t")
    assert 0 < out["step_ratio_p_exact"] <= 1 and 0 < out["final_diff_p_exact"] <= 1


def test_analysis_pairs_seeds_and_uses_the_baseline_target():
    task = StudyTask("t", "m", "o", "acc", True, 30)
    steps = np.array([0, 10, 20, 30])
    curves = {
        ("default", 0): (steps, np.array([0.1, 0.3, 0.6, 0.9])),
        ("default", 1): (steps, np.array([0.1, 0.5, 0.9, 0.9])),
        ("symmetric", 0): (steps, np.array([0.1, 0.9, 0.9, 0.9])),
        ("symmetric", 1): (steps, np.array([0.1, 0.2, 0.3, 0.4])),
    }
    cfg = StudyConfig(schemes=("default", "symmetric"), seeds=2)
    out = analyze_task(task, curves, cfg)
    assert out["target"] == pytest.approx(0.75)  # median of the baseline at step 0.5 x 30 -> logged step 20
    base, sym = out["arms"]
    assert base["steps"] == [30, 20] and sym["steps"] == [10, None]
    assert sym["reached"] == 1 and sym["pairs_reached"] == 1 and sym["step_ratio"] == pytest.approx(10 / 30)
    assert sym["final_diff"] == pytest.approx(((0.9 - 0.9) + (0.4 - 0.9)) / 2)
    # budgets: the first logged step at or after 25% (7.5 -> 10), 50% (15 -> 20) and 100% of the 30 steps
    assert base["at25_mean"] == pytest.approx(0.4) and base["at50_mean"] == pytest.approx(0.75)
    assert sym["at25_diff"] == pytest.approx(((0.9 - 0.3) + (0.2 - 0.5)) / 2)
    assert sym["at50_diff"] == pytest.approx(((0.9 - 0.6) + (0.3 - 0.9)) / 2)
    assert sym["steps_median_censored"] == float("inf") and base["steps_median_censored"] == 25
    runs = {(r["scheme"], r["seed"]): r for r in out["runs"]}
    assert runs[("symmetric", 1)]["steps_to_target"] is None and runs[("default", 0)]["at100"] == pytest.approx(0.9)


def test_value_at_budget_and_censored_median():
    steps, values = np.array([0, 20, 40]), np.array([3.0, 2.0, 1.0])
    assert value_at(steps, values, 10) == 2.0 and value_at(steps, values, 40) == 1.0
    with pytest.raises(ValueError, match="no logged step at or after 41"):
        value_at(steps, values, 41)
    assert censored_median([10, 20, None]) == 20 and censored_median([10, None, None]) == float("inf")
    assert censored_median([10, 30, None, None]) == float("inf")  # half never reached: the median is never


def test_named_tasks_scale_their_cadence_with_the_steps():
    (dit,) = study_tasks("dit-mnist", steps={"dit-mnist": 240})
    assert (dit.steps, dit.log_every, dit.fidelity_every) == (240, 10, 30)  # 8 sample evaluations, as at 480 steps
    (vit, dit) = study_tasks(["vit-mnist", "dit-mnist"], targets={"vit-mnist": 0.9})
    assert vit.target == 0.9 and dit.target is None and vit.data == dit.data == "mnist5k"
    with pytest.raises(ValueError, match=r"unknown study task\(s\) \['vit-cifar'\]"):
        study_tasks("vit-cifar")


def test_tiny_study_runs_end_to_end(tmp_path):
    before = torch.get_num_threads()
    tiny = {"dim": 16, "depth": 1, "heads": 2}
    tasks = (
        StudyTask("vit", "vit-tiny", "classification", "test_accuracy", True, 4, task_options=tiny),
        StudyTask(
            "dit",
            "dit-tiny",
            "denoising",
            "test_loss",
            False,
            4,
            task_options={"dim": 16, "depth": 1, "heads": 2, "samples_per_class": 1},
        ),
    )
    cfg = StudyConfig(
        tasks=tasks,
        schemes=("default", "symmetric"),
        seeds=2,
        log_every=2,
        null_samples=16,
        out=str(tmp_path),
        progress=False,
    )
    try:
        report = run_study(cfg)
    finally:
        torch.set_num_threads(before)
    saved = json.loads((tmp_path / "study.json").read_text())
    assert [t["task"] for t in saved["tasks"]] == ["vit", "dit"]
    for task in saved["tasks"]:
        assert [a["scheme"] for a in task["arms"]] == ["default", "symmetric"]
        assert all(len(a["steps"]) == 2 for a in task["arms"])
        assert "step_ratio" in task["arms"][1] and "step_ratio" not in task["arms"][0]
        # the paper's rule beside its null: a saving is a fraction of the budget, so a difference of two is in [-1, 1]
        paper_rule = task["arms"][1]
        assert "saving_vs_null" not in task["arms"][0]
        assert all(-1 <= paper_rule[q] <= 1 for q in ("saving_vs_null", "reverse_vs_null"))
        assert paper_rule["saving_vs_null_lo"] <= paper_rule["saving_vs_null"] <= paper_rule["saving_vs_null_hi"]
    assert (tmp_path / "vit_study.png").exists() and report["files"]
    runs = list(csv.DictReader((tmp_path / "study_runs.csv").open()))
    arms = list(csv.DictReader((tmp_path / "study_arms.csv").open()))
    curves = list(csv.DictReader((tmp_path / "study_curves.csv").open()))
    assert len(runs) == 2 * 2 * 2 and len(arms) == 2 * 2 and len(curves) == 2 * 2 * 2 * 3  # steps 0, 2, 4
    assert {"steps_to_target", "at25", "at50", "at100", "q_std_ratio"} <= set(runs[0])
    assert saved["git_commit"] and saved["config"]["seeds"] == 2

    # finished runs are reused: a second study trains nothing
    def no_training(self):
        raise AssertionError("a finished run was trained again")

    mp = pytest.MonkeyPatch()
    mp.setattr(wqk.vision.train.Trainer, "train_step", no_training)
    try:
        again = run_study(cfg)
    finally:
        mp.undo()
        torch.set_num_threads(before)
    same = json.dumps(again["tasks"][0]["arms"]) == json.dumps(report["tasks"][0]["arms"])  # NaN-aware
    assert same, "a reused study gave other arms"


def test_unknown_scheme_is_refused_before_any_training():
    with pytest.raises(ValueError, match=r"unknown init scheme\(s\) \['orthogonal'\]"):
        StudyConfig(schemes=("default", "orthogonal"))


def test_a_ratio_to_a_baseline_at_step_0_is_nan_not_an_error():
    out = compare_arm([10, 20], [0, 0], [0.5, 0.5], [0.5, 0.5])  # the baseline reached the target at step 0
    assert out["pairs_reached"] == 2 and math.isnan(out["step_ratio"]) and math.isnan(out["step_ratio_lo"])


def test_a_fidelity_task_reads_its_metric_only_where_samples_were_scored(tmp_path, digits):
    """A DiT task whose metric is sample_fid: the curves hold the sample-metric steps only (not the empty cells of
    the other logged steps), the budgets read the first of them at or after each fraction, and the tidy curves
    keep every logged step with empty sample cells where none were computed."""
    net = save_feature_net(
        *train_feature_net(FeatureNetRecipe(data="digits", widths=(4,), feature_dim=8, steps=20), digits),
        tmp_path / "net",
    )
    options = {
        "dim": 16,
        "depth": 1,
        "heads": 2,
        "samples_per_class": 1,
        "fidelity_samples": 12,
        "fidelity_net": str(net),
        "sampler": {"steps": 2},
    }
    task = StudyTask(
        "dit-fid",
        "dit-tiny",
        "denoising",
        "sample_fid",
        False,
        8,
        data="digits",
        log_every=2,
        fidelity_every=4,
        task_options=options,
    )
    cfg = StudyConfig(
        tasks=(task,),
        schemes=("default", "conditioned"),
        seeds=2,
        null_samples=16,
        out=str(tmp_path / "study"),
        progress=False,
    )
    before = torch.get_num_threads()
    try:
        report = run_study(cfg)
    finally:
        torch.set_num_threads(before)
    (analysis,) = report["tasks"]
    runs = {(r["scheme"], r["seed"]): r for r in analysis["runs"]}
    assert all(isinstance(r["at25"], float) and r["at25"] > 0 for r in runs.values())
    curves = list(csv.DictReader((tmp_path / "study" / "study_curves.csv").open()))
    steps = sorted({int(r["step"]) for r in curves})
    assert steps == [0, 2, 4, 6, 8]
    scored = sorted({int(r["step"]) for r in curves if r["sample_fid"]})
    assert scored == [4, 8], scored  # fidelity_every 4 (not at 0) and the last step
    assert analysis["fidelity"]["samples"] == 12 and analysis["arms"][1]["q_std_ratio"] > 1.2  # conditioned's scale
