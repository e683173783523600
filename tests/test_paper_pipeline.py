"""The pipeline on a tiny synthetic fixture of result tables (seconds, no training), and one real smoke run (slow)."""

import json
import shutil

import pytest
from checkpoint_builders import SMALL
from paper_fixture import write_fixture

from wqk.cli import app
from wqk.paper.figures import FIGURES, OPTIONAL_FIGURES
from wqk.paper.pipeline import DERIVED_KEY, derive, render, run_pipeline
from wqk.paper.registry import EXPERIMENTS, checkpoint_experiment, experiments
from wqk.paper.results import Results, read_csv, write_tables
from wqk.paper.runners.sim import arm_configs
from wqk.paper.runners.vision import study_task
from wqk.paper.seeds import config_seeds
from wqk.vision.init import is_scheme
from wqk.vision.train import TrainConfig


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    out = tmp_path_factory.mktemp("paper")
    write_fixture(out / "results")
    derive(out / "results")
    written, skipped, report = render(out)
    return out, written, skipped, report


def test_every_figure_and_the_report_are_written(rendered):
    _, written, skipped, report = rendered
    assert set(skipped) == {"checkpoints"}  # no --checkpoints in the fixture
    names = {p.stem for p in written}
    assert names == set(FIGURES) - {"checkpoints"}  # every figure, the grid slot's included
    assert all(p.stat().st_size > 0 for p in written)
    text = report.read_text()
    assert "{{" not in text and "(not measured" not in text, [
        l for l in text.splitlines() if "{{" in l or "(not measured" in l
    ]


def test_verdicts_follow_the_fixture_effects(rendered):
    """The fixture puts bidirectional s at 0.9, autoregressive s at -0.3 and its δ_PR at -0.4, MAE's update s at
    0.3, and leaves every update of the optimiser/basis arms and the causal ViT's at the null's mean."""
    out = rendered[0]
    rows = read_csv(out / "results" / "verdicts.csv")
    by_label = {(r["label"], r["layer"]): r["verdict"] for r in rows}
    assert by_label["bidirectional: s ends above the null (whole form)", 0] == "supported"
    assert by_label["s: bidirectional - autoregressive > 0 (whole form)", 0] == "supported"
    assert by_label["δ_PR: autoregressive - bidirectional < 0 (whole form)", 0] == "supported"
    assert by_label["sgd, onehot: update δ_PR < 0 at step 25 (beyond the null)", 0] == "not detected"
    mae = [r for r in rows if r["label"] == "update s: MAE - causal ViT > 0"]
    assert {r["layer"] for r in mae} == {0, 1, 2, 3}  # one verdict per layer
    assert {r["verdict"] for r in mae} == {"supported"}
    sections = {r["section"]: r for r in read_csv(out / "results" / "sections.csv")}
    assert sections["claim1"]["supported"] == sections["claim1"]["predictions"]  # every check passed at every seed
    assert sections["claim8"]["contradicted"] == 0


def test_derive_is_a_function_of_the_tables(rendered, tmp_path):
    """Deriving again from a copy of the raw tables gives byte-identical summaries and verdicts."""
    out = rendered[0]
    copy = tmp_path / "results"
    shutil.copytree(out / "results", copy)
    for record in copy.rglob(DERIVED_KEY):
        record.unlink()  # derive from scratch, not from the record of the last derivation
    derive(copy)
    for path in (out / "results").rglob("*.csv"):
        assert (copy / path.relative_to(out / "results")).read_bytes() == path.read_bytes(), path


def _count_rows(tables):
    _count_rows.calls += 1
    return {"summary": [{"rows": len(tables["scores"])}]}


def _count_rows_twice(tables):
    _count_rows_twice.calls += 1
    return {"summary": [{"rows": 2 * len(tables["scores"])}]}


def test_a_derivation_reruns_only_when_its_tables_or_its_code_change(tmp_path):
    """(Calls are counted on the functions: a module-level counter would be read into their code version.)"""
    root = tmp_path / "results"
    shutil.copytree(write_fixture(tmp_path / "fixture") / "sim_objectives", root / "sim_objectives")
    experiment = root / "sim_objectives"
    calls = lambda: (_count_rows.calls, _count_rows_twice.calls)
    _count_rows.calls = _count_rows_twice.calls = 0
    derive(root, {"sim_objectives": _count_rows})
    derive(root, {"sim_objectives": _count_rows})
    assert calls() == (1, 0)  # the second run reused the summary
    rows = Results(root).table("sim_objectives", "scores")
    assert read_csv(experiment / "summary.csv") == [{"rows": len(rows)}]

    derive(root, {"sim_objectives": _count_rows_twice})  # other code
    assert calls() == (1, 1)
    (experiment / "summary.csv").unlink()  # a derived table lost
    derive(root, {"sim_objectives": _count_rows_twice})
    assert calls() == (1, 2) and (experiment / "summary.csv").is_file()

    write_tables(experiment, {"scores": rows[:-1]})  # other tables
    derive(root, {"sim_objectives": _count_rows_twice})
    assert calls() == (1, 3)
    assert read_csv(experiment / "summary.csv") == [{"rows": 2 * (len(rows) - 1)}]
    (experiment / DERIVED_KEY).write_text("[]")  # a record this code did not write
    derive(root, {"sim_objectives": _count_rows_twice})
    assert calls() == (1, 4)


def test_a_second_render_reuses_the_figures(rendered):
    out = rendered[0]
    index = json.loads((out / "results" / "figures.json").read_text())
    mtimes = {p: p.stat().st_mtime_ns for p in (out / "figures").iterdir()}
    written, _, _ = render(out)
    assert {p.stem for p in written} == set(index)
    assert all(p.stat().st_mtime_ns == mtimes[p] for p in written)


def test_every_registry_entry_has_smoke_and_full_and_quick_leaves_out_only_the_digits_studies_and_the_controls():
    for name, experiment in EXPERIMENTS.items():
        for mode in ("smoke", "full"):
            assert isinstance(experiment.config(mode), dict), name
    left_out = sorted(n for n, e in EXPERIMENTS.items() if "quick" not in e.configs)
    # the controls, the DiT's sampling noise, issue 43's DiT studies, question (a)'s causal pair and the
    # matched-start ViTs: --quick reads --standard's
    assert left_out == [
        "control_scale",
        "dit_sampling_noise",
        "init_dit",
        "init_dit_mechanism",
        "init_dit_plateau",
        "init_vit",
        "language_control",
        "vision_dit_causal",
        "vision_dit_confirm",
        "vision_matched",
    ]


@pytest.mark.parametrize("mode", ["full", "standard"])
def test_long_configs_are_valid(mode):
    """The GPU-sized and working-scale configs build (without running), every unit of them: a typo in a field would
    otherwise surface hours in."""
    for name, experiment in EXPERIMENTS.items():
        if experiment.run_mode(mode) is None:
            continue  # the digits studies are not part of --standard
        config = experiment.config(experiment.run_mode(mode))
        units = experiment.split(config)
        if experiment.runner.__name__ == "sim_arms":
            for cfg in arm_configs(config).values():
                cfg.validate()
        elif experiment.runner.__name__ == "vision_task":
            TrainConfig(**config["train"])
            if mode == "standard":  # one unit per seed, every seed once
                assert sorted(s for u in units.values() for s in u["seed_list"]) == config_seeds(config)
        elif experiment.runner.__name__ == "matched_runs":
            for arm in config["arms"]:
                TrainConfig(**{**config["train"], **{k: v for k, v in arm.items() if k != "arm"}})
            if mode == "standard":  # one unit per arm and seed, every run once, on the fresh seeds
                runs = sorted((a["arm"], s) for u in units.values() for a in u["arms"] for s in u["seed_list"])
                want = sorted((a["arm"], s) for a in config["arms"] for s in config_seeds(config))
                assert runs == want and len(units) == len(want), name
        elif experiment.runner.__name__ == "study_runs":
            task = study_task(config["task"], config["steps"])
            assert config["steps"] is None or task.steps == config["steps"]
            assert all(is_scheme(s) for s in config["schemes"]), name
            if mode == "standard":  # one unit per arm and seed, every run once
                runs = sorted((s, seed) for u in units.values() for s in u["schemes"] for seed in u["seed_list"])
                assert len(runs) == len(config["schemes"]) * config["seeds"] == len(set(runs)), name
        assert name


@pytest.mark.slow
def test_smoke_run_end_to_end(tmp_path):
    """Every real runner at smoke size, then derive, figures and report (about two minutes on two cores)."""
    result = run_pipeline(tmp_path / "out", mode="smoke", work=tmp_path / "work")
    assert not result.failed, result.failed
    # the entries and every available slot; a split experiment runs as units labelled ``name:unit``
    assert sorted({label.partition(":")[0] for label in result.ran}) == sorted(experiments())
    assert not result.waiting, result.waiting  # every unit ran, so every split experiment merged
    assert set(result.figure_errors) <= set(OPTIONAL_FIGURES)
    assert Results(tmp_path / "out" / "results").verdicts()
    again = run_pipeline(tmp_path / "out", mode="smoke", work=tmp_path / "work")
    assert again.ran == []


def test_checkpoints_get_a_table_and_a_figure_grouped_by_family(tmp_path, monkeypatch):
    """--checkpoints: real (tiny) models scored by the pipeline, summarised per model and family, drawn, reported;
    a packaged model (under the packaged root) is named as shipped and left out of the command line."""
    transformers = pytest.importorskip("transformers")
    monkeypatch.setattr("wqk.paper.runners.checkpoints.PACKAGED_ROOT", str(tmp_path / "packaged"))
    bert, gpt2 = tmp_path / "packaged" / "Tiny-BERT", tmp_path / "gpt2"
    transformers.BertForMaskedLM(transformers.BertConfig(vocab_size=50, **SMALL)).save_pretrained(bert)
    config = transformers.GPT2Config(vocab_size=50, n_embd=SMALL["hidden_size"], n_layer=2, n_head=2, n_positions=16)
    transformers.GPT2LMHeadModel(config).save_pretrained(gpt2)
    registry = {"checkpoints": checkpoint_experiment([str(bert), str(gpt2)], null_samples=32)}
    result = run_pipeline(tmp_path / "out", work=tmp_path / "work", registry=registry)
    assert result.ran == ["checkpoints"] and not result.failed
    models = read_csv(tmp_path / "out/results/checkpoints/models.csv")
    scores = read_csv(tmp_path / "out/results/checkpoints/scores.csv")
    families = {(r["model"], r["family"]) for r in scores}
    assert len(families) == 2 and {(r["model"], r["family"]) for r in models} == families
    assert all(r["q25"] <= r["median"] <= r["q75"] for r in models)
    assert (tmp_path / "out/figures/checkpoints.png").is_file()
    text = (tmp_path / "out/report.md").read_text()
    assert "figures/checkpoints.png" in text and f"--checkpoints {gpt2}" in text
    assert f"--checkpoints {bert}" not in text and "Tiny-BERT: pretrained weights that installed packages ship" in text


def test_the_list_counts_each_split_experiments_units(tmp_path):
    """``paper --standard --list`` says how many units of each split experiment are done: work spread over several
    sessions shows how far it got."""
    from typer.testing import CliRunner

    result = CliRunner().invoke(app, ["paper", "--standard", "--list", "--format", "json", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    rows = {r["experiment"]: r for r in json.loads(result.stdout)}
    standard = experiments()["language_control"].configs["standard"]
    units = len(experiments()["language_control"].split(standard))
    assert units > 1 and rows["language_control"]["units done"] == f"0 of {units}"
    assert rows["language_control"]["mode"] == "standard" and rows["language_control"]["cached"] == "no"
    assert rows["sim_objectives"]["units done"] == ""  # one unit: nothing to count
