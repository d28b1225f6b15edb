"""fieldtypes: a definition's breach named by path in anvil's words, and its JSON Schema
written out whole (no `$ref`), with null joined to a single type."""

from __future__ import annotations

from typing import Annotated, Literal

import jsonschema
import pytest
from msgspec import UNSET, Struct, UnsetType

from anvil_metrics.fieldtypes import (
    COUNT_LIMIT,
    UNIT,
    Count,
    Figure,
    Stamp,
    described,
    fmt,
    problems,
    schema,
)


class Phases(Struct, forbid_unknown_fields=True):
    """where each request was when it was closed"""

    headers: Annotated[Count, described("", "closed before the response head")]


class Block(Struct, forbid_unknown_fields=True):
    """a block"""

    aborted: Annotated[Count, described("", "requests closed")]
    share: Annotated[Figure | None, described("", "aborted / requests")]
    phases: Annotated[Phases, described("", "where")]
    kind: Literal["a", "b"] | None
    since: Annotated[Stamp | UnsetType, described("ms", "added later")] = UNSET


GOOD = {"aborted": 3, "share": 0.5, "phases": {"headers": 1}, "kind": None}


@pytest.mark.parametrize(("change", "line"), [
    ({"aborted": -1}, "cancel.aborted: expected an integer >= 0, file has -1"),
    ({"aborted": COUNT_LIMIT}, f"cancel.aborted: expected an integer <= {COUNT_LIMIT - 1}"
                               f", file has {COUNT_LIMIT}"),
    ({"aborted": True}, "cancel.aborted: expected an integer, file has true"),
    ({"share": "x"}, 'cancel.share: expected a number or null, file has "x"'),
    ({"share": -0.5}, "cancel.share: expected a number >= 0.0, file has -0.5"),
    ({"phases": {"headers": 1, "z": 2}}, "cancel.phases.z: unknown field"),
    ({"phases": {}}, "cancel.phases.headers: missing"),
    ({"since": 2**62}, f"cancel.since: expected an integer <= {2**62 - 1}, file has {2**62}"),
])
def test_a_breach_is_one_line_naming_the_path_the_rule_and_the_value(change, line):
    assert problems(GOOD, Block, "cancel") == []
    assert problems({**GOOD, **change}, Block, "cancel") == [line]


def test_a_wrong_container_and_a_missing_field_at_the_top():
    assert problems([1], Block, "cancel") == ["cancel: expected an object, file has [1]"]
    assert problems({k: v for k, v in GOOD.items() if k != "kind"}, Block, "cancel") == [
        "cancel.kind: missing"]
    assert problems({**GOOD, "x": 1}, Block, "") == ["x: unknown field"]


def test_the_schema_is_whole_and_accepts_what_the_model_accepts():
    s = schema(Block)
    assert "$ref" not in str(s) and "$defs" not in s
    assert s["description"] == "a block"
    assert s["properties"]["share"]["type"] == ["number", "null"]
    assert s["properties"]["kind"] == {"enum": ["a", "b", None]}
    assert s["properties"]["since"][UNIT] == "ms"
    assert s["properties"]["since"]["description"] == "ms: added later"
    assert s["properties"]["phases"]["required"] == ["headers"]
    assert s["required"] == ["aborted", "share", "phases", "kind"]
    jsonschema.validate(GOOD, s)
    for bad in ({**GOOD, "aborted": -1}, {**GOOD, "x": 1}, {**GOOD, "share": "x"}):
        assert problems(bad, Block, "")
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, s)


def test_fmt_shows_json_text_cut_short():
    assert fmt(0.1) == "0.1" and fmt(None) == "null" and fmt({"b": 1, "a": [True]}) == (
        '{"a":[true],"b":1}')
    assert fmt("x" * 500).endswith("...") and len(fmt("x" * 500)) == 200


class Entry(Struct):
    """an entry with names from a list"""

    kind: Annotated[Literal["a", "b"], described("", "which")]
    phase: Literal["x", "y"] | None = None


class Holder(Struct):
    """entries, one of them optional"""

    one: Annotated[Entry | None, described("", "one")] = None
    many: list[Entry] = []


def test_a_value_outside_a_literal_names_the_values_allowed():
    assert problems({"one": {"kind": "z"}}, Holder, "") == [
        'one.kind: expected one of ["a","b"], file has "z"']
    assert problems({"one": {"kind": "a", "phase": "q"}}, Holder, "doc") == [
        'doc.one.phase: expected one of ["x","y",null], file has "q"']
    assert problems({"many": [{"kind": "a"}, {"kind": "q"}]}, Holder, "") == [
        'many[1].kind: expected one of ["a","b"], file has "q"']
