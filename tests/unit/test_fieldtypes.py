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


COUNT = "a non-negative integer below 2**53"


@pytest.mark.parametrize(("change", "line"), [
    ({"aborted": -1}, f"cancel.aborted: expected {COUNT}, file has -1"),
    ({"aborted": COUNT_LIMIT}, f"cancel.aborted: expected {COUNT}, file has {COUNT_LIMIT}"),
    ({"aborted": True}, f"cancel.aborted: expected {COUNT}, file has true"),
    ({"share": "x"}, 'cancel.share: expected a non-negative number or null, file has "x"'),
    ({"share": -0.5}, "cancel.share: expected a non-negative number or null, file has -0.5"),
    ({"phases": {"headers": 1, "z": 2}}, "cancel.phases.z: unknown field"),
    ({"phases": {}}, "cancel.phases.headers: missing"),
    ({"since": 2**62}, f"cancel.since: expected an integer within ±2**62, file has {2**62}"),
    ({"kind": "c"}, 'cancel.kind: expected one of "a", "b" or null, file has "c"'),
    ({"kind": 1}, 'cancel.kind: expected one of "a", "b" or null, file has 1'),
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
    assert "description" not in s["properties"]["phases"]["properties"]["headers"] or (
        s["properties"]["phases"]["properties"]["headers"]["description"] ==
        "closed before the response head")
    assert s["properties"]["phases"]["description"] == "where"  # the field's, not its type's
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


class Holder(Struct, forbid_unknown_fields=True):
    """maps, pairs and flags"""

    sizes: dict[str, Count]
    pair: tuple[float, float] | None
    flag: bool | None


def test_a_maps_key_is_named_and_a_pair_and_a_flag_are_said_in_words():
    good = {"sizes": {"a": 1, "b": 2}, "pair": [1.0, 2.0], "flag": None}
    assert problems(good, Holder, "h") == []
    assert problems({**good, "sizes": {"a": 1, "b": "x"}}, Holder, "h") == [
        f'h.sizes.b: expected {COUNT}, file has "x"']
    assert problems({**good, "pair": [1.0]}, Holder, "h") == [
        "h.pair: expected a pair [a number, a number] or null, file has [1.0]"]
    assert problems({**good, "flag": "no"}, Holder, "h") == [
        'h.flag: expected true, false or null, file has "no"']


def test_every_breach_is_named_not_only_the_first():
    bad = {"aborted": -1, "share": "x", "phases": {"z": 1}, "kind": "c", "extra": 1}
    assert problems(bad, Block, "cancel") == [
        f"cancel.aborted: expected {COUNT}, file has -1",
        'cancel.share: expected a non-negative number or null, file has "x"',
        "cancel.phases.headers: missing", "cancel.phases.z: unknown field",
        'cancel.kind: expected one of "a", "b" or null, file has "c"',
        "cancel.extra: unknown field"]
    assert problems([GOOD, {**GOOD, "aborted": -2}], list[Block], "b") == [
        f"b[1].aborted: expected {COUNT}, file has -2"]


def test_fmt_shows_json_text_cut_short():
    assert fmt(0.1) == "0.1" and fmt(None) == "null" and fmt({"b": 1, "a": [True]}) == (
        '{"a":[true],"b":1}')
    assert fmt("x" * 500).endswith("...") and len(fmt("x" * 500)) == 200


class Entry(Struct):
    """an entry with names from a list"""

    kind: Annotated[Literal["a", "b"], described("", "which")]
    phase: Literal["x", "y"] | None = None


class Entries(Struct):
    """entries, one of them optional"""

    one: Annotated[Entry | None, described("", "one")] = None
    many: list[Entry] = []


def test_a_value_outside_a_literal_names_the_values_allowed():
    assert problems({"one": {"kind": "z"}}, Entries, "") == [
        'one.kind: expected one of "a", "b", file has "z"']
    assert problems({"one": {"kind": "a", "phase": "q"}}, Entries, "doc") == [
        'doc.one.phase: expected one of "x", "y" or null, file has "q"']
    assert problems({"many": [{"kind": "a"}, {"kind": "q"}]}, Entries, "") == [
        'many[1].kind: expected one of "a", "b", file has "q"']
