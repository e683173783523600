"""``paper``: run or reuse every experiment of the paper, then write its tables, figures and report."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from wqk.cli.errors import fail
from wqk.cli.options import OUTPUT_DIR, Format
from wqk.cli.output import Output


def register(app: typer.Typer) -> None:
    app.command()(paper)


def paper(
    quick: Annotated[
        bool,
        typer.Option(
            "--quick",
            help="The committed CPU run (default): about 6 minutes of 2 cores measured, cold (committed --standard "
            "results are reused).",
        ),
    ] = False,
    standard: Annotated[
        bool,
        typer.Option(
            "--standard",
            help="The working scale for these CPUs (models that learn their task; hours, in units of one seed, each "
            "cached as it lands); --quick reuses its results.",
        ),
    ] = False,
    full: Annotated[
        bool, typer.Option("--full", help="The same pipeline at GPU sizes (more seeds and steps, larger models).")
    ] = False,
    smoke: Annotated[
        bool, typer.Option("--smoke", help="Tiny sizes that check the pipeline end to end (numbers meaningless).")
    ] = False,
    out: Annotated[
        Path | None,
        typer.Option(
            **OUTPUT_DIR,
            help="Where results/, figures/ and report.md go (default paper/; runs/paper-smoke for --smoke).",
        ),
    ] = None,
    checkpoints: Annotated[
        list[str],
        typer.Option(
            metavar="PATH|cache",
            help="A checkpoint to score and add to the report (repeat the option); any `analyze` layout, or 'cache': "
            "every model of the local Hugging Face cache that `analyze` reads (see analyze --list-cache).",
        ),
    ] = [],
    jobs: Annotated[int, typer.Option(min=1, help="Experiments run at once, one process and one thread each.")] = 2,
    work: Annotated[
        Path,
        typer.Option(
            **OUTPUT_DIR, help="Run directories (checkpoints, per-run metrics), reused across runs; not committed."
        ),
    ] = Path("runs/paper-work"),
    only: Annotated[
        list[str], typer.Option(metavar="NAME", help="Run only this experiment (repeat); the rest is read as it is.")
    ] = [],
    force: Annotated[
        list[str], typer.Option(metavar="NAME", help="Rerun this experiment even when cached (repeat).")
    ] = [],
    list_: Annotated[
        bool,
        typer.Option(
            "--list",
            help="List the experiments and their cache state, in seconds: 'source changed' is cached but the code it "
            "reaches changed (the next run keeps it if its fingerprint, a run of its smoke config, is unchanged).",
        ),
    ] = False,
    device: Annotated[str, typer.Option(help="Device of the vision runs: auto (CUDA if present), cpu, cuda.")] = "auto",
    executor: Annotated[
        str,
        typer.Option(
            metavar="local|slurm",
            help="Where units run: local worker processes (--jobs), or slurm: one job array, a task per unit "
            "(through submitit: pip install wqk-toolkit[cluster]; docs/cluster.md).",
        ),
    ] = "local",
    slurm_partition: Annotated[
        str | None, typer.Option(help="--executor slurm: the partition (default: the cluster's).")
    ] = None,
    slurm_time: Annotated[
        str, typer.Option(metavar="TIME", help="--executor slurm: each unit's time limit, as Slurm's --time.")
    ] = "2:00:00",
    slurm_gpus_per_unit: Annotated[int, typer.Option(min=0, help="--executor slurm: GPUs of each unit.")] = 0,
    slurm_array_parallelism: Annotated[
        int, typer.Option(min=1, help="--executor slurm: units running at once (the array's %N).")
    ] = 64,
    allow_dirty: Annotated[
        bool,
        typer.Option(
            "--allow-dirty",
            help="Write results from code with uncommitted changes, marked exploratory in their manifest "
            "(refused otherwise where they would land in the repository).",
        ),
    ] = False,
    fmt: Format = "table",
) -> None:
    """Run or reuse every experiment of the paper, then write results/, figures/*.png|pdf and report.md.

    An experiment reruns only when its config, the code its runner can reach, or a library version changed
    (results/<experiment>/manifest.json holds the key). Figures and the report are drawn from the result tables only.
    """
    import sys
    import time

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
    from rich.text import Text

    from wqk.paper.pipeline import run_pipeline
    from wqk.paper.plan import plan
    from wqk.paper.registry import experiments

    show = Output(fmt)
    chosen = [m for m, flag in (("quick", quick), ("standard", standard), ("full", full), ("smoke", smoke)) if flag]
    if len(chosen) > 1:
        fail(f"choose one of --quick, --standard, --full, --smoke; got {', '.join('--' + m for m in chosen)}")
    mode = chosen[0] if chosen else "quick"
    out = out or Path("runs/paper-smoke" if mode == "smoke" else "paper")
    if device not in ("auto", "cpu") and not device.startswith("cuda"):
        fail(f"--device must be auto, cpu, cuda or cuda:N; got {device!r}")
    paths = checkpoint_paths(checkpoints)
    slurm = {
        "--slurm-partition": slurm_partition is not None,
        "--slurm-time": slurm_time != "2:00:00",
        "--slurm-gpus-per-unit": slurm_gpus_per_unit != 0,
        "--slurm-array-parallelism": slurm_array_parallelism != 64,
    }
    if executor not in ("local", "slurm"):
        fail(f"--executor must be local or slurm; got {executor!r}")
    if executor == "local" and any(slurm.values()):
        fail(f"{', '.join(k for k, given in slurm.items() if given)}: only with --executor slurm")
    if list_:
        plans = plan(experiments(paths), mode, out / "results", work, listing=True)  # writes nothing, runs nothing
        show.table(
            [
                {
                    "experiment": p.task.name,
                    "cached": ("source changed" if p.unchecked else "yes") if p.cached else "no",
                    "mode": p.mode,
                    "units done": f"{len(p.tasks) - len(p.todo)} of {len(p.tasks)}" if len(p.tasks) > 1 else "",
                    "cost s": p.experiment.cost,
                    "what": p.experiment.title,
                }
                for p in plans
            ],
            ["experiment", "cached", "mode", "units done", "cost s", "what"],
            keys=["experiment"],
            title=f"{mode} mode: experiments under {out / 'results'} (cost: rough quick-mode seconds of one core)",
        )
        return
    command = (
        " ".join(["python cli.py", *sys.argv[1:]])
        if Path(sys.argv[0]).name == "cli.py"
        else f"python cli.py paper --{mode}"
    )
    start = time.perf_counter()
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=show.messages,
        transient=True,
    ) as progress:
        overall = progress.add_task("experiments", total=None)
        running: dict[str, int] = {}

        def on_plan(plans) -> None:
            todo = [p.task.name for p in plans if not p.cached or p.task.name in force]
            cached = len(plans) - len(todo)
            progress.update(overall, total=len(todo), description=f"experiments ({cached} cached)")

        def on_event(name: str, kind: str, text: str) -> None:
            if kind in ("queued", "start") and text:  # a cluster's unit: its job and log
                progress.console.print(
                    Text.assemble(("queued " if kind == "queued" else "running ", "cyan"), name, f" ({text})")
                )
            if kind == "start":
                running[name] = progress.add_task(f"  {name}", total=None)
            elif kind == "note" and name in running:
                progress.update(running[name], description=f"  {name}: {text}")
            elif kind in ("done", "failed"):
                if name in running:
                    progress.remove_task(running.pop(name))
                progress.advance(overall)
                style = "green" if kind == "done" else "bold red"
                progress.console.print(Text.assemble((f"{kind} ", style), f"{name} ({text})"))

        try:
            units = (
                None
                if executor == "local"
                else slurm_executor(work, slurm_partition, slurm_time, slurm_gpus_per_unit, slurm_array_parallelism)
            )
            result = run_pipeline(
                out,
                mode,
                paths,
                jobs,
                work,
                only,
                force,
                device=device,
                command=command,
                on_event=on_event,
                on_plan=on_plan,
                executor=units,
                allow_dirty=allow_dirty,
            )
        except (ValueError, FileNotFoundError) as err:
            fail(str(err))
    for name, why in result.waiting.items():
        show.note(f"{name} not complete: {why}")
    for name, why in result.figure_errors.items():
        show.note(f"figure {name} skipped: {why}", style="yellow")
    show.note(
        f"{len(result.ran)} experiments ran, {len(result.cached)} cached; {len(result.figures)} figure files; "
        f"wrote {result.report} ({time.perf_counter() - start:.0f} s)"
    )
    if result.failed:
        for name, why in result.failed.items():
            Console(stderr=True, soft_wrap=True).print(Text.assemble(("failed: ", "bold red"), f"{name}: {why}"))
        raise typer.Exit(1)


def checkpoint_paths(sources: list[str]) -> list[str]:
    """``--checkpoints``' paths, with ``cache`` standing for every cached model that ``analyze`` reads."""
    from wqk.checkpoints.hub import cache_dir, cached_models

    paths: list[str] = []
    for source in sources:
        if source == "cache" and not Path(source).exists():
            readable = [str(m.path) for m in cached_models() if m.readable]
            if not readable:
                fail(f"--checkpoints cache: no model in {cache_dir()} that analyze reads (see analyze --list-cache)")
            paths += readable
        elif not Path(source).exists():
            fail(f"no such checkpoint: {source}")
        else:
            paths.append(source)
    return list(dict.fromkeys(paths))


def slurm_executor(work: Path, partition: str | None, time: str, gpus: int, parallelism: int):
    """``--executor slurm``: every unit a task of one job array, its log under ``WORK/slurm/``."""
    try:
        import submitit  # noqa: F401
    except ImportError:
        fail("--executor slurm needs submitit: pip install 'wqk-toolkit[cluster]' (or pip install submitit)")
    from wqk.paper.cluster import SubmititExecutor, slurm_minutes

    return SubmititExecutor(work / "slurm", "slurm", partition, slurm_minutes(time), gpus, parallelism)
