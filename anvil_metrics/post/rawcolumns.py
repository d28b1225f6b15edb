"""The raw records as integer columns: the one shape every benchmark figure is computed from.

Why columns: a benchmark is built from, and verified against, its requests' figures, and a
run may hold a million of them. One int64 row per request record (`RAW_COLUMNS`, `NULL` for
a missing value) holds all that post-processing needs — stamps, counts, the counts read
from the server's `usage` — in a few hundred bytes per request, without chunk timings,
channels or usage objects. `anvil postprocess`, `build_benchmark` of records read one by one
and the catalogue's formulas all work on these columns: one numeric path.

How a record becomes a row is said once, here: `ColumnBuilder.add_plain` takes a `"request"`
line as orjson parsed it (the common case, without building a `RequestRecord`), and
`add_record` a `RequestRecord`; both read `usage` with `usage_counts`. The values a row can
hold are bounded (`records.STAMP_LIMIT`, `records.COUNT_LIMIT`), and `records.record_problem`
refuses a record beyond them, so every sum and difference of stamps fits int64 and every
count converts to a double exactly.
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from anvil_metrics.records import (
    COUNT_LIMIT,
    STAMP_LIMIT,
    RequestRecord,
    all_counts,
    failure_problem,
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
    "start_delay_ns",  # extra.start_delay_ns when it is an integer
    "failed",  # 0 / 1: the record has a failure (its details are in RawColumns.failures)
    "waited",  # 0 / 1: extra.waited_for_user (open loop: no user was free when it fell due)
    "first_chunk_ns",  # extra.first_chunk_ns: the first chunk of any kind, role-only included
    "conversation_id",  # extra.conversation: a conversation's number (its first request index)
    "turn",  # extra.turn: the request's user turn in its conversation, from 1
    "history_tokens",  # extra.history_tokens: the previous turn's usage.prompt_tokens
    "class_index",  # extra.class_index: a mix's request class (a position in its plan)
    "model_index",  # extra.model_index: a mix's model (a position in its model names)
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


def usage_counts(usage: Mapping[str, Any] | None, reasoning_chunks: int, content_chunks: int
                 ) -> tuple[int, bool, int, int, int]:
    """What a row takes from the server's `usage` object: `(output_tokens, from_usage,
    prompt_tokens, cached_tokens, reasoning_tokens)`, NULL where not reported. A count is
    an integer 0 <= x < 2**53 (`records.COUNT_LIMIT`); anything else is not reported.

    `output_tokens` is `usage.completion_tokens` when the server sent such a count, else
    `reasoning_chunks + content_chunks` (a chunk carrying both a reasoning and a content
    delta counts in both chunk counts: it carried at least two pieces of text; chunk counts
    undercount tokens anyway, which is why the source is recorded). The Responses API's
    names (`input_tokens`, `output_tokens`, their `_details`) are read as the chat names.
    """
    if usage is None:
        return reasoning_chunks + content_chunks, False, NULL, NULL, NULL
    if "input_tokens" in usage and "prompt_tokens" not in usage:  # /v1/responses
        usage = {"prompt_tokens": usage["input_tokens"],
                 "completion_tokens": usage.get("output_tokens"),
                 "prompt_tokens_details": usage.get("input_tokens_details"),
                 "completion_tokens_details": usage.get("output_tokens_details")}
    limit = COUNT_LIMIT
    out = usage.get("completion_tokens")
    from_usage = type(out) is int and 0 <= out < limit
    if not from_usage:
        out = reasoning_chunks + content_chunks
    prompt = usage.get("prompt_tokens")
    if not (type(prompt) is int and 0 <= prompt < limit):
        prompt = NULL
    cached = reasoning = NULL
    details = usage.get("prompt_tokens_details")
    if type(details) is dict:
        cached = details.get("cached_tokens")
        if not (type(cached) is int and 0 <= cached < limit):
            cached = NULL
    details = usage.get("completion_tokens_details")
    if type(details) is dict:
        reasoning = details.get("reasoning_tokens")
        if not (type(reasoning) is int and 0 <= reasoning < limit):
            reasoning = NULL
    return out, from_usage, prompt, cached, reasoning


_PLAIN_KEYS = itemgetter("type", "request_index", "start_ns", "end_ns", "first_output_ns",
                         "first_content_ns", "reasoning_chunks", "content_chunks",
                         "planned_context_tokens", "warmup", "usage", "failure", "worker",
                         "chunk_channels", "chunk_deltas_ns")
_FLUSH_VALUES = 4096 * len(RAW_COLUMNS)  # values converted to int64 at a time


_NO_TURN = (NULL, NULL, NULL)  # a request that is no conversation's turn


def _turn_columns(x: dict[str, Any]) -> tuple[int, int, int] | None:
    """(conversation, turn, history_tokens or NULL) of a record's `extra`, or None when one
    is not what `records._conversation_problem` accepts."""
    conv, turn, history = x["conversation"], x.get("turn"), x.get("history_tokens")
    if not (type(conv) is int and 0 <= conv < COUNT_LIMIT and type(turn) is int
            and 1 <= turn < COUNT_LIMIT):
        return None
    if history is None:
        return conv, turn, NULL
    if not (type(history) is int and 0 <= history < COUNT_LIMIT):
        return None
    return conv, turn, history


def _position(v: Any) -> bool:
    """A mix's `extra.class_index` / `model_index` as `records._mix_problem` accepts it
    (NULL: the record has none)."""
    return v is NULL or (type(v) is int and 0 <= v < COUNT_LIMIT)


_NO_WORKLOAD = (NULL, NULL, NULL, NULL, NULL)  # no conversation's turn, no mix's request


def _workload_columns(x: dict[str, Any]) -> tuple[int, ...] | None:
    """(conversation, turn, history_tokens, class_index, model_index) of a record's
    `extra`, NULL where it has none; None when one is not what `records` accepts."""
    turn_of = _turn_columns(x) if "conversation" in x else _NO_TURN
    klass, model = x.get("class_index", NULL), x.get("model_index", NULL)
    if turn_of is None or not (_position(klass) and _position(model)):
        return None
    return (*turn_of, klass, model)


class ColumnBuilder:
    """Rows of `RAW_COLUMNS`, appended one record at a time, held as int64.

    Rows wait in a list a batch at a time (one conversion for many rows is several times
    cheaper than one per row); `flush()` converts them, and `table()` gives them all.
    """

    def __init__(self) -> None:
        self.buf = array("q")
        self.pending: list[int] = []
        self.n_records = 0
        self.failures: dict[int, FailureFields] = {}
        self.worker_codes: dict[str, int] = {}

    def add_plain(self, n: int, d: Any) -> bool:
        """Add a plain `"request"` line (as orjson parsed it, line `n`) without building a
        RequestRecord. True when done; False when the line is anything else or not plainly
        valid: `records.record_problem` then gives the verdict (and `add_record` takes the
        record if it is valid). Every test here is one of `record_problem`'s, on the exact
        JSON types orjson returns; a line that passes them all is one it accepts. (The hot
        loop of post-processing: checks are inline, not calls.)"""
        if type(d) is not dict:
            return False
        try:  # the keys RequestRecord.to_json_dict always writes; else the slow way
            ty, ri, s, e, fo, fc, rc, cc, pl, wu, u, f, w, ch, deltas = _PLAIN_KEYS(d)
        except KeyError:
            return False
        x = d.get("extra")
        hs = d.get("http_status")
        lo, hi, c = -STAMP_LIMIT, STAMP_LIMIT, COUNT_LIMIT
        if not (ty == "request" and type(ri) is int and 0 <= ri < c
                and type(s) is int and lo < s < hi
                and type(rc) is int and 0 <= rc < c and type(cc) is int and 0 <= cc < c
                and (pl is None or (type(pl) is int and 0 <= pl < c))
                and type(wu) is bool
                and (e is None or (type(e) is int and lo < e < hi))
                and (fo is None or (type(fo) is int and lo < fo < hi))
                and (fc is None or (type(fc) is int and lo < fc < hi))
                and (u is None or type(u) is dict) and (w is None or type(w) is str)
                and (x is None or type(x) is dict) and (hs is None or type(hs) is int)
                and (not ch or type(ch) is str)
                and (not deltas or (type(deltas) is list and all_counts(deltas)))):
            return False
        if f is None:
            if e is None:
                return False
        elif type(f) is not dict or failure_problem(f) is not None:
            return False
        if (fc is None) != (cc == 0) or (fo is None) != (rc + cc == 0):
            return False
        # the stamps in order: start <= first output <= first content <= end
        first = s if fo is None else fo
        last = first if fc is None else fc
        if first < s or last < first or (e is not None and e < last):
            return False
        delay, waited, chunk, turn_of = NULL, False, NULL, _NO_WORKLOAD
        if x:
            chunk = x.get("first_chunk_ns", NULL)
            if chunk is not NULL:
                if not (type(chunk) is int and s <= chunk < hi and (fo is None or chunk <= fo)
                        and (e is None or chunk <= e)):
                    return False
            delay = x.get("start_delay_ns")
            if type(delay) is bool:
                delay = int(delay)
            elif type(delay) is not int:
                delay = NULL
            elif not 0 <= delay < hi:
                return False
            waited = x.get("waited_for_user", False)
            turn_of = _workload_columns(x)
            if type(waited) is not bool or turn_of is None:
                return False
        out, from_usage, prompt, cached, reasoning = usage_counts(u, rc, cc)
        if out >= c:
            return False
        if f is not None:
            self.failures[self.n_records] = (f["kind"], f.get("message", ""),
                                             f.get("http_status"), f.get("phase"), hs)
        if w is None:
            code = -1
        else:
            code = self.worker_codes.get(w)
            if code is None:
                code = self.worker_codes[w] = len(self.worker_codes)
        pending = self.pending
        pending += (n, wu, ri, s, NULL if e is None else e, NULL if fo is None else fo,
                    NULL if fc is None else fc, NULL if pl is None else pl, rc, cc, out,
                    from_usage, prompt, cached, reasoning, code, delay, f is not None,
                    waited, chunk, *turn_of)
        self.n_records += 1
        if len(pending) >= _FLUSH_VALUES:
            self.flush()
        return True

    def add_record(self, n: int, rec: RequestRecord) -> None:
        """Add a RequestRecord that `records.record_problem` accepted (line `n`): the row
        its JSON line makes, so that one function says how a record becomes a row."""
        if not self.add_plain(n, rec.to_json_dict()):
            raise AssertionError(f"request {rec.request_index}: a record record_problem "
                                 "accepts was refused by the plain road (a bug)")

    def flush(self) -> None:
        """Move the waiting rows into `buf` (int64)."""
        if self.pending:
            self.buf += array("q", self.pending)
            self.pending.clear()

    def table(self) -> Any:
        """All rows so far as an int64 numpy array, shape (records, len(RAW_COLUMNS))."""
        import numpy as np

        self.flush()
        return np.frombuffer(self.buf, dtype=np.int64).reshape(-1, len(RAW_COLUMNS))
