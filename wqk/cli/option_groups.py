"""Command options generated from dataclasses: each option's type and default are its field's, only its words and
click settings are declared (a table), and the command takes a whole group of them as one parameter.

``simulate`` adds its config options in place of its ``**options`` (:func:`with_parameters`); ``train``, ``study``
and ``analyze`` declare option groups (:class:`OptionGroup`, :func:`with_groups`): one parameter of the Python
function per group, one command-line option per field, so a command keeps a short signature and many flags.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import typer

from wqk.cli.errors import fail

#: Option name (a field of the group's dataclass) -> (help text, click settings: a range, a check, ``flags`` (the
#: flag names), and ``type`` / ``default`` where the command line's differ from the field's).
OptionTable = dict[str, tuple[str, dict[str, Any]]]


def cli_type(hint: Any) -> Any:
    """The type typer parses an option as: a field's type, with a ``Literal`` of names read as a ``str``."""
    if typing.get_origin(hint) is typing.Literal:
        return str
    if any(typing.get_origin(a) is typing.Literal for a in typing.get_args(hint)):  # Literal[...] | None
        return str | None
    return hint


def option_parameter(name: str, hint: Any, default: Any, text: str, settings: dict[str, Any]) -> inspect.Parameter:
    """A keyword parameter that typer declares as the option ``name``: ``typer.Option(*flags, help=text, ...)``."""
    settings = dict(settings)
    flags = settings.pop("flags", ())
    info = typer.Option(*flags, help=text, **settings)
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=Annotated[hint, info])


def with_parameters(command: Callable, parameters: list[inspect.Parameter]) -> Callable:
    """``command(**options)`` with ``parameters`` in place of its ``**options``, for typer to declare."""
    signature = inspect.signature(command, eval_str=True)
    own = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    command.__signature__ = signature.replace(parameters=own + parameters)
    return command


@dataclass(frozen=True)
class OptionGroup:
    """Options for the fields of the dataclass ``config`` that ``table`` names, in its order. The command gets them as
    ``config(**values)``, or with ``partial`` as the dict of values (for a config the command completes)."""

    config: type
    table: OptionTable
    partial: bool = False

    def parameters(self) -> list[inspect.Parameter]:
        hints = typing.get_type_hints(self.config)
        fields = {f.name: f for f in dataclasses.fields(self.config)}
        params = []
        for name, (text, settings) in self.table.items():
            settings = dict(settings)
            hint = settings.pop("type") if "type" in settings else cli_type(hints[name])
            default = settings.pop("default") if "default" in settings else _field_default(fields[name])
            params.append(option_parameter(name, hint, default, text, settings))
        return params

    def collect(self, values: dict[str, Any]) -> Any:
        return values if self.partial else self.config(**values)


def _field_default(field: dataclasses.Field) -> Any:
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    if field.default is dataclasses.MISSING:
        raise TypeError(f"field {field.name} has no default: an option needs one (give it in the table)")
    return field.default


def with_groups(order: Sequence[str] | None = None, **groups: OptionGroup) -> Callable[[Callable], Callable]:
    """Declare the command's parameter ``name`` as the options of ``groups[name]`` (``order``: the order of all the
    options in ``--help``, where not the signature's). The command is called with each group collected; a value the
    group's dataclass rejects (ValueError) is a command-line error."""

    def declare(command: Callable) -> Callable:
        signature = inspect.signature(command, eval_str=True)
        params = []
        for p in signature.parameters.values():
            params += groups[p.name].parameters() if p.name in groups else [p.replace(kind=p.KEYWORD_ONLY)]
        if order is not None:
            if sorted(order) != sorted(p.name for p in params):
                raise TypeError(f"order {list(order)} must name each option of {command.__name__} once")
            params.sort(key=lambda p: order.index(p.name))

        @functools.wraps(command)
        def run(**values: Any) -> Any:
            for name, group in groups.items():
                try:
                    values[name] = group.collect({option: values.pop(option) for option in group.table})
                except ValueError as err:
                    fail(err)
            return command(**values)

        run.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
        return run

    return declare
