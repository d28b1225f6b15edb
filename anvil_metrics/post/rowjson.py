"""Writing `request_timings` from columns, as orjson would write the rows as dicts.

Why: a million rows as Python dicts are ~2.6 GB; the writer turns the columns
(`derive.RowColumns`) into the document's text a batch at a time instead. What it writes is
exactly `jsonio.dumps_strict(doc, option=JSON_OPTIONS)` of the plain document: orjson itself
formats every value (`OPT_SERIALIZE_NUMPY`: a float64 element as the Python float), and the
row's fixed text is orjson's layout (2-space indent, sorted keys). That layout is checked
where it is used: `json_chunks` renders the first batch of rows both ways and falls back to
orjson of the plain rows, batch by batch, if they ever differ (a future orjson that lays rows
out otherwise is slower to write, never wrong).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np
import orjson

from anvil_metrics.jsonio import JSON_OPTIONS, dumps_strict
from anvil_metrics.post.derive import RowColumns

ROW_BATCH = 1024  # rows turned into JSON at a time (small batches stay in the CPU caches)
SMALL_COUNT = 1 << 15  # a count column below it has its values' texts made once
_PLACEHOLDER = b'\n  "request_timings": []'  # the top-level key: 2 spaces of indent


def json_chunks(doc: dict[str, Any], rows: RowColumns) -> Iterator[bytes]:
    """`dumps_strict({**doc, "request_timings": rows.row_dicts()}, option=JSON_OPTIONS)`,
    in pieces: the document around an empty `request_timings`, then the rows a batch at a
    time. Raises ValueError, before anything is yielded, for a value strict JSON cannot
    hold."""
    for name, column in rows.floats.items():  # NaN is null; ±inf cannot be written
        if np.isinf(column).any():
            raise ValueError(f"refusing to write non-strict JSON: request_timings "
                             f"{name} holds ±inf")
    head = dumps_strict({**doc, "request_timings": []}, option=JSON_OPTIONS)
    n = len(rows)
    if n == 0:
        yield head
        return
    at = head.find(_PLACEHOLDER)
    if at < 0 or head.find(_PLACEHOLDER, at + 1) >= 0:
        raise AssertionError("request_timings placeholder not found exactly once")
    yield head[:at] + b'\n  "request_timings": ['
    text = _RowText.of(rows)
    render = _rows_json if _template_matches(text, rows) else _rows_orjson
    for first in range(0, n, ROW_BATCH):
        yield render(text, first, min(n, first + ROW_BATCH))
    yield b"\n  ]" + head[at + len(_PLACEHOLDER):]


def _template_matches(text: _RowText, rows: RowColumns) -> bool:
    """The template's text of the first batch is orjson's."""
    stop = min(len(rows), ROW_BATCH)
    return _rows_json(text, 0, stop) == _rows_orjson(text, 0, stop)


def _rows_orjson(text: _RowText, first: int, stop: int) -> bytes:
    """Rows [first, stop) as orjson writes them inside the document (the plain way)."""
    inner = orjson.dumps({"r": text.rows.row_dicts(first, stop)}, option=JSON_OPTIONS)
    # rows sit at 4 spaces of indent in {"r": [...]}, as in the document
    body = inner[inner.index(b"[") + 1:inner.rindex(b"]")].rstrip(b"\n ")
    return body if first == 0 else b"," + body




# A row as orjson writes it inside the document (OPT_INDENT_2 | OPT_SORT_KEYS: keys sorted,
# the row at 4 spaces of indent, its fields at 6): `cached_tokens` — first in sorted order —
# only where reported, then every other field with orjson's text for its value.
_ROW_OPEN = b",\n    {\n"  # the first row of all has no comma
_ROW_CACHED = b'      "cached_tokens": '
_ROW_CLOSE = b"\n    }"
_SOURCE_JSON = (b'"chunks"', b'"usage"')  # by `usage_source`


def _key(name: str) -> bytes:
    return b'      "%s": ' % name.encode()


class _RowText(NamedTuple):
    """A RowColumns readied for `_rows_json` (whole columns, made once per write).

    A row's text is its opening (the separator before it, the brace, where reported the
    whole `cached_tokens` line, and the first other field's key: `opening`, `cached_line`),
    then for each other field in sorted order its value followed by what comes after it
    (the next field's key, or the closing brace): `fields`, one `_Field` each. A field null
    in every row (a mix's, in a run without one) is text that never varies: it joins the
    text before it. `cached` / `cached_shown`: `cached_tokens` and where the row has it;
    `openings`: the rows' openings by value, where its values are small.
    """

    rows: RowColumns
    opening: bytes
    cached_line: bytes
    fields: list[_Field]
    cached: Any
    cached_shown: Any
    openings: _Field | None  # every row's opening, by value (small cached_tokens)

    @classmethod
    def of(cls, rows: RowColumns) -> _RowText:
        keys = sorted(rows.fields())
        assert keys[0] == "cached_tokens"
        opening = _ROW_OPEN + _key(keys[1])
        fields: list[_Field] = []
        after = [b",\n" + _key(k) for k in keys[2:]] + [_ROW_CLOSE]
        for name, text_after in zip(keys[1:], after, strict=True):
            field = _Field.of(rows, name, text_after)
            if field is not None:
                fields.append(field)
            elif fields:  # null in every row: its text joins what comes before it
                fields[-1] = fields[-1]._replace(after=fields[-1].after + b"null" + text_after)
            else:
                opening += b"null" + text_after
        return cls(rows, opening, _ROW_OPEN + _ROW_CACHED, fields,
                   rows.counts["cached_tokens"], rows.present["cached_tokens"],
                   _openings(opening, rows.counts["cached_tokens"],
                             rows.present["cached_tokens"]))


def _openings(opening: bytes, cached: Any, shown: Any) -> _Field | None:
    """Every row's opening by `cached_tokens` (the last: not reported), when its values
    are small (`SMALL_COUNT`): a batch's openings are one lookup."""
    top = int(cached[shown].max()) if shown.any() else 0
    if top >= SMALL_COUNT:
        return None
    key = opening[len(_ROW_OPEN):]
    texts = [b"%s%s%d,\n%s" % (_ROW_OPEN, _ROW_CACHED, v, key) for v in range(top + 1)]
    return _Field(np.where(shown, cached, top + 1), None, b"",
                  np.array([*texts, opening], dtype=object))


class _Field(NamedTuple):
    """One field's column — int64 or float64 (orjson writes NaN as null) —, where it is
    null (a bool array, or None), the text that follows each value, and for a column of
    small whole numbers (or `output_token_source`, by `usage_source`) every value's text
    with what follows it, by value (the last: null), so a batch's are one lookup."""

    column: Any
    null: Any
    after: bytes
    texts: Any = None

    @classmethod
    def of(cls, rows: RowColumns, name: str, after: bytes) -> _Field | None:
        """None for a field null in every row."""
        if name == "output_token_source":
            return cls(rows.usage_source.astype(np.intp), None, after,
                       np.array([_SOURCE_JSON[0] + after, _SOURCE_JSON[1] + after]))
        if name in rows.floats:
            column = rows.floats[name]
            if len(column) and np.isnan(column).all():
                return None
            return cls(column, None, after)
        present = rows.present.get(name)
        column, null = rows.counts[name], None if present is None else ~present
        if null is not None and len(column) and null.all():
            return None
        top = int(column.max()) if len(column) else 0
        if top >= SMALL_COUNT:
            return cls(column, null, after)
        texts = np.array([b"%d%s" % (i, after) for i in range(top + 1)] + [b"null" + after],
                         dtype=object)
        return cls(column if null is None else np.where(null, top + 1, column), None, after,
                   texts)


def _json_values(column: Any) -> bytes:
    """orjson's text of a numeric array's elements, `,`-separated (orjson writes a float64
    element as it writes the Python float, NaN as null)."""
    return orjson.dumps(np.ascontiguousarray(column),
                        option=orjson.OPT_SERIALIZE_NUMPY)[1:-1]


def _pieces(field: _Field, first: int, stop: int) -> list[bytes]:
    """Each value of rows [first, stop) of `field`, followed by its text after it."""
    column = field.column[first:stop]
    if field.texts is not None:
        return field.texts[column].tolist()
    after, null = field.after, None if field.null is None else field.null[first:stop]
    # every `,` ends a value: it becomes `after`, and `\0` marks where to cut
    pieces = (_json_values(column).replace(b",", after + b"\0") + after).split(b"\0")
    if null is not None:
        for i in np.flatnonzero(null).tolist():
            pieces[i] = b"null" + after
    return pieces


def _rows_json(text: _RowText, first: int, stop: int) -> bytes:
    """Rows [first, stop) as they appear in the document's `request_timings`, each preceded
    by `,\n` (the first row of all by `\n` alone).

    Each field's column becomes its values' texts with what follows each (`_pieces`: one
    orjson call, one replace and one split a column), put in every row's slot with one
    slice assignment, and all are joined in one go: no Python code runs per row, only per
    null count. Small batches (`ROW_BATCH`) keep the objects a row makes in the CPU caches,
    which measured faster than larger ones.
    """
    n, width = stop - first, len(text.fields) + 1
    out: list[bytes | None] = [None] * (n * width)
    # The openings: the plain one, or with the `cached_tokens` line where the row has it
    # (the lines come from one replace of the reported values' separators)
    shown = text.cached_shown[first:stop]
    if text.openings is not None:
        openings = _pieces(text.openings, first, stop)
    elif shown.any():
        opening = np.full(n, text.opening, dtype=object)
        line, key = text.cached_line, text.opening[len(_ROW_OPEN):]
        cached = _json_values(text.cached[first:stop][shown])
        opening[shown] = (line + cached.replace(b",", b",\n" + key + b"\0" + line)
                          + b",\n" + key).split(b"\0")
        openings = opening.tolist()
    else:
        openings = [text.opening] * n
    if first == 0:
        openings[0] = openings[0][1:]
    out[0::width] = openings
    for slot, field in enumerate(text.fields, start=1):
        out[slot::width] = _pieces(field, first, stop)
    return b"".join(out)  # type: ignore[arg-type]  # every slot is filled
