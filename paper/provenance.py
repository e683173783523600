"""What the report's results came from: the git commits of their runs (and those made from uncommitted changes), and
the frozen registry of predictions with how many verdict rows are confirmatory."""

from __future__ import annotations

from wqk.paper.dirty_runs import DIRTY_RUNS, SUFFIX, dirty_runs, reproduced
from wqk.paper.markdown import fmt
from wqk.paper.preregistration import REGISTRY, file_hash, freezes, result_commits
from wqk.paper.results import Results


def commit_text(results: Results) -> str:
    """The git commits the results were made from; the runs made from a tree with uncommitted changes, those whose
    base commit reproduces them (:mod:`wqk.paper.dirty_runs`) counted apart from those no commit reproduces (their
    verdicts are exploratory)."""

    made: dict[str, list[str]] = {}
    for e in results.experiments:
        for commit in result_commits(results, e):
            made.setdefault(commit, []).append(e)
    clean = sorted(c for c in made if not c.endswith(SUFFIX))
    dirty = sorted(c for c in made if c.endswith(SUFFIX))
    text = ", ".join(f"`{c[:12]}`" for c in clean) or "n/a"
    present = set(results.experiments)
    verified = [r for r in dirty_runs(results.root) if r.experiment in present and reproduced(r.name, r.commit)]
    if verified:
        experiments = ", ".join(sorted({r.experiment for r in verified}))
        text += (
            f"; {len(verified)} runs ({experiments}) were made from trees with uncommitted changes outside the code "
            "they reach: the code version each recorded equals the one its base commit computes "
            f"(`paper/{DIRTY_RUNS.name}`), so that commit reproduces it and is listed"
        )
    if dirty:
        runs = sum(len(made[c]) for c in dirty)
        experiments = ", ".join(sorted({e for c in dirty for e in made[c]}))
        bases = ", ".join(f"`{c.removesuffix(SUFFIX)[:12]}`" for c in dirty)
        text += (
            f"; {runs} runs ({experiments}) were made from uncommitted changes on top of {bases}: no commit "
            "reproduces them exactly, and their verdicts are exploratory"
        )
    return text


def registry_text(verdicts: list[dict]) -> str:
    """The frozen registry's hash, the commit that froze it, and how many verdict rows are confirmatory."""

    frozen = freezes()
    if not frozen:
        return "The registry of predictions (`paper/preregistration.json`) is not frozen: every verdict is exploratory."
    last = frozen[-1]
    flags = [str(r.get("exploratory")) for r in verdicts if r.get("quantity") != "check" and r.get("lo") is not None]
    confirmatory, exploratory = flags.count("False"), flags.count("True")
    return (
        f"Predictions, margins, families and interval rules are frozen in `paper/{REGISTRY.name}` (sha256 "
        f"`{file_hash()[:16]}`), frozen at commit `{last['commit'][:12]}`"
        + (f" (first frozen at `{frozen[0]['commit'][:12]}`)" if len(frozen) > 1 else "")
        + f". A verdict is **exploratory** when its data were made before its prediction was frozen, repeat seeds run "
        f"before the freeze, or came from uncommitted code: {fmt(exploratory)} of the measured rows are, "
        f"{fmt(confirmatory)} are confirmatory (the experiments on fresh seeds, run after the freeze)."
    )
