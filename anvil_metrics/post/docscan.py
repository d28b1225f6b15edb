"""A `benchmark.json` read for its summary, without loading its rows.

`anvil run` prints a summary of the document its Locust child wrote, and `anvil verify`
checks a document. Parsed whole, a run of a million requests is ~540 MB of text and ~2.6 GB
of Python objects, nearly all of them in `request_timings`. Both read the file a block at a
time and parse the document around its rows:
- `scan_benchmark` (the summary) counts the rows and, for the prefix-cache check
  (`cachecheck`), parses only the rows whose `cached_tokens` exceed a limit;
- `verify_file` decodes the rows a block at a time into columns (`RowColumns.from_text`:
  each field's type checked as it is parsed, `rowmodel.py`) and checks them as
  `verify_benchmark` does; only a document with a problem is loaded whole, for the
  messages that name each one.

It relies on the layout anvil writes (`benchmark.py`: orjson, 2-space indent, sorted keys):
the top-level key opens as a line `  "request_timings": [`, each row is `    {` … `    }`
with its fields at 6 spaces, and the array closes with a line `  ]`. No JSON string holds
a raw newline, so these lines cannot occur inside a value. A file laid out otherwise, one
that may hold a second `"request_timings"` key (a whole parse keeps the last; an escape
such as `\u005f` spells the same key), or not JSON, is parsed whole, as
`benchmark.load_benchmark` does.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from anvil_metrics.post import cachecheck, rowparts
from anvil_metrics.post.benchmark import load_benchmark
from anvil_metrics.post.derive import RowColumns
from anvil_metrics.post.energyblock import check_energy_file
from anvil_metrics.post.heap import keep_freed_memory
from anvil_metrics.post.probeblock import PROBE_FILE, check_probe_file
from anvil_metrics.post.rawpart import MAX_PARTS, usable_cpus
from anvil_metrics.post.rowparts import BLOCK_BYTES, CLOSE, OPEN, ROW_END, RowBlocks, close_at
from anvil_metrics.post.serversteady import judge
from anvil_metrics.post.verify import columns_are_clean, verify_benchmark
from anvil_metrics.telemetry.energyfile import ENERGY_FILE
from anvil_metrics.telemetry.servermetrics import SAMPLES_FILE, check_server_file
from anvil_metrics.telemetry.serverroles import check_role_files

_ROW_START = b"\n    {"
_KEY = b'"request_timings"'
_ESCAPE = b"\\u"
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
    hits: list[dict[str, Any]] = []
    count = 0

    def take(part: bytes) -> bool:
        nonlocal count
        count += _rows(part, cached_above, hits)
        return True

    doc = _doc_around_rows(Path(path), take, block_bytes)
    if doc is None:
        return _whole(load_benchmark(Path(path)), cached_above)
    return ScannedBenchmark(doc, count, hits)


def verify_file(path: str | Path, block_bytes: int = BLOCK_BYTES,
                load: Callable[[Path], Any] = load_benchmark,
                notes: list[str] | None = None) -> list[str]:
    """`verify_benchmark(load(path))`: [] when the file holds a correct benchmark/v1
    document, else every problem. A clean file laid out as anvil writes it is checked as
    columns built a block of rows at a time (a large one's in parts, a child process each:
    `rowparts.py`), and `load` (which raises for a file that cannot be read or parsed) is
    called only when that does not settle it. The blocks computed from a samples file
    beside it (server, energy) are recomputed from it; `notes` gets what could not be (no
    file), which is not a problem."""
    p = Path(path)
    keep_freed_memory()
    got = _in_parts(p)
    if got is None:
        blocks = RowBlocks()
        doc = _doc_around_rows(p, blocks.take, block_bytes)
        got = None if doc is None else (doc, blocks.columns())
    problems: list[str] = []
    if got is not None:
        doc, rows = got
        if rows is not None and columns_are_clean(doc, rows):
            _check_files(doc, rows, p, problems, notes)
            return problems
    doc = load(p)
    problems = verify_benchmark(doc)
    if isinstance(doc, dict):
        _check_files(doc, RowColumns.from_rows(doc.get("request_timings")), p, problems,
                     notes)
    return problems


def _check_files(doc: dict[str, Any], rows: RowColumns | None, p: Path, problems: list[str],
                 notes: list[str] | None) -> None:
    check_server_file(doc, rows, p.with_name(SAMPLES_FILE), problems, judge)
    check_role_files(doc, rows, p.parent, problems, judge)
    check_energy_file(doc, rows, p.with_name(ENERGY_FILE), problems, notes)
    check_probe_file(doc, p.with_name(PROBE_FILE), problems, notes)


def _in_parts(p: Path) -> tuple[dict[str, Any], RowColumns] | None:
    """The document and its rows of a large file, the rows decoded in parts (`rowparts`);
    None for a small file, one CPU, or anything the one-process read must look at."""
    cpus = usable_cpus()
    try:
        if cpus < 2 or p.stat().st_size < rowparts.MIN_BYTES:
            return None
        with open(p, "rb") as f:
            found = _head(f, BLOCK_BYTES)
        if found is None or found[1][:1] == b"]":  # no rows (or no key) to cut
            return None
        head, rest, rows_start = found
        got = rowparts.read_in_parts(p, rows_start, min(cpus, MAX_PARTS))
        if got is None:
            return None
        with open(p, "rb") as f:
            f.seek(got[1])
            tail = f.read()
    except OSError:
        return None  # the one-process read names the file and the reason
    doc = _document(head, tail)
    return None if doc is None else (doc, got[0])


def _doc_around_rows(p: Path, take: Callable[[bytes], bool], block_bytes: int
                     ) -> dict[str, Any] | None:
    """The document with `request_timings` empty, having given `take` the rows' text in
    order, whole rows at a time; None when the file is not laid out as anvil writes it, it
    cannot be read, or `take` says no (False)."""
    try:
        with open(p, "rb") as f:
            scanned = _scan(f, take, block_bytes)
    except OSError:
        return None  # load_benchmark names the file and the reason
    return None if scanned is None else _document(*scanned)


def _document(head: bytes, tail: bytes) -> dict[str, Any] | None:
    """The document around the rows (`request_timings` empty), or None when it may hold
    another such key or the line found is not the document's own key."""
    # A key is "request_timings" only if it is spelled so or holds an escape (`\u005f`):
    # without either around the rows, theirs is the document's one key of that name.
    if _KEY in head or _KEY in tail or _ESCAPE in head or _ESCAPE in tail:
        return None  # perhaps a second key, which a whole parse would keep
    try:
        doc = orjson.loads(head + OPEN + b"]" + tail)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(doc, dict) or doc.get("request_timings") != []:
        return None  # the line found is not the document's own key
    return doc


def _whole(doc: dict[str, Any], cached_above: int | None) -> ScannedBenchmark:
    rows = doc.get("request_timings")
    rows = [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []
    hits = [] if cached_above is None else cachecheck.rows_above(rows, cached_above)
    return ScannedBenchmark({**doc, "request_timings": []}, len(rows), hits)


def _head(f: Any, block_bytes: int) -> tuple[bytes, bytes, int] | None:
    """(text before the rows' key, the text read after it, the offset just after it), or
    None when the file has no such line."""
    head = b""
    while True:
        block = f.read(block_bytes)
        if not block:
            return None
        searched = max(0, len(head) - len(OPEN))
        head += block
        at = head.find(OPEN, searched)
        if at >= 0:
            return head[:at], head[at + len(OPEN):], at + len(OPEN)


def _scan(f: Any, take: Callable[[bytes], bool], block_bytes: int
          ) -> tuple[bytes, bytes] | None:
    """(text before the rows' key, text after the rows' array), having given `take` the
    text between them — the rows, whole ones at a time, each part after the first starting
    with the comma that ends the row before it; None when the file is not laid out as anvil
    writes it or `take` returned False."""
    found = _head(f, block_bytes)
    if found is None:
        return None
    head, buf, _ = found
    while not buf:
        buf = f.read(block_bytes)
        if not buf:
            return None
    if buf[:1] == b"]":  # an empty array: `"request_timings": []`
        return head, buf[1:] + f.read()
    while True:  # whole rows a block at a time, until the array's closing line
        close = close_at(buf)
        if close >= 0:
            if not take(buf[:close]):
                return None
            return head, buf[close + len(CLOSE):] + f.read()
        last = buf.rfind(ROW_END)
        if last >= 0:
            cut = last + len(ROW_END)
            if not take(buf[:cut]):
                return None
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
                end = part.find(ROW_END, m.end()) + len(ROW_END)
                hits.append(orjson.loads(part[start:end]))
    return part.count(_ROW_START)
