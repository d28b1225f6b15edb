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
"""

from __future__ import annotations

import functools
import re
import types
import typing
from collections.abc import Mapping
from typing import Annotated, Any, Union

import msgspec
import orjson
from msgspec import Meta

from anvil_metrics.jsonio import show

COUNT_LIMIT = 2**53
STAMP_LIMIT = 2**62

UNIT = "x-unit"  # a field's unit in a JSON Schema (ignored by validators)
SHAPE = "x-shape"  # a text field's shape in words ("like benchmark-YYYYMMDDTHHMMSSZ[-N]")

Count = Annotated[int, Meta(ge=0, lt=COUNT_LIMIT)]
Stamp = Annotated[int, Meta(gt=-STAMP_LIMIT, lt=STAMP_LIMIT)]
Figure = Annotated[float, Meta(ge=0)]


def described(unit: str, text: str, **constraints: Any) -> Meta:
    """A field's `Meta`: its definition (led by its unit where it has one, as every table
    and schema shows it), the unit again as `x-unit`, and any bounds. (A text's pattern is
    said in words by its own Meta's `x-shape`: `expected` reads it.)"""
    return Meta(description=f"{unit}: {text}" if unit else text,
                extra_json_schema={UNIT: unit} if unit else None, **constraints)


# --- checks ---------------------------------------------------------------------------------

_AT = re.compile(r" - at (?P<key>`key` in )?`\$(?P<path>[^`]*)`$")
_MISSING = re.compile(r"^Object missing required field `(?P<name>[^`]*)`$")
_UNKNOWN = re.compile(r"^Object contains unknown field `(?P<name>[^`]*)`$")
_GOT = re.compile(r", got `(?P<got>[^`]*)`$")
_JSON_TYPES = {bool: "bool", int: "int", float: "float", str: "str", list: "array",
               dict: "object", type(None): "null"}


def problems(value: Any, model: Any, path: str) -> list[str]:
    """[] when `value` (plain JSON data) is what `model` (a Struct or any msgspec type)
    describes; else one line per breach, each named by its path under `path`: `…: missing`,
    `…: unknown field`, or `…: expected <what the definition allows>, file has <the value
    as the file shows it>`. msgspec decides (in C) and stops at the first breach; where it
    finds one, the value is walked field by field and item by item for every other."""
    try:
        msgspec.convert(value, model, strict=True)
    except msgspec.ValidationError as exc:
        return _every(value, model, path) or [breach(str(exc), value, model, path)]
    return []


def _every(value: Any, model: Any, path: str) -> list[str]:
    """Every breach of `value` against `model`, descending into Structs, lists and maps;
    a value of any other type is judged whole (`problems`)."""
    model = _bare(model, value)
    origin = typing.get_origin(model)
    if isinstance(model, type) and issubclass(model, msgspec.Struct) and isinstance(value,
                                                                                    dict):
        out = []
        config = model.__struct_config__
        for f in msgspec.structs.fields(model):
            if f.encode_name not in value:
                if f.required:
                    out.append(f"{_join(path, '.' + f.encode_name)}: missing")
                continue
            out += problems(value[f.encode_name], f.type, _join(path, "." + f.encode_name))
        if config.forbid_unknown_fields:
            known = {f.encode_name for f in msgspec.structs.fields(model)}
            out += [f"{_join(path, f'.{k}')}: unknown field" for k in value if k not in known]
        return out
    if origin is list and isinstance(value, list):
        (item,) = typing.get_args(model)
        return [p for i, v in enumerate(value) for p in problems(v, item, f"{path}[{i}]")]
    if origin is dict and isinstance(value, dict):
        key, item = typing.get_args(model)
        return [p for k, v in value.items()
                for p in problems(k, key, f"{path} key {fmt(k)}") + problems(
                    v, item, _join(path, f".{k}"))]
    return []


def _bare(model: Any, value: Any) -> Any:
    """`model` without its Annotated metadata, and of a union the member `value` should be
    (its Struct, list or map, where it is a dict or a list), else the union itself."""
    while typing.get_origin(model) is Annotated:
        model = typing.get_args(model)[0]
    if typing.get_origin(model) in (Union, types.UnionType):
        for member in typing.get_args(model):
            bare = _bare(member, value)
            shape = typing.get_origin(bare) or bare
            if (isinstance(value, dict) and (shape is dict or (
                    isinstance(shape, type) and issubclass(shape, msgspec.Struct)))) or (
                    isinstance(value, list) and shape is list):
                return bare
    return model


def breach(message: str, value: Any, model: Any, path: str) -> str:
    """msgspec's `message` about `value` (checked against `model`) in anvil's words, under
    `path`; what was expected is said from the model's JSON Schema, the one statement of
    what a field may hold."""
    at = _AT.search(message)
    sub = at["path"] if at else ""
    text = message[:at.start()] if at else message
    if m := _MISSING.match(text):
        return f"{_join(path, f'{sub}.{m[1]}')}: missing"
    if m := _UNKNOWN.match(text):
        return f"{_join(path, f'{sub}.{m[1]}')}: unknown field"
    got = _GOT.search(text)
    sub, found, ok = _locate(value, sub, got["got"] if got else None)
    node = _node_at(_schema_of(model), sub)
    if at is not None and at["key"]:
        keys = (node or {}).get("propertyNames") or {}
        return f"{_join(path, sub)}: a key is not allowed; keys are {expected(keys)}"
    if node is None:
        return f"{_join(path, sub)}: {text[:1].lower()}{text[1:]}"
    shown = f", file has {fmt(found)}" if ok else ""
    return f"{_join(path, sub)}: expected {expected(node)}{shown}"


def num(v: Any, spec: str) -> str:
    """A figure as the CLI's lines show it: `format(v, spec)`, or "null" for a missing one
    (missing is null, never 0)."""
    return "null" if v is None else format(v, spec)


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


_STEP = re.compile(r"\.([^.\[]+)|\[(\d+|\.\.\.)\]")


def _locate(value: Any, sub: str, got: str | None) -> tuple[str, Any, bool]:
    """msgspec's path `sub` (`.a[2][...].b`) inside `value`, with each map key (`[...]`,
    which msgspec does not name) found: the first key whose value is of the type msgspec
    `got`, else the first key. Returns (the path with keys named, the value there, whether
    it exists)."""
    out = ""
    steps = list(_STEP.finditer(sub))
    for n, m in enumerate(steps):
        key, index = m.group(1), m.group(2)
        if key is not None and isinstance(value, Mapping) and key in value:
            out, value = f"{out}.{key}", value[key]
        elif index == "..." and isinstance(value, Mapping) and value:
            last = n == len(steps) - 1
            name = next((k for k, v in value.items() if last and got is not None
                         and _JSON_TYPES.get(type(v)) == got), next(iter(value)))
            out, value = f"{out}.{name}", value[name]
        elif index not in (None, "...") and isinstance(value, list) and int(index) < len(value):
            out, value = f"{out}[{index}]", value[int(index)]
        else:
            return sub, None, False
    return out, value, True


def _node_at(node: Any, sub: str) -> Any:
    """The JSON Schema node at path `sub` (keys named) below `node`; None if it has none."""
    for m in _STEP.finditer(sub):
        key, index = m.group(1), m.group(2)
        if node is None:
            return None
        options = node.get("anyOf") or [node]
        node = next((n for n in options if n.get("type") in ("object", ["object", "null"])
                     or ("items" in n or "prefixItems" in n)), options[0])
        if key is not None:
            node = (node.get("properties") or {}).get(key, node.get("additionalProperties"))
        elif "prefixItems" in node and index.isdigit():
            items = node["prefixItems"]
            node = items[int(index)] if int(index) < len(items) else None
        else:
            node = node.get("items")
        node = node if isinstance(node, dict) else None
    return node


@functools.cache
def _schema_of(model: Any) -> dict[str, Any]:
    return schema(model)


def expected(node: Mapping[str, Any]) -> str:
    """What a JSON Schema node allows, in words: "a non-negative integer below 2**53",
    "a number or null", "one of "a", "b"", "a pair [a number, a number]", ..."""
    return _either(_allowed(node))


def _either(parts: list[str]) -> str:
    parts = list(dict.fromkeys(parts))
    return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} or {parts[-1]}"


def _allowed(node: Mapping[str, Any]) -> list[str]:
    if "anyOf" in node:
        return [w for option in node["anyOf"] for w in _allowed(option)]
    if "const" in node:
        return [fmt(node["const"])]
    if "enum" in node:
        values = [fmt(v) for v in node["enum"] if v is not None]
        return [f"one of {', '.join(values)}", *(["null"] if None in node["enum"] else [])]
    types = node.get("type", [])
    return [w for t in ([types] if isinstance(types, str) else types)
            for w in _one_type(t, node)] or ["any JSON value"]


def _limit(x: int | float) -> str:
    if isinstance(x, int) and x > 2**20 and (x & (x - 1)) == 0:
        return f"2**{x.bit_length() - 1}"
    return fmt(x)


def _one_type(t: str, node: Mapping[str, Any]) -> list[str]:
    if t == "boolean":
        return ["true", "false"]
    if t in ("integer", "number"):
        base = "an integer" if t == "integer" else "a number"
        lo, gt = node.get("minimum"), node.get("exclusiveMinimum")
        hi, lt = node.get("maximum"), node.get("exclusiveMaximum")
        if (lo, hi) == (-2**63, 2**63 - 1):  # a 64-bit integer: what JSON readers hold
            lo = hi = None
        if hi is not None and hi > 2**20 and (hi + 1) & hi == 0:  # <= 2**k - 1: below 2**k
            hi, lt = None, hi + 1
        words = []
        if lo == 0:
            base = "a non-negative integer" if t == "integer" else "a non-negative number"
        elif gt == 0:
            base = f"{base} > 0"
        elif gt is not None and lt is not None and -gt == lt:
            return [f"{base} within ±{_limit(lt)}"]
        elif lo is not None or gt is not None:
            words.append(f">= {_limit(lo)}" if lo is not None else f"> {_limit(gt)}")
        if lt is not None or hi is not None:
            words.append(f"below {_limit(lt)}" if lt is not None else f"<= {_limit(hi)}")
        return [" ".join([base, *words])]
    if t == "string":
        shape = node.get(SHAPE) or (f"matching {node['pattern']}" if "pattern" in node
                                    else None)
        return [f"a string {shape}" if shape else "a string"]
    if t == "array":
        if "prefixItems" in node:
            items = ", ".join(expected(i) for i in node["prefixItems"])
            return [f"a pair [{items}]" if len(node["prefixItems"]) == 2
                    else f"a list [{items}]"]
        size = node.get("minItems")
        if size is not None and size == node.get("maxItems"):
            return [f"a list of {size} items"]
        return ["a list"]
    return {"object": ["an object"], "null": ["null"]}.get(t, [t])


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
    if "$ref" in node:  # a Struct: its fields; the words are the field's, not its docstring's
        target = _inline(defs[node["$ref"].rsplit("/", 1)[1]], defs)
        target.pop("description", None)
        rest = {k: _inline(v, defs) for k, v in node.items() if k != "$ref"}
        return {**target, **rest}
    out = {k: _inline(v, defs) for k, v in node.items()}
    out.pop("title", None)
    if isinstance(out.get("enum"), list) and len(out["enum"]) == 1:
        out["const"] = out.pop("enum")[0]
    return _nullable(out)


def _nullable(node: dict[str, Any]) -> dict[str, Any]:
    """`anyOf: [{type: T, …}, {type: null}]` as `type: [T, "null"]` where T is one type
    (its other keywords apply to T's values only, so null passes them), and an enum or
    null as one enum with null in it."""
    options = node.get("anyOf")
    if not (isinstance(options, list) and len(options) == 2 and {"type": "null"} in options):
        return node
    other = options[0] if options[1] == {"type": "null"} else options[1]
    rest = {k: v for k, v in node.items() if k != "anyOf"}  # the field's words win
    if isinstance(other.get("enum"), list) and "type" not in other:
        return {**other, **rest, "enum": [*other["enum"], None]}
    if not isinstance(other.get("type"), str):
        return node
    return {**other, **rest, "type": [other["type"], "null"]}
