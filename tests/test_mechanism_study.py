"""The DiT mechanism study's pieces: contrasts between arms, further metrics at the budgets, the plateau rule's
last-quarter change, the large sample evaluation (its first samples are the regular ones), the update form of a DiT
whose closed gates leave W_qk still, and the registry's fresh seeds."""

import numpy as np
import pytest
import torch
from paper_fixture import _manifest, dit_study_tables

from wqk.common.intervals import log_ratio_interval, t_interval
from wqk.common.seeding import generator
from wqk.paper.derive import study_summary
from wqk.paper.mechanism_report import mechanism_table
from wqk.paper.registry import EXPERIMENTS
from wqk.paper.results import Results, write_experiment
from wqk.theory.scores import zero_forms
from wqk.vision.fidelity import FeatureNetRecipe, save_feature_net, train_feature_net
from wqk.vision.study import StudyConfig, StudyTask, analyze_task
from wqk.vision.tasks import build_task
from wqk.vision.tasks.denoise import LARGE_COLUMNS, LargeEvaluation
from wqk.vision.train import TrainConfig, train

SCHEMES = ("default", "symmetric", "symmetric-indefinite")
STEPS = np.array([0, 10, 20, 30, 40])


def _curves(rng: np.random.Generator, seeds: list[int]) -> dict:
    """Falling metric curves per arm and seed, the symmetric arm lower, the indefinite one higher."""
    shift = {"default": 0.0, "symmetric": -2.0, "symmetric-indefinite": 1.0}
    return {
        (scheme, seed): (STEPS, 20 - 0.3 * STEPS + shift[scheme] * STEPS / 40 + rng.normal(0, 0.2, len(STEPS)))
        for scheme in SCHEMES
        for seed in seeds
    }


def test_a_contrast_pairs_two_arms_by_seed_for_the_metric_and_each_further_metric():
    rng = np.random.default_rng(0)
    seeds = [100, 101, 102, 103]
    curves, kid = _curves(rng, seeds), _curves(rng, seeds)
    task = StudyTask("t", "m", "o", "fid", False, 40, also=("kid",))
    cfg = StudyConfig(schemes=SCHEMES, seeds=4, contrasts=[("symmetric", "symmetric-indefinite")])
    out = analyze_task(task, curves, cfg, also={"kid": kid})
    (contrast,) = out["contrasts"]
    assert contrast["scheme"] == "symmetric - symmetric-indefinite" and contrast["seeds"] == 4
    for name, runs in (("at100_diff", curves), ("kid_at100_diff", kid)):
        diffs = [runs[("symmetric", s)][1][-1] - runs[("symmetric-indefinite", s)][1][-1] for s in seeds]
        expected = t_interval(diffs)
        assert (contrast[name], contrast[f"{name}_lo"], contrast[f"{name}_hi"]) == pytest.approx(
            (expected.estimate, expected.lo, expected.hi)
        )
    by_arm = {a["scheme"]: a for a in out["arms"]}
    sym, indefinite = by_arm["symmetric"]["steps"], by_arm["symmetric-indefinite"]["steps"]
    pairs = [(a, b) for a, b in zip(sym, indefinite, strict=True) if a is not None and b is not None]
    if pairs:
        ratio = log_ratio_interval(*zip(*pairs, strict=True))
        assert contrast["step_ratio"] == pytest.approx(ratio.estimate)
    # each arm against the default carries the further metric too, and the metric's own columns are unchanged
    assert "kid_at100_diff" in by_arm["symmetric"] and "at100_diff" in by_arm["symmetric"]
    assert "kid_at100_diff" not in by_arm["default"]


def test_the_last_quarter_change_is_the_relative_change_from_three_quarters_of_the_budget():
    rng = np.random.default_rng(1)
    seeds = [0, 1, 2]
    curves = _curves(rng, seeds)
    task = StudyTask("t", "m", "o", "fid", False, 40, also=("fid_large",))
    out = analyze_task(task, curves, StudyConfig(schemes=SCHEMES, seeds=3), also={"fid_large": curves})
    default = next(a for a in out["arms"] if a["scheme"] == "default")
    change = [curves[("default", s)][1][4] / curves[("default", s)][1][3] - 1 for s in seeds]  # step 40 vs step 30
    assert default["fid_large_last_quarter"] == pytest.approx(float(np.mean(change)))
    assert default["fid_large_last_quarter"] < 0  # a falling FID


def test_contrasts_must_name_two_different_studied_arms():
    for bad in ([("symmetric", "symmetric")], [("symmetric", "mimetic")], [("symmetric",)]):
        with pytest.raises(ValueError, match="a contrast is two different studied schemes"):
            StudyConfig(schemes=SCHEMES, contrasts=bad)


@pytest.fixture(scope="module")
def fidelity_net(tmp_path_factory, digits):
    recipe = FeatureNetRecipe(data="digits", widths=(4,), feature_dim=8, steps=20)
    return save_feature_net(*train_feature_net(recipe, digits), tmp_path_factory.mktemp("net") / "net")


def _dit(digits, fidelity_net, **options):
    return build_task(
        "dit-tiny",
        "denoise",
        digits,
        dim=16,
        depth=1,
        heads=2,
        fidelity_net=str(fidelity_net),
        sampler={"steps": 2},
        **options,
    )


def test_the_large_evaluation_draws_the_regular_samples_first_and_adds_kid(digits, fidelity_net):
    task = _dit(digits, fidelity_net, fidelity_samples=12, fidelity_large=30, fidelity_large_every=4)
    assert set(LARGE_COLUMNS) <= set(task.metric_names)
    task.model.eval()
    with torch.no_grad():
        skipped = task.sample_metrics(generator(0, 7), step=3)
        due = task.sample_metrics(generator(0, 7), step=4)
    assert "sample_fid_large" not in skipped and np.isfinite(skipped["sample_kid"])
    # the same stream, the same first chunk: the regular metrics are those of the step that skips the large draw
    for name in ("sample_fid", "sample_precision", "sample_recall", "sample_kid"):
        assert due[name] == skipped[name], name
    assert np.isfinite(due["sample_fid_large"]) and np.isfinite(due["sample_kid_large"])
    assert due["sample_fid_large"] != due["sample_fid"]  # 30 samples, not the first 12
    plain = _dit(digits, fidelity_net, fidelity_samples=12)
    assert not set(LARGE_COLUMNS) & set(plain.metric_names)  # without the option the columns are today's


def test_large_evaluation_options_are_checked(digits, fidelity_net):
    with pytest.raises(ValueError, match="must be at least fidelity_samples"):
        _dit(digits, fidelity_net, fidelity_samples=12, fidelity_large=6, fidelity_large_every=4)
    with pytest.raises(ValueError, match="every must be an integer >= 1"):
        _dit(digits, fidelity_net, fidelity_samples=12, fidelity_large=30)
    assert LargeEvaluation(10, 5).due(10) and not LargeEvaluation(10, 5).due(0) and not LargeEvaluation(10, 5).due(7)


def test_zero_forms_marks_the_forms_the_scores_refuse():
    a = torch.randn(3, 8, 2, dtype=torch.float64)
    b = torch.randn(3, 8, 2, dtype=torch.float64)
    b[1] = 0
    assert zero_forms(a, b).tolist() == [False, True, False]


def test_a_dit_whose_gates_are_closed_logs_its_update_once_w_qk_has_moved(tmp_path, digits):
    """adaLN-Zero starts the output layer and the attention gates at 0: step 1 moves only the output layer, step 2
    the gates, and W_q, W_k first move at step 3 (without weight decay, as in the DiT recipes). The update form is 0
    before that (no scores, no error) and scored from then on."""
    cfg = TrainConfig(
        model="dit-tiny",
        objective="denoising",
        data="digits",
        steps=4,
        log_every=1,
        batch_size=8,
        weight_decay=0.0,
        warmup=0,
        ema_decay=0.0,  # the scored weights are the trained ones (an EMA's update is below rounding at step 2)
        null_samples=8,
        eval_limit=16,
        progress=False,
        out_dir=str(tmp_path / "run"),
        task_options={"dim": 16, "depth": 1, "heads": 2, "samples_per_class": 1},
    )
    rows = train(cfg, digits).rows
    update_steps = sorted({r["step"] for r in rows if r["form"] == "update"})
    assert update_steps == [3, 4]


def test_the_mechanism_studies_run_fresh_seeds_one_unit_each():
    for name in ("init_dit_mechanism", "init_dit_plateau"):
        experiment = EXPERIMENTS[name]
        config = experiment.config("standard")
        units = experiment.split(config)
        assert len(units) == len(config["schemes"]) * 10
        assert sorted({u["seed_list"][0] for u in units.values()}) == list(range(100, 110))
    contrasts = EXPERIMENTS["init_dit_mechanism"].config("standard")["contrasts"]
    assert ["symmetric", "symmetric-indefinite"] in contrasts and ["symmetric", "self-similar"] in contrasts


def test_each_study_table_lists_its_own_contrasts(tmp_path):
    """The plateau study registers no contrasts: its section must not borrow the mechanism study's."""
    for name in ("init_dit_mechanism", "init_dit_plateau"):
        tables = dit_study_tables(name, 3, np.random.default_rng(0))
        write_experiment(tmp_path / name, {**tables, **study_summary(tables)}, _manifest(name, 3))
    results = Results(tmp_path)
    mechanism, plateau = mechanism_table(results), mechanism_table(results, "init_dit_plateau")
    assert "| contrast |" in mechanism and "symmetric - symmetric-indefinite" in mechanism
    assert "| contrast |" not in plateau
    assert "| default |" in plateau
