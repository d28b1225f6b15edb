"""The vocabulary every typed definition of anvil's files is written in (msgspec).

Why one module: a field of `requests.jsonl` or of a `benchmark.json` block is defined once,
as a field of a `msgspec.Struct` with its type, its bounds, its unit and its definition
(`described`); from that one statement come the checks (`problems`: what `anvil verify`
and the raw reader refuse, by path, in the words the rest of anvil's messages use), the
shipped JSON Schemas (`schema`) and `docs/fields.md`. A rule that a type cannot say (one
stamp before another, a figure recomputed from the rows) stays code, in the block's module.

Why msgspec: it validates while it decodes, in C (a raw request line in ~1 µs against
~2 µs for `orjson.loads` into dicts and ~5.7 µs for pydantic v2's `model_validate_json`,
measured on the same 100k lines of `benchmarks/postprocess_scale.py`'s file), and it
emits JSON Schema from the same Structs; it is one small wheel with no dependencies.

    Count     a whole number 0 <= n < 2**53 (exact as a double)
    Stamp     a perf_counter_ns stamp or clock offset, |n| < 2**62 (sums and differences
              of two fit int64)
    Figure    a number >= 0 (JSON int or float)
    Number    any finite JSON number
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin, get_type_hints

import msgspec
import orjson
from msgspec import Meta

from anvil_metrics.jsonio import show

COUNT_LIMIT = 2**53
STAMP_LIMIT = 2**62

UNIT = "x-unit"  # a field's unit in a JSON Schema (ignored by validators)

Count = Annotated[int, Meta(ge=0, lt=COUNT_LIMIT)]
Stamp = Annotated[int, Meta(gt=-STAMP_LIMIT, lt=STAMP_LIMIT)]
Figure = Annotated[float, Meta(ge=0)]
Number = float


def described(unit: str, text: str, **constraints: Any) -> Meta:
    """A field's `Meta`: its definition (led by its unit where it has one, as every table
    and schema shows it), the unit again as `x-unit`, and any bounds."""
    return Meta(description=f"{unit}: {text}" if unit else text,
                extra_json_schema={UNIT: unit} if unit else None, **constraints)


# --- checks ---------------------------------------------------------------------------------

_AT = re.compile(r" - at `\$(?P<path>[^`]*)`$")
_EXPECTED = re.compile(r"^Expected `(?P<what>[^`]*)`(?P<bound>[^,]*)(, got `(?P<got>[^`]*)`)?$")
_UNKNOWN = re.compile(r"^Object contains unknown field `(?P<name>[^`]*)`$")
_MISSING = re.compile(r"^Object missing required field `(?P<name>[^`]*)`$")
_WORDS = {"int": "an integer", "float": "a number", "str": "a string", "bool": "true or false",
          "object": "an object", "array": "a list", "null": "null"}


def problems(value: Any, model: Any, path: str) -> list[str]:
    """[] when `value` (plain JSON data) is what `model` (a Struct or any msgspec type)
    describes; else one line for the first breach, named by its path under `path`: `…: missing`,
    `…: unknown field`, or `…: expected …, file has …` (the value as the file shows it)."""
    try:
        msgspec.convert(value, model, strict=True)
    except msgspec.ValidationError as exc:
        return [breach(str(exc), value, path, model)]
    return []


def breach(message: str, value: Any, path: str, model: Any = None) -> str:
    """msgspec's `message` about `value` as anvil words a problem, under `path` (with the
    `model` it was checked against, a value outside a Literal's names them)."""
    at = _AT.search(message)
    sub = at.group("path") if at else ""
    text = message[:at.start()] if at else message
    where = _join(path, sub)
    if m := _MISSING.match(text):
        return f"{_join(path, f'{sub}.{m[1]}')}: missing"
    if m := _UNKNOWN.match(text):
        return f"{_join(path, f'{sub}.{m[1]}')}: unknown field"
    if m := _EXPECTED.match(text):
        found, ok = _lookup(value, sub)
        what = " or ".join(_WORDS.get(w.strip(), w.strip()) for w in m["what"].split("|"))
        shown = f", file has {fmt(found)}" if ok else ""
        return f"{where}: expected {what}{m['bound'].rstrip()}{shown}"
    if text.startswith("Invalid enum value") and (names := _names(model, sub)):
        return f"{where}: expected one of {fmt(names)}, file has {fmt(_lookup(value, sub)[0])}"
    return f"{where}: {text[:1].lower()}{text[1:]}"


def _names(model: Any, sub: str) -> list[Any] | None:
    """The values a Literal allows at msgspec's path `sub` inside `model` (None: not one)."""
    kind = model
    for m in _STEP.finditer(sub):
        kind = _bare(kind)
        if m.group(1) is not None:
            is_struct = isinstance(kind, type) and issubclass(kind, msgspec.Struct)
            kind = get_type_hints(kind, include_extras=True).get(m.group(1)) if (
                is_struct) else None
        else:
            kind = next(iter(get_args(kind)), None)  # a list's or tuple's items
    options = get_args(kind) if get_origin(kind) is Annotated else (kind,)
    options = get_args(options[0]) if get_origin(options[0]) in (Union, UnionType) else options
    names = [a for o in options if get_origin(o) is Literal for a in get_args(o)]
    return names + [None] * (type(None) in options) if names else None


def _bare(kind: Any) -> Any:
    """`kind` without Annotated and without a None beside it (`Annotated[X | None, …]`,
    `Annotated[X, …] | None`: X)."""
    for _ in range(2):
        if get_origin(kind) is Annotated:
            kind = get_args(kind)[0]
        others = [a for a in get_args(kind) if a is not type(None)]
        if get_origin(kind) in (Union, UnionType) and len(others) == 1:
            kind = others[0]
    return kind


FMT_MAX = 200  # characters of a value a message shows (a damaged file's may be megabytes)


def fmt(v: Any) -> str:
    """A value as it reads in the JSON file (floats with all their digits), cut to
    `FMT_MAX` characters."""
    if isinstance(v, float):
        return repr(v)
    try:
        text = orjson.dumps(v, option=orjson.OPT_SORT_KEYS).decode()
    except TypeError:  # not JSON, or nested deeper than orjson writes (and repr recurses)
        return show(v)
    return text if len(text) <= FMT_MAX else text[:FMT_MAX - 3] + "..."


def _join(path: str, sub: str) -> str:
    if not sub:
        return path or "document"
    return f"{path}{sub}" if path or sub.startswith("[") else sub.lstrip(".")


_STEP = re.compile(r"\.([^.\[]+)|\[(\d+)\]")


def _lookup(value: Any, sub: str) -> tuple[Any, bool]:
    """The value at msgspec's path `sub` (`.a[2].b`) inside `value`, and whether it exists."""
    for m in _STEP.finditer(sub):
        key, index = m.group(1), m.group(2)
        if key is not None and isinstance(value, Mapping) and key in value:
            value = value[key]
        elif index is not None and isinstance(value, list) and int(index) < len(value):
            value = value[int(index)]
        else:
            return None, False
    return value, True


# --- JSON Schema ------------------------------------------------------------------------------


def schema(model: Any) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of `model`, every `$ref` written out in place (each
    block's schema reads on its own, as `docs/fields.md` walks it) and `null` joined to a
    single type as a type list, as anvil's shipped schemas write it."""
    (out,), defs = msgspec.json.schema_components((model,), ref_template="#/$defs/{name}")
    return _inline(out, defs)


def _inline(node: Any, defs: Mapping[str, Any]) -> Any:
    if isinstance(node, list):
        return [_inline(x, defs) for x in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = _inline(defs[node["$ref"].rsplit("/", 1)[1]], defs)
        target.pop("title", None)
        rest = {k: _inline(v, defs) for k, v in node.items() if k != "$ref"}
        return {**target, **rest}
    out = {k: _inline(v, defs) for k, v in node.items()}
    out.pop("title", None)
    return _nullable(out)


def _nullable(node: dict[str, Any]) -> dict[str, Any]:
    """`anyOf: [{type: T, …}, {type: null}]` as `type: [T, "null"]` where T is one type
    (its other keywords apply to T's values only, so null passes them), and an enum or
    null as one enum with null in it."""
    options = node.get("anyOf")
    if not (isinstance(options, list) and len(options) == 2 and {"type": "null"} in options):
        return node
    other = options[0] if options[1] == {"type": "null"} else options[1]
    rest = {k: v for k, v in node.items() if k != "anyOf"}
    if isinstance(other.get("enum"), list) and "type" not in other:
        return {**rest, **other, "enum": [*other["enum"], None]}
    if not isinstance(other.get("type"), str):
        return node
    return {**rest, **other, "type": [other["type"], "null"]}
