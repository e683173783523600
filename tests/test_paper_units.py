"""Work that lands in parts: results kept by what the code does (fingerprints), units cached one by one and merged,
a killed unit rerun without a partial result, compact tables, and --quick reading committed --standard results."""

import json
from dataclasses import replace

import pytest
from paper_fixture import write_fixture

import wqk.paper.codeversion
import wqk.paper.results
from wqk.common.rows import row_type
from wqk.paper.experiment import Experiment
from wqk.paper.figures import figure_key
from wqk.paper.fingerprint import fingerprint, same_computation, signature, table_digest
from wqk.paper.pipeline import run_pipeline
from wqk.paper.plan import plan
from wqk.paper.registry import EXPERIMENTS, arm_seed_units, experiments, seed_units
from wqk.paper.results import GZIP_ABOVE, Results, is_cached, read_csv, write_experiment


def runner_v1(config: dict, ctx) -> dict:
    """Each seed's value: x times (seed + 1), summed in a loop."""
    rows = []
    for seed in config.get("seed_list", range(config["seeds"])):
        total = 0.0
        for _ in range(seed + 1):
            total += config["x"]
        rows.append({"seed": seed, "value": total})
    return {"table": rows}


def runner_v2(config: dict, ctx) -> dict:
    """runner_v1 refactored: the same numbers by a product."""
    seeds = config.get("seed_list", range(config["seeds"]))
    return {"table": [{"seed": seed, "value": float(config["x"] * (seed + 1))} for seed in seeds]}


def runner_v3(config: dict, ctx) -> dict:
    """A change of one number: the last seed's value is off by one."""
    tables = runner_v2(config, ctx)
    tables["table"][-1]["value"] += 1.0
    return tables


def _entry(
    runner, units: bool = False, fail_seed: int | None = None, calls: list | None = None, **configs
) -> dict[str, Experiment]:
    """Experiment ``e`` over ``runner``; ``calls`` collects the mode of every call (fingerprint runs included)."""

    def wrapped(config, ctx):
        (calls if calls is not None else []).append(config["mode"])
        if config.get("seed_list") == [fail_seed]:
            raise RuntimeError("killed")
        return runner(config, ctx)

    wrapped.__wrapped__ = runner  # the code version is the runner's own source (inspect.unwrap)
    per_mode = {m: {"mode": m, "x": 2.0, "seeds": 3, **configs.get(m, {})} for m in ("smoke", "quick", "full")}
    if "standard" in configs:
        per_mode["standard"] = {"mode": "standard", "x": 2.0, "seeds": 3, **configs["standard"]}
    experiment = Experiment("e", "e", wrapped, per_mode, units=seed_units if units else None)
    return {"e": experiment}


def _run(tmp_path, registry, mode="quick"):
    return run_pipeline(tmp_path / "out", mode, work=tmp_path / "work", registry=registry)


def _manifest(tmp_path, *parts: str) -> dict:
    return json.loads(tmp_path.joinpath("out", "results", "e", *parts, "manifest.json").read_text())


def test_a_refactor_that_keeps_the_fingerprint_keeps_the_results(tmp_path):
    calls: list[str] = []
    first = _run(tmp_path, _entry(runner_v1, calls=calls))
    assert first.ran == ["e"] and calls == ["quick", "smoke"]  # the run, then its fingerprint on the smoke config
    stored = _manifest(tmp_path)
    calls.clear()
    refactored = _run(tmp_path, _entry(runner_v2, calls=calls))
    assert refactored.ran == [] and calls == ["smoke"]  # only the fingerprint ran: the hours are kept
    kept = _manifest(tmp_path)
    assert kept["fingerprint"] == stored["fingerprint"] and kept["code_version"] != stored["code_version"]
    calls.clear()
    again = _run(tmp_path, _entry(runner_v2, calls=calls))
    assert again.ran == [] and calls == []  # the manifest took the new code version: no second fingerprint run


def test_a_change_of_a_number_invalidates_the_results(tmp_path):
    _run(tmp_path, _entry(runner_v1))
    calls: list[str] = []
    changed = _run(tmp_path, _entry(runner_v3, calls=calls))
    assert changed.ran == ["e"] and "quick" in calls
    rows = Results(tmp_path / "out" / "results").table("e", "table")
    assert rows[-1]["value"] == 2.0 * 3 + 1.0


def runner_rounded(config: dict, ctx) -> dict:
    """runner_v2 as another CPU's float32 kernels compute it: every value off by a few units in the last place."""
    tables = runner_v2(config, ctx)
    for row in tables["table"]:
        row["value"] *= 1 + 3e-9
    return tables


def test_rounding_of_another_machine_keeps_the_results(tmp_path):
    _run(tmp_path, _entry(runner_v1))
    stored = _manifest(tmp_path)
    calls: list[str] = []
    kept = _run(tmp_path, _entry(runner_rounded, calls=calls))
    assert kept.ran == [] and calls == ["smoke"]
    assert _manifest(tmp_path)["fingerprint"] == stored["fingerprint"]  # anchored to the run that made the results


def test_a_stored_exact_digest_compares_exactly_and_becomes_a_signature(tmp_path):
    """Results fingerprinted before signatures existed hold the exact digest: kept only by the same bytes."""
    _run(tmp_path, _entry(runner_v1))
    path = tmp_path / "out/results/e/manifest.json"
    manifest = json.loads(path.read_text())
    digest = table_digest(runner_v1(manifest["config"] | {"mode": "smoke"}, None))
    path.write_text(json.dumps({**manifest, "fingerprint": digest}))
    assert _run(tmp_path, _entry(runner_v2)).ran == []  # the same bytes
    assert _manifest(tmp_path)["fingerprint"]["digest"] == digest
    path.write_text(json.dumps({**_manifest(tmp_path), "fingerprint": digest, "code_version": "old"}))
    assert _run(tmp_path, _entry(runner_rounded)).ran == ["e"]  # an exact digest sees rounding


def _tables() -> dict:
    rows = [{"seed": s, "loss": 1.0 / (s + 1), "score": 0.1 * s - 0.15, "name": f"arm{s % 2}"} for s in range(6)]
    return {"metrics": rows, "config": {"lr": 1e-3, "steps": 4, "nan": float("nan")}}


def _changed(tables: dict, change) -> dict:
    copy = json.loads(json.dumps(tables))  # NaN round-trips through json
    change(copy)
    return copy


@pytest.mark.parametrize(
    "change, same",
    [
        (lambda t: None, True),
        (lambda t: [r.update(loss=r["loss"] * (1 + 1e-7)) for r in t["metrics"]], True),  # float32 rounding
        (lambda t: t["metrics"][2].update(score=t["metrics"][2]["score"] + 1e-3), False),  # one number changed
        (lambda t: [r.update(loss=r["loss"] * 1.001) for r in t["metrics"]], False),
        (lambda t: t["metrics"][1].update(loss=t["metrics"][4]["loss"]) or t["metrics"][4].update(loss=0.5), False),
        (lambda t: t["metrics"][0].update(name="arm9"), False),  # structure: strings, integers, keys
        (lambda t: t["metrics"][0].update(seed=7), False),
        (lambda t: t["metrics"].pop(), False),
        (lambda t: t["config"].update(nan=1.0), False),
    ],
)
def test_a_signature_sees_changed_numbers_and_forgives_rounding(change, same):
    tables = _tables()
    assert same_computation(signature(_changed(tables, change)), signature(tables)) is same


def test_units_are_cached_one_by_one_and_merged_when_all_are_present(tmp_path):
    registry = _entry(runner_v2, units=True, quick={"units": 1})
    first = _run(tmp_path, _entry(runner_v2, units=True, fail_seed=1, quick={"units": 1}))
    assert sorted(first.ran) == ["e:seed0", "e:seed2"] and "killed" in first.failed["e:seed1"]
    assert not (tmp_path / "out/results/e/manifest.json").exists()  # no merged result while a unit is missing
    assert "seed1" in first.waiting["e"]
    second = _run(tmp_path, registry)
    assert second.ran == ["e:seed1"]  # the units that landed are kept
    merged = Results(tmp_path / "out" / "results")
    assert [r["seed"] for r in merged.table("e", "table")] == [0, 1, 2]
    assert [r["unit"] for r in merged.table("e", "units")] == ["seed0", "seed1", "seed2"]  # each unit's wall time
    assert set(_manifest(tmp_path)["units"]) == {"seed0", "seed1", "seed2"}
    third = _run(tmp_path, registry)
    assert third.ran == [] and third.cached == ["e"]


def test_a_unit_killed_while_writing_leaves_no_result_and_reruns(tmp_path, monkeypatch):
    real = wqk.paper.results.write_json

    def dies_on_the_manifest(path, obj):
        if path.name == "manifest.json":
            raise RuntimeError("killed while writing")
        real(path, obj)

    monkeypatch.setattr(wqk.paper.results, "write_json", dies_on_the_manifest)
    first = _run(tmp_path, _entry(runner_v2))
    assert "killed" in first.failed["e"]
    directory = tmp_path / "out/results/e"
    assert (directory / "table.csv").is_file() and not (directory / "manifest.json").exists()
    assert "e" not in Results(tmp_path / "out/results").experiments  # the tables alone are no result
    monkeypatch.undo()
    second = _run(tmp_path, _entry(runner_v2))
    assert second.ran == ["e"] and is_cached(directory, _manifest(tmp_path)["cache_key"])


def test_quick_reuses_standard_results_and_standard_falls_back_to_quick(tmp_path):
    registry = _entry(runner_v2, units=True, standard={"seeds": 4, "units": 2})
    standard = _run(tmp_path, registry, mode="standard")
    assert sorted(standard.ran) == ["e:seeds0-1", "e:seeds2-3"]
    quick = _run(tmp_path, registry)
    assert quick.ran == [] and quick.cached == ["e"] and _manifest(tmp_path)["mode"] == "standard"
    quick_only = _entry(runner_v2)  # no standard config: --standard runs the quick one
    assert _run(tmp_path / "other", quick_only, mode="standard").ran == ["e"]
    assert json.loads((tmp_path / "other/out/results/e/manifest.json").read_text())["mode"] == "quick"


def test_study_units_cover_every_arm_and_seed_once():
    units = arm_seed_units({"schemes": ["default", "symmetric"], "seeds": 3, "units": 2})
    assert sorted(units) == ["default-seed2", "default-seeds0-1", "symmetric-seed2", "symmetric-seeds0-1"]
    runs = sorted((s, seed) for u in units.values() for s in u["schemes"] for seed in u["seed_list"])
    assert runs == sorted((s, seed) for s in ("default", "symmetric") for seed in range(3))


def test_an_arm_by_seed_split_runs_seed_by_seed(tmp_path):
    """A run stopped part way leaves whole seeds: every arm of seed 0 runs before any arm of seed 1."""
    experiment = replace(_entry(runner_v2, quick={"units": 1, "schemes": ["a", "b", "c"]})["e"], units=arm_seed_units)
    result = _run(tmp_path, {"e": experiment})
    assert result.ran == [f"e:{arm}-seed{seed}" for seed in range(3) for arm in ("a", "b", "c")]


def test_large_tables_are_gzip_and_read_back_the_same(tmp_path):
    big = [{"step": i, "value": i / 7, "label": "x" * 40} for i in range(GZIP_ABOVE // 40)]
    small = [{"step": 0, "value": 0.5}]
    write_experiment(tmp_path / "e", {"big": big, "small": small}, {"cache_key": "k"})
    assert (tmp_path / "e/big.csv.gz").is_file() and (tmp_path / "e/small.csv").is_file()
    results = Results(tmp_path)
    assert results.table("e", "big") == read_csv(tmp_path / "e/big.csv.gz") and len(results.table("e", "big")) == len(
        big
    )
    assert results.table("e", "big")[5]["value"] == 5 / 7 and results.has("e", "big")
    first = (tmp_path / "e/big.csv.gz").read_bytes()
    write_experiment(tmp_path / "e", {"big": big[:1], "small": small}, {"cache_key": "k"})  # now small: plain CSV
    assert (tmp_path / "e/big.csv").is_file() and not (tmp_path / "e/big.csv.gz").exists()
    write_experiment(tmp_path / "e", {"big": big, "small": small}, {"cache_key": "k"})
    assert (tmp_path / "e/big.csv.gz").read_bytes() == first  # the same rows give the same bytes


@pytest.mark.slow
def test_a_split_study_gives_the_tables_of_the_unsplit_one(tmp_path):
    """The init study run as arm x seed units and merged equals the same study run at once (about a minute)."""
    study = EXPERIMENTS["init_vit"]
    config = {**study.config("smoke"), "units": 1}
    whole = _run(tmp_path / "whole", {"e": replace(study, name="e")}, mode="smoke")
    split = _run(tmp_path / "split", {"e": replace(study, name="e", configs={"smoke": config})}, mode="smoke")
    assert not whole.failed and not split.failed and len(split.ran) == len(config["schemes"]) * config["seeds"]
    for table in ("arms.csv", "steps.csv", "curves.csv", "study.json"):
        whole_bytes = (tmp_path / "whole/out/results/e" / table).read_bytes()
        assert whole_bytes == (tmp_path / "split/out/results/e" / table).read_bytes(), table


def test_a_simulator_experiment_fingerprint_ignores_the_source_version(monkeypatch):
    """The simulator's runs live in directories named by the code version, but its tables must not carry that name:
    a source change that computes the same numbers keeps the fingerprint."""
    experiment = experiments()["sim_objectives"]
    before = fingerprint(experiment, "code-a")
    monkeypatch.setattr(wqk.paper.codeversion, "modules_version", lambda modules: "another-source-version")
    assert fingerprint(experiment, "code-b") == before


def test_a_fingerprint_does_not_depend_on_the_callers_threads():
    """The pipeline's workers run one torch thread; the process that checks a cache may run several: the fingerprint
    runs on one thread either way (float sums change order with the thread count)."""
    import torch

    experiment, threads = experiments()["sim_objectives"], torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        two = fingerprint(experiment, "called-on-two-threads")
        torch.set_num_threads(1)
        assert fingerprint(experiment, "called-on-one-thread") == two
    finally:
        torch.set_num_threads(threads)


def test_a_signature_reads_table_rows_as_the_dicts_they_replace():
    """Runners return typed rows (wqk.common.rows): their floats are moments, never part of the structure."""
    Metric = row_type("Metric", [("seed", int), ("loss", float), ("name", str)])
    plain = [{"seed": s, "loss": 1.0 / (s + 1), "name": "a"} for s in range(3)]
    rows = [Metric.of(r) for r in plain]
    assert signature({"t": rows}) == signature({"t": plain})
    rounded = [Metric.of({**r, "loss": r["loss"] * (1 + 1e-9)}) for r in plain]
    assert same_computation(signature({"t": rounded}), signature({"t": plain}))


def test_a_figure_drawn_from_an_experiment_with_landed_units_is_keyed_by_its_tables(tmp_path):
    """Standard units land under <experiment>/units/ beside the quick tables: a figure's key reads the tables only."""
    root = write_fixture(tmp_path / "results")
    before = figure_key(Results(root), "vision_layers")
    unit = root / "vision_classify" / "units" / "seed0"
    unit.mkdir(parents=True)
    (unit / "scores.csv").write_text("step\n0\n")
    assert figure_key(Results(root), "vision_layers") == before


def test_the_nulls_figure_is_redrawn_when_a_trained_form_it_plots_changes(tmp_path):
    """nulls_vs_d plots the toy's and every vision objective's trained forms: their tables are part of its key."""
    root = write_fixture(tmp_path / "results")
    before = figure_key(Results(root), "nulls_vs_d")
    summary = root / "vision_mae" / "scores.csv"
    summary.write_text(summary.read_text().replace("0.", "0.1", 1))
    assert figure_key(Results(root), "nulls_vs_d") != before


def merge_v1(config: dict, units: dict) -> dict:
    """Units' tables concatenated."""
    return {"table": [r for tables in units.values() for r in tables["table"]]}


def merge_v2(config: dict, units: dict) -> dict:
    """merge_v1 with a new column: another analysis of the same units."""
    return {"table": [{**r, "twice": 2 * r["value"]} for tables in units.values() for r in tables["table"]]}


def test_a_changed_merge_merges_the_cached_units_again_in_every_mode(tmp_path):
    """The merged tables are keyed by the units and the merge's code: a new analysis of committed --standard units
    merges them again (seconds), in --standard and where they stand in for --quick, and trains nothing."""
    registry = _entry(runner_v2, units=True, standard={"seeds": 4, "units": 2})
    registry["e"] = replace(registry["e"], merge=merge_v1)
    assert sorted(_run(tmp_path, registry, mode="standard").ran) == ["e:seeds0-1", "e:seeds2-3"]
    rows = read_csv(tmp_path / "out" / "results" / "e" / "table.csv")
    assert len(rows) == 4 and "twice" not in rows[0]
    registry["e"] = replace(registry["e"], merge=merge_v2)
    quick = _run(tmp_path, registry, mode="quick")
    assert quick.ran == [] and _manifest(tmp_path)["mode"] == "standard"
    rows = read_csv(tmp_path / "out" / "results" / "e" / "table.csv")
    assert [r["twice"] for r in rows] == [2 * r["value"] for r in rows]


def test_a_listing_runs_no_fingerprint_and_writes_nothing(tmp_path):
    """plan(listing=True), as `paper --list` calls it: a cached result whose source changed is listed as cached and
    unchecked, without a fingerprint run, and its manifest is left as it was; the next real run checks the
    fingerprint and brings the code version up to date."""
    _run(tmp_path, _entry(runner_v1))
    stored = _manifest(tmp_path)
    calls: list[str] = []
    plans = plan(_entry(runner_v2, calls=calls), "quick", tmp_path / "out" / "results", tmp_path / "work", listing=True)
    assert plans[0].cached and [t.name for t in plans[0].unchecked] == ["e"]
    assert calls == [] and _manifest(tmp_path) == stored
    _run(tmp_path, _entry(runner_v2))
    assert _manifest(tmp_path)["code_version"] != stored["code_version"]
    assert (
        plan(_entry(runner_v2), "quick", tmp_path / "out" / "results", tmp_path / "work", listing=True)[0].unchecked
        == []
    )


def test_units_from_several_kinds_of_device_merge_as_exploratory(tmp_path):
    """A study's arms compare on one kind of device: units from a CPU and a GPU merge, marked exploratory and why."""
    registry = _entry(runner_v2, units=True, standard={"seeds": 4, "units": 2})
    _run(tmp_path, registry, mode="standard")
    assert "device" not in _manifest(tmp_path).get("exploratory_why", "")
    unit = tmp_path / "out" / "results" / "e" / "units" / "seeds2-3" / "manifest.json"
    unit.write_text(json.dumps({**json.loads(unit.read_text()), "device": "cuda:0 (NVIDIA H100 80GB HBM3)"}))
    (tmp_path / "out" / "results" / "e" / "manifest.json").unlink()  # merge again
    _run(tmp_path, registry, mode="standard")
    merged = _manifest(tmp_path)
    assert merged["exploratory"] and "several kinds of device (cpu, cuda)" in merged["exploratory_why"]
    assert merged["units"]["seeds2-3"]["device"].startswith("cuda:0")
