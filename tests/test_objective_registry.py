"""The objective registry is complete: every registered objective implements every part of the protocol, the
simulator resolves every one, and no code outside theory/objectives/ branches on objectives itself."""

import re
from pathlib import Path

import pytest
import sympy as sp
import torch
from sim_training import losses_on_one_batch

from wqk.checkpoints.model_types import FAMILY_RECORDS, family_objective, trained_family
from wqk.common.figures import palette_color
from wqk.language.tasks import LANGUAGE_TASKS
from wqk.sim.config import DEFAULTS, MAIN_OBJECTIVES, SIM_OBJECTIVES, default_config
from wqk.sim.tasks import TASKS, build_task
from wqk.sim.train import Simulation
from wqk.theory import objectives
from wqk.theory.corruption import Corruption, objective_batch
from wqk.theory.gaussian import gaussian_update
from wqk.theory.heads import LinearReadout
from wqk.theory.objectives import ALIASES, OBJECTIVES, Objective, color_of, get_objective
from wqk.theory.processes import Sequences, gaussian_sequences
from wqk.vision.task_records import VISION_TASKS
from wqk.vision.tasks import BUILDERS

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "theory" / "objectives"
NAMES = sorted(OBJECTIVES)


def test_every_module_of_the_package_is_registered_once():
    modules = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "base"}
    assert set(objectives.MODULES) == modules and len(objectives.MODULES) == len(modules)
    assert list(OBJECTIVES) == list(objectives.MODULES)


@pytest.mark.parametrize("name", NAMES)
def test_every_objective_implements_every_part(name):
    """Each part runs on a small case and agrees with the others: the pattern's shapes, the exact pair
    probabilities of a deterministic pattern, the attention batch's pattern, the Gaussian terms, the symbolic
    pattern (with its 0/1 symbols set to a draw's loss positions), names, colour and label."""
    cls = OBJECTIVES[name]
    objective = cls.example()
    assert isinstance(objective, Objective)
    n, gen = 4, torch.Generator().manual_seed(0)
    pattern = objective.pattern(n, (3,), gen)
    assert pattern.loss.shape == (3, n) and pattern.context.shape == (3, n, n)
    assert pattern.loss.dtype == torch.bool and pattern.context.dtype == torch.bool
    pairs = objective.expected_pairs(n)
    assert pairs.shape == (n, n) and bool(((pairs >= 0) & (pairs <= 1)).all())

    d = 2
    cov = torch.eye(n * d, dtype=torch.float64).reshape(n, d, n, d)
    corruption = Corruption.random(d, gen)
    sampler = gaussian_sequences(cov)
    batch = objective_batch(objective, Sequences(sampler(5, gen).x), corruption, gen, resample=sampler)
    m = batch.pattern.n
    assert batch.inputs.shape == (5, m, d) and batch.pattern.loss.shape == (5, m)
    assert bool(batch.pattern.loss.any(-1).all()), f"{name}: a batch sequence without loss"
    head = LinearReadout.random(d, gen)
    update = gaussian_update(objective, cov, head, corruption, timesteps=[10, 500] if name == "denoising" else None)
    assert update.mean.shape == (d, d) and bool(update.mean.isfinite().all())

    symbolic = objective.symbolic_pattern(n)
    draw = objective.pattern(n, (), gen)
    values = {s: int(v) for s, v in zip(symbolic.indicators, draw.loss.tolist(), strict=False)}
    assert symbolic.pairs().subs(values) == sp.Matrix(draw.pairs().int().tolist()), f"{name}: symbolic != drawn"

    assert cls.own_mask in ("causal", "symmetric") and objective.title.startswith(name[:4])
    assert re.fullmatch(r"#[0-9A-F]{6}", cls.color) and cls.label
    assert cls.sim_task in TASKS and cls.sim_name in DEFAULTS
    assert get_objective(cls.sim_name).name == name


def test_names_aliases_and_colours_are_distinct():
    names = list(OBJECTIVES) + list(ALIASES)
    assert len(set(names)) == len(names)
    colors = [cls.color for cls in OBJECTIVES.values()]
    assert len(set(colors)) == len(colors)
    for alias, name in ALIASES.items():
        assert color_of(f"{alias}, some arm") == color_of(name) == OBJECTIVES[name].color
    assert color_of("not an objective", 2) == palette_color(2)


def test_every_vision_task_trains_a_registered_objective():
    assert {objective for _, objective in BUILDERS} <= set(OBJECTIVES)


def test_the_task_records_agree_with_the_trainers_and_the_family_registry():
    """Each vision task record names a builder of the trainer and the family our trainer's runs of its objective get
    (under its alias too, as the trainer's sidecars write it); each language task trains its family's objective."""
    for task in VISION_TASKS.values():
        assert (task.model, task.objective) in BUILDERS
        assert trained_family(task.objective) == task.family
        for alias in OBJECTIVES[task.objective].aliases:
            assert trained_family(alias) == task.family
    for task in LANGUAGE_TASKS.values():
        assert task.objective in OBJECTIVES and family_objective(task.family) == task.objective
    assert all(f.objective is None or f.objective in OBJECTIVES for f in FAMILY_RECORDS)
    assert trained_family("bidirectional") is None and family_objective("vision-language") is None


def test_the_simulator_resolves_every_registered_objective():
    assert {get_objective(name).name for name in DEFAULTS} == set(OBJECTIVES)
    assert set(SIM_OBJECTIVES) <= set(DEFAULTS) and set(MAIN_OBJECTIVES) <= set(SIM_OBJECTIVES)
    for name, cfg in DEFAULTS.items():
        task = build_task(name, cfg.data, cfg.n, cfg.mask_scheme, cfg.mask_ratio, cfg.target)
        assert task.objective.name == get_objective(name).name


@pytest.mark.parametrize("name", list(DEFAULTS))
def test_every_registered_objective_trains_in_the_simulator(name):
    """Every step on one drawn batch lowers every seed's loss, the learned W_qk moves, and the run records."""
    cfg = default_config(name, steps=2, seeds=2, batch=4, model__d=48, n=9, record_every=2, null_samples=32)
    if cfg.data.continuous:
        cfg = cfg.with_overrides(data__channels=8)
    sim = Simulation(cfg)
    losses = losses_on_one_batch(sim, 4)
    assert losses.shape == (4, 2) and bool(losses.isfinite().all())
    assert (losses[1:] < losses[:-1]).all(), f"{name}: the loss on one batch must fall at every step: {losses.T}"
    moved = (sim.model.matrices() - sim.m0).flatten(2).norm(dim=-1) / sim.m0.flatten(2).norm(dim=-1)
    assert (moved > 1e-4).all(), f"{name}: W_qk of some seed and layer did not move: {moved}"
    sim.record()  # scores every form, special tokens included


#: ``isinstance(x, <an objective class>)``, comparisons with an objective's name or alias as a literal, and a
#: dictionary keyed by one (a side table of objectives: the objective's record or a task record says it). ``prefix``
#: (prefix_lm's alias) is also a detection option, ``{"prefix": prefix}``: not a key that names an objective.
def _dispatch_patterns() -> list[re.Pattern]:
    classes = "|".join(cls.__name__ for cls in OBJECTIVES.values())
    words = "|".join(re.escape(w) for w in [*OBJECTIVES, *ALIASES])
    keys = "|".join(re.escape(w) for w in [*OBJECTIVES, *ALIASES] if w != "prefix")
    return [
        re.compile(rf"isinstance\([^)]*\b({classes})\b"),
        re.compile(rf"""[=!]=\s*["']({words})["']|["']({words})["']\s*[=!]="""),
        re.compile(rf"""["']({keys})["']\s*:\s"""),
    ]


#: A model type compared with a literal, or told by the ending of its name: the model-type registry says what a
#: type is (checkpoints/model_types.py, where the one class-name rule lives).
MODEL_TYPE_DISPATCH = [
    re.compile(r"""\b(model_type|_class_name)\b\s*[=!]=\s*["']|["']\s*[=!]=\s*\w*\b(model_type|_class_name)\b"""),
    re.compile(r"""\.(endswith|startswith)\(\s*["']\w*(Model|Transformer)\w*["']"""),
]
MODEL_TYPES = Path("checkpoints/model_types.py")
ROLES = Path("theory/roles.py")
#: The simulator's settings are named by the objective each trains (``wqk.sim.config.DEFAULTS``), and its tables of
#: per-setting choices are keyed by those names: config names, not yet records of their own.
SIM_SETTINGS = {Path(p) for p in ("sim/config.py", "sim/experiments.py", "sim/grid.py", "sim/tasks.py")}


def _product_lines():
    """``(relative path, line number, line)`` of every product module (not the tests)."""
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in ("tests", ".venv", "results"):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            yield rel, number, line


def test_no_code_outside_the_registry_branches_on_objectives():
    """Product code asks the objective (or the simulator's task, or a task record) instead of testing which one it is
    or keeping a table by its name (theory/roles.py, the objectives' own vocabulary, names ``"causal"`` as a context
    choice)."""
    patterns = _dispatch_patterns()
    found = []
    for rel, number, line in _product_lines():
        if rel.parts[:2] == ("theory", "objectives") or rel == ROLES:
            continue
        hits = [p for p in patterns if p.search(line)]
        if hits and not (rel in SIM_SETTINGS and hits == [patterns[2]]):
            found.append(f"{rel}:{number}: {line.strip()}")
    assert not found, "objective dispatch outside theory/objectives/:\n" + "\n".join(found)


def test_no_code_outside_the_model_type_registry_dispatches_on_model_types():
    found = [
        f"{rel}:{number}: {line.strip()}"
        for rel, number, line in _product_lines()
        if rel != MODEL_TYPES and any(p.search(line) for p in MODEL_TYPE_DISPATCH)
    ]
    assert not found, "model-type dispatch outside checkpoints/model_types.py:\n" + "\n".join(found)


def test_the_dispatch_search_finds_what_it_looks_for():
    """The searches above can fail: they flag the forms they forbid, and pass the look-alikes they allow."""
    patterns = _dispatch_patterns()
    for line in (
        "if isinstance(task.objective, Denoising):",
        'if cfg.objective == "denoising":',
        "'mae' != name",
        'TASK_OBJECTIVE = {"classify": "classification"}',
        '    "causal": "vision-self-supervised",',
    ):
        assert any(p.search(line) for p in patterns), line
    for line in ('if how == "causal_mask":', 'detect = {"heads": heads, "prefix": prefix}', 'f"{name}: {x}"'):
        assert not any(p.search(line) for p in patterns), line
    for line in ('if model_type == "falcon" and x:', 'if kind.endswith("Transformer2DModel"):', "'t5' != model_type"):
        assert any(p.search(line) for p in MODEL_TYPE_DISPATCH), line
    assert not any(p.search('if kind == "queued":') for p in MODEL_TYPE_DISPATCH)
