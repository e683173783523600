"""Option groups (:mod:`wqk.cli.option_groups`): a dataclass's fields declared as options, given to the command as
one parameter; ``train``'s config options generated from TrainConfig, and the CLI-side groups of ``study`` and
``analyze`` mirroring the configs they fill (whose modules load torch)."""

from __future__ import annotations

import dataclasses
import inspect
import re
import typing
from dataclasses import dataclass
from typing import Any, Literal

import pytest
import typer
from typer.testing import CliRunner

from wqk.checkpoints.score_options import ScoreOptions
from wqk.cli.option_groups import OptionGroup, cli_type, with_groups
from wqk.cli.scoring import ScoringFlags
from wqk.cli.vision import KEY_VALUE_FLAGS, TRAIN_CONFIG_OPTIONS, StudyOptions, train
from wqk.vision.study import StudyConfig
from wqk.vision.train_config import TrainConfig


@dataclass(frozen=True)
class Size:
    width: int = 4
    kind: Literal["a", "b"] = "a"

    def __post_init__(self) -> None:
        if self.width % 2:
            raise ValueError(f"width must be even, got {self.width}")


@dataclass(frozen=True)
class Run:
    steps: int = 10
    fast: bool = False


def _app() -> tuple[typer.Typer, list]:
    seen: list = []

    @with_groups(
        ("steps", "width", "name", "kind", "fast"),
        size=OptionGroup(Size, {"width": ("Width.", {"min": 2}), "kind": ("Kind.", {})}),
        run=OptionGroup(Run, {"steps": ("Steps.", {"default": 3}), "fast": ("Fast.", {})}, partial=True),
    )
    def command(name: str = "x", *, size: Size, run: dict[str, Any]) -> None:
        seen.append((name, size, run))

    app = typer.Typer()
    app.command()(command)
    app.command("other")(lambda: None)  # two commands: the command is named on the command line
    return app, seen


def test_a_group_is_declared_as_its_fields_and_reaches_the_command_as_one_value():
    app, seen = _app()
    result = CliRunner().invoke(app, ["command", "--width", "6", "--kind", "b", "--fast"])
    assert result.exit_code == 0, result.output
    assert seen == [("x", Size(6, "b"), {"steps": 3, "fast": True})]
    text = CliRunner().invoke(app, ["command", "--help"], env={"COLUMNS": "200"}).output
    flags = re.findall(r"(?m)^\W*(--[\w-]+)", text)
    assert flags == ["--steps", "--width", "--name", "--kind", "--fast", "--help"]  # in the order given


def test_a_value_the_dataclass_rejects_is_a_command_line_error():
    app, seen = _app()
    result = CliRunner().invoke(app, ["command", "--width", "5"])
    assert result.exit_code == 2 and "width must be even, got 5" in result.output and not seen
    assert CliRunner().invoke(app, ["command", "--width", "0"]).exit_code == 2  # the click range of the table


def test_an_order_must_name_every_option_once():
    with pytest.raises(TypeError, match="must name each option"):
        with_groups(("kind",), size=OptionGroup(Size, {"width": ("Width.", {})}))(lambda *, size: None)


def test_literal_fields_are_read_as_strings():
    assert cli_type(Literal["a", "b"]) is str and cli_type(Literal["a"] | None) == str | None
    assert cli_type(int | None) == int | None


def test_train_config_options_are_train_config_fields_of_their_type():
    """Named as the fields, typed as them (key=value lists fill dicts), defaulting to them but for a laptop's steps
    and threads."""
    fields = {f.name: f for f in dataclasses.fields(TrainConfig)}
    hints = typing.get_type_hints(TrainConfig)
    params = inspect.signature(train).parameters
    for name in TRAIN_CONFIG_OPTIONS:
        annotation = typing.get_args(params[name].annotation)[0]
        if name in KEY_VALUE_FLAGS:
            assert hints[name] is dict and annotation == list[str] and params[name].default == []
            continue
        assert annotation is hints[name], name
        if name not in ("steps", "threads"):
            assert params[name].default == fields[name].default, name
    assert (params["steps"].default, params["threads"].default) == (300, 1)


def test_study_options_mirror_the_study_config():
    config = StudyConfig()
    for field in dataclasses.fields(StudyOptions):
        default = getattr(config, field.name)
        assert field.default == (",".join(default) if field.name == "schemes" else default), field.name


def test_scoring_flags_mirror_the_score_options():
    assert ScoreOptions(**dataclasses.asdict(ScoringFlags())) == ScoreOptions()
    hints, flags = typing.get_type_hints(ScoreOptions), typing.get_type_hints(ScoringFlags)
    assert all(flags[name] == cli_type(hints[name]) for name in flags), flags
