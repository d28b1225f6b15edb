"""Reading `requests.jsonl` back, and writing JSON files that are strict and never half-written.

Why it is strict: every figure in a benchmark file is rebuilt from these records, so a
record that is silently skipped or misread changes the numbers users act on. The one
damage tolerated is the one a crash causes by design — a torn *last* line (the writer died
mid-line, so the file does not end in a newline) — and it is reported, and the run is marked
partial. Anything malformed earlier in the file raises `RawFileError` naming the line.

The line format is described in `records.py`: a `"run"` header first, then `"request"`
lines, then a `"run_end"` line if the run finished.

Two readers share one pass over the file, line by line (never the whole file in memory):
`read_raw` returns RequestRecord objects; `scan_raw` returns the same run as integer columns
without chunk timings or usage objects (`RawColumns`) — what `anvil postprocess` needs, a
few hundred bytes per request instead of a few kilobytes. Both apply the same checks and
raise the same errors; `scan_raw` hands a file with values its columns do not model back to
`read_raw` (UnusualRecords).

Writing: `atomic_write_json` writes a temporary file in the target's directory, fsyncs it
and `os.replace`s it over the target, so a reader sees the old file or the new one, never
a mix. orjson writes NaN and ±inf as `null` without complaint, which would turn a bug into a
plausible-looking value, so every float is checked first and a non-finite one raises.
"""

from __future__ import annotations

import gc
import json
import math
import os
import reprlib
import secrets
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import Any

import orjson

from anvil_metrics.errors import RawFileError
from anvil_metrics.records import (
    FAILURE_KINDS,
    RAW_SCHEMA,
    RequestRecord,
    failure_field_problems,
)

JSON_OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
# the standard library's C encoder, refusing NaN/±inf (ValueError) and non-JSON types
_FINITE_JSON = json.JSONEncoder(allow_nan=False, check_circular=False)


# --- strict JSON ---------------------------------------------------------------------------


def strict_json_problems(obj: Any, path: str = "") -> list[str]:
    """Every place in `obj` that strict JSON (RFC 8259) cannot hold, by field path.

    Flags non-finite floats (NaN, ±inf), non-string object keys and values that are not
    JSON types (dict, list/tuple, str, int, float, bool, None). Returns [] when clean.
    """
    # The common case, in C: orjson refuses non-string keys; json refuses NaN, ±inf and
    # values that are not JSON types. Each accepts only what _walk accepts, so when both do,
    # _walk finds nothing (a document with 30k failures: ~65 ms rather than ~110 ms).
    try:
        _dumps(obj)
        _FINITE_JSON.encode(obj)
        return []
    except (TypeError, ValueError, RecursionError):  # orjson.JSONEncodeError is a TypeError
        pass
    problems: list[str] = []
    _walk(obj, path, problems)
    return problems


def _walk(obj: Any, path: str, problems: list[str]) -> None:
    """Depth first, in document order, with a stack of its own: orjson reads documents
    nested 1023 deep, deeper than Python's recursion limit."""
    stack: list[tuple[bool, Any, str]] = [(False, obj, path)]  # (is a message, value, path)
    while stack:
        message, obj, path = stack.pop()
        if message:
            problems.append(obj)
            continue
        where = path or "document"
        if obj is None or isinstance(obj, bool | str | int):
            continue
        if isinstance(obj, float):
            if not math.isfinite(obj):
                problems.append(f"{where}: {obj!r} is not allowed in strict JSON (use null)")
            continue
        items: list[tuple[bool, Any, str]]
        if isinstance(obj, dict):
            items = [(False, value, f"{path}.{key}" if path else key) if isinstance(key, str)
                     else (True, f"{where}: object key {key!r} is not a string", "")
                     for key, value in obj.items()]
        elif isinstance(obj, list | tuple):
            items = [(False, value, f"{path}[{i}]") for i, value in enumerate(obj)]
        else:
            problems.append(f"{where}: {type(obj).__name__} is not a JSON type")
            continue
        stack.extend(reversed(items))


def dumps_strict(obj: Any, *, option: int | None = None) -> bytes:
    """orjson bytes of `obj`, after refusing anything strict JSON cannot hold (ValueError)."""
    problems = strict_json_problems(obj)
    if problems:
        raise ValueError("refusing to write non-strict JSON: " + "; ".join(problems[:5]))
    return orjson.dumps(obj) if option is None else orjson.dumps(obj, option=option)


def atomic_write_json(path: str | Path, obj: Any) -> None:
    """Write `obj` to `path` as strict JSON (keys sorted, 2-space indent, as the spec
    example), atomically: temp file in the same directory, fsync, `os.replace`, then fsync
    of the directory so the rename itself survives a crash.

    Raises ValueError (before touching the disk) if `obj` holds NaN/±inf or a non-JSON value.
    """
    atomic_write_bytes(path, (dumps_strict(obj, option=JSON_OPTIONS),))


def atomic_write_bytes(path: str | Path, chunks: Iterable[bytes]) -> None:
    """Write the concatenation of `chunks` to `path` atomically, as `atomic_write_json` does.

    `chunks` may be a generator (a large document written piece by piece); if it raises,
    the temp file is removed and `path` is left as it was.
    """
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    # os.open applies the umask, so the result gets the same mode a plain open() would give.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    dir_fd = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def dump_line(obj: dict[str, Any]) -> bytes:
    """One `requests.jsonl` line: compact strict JSON plus the newline."""
    return dumps_strict(obj) + b"\n"


def write_raw(
    path: str | Path,
    header: dict[str, Any],
    records: Iterable[RequestRecord],
    run_end: dict[str, Any] | None = None,
) -> None:
    """Write a whole `requests.jsonl` (tests, simulators, re-exports). The live recorder
    appends line by line with `dump_line` instead. `type` keys are filled in."""
    with open(path, "wb") as f:
        f.write(dump_line({**header, "type": "run"}))
        for rec in records:
            f.write(dump_line(rec.to_json_dict()))
        if run_end is not None:
            f.write(dump_line({**run_end, "type": "run_end"}))


# --- reading -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RawRun:
    """A `requests.jsonl` read back.

    - `header`: the `"run"` line (run_id, started_at, params, clock anchors…).
    - `records`: every request line in file order, warm-ups included.
    - `run_end`: the `"run_end"` line, or None if the run did not finish.
    - `partial`: True when `run_end` is missing or a torn last line was dropped.
    - `torn_lines`: how many torn lines were dropped (0 or 1: only the last can be torn).
    - `notes`: human-readable remarks on what was tolerated, for the user to see.
    - `workers`: the `"worker"` lines of a distributed run, by worker identity (`host:pid`,
      the records' `worker` field): each one's `perf_offset_ns` places its stamps on the
      master's clock (`stamp + perf_offset_ns`); empty for a single-process run.
    """

    header: dict[str, Any]
    records: tuple[RequestRecord, ...]
    run_end: dict[str, Any] | None
    partial: bool
    torn_lines: int = 0
    notes: tuple[str, ...] = ()
    path: str | None = None
    workers: dict[str, dict[str, Any]] = field(default_factory=dict)

    def clock_offsets_ns(self) -> dict[str, int]:
        """Worker identity -> offset of its perf_counter_ns to the master's (only those
        measured; a record of any other worker is on the master's clock or its own)."""
        return {name: int(w["perf_offset_ns"]) for name, w in self.workers.items()
                if _is_int(w.get("perf_offset_ns"))}

    @property
    def measured(self) -> tuple[RequestRecord, ...]:
        """Records that count in the benchmark (warm-ups excluded), in file order."""
        return tuple(r for r in self.records if not r.warmup)

    @property
    def warmups(self) -> tuple[RequestRecord, ...]:
        return tuple(r for r in self.records if r.warmup)


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _opt_int(x: Any) -> bool:
    return x is None or _is_int(x)


_REQUIRED_INT = ("request_index", "start_ns")
_OPTIONAL_STAMPS = ("end_ns", "first_output_ns", "first_content_ns")
# how deep a run / run_end / worker line may nest (anvil writes at most ~8 levels; far below
# the 254 that orjson writes, however a value is placed in a benchmark)
MAX_LINE_DEPTH = 32


def _all_counts(xs: list[Any]) -> bool:
    """Every item of `xs` is a non-negative integer (not a bool).

    The quick test first: orjson writes such a list as `[` digits and commas `]` and nothing
    else — a bool prints as true/false, a float with `.` or `e`, a negative number with `-`,
    a string with quotes, a nested list or object with more brackets. Anything orjson cannot
    write at all (a Python int subclass, an int beyond 64 bits) gets the item-by-item test.
    """
    try:
        if _dumps(xs).translate(None, _DIGITS_AND_COMMAS) == b"[]":
            return True
    except TypeError:
        pass
    return all(_is_int(x) and x >= 0 for x in xs)


def show(value: Any) -> str:
    """`repr(value)` for a message, cut short: a value read from a damaged file may be a
    string of megabytes or a list nested 1,000 deep (orjson reads it; a plain `repr` of it
    raises RecursionError)."""
    return _SHOW.repr(value)


_SHOW = reprlib.Repr()
_SHOW.maxlevel, _SHOW.maxstring, _SHOW.maxother, _SHOW.maxlong = 3, 60, 60, 60
_SHOW.maxlist = _SHOW.maxtuple = _SHOW.maxdict = 6


def failure_problem(f: Any) -> str | None:
    """Why a record's `failure` is not one a benchmark can hold, or None: null, or an
    object with a `kind`, whose fields pass `records.failure_field_problems` (the types
    `verify` checks in `failures`)."""
    if f is None:
        return None
    if not isinstance(f, dict):
        return f"failure must be null or an object, got {show(f)}"
    wrong = failure_field_problems(f)
    if "kind" not in f:
        wrong.insert(0, ("kind", f"one of {list(FAILURE_KINDS)}"))
    if wrong:
        key, expected = wrong[0]
        return f"failure.{key} must be {expected}, got {show(f.get(key))}"
    return None


def record_problem(d: dict[str, Any]) -> str | None:
    """Why a `"request"` line cannot be a valid RequestRecord, or None if it can.

    Checks types (integer stamps and counts; JSON floats are refused, not truncated) and the
    order of stamps: start ≤ first_output ≤ first_content ≤ end, where present; a first
    content without a first output is impossible (a content chunk is an output chunk); the
    first-output / first-content stamps exist exactly when output / content chunks were
    counted; and a completed request has an end. The fields a benchmark takes as they are
    (`failure`, `http_status`, `worker`, `extra`) must have the types it holds.
    """
    for key in _REQUIRED_INT:
        if not _is_int(d.get(key)):
            return f"{key} must be an integer, got {show(d.get(key))}"
    if d["request_index"] < 0:
        return f"request_index must be >= 0, got {d['request_index']}"
    for key in _OPTIONAL_STAMPS:
        if not _opt_int(d.get(key)):
            return f"{key} must be an integer or null, got {show(d.get(key))}"
    for key in ("reasoning_chunks", "content_chunks", "planned_context_tokens"):
        v = d.get(key)
        if v is not None and not (_is_int(v) and v >= 0):
            return f"{key} must be a non-negative integer, got {show(v)}"
    if "warmup" in d and not isinstance(d["warmup"], bool):
        return f"warmup must be true or false, got {show(d['warmup'])}"
    deltas = d.get("chunk_deltas_ns") or []
    if not isinstance(deltas, list) or not _all_counts(deltas):
        return "chunk_deltas_ns must be a list of non-negative integers"
    if not isinstance(d.get("chunk_channels") or "", str):
        return "chunk_channels must be a string"
    if d.get("usage") is not None and not isinstance(d["usage"], dict):
        return f"usage must be an object or null, got {show(d['usage'])}"
    if not _opt_int(d.get("http_status")):
        return f"http_status must be an integer or null, got {show(d['http_status'])}"
    if d.get("worker") is not None and not isinstance(d["worker"], str):
        return f"worker must be a string or null, got {show(d['worker'])}"
    if d.get("extra") is not None and not isinstance(d["extra"], dict):
        return f"extra must be an object or null, got {show(d['extra'])}"
    failure = d.get("failure")
    problem = failure_problem(failure)
    if problem:
        return problem
    if failure is None and d.get("end_ns") is None:
        return "a completed request (failure null) must have an end_ns"
    if d.get("first_content_ns") is not None and d.get("first_output_ns") is None:
        return "first_content_ns is set but first_output_ns is not (content is output)"
    content = d.get("content_chunks") or 0
    output = (d.get("reasoning_chunks") or 0) + content
    if (d.get("first_content_ns") is None) != (content == 0):
        return (f"first_content_ns is {d.get('first_content_ns')} with content_chunks "
                f"{content}: a first-content stamp exists exactly when content chunks arrived")
    if (d.get("first_output_ns") is None) != (output == 0):
        return (f"first_output_ns is {d.get('first_output_ns')} with {output} output chunks: "
                "a first-output stamp exists exactly when output chunks arrived")
    order = [(k, d.get(k)) for k in ("start_ns", "first_output_ns", "first_content_ns", "end_ns")]
    present = [(k, v) for k, v in order if v is not None]
    for (ka, a), (kb, b) in zip(present, present[1:], strict=False):
        if b < a:
            return f"stamps out of order: {kb} {b} < {ka} {a}"
    return None


def nested_too_deep(obj: Any, limit: int = MAX_LINE_DEPTH) -> str | None:
    """Where `obj` holds containers nested more than `limit` deep (the path of the field, two
    levels at most, that holds them), or None. Iterative: orjson reads values nested 1,023
    deep but writes at most 254, so a header value copied into a benchmark must be caught
    when it is read, not when it is written."""
    stack: list[tuple[str, Any, int]] = [("", obj, 0)]
    while stack:
        path, value, depth = stack.pop()
        if isinstance(value, dict):
            names = [(f"{path}.{k}" if path else str(k), v) for k, v in value.items()]
        elif isinstance(value, list):
            names = [(f"{path}[{i}]", v) for i, v in enumerate(value)]
        else:
            continue
        if depth >= limit:
            return path
        stack.extend((name if depth < 2 else path, v, depth + 1) for name, v in names)
    return None


def read_raw(path: str | Path) -> RawRun:
    """Read a `requests.jsonl` into a RawRun.

    Tolerated and reported: a torn last line (no final newline, not parseable), and a
    missing `run_end` — both mark the run partial. Raised as RawFileError (with the line
    number): unreadable file, no `"run"` header first, a malformed or invalid line anywhere
    else, an unknown line type, a line after `run_end`, a duplicate request_index, and — in a
    run that finished — measured request indices with gaps (records were lost).

    When a file has several faults, the one raised is the first unparseable line if any
    (every line is parsed before any is interpreted), else the first invalid line.
    """
    reader = _Reader(Path(path), columns=False)
    reader.read()
    return reader.raw_run()


def scan_raw(path: str | Path, *, parallel: bool = True) -> RawColumns:
    """Read a `requests.jsonl` as `read_raw` does — same checks, same errors, same notes —
    into columns instead of RequestRecord objects (see `RawColumns`): what `anvil
    postprocess` needs of a run of any size, without its chunk timings or usage objects.

    Raises UnusualRecords (before or instead of anything else it might find) when a record
    holds a value the columns do not model; `read_raw` reads such a file.

    A large file is read in one part per CPU this process may use (`rawpart.py`: a child
    process for each part after the first) when `parallel`; the outcome is the same.
    """
    reader = _Reader(Path(path), columns=True)
    reader.read(splits=_split_offsets(Path(path)) if parallel else [])
    return reader.raw_columns()


def _split_offsets(p: Path) -> list[int]:
    from anvil_metrics import rawpart

    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    try:
        return rawpart.split_offsets(p, min(cpus, rawpart.MAX_PARTS))
    except OSError:
        return []  # the one-pass read says what is wrong with the file


class UnusualRecords(Exception):
    """`scan_raw` met a record outside what its columns model — a stamp or clock offset
    beyond ±2**62, a token count of 2**53 or more, a start delay its int64 column cannot hold
    (beyond int64, or the NULL sentinel itself). Such a file is valid or not exactly as
    `read_raw` says; read it with `read_raw`."""


# Column layout of `RawColumns.table`: one int64 row per request record, in file order.
# NULL marks a missing value (JSON null, or not reported).
RAW_COLUMNS = (
    "line",  # 1-based line number in the file
    "warmup",  # 0 / 1
    "request_index",
    "start_ns",
    "end_ns",
    "first_output_ns",
    "first_content_ns",
    "planned_context_tokens",
    "reasoning_chunks",
    "content_chunks",
    "output_tokens",  # derive.output_tokens_from(usage, reasoning_chunks, content_chunks)
    "usage_source",  # 1 when output_tokens came from usage, 0 from chunk counts
    "prompt_tokens",  # derive.prompt_tokens_from(usage)
    "cached_tokens",  # derive.cached_tokens_from(usage)
    "worker",  # index into RawColumns.worker_names, -1 for null
    "start_delay_ns",  # extra.start_delay_ns when it is an integer
    "failed",  # 0 / 1: the record has a failure (its details are in RawColumns.failures)
)
COL = {name: i for i, name in enumerate(RAW_COLUMNS)}
NULL = -(2**63)
STAMP_LIMIT = 2**62  # |stamp|, |clock offset| below this: sums and differences fit int64
COUNT_LIMIT = 2**53  # token counts below this: their float conversions are exact
_STAMP_COLUMNS = ("start_ns", "end_ns", "first_output_ns", "first_content_ns",
                  "start_delay_ns")
_COUNT_COLUMNS = ("planned_context_tokens", "reasoning_chunks", "content_chunks",
                  "output_tokens", "prompt_tokens", "cached_tokens")


@dataclass(frozen=True, slots=True)
class RawColumns:
    """A `requests.jsonl` read back as columns (`scan_raw`): what a RawRun holds, except
    that the request records are rows of `table` (int64, columns `RAW_COLUMNS`, `NULL` for
    a missing value) rather than RequestRecord objects, without chunk timings, channels,
    finish reasons or usage objects (only the counts derived from usage).

    - `failures`: record position (row of `table`) -> (kind, message, http_status, phase)
      of its failure as `Failure.from_dict` reads them, plus the record's own http_status.
    - `worker_names`: the names the `worker` column indexes.
    Other fields as in RawRun.
    """

    header: dict[str, Any]
    table: Any  # numpy.ndarray, shape (records, len(RAW_COLUMNS)), int64
    failures: dict[int, tuple[Any, Any, Any, Any, Any]]
    worker_names: tuple[str, ...]
    run_end: dict[str, Any] | None
    partial: bool
    torn_lines: int = 0
    notes: tuple[str, ...] = ()
    path: str | None = None
    workers: dict[str, dict[str, Any]] = field(default_factory=dict)

    def column(self, name: str) -> Any:
        return self.table[:, COL[name]]

    def clock_offsets_ns(self) -> dict[str, int]:
        """As `RawRun.clock_offsets_ns`."""
        return {name: int(w["perf_offset_ns"]) for name, w in self.workers.items()
                if _is_int(w.get("perf_offset_ns"))}


class _Reader:
    """One pass over a `requests.jsonl`, line by line (never the whole file in memory),
    for `read_raw` (RequestRecord objects) and `scan_raw` (columns).

    The outcome is the one of reading every line first and then interpreting them in order:
    an unparseable line raises at once; the first error found while interpreting is kept
    and raised at the end, after every later line has been parsed (a later unparseable line
    wins over it).
    """

    def __init__(self, p: Path, *, columns: bool) -> None:
        self.p = p
        self.columns = columns
        self.header: dict[str, Any] | None = None
        self.run_end: dict[str, Any] | None = None
        self.workers: dict[str, dict[str, Any]] = {}
        self.notes: list[str] = []
        self.torn_lines = 0
        self.parsed = 0
        self.deferred: Exception | None = None
        self.deferred_line = 0
        # read_raw
        self.records: list[RequestRecord] = []
        self.seen: dict[tuple[bool, int], int] = {}
        # scan_raw
        self.buf = array("q")  # the rows, flushed from `pending` (see `_append`)
        self.pending: list[int] = []
        self.n_records = 0
        self.failures: dict[int, tuple[Any, Any, Any, Any, Any]] = {}
        self.worker_codes: dict[str, int] = {}

    def read(self, splits: Sequence[int] = (), read_part: Any = None) -> None:
        """Read the file; with `splits` (ascending line starts), the part from each to the
        next (or the end) is read by a child process (`rawpart.py`; in-process by
        `read_part(path, start, stop)` if given)."""
        # The cyclic collector would walk every record read so far, again and again, and
        # nothing read here forms a cycle: it is off for the read (reference counting frees
        # each line's objects as before).
        collecting = gc.isenabled()
        gc.disable()
        try:
            if not splits:
                self._read()
            else:
                self._read_parts(list(splits), read_part)
        finally:
            if collecting:
                gc.enable()

    def _read_parts(self, splits: list[int], read_part: Any) -> None:
        from anvil_metrics import rawpart

        parts = list(zip(splits, [*splits[1:], None], strict=True))
        children = ([rawpart.start_child(self.p, start, stop) for start, stop in parts]
                    if read_part is None else [])
        taken = 0  # children whose result was taken
        try:
            n = self._read(stop=splits[0])
            for start, stop in parts:
                if children:
                    part = rawpart.child_result(children[taken])
                    taken += 1
                else:
                    try:
                        part = read_part(self.p, start, stop)
                    except UnusualRecords:  # as a child that exits with it
                        part = None
                if part is None:  # the child failed: read its part here
                    n = self._read(start=start, stop=stop, line0=n)
                else:
                    rawpart.merge_part(self, part, n)
                    n += part.lines
        finally:
            for child in children[taken:]:  # an error (raised here) made them pointless
                rawpart.stop_child(child)

    def _read(self, start: int = 0, stop: int | None = None, line0: int = 0) -> int:
        """Lines from byte `start` (a line start; its line is `line0 + 1`) to `stop` (a line
        start) or the end; returns the last line's number."""
        p = self.p
        n = line0
        try:
            with open(p, "rb", buffering=1 << 20) as f:
                f.seek(start)
                lines: Iterable[bytes] = f if stop is None else _until(f, stop - start)
                line = self._line_columns if self.columns else self._line_records
                for n, raw in enumerate(lines, start=line0 + 1):
                    if raw[-1:] == b"\n":
                        line(n, raw)
                    else:
                        self._tail(n, raw)
        except OSError as exc:
            raise RawFileError(p, f"cannot open it ({exc.strerror or exc})",
                               fix="check the path; it is the requests.jsonl of a run") from exc
        if n == 0:
            raise RawFileError(p, "the file is empty", fix="the run wrote nothing; run it again")
        if not self.parsed:
            raise RawFileError(p, "no complete line; the run header itself is torn",
                               line=1, fix="the run died before it started; run it again")
        return n

    # --- one line -------------------------------------------------------------------------

    def _line_records(self, n: int, raw: bytes) -> None:
        obj = _parse(self.p, n, raw[:-1])
        self.parsed += 1
        if self.deferred is None:
            self._interpret(n, obj)

    def _line_columns(self, n: int, raw: bytes) -> None:
        try:
            obj = _loads(raw)  # the newline is JSON whitespace
        except orjson.JSONDecodeError:
            self._flush()  # an earlier row beyond int64 was met first
            _parse(self.p, n, raw[:-1])  # raises, with the message read_raw gives
            raise
        self.parsed += 1
        if self.deferred is None and not self._fast_request(n, obj):
            self._interpret(n, obj)

    def _tail(self, n: int, raw: bytes) -> None:
        """The last line, without a newline: kept if it parses, else a torn line."""
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            self.torn_lines = 1
            self.notes.append(f"line {n}: torn last line ({len(raw)} bytes, no newline) "
                              "ignored: the run was interrupted mid-write")
            return
        self.notes.append(f"line {n}: last line has no newline (the writer stopped after it)")
        self.parsed += 1
        if self.deferred is None and not (self.columns and self._fast_request(n, obj)):
            self._interpret(n, obj)

    def _interpret(self, n: int, obj: Any) -> None:
        self._flush()  # the rows before this line first: one may be beyond int64
        try:
            self._interpret_now(n, obj)
        except UnusualRecords:
            raise
        except Exception as exc:  # raised once every line has been parsed
            self.deferred, self.deferred_line = exc, n

    def _interpret_now(self, n: int, obj: Any) -> None:
        p = self.p
        if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
            raise RawFileError(p, "line is not a JSON object with a string \"type\"", line=n)
        kind = obj["type"]
        if self.header is None:
            if kind != "run":
                raise RawFileError(p, f"first line has type {kind!r}, expected \"run\"", line=n,
                                   fix="this is not an anvil requests.jsonl")
            self.header = _check_header(p, n, obj)
            return
        if self.run_end is not None:
            raise RawFileError(p, f"{kind!r} line after the run_end line", line=n)
        if kind == "request":
            problem = record_problem(obj)
            if problem:
                raise RawFileError(p, f"invalid request record: {problem}", line=n)
            rec = RequestRecord.from_json_dict(obj)
            if self.columns:
                self._push_record(n, rec)
                return
            key = (rec.warmup, rec.request_index)
            if key in self.seen:
                raise RawFileError(
                    p, f"request_index {rec.request_index} already used on line "
                    f"{self.seen[key]}", line=n)
            self.seen[key] = n
            self.records.append(rec)
        elif kind == "run_end":
            _check_depth(p, n, obj)
            _check_run_end_client(p, n, obj)
            self.run_end = obj
        elif kind == "worker":
            if not isinstance(obj.get("worker"), str) or not _opt_int(obj.get("perf_offset_ns")):
                raise RawFileError(p, "a \"worker\" line needs a string worker and an integer "
                                   "or null perf_offset_ns", line=n)
            _check_depth(p, n, obj)
            self.workers[obj["worker"]] = obj
        elif kind == "run":
            raise RawFileError(p, "a second \"run\" header", line=n,
                               fix="two runs were written into one file; split it")
        else:
            raise RawFileError(p, f"unknown line type {kind!r}", line=n)

    # --- columns ----------------------------------------------------------------------------

    def _fast_request(self, n: int, d: Any) -> bool:
        """Add a plain `"request"` line to the columns without building a RequestRecord.

        True when done; False when the line is anything else or not plainly valid, and
        `_interpret` must take it (it then gives exactly read_raw's verdict). Every test here
        is one of `record_problem`'s, on the exact JSON types orjson returns, and the values
        taken are those `RequestRecord.from_json_dict` and `derive`'s usage readers take.
        """
        if type(d) is not dict or self.header is None or self.run_end is not None:
            return False
        try:  # the keys RequestRecord.to_json_dict always writes; else the slow way
            ty, ri, s, e, fo, fc, rc, cc, pl, wu, u, f, w, ch, deltas = _PLAIN_KEYS(d)
        except KeyError:
            return False
        x = d.get("extra")
        hs = d.get("http_status")
        if not (ty == "request" and type(ri) is int and ri >= 0 and type(s) is int
                and s != NULL and type(rc) is int and rc >= 0 and type(cc) is int and cc >= 0
                and (pl is None or (type(pl) is int and pl >= 0)) and type(wu) is bool
                and (e is None or type(e) is int) and (fo is None or type(fo) is int)
                and (fc is None or type(fc) is int)
                and (u is None or type(u) is dict) and (w is None or type(w) is str)
                and (x is None or type(x) is dict) and (hs is None or type(hs) is int)
                and (not ch or type(ch) is str)
                and (not deltas or (type(deltas) is list and _all_counts(deltas)))):
            return False
        if f is None:
            if e is None:
                return False
        elif type(f) is not dict or failure_problem(f) is not None:
            return False
        if (fc is None) != (cc == 0) or (fo is None) != (rc + cc == 0):
            return False
        last = s
        if fo is not None:
            if fo < last:
                return False
            last = fo
        if fc is not None:
            if fc < last:
                return False
            last = fc
        if e is not None and e < last:
            return False
        # the usage readers of derive.py, on a dict
        if u is not None:
            out = u.get("completion_tokens")
            src = type(out) is int and out >= 0
            if not src:
                out = rc + cc
            prompt = u.get("prompt_tokens")
            if not (type(prompt) is int and prompt >= 0):
                prompt = NULL
            details = u.get("prompt_tokens_details")
            cached = details.get("cached_tokens") if type(details) is dict else None
            if not (type(cached) is int and cached >= 0):
                cached = NULL
        else:
            out, src, prompt, cached = rc + cc, False, NULL, NULL
        delay = NULL
        if x:
            delay = x.get("start_delay_ns")
            if type(delay) is not int or delay == NULL:
                if delay == NULL:
                    self._flush()  # the rows before it first: one may be beyond int64
                delay = _delay(delay, n)
        if f is not None:
            self.failures[self.n_records] = (f["kind"], f.get("message", ""),
                                             f.get("http_status"), f.get("phase"),
                                             d.get("http_status"))
        if w is None:
            wc = -1
        else:
            wc = self.worker_codes.get(w)
            if wc is None:
                wc = self.worker_codes[w] = len(self.worker_codes)
        self._append((n, wu, ri, s, NULL if e is None else e, NULL if fo is None else fo,
                      NULL if fc is None else fc, NULL if pl is None else pl, rc, cc, out, src,
                      prompt, cached, wc, delay, f is not None))
        return True

    def _push_record(self, n: int, rec: RequestRecord) -> None:
        """A RequestRecord (read the slow way) into the columns."""
        from anvil_metrics import derive  # derive imports records only; no cycle

        # (`record_problem` has checked `worker` is a string or null, `extra` an object)
        if rec.start_ns == NULL:  # the column would read it as null
            raise UnusualRecords(f"line {n}: start_ns {rec.start_ns}")
        out, source = derive.output_tokens_from(rec.usage, rec.reasoning_chunks,
                                                rec.content_chunks)
        prompt = derive.prompt_tokens_from(rec.usage)
        cached = derive.cached_tokens_from(rec.usage)
        delay = _delay(rec.extra.get("start_delay_ns"), n)
        f = rec.failure
        if f is not None:
            self.failures[self.n_records] = (f.kind, f.message, f.http_status, f.phase,
                                             rec.http_status)
        wc = -1
        if rec.worker is not None:
            wc = self.worker_codes.setdefault(rec.worker, len(self.worker_codes))

        def v(x: int | None) -> int:
            return NULL if x is None else x

        self._append((n, rec.warmup, rec.request_index, rec.start_ns, v(rec.end_ns),
                      v(rec.first_output_ns), v(rec.first_content_ns),
                      v(rec.planned_context_tokens), rec.reasoning_chunks, rec.content_chunks,
                      out, source == "usage", v(prompt), v(cached), wc, delay, f is not None))

    def _append(self, values: tuple[Any, ...]) -> None:
        """One row (`RAW_COLUMNS`) into `pending`; converted with the others of its batch."""
        self.pending += values
        self.n_records += 1
        if len(self.pending) >= _FLUSH_VALUES:
            self._flush()

    def _flush(self) -> None:
        """Move the `pending` rows into `buf` (int64). Rows wait there a batch at a time
        (one conversion for many rows is several times cheaper than one per row); every
        path that could raise or record an error flushes first, so a row beyond int64
        raises UnusualRecords exactly where reading row by row would have."""
        pending = self.pending
        if not pending:
            return
        try:
            rows = array("q", pending)
        except OverflowError:
            width = len(RAW_COLUMNS)
            for at in range(0, len(pending), width):
                try:
                    array("q", pending[at:at + width])
                except OverflowError as exc:
                    raise UnusualRecords(f"line {pending[at]}: a value beyond int64") from exc
            raise
        self.buf += rows
        pending.clear()

    # --- the end ----------------------------------------------------------------------------

    def _raise_deferred(self, duplicate: RawFileError | None = None) -> None:
        """Raise the first error in line order: the kept one or a duplicate found later."""
        if duplicate is not None and (self.deferred is None
                                      or (duplicate.line or 0) < self.deferred_line):
            raise duplicate
        if self.deferred is not None:
            raise self.deferred

    def _run_fields(self) -> dict[str, Any]:
        """What a RawRun and a RawColumns both hold about the run (not its requests); notes
        that the run did not finish."""
        assert self.header is not None
        if self.run_end is None:
            self.notes.append("no run_end line: the run did not finish")
        return {"header": self.header, "run_end": self.run_end,
                "partial": self.run_end is None or self.torn_lines > 0,
                "torn_lines": self.torn_lines, "notes": tuple(self.notes),
                "path": str(self.p), "workers": self.workers}

    def _lost(self, missing: list[int]) -> RawFileError:
        return RawFileError(
            self.p, f"the run finished but measured requests {missing[:10]} have no record",
            fix="records were lost between worker and file; the run cannot be trusted")

    def raw_run(self) -> RawRun:
        self._raise_deferred()
        fields = self._run_fields()
        if self.run_end is not None:
            indices = sorted(r.request_index for r in self.records if not r.warmup)
            missing = _first_missing(indices)
            if missing:
                raise self._lost(missing)
        return RawRun(records=tuple(self.records), **fields)

    def raw_columns(self) -> RawColumns:
        import numpy as np

        self._flush()
        table = np.frombuffer(self.buf, dtype=np.int64).reshape(-1, len(RAW_COLUMNS))
        self._raise_deferred(self._first_duplicate(table))
        fields = self._run_fields()
        measured = table[table[:, COL["warmup"]] == 0, COL["request_index"]]
        if self.run_end is not None and len(measured):
            missing = _first_missing(np.sort(measured))
            if missing:
                raise self._lost(missing)
        for name in _STAMP_COLUMNS:
            values = table[:, COL[name]]
            values = values[values != NULL]
            if len(values) and (values.min() <= -STAMP_LIMIT or values.max() >= STAMP_LIMIT):
                raise UnusualRecords(f"{name} beyond ±2**62")
        for name in _COUNT_COLUMNS:
            values = table[:, COL[name]]
            if len(values) and values.max() >= COUNT_LIMIT:
                raise UnusualRecords(f"{name} of 2**53 or more")
        for name, w in self.workers.items():
            off = w.get("perf_offset_ns")
            if _is_int(off) and not -STAMP_LIMIT < off < STAMP_LIMIT:
                raise UnusualRecords(f"worker {name} clock offset beyond ±2**62")
        return RawColumns(table=table, failures=self.failures,
                          worker_names=tuple(self.worker_codes), **fields)

    def _first_duplicate(self, table: Any) -> RawFileError | None:
        """The error read_raw raises for the first line (in file order) whose
        (warmup, request_index) an earlier line already used, if any."""
        import numpy as np

        if len(table) < 2:
            return None
        line, warm, idx = (table[:, COL[c]] for c in ("line", "warmup", "request_index"))
        order = np.lexsort((line, idx, warm))
        line, warm, idx = line[order], warm[order], idx[order]
        repeat = (warm[1:] == warm[:-1]) & (idx[1:] == idx[:-1])
        if not repeat.any():
            return None
        at = np.flatnonzero(repeat) + 1  # sorted positions of lines whose key came before
        j = int(at[np.argmin(line[at])])
        first = j - 1
        while first > 0 and repeat[first - 1]:
            first -= 1
        return RawFileError(self.p, f"request_index {int(idx[j])} already used on line "
                            f"{int(line[first])}", line=int(line[j]))


def _until(f: Iterable[bytes], size: int) -> Iterable[bytes]:
    """The lines of `f` that lie within its next `size` bytes (`size` ends a line)."""
    for raw in f:
        yield raw
        size -= len(raw)
        if size <= 0:
            return


def _delay(value: Any, n: int) -> int:
    """`extra.start_delay_ns` as the column holds it: the integer (a bool counts as one, as
    in `saturation.start_delay_ms`), NULL when it is not an integer."""
    if not isinstance(value, int):
        return NULL
    if value == NULL:
        raise UnusualRecords(f"line {n}: start_delay_ns {value}")
    return int(value)


def _first_missing(indices: Any) -> list[int]:
    """Up to 10 smallest integers between the first and last of ascending, distinct
    `indices` that are not among them (the gaps)."""
    if len(indices) == 0 or indices[-1] - indices[0] + 1 == len(indices):
        return []
    missing: list[int] = []
    prev = int(indices[0])
    for x in indices[1:]:
        x = int(x)
        if x > prev + 1:
            missing.extend(range(prev + 1, min(x, prev + 1 + 10 - len(missing))))
            if len(missing) >= 10:
                break
        prev = x
    return missing[:10]


_loads = orjson.loads
_dumps = orjson.dumps
_PLAIN_KEYS = itemgetter("type", "request_index", "start_ns", "end_ns", "first_output_ns",
                         "first_content_ns", "reasoning_chunks", "content_chunks",
                         "planned_context_tokens", "warmup", "usage", "failure", "worker",
                         "chunk_channels", "chunk_deltas_ns")
_FLUSH_VALUES = 4096 * len(RAW_COLUMNS)  # rows of `_Reader.pending` converted at a time
_DIGITS_AND_COMMAS = b"0123456789,"


def _parse(p: Path, n: int, raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise RawFileError(
            p, f"not valid JSON ({exc})", line=n,
            fix="only a torn last line is tolerated; this file is damaged in the middle",
        ) from exc


def _check_depth(p: Path, n: int, obj: dict[str, Any]) -> None:
    where = nested_too_deep(obj)
    if where is not None:
        _refuse(p, n, "", [f"{where} holds values nested more than {MAX_LINE_DEPTH} levels "
                           f"deep (anvil writes {obj['type']!r} lines a few levels deep)"])


def _check_run_end_client(p: Path, n: int, obj: dict[str, Any]) -> None:
    """A run_end's `client` (the generator's figures) as the benchmark's `client` block will
    hold it: named here, with its line, rather than by the built benchmark's verification."""
    from anvil_metrics import benchmark  # imports this module; loaded by the time it runs

    _refuse(p, n, "run_end ", benchmark.raw_client_problems(obj.get("client")))


def _refuse(p: Path, n: int, what: str, problems: list[str]) -> None:
    """Line `n` is damaged if the benchmark's own checks found `problems` in what it holds."""
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise RawFileError(p, f"{what}{problems[0]}{more}", line=n,
                           fix="the file is damaged; restore it or run again")


def _check_header(p: Path, n: int, obj: dict[str, Any]) -> dict[str, Any]:
    schema = obj.get("schema")
    if schema is not None and schema != RAW_SCHEMA:
        raise RawFileError(p, f"schema {schema!r} is not {RAW_SCHEMA!r}", line=n,
                           fix="read it with the anvil version that wrote it")
    for key in ("run_id", "started_at"):
        if not isinstance(obj.get(key), str):
            raise RawFileError(p, f"run header has no string {key!r}", line=n)
    if not isinstance(obj.get("params", {}), dict):
        raise RawFileError(p, "run header 'params' must be an object", line=n)
    _check_depth(p, n, obj)
    for key in ("wall_anchor_ns", "perf_anchor_ns"):
        if not _opt_int(obj.get(key)):
            raise RawFileError(p, f"run header {key!r} must be an integer", line=n)
    from anvil_metrics import benchmark  # imports this module; loaded by the time it runs

    _refuse(p, n, "run header: ", benchmark.raw_header_problems(obj))
    return obj
