"""``simulate``'s options are generated from the simulator's config: one per config option, typed as its field."""

from __future__ import annotations

import inspect
import typing

import pytest
from typer.testing import CliRunner

from wqk.cli import app
from wqk.cli.simulator import SIM_OPTIONS, simulate
from wqk.sim.config import DEFAULTS, OPTION_FIELDS


def test_every_config_option_is_declared_once():
    assert set(SIM_OPTIONS) == set(OPTION_FIELDS)
    assert set(OPTION_FIELDS) <= set(inspect.signature(simulate).parameters)
    text = CliRunner().invoke(app, ["simulate", "--help"], env={"COLUMNS": "200"}).output
    assert all(f"--{o.replace('_', '-')}" in text for o in OPTION_FIELDS if o not in ("learn_embed",))


@pytest.mark.parametrize("option", sorted(OPTION_FIELDS))
def test_each_option_takes_its_fields_type_and_defaults_to_the_objectives_own(option):
    param = inspect.signature(simulate).parameters[option]
    part, _, name = OPTION_FIELDS[option].rpartition("__")
    config = DEFAULTS["bidirectional"]
    value = getattr(getattr(config, part) if part else config, name)
    assert param.default is None  # unset: the objective's own default (wqk.sim.config.DEFAULTS)
    assert typing.get_args(param.annotation)[0] == type(value) | None
