"""Raw per-request records: what one stream looked like, as measured.

A `RequestRecord` is written as one JSON line of `requests.jsonl` the moment its request
ends (or fails). It holds only what was observed — integer `time.perf_counter_ns()` stamps
taken on the host that sent the request, counts, and the server's `usage` object exactly as
received — so every derived figure can be rebuilt later, by `anvil postprocess` and checked
by `anvil verify`, with the formulas of the metric catalogue (`catalog.py`).

The file `requests.jsonl` holds three kinds of line, told apart by `"type"`:

- `"run"`: first line; the run's identity, parameters and its clock anchor
  (`wall_anchor_ns` from `time.time_ns()` and `perf_anchor_ns` from `perf_counter_ns()`,
  read back to back), so wall-clock moments can be placed without mixing clocks in any
  duration.
- `"request"`: one `RequestRecord` per issued request (warm-up ones included, marked).
- `"worker"`: in a distributed run, one per worker (written by the master): its identity
  (`host:pid`, the records' `worker`) and `perf_offset_ns`, the measured offset of its
  `perf_counter_ns` to the master's (0 on the same kernel), which places its stamps on one
  time line; durations never use it.
- `"run_end"`: last line of a run that finished, with why it ended (`ended_by`: see
  `ENDED_BY`) and, for a signal or an abort, the one line that says what happened
  (`end_reason`); its absence, or a signal or an abort, marks the run partial.

Chunk arrivals are delta-encoded: `chunk_deltas_ns[0]` is the first output-carrying chunk's
arrival minus `start_ns`, and each later entry is the gap from the previous one, so
`start_ns + cumsum(chunk_deltas_ns)` gives every arrival and inter-token gaps are the
entries after the first. `chunk_channels` has one letter per such chunk: `r` reasoning,
`c` content, `b` a chunk carrying both.

`record_problem` is the one judge of a `"request"` line: the raw reader refuses what it
refuses, and the distributed master applies it to every record a worker ships.
"""

from __future__ import annotations

import os
import socket
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson

from anvil_metrics.fieldtypes import COUNT_LIMIT as COUNT_LIMIT
from anvil_metrics.fieldtypes import STAMP_LIMIT as STAMP_LIMIT
from anvil_metrics.jsonio import show

RAW_SCHEMA = "anvil-serving.requests/v1"


def worker_identity() -> str:
    """`host:pid` of this process: the `worker` field of every record it measures (a single
    process's run, or a distributed worker's), and a `"worker"` line's `worker`."""
    return f"{socket.gethostname()}:{os.getpid()}"


# Failure kinds (see the faults issue for the full table); phases say where it happened.
FAILURE_KINDS = (
    "http_error",
    "rate_limited",
    "connection",
    "truncated",
    "malformed_chunk",
    "stream_error",
    "timeout",
    "client_error",
    "cancelled",
    "worker_lost",  # a distributed worker vanished with this request in flight
    "aborted",  # closed by the client on purpose (--cancel-rate, `load/cancel.py`)
)
PHASES = ("connect", "headers", "prefill", "decode")

# Why a run ended (the `run_end` line's `ended_by`, the benchmark's): its measured requests
# were all done; its duration was over; Locust stopped it (the web UI's stop, its -t, a
# shape's end); a SIGINT or SIGTERM; or anvil aborted it (the server stopped answering).
# The last two mark the run partial: it did not do what it planned.
ENDED_BY = ("requests", "duration", "stopped", "signal", "aborted")
PARTIAL_ENDS = ("signal", "aborted")


def failure_field_problems(f: dict[str, Any]) -> list[tuple[str, str]]:
    """(field, what it must be) for each of a failure's `kind`, `message`, `http_status` and
    `phase` that is present with a value a Failure cannot hold. The one rule the raw reader
    (a record's `failure`) and `verify` (a benchmark's `failures[]`) apply; which fields
    must be present is each one's own (a raw record may leave `message` out)."""
    wrong = []
    if "kind" in f and not (isinstance(f["kind"], str) and f["kind"] in FAILURE_KINDS):
        wrong.append(("kind", f"one of {list(FAILURE_KINDS)}"))
    if "message" in f and not isinstance(f["message"], str):
        wrong.append(("message", "a string"))
    status = f.get("http_status")
    if status is not None and (not isinstance(status, int) or isinstance(status, bool)):
        wrong.append(("http_status", "an integer or null"))
    phase = f.get("phase")
    if phase is not None and not (isinstance(phase, str) and phase in PHASES):
        wrong.append(("phase", f"one of {list(PHASES)} or null"))
    return wrong


@dataclass(frozen=True, slots=True)
class Failure:
    """Why a request did not complete.

    `kind` is one of FAILURE_KINDS, `phase` one of PHASES (where the failure happened),
    `http_status` the response status when one was received, `message` a human-readable
    description (the server's own message where it sent one).
    """

    kind: str
    message: str
    http_status: int | None = None
    phase: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Failure:
        return cls(
            kind=d["kind"],
            message=d.get("message", ""),
            http_status=d.get("http_status"),
            phase=d.get("phase"),
        )


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One issued request, as observed. Stamps are `perf_counter_ns()` integers.

    - `start_ns`: just before the request is written to the socket.
    - `first_output_ns`: arrival of the first chunk with a non-empty reasoning or content
      delta; `None` if none arrived.
    - `first_content_ns`: arrival of the first chunk with non-empty `delta.content`.
    - `extra["first_chunk_ns"]`: arrival of the first chunk of any kind with a `choices`
      entry, role-only included (what vLLM's server-side TTFT measures); absent when no
      such chunk arrived, and in files written before anvil recorded it.
    - `end_ns`: `[DONE]`, or the clean end of the response after a `finish_reason`; for a
      failure, the moment the failure was detected.
    - `usage`: the server's `usage` object as received (last one wins), or `None`.
    - `failure`: `None` for a completed request.
    """

    request_index: int
    start_ns: int
    end_ns: int | None
    first_output_ns: int | None = None
    first_content_ns: int | None = None
    warmup: bool = False
    planned_context_tokens: int | None = None
    reasoning_chunks: int = 0
    content_chunks: int = 0
    chunk_deltas_ns: tuple[int, ...] = ()
    chunk_channels: str = ""
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None
    http_status: int | None = None
    failure: Failure | None = None
    worker: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.failure is None

    def to_json_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "type": "request",
            "request_index": self.request_index,
            "warmup": self.warmup,
            "planned_context_tokens": self.planned_context_tokens,
            "start_ns": self.start_ns,
            "first_output_ns": self.first_output_ns,
            "first_content_ns": self.first_content_ns,
            "end_ns": self.end_ns,
            "reasoning_chunks": self.reasoning_chunks,
            "content_chunks": self.content_chunks,
            "chunk_deltas_ns": list(self.chunk_deltas_ns),
            "chunk_channels": self.chunk_channels,
            "usage": self.usage,
            "finish_reason": self.finish_reason,
            "http_status": self.http_status,
            "failure": None if self.failure is None else self.failure.to_dict(),
            "worker": self.worker,
        }
        if self.extra:
            d["extra"] = self.extra
        return d

    @classmethod
    def from_json_dict(cls, d: dict[str, Any]) -> RequestRecord:
        failure = d.get("failure")
        return cls(
            request_index=int(d["request_index"]),
            start_ns=int(d["start_ns"]),
            end_ns=d.get("end_ns"),
            first_output_ns=d.get("first_output_ns"),
            first_content_ns=d.get("first_content_ns"),
            warmup=bool(d.get("warmup", False)),
            planned_context_tokens=d.get("planned_context_tokens"),
            reasoning_chunks=int(d.get("reasoning_chunks") or 0),  # null: none, as absent
            content_chunks=int(d.get("content_chunks") or 0),
            chunk_deltas_ns=tuple(d.get("chunk_deltas_ns") or ()),
            chunk_channels=d.get("chunk_channels") or "",
            usage=d.get("usage"),
            finish_reason=d.get("finish_reason"),
            http_status=d.get("http_status"),
            failure=None if failure is None else Failure.from_dict(failure),
            worker=d.get("worker"),
            extra=d.get("extra") or {},
        )


# --- the one validator of a raw request line ----------------------------------------------

# What a row of the columns can hold (`rawcolumns.py`): |stamp| and |clock offset| below
# STAMP_LIMIT, so every sum and difference of two fits int64; counts below COUNT_LIMIT, so
# each converts to a double exactly (`fieldtypes.Stamp`, `Count`). perf_counter_ns reaches
# 2**62 after 146 years of uptime.
_DIGITS_AND_COMMAS = b"0123456789,"


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _opt_int(x: Any) -> bool:
    return x is None or _is_int(x)


_REQUIRED_INT = ("request_index", "start_ns")
_OPTIONAL_STAMPS = ("end_ns", "first_output_ns", "first_content_ns")
# how deep a run / run_end / worker line may nest (anvil writes at most ~8 levels; far below
# the 254 that orjson writes, however a value is placed in a benchmark)
MAX_LINE_DEPTH = 32


def all_counts(xs: list[Any]) -> bool:
    """Every item of `xs` is a non-negative integer (not a bool).

    The quick test first: orjson writes such a list as `[` digits and commas `]` and nothing
    else — a bool prints as true/false, a float with `.` or `e`, a negative number with `-`,
    a string with quotes, a nested list or object with more brackets. Anything orjson cannot
    write at all (a Python int subclass, an int beyond 64 bits) gets the item-by-item test.
    """
    try:
        if orjson.dumps(xs).translate(None, _DIGITS_AND_COMMAS) == b"[]":
            return True
    except TypeError:
        pass
    return all(_is_int(x) and x >= 0 for x in xs)


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
    failure = d.get("failure")
    problem = _field_problem(d) or _extra_problem(d) or failure_problem(failure)
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


def _field_problem(d: dict[str, Any]) -> str | None:
    """`record_problem`'s first checks: each field's JSON type and bounds."""
    for key in _REQUIRED_INT:
        if not _is_int(d.get(key)):
            return f"{key} must be an integer, got {show(d.get(key))}"
    if not 0 <= d["request_index"] < COUNT_LIMIT:
        return f"request_index must be >= 0 and below 2**53, got {d['request_index']}"
    for key in _OPTIONAL_STAMPS:
        if not _opt_int(d.get(key)):
            return f"{key} must be an integer or null, got {show(d.get(key))}"
    for key in ("start_ns", *_OPTIONAL_STAMPS):
        v = d.get(key)
        if v is not None and not -STAMP_LIMIT < v < STAMP_LIMIT:
            return (f"{key} must lie within ±2**62 (a perf_counter_ns stamp), got {v}")
    for key in ("reasoning_chunks", "content_chunks", "planned_context_tokens"):
        v = d.get(key)
        if v is not None and not (_is_int(v) and 0 <= v < COUNT_LIMIT):
            return f"{key} must be a non-negative integer below 2**53, got {show(v)}"
    if (d.get("reasoning_chunks") or 0) + (d.get("content_chunks") or 0) >= COUNT_LIMIT:
        return "reasoning_chunks + content_chunks must be below 2**53"
    if "warmup" in d and not isinstance(d["warmup"], bool):
        return f"warmup must be true or false, got {show(d['warmup'])}"
    deltas = d.get("chunk_deltas_ns") or []
    if not isinstance(deltas, list) or not all_counts(deltas):
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
    return None


def _extra_problem(d: dict[str, Any]) -> str | None:
    """`record_problem`'s checks of `extra` (its fields' types and bounds, the first chunk
    between the start and the first output and end), on fields `_field_problem` passed."""
    delay = (d.get("extra") or {}).get("start_delay_ns")
    if _is_int(delay) and not 0 <= delay < STAMP_LIMIT:
        return f"extra.start_delay_ns must lie within 0 … 2**62, got {delay}"
    chunk = (d.get("extra") or {}).get("first_chunk_ns")
    if chunk is not None:
        if not _is_int(chunk) or not -STAMP_LIMIT < chunk < STAMP_LIMIT:
            return f"extra.first_chunk_ns must be an integer within ±2**62, got {show(chunk)}"
        later = [(k, d.get(k)) for k in ("first_output_ns", "end_ns")
                 if _is_int(d.get(k))]
        if _is_int(d.get("start_ns")) and chunk < d["start_ns"]:
            return f"stamps out of order: extra.first_chunk_ns {chunk} < start_ns {d['start_ns']}"
        for k, v in later:
            if v < chunk:
                return f"stamps out of order: {k} {v} < extra.first_chunk_ns {chunk}"
    waited = (d.get("extra") or {}).get("waited_for_user", False)
    if not isinstance(waited, bool):
        return f"extra.waited_for_user must be true or false, got {show(waited)}"
    return _conversation_problem(d.get("extra") or {}) or _mix_problem(d.get("extra") or {})


def _mix_problem(x: dict[str, Any]) -> str | None:
    """A mix's request (`extra.class_index`, `model_index`): positions, whole numbers."""
    for key in ("class_index", "model_index"):
        v = x.get(key)
        if v is not None and (not _is_int(v) or not 0 <= v < COUNT_LIMIT):
            return f"extra.{key} must be a whole number from 0, got {show(v)}"
    return None


def _conversation_problem(x: dict[str, Any]) -> str | None:
    """A conversation's turn (`extra.conversation`, `turn`, `history_tokens`): whole
    numbers, the turn from 1, the history null on a first turn or when not counted."""
    if "conversation" not in x:
        return None
    for key, least, nullable in (("conversation", 0, False), ("turn", 1, False),
                                 ("history_tokens", 0, True)):
        v = x.get(key)
        if v is None and nullable:
            continue
        if not _is_int(v) or not least <= v < COUNT_LIMIT:
            return (f"extra.{key} must be a whole number from {least}"
                    f"{' or null' if nullable else ''}, got {show(v)}")
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


