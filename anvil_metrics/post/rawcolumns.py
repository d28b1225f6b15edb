"""The raw records as integer columns: the one shape every benchmark figure is computed from.

Why columns: a benchmark is built from, and verified against, its requests' figures, and a
run may hold a million of them. One int64 row per request record (`RAW_COLUMNS`, `NULL` for
a missing value) holds all that post-processing needs — stamps, counts, the counts read
from the server's `usage` — in a few hundred bytes per request, without chunk timings,
channels or usage objects. `anvil postprocess`, `build_benchmark` of records read one by one
and the catalogue's formulas all work on these columns: one numeric path.

How a record becomes a row is said once, here: `ColumnBuilder.add` takes a `"request"`
line as msgspec decoded it (`records.RequestLine`, every type checked as it was parsed, the
rules of `records.line_problem` checked after), and `add_record` a `RequestRecord` by way of
its line; both read `usage` with `usage_counts`. The values a row can hold are bounded
(`records.STAMP_LIMIT`, `records.COUNT_LIMIT`, the line's types), so every sum and
difference of stamps fits int64 and every count converts to a double exactly.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec
from msgspec import UNSET

from anvil_metrics.records import (
    COUNT_LIMIT,
    Extra,
    RequestLine,
    RequestRecord,
    Usage,
    input_total,
    read_request,
)

# Column layout of `RawColumns.table`: one int64 row per request record, in file order.
# NULL marks a missing value (JSON null, or not reported).
RAW_COLUMNS = (
    "line",  # 1-based line number in the file (0 for records not read from a file)
    "warmup",  # 0 / 1
    "request_index",
    "start_ns",
    "end_ns",
    "first_output_ns",
    "first_content_ns",
    "planned_context_tokens",
    "reasoning_chunks",
    "content_chunks",
    "output_tokens",  # usage_counts: usage.completion_tokens, else the chunk counts
    "usage_source",  # 1 when output_tokens came from usage, 0 from chunk counts
    "prompt_tokens",  # usage.prompt_tokens
    "cached_tokens",  # usage.prompt_tokens_details.cached_tokens
    "reasoning_tokens",  # usage.completion_tokens_details.reasoning_tokens
    "worker",  # index into RawColumns.worker_names, -1 for null
    "failed",  # 0 / 1: the record has a failure (its details are in RawColumns.failures)
    "start_delay_ns",  # extra.start_delay_ns
    "waited",  # 0 / 1: extra.waited_for_user (open loop: no user was free when it fell due)
    "first_chunk_ns",  # extra.first_chunk_ns: the first chunk of any kind, role-only included
    "conversation_id",  # extra.conversation: a conversation's number (its first request index)
    "turn",  # extra.turn: the request's user turn in its conversation, from 1
    "history_tokens",  # extra.history_tokens: the previous turn's usage.prompt_tokens
    "class_index",  # extra.class_index: a mix's request class (a position in its plan)
    "model_index",  # extra.model_index: a mix's model (a position in its model names)
    "job_id",  # extra.job: an agent job's position in its trace
    "session_id",  # extra.session: its session's position in the job (the root 0)
    "parent_session_id",  # extra.parent_session: the parent session's (null: a root)
    "depth",  # extra.depth: the session's depth (root 0)
    "tool_wait_ns",  # extra.tool_wait_ns: the tool wait slept before the request
    "join_wait_ns",  # extra.join_wait_ns: the wait for its sub-agents' joins
    "prefill_gate_wait_ns",  # extra.prefill_gate_wait_ns: its wait at the prefill gate
    "replica",  # extra.replica: the replica it was sent to (--host URL,URL)
    "request_bytes",  # extra.request_bytes: its body's bytes
    "media_images",  # extra.images: the images it carried
    "media_audio_clips",  # extra.audio_clips: the audio clips it carried
    "check_passed",  # extra.check_passed: a check class's verdict, 1 passed / 0 failed
    "media_image_tokens",  # usage.prompt_tokens_details.image_tokens
    "media_audio_tokens",  # usage.prompt_tokens_details.audio_tokens
)
COL = {name: i for i, name in enumerate(RAW_COLUMNS)}
NULL = -(2**63)

# (kind, message, http_status, phase) of a failure as `Failure.from_dict` reads them, plus
# the record's own http_status
FailureFields = tuple[Any, Any, Any, Any, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class RawRunFields:
    """What a `requests.jsonl` read back says about its run, beside its request records
    (`rawread.RawRun` holds them as RequestRecords, `RawColumns` as rows).

    - `header`: the `"run"` line (run_id, started_at, params, clock anchors…).
    - `run_end`: the `"run_end"` line, or None if the run did not finish.
    - `partial`: True when `run_end` is missing or a torn last line was dropped.
    - `torn_lines`: how many torn lines were dropped (0 or 1: only the last can be torn).
    - `notes`: human-readable remarks on what was tolerated, for the user to see.
    - `workers`: the `"worker"` lines of a distributed run, by worker identity (`host:pid`,
      the records' `worker` field): each one's `perf_offset_ns` places its stamps on the
      master's clock (`stamp + perf_offset_ns`); empty for a single-process run.
    - `steps`: a stepped run's `"step"` lines ({step, t_ns, users, rate}, on the master's
      clock), and `steps_end_ns`, when the last one ended (None if the run stopped first).
    - `window_ns`: a duration run's measured window `(from_ns, to_ns)` (its `"window"`
      line: `--warmup` / `--cooldown`), on the master's clock; None without one.
    - `hooks`: the control hooks' `"hook"` lines (`live/hooks.py`), in the order called.
    """

    header: dict[str, Any]
    run_end: dict[str, Any] | None
    partial: bool
    torn_lines: int = 0
    notes: tuple[str, ...] = ()
    path: str | None = None
    workers: dict[str, dict[str, Any]] = field(default_factory=dict)
    steps: tuple[dict[str, Any], ...] = ()
    steps_end_ns: int | None = None
    window_ns: tuple[int, int] | None = None
    hooks: tuple[dict[str, Any], ...] = ()

    def clock_offsets_ns(self) -> dict[str, int]:
        """Worker identity -> offset of its perf_counter_ns to the master's (only those
        measured; a record of any other worker is on the master's clock or its own)."""
        return {name: int(w["perf_offset_ns"]) for name, w in self.workers.items()
                if type(w.get("perf_offset_ns")) is int}


@dataclass(frozen=True, slots=True, kw_only=True)
class RawColumns(RawRunFields):
    """A `requests.jsonl` read back as columns (`rawpart.scan_raw`, or `RawRun.columns()`):
    the request records are rows of `table` (int64, columns `RAW_COLUMNS`, `NULL` for a
    missing value).

    - `failures`: record position (row of `table`) -> `FailureFields`.
    - `worker_names`: the names the `worker` column indexes.
    """

    table: Any  # numpy.ndarray, shape (records, len(RAW_COLUMNS)), int64
    failures: dict[int, FailureFields]
    worker_names: tuple[str, ...]


def usage_counts(usage: Usage | Mapping[str, Any] | None, reasoning_chunks: int,
                 content_chunks: int) -> tuple[int, bool, int, int, int]:
    """What a row takes from the server's `usage` object (`records.Usage`): `(output_tokens,
    from_usage, prompt_tokens, cached_tokens, reasoning_tokens)`, NULL where not reported.
    A count is an integer 0 <= x < 2**53 (`records.COUNT_LIMIT`); anything else is not
    reported.

    `output_tokens` is `usage.completion_tokens` when the server sent such a count, else
    `reasoning_chunks + content_chunks` (a chunk carrying both a reasoning and a content
    delta counts in both chunk counts: it carried at least two pieces of text; chunk counts
    undercount tokens anyway, which is why the source is recorded). The Responses API's
    names (`input_tokens`, `output_tokens`, their `_details`) are read as the chat names;
    the Messages API's prompt is its `input_tokens` and cache counts (`records.input_total`),
    its `cache_read_input_tokens` the cached tokens.
    """
    if usage is None:
        return reasoning_chunks + content_chunks, False, NULL, NULL, NULL
    prompt, out, pd, cd, inp, outp, ind, outd, read, made = astuple(
        usage if type(usage) is Usage else msgspec.convert(usage, Usage))
    if prompt is UNSET and inp is not UNSET:  # /v1/responses, /v1/messages
        prompt, out, pd, cd = input_total(inp, read, made), outp, ind, outd
        if read is not UNSET:  # the Messages API's cache hit
            pd = {"cached_tokens": read}
    limit = COUNT_LIMIT
    from_usage = type(out) is int and 0 <= out < limit
    if not from_usage:
        out = reasoning_chunks + content_chunks
    if not (type(prompt) is int and 0 <= prompt < limit):
        prompt = NULL
    cached = pd.get("cached_tokens", NULL) if type(pd) is dict else NULL
    if not (type(cached) is int and 0 <= cached < limit):
        cached = NULL
    reasoning = cd.get("reasoning_tokens", NULL) if type(cd) is dict else NULL
    if not (type(reasoning) is int and 0 <= reasoning < limit):
        reasoning = NULL
    return out, from_usage, prompt, cached, reasoning


_ROW = struct.Struct(f"<{len(RAW_COLUMNS)}q")  # one row, as the table holds it
astuple = msgspec.structs.astuple  # a Struct's fields in one call, in their order
# the order `ColumnBuilder.add` takes a line's fields in (one call, not 12 lookups)
assert [f.name for f in msgspec.structs.fields(RequestLine)] == [
    "request_index", "start_ns", "end_ns", "first_output_ns", "first_content_ns", "warmup",
    "planned_context_tokens", "reasoning_chunks", "content_chunks", "chunk_deltas_ns",
    "chunk_channels", "usage", "finish_reason", "http_status", "failure", "worker", "extra"]
BLOCK_ROWS = 4096  # rows a block of `ColumnBuilder` holds


def _extra_columns(x: Extra) -> tuple[int, ...]:
    """The row's last columns, from a record's `extra` (`RAW_COLUMNS` from start_delay_ns to
    check_passed), NULL where it has none."""
    (delay, chunk, waited, conversation, turn, history, klass, model, job, session, parent,
     depth, tool_wait, join_wait, gate_wait, replica, nbytes, images, clips, passed,
     _reason) = astuple(x)
    if conversation is UNSET:  # no conversation's turn (a turn alone is not read)
        conversation = history = NULL
        turn = NULL if job is None or turn is UNSET else turn  # an agent job's turn is
    elif history is None:
        history = NULL
    return (NULL if delay is None else delay, waited, NULL if chunk is None else chunk,
            conversation, turn, history, *(NULL if v is None else v for v in (
                klass, model, job, session, parent, depth, tool_wait, join_wait, gate_wait,
                replica, nbytes, images, clips, passed)))


_NO_EXTRA = (NULL, False, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL, NULL, NULL, NULL, NULL, NULL, NULL)
_NO_MEDIA = (NULL, NULL)


def media_tokens(usage: Usage) -> tuple[int, int]:
    """`(image_tokens, audio_tokens)` of `usage.prompt_tokens_details` (the Responses API's
    `input_tokens_details`), NULL where not reported: OpenAI and the simulator split them
    there; vLLM counts them inside `prompt_tokens` only (then both are NULL)."""
    pd = usage.prompt_tokens_details
    if pd is UNSET:
        pd = usage.input_tokens_details
    if type(pd) is not dict:
        return _NO_MEDIA
    out = tuple(pd.get(k, NULL) for k in ("image_tokens", "audio_tokens"))
    return tuple(v if type(v) is int and 0 <= v < COUNT_LIMIT else NULL  # type: ignore[return-value]
                 for v in out)


class ColumnBuilder:
    """Rows of `RAW_COLUMNS`, appended one record at a time, held as int64.

    Each row is packed straight into a block of bytes (`_ROW`: one call, no list of Python
    integers to convert, ~0.35 µs a row less); rows built elsewhere (a child's part,
    `take_rows`) are kept as they came. `parts()` gives them all in file order as buffers,
    and `table()` copies them once into one table.
    """

    def __init__(self, sink: Callable[[bytes | bytearray], None] | None = None) -> None:
        self.sink = sink  # given: each full block goes there (a child's pipe), not kept
        self.blocks: list[Any] = []  # full blocks, and rows taken whole, in file order
        self.block = bytearray(BLOCK_ROWS * _ROW.size)
        self.at = 0  # the bytes of `block` filled
        self.n_records = 0
        self.failures: dict[int, FailureFields] = {}
        self.worker_codes: dict[str, int] = {}

    def add(self, n: int, r: Any) -> None:
        """Add line `n`, a `records.RequestLine` that `records.line_problem` accepts: its
        row. (The hot loop of post-processing: each line's types were checked as it was
        decoded; the values are taken as they are, NULL for none.)"""
        (ri, s, e, fo, fc, warmup, pl, rc, cc, _, _, u, _, status, f, w, x) = astuple(r)
        rc, cc = rc or 0, cc or 0
        if f is not None:
            self.failures[self.n_records] = (f.kind, f.message, f.http_status, f.phase,
                                             status)
        code = -1 if w is None else self.worker_codes.get(w)
        if code is None:
            code = self.worker_codes[w] = len(self.worker_codes)
        out, from_usage, prompt, cached, reasoning = (
            (rc + cc, False, NULL, NULL, NULL) if u is None else usage_counts(u, rc, cc))
        extra = _NO_EXTRA if x is None else _extra_columns(x)
        media = _NO_MEDIA if u is None else media_tokens(u)
        if self.at == len(self.block):
            self._full()
        _ROW.pack_into(self.block, self.at, n, warmup, ri, s,
                       NULL if e is None else e, NULL if fo is None else fo,
                       NULL if fc is None else fc, NULL if pl is None else pl, rc, cc, out,
                       from_usage, prompt, cached, reasoning, code, f is not None, *extra,
                       *media)
        self.at += _ROW.size
        self.n_records += 1

    def add_record(self, n: int, rec: RequestRecord) -> None:
        """Add a RequestRecord that `records.record_problem` accepted (line `n`): the row
        its JSON line makes, so that one function says how a record becomes a row."""
        line = read_request(rec.to_json_dict())
        if isinstance(line, str):
            raise AssertionError(f"request {rec.request_index}: a record anvil wrote is "
                                 f"refused ({line}): a bug")
        self.add(n, line)

    def _full(self) -> None:
        """The block is full: to the sink (then filled anew), or kept."""
        if self.sink is not None:
            self.sink(self.block)
        else:
            self.blocks.append(self.block)
            self.block = bytearray(len(self.block))
        self.at = 0

    def drain(self) -> None:
        """Hand the rows not yet given to the sink over to it."""
        if self.sink is not None and self.at:
            self.sink(memoryview(self.block)[:self.at])
            self.at = 0

    def parts(self) -> list[Any]:
        """Every row so far, as buffers of int64 rows in file order."""
        return [*self.blocks, memoryview(self.block)[:self.at]]

    def take_rows(self, rows: Any) -> None:
        """Append `rows` (int64, shape (n, len(RAW_COLUMNS))) after the rows so far."""
        if self.at:
            self.blocks.append(memoryview(self.block)[:self.at])
            self.block, self.at = bytearray(len(self.block)), 0
        self.blocks.append(rows)
        self.n_records += len(rows)

    def table(self) -> Any:
        """All rows so far as an int64 numpy array, shape (records, len(RAW_COLUMNS)), in
        column order (each column contiguous: every figure reads a column at a time)."""
        import numpy as np

        width = len(RAW_COLUMNS)
        parts = [np.frombuffer(b, dtype=np.int64).reshape(-1, width) for b in self.parts()]
        out = np.empty((sum(map(len, parts)), width), dtype=np.int64, order="F")
        at = 0
        for rows in parts:
            out[at:at + len(rows)] = rows
            at += len(rows)
        return out
