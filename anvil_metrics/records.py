"""Raw per-request records: what one stream looked like, as measured.

A `RequestRecord` is written as one JSON line of `requests.jsonl` the moment its request
ends (or fails). It holds only what was observed — integer `time.perf_counter_ns()` stamps
taken on the host that sent the request, counts, and the server's `usage` object exactly as
received — so every derived figure (`RequestTiming`, aggregates) can be rebuilt later, by
`anvil postprocess` and checked by `anvil verify`, with the formulas in `derive.py`.

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
- `"run_end"`: last line of a run that finished; its absence marks the file partial.

Chunk arrivals are delta-encoded: `chunk_deltas_ns[0]` is the first output-carrying chunk's
arrival minus `start_ns`, and each later entry is the gap from the previous one, so
`start_ns + cumsum(chunk_deltas_ns)` gives every arrival and inter-token gaps are the
entries after the first. `chunk_channels` has one letter per such chunk: `r` reasoning,
`c` content, `b` a chunk carrying both.
"""

from __future__ import annotations

import os
import socket
from dataclasses import asdict, dataclass, field
from typing import Any

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
)
PHASES = ("connect", "headers", "prefill", "decode")


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

    def chunk_arrivals_ns(self) -> list[int]:
        """Absolute perf_counter_ns arrival of every output-carrying chunk."""
        out: list[int] = []
        t = self.start_ns
        for d in self.chunk_deltas_ns:
            t += d
            out.append(t)
        return out

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
