"""A row of `request_timings` as one typed definition, generated from the metric catalogue.

Why: `anvil verify` reads a million rows; decoding them with msgspec into `Row` checks every
field's JSON type and bounds as it parses, in C, where parsing them into dicts and checking
each value in Python took three times as long. Each field's type, unit and definition come
from its `catalog.RowField` (one statement of a metric: `catalog.py`), so `Row` is also
where the rows' JSON Schema and their documentation can be taken from.

`Row` says what a row holds: a count is a whole number 0 <= n < 2**53; a duration a
number >= 0; a derived value a number; `null` only where the catalogue says a field may be
null; `cached_tokens` only where the server reported it; a field added to anvil after a
file was written absent from every one of its rows. Rows are read with `_Strict`, the same
definition save that a JSON integer is refused where the catalogue has a float (anvil
writes a float as one: `5.0`, never `5`; `verify` names such a value), from a file's text
(`decode`) or from parsed values (`convert`), and `columns` gives them as the arrays of
`derive.RowColumns` — or None for rows that are not what `Row` says (verify's row-by-row
checks then name each problem).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
import numpy as np
from msgspec import UNSET, Meta, UnsetType

from anvil_metrics import catalog
from anvil_metrics.fieldtypes import Count, described

_NO_INT = Annotated[int, Meta(ge=1, le=0)]  # no integer is one: refused where a float is due


def _field(f: catalog.RowField, strict: bool) -> tuple[Any, ...]:
    """(name, type, default if any) of a row field."""
    if f.kind == "source":
        kind: Any = Literal[catalog.OUTPUT_TOKEN_SOURCES]
    elif f.kind == "count":
        kind = Count
    else:
        kind = Annotated[float, Meta(ge=0)] if f.kind == "duration" else float
        if strict:
            kind = kind | _NO_INT
    if f.nullable:
        kind = kind | None
    words = described(f.unit, _words(f))
    if f.presence == "always":
        return f.name, Annotated[kind, words]
    return f.name, Annotated[kind | UnsetType, words], UNSET


def _words(f: catalog.RowField) -> str:
    """A row field's definition as the schema and docs give it: the catalogue's words,
    where it comes from (its formula, or what measured it) and whether it is anvil's."""
    how = f"derived: {f.formula}" if f.derived else f"measured: {f.source}"
    return (f"{f.description}; {how}"
            + (" (anvil's added field)" if f.presence == "added" else "")
            + (" (absent when the server does not report it)"
               if f.presence == "reported" and "absent" not in how else ""))


def _row_struct(name: str, strict: bool) -> Any:
    return msgspec.defstruct(name, [_field(f, strict) for f in catalog.ROW], kw_only=True,
                             forbid_unknown_fields=True, gc=False, module=__name__)


Row = _row_struct("Row", strict=False)
_Strict = _row_struct("StrictRow", strict=True)
_DECODE = msgspec.json.Decoder(list[_Strict]).decode
astuple = msgspec.structs.astuple


def decode(text: bytes) -> list[Any] | None:
    """The rows of `text`, a JSON array of them, or None if it is not one of rows."""
    try:
        return _DECODE(text)
    except msgspec.MsgspecError:
        return None


def convert(rows: Any) -> list[Any] | None:
    """`rows` (parsed JSON values) as rows, or None if they are not a list of rows."""
    try:
        return msgspec.convert(rows, list[_Strict], strict=True)
    except msgspec.MsgspecError:
        return None


Columns = tuple[dict[str, Any], dict[str, Any], dict[str, Any], Any, frozenset[str]]


def columns(rows: list[Any], parsed: bool = False) -> Columns | None:
    """`rows` as `derive.RowColumns`'s arrays: (floats, counts, present, usage_source,
    absent), or None when they do not all have the same fields, a float is not finite (a
    `parsed` value may be NaN; JSON text holds no NaN), or the added fields they lack are
    not those of an older file (`catalog.absent_given`)."""
    n = len(rows)
    # each field's values, a row at a time (the rows' objects lie in the order they were made)
    values = dict(zip(catalog.ROW_FIELDS, zip(*map(astuple, rows), strict=True), strict=True)
                  ) if n else {name: () for name in catalog.ROW_FIELDS}
    doubles: dict[str, Any] = {}
    for name in (*catalog.FLOAT_FIELDS, *catalog.OPTIONAL_COUNT_FIELDS):
        col = _doubles(values[name])  # null as NaN (counts below 2**53 are exact)
        if col is None:  # a field left out of some rows (UNSET)
            if name == "cached_tokens":  # where the server did not report it
                col = _doubles(tuple(None if v is UNSET else v for v in values[name]))
            elif name not in catalog.ADDED or values[name].count(UNSET) != n:
                return None  # an added field in some rows only
        doubles[name] = col
    absent = frozenset(name for name, col in doubles.items() if col is None)
    if catalog.absent_given(set(catalog.ROW_FIELDS) - absent) is None:
        return None  # not the fields an older file lacks
    floats = {name: np.full(n, np.nan) if name in absent else doubles[name]
              for name in catalog.FLOAT_FIELDS}
    for name, col in floats.items():
        if np.isinf(col).any() or (parsed and name not in absent and np.isnan(col).sum()
                                   != values[name].count(None)):
            return None  # ±inf (1e400 in a file) or a parsed NaN
    counts = {name: np.array(values[name], dtype=np.int64) for name in catalog.COUNT_FIELDS}
    present = {}
    for name in catalog.OPTIONAL_COUNT_FIELDS:
        col = np.full(n, np.nan) if name in absent else doubles[name]
        present[name] = ~np.isnan(col)
        counts[name] = np.where(present[name], col, 0).astype(np.int64)
    usage = np.array(values["output_token_source"], dtype=object) == "usage"
    return floats, counts, present, usage.astype(bool), absent


def _doubles(values: tuple[Any, ...]) -> Any:
    """A column as float64, NaN for null; None where a row lacks the field (UNSET)."""
    try:
        return np.array(values, dtype=np.float64)
    except TypeError:
        return None
