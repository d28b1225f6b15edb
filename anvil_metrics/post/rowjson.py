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
from itertools import chain
from typing import Any, NamedTuple

import numpy as np
import orjson

from anvil_metrics.jsonio import JSON_OPTIONS, dumps_strict
from anvil_metrics.post.derive import RowColumns

ROW_BATCH = 1024  # rows turned into JSON at a time (small batches stay in the CPU caches)
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
_SOURCE_JSON = np.array([b'"chunks"', b'"usage"'], dtype=object)  # by `usage_source`


class _RowText(NamedTuple):
    """A RowColumns readied for `_rows_json` (whole columns, made once per write).

    `template`: a row's text with a None wherever it varies: slot 0 is the row's opening
    (the separator before it, the brace and, where reported, the whole `cached_tokens`
    line); slot 2 * j is the value of the j-th of the other fields in sorted order, j ≥ 1.
    `values`: for each of those fields, its column — an int64 or float64 array (orjson
    writes NaN as null), or an object array of texts (`output_token_source`) — and where
    the column is null (a bool array, or None). `cached`/`cached_shown`: `cached_tokens`
    and where the row has it.
    """

    rows: RowColumns
    template: list[bytes | None]
    values: list[tuple[Any, Any]]
    cached: Any
    cached_shown: Any

    @classmethod
    def of(cls, rows: RowColumns) -> _RowText:
        keys = sorted(rows.fields())
        assert keys[0] == "cached_tokens"
        template: list[bytes | None] = [
            None,
            b'      "%s": ' % keys[1].encode(), None,
            *chain.from_iterable((b',\n      "%s": ' % k.encode(), None) for k in keys[2:]),
            b"\n    }",
        ]
        values: list[tuple[Any, Any]] = []
        for name in keys[1:]:
            if name in rows.floats:
                values.append((rows.floats[name], None))
            elif name == "output_token_source":
                values.append((_SOURCE_JSON[rows.usage_source.astype(np.intp)], None))
            else:
                present = rows.present.get(name)
                values.append((rows.counts[name], None if present is None else ~present))
        return cls(rows, template, values, rows.counts["cached_tokens"],
                   rows.present["cached_tokens"])


def _json_values(column: Any) -> bytes:
    """orjson's text of a numeric array's elements, `,`-separated (orjson writes a float64
    element as it writes the Python float, NaN as null)."""
    return orjson.dumps(np.ascontiguousarray(column),
                        option=orjson.OPT_SERIALIZE_NUMPY)[1:-1]


def _rows_json(text: _RowText, first: int, stop: int) -> bytes:
    """Rows [first, stop) as they appear in the document's `request_timings`, each preceded
    by `,\n` (the first row of all by `\n` alone).

    The template repeated once per row, each column's texts put in its slots with one
    slice assignment, all joined in one go: no Python code runs per row, only per null
    count. What is left is orjson, one `split` per column and the join; small batches
    (`ROW_BATCH`) keep the ~17 bytes objects a row makes in the CPU caches, which measured
    faster than larger ones.
    """
    width = len(text.template)
    out = text.template * (stop - first)
    # The openings: `_ROW_OPEN`, plus the `cached_tokens` line where the row has it. The
    # lines come from one replace of the reported values' separators: each `,` ends a line
    # (and `\0` marks where to split) and starts the next.
    opening = np.full(stop - first, _ROW_OPEN, dtype=object)
    shown = text.cached_shown[first:stop]
    if shown.any():
        line = _ROW_OPEN + _ROW_CACHED
        cached = _json_values(text.cached[first:stop][shown])
        opening[shown] = (line + cached.replace(b",", b",\n\0" + line) + b",\n").split(b"\0")
    openings = opening.tolist()
    if first == 0:
        openings[0] = openings[0][1:]
    out[0::width] = openings
    for slot, (column, null) in enumerate(text.values, start=1):
        if column.dtype == object:  # texts already
            values = column[first:stop].tolist()
        else:
            values = _json_values(column[first:stop]).split(b",")
        if null is not None:
            for i in np.flatnonzero(null[first:stop]).tolist():
                values[i] = b"null"
        out[2 * slot::width] = values
    return b"".join(out)  # type: ignore[arg-type]  # every None slot is filled
