"""The schemas' building blocks: a field's words from its table, and null added right.

Why: every description in the shipped schemas goes through `described`/`describe_all`, so a
table that names a field its block lacks (or misses one it has) must stop the build rather
than ship a field without words; and `nullable` must let null through without loosening
what a value of the field's type must be.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from anvil_metrics.checks import docverify
from anvil_metrics.schemas.parts import (
    COUNT,
    KEY,
    UNIT,
    describe_all,
    described,
    document,
    keyed,
    nullable,
    obj,
)
from anvil_metrics.summary import fields as summary_fields


def test_described_puts_the_unit_first_and_beside() -> None:
    assert described(COUNT, "ms", "how long") == {**COUNT, "description": "ms: how long",
                                                  UNIT: "ms"}
    assert described(COUNT, "", "how many") == {**COUNT, "description": "how many"}
    assert keyed("<model>", COUNT, "", "per model") == {KEY: "<model>", **COUNT,
                                                        "description": "per model"}


def test_a_table_must_name_exactly_the_blocks_fields() -> None:
    props = {"a": COUNT, "b": COUNT}
    assert describe_all(props, {"a": ("", "x"), "b": ("s", "y")})["b"]["description"] == "s: y"
    with pytest.raises(AssertionError, match=r"\['b'\]"):
        describe_all(props, {"a": ("", "x")})
    with pytest.raises(AssertionError, match=r"\['c'\]"):
        obj(props, text={"a": ("", "x"), "b": ("", "y"), "c": ("", "z")})


def test_nullable_lets_null_through_and_keeps_the_rest() -> None:
    s = nullable(obj({"n": COUNT}, ("n",)))
    v = Draft202012Validator(s)
    assert v.is_valid(None) and v.is_valid({"n": 1})
    assert not v.is_valid({"n": -1}) and not v.is_valid({}) and not v.is_valid("x")
    with pytest.raises(AssertionError):
        nullable({"anyOf": [COUNT]})


def test_a_document_names_its_file() -> None:
    d = document("anvil-serving.checks/v1", "words", obj({}))
    assert d["$id"] == "urn:anvil-metrics:schema:checks-v1.schema.json"
    assert (d["title"], d["description"], d["type"]) == ("anvil-serving.checks/v1", "words",
                                                         "object")
    Draft202012Validator.check_schema(d)


UNITS = {"", "ms", "s", "tok", "tok/s", "req/s", "%", "ratio", "chunks", "chunks/s", "rows",
         "jobs/h", "J", "W", "J/tok", "J/req", "tok/J", "USD/Mtok", "USD", "h", "B", "GB/s"}


@pytest.mark.parametrize("module", [summary_fields, docverify])
def test_every_table_entry_is_a_unit_and_words(module: Any) -> None:
    """The tables the summary's and checks file's schemas take their words from
    (`summary/fields.py`, `checks/docverify.py`): each entry a known unit (or none) and one
    sentence, no period."""
    names = re.findall(r"^([A-Z_]+): Text = ", inspect.getsource(module), re.MULTILINE)
    tables = {name: getattr(module, name) for name in names}
    assert len(tables) >= 5
    for name, table in tables.items():
        for field, (unit, text) in table.items():
            assert unit in UNITS, (name, field, unit)
            assert text.strip() and text == text.strip() and not text.endswith("."), (
                name, field)


def test_every_benchmark_field_has_a_unit_and_words() -> None:
    """The benchmark's words come from its typed definitions (`fieldtypes.described`):
    every property a known unit (or none) and one sentence, no period, no line break."""
    from anvil_metrics.schemas.build import benchmark_schema

    seen = 0

    def walk(node: Any, path: str) -> None:
        nonlocal seen
        if not isinstance(node, dict):
            return
        for name, child in (node.get("properties") or {}).items():
            text = child.get("description", "")
            assert child.get(UNIT, "") in UNITS, (path, name)
            assert text.strip() and text == text.strip() and not text.endswith("."), (
                path, name)
            assert "\n" not in text, (path, name)
            seen += 1
            walk(child, f"{path}.{name}")
        for key in ("items", "additionalProperties"):
            walk(node.get(key), f"{path}[]")

    walk(benchmark_schema(), "")
    assert seen > 200
