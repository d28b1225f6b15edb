"""Reading `requests.jsonl` back, and writing JSON files that are strict and never half-written.

Why it is strict: every figure in a benchmark file is rebuilt from these records, so a
record that is silently skipped or misread changes the numbers users act on. The one
damage tolerated is the one a crash causes by design — a torn *last* line (the writer died
mid-line, so the file does not end in a newline) — and it is reported, and the run is marked
partial. Anything malformed earlier in the file raises `RawFileError` naming the line.

The line format is described in `records.py`: a `"run"` header first, then `"request"`
lines, then a `"run_end"` line if the run finished.

Writing: `atomic_write_json` writes a temporary file in the target's directory, fsyncs it
and `os.replace`s it over the target, so a reader sees the old file or the new one, never
a mix. orjson writes NaN and ±inf as `null` without complaint, which would turn a bug into a
plausible-looking value, so every float is checked first and a non-finite one raises.
"""

from __future__ import annotations

import math
import os
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from anvil_metrics.errors import RawFileError
from anvil_metrics.records import RAW_SCHEMA, RequestRecord

JSON_OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS


# --- strict JSON ---------------------------------------------------------------------------


def strict_json_problems(obj: Any, path: str = "") -> list[str]:
    """Every place in `obj` that strict JSON (RFC 8259) cannot hold, by field path.

    Flags non-finite floats (NaN, ±inf), non-string object keys and values that are not
    JSON types (dict, list/tuple, str, int, float, bool, None). Returns [] when clean.
    """
    problems: list[str] = []
    _walk(obj, path, problems)
    return problems


def _walk(obj: Any, path: str, problems: list[str]) -> None:
    where = path or "document"
    if obj is None or isinstance(obj, bool | str | int):
        return
    if isinstance(obj, float):
        if not math.isfinite(obj):
            problems.append(f"{where}: {obj!r} is not allowed in strict JSON (use null)")
        return
    if isinstance(obj, dict):
        for key, value in obj.items():
            if not isinstance(key, str):
                problems.append(f"{where}: object key {key!r} is not a string")
                continue
            _walk(value, f"{path}.{key}" if path else key, problems)
        return
    if isinstance(obj, list | tuple):
        for i, value in enumerate(obj):
            _walk(value, f"{path}[{i}]", problems)
        return
    problems.append(f"{where}: {type(obj).__name__} is not a JSON type")


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
    target = Path(path)
    data = dumps_strict(obj, option=JSON_OPTIONS)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    # os.open applies the umask, so the result gets the same mode a plain open() would give.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
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


def record_problem(d: dict[str, Any]) -> str | None:
    """Why a `"request"` line cannot be a valid RequestRecord, or None if it can.

    Checks types (integer stamps and counts; JSON floats are refused, not truncated) and the
    order of stamps: start ≤ first_output ≤ first_content ≤ end, where present; a first
    content without a first output is impossible (a content chunk is an output chunk); the
    first-output / first-content stamps exist exactly when output / content chunks were
    counted; and a completed request has an end.
    """
    for key in _REQUIRED_INT:
        if not _is_int(d.get(key)):
            return f"{key} must be an integer, got {d.get(key)!r}"
    if d["request_index"] < 0:
        return f"request_index must be >= 0, got {d['request_index']}"
    for key in _OPTIONAL_STAMPS:
        if not _opt_int(d.get(key)):
            return f"{key} must be an integer or null, got {d.get(key)!r}"
    for key in ("reasoning_chunks", "content_chunks", "planned_context_tokens"):
        v = d.get(key)
        if v is not None and not (_is_int(v) and v >= 0):
            return f"{key} must be a non-negative integer, got {v!r}"
    if "warmup" in d and not isinstance(d["warmup"], bool):
        return f"warmup must be true or false, got {d['warmup']!r}"
    deltas = d.get("chunk_deltas_ns") or []
    if not isinstance(deltas, list) or not all(_is_int(x) and x >= 0 for x in deltas):
        return "chunk_deltas_ns must be a list of non-negative integers"
    if not isinstance(d.get("chunk_channels") or "", str):
        return "chunk_channels must be a string"
    if d.get("usage") is not None and not isinstance(d["usage"], dict):
        return f"usage must be an object or null, got {d['usage']!r}"
    failure = d.get("failure")
    if failure is not None and not (isinstance(failure, dict) and isinstance(failure.get("kind"),
                                                                                str)):
        return f"failure must be null or an object with a string kind, got {failure!r}"
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


def read_raw(path: str | Path) -> RawRun:
    """Read a `requests.jsonl` into a RawRun.

    Tolerated and reported: a torn last line (no final newline, not parseable), and a
    missing `run_end` — both mark the run partial. Raised as RawFileError (with the line
    number): unreadable file, no `"run"` header first, a malformed or invalid line anywhere
    else, an unknown line type, a line after `run_end`, a duplicate request_index, and — in a
    run that finished — measured request indices with gaps (records were lost).
    """
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise RawFileError(p, f"cannot open it ({exc.strerror or exc})",
                           fix="check the path; it is the requests.jsonl of a run") from exc
    if not data:
        raise RawFileError(p, "the file is empty", fix="the run wrote nothing; run it again")

    lines = data.split(b"\n")
    tail = lines.pop()  # b"" when the file ends with a newline, as it should
    torn_lines = 0
    notes: list[str] = []
    parsed: list[tuple[int, Any]] = []
    for i, raw in enumerate(lines, start=1):
        parsed.append((i, _parse(p, i, raw)))
    if tail:
        n = len(lines) + 1
        try:
            parsed.append((n, orjson.loads(tail)))
            notes.append(f"line {n}: last line has no newline (the writer stopped after it)")
        except orjson.JSONDecodeError:
            torn_lines = 1
            notes.append(
                f"line {n}: torn last line ({len(tail)} bytes, no newline) ignored: "
                "the run was interrupted mid-write"
            )

    if not parsed:
        raise RawFileError(p, "no complete line; the run header itself is torn",
                           line=1, fix="the run died before it started; run it again")

    header: dict[str, Any] | None = None
    run_end: dict[str, Any] | None = None
    records: list[RequestRecord] = []
    workers: dict[str, dict[str, Any]] = {}
    seen: dict[tuple[bool, int], int] = {}
    for n, obj in parsed:
        if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
            raise RawFileError(p, "line is not a JSON object with a string \"type\"", line=n)
        kind = obj["type"]
        if header is None:
            if kind != "run":
                raise RawFileError(p, f"first line has type {kind!r}, expected \"run\"", line=n,
                                   fix="this is not an anvil requests.jsonl")
            header = _check_header(p, n, obj)
            continue
        if run_end is not None:
            raise RawFileError(p, f"{kind!r} line after the run_end line", line=n)
        if kind == "request":
            problem = record_problem(obj)
            if problem:
                raise RawFileError(p, f"invalid request record: {problem}", line=n)
            rec = RequestRecord.from_json_dict(obj)
            key = (rec.warmup, rec.request_index)
            if key in seen:
                raise RawFileError(
                    p, f"request_index {rec.request_index} already used on line {seen[key]}",
                    line=n)
            seen[key] = n
            records.append(rec)
        elif kind == "run_end":
            run_end = obj
        elif kind == "worker":
            if not isinstance(obj.get("worker"), str) or not _opt_int(obj.get("perf_offset_ns")):
                raise RawFileError(p, "a \"worker\" line needs a string worker and an integer "
                                   "or null perf_offset_ns", line=n)
            workers[obj["worker"]] = obj
        elif kind == "run":
            raise RawFileError(p, "a second \"run\" header", line=n,
                               fix="two runs were written into one file; split it")
        else:
            raise RawFileError(p, f"unknown line type {kind!r}", line=n)
    assert header is not None

    if run_end is None:
        notes.append("no run_end line: the run did not finish")
    else:
        indices = sorted(r.request_index for r in records if not r.warmup)
        if indices and indices[-1] - indices[0] + 1 != len(indices):
            missing = sorted(set(range(indices[0], indices[-1] + 1)) - set(indices))
            raise RawFileError(
                p, f"the run finished but measured requests {missing[:10]} have no record",
                fix="records were lost between worker and file; the run cannot be trusted")
    return RawRun(
        header=header,
        records=tuple(records),
        run_end=run_end,
        partial=run_end is None or torn_lines > 0,
        torn_lines=torn_lines,
        notes=tuple(notes),
        path=str(p),
        workers=workers,
    )


def _parse(p: Path, n: int, raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise RawFileError(
            p, f"not valid JSON ({exc})", line=n,
            fix="only a torn last line is tolerated; this file is damaged in the middle",
        ) from exc


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
    for key in ("wall_anchor_ns", "perf_anchor_ns"):
        if not _opt_int(obj.get(key)):
            raise RawFileError(p, f"run header {key!r} must be an integer", line=n)
    return obj
