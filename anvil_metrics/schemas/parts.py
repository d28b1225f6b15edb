"""The pieces every one of anvil's JSON Schemas is built of, and how a field gets its words.

Why its own module: the three schemas (`build.py`'s benchmark, `verdicts.py`'s summary and
checks file) share the same few types and one rule for descriptions — each property's words
come from where it is defined (the benchmark's typed definitions, `fieldtypes.described`;
the tables `summary/fields.py` and `checks/docverify.py` keep), and a block whose keys
differ from its table's is a build error, not a field without a definition.

Two annotations beside the standard ones, both ignored by validators: `x-unit`, a field's
unit (its description starts with it too), and `x-key`, what the keys of a map stand for
(`<model>`), so that `docs/fields.md` can name a path through it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from anvil_metrics.checks.docverify import SCHEMA as CHECKS_SCHEMA
from anvil_metrics.post.schema import SCHEMA as BENCHMARK_SCHEMA
from anvil_metrics.records import RAW_SCHEMA
from anvil_metrics.summary.folder import SCHEMA as SUMMARY_SCHEMA

DRAFT = "https://json-schema.org/draft/2020-12/schema"
FILES = {BENCHMARK_SCHEMA: "benchmark-v1.schema.json",
         SUMMARY_SCHEMA: "public-summary-v1.schema.json",
         CHECKS_SCHEMA: "checks-v1.schema.json",
         RAW_SCHEMA: "requests-v1.schema.json"}
UNIT = "x-unit"
KEY = "x-key"
Text = Mapping[str, tuple[str, str]]  # field -> (unit, definition), as the tables hold them

COUNT = {"type": "integer", "minimum": 0}
NUMBER = {"type": "number"}
FIGURE = {"type": "number", "minimum": 0}
STRING = {"type": "string"}
BOOLEAN = {"type": "boolean"}
STRINGS = {"type": "array", "items": STRING}
REASONS = {"type": "object", "additionalProperties": STRING}
PAIR = {"type": "array", "items": NUMBER, "minItems": 2, "maxItems": 2}


def or_null(s: dict[str, Any]) -> dict[str, Any]:
    """`s`, or null (as a type list where `s` is one type, else anyOf)."""
    if set(s) <= {"type", "minimum", "exclusiveMaximum", "pattern"} and isinstance(
            s.get("type"), str):
        return {**s, "type": [s["type"], "null"]}
    if "enum" in s:
        return {**s, "enum": [*s["enum"], None]}
    return {"anyOf": [s, {"type": "null"}]}


def nullable(s: dict[str, Any]) -> dict[str, Any]:
    """`s` with null added to its one type, whatever else it says (its other keywords apply
    to values of that type only, so null passes them)."""
    assert isinstance(s.get("type"), str), s
    return {**s, "type": [s["type"], "null"]}


def anchored(pattern: str) -> str:
    return f"^(?:{pattern})$"


def described(s: dict[str, Any], unit: str, text: str) -> dict[str, Any]:
    """`s` with its description (the unit first, where it has one) and `x-unit`."""
    out = {**s, "description": f"{unit}: {text}" if unit else text}
    if unit:
        out[UNIT] = unit
    return out


def describe_all(props: dict[str, Any], table: Text) -> dict[str, Any]:
    """Each of `props` described from `table`, which must name exactly the same fields."""
    if set(props) != set(table):
        raise AssertionError(f"the described fields differ from the block's: "
                             f"{sorted(set(props) ^ set(table))}")
    return {k: described(s, *table[k]) for k, s in props.items()}


def obj(props: dict[str, Any], required: Any = (), closed: bool = False,
        text: Text | None = None, **more: Any) -> dict[str, Any]:
    """An object schema of `props` (described from `text`, when given)."""
    out: dict[str, Any] = {"type": "object",
                           "properties": props if text is None else describe_all(props, text)}
    if required:
        out["required"] = list(required)
    if closed:
        out["additionalProperties"] = False
    out.update(more)
    return out


def document(which: str, description: str, body: dict[str, Any]) -> dict[str, Any]:
    """A whole schema file: the draft, its id and title, and the document's object."""
    return {"$schema": DRAFT, "$id": f"urn:anvil-metrics:schema:{FILES[which]}",
            "title": which, "description": description, **body}


def keyed(name: str, s: dict[str, Any], unit: str, text: str) -> dict[str, Any]:
    """The schema of a map's values whose keys stand for `name` (`<model>`), described."""
    return {KEY: name, **described(s, unit, text)}
