"""``cli.py paper``: run or reuse every experiment, merge, derive, render; five steps in a line, each reading only
what the step before it wrote (the results store, :mod:`wqk.paper.results`):

1. **plan** (:mod:`wqk.paper.plan`): every experiment's units, and those whose cached result is not valid (config and
   library versions, and the same source or the same fingerprint), longest experiment first, seed by seed;
2. **execute** (:mod:`wqk.paper.execute`): an executor runs those units, each writing its own results directory:
   local worker processes (``--executor local``, ``--jobs`` at a time) or the tasks of a Slurm job array
   (``--executor slurm``, :mod:`wqk.paper.cluster`);
3. **merge** (:mod:`wqk.paper.merge`): a split experiment's units, once all are cached, into its own tables;
4. **derive** (:mod:`wqk.paper.derivation`): each experiment's summaries (where its tables or derive code changed),
   then ``results/verdicts.csv`` (:mod:`wqk.paper.claims`);
5. **render** (:mod:`wqk.paper.render`): ``figures/NAME.png`` and ``.pdf``, and ``report.md``, from the tables.

No result from uncommitted code lands in the repository (:mod:`wqk.paper.uncommitted`): the check runs before the
execute step, whenever anything is to be written, and again as each unit writes its manifest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from wqk.paper.derivation import DERIVED_KEY, derive
from wqk.paper.execute import Executor, LocalExecutor, OnEvent
from wqk.paper.experiment import Experiment
from wqk.paper.merge import merge_units, missing_units
from wqk.paper.plan import REGISTRY, Plan, load_registry, plan
from wqk.paper.registry import derivations
from wqk.paper.render import render
from wqk.paper.results import is_cached
from wqk.paper.uncommitted import exploratory_why

__all__ = ["DERIVED_KEY", "PipelineResult", "derive", "render", "run_pipeline"]


@dataclass
class PipelineResult:
    ran: list[str] = field(default_factory=list)
    cached: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    waiting: dict[str, str] = field(default_factory=dict)
    figures: list[Path] = field(default_factory=list)
    figure_errors: dict[str, str] = field(default_factory=dict)
    report: Path | None = None
    wall: dict[str, float] = field(default_factory=dict)


def run_pipeline(
    out: str | Path,
    mode: str = "quick",
    checkpoint_paths: list[str] | None = None,
    jobs: int = 1,
    work: str | Path = "runs/paper-work",
    only: list[str] | None = None,
    force: list[str] | None = None,
    threads: int = 1,
    device: str = "auto",
    command: str = "",
    on_event: OnEvent = lambda name, kind, text: None,
    on_plan: Callable[[list[Plan]], None] = lambda plans: None,
    registry: dict[str, Experiment] | str | None = None,
    executor: Executor | None = None,
    allow_dirty: bool = False,
) -> PipelineResult:
    """The whole pipeline into ``out`` (``results/``, ``figures/``, ``report.md``); see the module docstring.

    ``registry``: the experiments (default :data:`wqk.paper.plan.REGISTRY`): a ``module:function`` that builds them,
    which every worker process calls too, or a dict (tests), run in this process only (``jobs = 1``, the local
    executor). ``executor``: default :class:`wqk.paper.execute.LocalExecutor` of ``jobs`` processes. ``allow_dirty``:
    write results from uncommitted code, marked exploratory (:mod:`wqk.paper.uncommitted`)."""

    out = Path(out)
    if isinstance(registry, dict):
        if jobs > 1 or executor is not None:
            raise ValueError("a replaced registry runs in this process only: use jobs = 1 and the local executor")
        spec = REGISTRY
    else:
        spec = registry or REGISTRY
        registry = load_registry(spec, checkpoint_paths)
    unknown = sorted(set(only or []) - set(registry)) + sorted(set(force or []) - set(registry))
    if unknown:
        raise ValueError(f"unknown experiment(s) {unknown}; the registry has {sorted(registry)}")
    selected = {k: v for k, v in registry.items() if not only or k in only}
    forced = set(force or [])

    plans = plan(
        selected, mode, out / "results", Path(work), threads, device, command, tuple(checkpoint_paths or ()), spec
    )
    on_plan(plans)
    todo = [t for p in plans for t in (p.tasks if p.task.name in forced else p.todo)]
    merges = [p for p in plans if p.split and not is_cached(p.directory, p.merged_key)]
    why = exploratory_why(out / "results", allow_dirty) if todo or merges else ""  # raises if refused
    todo = [replace(t, allow_dirty=allow_dirty, exploratory=why) for t in todo]
    result = PipelineResult(cached=[p.task.name for p in plans if p.cached and p.task.name not in forced])

    result.wall, result.failed = (executor or LocalExecutor(jobs, registry)).run(todo, on_event)
    result.ran = list(result.wall)

    for p in plans:
        if not merge_units(p, why):
            result.waiting[p.task.name] = "units still to run: " + ", ".join(missing_units(p))

    derive(out / "results", {**derivations(), **{n: e.derive for n, e in registry.items() if e.derive}})

    result.figures, result.figure_errors, result.report = render(out)
    return result
