"""The seeds an experiment's config names, in a module of its own: every runner reaches :mod:`wqk.paper.experiment`,
whose source keys every cached result (:mod:`wqk.paper.codeversion`), so a helper only some runners use lives here."""

from __future__ import annotations

from collections.abc import Mapping


def config_seeds(config: Mapping) -> list[int]:
    """A unit's ``seed_list``, else ``seeds`` seeds from ``first_seed`` (0 when absent: fresh seeds start later)."""
    if "seed_list" in config:
        return list(config["seed_list"])
    first = config.get("first_seed", 0)
    return list(range(first, first + config["seeds"]))
