"""Rows of the tidy tables declared once: a row type's fields, in order, are its table's columns.

A row type is a frozen, slotted dataclass that also reads as a mapping (``row["symmetry"]``, ``dict(row)``), so
code written for rows read back from a CSV reads fresh rows the same way. An optional column (default
:data:`ABSENT`) is absent from the row while unset: it is not among the row's keys and a CSV writer leaves its cell
empty, as for a dict without that key. Column groups that are derived from other names (each score with its
``_z`` and ``_p``) are spliced in with :func:`row_type`.
"""

from __future__ import annotations

import dataclasses
import functools
import keyword
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Self, TypeVar

#: One column of a group: ``(name, type)`` or ``(name, type, default)``.
Column = tuple[str, Any] | tuple[str, Any, Any]
R = TypeVar("R", bound="Row")
_NO_DEFAULT = dataclasses.MISSING


class _Absent:
    """The value of an optional column that a row does not set (``None`` is a value: JSON's null)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ABSENT"


#: Default of an optional column: the row leaves it out (its CSV cell empty).
ABSENT: Any = _Absent()


class Row(Mapping[str, Any]):
    """Base of the row types; declare one with :func:`table` (class syntax) or :func:`row_type` (column groups)."""

    __slots__ = ()

    @classmethod
    def columns(cls, kind: type | None = None) -> list[str]:
        """The table's columns, in order; with ``kind`` (``int``, ``float``) only those declared of that type."""
        return [_column(f) for f in dataclasses.fields(cls) if kind is None or _type_name(f.type) == kind.__name__]

    @classmethod
    def group(cls, *names: str) -> tuple[Column, ...]:
        """The declared ``(name, type, default)`` of this type's columns, all of them or those named, in order:
        a group to splice into another row type."""
        chosen = set(names or cls.columns())
        return tuple((_column(f), f.type, f.default) for f in dataclasses.fields(cls) if _column(f) in chosen)

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> Self:
        """The row holding ``values`` (keyed by column), which must name every required column and no other."""
        fields = _fields(cls)
        unknown = [key for key in values if key not in fields]
        required = [_column(f) for f in dataclasses.fields(cls) if f.default is _NO_DEFAULT]
        missing = [name for name in required if name not in values]
        if unknown or missing:
            expected = f"a {cls.__name__} row has columns {cls.columns()}"
            raise ValueError(f"{expected}; got unknown {unknown}, missing {missing}")
        return cls(**{fields[key]: value for key, value in values.items()})

    def replace(self, **changes: Any) -> Self:
        """A copy with ``changes`` (the row is frozen)."""
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        """The plain dict a CSV writer, JSON or a pandas DataFrame takes: the set columns, in order."""
        return dict(self.items())

    def __getitem__(self, key: str) -> Any:
        field = _fields(type(self)).get(key)
        value = ABSENT if field is None else getattr(self, field)
        if value is ABSENT:
            raise KeyError(key)
        return value

    def __iter__(self) -> Iterator[str]:
        return (column for column, field in _fields(type(self)).items() if getattr(self, field) is not ABSENT)

    def __or__(self, other: Mapping[str, Any]) -> dict[str, Any]:
        """A plain dict of this row's cells updated with ``other`` (as ``dict | dict``)."""
        return dict(self) | dict(other)

    def __ror__(self, other: Mapping[str, Any]) -> dict[str, Any]:
        return dict(other) | dict(self)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.as_dict()!r})"


def missing(value: Any) -> bool:
    """Whether a cell holds no value: ``None``, the empty text of a CSV cell read back, or NaN."""
    return value is None or value == "" or (isinstance(value, float) and value != value)


@functools.cache
def _fields(cls: type[Row]) -> dict[str, str]:
    """Column name -> field name of a row type, in column order."""
    return {_column(f): f.name for f in dataclasses.fields(cls)}


def _column(field: dataclasses.Field) -> str:
    """A field's column name: the field's own, or the one :func:`row_type` kept for a name that is no identifier."""
    return field.metadata.get("column", field.name)


def _type_name(kind: Any) -> str:
    """A field's declared type as written (annotations of ``from __future__`` modules are already strings)."""
    return kind if isinstance(kind, str) else getattr(kind, "__name__", str(kind))


def table(cls: type[R]) -> type[R]:
    """Declare a row type in class syntax: its annotated fields, in order, are the columns (keyword-only, so that
    an optional column may come before a required one)."""
    return dataclasses.dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)(cls)


def row_type(name: str, *groups: Iterable[Column], doc: str = "") -> type[Row]:
    """A row type whose columns are ``groups`` one after another (each ``(name, type[, default])``); a column
    with the default :data:`ABSENT` is optional. A column whose name is no identifier (``bos_key/query``), a
    keyword or a method's name (``keys``) is held in a field named ``_`` + the name, other characters ``_``."""
    columns = [column for group in groups for column in group]
    names = [column[0] for column in columns]
    if len(set(names)) != len(names):
        raise ValueError(f"{name} declares a column twice: {names}")
    fields = []
    for column, kind, *default in columns:
        default = default[0] if default else _NO_DEFAULT
        plain = column.isidentifier() and not keyword.iskeyword(column) and not hasattr(Row, column)
        spec = dataclasses.field(default=default, metadata={} if plain else {"column": column})
        fields.append((column if plain else "_" + re.sub(r"\W", "_", column), kind, spec))
    cls = dataclasses.make_dataclass(
        name,
        fields,
        bases=(Row,),
        frozen=True,
        slots=True,
        kw_only=True,
        eq=False,
        repr=False,
        namespace={"__doc__": doc},
    )
    cls.__module__ = sys._getframe(1).f_globals.get("__name__", cls.__module__)  # the declaring module's type
    return cls


@functools.cache
def extended(row: type[Row], before: tuple[str, ...] = (), after: tuple[str, ...] = ()) -> type[Row]:
    """``row``'s columns behind the required columns ``before`` (a group's identifiers) and ahead of the optional
    columns ``after`` (a task's own metrics): for tables whose leading or trailing columns depend on the data."""
    return row_type(row.__name__, [(c, Any) for c in before], row.group(), [(c, Any, ABSENT) for c in after])
