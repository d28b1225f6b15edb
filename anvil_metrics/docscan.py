"""A `benchmark.json` read for its summary, without loading its rows.

`anvil run` prints a summary of the document its Locust child wrote. Parsed whole, a run of
a million requests is ~540 MB of text and ~2.6 GB of Python objects, nearly all of them in
`request_timings`, which the summary never shows. `scan_benchmark` reads the file a block
at a time, parses the document around its rows, counts the rows and, for the prefix-cache
check (`cachecheck`), parses only the rows whose `cached_tokens` exceed a limit.

It relies on the layout anvil writes (`benchmark.py`: orjson, 2-space indent, sorted keys):
the top-level key opens as a line `  "request_timings": [`, each row is `    {` … `    }`
with its fields at 6 spaces, and the array closes with a line `  ]`. No JSON string holds
a raw newline, so these lines cannot occur inside a value. A file laid out otherwise (or
not JSON) is parsed whole, as `benchmark.load_benchmark` does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from anvil_metrics import cachecheck
from anvil_metrics.benchmark import load_benchmark

BLOCK_BYTES = 1 << 22
_OPEN = b'\n  "request_timings": ['
_CLOSE = b"\n  ]"
_ROW_START = b"\n    {"
_ROW_END = b"\n    }"
_CACHED = re.compile(rb'\n      "cached_tokens": (\d+)')


@dataclass(frozen=True, slots=True)
class ScannedBenchmark:
    """`doc`: the document with `request_timings` empty; `rows`: how many it held;
    `cached_hits`: the rows (parsed) whose `cached_tokens` exceed the limit asked for."""

    doc: dict[str, Any]
    rows: int
    cached_hits: list[dict[str, Any]]


def scan_benchmark(path: str | Path, cached_above: int | None = None,
                   block_bytes: int = BLOCK_BYTES) -> ScannedBenchmark:
    """Read `path` as above; with `cached_above`, collect the rows whose `cached_tokens`
    exceed it. Errors as `load_benchmark`'s (VerifyError naming the file)."""
    p = Path(path)
    try:
        with open(p, "rb") as f:
            scanned = _scan(f, cached_above, block_bytes)
    except OSError:
        scanned = None  # load_benchmark names the file and the reason
    if scanned is None:
        return _whole(load_benchmark(p), cached_above)
    head, rows, hits, tail = scanned
    try:
        doc = orjson.loads(head + _OPEN + b"]" + tail)
    except orjson.JSONDecodeError:
        return _whole(load_benchmark(p), cached_above)
    if not isinstance(doc, dict):
        return _whole(load_benchmark(p), cached_above)
    return ScannedBenchmark(doc, rows, hits)


def _whole(doc: dict[str, Any], cached_above: int | None) -> ScannedBenchmark:
    rows = doc.get("request_timings")
    rows = [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []
    hits = [] if cached_above is None else cachecheck.rows_above(rows, cached_above)
    return ScannedBenchmark({**doc, "request_timings": []}, len(rows), hits)


def _scan(f: Any, cached_above: int | None, block_bytes: int
          ) -> tuple[bytes, int, list[dict[str, Any]], bytes] | None:
    """(text before the rows' key, row count, hits, text after the rows' array), or None
    when the file is not laid out as anvil writes it."""
    head = b""
    while True:  # the text up to the key
        block = f.read(block_bytes)
        if not block:
            return None
        searched = max(0, len(head) - len(_OPEN))
        head += block
        at = head.find(_OPEN, searched)
        if at >= 0:
            break
    buf = head[at + len(_OPEN):]
    head = head[:at]
    rows, hits = 0, []
    while True:  # whole rows a block at a time, until the array's closing line
        close = buf.find(_CLOSE)
        if close >= 0:
            if buf[:1] == b"]":  # an empty array: `"request_timings": []`
                return head, 0, [], buf[1:] + f.read()
            part, tail = buf[:close], buf[close + len(_CLOSE):]
            rows += _rows(part, cached_above, hits)
            return head, rows, hits, tail + f.read()
        last = buf.rfind(_ROW_END)
        if last >= 0:
            cut = last + len(_ROW_END)
            rows += _rows(buf[:cut], cached_above, hits)
            buf = buf[cut:]
        block = f.read(block_bytes)
        if not block:
            return None
        buf += block


def _rows(part: bytes, cached_above: int | None, hits: list[dict[str, Any]]) -> int:
    """Count the rows in `part` (whole rows); add those above the cached limit to `hits`."""
    if cached_above is not None:
        for m in _CACHED.finditer(part):
            if int(m.group(1)) > cached_above:
                start = part.rfind(_ROW_START, 0, m.start())
                end = part.find(_ROW_END, m.end()) + len(_ROW_END)
                hits.append(orjson.loads(part[start:end]))
    return part.count(_ROW_START)
