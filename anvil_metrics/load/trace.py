"""Recorded traces: read a file of timed requests, check every line, and say what replaying
it will ask of a server before any GPU time is spent (`anvil trace stats`).

Three formats of requests, each one request per line, told by `--trace-format` or by the
file itself (and three of agent jobs, `AGENT_FORMATS`, which `detect_format` tells apart
here and `load/agentjob.py` reads: a trace of jobs is not a list of requests):

- `mooncake` (Mooncake's published traces, JSONL): `timestamp` (ms from the trace's start),
  `input_length`, `output_length`, `hash_ids` (one id per block of `block_tokens` input
  tokens, 512 in Mooncake's traces; the last block holds the remainder). Equal ids at the
  same position mean an equal prefix up to that block, so the ids say exactly which prompt
  prefixes the trace's requests share.
- `burstgpt` (BurstGPT's CSV): a header with `Timestamp` (s), `Model`, `Request tokens`,
  `Response tokens`; `--trace-model` keeps one model's rows. No sharing is described.
- `jsonl` (anvil's plain form): `timestamp` (ms), `input_tokens`, `output_tokens`, and
  optionally `session_id` (a conversation the request belongs to) and `prefix_id` (requests
  with one `prefix_id` share their prefix; its length is `prefix_tokens`, required with it).

A line that cannot be read is one `TraceError` naming the file, the line number, the field
and what it must be. Timestamps must not go backwards.

The expected prefix reuse of a trace (`expected_reuse`): replaying it in order with a cache
that keeps every block it has seen, a request's cached tokens are its leading blocks seen
before (at most its input less one token, as vLLM computes at least one); the ratio is the
sum of those over the sum of input tokens. A server whose cache holds less shows a lower
ratio than this.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from anvil_metrics.errors import InputEntryError, UsageError
from anvil_metrics.jsonio import object_lines

FORMATS = ("mooncake", "burstgpt", "jsonl")
AGENT_FORMATS = ("weka", "otel", "agent-jsonl")  # agent jobs: load/agentjob.py
ALL_FORMATS = FORMATS + AGENT_FORMATS
MOONCAKE_BLOCK_TOKENS = 512
_BURSTGPT_COLUMNS = ("Timestamp", "Model", "Request tokens", "Response tokens")


class TraceError(InputEntryError):
    """A trace line that cannot be replayed: where, which field, what it must be."""


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request of a trace: when (ms from the trace's start), its sizes, and what it
    shares (`hash_ids` blocks; or a session and a shared prefix of `prefix_tokens`)."""

    line: int
    timestamp_ms: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()
    session_id: str | None = None
    prefix_id: str | None = None
    prefix_tokens: int = 0


def _agent_format(obj: Any) -> str | None:
    """The agent-job format of one parsed trace object (module docstring), or None."""
    if not isinstance(obj, dict):
        return None
    if "spans" in obj:
        return "otel"
    if "requests" in obj and ("block_size" in obj or "hash_id_scope" in obj):
        return "weka"
    return "agent-jsonl" if obj.get("type") == "job" else None


def _first_line(path: Path) -> bytes:
    with path.open("rb") as f:
        for raw in f:
            if raw.strip():
                return raw.strip()
    raise UsageError(f"{path}: the trace is empty")


def detect_format(path: Path) -> str:
    """The format of `path` from its first non-empty line: a CSV header with BurstGPT's
    columns, or a JSON object with `hash_ids` (mooncake) or `input_tokens` (jsonl), or one
    of the agent-job formats (`_agent_format`; a folder: its first `.json` file's; a
    `.json` file written over many lines: the whole file's)."""
    if path.is_dir():
        files = sorted(path.glob("*.json"))
        if not files:
            raise UsageError(f"{path}: the folder holds no .json trace file")
        path = files[0]
    first = _first_line(path)
    if first.startswith(b"{"):
        try:
            obj = orjson.loads(first)
        except orjson.JSONDecodeError:
            obj = None
            if path.suffix == ".json":
                try:
                    obj = orjson.loads(path.read_bytes())
                except orjson.JSONDecodeError:
                    obj = None
        keys = obj if isinstance(obj, dict) else {}
        agent = _agent_format(obj)
        if agent is not None:
            return agent
        if "hash_ids" in keys or "input_length" in keys:
            return "mooncake"
        if "input_tokens" in keys:
            return "jsonl"
    elif all(c.encode() in first for c in _BURSTGPT_COLUMNS):
        return "burstgpt"
    raise UsageError(f"{path}: cannot tell the trace's format from its first line; name it "
                     f"with --trace-format ({', '.join(ALL_FORMATS)})")


def count_field(path: str, line: int | str, obj: dict, key: str, least: int,
                name: str | None = None) -> int:
    """`obj[key]`, a whole number >= `least`, else a `TraceError` naming the field (`name`:
    where it sits, as `requests[3].in`; default the key)."""
    v = obj.get(key)
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int) or v < least:
        raise TraceError(path, line, name or key, v, f"a whole number >= {least}")
    return v


def number_field(path: str, line: int | str, obj: dict, key: str, scale: float = 1.0,
                 name: str | None = None) -> float:
    """`obj[key]` times `scale`, a finite number >= 0, else a `TraceError` (as
    `count_field`)."""
    v = obj.get(key)
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
        raise TraceError(path, line, name or key, v, "a number >= 0")
    return float(v) * scale


def _json_lines(path: Path) -> Iterator[tuple[int, dict]]:
    return object_lines(path, TraceError)


def _mooncake(path: Path, block_tokens: int) -> Iterator[TraceRequest]:
    p = str(path)
    for n, obj in _json_lines(path):
        at_ms = number_field(p, n, obj, "timestamp")  # the fields in a line's order
        size = count_field(p, n, obj, "input_length", 1)
        out = count_field(p, n, obj, "output_length", 1)
        ids = obj.get("hash_ids")  # missing: None, named as such
        if not isinstance(ids, list) or not all(
                isinstance(x, int) and not isinstance(x, bool) for x in ids):
            raise TraceError(p, n, "hash_ids", ids, "a list of whole numbers")
        if len(ids) != -(-size // block_tokens):
            raise TraceError(p, n, "hash_ids", f"{len(ids)} ids",
                             f"one id per {block_tokens}-token block of input_length {size} "
                             f"({-(-size // block_tokens)} ids; --trace-block sets the size)")
        yield TraceRequest(n, at_ms, size, out, tuple(ids))


def _plain(path: Path) -> Iterator[TraceRequest]:
    p = str(path)
    for n, obj in _json_lines(path):
        prefix_id = obj.get("prefix_id")
        prefix_tokens = 0
        if prefix_id is not None:
            prefix_tokens = count_field(p, n, obj, "prefix_tokens", 1)
        size = count_field(p, n, obj, "input_tokens", 1)
        if prefix_tokens >= size:
            raise TraceError(p, n, "prefix_tokens", prefix_tokens,
                             f"fewer than input_tokens ({size})")
        for key in ("session_id", "prefix_id"):
            v = obj.get(key)
            if isinstance(v, bool) or (v is not None and not isinstance(v, str | int)):
                raise TraceError(p, n, key, v, "a string or a whole number")
        yield TraceRequest(n, number_field(p, n, obj, "timestamp"), size,
                           count_field(p, n, obj, "output_tokens", 1),
                           session_id=None if obj.get("session_id") is None
                           else str(obj["session_id"]),
                           prefix_id=None if prefix_id is None else str(prefix_id),
                           prefix_tokens=prefix_tokens)


def _burstgpt(path: Path, model: str | None) -> Iterator[TraceRequest]:
    p = str(path)
    with path.open(newline="", encoding="utf-8") as f:
        rows = csv.reader(f)
        header = next(rows, None) or []
        missing = [c for c in _BURSTGPT_COLUMNS if c not in header]
        if missing:
            raise TraceError(p, 1, "header", ",".join(header),
                             f"BurstGPT's columns (missing: {', '.join(missing)})")
        at = {c: header.index(c) for c in _BURSTGPT_COLUMNS}
        for n, row in enumerate(rows, start=2):
            if not row:
                continue
            if len(row) < len(header):
                raise TraceError(p, n, "line", ",".join(row), f"{len(header)} columns")
            if model is not None and row[at["Model"]] != model:
                continue
            obj: dict[str, Any] = {}
            for key in ("Timestamp", "Request tokens", "Response tokens"):
                try:
                    obj[key] = float(row[at[key]])
                except ValueError:
                    raise TraceError(p, n, key, row[at[key]], "a number") from None
            if obj["Response tokens"] == 0:
                continue  # BurstGPT logs failed requests with no response: nothing to replay
            yield TraceRequest(n, number_field(p, n, obj, "Timestamp", 1000.0),
                               count_field(p, n, obj, "Request tokens", 1),
                               count_field(p, n, obj, "Response tokens", 1))


def read_trace(path: str | Path, fmt: str | None = None, *, block_tokens: int =
               MOONCAKE_BLOCK_TOKENS, model: str | None = None, limit: int | None = None,
               window_s: tuple[float, float | None] | None = None) -> list[TraceRequest]:
    """Every request of the trace, in file order, checked: those whose timestamp lies in
    `window_s` (`[start, end)` seconds after the trace's first request; None: all), of
    those the first `limit`."""
    p = Path(path)
    if p.is_dir() and (fmt in AGENT_FORMATS or fmt is None):
        fmt = fmt or detect_format(p)
    elif not p.is_file():
        raise UsageError(f"--trace {str(p)!r}: no such file; pass a trace file")
    if fmt is not None and fmt not in ALL_FORMATS:
        raise UsageError(f"--trace-format {fmt!r}: use one of {', '.join(ALL_FORMATS)}")
    fmt = fmt or detect_format(p)
    if fmt in AGENT_FORMATS:
        raise UsageError(f"{str(p)!r}: its format {fmt!r} holds agent jobs (sub-agents, tool "
                         "waits), which replay as a run's own --trace, not as a request "
                         "class's: use a request trace here (" + ", ".join(FORMATS) + ")")
    lines = (_mooncake(p, block_tokens) if fmt == "mooncake" else _plain(p)
             if fmt == "jsonl" else _burstgpt(p, model))
    out: list[TraceRequest] = []
    first = last = None  # the trace's first timestamp, the line before's (ms)
    for r in lines:
        if last is not None and r.timestamp_ms < last:
            raise TraceError(str(p), r.line, "timestamp", r.timestamp_ms,
                             f"a time at or after the line before's ({last:g} ms): a trace "
                             "is in time order")
        first = r.timestamp_ms if first is None else first
        last = r.timestamp_ms
        at_s = (r.timestamp_ms - first) / 1000
        if window_s is not None and at_s < window_s[0]:
            continue
        if window_s is not None and window_s[1] is not None and at_s >= window_s[1]:
            break
        out.append(r)
        if limit is not None and len(out) >= limit:
            break
    if not out:
        raise UsageError(f"{p}: the trace holds no request to replay"
                         + (f" for model {model!r}" if model else "")
                         + (" in --trace-window " + ":".join(f"{x:g}" for x in window_s
                                                             if x is not None)
                            if window_s else ""))
    return out


def expected_reuse(reqs: list[TraceRequest], block_tokens: int = MOONCAKE_BLOCK_TOKENS
                   ) -> tuple[int, int]:
    """(cached tokens, input tokens) over the trace replayed in order with a cache that
    keeps everything (see the module docstring); `prefix_id`s count as shared prefixes, and
    a session's request shares the session's request before it, as far as the shorter of
    the two (`prep/traceprompts.py` builds it so)."""
    seen_chains: set[tuple[int, int]] = set()  # (position, id): ids are prefix-chained
    seen_prefixes: set[str] = set()
    session_last: dict[str, int] = {}  # a session's request before: its input tokens
    cached = total = 0
    for r in reqs:
        total += r.input_tokens
        hit = 0
        if r.session_id is not None and not r.hash_ids:
            before = session_last.get(r.session_id)
            session_last[r.session_id] = r.input_tokens
            if before is not None:
                cached += min(before, r.input_tokens - 1)
                continue
        if r.hash_ids:
            full = r.input_tokens // block_tokens  # a partial last block is never cached
            for k, h in enumerate(r.hash_ids[:full]):
                if (k, h) not in seen_chains:
                    break
                hit += block_tokens
            seen_chains.update(enumerate(r.hash_ids[:full]))
        elif r.prefix_id is not None:
            if r.prefix_id in seen_prefixes:
                hit = r.prefix_tokens
            seen_prefixes.add(r.prefix_id)
        cached += min(hit, r.input_tokens - 1)
    return cached, total


@dataclass(frozen=True, slots=True)
class TraceStats:
    """What `anvil trace stats` prints: counts, the trace's span and rate, the sizes'
    percentiles (nearest rank), and the expected prefix reuse."""

    requests: int
    duration_s: float
    mean_rate_rps: float | None
    peak_rate_rps: float  # the most requests in any one-second window starting at a request
    input_tokens: dict[str, int]  # p50, p90, p99, max
    output_tokens: dict[str, int]
    cached_tokens: int
    total_input_tokens: int
    sessions: int | None

    @property
    def expected_hit_ratio(self) -> float:
        return self.cached_tokens / self.total_input_tokens


def _percentiles(values: list[int]) -> dict[str, int]:
    s = sorted(values)
    n = len(s)

    def rank(p: float) -> int:
        return int(s[max(0, math.ceil(p / 100 * n) - 1)])

    return {"p50": rank(50), "p90": rank(90), "p99": rank(99), "max": int(s[-1])}


def trace_stats(reqs: list[TraceRequest], block_tokens: int = MOONCAKE_BLOCK_TOKENS
                ) -> TraceStats:
    import numpy as np  # here: `anvil trace stats` alone needs it, not every `anvil` command

    t = np.array([r.timestamp_ms for r in reqs]) / 1000.0
    span = float(t[-1] - t[0])
    in_window = np.searchsorted(t, t + 1.0, side="left") - np.arange(t.size)
    cached, total = expected_reuse(reqs, block_tokens)
    sessions = {r.session_id for r in reqs if r.session_id is not None}
    return TraceStats(
        requests=len(reqs), duration_s=span,
        mean_rate_rps=(len(reqs) - 1) / span if span > 0 else None,
        peak_rate_rps=float(in_window.max()),
        input_tokens=_percentiles([r.input_tokens for r in reqs]),
        output_tokens=_percentiles([r.output_tokens for r in reqs]),
        cached_tokens=cached, total_input_tokens=total,
        sessions=len(sessions) if sessions else None)


@dataclass(frozen=True, slots=True)
class TracePlan:
    """What the `--trace*` flags ask: the file, its format (None: detected), the speed-up,
    how many of its requests, the token block its `hash_ids` stand for, a model filter
    (BurstGPT) and a time window."""

    path: str
    fmt: str | None = None
    speed: float = 1.0
    limit: int | None = None
    block_tokens: int = MOONCAKE_BLOCK_TOKENS
    model: str | None = None
    window_s: tuple[float, float | None] | None = None  # [start, end) of the trace's time
    # a file of agent jobs (`AGENT_FORMATS`): its replay's jobs and waits (live/agentrun.py)
    agent: bool = False
    jobs: int | None = None  # measured jobs (None: each of the trace's once)
    tool_speed: float = 1.0  # a tool's recorded time is waited ÷ this
    max_tool_wait_s: float | None = None  # None: no cap
    max_idle_s: float = 10.0  # the longest idle gap replayed (agentrun.DEFAULT_MAX_IDLE_S)
    start_at: str = "first"  # "sampled": each job at a seeded random root turn (agentstart)
    start_seed: int = 0  # the seed of a sampled start
    # agent jobs started at their recorded starts ÷ `speed` (`trace.speed` given: an open
    # loop of job starts, `replay.JobSchedule`); False: `--agents` (closed) or `--rate`
    job_times: bool = False

    def read(self) -> list[TraceRequest]:
        """The requests replayed, checked (`TraceError` names a bad line)."""
        return read_trace(self.path, self.fmt, block_tokens=self.block_tokens,
                          model=self.model, limit=self.limit, window_s=self.window_s)

    def arrivals(self, reqs: list[TraceRequest]) -> dict[str, Any]:
        """The raw header's `params.load.arrivals` of the replay: the rate it offers on
        average ((n − 1) over the scaled span; the `load` block's `offered_rate_rps`)."""
        span_s = (reqs[-1].timestamp_ms - reqs[0].timestamp_ms) / 1000 / self.speed
        rate = (len(reqs) - 1) / span_s if span_s > 0 and len(reqs) > 1 else None
        return {"arrival": "trace", "rate_rps": rate, "burstiness": None, "seed": None}

    def to_params(self, reqs: list[TraceRequest]) -> dict[str, Any]:
        """The raw header's `params.trace`: the flags, the requests replayed and the prefix
        reuse the trace's own sharing allows (`trace.expected_reuse`)."""
        cached, total = expected_reuse(reqs, self.block_tokens)
        return {"file": Path(self.path).name, "format": self.fmt, "speed": self.speed,
                "limit": self.limit, "block_tokens": self.block_tokens, "model": self.model,
                "window_s": None if self.window_s is None else list(self.window_s),
                "requests": len(reqs), "expected_reuse": cached / total}
