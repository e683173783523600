"""How a standard experiment splits into units of one seed (each cached and committed as it lands): by seed, by
arm (an init scheme, a language arm, a vision objective) and seed, and the first of the fresh seeds that run under
the frozen registry."""

from __future__ import annotations

from wqk.paper.seeds import config_seeds

#: The first seed of the confirmatory runs of claims 7 and 8 (the exploratory ones used seeds 0-7).
CONFIRM_SEED = 100


def seed_units(config: dict) -> dict[str, dict]:
    """One unit per group of ``config["units"]`` seeds (``seed0``, ``seeds0-1``; from ``first_seed`` where the config
    names one), each the config with its ``seed_list``."""
    seeds, per = config_seeds(config), config["units"]
    groups = [seeds[i : i + per] for i in range(0, len(seeds), per)]
    return {(f"seed{g[0]}" if len(g) == 1 else f"seeds{g[0]}-{g[-1]}"): {**config, "seed_list": g} for g in groups}


def arm_seed_units(config: dict) -> dict[str, dict]:
    """One unit per scheme and group of ``config["units"]`` seeds (``symmetric-seed0``)."""
    return {
        f"{scheme}-{name}": {**unit, "schemes": [scheme]}
        for scheme in config["schemes"]
        for name, unit in seed_units(config).items()
    }


def matched_units(config: dict) -> dict[str, dict]:
    """One unit per objective arm and group of ``config["units"]`` seeds (``mae-no-mask-seed100``)."""
    return {
        f"{arm['arm']}-{name}": {**unit, "arms": [arm]}
        for arm in config["arms"]
        for name, unit in seed_units(config).items()
    }


def language_units(config: dict) -> dict[str, dict]:
    """One unit per objective, arm and group of ``config["units"]`` seeds (``mlm-symmetric-seed0``)."""
    return {
        f"{objective}-{arm}-{name}": {**unit, "objectives": [objective], "arms": [arm]}
        for objective in config["objectives"]
        for arm in config["arms"]
        for name, unit in seed_units(config).items()
    }
