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

Why msgspec Structs (`fieldtypes.py`): each field is stated once, with its type, bounds,
unit and meaning; a `"request"` line is read by decoding it into `RequestLine` (generated
from `RequestRecord`: what a file may hold where it differs from what anvil writes), which
checks every type while it parses, in C; `line_problem` adds the rules a type cannot say
(stamps in order, a first-output stamp exactly when output arrived). The raw reader, the
distributed master (`record_problem`, on every record a worker ships) and the JSON Schema
of the line all come from these definitions.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Annotated, Any, Literal, get_args, get_type_hints

import msgspec
import orjson
from msgspec import UNSET, Meta, Raw, Struct, UnsetType

from anvil_metrics.fieldtypes import COUNT_LIMIT as COUNT_LIMIT
from anvil_metrics.fieldtypes import STAMP_LIMIT as STAMP_LIMIT
from anvil_metrics.fieldtypes import Count, Stamp, breach, described

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
    "overrun",  # more output chunks than max_tokens allows (`wire/observe.py`): closed
    "bad_response",  # answered, but not as asked: no event stream, a head too long
)
PHASES = ("connect", "headers", "prefill", "decode")

# Why a run ended (the `run_end` line's `ended_by`, the benchmark's): its measured requests
# were all done; its duration was over; Locust stopped it (the web UI's stop, its -t, a
# shape's end); a SIGINT or SIGTERM; or anvil aborted it (the server stopped answering).
# The last two mark the run partial: it did not do what it planned.
ENDED_BY = ("requests", "duration", "stopped", "signal", "aborted")
PARTIAL_ENDS = ("signal", "aborted")
# failure kinds the client made itself, never the server's failures: the run's end cut the
# request (`cancelled`), or it was closed on purpose (`aborted`)
NOT_THE_SERVERS = ("cancelled", "aborted")

# how deep a run / run_end / worker line may nest (anvil writes at most ~8 levels; far below
# the 254 that orjson writes, however a value is placed in a benchmark)
MAX_LINE_DEPTH = 32

Delta = Annotated[int, Meta(ge=0)]  # a gap between two chunk arrivals, ns
Status = Annotated[int, Meta(ge=-(2**63), le=2**63 - 1)]  # what a benchmark's int64 holds
Turn = Annotated[int, Meta(ge=1, lt=COUNT_LIMIT)]


class Failure(Struct, frozen=True, gc=False):
    """Why a request did not complete."""

    kind: Annotated[Literal[FAILURE_KINDS], described(  # type: ignore[valid-type]
        "", "what went wrong (`wire/failures.py` maps each exception to its kind)")]
    message: Annotated[str, described(
        "", "what happened, in words (the server's own message where it sent one)")] = ""
    http_status: Annotated[Status | None, described(
        "", "the response's HTTP status, when one was received")] = None
    phase: Annotated[Literal[PHASES] | None, described(  # type: ignore[valid-type]
        "", "where the request was: connecting, awaiting the response head, awaiting the "
        "first output (prefill) or streaming it (decode)")] = None

    def to_dict(self) -> dict[str, Any]:
        return msgspec.structs.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Failure:
        return cls(kind=d["kind"], message=d.get("message", ""),
                   http_status=d.get("http_status"), phase=d.get("phase"))


class RequestRecord(Struct, frozen=True):
    """One issued request, as observed (one `"request"` line of `requests.jsonl`). Stamps
    are `perf_counter_ns()` integers on the sending host's clock."""

    request_index: Annotated[Count, described(
        "", "the request's number, from 0 (warm-ups have their own numbers)")]
    start_ns: Annotated[Stamp, described("ns", "just before the request was written to the "
                                         "socket")]
    end_ns: Annotated[Stamp | None, described(
        "ns", "`[DONE]`, or the clean end of the response after a finish_reason; for a "
        "failure, the moment it was detected")]
    first_output_ns: Annotated[Stamp | None, described(
        "ns", "arrival of the first chunk with a non-empty reasoning or content delta; null "
        "when none arrived")] = None
    first_content_ns: Annotated[Stamp | None, described(
        "ns", "arrival of the first chunk with a non-empty content delta; null when none "
        "arrived")] = None
    warmup: Annotated[bool, described("", "a warm-up request (kept out of every figure)")
                      ] = False
    planned_context_tokens: Annotated[Count | None, described(
        "tok", "the prompt size the run planned for it")] = None
    reasoning_chunks: Annotated[Count, described(
        "chunks", "chunks with a non-empty reasoning delta")] = 0
    content_chunks: Annotated[Count, described(
        "chunks", "chunks with a non-empty content delta")] = 0
    chunk_deltas_ns: Annotated[tuple[Delta, ...], described(
        "ns", "each output-carrying chunk's arrival: the first after start_ns, each later "
        "one after the one before")] = ()
    chunk_channels: Annotated[str, described(
        "", "one letter per such chunk: r reasoning, c content, b both")] = ""
    usage: Annotated[dict[str, Any] | None, described(
        "", "the server's usage object as received (the last one wins), or null")] = None
    finish_reason: Annotated[str | None, described(
        "", "the server's finish_reason (stop, length, ...)")] = None
    http_status: Annotated[Status | None, described("", "the response's HTTP status")] = None
    failure: Annotated[Failure | None, described(
        "", "why the request did not complete; null for a completed request")] = None
    worker: Annotated[str | None, described(
        "", "`host:pid` of the process that measured it")] = None
    extra: Annotated[dict[str, Any], described(
        "", "what else was observed: the keys of `Extra`, and others a reader may ignore; "
        "written only when it holds something")] = msgspec.field(default_factory=dict)

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
    def from_json_dict(cls, d: Mapping[str, Any]) -> RequestRecord:
        """The record of a line `record_problem` accepts (nulls and absences as defaults)."""
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


class Extra(Struct, frozen=True, gc=False):
    """The keys of a record's `extra` that anvil reads (any other key is kept in the file
    and not read)."""

    start_delay_ns: Annotated[Annotated[int, Meta(ge=0, lt=STAMP_LIMIT)] | None, described(
        "ns", "how late the request was written after it fell due (a paced or open-loop "
        "run)")] = None
    first_chunk_ns: Annotated[Stamp | None, described(
        "ns", "arrival of the first chunk of any kind with a choices entry, role-only "
        "included (what vLLM's server-side TTFT measures); absent in files from before "
        "anvil recorded it")] = None
    waited_for_user: Annotated[bool, described(
        "", "open loop: no user was free when the request fell due")] = False
    conversation: Annotated[Count | UnsetType, described(
        "", "a conversation's turn: the conversation's number (its first request index)")
    ] = UNSET
    turn: Annotated[Turn | UnsetType, described(
        "", "a conversation's turn: the user turn, from 1; an agent job's request: its "
        "turn in its session, from 1")] = UNSET
    history_tokens: Annotated[Count | None, described(
        "tok", "a conversation's turn: the previous turn's usage.prompt_tokens; null on "
        "a first turn or when not counted")] = None
    class_index: Annotated[Count | None, described(
        "", "a mix's request: its request class (a position in the plan)")] = None
    model_index: Annotated[Count | None, described(
        "", "a mix's request: its model (a position in the model names)")] = None
    job: Annotated[Count | None, described(
        "", "an agent job's request: the run's job number, in start order (it replays the "
        "header's params.agent.job_ids[job % their count])")] = None
    session: Annotated[Count | None, described(
        "", "an agent job's request: its session (a position in its job, the root 0)")] = None
    parent_session: Annotated[Count | None, described(
        "", "an agent job's request: its session's parent (a position in its job); null "
        "for a root")] = None
    depth: Annotated[Count | None, described(
        "", "an agent job's request: its session's depth (the root 0, a sub-agent 1, …)")
    ] = None
    tool_wait_ns: Annotated[Annotated[int, Meta(ge=0, lt=STAMP_LIMIT)] | None, described(
        "ns", "an agent job's request: the tool wait the client slept before it (0: none)")
    ] = None
    join_wait_ns: Annotated[Annotated[int, Meta(ge=0, lt=STAMP_LIMIT)] | None, described(
        "ns", "an agent job's request: the time its turn waited for its sub-agents' joins "
        "(0: none)")] = None
    prefill_gate_wait_ns: Annotated[Annotated[int, Meta(ge=0, lt=STAMP_LIMIT)] | None, described(
        "ns", "the time the request waited at the prefill gate (--prefill-concurrency) before "
        "it was sent")] = None
    replica: Annotated[Annotated[int, Meta(ge=0)] | None, described(
        "", "--host URL,URL: the replica the request was sent to, its position in the "
        "header's params.replicas")] = None
    request_bytes: Annotated[Count | None, described(
        "B", "the request body's bytes as sent (a request class's request)")] = None
    images: Annotated[Count | None, described(
        "", "a media class's request: the images it carried")] = None
    audio_clips: Annotated[Count | None, described(
        "", "a media class's request: the audio clips it carried")] = None
    check_passed: Annotated[bool | None, described(
        "", "a check class's request (`[[request_class]] check`): its answer passed the "
        "suite's own judge")] = None
    check_reason: Annotated[str | None, described(
        "", "a check class's failed answer: the judge's reason (at most 160 characters)")
    ] = None


class Usage(Struct, frozen=True, gc=False):
    """The server's `usage` object as received. A count is read where it is a whole number
    0 <= n < 2**53 and taken as not reported otherwise (never a refused line: a server's
    odd usage is its own business); other keys are not read. The Responses and Messages
    APIs' names (`input_tokens`, ...) are read as the chat names when `prompt_tokens` is
    absent (`input_total`)."""

    prompt_tokens: Annotated[Any, described("tok", "the prompt, as the server counted "
                                            "it")] = UNSET
    completion_tokens: Annotated[Any, described("tok", "the output, as the server "
                                                "counted it")] = UNSET
    prompt_tokens_details: Annotated[Any, described(
        "", "an object whose cached_tokens (tok) is the prompt's prefix-cache hit, "
        "image_tokens and audio_tokens (tok) its media's where the server splits them")] = UNSET
    completion_tokens_details: Annotated[Any, described(
        "", "an object whose reasoning_tokens (tok) is the output's reasoning")] = UNSET
    input_tokens: Annotated[Any, described("tok", "prompt_tokens (Responses API)")] = UNSET
    output_tokens: Annotated[Any, described("tok", "completion_tokens (Responses API)")
                             ] = UNSET
    input_tokens_details: Annotated[Any, described(
        "", "prompt_tokens_details (Responses API)")] = UNSET
    output_tokens_details: Annotated[Any, described(
        "", "completion_tokens_details (Responses API)")] = UNSET
    cache_read_input_tokens: Annotated[Any, described(
        "tok", "the prompt's prefix-cache hit, not in input_tokens (Messages API)")] = UNSET
    cache_creation_input_tokens: Annotated[Any, described(
        "tok", "the prompt's tokens written to the cache, not in input_tokens (Messages "
        "API)")] = UNSET


def input_total(inp: Any, cache_read: Any, cache_creation: Any) -> Any:
    """The prompt's count in the Responses or Messages API's names: `input_tokens`, plus
    the Anthropic Messages API's cache reads and writes, which its `input_tokens` leaves out
    (absent or null: none; vLLM's sends neither, its `input_tokens` is the whole prompt).
    None where a count given is not a whole number."""
    total = inp
    for n in (cache_read, cache_creation):
        if n is UNSET or n is None:
            continue
        if type(n) is not int or type(total) is not int:
            return None
        total += n
    return total


# --- a "request" line as a file holds it ---------------------------------------------------

# Where a line may differ from the record anvil writes now: every field but request_index
# and start_ns may be absent (files from before it existed; read as its default, or null);
# older writers wrote null for no chunks (read as none); `usage` and `extra` are read by
# their known keys; the gaps stay their JSON text, checked by `line_problem` (decoding a
# million lines' ~70 integers each costs ~1 µs a line more).
_NULL_IS_DEFAULT = ("reasoning_chunks", "content_chunks", "chunk_channels")
_READ_AS: dict[str, Any] = {
    "chunk_deltas_ns": Annotated[Raw, Meta(extra_json_schema={
        "type": ["array", "null"], "items": {"type": "integer", "minimum": 0}})],
    "usage": Usage | None,
    "extra": Extra | None,
}
_EMPTY = Raw(b"[]")


def _line_model() -> Any:
    """`RequestLine`: RequestRecord's fields, each with its words and bounds, as read."""
    hints = get_type_hints(RequestRecord, include_extras=True)
    fields = []
    for f in msgspec.structs.fields(RequestRecord):
        kind, *metas = get_args(hints[f.name])  # every field is Annotated with its words
        words = [m for m in metas if m.description]
        bounds = [m for m in metas if not m.description]
        kind = Annotated[(kind, *bounds)] if bounds else kind
        kind = _READ_AS.get(f.name, kind | None if f.name in _NULL_IS_DEFAULT else kind)
        kind = Annotated[(kind, *words)]
        if f.name == "chunk_deltas_ns":
            default: Any = msgspec.field(default_factory=lambda: _EMPTY)
        elif f.name in ("request_index", "start_ns"):
            default = msgspec.NODEFAULT
        else:
            default = None if f.default in (msgspec.NODEFAULT, ()) or f.name == "extra" else (
                f.default)
        fields.append((f.name, kind, default))
    return msgspec.defstruct("RequestLine", fields, kw_only=True, frozen=True, gc=False,
                             tag_field="type", tag="request", module=__name__)


RequestLine = _line_model()
decode_line = msgspec.json.Decoder(RequestLine).decode  # raises msgspec.MsgspecError
_GAPS = msgspec.json.Decoder(list[Delta] | None)
_encode = msgspec.json.Encoder().encode  # any integer (orjson's stop at 64 bits)
_DIGITS_AND_COMMAS = b"0123456789,"


def line_problem(r: Any) -> str | None:
    """Why a decoded `RequestLine` `r` (every type and bound already checked) cannot be a
    record, or None: what a type cannot say. The gaps are digits and commas in brackets (as
    orjson writes a list of non-negative integers; other text is decoded to say); the
    first chunk of any kind lies between the start and the first output and end; a
    conversation's turn has its number; a completed request (failure null) has an end; a
    first-content stamp exists exactly when content chunks arrived (and so a first output),
    a first-output stamp exactly when output chunks did; start <= first output <= first
    content <= end, where present."""
    gaps = bytes(r.chunk_deltas_ns)
    if gaps.translate(None, _DIGITS_AND_COMMAS) != b"[]" and (
            problem := _gaps_problem(gaps)):
        return problem
    s, fo, fc, e = r.start_ns, r.first_output_ns, r.first_content_ns, r.end_ns
    x = r.extra
    if x is not None and (x.first_chunk_ns is not None or x.conversation is not UNSET) and (
            problem := _extra_problem(x, s, fo, e)):
        return problem
    if e is None and r.failure is None:
        return "a completed request (failure null) must have an end_ns"
    if fc is not None and fo is None:
        return "first_content_ns is set but first_output_ns is not (content is output)"
    content = r.content_chunks or 0
    output = (r.reasoning_chunks or 0) + content
    if output >= COUNT_LIMIT:
        return "reasoning_chunks + content_chunks must be below 2**53"
    if (fc is None) != (content == 0):
        return (f"first_content_ns is {fc} with content_chunks {content}: a first-content "
                "stamp exists exactly when content chunks arrived")
    if (fo is None) != (output == 0):
        return (f"first_output_ns is {fo} with {output} output chunks: a first-output stamp "
                "exists exactly when output chunks arrived")
    # the stamps in order, where present (a first content has a first output: above)
    if fo is not None and fo < s:
        return f"stamps out of order: first_output_ns {fo} < start_ns {s}"
    if fc is not None and fc < fo:
        return f"stamps out of order: first_content_ns {fc} < first_output_ns {fo}"
    if e is not None:
        name, last = (("first_content_ns", fc) if fc is not None else
                      ("first_output_ns", fo) if fo is not None else ("start_ns", s))
        if e < last:
            return f"stamps out of order: end_ns {e} < {name} {last}"
    return None


def _gaps_problem(gaps: bytes) -> str | None:
    """`chunk_deltas_ns`'s text other than digits and commas in brackets: its words, if it
    is not null or a list of non-negative integers (white space, say)."""
    try:
        _GAPS.decode(gaps)
    except msgspec.ValidationError as exc:
        return breach(str(exc), orjson.loads(gaps), list[Delta] | None, "chunk_deltas_ns")
    except msgspec.DecodeError:  # deeper than msgspec reads: refused as such
        return "chunk_deltas_ns: expected a list of non-negative integers or null"
    return None


def line_gaps(r: Any) -> list[int]:
    """A decoded line's `chunk_deltas_ns` (one `line_problem` accepts) as integers."""
    return _GAPS.decode(bytes(r.chunk_deltas_ns)) or []


def _extra_problem(x: Extra, s: int, fo: int | None, e: int | None) -> str | None:
    chunk = x.first_chunk_ns
    if chunk is not None:
        if chunk < s:
            return f"stamps out of order: extra.first_chunk_ns {chunk} < start_ns {s}"
        if fo is not None and fo < chunk:
            return f"stamps out of order: first_output_ns {fo} < extra.first_chunk_ns {chunk}"
        if e is not None and e < chunk:
            return f"stamps out of order: end_ns {e} < extra.first_chunk_ns {chunk}"
    if x.turn is UNSET and x.conversation is not UNSET:
        return "extra.turn: missing (extra.conversation is set: a conversation's turn)"
    return None


def read_request(d: Mapping[str, Any], raw: bytes | None = None) -> Any:
    """A `"request"` line's object `d` (as orjson parsed it from `raw`, the line's text, or
    as a worker shipped it) as a `RequestLine`, or the one line that says why it cannot be
    a record (a `str`)."""
    try:
        line = decode_line(_encode({**d, "type": "request"}) if raw is None else raw)
    except msgspec.ValidationError as exc:
        return breach(str(exc), d, RequestLine, "")
    except (msgspec.MsgspecError, TypeError, RecursionError) as exc:  # not JSON values
        return f"not a JSON object of JSON values ({exc})"
    return line_problem(line) or line


def record_problem(d: Mapping[str, Any]) -> str | None:
    """Why the object of a `"request"` line cannot be a valid RequestRecord, or None: its
    fields' types and bounds (`RequestLine`) and the rules of `line_problem`."""
    out = read_request(d)
    return out if isinstance(out, str) else None


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
