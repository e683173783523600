"""The verdict rule (wqk.paper.verdict): four words from an interval and a region of no effect fixed in the registry,
Holm within a section; predictions evaluated on constructed tables (contrasts paired by seed, the null a form
is set against, the evaluation spacing of step ratios)."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from paper_fixture import write_fixture

from wqk.common.summary import z_text
from wqk.paper.claims import adjust_section, evaluate, verdict_rows
from wqk.paper.margins import RATIO
from wqk.paper.pipeline import derive
from wqk.paper.predictions import DESCRIPTIVE, SECTIONS, Prediction
from wqk.paper.results import Results, read_csv, write_experiment
from wqk.paper.sections import section_rows
from wqk.paper.verdict import ALPHA, NULL_BAND, Margin, count_words, decision_p, holm, verdict

BAND = (-0.02, 0.06)  # a null's central 95%


@pytest.mark.parametrize(
    ("interval", "direction", "expected"),
    [
        ((0.80, 0.90), "above", "supported"),  # wholly beyond the band's upper edge
        ((-0.35, -0.25), "above", "contradicted"),  # wholly beyond the band on the other side
        ((0.00, 0.04), "above", "not detected"),  # wholly inside the band: no effect as large as the margin
        ((0.03, 0.12), "above", "inconclusive"),  # straddles the upper edge
        ((-0.05, 0.01), "above", "inconclusive"),  # straddles the lower edge: not beyond it
        ((-0.35, -0.25), "below", "supported"),
        ((0.80, 0.90), "below", "contradicted"),
        ((0.00, 0.04), "below", "not detected"),
        ((-0.05, 0.01), "below", "inconclusive"),
        ((0.00, 0.04), "inside", "supported"),
        ((0.20, 0.30), "inside", "contradicted"),
        ((-0.40, -0.30), "inside", "contradicted"),
        ((0.04, 0.10), "inside", "inconclusive"),
    ],
    ids=lambda v: str(v),
)
def test_rule_against_a_region(interval, direction, expected):
    assert verdict(*interval, *BAND, direction) == expected


@given(
    centre=st.floats(-0.5, 0.5),
    half=st.floats(0.0, 0.5),
    margin=st.floats(0.01, 0.5),
    direction=st.sampled_from(["above", "below"]),
)
def test_no_effect_is_never_contradicted(centre, half, margin, direction):
    """An interval around no effect: within the margin it is "not detected", and it is never "contradicted"
    (it reaches 0, which is not beyond the margin on either side)."""
    lo, hi = -half, half
    word = verdict(lo, hi, -margin, margin, direction)
    assert word != "contradicted"
    assert (word == "not detected") == (half <= margin)


@given(effect=st.floats(0.05, 2.0), half=st.floats(0.0, 0.04), margin=st.floats(0.0, 0.01))
def test_a_wrong_sign_beyond_the_margin_is_contradicted(effect, half, margin):
    """A paired difference predicted > 0 whose interval lies wholly below -margin is contradicted; the same
    effect with the predicted sign is supported."""
    assert verdict(-effect - half, -effect + half, -margin, margin, "above") == "contradicted"
    assert verdict(effect - half, effect + half, -margin, margin, "above") == "supported"
    assert verdict(-effect - half, -effect + half, -margin, margin, "below") == "supported"


def test_rule_against_a_reference_with_a_margin():
    """A step ratio against 1 ± 0.07: a tie at 1 is not detected, a ratio beyond the margin decides."""
    lo, hi = 0.93, 1.07
    assert verdict(0.7, 0.9, lo, hi, "below") == "supported"
    assert verdict(1.1, 1.4, lo, hi, "below") == "contradicted"
    assert verdict(1.0, 1.0, lo, hi, "below") == "not detected"
    assert verdict(1.0, 1.4, lo, hi, "below") == "inconclusive"  # a tie among the pairs is no contradiction


def test_a_band_reaching_the_bound_is_untestable():
    """δ's null at small d spans [-1, 1]: no interval can lie beyond it, so the verdict is inconclusive; an
    "inside" prediction is still decided."""
    assert verdict(-0.7, -0.3, -1.0, 1.0, "below", bounds=(-1.0, 1.0)) == "inconclusive"
    assert verdict(-0.7, -0.3, -0.9, 0.9, "below", bounds=(-1.0, 1.0)) == "not detected"
    assert verdict(-0.2, 0.2, -1.0, 1.0, "inside", bounds=(-1.0, 1.0)) == "supported"


def test_no_interval_is_inconclusive():
    assert verdict(math.nan, math.nan, *BAND, "above") == "inconclusive"
    assert verdict(None, None, *BAND, "above") == "inconclusive"
    assert verdict(0.8, 0.9, None, None, "above") == "inconclusive"


def test_bad_inputs_are_errors():
    with pytest.raises(ValueError, match="direction"):
        verdict(0.1, 0.2, *BAND, "sideways")
    with pytest.raises(ValueError, match="ordered"):
        verdict(0.3, 0.2, *BAND, "above")
    with pytest.raises(ValueError, match="unknown"):
        count_words(["supported", "maybe"])


@given(
    centre=st.floats(-1.0, 1.0),
    half=st.floats(0.001, 1.0),
    df=st.one_of(st.none(), st.integers(1, 20)),
    direction=st.sampled_from(["above", "below", "inside"]),
)
def test_the_decision_p_agrees_with_the_interval(centre, half, df, direction):
    """The one-sided p of a decision is below ALPHA exactly when the 95% interval makes that decision."""
    lo, hi = centre - half, centre + half
    word = verdict(lo, hi, *BAND, direction)
    if word == "inconclusive":
        return
    p = decision_p(word, lo, hi, df, *BAND, direction)
    assert p <= ALPHA * (1 + 1e-9)


def test_holm_on_a_constructed_family():
    """p = 0.01, 0.04, 0.03, 0.005 over m = 4: sorted 0.005 x 4, 0.01 x 3, 0.03 x 2, 0.04 x 1, made monotone."""
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []


def _decided(label: str, word: str, p: float, role: str = "hypothesis") -> dict:
    return {"section": "claim7", "label": label, "quantity": "symmetry", "lo": 0.0, "n": 5, "verdict": word, "p": p,
            "role": role}  # fmt: skip


def test_checks_gate_a_section_and_are_not_in_its_family():
    """A passed check leaves Holm's m at the hypotheses' count; a failed one turns every hypothesis inconclusive,
    "not at a working scale"; rows not testable at their resolution count in neither."""
    hypotheses = [_decided("a", "supported", 0.006), _decided("b", "supported", 0.01)]
    passed = _decided("learned", "supported", 0.0001, role="check")
    untestable = {**_decided("coarse", "inconclusive", math.nan), "role": "not testable"}
    rows = adjust_section([dict(r) for r in [*hypotheses, passed, untestable]])
    assert [r["verdict"] for r in rows[:2]] == ["supported", "supported"]
    assert rows[0]["p_holm"] == pytest.approx(0.012) and rows[1]["p_holm"] == pytest.approx(0.012)  # m = 2, not 4
    failed = {**passed, "verdict": "inconclusive"}
    rows = adjust_section([dict(r) for r in [*hypotheses, failed]])
    assert [r["verdict"] for r in rows[:2]] == ["inconclusive", "inconclusive"]
    assert all("not at a working scale: learned not passed" in r["note"] for r in rows[:2])
    assert rows[2]["verdict"] == "inconclusive" and "p_holm" not in rows[2]


def test_holm_within_a_section_and_its_line():
    """Three decided rows and one undecided: m = 4; the smallest p survives, the others fall back to
    inconclusive with a note; the section line counts the words and names the deciding rows, and one
    contradicted row does not decide the section's word alone."""
    rows = [
        _decided("a", "supported", 0.001),
        _decided("b", "contradicted", 0.02),
        _decided("c", "not detected", 0.004),
        {**_decided("d", "inconclusive", math.nan)},
    ]
    adjusted = adjust_section(rows)
    words = {r["label"]: r["verdict"] for r in adjusted}
    assert words == {"a": "supported", "b": "inconclusive", "c": "not detected", "d": "inconclusive"}
    assert "contradicted before Holm" in adjusted[1]["note"]
    assert adjusted[0]["p_holm"] == pytest.approx(0.004)
    line = next(s for s in section_rows(adjusted) if s["section"] == "claim7")
    assert (line["supported"], line["contradicted"], line["not detected"], line["inconclusive"]) == (1, 0, 1, 2)
    assert line["deciding"] == "a"
    kept = adjust_section([_decided("a", "supported", 0.001), _decided("b", "contradicted", 0.002)])
    line = next(s for s in section_rows(kept) if s["section"] == "claim7")
    assert (line["supported"], line["contradicted"]) == (1, 1) and line["deciding"] == "b; a"


def test_z_beyond_the_validated_range_is_not_printed():
    assert z_text(120.0) == "> 8" and z_text(-13.1) == "< -8" and z_text(2.345) == "2.3" and z_text(None) == "n/a"


# ---- the registry's margins are fixed before the data --------------------------------------------------------
def test_every_margin_is_fixed_in_the_registry_with_why():
    for section in SECTIONS:
        for p in section.predictions:
            assert isinstance(p.margin, Margin) and p.margin.why, p.label
            if p.margin.is_null:
                assert p.margin.hi is None and p.minus is None, f"{p.label}: a paired difference has no null band"
            else:
                assert isinstance(p.margin.lo, float) and isinstance(p.margin.hi, float), p.label
                assert p.margin.lo <= p.margin.hi, p.label


def test_margins_do_not_depend_on_the_measured_results(tmp_path):
    """Two result trees with other measured values (other draws) and the same nulls: every verdict row has the
    same region of no effect; a margin read from a results table would move with the values (a descriptive row's
    range is read from results by design, and is no hypothesis's region)."""
    bands = []
    for seed in (0, 1):
        root = write_fixture(tmp_path / f"r{seed}" / "results", seed=seed)
        derive(root)
        rows = verdict_rows(Results(root))
        bands.append(
            {
                (r["section"], r["label"], r["layer"]): (r["band_lo"], r["band_hi"])
                for r in rows
                if r["role"] != DESCRIPTIVE
            }
        )
        assert any(r["mean"] is not None for r in rows)
    assert bands[0] == bands[1]
    fixed = [b for b in bands[0].values() if b[0] is not None]
    assert fixed, "the fixture gives every prediction a region"


# ---- predictions on constructed tables -----------------------------------------------------------------------
def _results(tmp_path, rows: list[dict], nulls: list[dict] | None = None, scores=None) -> Results:
    if nulls is None:
        nulls = [{"arm": "a", "form": "W_qk", "score": "symmetry", "q025": BAND[0], "q975": BAND[1]}]
    tables = {"summary": rows, "nulls": nulls}
    if scores is not None:
        tables["scores"] = scores
    write_experiment(tmp_path / "exp", tables, {"mode": "quick"})
    return Results(tmp_path)


def _row(step: int, mean: float, ci: float, n: int = 8) -> dict:
    return {
        "arm": "a",
        "step": step,
        "layer": 0,
        "form": "W_qk",
        "quantity": "symmetry",
        "n": n,
        "mean": mean,
        "ci": ci,
        "lo": mean - ci,
        "hi": mean + ci,
        "z": 10.0,
    }


S_ABOVE = Prediction("s above the null", "exp", "symmetry", "above", {"arm": "a", "form": "W_qk", "step": "last"})


@pytest.mark.parametrize(
    ("mean", "ci", "n", "expected"),
    [
        (0.9, 0.01, 8, "supported"),
        (-0.3, 0.05, 8, "contradicted"),
        (0.02, 0.01, 8, "not detected"),
        (0.06, 0.03, 8, "inconclusive"),
        (0.9, math.nan, 1, "inconclusive"),
    ],
    ids=["supported", "contradicted", "not-detected", "inconclusive", "one-seed"],
)
def test_prediction_reads_the_last_step_and_the_null_band(tmp_path, mean, ci, n, expected):
    results = _results(tmp_path, [_row(0, 0.0, 0.01), _row(25, 0.5, 0.01), _row(300, mean, ci, n)])
    (row,) = evaluate(S_ABOVE, results, "claimX")
    assert row["verdict"] == expected
    assert row["step"] == 300
    assert (row["band_lo"], row["band_hi"], row["null"]) == (*BAND, "iid")
    if n == 1:
        assert "one seed" in row["note"]


def test_a_spectrum_null_of_the_form_is_preferred(tmp_path):
    """A ``spectrum`` row keyed to this form (arm, form, layer, step) sets the band; one of another step does not;
    without a matching one the i.i.d. row is used; a block never takes the whole form's i.i.d. band."""
    iid = {"null": "iid", "arm": "a", "form": "W_qk", "score": "symmetry", "q025": BAND[0], "q975": BAND[1]}
    spectrum = {**iid, "null": "spectrum", "layer": 0, "step": 300, "block": "all", "q025": 0.5, "q975": 0.95}
    other = {**spectrum, "step": 25, "q025": -0.9, "q975": -0.8}
    results = _results(tmp_path / "s", [_row(300, 0.9, 0.01)], [iid, other, spectrum])
    (row,) = evaluate(S_ABOVE, results, "claimX")
    assert (row["band_lo"], row["band_hi"], row["null"]) == (0.5, 0.95, "spectrum")
    assert row["verdict"] == "not detected"  # 0.89-0.91 lies within the spectrum band 0.5-0.95
    results = _results(tmp_path / "i", [_row(300, 0.9, 0.01)], [iid, other])
    (row,) = evaluate(S_ABOVE, results, "claimX")
    assert (row["band_lo"], row["band_hi"], row["null"]) == (*BAND, "iid")
    blocks = [{**_row(300, 0.9, 0.01), "block": "token-token"}]
    write_experiment(tmp_path / "b" / "exp", {"blocks": blocks, "nulls": [iid]}, {"mode": "quick"})
    block = Prediction("block", "exp", "symmetry", "above", {"arm": "a", "block": "token-token"}, table="blocks")
    (row,) = evaluate(block, Results(tmp_path / "b"), "claimX")
    assert row["band_lo"] is None and row["verdict"] == "inconclusive" and "no null band" in row["note"]


def _score(arm: str, seed: int, value: float) -> dict:
    return {"arm": arm, "step": 300, "seed": seed, "layer": 0, "form": "W_qk", "block": "all", "symmetry": value}


def test_a_contrast_is_paired_by_seed(tmp_path):
    """``a - b`` per seed: a shared per-seed offset cancels, so a small consistent difference is detected; a
    seed only one arm has is left out."""
    offsets = [0.0, 0.5, -0.4, 0.3, 0.1]
    scores = [_score("a", s, o + 0.2) for s, o in enumerate(offsets)]
    scores += [_score("b", s, o) for s, o in enumerate(offsets)] + [_score("b", 9, 5.0)]
    results = _results(tmp_path, [], scores=scores)
    where = {"arm": "a", "form": "W_qk", "layer": 0, "step": "last", "block": "all"}
    margin = Margin.around(0.0, 0.05, "fixture")
    pred = Prediction("a - b > 0", "exp", "symmetry", "above", where, margin, minus=("exp", {"arm": "b"}))
    (row,) = evaluate(pred, results, "claimX")
    assert row["contrast"] == "a - b" and row["n"] == 5
    assert row["mean"] == pytest.approx(0.2) and row["ci"] == pytest.approx(0.0, abs=1e-12)
    assert (row["band_lo"], row["band_hi"], row["null"]) == (-0.05, 0.05, "")
    assert row["verdict"] == "supported"


def _study(tmp_path, ratio: tuple[float, float, float], spacing: int) -> Results:
    mean, lo, hi = ratio
    summary = [
        {"task": "t", "scheme": "default", "quantity": "steps_median", "n": 3, "mean": 100.0, "lo": None, "hi": None},
        {"task": "t", "scheme": "x", "quantity": "step_ratio", "n": 3, "mean": mean, "lo": lo, "hi": hi},
    ]
    curves = [{"task": "t", "scheme": "default", "seed": 0, "step": s} for s in range(0, 201, spacing)]
    write_experiment(tmp_path / "init", {"summary": summary, "curves": curves}, {"mode": "quick"})
    return Results(tmp_path)


def test_a_tie_at_a_coarse_spacing_is_inconclusive(tmp_path):
    """A step ratio tied at 1: "not detected" where the evaluation spacing resolves the margin (every 5 of 100
    steps, 0.05 < 0.07); where it does not (every 20 steps) the row is not testable at this resolution, whatever
    its interval: inconclusive, outside the family, with why."""
    pred = Prediction(
        "x faster", "init", "step_ratio", "below", {"task": "t", "scheme": "x"}, Margin.around(1.0, 0.07, "fixture")
    )
    (fine,) = evaluate(pred, _study(tmp_path / "f", (1.0, 1.0, 1.0), 5), "qc")
    (coarse,) = evaluate(pred, _study(tmp_path / "c", (1.0, 1.0, 1.0), 20), "qc")
    assert fine["verdict"] == "not detected"
    assert coarse["verdict"] == "inconclusive" and "coarser than the margin" in coarse["note"]
    assert (fine["role"], coarse["role"]) == ("hypothesis", "not testable")
    (faster,) = evaluate(pred, _study(tmp_path / "s", (0.6, 0.5, 0.7), 20), "qc")
    assert faster["verdict"] == "inconclusive" and faster["role"] == "not testable"
    (faster,) = evaluate(pred, _study(tmp_path / "s5", (0.6, 0.5, 0.7), 5), "qc")
    assert faster["verdict"] == "supported" and faster["role"] == "hypothesis"


def test_prediction_early_step_and_missing_data(tmp_path):
    results = _results(tmp_path, [_row(0, 0.9, 0.01), _row(25, 0.5, 0.01), _row(300, 0.0, 0.01)])
    early = Prediction("early", "exp", "symmetry", "above", {"arm": "a", "step": "early"})
    assert evaluate(early, results, "s")[0]["step"] == 25
    missing = Prediction("x", "nope", "symmetry", "above", {})
    (row,) = evaluate(missing, results, "s")
    assert row["verdict"] == "inconclusive" and "not measured" in row["note"]
    unmeasured = Prediction("x", "exp", "delta", "above", {})
    assert "not measured" in evaluate(unmeasured, results, "s")[0]["note"]
    assert NULL_BAND.is_null


def test_claim4_rests_on_its_checks_and_the_grid_is_its_own_section(tmp_path):
    root = write_fixture(tmp_path / "results")
    derive(root)
    rows = verdict_rows(Results(root))
    assert {r["experiment"] for r in rows if r["section"] == "claim4"} == {"theory_check"}
    (grid,) = [r for r in rows if r["section"] == "grid"]
    assert grid["n"] == 12  # the untied comparisons of the fixture's early phase (the tied ones apart)


def test_the_ratio_margin_is_the_band_of_one_random_form():
    """RATIO's fixed region covers about 95% of ``||M x|| / ||x^T M||`` for random 64 x 64 Gaussian products
    (a binomial 99.9% band around 0.95 for the draws made)."""
    import numpy as np

    rng = np.random.default_rng(0)
    draws = 1500
    a, b = rng.standard_normal((2, draws, 64, 64))
    m = a @ b.transpose(0, 2, 1)
    ratio = np.linalg.norm(m[:, :, 0], axis=1) / np.linalg.norm(m[:, 0, :], axis=1)  # x = e_0
    covered = np.mean((RATIO.lo <= ratio) & (ratio <= RATIO.hi))
    assert abs(covered - 0.95) < 3.3 * np.sqrt(0.95 * 0.05 / draws)


def test_per_seed_spectrum_rows_give_their_mean_band(tmp_path):
    """Each seed's trained form has its own spectrum-matched null: the band is the mean of their edges, not the
    first seed's."""
    base = {"null": "spectrum", "arm": "a", "form": "W_qk", "score": "symmetry", "layer": 0, "step": 300}
    seeds = [{**base, "seed": 0, "q025": 0.1, "q975": 0.5}, {**base, "seed": 1, "q025": 0.3, "q975": 0.9}]
    results = _results(tmp_path, [_row(300, 0.9, 0.01)], seeds)
    (row,) = evaluate(S_ABOVE, results, "claimX")
    assert (row["band_lo"], row["band_hi"], row["null"]) == (pytest.approx(0.2), pytest.approx(0.7), "spectrum")
    assert row["verdict"] == "supported"  # 0.89-0.91 lies beyond the mean band's upper edge 0.7


def test_a_contrast_between_experiments_at_different_scales_is_not_paired(tmp_path):
    """While standard units land, one objective may be at --standard and its partner at --quick: their seeds are
    other models on other data, so the contrast says so instead of pairing them."""
    import json

    root = write_fixture(tmp_path / "results")
    path = root / "vision_causal" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["config"]["train"] = {**manifest["config"]["train"], "data": "mnist5k", "steps": 3000}
    path.write_text(json.dumps(manifest))
    derive(root)
    rows = [r for r in read_csv(root / "verdicts.csv") if r["label"].startswith("update s: MAE - causal")]
    assert rows and all(r["verdict"] == "inconclusive" for r in rows)
    assert all("different scales" in r["note"] and "data digits vs mnist5k" in r["note"] for r in rows)


def test_an_init_study_is_judged_whichever_study_task_its_mode_ran(tmp_path):
    """--standard runs the init studies on other study tasks (``vit-mnist-long``, ``dit-mnist-fast``) than --quick:
    the predictions choose the experiment's rows by scheme, so those results get verdicts, not "not measured"."""
    import json

    root = tmp_path / "results"
    write_fixture(root)
    for experiment, task in (("init_vit_mnist", "vit-mnist-long"), ("init_dit_mnist", "dit-mnist-fast")):
        tables = {}
        for path in sorted((root / experiment).glob("*")):
            if path.suffix == ".csv":
                tables[path.stem] = [{**r, "task": task} if "task" in r else r for r in read_csv(path)]
            elif path.suffix == ".json" and path.name != "manifest.json":
                tables[path.stem] = {**json.loads(path.read_text()), "task": task}
        write_experiment(root / experiment, tables, json.loads((root / experiment / "manifest.json").read_text()))
    derive(root)
    rows = [r for r in Results(root).verdicts() if r["experiment"] in ("init_vit_mnist", "init_dit_mnist")]
    assert rows and not [r for r in rows if "not measured" in str(r.get("note"))]


def test_a_saving_tie_is_read_at_the_spacing_of_the_metrics_own_evaluations(tmp_path):
    """The paper's rule saves a multiple of the spacing of the study metric's evaluations (sample FID every 20
    steps, the loss every 5): a tie at 0 over a 200-step budget is "not detected" where the FID is sampled every 10
    steps (0.05 < 0.07) and inconclusive where only every 20 (0.1); a point interval says so."""
    pred = Prediction(
        "x saves", "init", "saving_vs_null", "above", {"task": "t", "scheme": "x"}, Margin.around(0.0, 0.07, "fixture")
    )

    def study(folder, every):
        tie = {"task": "t", "scheme": "x", "quantity": "saving_vs_null", "n": 3, "mean": 0.0, "ci": 0.0, "lo": 0.0,
               "hi": 0.0}  # fmt: skip
        curves = [
            {"task": "t", "scheme": "default", "seed": 0, "step": s, "sample_fid": 1.0 if s % every == 0 else math.nan}
            for s in range(0, 201, 5)
        ]
        tables = {"summary": [tie], "curves": curves, "study": {"metric": "sample_fid"}}
        write_experiment(tmp_path / folder / "init", tables, {"mode": "quick"})
        return Results(tmp_path / folder)

    (fine,) = evaluate(pred, study("f", 10), "qc")
    (coarse,) = evaluate(pred, study("c", 20), "qc")
    assert fine["verdict"] == "not detected" and "the interval is a point" in fine["note"]
    assert coarse["verdict"] == "inconclusive"
    assert "a saving resolves 0.100 of the budget of 200 steps" in coarse["note"]
