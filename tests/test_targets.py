"""The target rules an init is compared by (wqk.common.targets), and the init studies' summary of the paper's rule."""

import math

import pytest

from wqk.common.targets import RULES, paper_rule_differences, rule_rows, run_curves
from wqk.paper.derive import study_summary

STEPS = [0, 10, 20, 30]


def test_the_rules_read_higher_is_better_metrics_the_right_way_up():
    runs = {("default", 0): (STEPS, [0.1, 0.5, 0.8, 0.9]), ("fast", 0): (STEPS, [0.1, 0.85, 0.9, 0.95])}
    rows = {(r["arm"], r["rule"]): r for r in rule_rows(runs, "default", higher_is_better=True)}
    assert {rule for _, rule in rows} == set(RULES)
    assert rows[("fast", "paper")]["steps"] == 20 and rows[("fast", "paper")]["saving"] == pytest.approx(1 / 3)
    assert rows[("fast", "null")]["steps"] == 30  # the default reaches its own final value at the end
    assert rows[("fast", "reverse")]["steps"] is None  # the default never reaches 0.95
    assert rows[("fast", "ours")]["target"] == 0.8 and rows[("fast", "ours")]["steps"] == 10
    # read as a loss, the same curves swap roles: every run is at or below 0.9 from the start
    low = {(r["arm"], r["rule"]): r for r in rule_rows(runs, "default", higher_is_better=False)}
    assert low[("fast", "paper")]["steps"] == 0


def test_a_seed_without_a_baseline_run_is_skipped_and_no_baseline_is_an_error():
    runs = {("default", 0): (STEPS, [4, 3, 2, 1]), ("fast", 0): (STEPS, [4, 2, 1, 1]), ("fast", 1): (STEPS, [1] * 4)}
    assert {r["seed"] for r in rule_rows(runs, "default")} == {0}
    with pytest.raises(ValueError, match="baseline"):
        rule_rows({("fast", 0): (STEPS, [1] * 4)}, "default")


def test_logged_rows_become_curves_in_step_order_per_comparison_without_unlogged_steps():
    logged = [
        {"task": "b", "scheme": "default", "seed": 0, "step": 10, "fid": 3.0},
        {"task": "a", "scheme": "default", "seed": 1, "step": 10, "fid": ""},  # read back from a CSV: not logged
        {"task": "a", "scheme": "default", "seed": 1, "step": 20, "fid": 2.0},
        {"task": "a", "scheme": "default", "seed": 1, "step": 0, "fid": 9.0},
        {"task": "a", "scheme": "sym", "seed": 1, "step": 0, "fid": math.nan},
        {"task": "a", "scheme": "sym", "seed": 1, "step": 5},
    ]
    runs = run_curves(logged, "task", "scheme", "fid")
    assert runs == {"a": {("default", 1): ([0, 20], [9.0, 2.0])}, "b": {("default", 0): ([10], [3.0])}}


def test_the_papers_rule_is_paired_with_its_null_and_a_never_reaching_arm_saves_nothing():
    runs = {
        ("default", 0): (STEPS, [4, 2, 1.5, 1]),  # reaches its own final value at the last step: null saving 0
        ("fast", 0): (STEPS, [4, 1, 1, 0.5]),  # reaches 1 at step 10, and the default never reaches 0.5
        ("default", 1): (STEPS, [4, 1, 1, 1]),  # flat from step 10: null saving 2/3
        ("fast", 1): (STEPS, [4, 3, 2, 2]),  # never reaches 1
        ("default", 2): (STEPS, [4, 2, 1.5, 1]),  # null saving 0, as seed 0
        ("fast", 2): (STEPS, [4, 3, 2.5, 2]),  # slower: never reaches 1, and the default reaches its 2 at step 10
    }
    differences = paper_rule_differences(rule_rows(runs, "default"), "fast", "default")
    assert differences["saving_vs_null"] == pytest.approx({0: 2 / 3, 1: -2 / 3, 2: 0.0})
    # the reverse of seed 0 is "not reached" (the default never gets to 0.5): no saving, not a speed-up; seed 1's
    # reverse target 2 is reached at step 10 where the null's is too; seed 2's at step 10 against a null at step 30
    assert differences["reverse_vs_null"] == pytest.approx({0: 0.0 - 0.0, 1: 2 / 3 - 2 / 3, 2: 2 / 3 - 0.0})


def _arm(scheme):
    return {"task": "dit", "scheme": scheme, "reached": 2, "seeds": 2, "steps_median": 20.0}


def test_an_init_study_states_the_paper_rule_beside_its_null_paired_by_seed():
    """A faster arm saves a third of the budget by the paper's rule where the default's own curve saves nothing;
    an arm that is the default's twin saves exactly the null; a slower arm saves nothing, and the default reaches the
    slower arm's final value a third of the budget early (its reverse); steps where the metric was not sampled are
    skipped."""
    fid = {
        "default": [300, 100, 40, 30],
        "fast": [300, 40, 30, 25],
        "twin": [300, 100, 40, 30],
        "slow": [300, 150, 80, 60],
    }
    curves = [
        {"task": "dit", "scheme": scheme, "seed": seed, "step": step, "sample_fid": value, "test_loss": 1.0}
        for scheme, values in fid.items()
        for seed in (0, 1)
        for step, value in zip(STEPS, values, strict=True)
    ]
    curves += [{**c, "step": c["step"] + 5, "sample_fid": math.nan} for c in curves]  # loss-only steps
    tables = {
        "arms": [_arm(s) for s in fid],
        "curves": curves,
        "study": {"metric": "sample_fid", "higher_is_better": False, "steps": 30},
    }
    summary = {(r["scheme"], r["quantity"]): r for r in study_summary(tables)["summary"]}
    assert summary[("fast", "saving_vs_null")]["mean"] == pytest.approx(1 / 3)
    assert summary[("fast", "saving_vs_null")]["n"] == 2
    assert summary[("fast", "reverse_vs_null")]["mean"] == 0  # the default never reaches 25
    assert summary[("twin", "saving_vs_null")]["mean"] == 0 and summary[("twin", "reverse_vs_null")]["mean"] == 0
    assert summary[("slow", "saving_vs_null")]["mean"] == 0  # never reaches 30
    assert summary[("slow", "reverse_vs_null")]["mean"] == pytest.approx(1 / 3)  # the default is at 40 <= 60 at 20
    assert ("default", "saving_vs_null") not in summary
