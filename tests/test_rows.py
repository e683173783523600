"""Row types (wqk.common.rows): columns declared once, read as the plain dict a CSV writer, JSON and pandas take."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wqk.common.io import write_csv, write_json
from wqk.common.rows import ABSENT, Row, extended, row_type, table


@table
class Pair(Row):
    name: str
    value: float
    note: str = ABSENT


def test_columns_follow_the_declaration_and_groups_splice_in_order():
    wide = row_type("Wide", [("id", int)], Pair.group(), [("bos_key/query", float)])
    assert Pair.columns() == ["name", "value", "note"]
    assert wide.columns() == ["id", "name", "value", "note", "bos_key/query"]
    assert wide.columns(float) == ["value", "bos_key/query"]
    assert Pair.group("value") == (("value", "float", Pair.__dataclass_fields__["value"].default),)


def test_a_missing_or_unknown_column_is_an_error_that_names_it():
    with pytest.raises(ValueError, match=r"Pair row has columns .*unknown \['size'\], missing \['value'\]"):
        Pair.of({"name": "a", "size": 1})
    with pytest.raises(ValueError, match=r"unknown \['size'\], missing \[\]"):
        Pair.of({"name": "a", "value": 1.0, "size": 1})
    with pytest.raises(ValueError, match="declares a column twice"):
        row_type("Twice", Pair.group(), [("name", str)])


def test_an_unset_optional_column_is_absent_as_from_a_dict():
    row = Pair(name="a", value=1.5)
    assert dict(row) == {"name": "a", "value": 1.5} == row
    assert "note" not in row and row.get("note") is None and list(row) == ["name", "value"]
    with pytest.raises(KeyError):
        row["note"]
    noted = row.replace(note="n")
    assert list(noted) == Pair.columns() and noted["note"] == "n" and row.get("note") is None


def test_names_that_are_no_identifiers_keywords_or_methods_are_columns_too():
    odd = row_type("Odd", [("bos_key/query", float), ("class", str), ("keys", int), ("not detected", int)])
    row = odd.of({"bos_key/query": 2.0, "class": "c", "keys": 3, "not detected": 0})
    assert list(row) == ["bos_key/query", "class", "keys", "not detected"]
    assert row["keys"] == 3 and row["not detected"] == 0 and sorted(row.keys()) == sorted(odd.columns())


def test_extended_puts_identifiers_first_and_optional_extras_last():
    grouped = extended(Pair, before=("arm", "step"), after=("extra",))
    assert grouped.columns() == ["arm", "step", "name", "value", "note", "extra"]
    assert extended(Pair, before=("arm", "step"), after=("extra",)) is grouped  # one type per shape
    row = grouped.of({"arm": "x", "step": 3, "name": "a", "value": 1.0})
    assert list(row) == ["arm", "step", "name", "value"]
    with pytest.raises(ValueError, match="missing"):
        grouped.of({"arm": "x", "name": "a", "value": 1.0})


def test_json_writers_and_dict_merges_read_rows_as_dicts(tmp_path):
    row = Pair(name="a", value=math.inf, note=None)  # None is a value (null), not an unset column
    write_json(tmp_path / "row.json", {"rows": [row]})
    assert json.loads((tmp_path / "row.json").read_text()) == {"rows": [{"name": "a", "note": None, "value": math.inf}]}
    assert row | {"value": 2.0} == {"name": "a", "value": 2.0, "note": None}
    assert {"id": 1} | row == {"id": 1, "name": "a", "value": math.inf, "note": None}


def test_rows_are_frozen():
    with pytest.raises(AttributeError):
        Pair(name="a", value=1.0).value = 2.0  # type: ignore[misc]


cells = st.one_of(st.integers(), st.floats(allow_nan=True), st.text(max_size=5), st.none())


@given(st.lists(st.tuples(st.text(max_size=4), cells, st.one_of(st.none(), st.text(max_size=4))), max_size=6))
def test_a_csv_of_rows_is_byte_identical_to_one_of_the_dicts(tmp_path_factory, values):
    """The writer's bytes are those of the plain dicts the rows replace (an unset column: a dict without the key)."""
    dicts = [{"name": n, "value": v} | ({} if note is None else {"note": note}) for n, v, note in values]
    rows = [Pair.of(d) for d in dicts]
    out = tmp_path_factory.mktemp("csv")
    write_csv(out / "dicts.csv", dicts, Pair.columns())
    write_csv(out / "rows.csv", rows, Pair.columns())
    assert (out / "rows.csv").read_bytes() == (out / "dicts.csv").read_bytes()
    assert [dict(r) for r in rows] == dicts
