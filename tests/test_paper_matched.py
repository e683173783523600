"""vision_matched (question (b) from matched starts): its units, its runner at a tiny size, its contrasts paired per
layer and seed on seeds from 100 within one experiment, layer 0's block share rule read through the contrast's own
selection, its figure and its report piece (or the line saying it has not run)."""

import pytest
from paper_fixture import MATCHED_FIRST_SEED, MATCHED_S, write_fixture

from wqk.paper.claims import evaluate, measured, verdict_rows
from wqk.paper.experiment import Context
from wqk.paper.markdown import value_text
from wqk.paper.matched_report import NOT_RUN, matched_piece
from wqk.paper.pipeline import derive
from wqk.paper.plots.vision import matched_contrasts
from wqk.paper.predictions import CONFIRMATORY, LAYER0_BLOCKS, MATCHED, SECTIONS, UNTESTABLE, WHOLE
from wqk.paper.registry import EXPERIMENTS, matched_units
from wqk.paper.results import Results

PREDICTIONS = [p for s in SECTIONS for p in s.predictions if p.experiment == MATCHED]
LAYERS = 4  # the fixture's


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("matched") / "results"
    write_fixture(root)
    derive(root)
    return Results(root)


def test_the_standard_config_is_four_arms_by_ten_fresh_seeds_one_unit_each_from_matched_starts():
    experiment = EXPERIMENTS[MATCHED]
    config = experiment.config("standard")
    units = experiment.split(config)
    arms = {a["arm"]: a for a in config["arms"]}
    assert set(arms) == set(MATCHED_S) and config["train"]["task_options"] == {"matched_init": True}
    assert config["train"]["steps"] == EXPERIMENTS["vision_mae"].config("standard")["train"]["steps"]
    assert sorted(units) == sorted(f"{a}-seed{s}" for a in arms for s in range(100, 110))
    assert all(len(u["arms"]) == 1 and len(u["seed_list"]) == 1 for u in units.values())
    assert arms["mae-no-mask"]["objective_params"] == {"mask_ratio": 0.0}
    assert "quick" not in experiment.configs and MATCHED in CONFIRMATORY
    two = matched_units({**config, "seeds": 2})
    assert sorted(two) == sorted(n for n in units if n.endswith(("100", "101")))


def test_the_runner_trains_each_arm_from_the_same_backbone_and_scores_layer_0s_blocks(tmp_path):
    """Two arms, one seed, two steps on digits: whole forms marked ``all``, the blocks at step 0 and the last step,
    and at step 0 the same blocks in both arms (their backbones are the same)."""
    config = EXPERIMENTS[MATCHED].config("smoke")
    arms = [a for a in config["arms"] if a["arm"] in ("mae", "causal")]
    train = {**config["train"], "steps": 2, "log_every": 1}
    tables = EXPERIMENTS[MATCHED].runner(
        {**config, "arms": arms, "train": train, "seed_list": [101]}, Context(tmp_path, device="cpu")
    )
    rows = tables["scores"]
    assert {r["task"] for r in rows} == {"mae", "causal"} and {r["seed"] for r in rows} == {101}
    blocks = [r for r in rows if r["block"] != WHOLE]
    assert {(r["step"], r["form"]) for r in blocks} == {(0, "W_qk"), (2, "W_qk"), (2, "update")}
    assert {r["block"] for r in blocks} == set(LAYER0_BLOCKS) and {r["layer"] for r in blocks} == {0}
    start = {
        t: [(r["block"], r["symmetry"]) for r in blocks if r["step"] == 0 and r["task"] == t] for t in ("mae", "causal")
    }
    assert start["mae"] == start["causal"]
    later = {t: [r["symmetry"] for r in blocks if r["step"] == 2 and r["task"] == t] for t in ("mae", "causal")}
    assert later["mae"] != later["causal"]  # training moved them apart
    assert all(0 < r["norm_share"] < 1 for r in blocks)


def test_the_contrasts_pair_arms_of_one_experiment_per_layer_and_seed_from_seed_100(results):
    mae_causal = next(p for p in PREDICTIONS if p.label == "matched starts, update s: mae - causal > 0")
    rows = measured(mae_causal, results)
    assert [r["layer"] for r in rows] == list(range(LAYERS)) and {r["contrast"] for r in rows} == {"mae - causal"}
    assert all(r["n"] == 3 for r in rows)  # the fixture's seeds 100-102, paired
    scores = [r for r in results.table(MATCHED, "scores") if r["block"] == WHOLE and r["form"] == "update"]
    last = max(r["step"] for r in scores)
    value = lambda task, seed: next(
        r["symmetry"] for r in scores if (r["task"], r["seed"], r["layer"], r["step"]) == (task, seed, 1, last)
    )
    seeds = range(MATCHED_FIRST_SEED, MATCHED_FIRST_SEED + 3)
    assert rows[1]["mean"] == pytest.approx(sum(value("mae", s) - value("causal", s) for s in seeds) / 3)


def test_the_registered_rows_decide_as_the_fixture_is_built(results):
    verdicts = [r for r in verdict_rows(results) if r.experiment == MATCHED]
    by_label = {}
    for r in verdicts:
        by_label.setdefault(r.label, []).append(r)
    assert len(by_label) == len(PREDICTIONS)
    words = lambda text: {r.verdict for label, rows in by_label.items() if label.startswith(text) for r in rows}
    assert words("matched starts, update s: mae - causal > 0") == {"supported"}
    masking = words("matched starts, update s: mae - mae-no-mask > 0")  # the fixture's MAE arms are alike
    assert masking and masking <= {"not detected", "inconclusive"}
    assert words("matched starts, update δ_PR: causal - mae < 0") == {"supported"}
    assert len(by_label["matched starts, update s: mae - causal > 0"]) == LAYERS
    position = [r for label, rows in by_label.items() if "position-position" in label for r in rows]
    assert position and all(r.role == UNTESTABLE and "position-position block holds" in r.note for r in position)
    content = [r for label, rows in by_label.items() if "content-content" in label for r in rows]
    assert content and all(r.role != UNTESTABLE for r in content)


def test_the_block_share_rule_reads_both_arms_of_a_contrast(results, tmp_path):
    """One arm's block under the floor makes the contrast untestable, whichever side of it that arm is on."""
    block = next(
        p for p in PREDICTIONS if p.label == "matched starts, layer 0 content-content block, update s: mae - causal > 0"
    )
    assert all(r["role"] != UNTESTABLE for r in evaluate(block, results, "qb"))
    root = tmp_path / "results"
    write_fixture(root)
    path = root / MATCHED / "scores.csv"
    lines = path.read_text().splitlines()
    header = lines[0].split(",")
    share, task, name = header.index("norm_share"), header.index("task"), header.index("block")
    for i, line in enumerate(lines[1:], 1):
        cells = line.split(",")
        if cells[task] == "causal" and cells[name] == "content-content":
            cells[share] = "0.001"
            lines[i] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n")
    derive(root)
    rows = evaluate(block, Results(root), "qb")
    assert rows and all(r["role"] == UNTESTABLE and "content-content block holds 0.001" in r["note"] for r in rows)


def test_the_figure_draws_every_registered_contrast(results):
    fig = matched_contrasts(results)
    try:
        labels = {t.get_text() for ax in fig.axes for t in ax.get_legend().get_texts()}
        assert {"mae - causal", "classify - causal", "mae-no-mask - causal", "mae - mae-no-mask"} <= labels
        assert "causal - mae" in labels
    finally:
        fig.clf()


def test_the_report_piece_shows_the_blocks_or_says_it_has_not_run(results, tmp_path):
    text = matched_piece(results)
    assert "figures/matched_contrasts.png" in text and "seeds 100-102" in text
    assert all(block in text for block in LAYER0_BLOCKS)
    share = results.rows(MATCHED, "blocks", quantity="norm_share", form="update", block="content-content")
    assert share and value_text(share[0]) in text
    assert matched_piece(Results(tmp_path / "empty")) == NOT_RUN
