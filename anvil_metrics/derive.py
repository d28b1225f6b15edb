"""The per-request formulas of benchmark/v1, one function each, and the derived row.

Why one function per formula: `anvil postprocess` (raw records → rows) and `anvil verify`
(rows in a file → the same rows again) must agree to the last bit, so both call these
functions and nothing else computes a per-request figure. Each function states its unit,
its formula and its inputs, and returns None — never NaN or ±inf — when an input is
missing or a divisor is zero or negative (benchmark-v1.md: "null, never NaN or Infinity").

Large runs: `derive_columns` is `derive_row` over numpy columns, operation for operation
(the same IEEE-754 operations in the same order, so the same bits; tests/test_columns.py
checks it), and `RowColumns` holds `request_timings` as columns — for `anvil postprocess`
and `anvil verify` of a million rows, which never need a million row dicts.

Evaluation order matters for bit-exactness and follows the spec literally:
`decode_tok_s = (output_tokens − 1) / (generation_ms / 1000)`, not `… * 1000 / …`.
Durations from integer `perf_counter_ns` stamps are `(b − a) / 1e6`: the integer
difference is exact, and one correctly rounded division makes the milliseconds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from anvil_metrics.records import RequestRecord

OUTPUT_TOKEN_SOURCES = ("usage", "chunks")

# Fields of a `request_timings[]` row, in the spec's order. `cached_tokens` is written only
# when the server reported it.
ROW_FIELDS = (
    "request_index",
    "planned_context_tokens",
    "prompt_tokens",
    "output_tokens",
    "output_token_source",
    "cached_tokens",
    "reasoning_chunks",
    "content_chunks",
    "e2e_ms",
    "time_to_first_output_ms",
    "ttft_ms",
    "generation_ms",
    "visible_generation_ms",
    "decode_tok_s",
    "mean_inter_token_latency_ms",
    "effective_prefill_tok_s",
)
OPTIONAL_ROW_FIELDS = frozenset({"cached_tokens"})

# The base values a row's derived fields are computed from (what `derive_row` reads).
BASE_INPUTS = ("e2e_ms", "time_to_first_output_ms", "ttft_ms", "output_tokens", "prompt_tokens")

# derived field -> (formula as written in the spec, the base inputs it depends on,
# transitively). Used by verify to say which stored values disagree.
DERIVED_FIELDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "generation_ms": (
        "e2e_ms − time_to_first_output_ms",
        ("e2e_ms", "time_to_first_output_ms"),
    ),
    "visible_generation_ms": ("e2e_ms − ttft_ms", ("e2e_ms", "ttft_ms")),
    "decode_tok_s": (
        "(output_tokens − 1) / (generation_ms / 1000)",
        ("output_tokens", "e2e_ms", "time_to_first_output_ms"),
    ),
    "mean_inter_token_latency_ms": (
        "generation_ms / (output_tokens − 1)",
        ("output_tokens", "e2e_ms", "time_to_first_output_ms"),
    ),
    "effective_prefill_tok_s": (
        "prompt_tokens / (time_to_first_output_ms / 1000)",
        ("prompt_tokens", "time_to_first_output_ms"),
    ),
}


def _finite(x: float) -> float | None:
    """x, or None if a division overflowed to ±inf (only possible with absurd inputs)."""
    return x if math.isfinite(x) else None


def _is_count(x: Any) -> bool:
    """A JSON integer token count (bool is an int in Python, but never a count)."""
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


# --- durations from integer nanosecond stamps -------------------------------------------


def duration_ms(start_ns: int | None, stop_ns: int | None) -> float | None:
    """Milliseconds between two `perf_counter_ns` stamps of one host: `(stop − start) / 1e6`.

    None if either stamp is missing. A negative difference means the stamps were taken out
    of order (a bug, not a measurement) and raises ValueError rather than hiding it.
    """
    if start_ns is None or stop_ns is None:
        return None
    diff = stop_ns - start_ns
    if diff < 0:
        raise ValueError(f"clock went backwards: stop {stop_ns} < start {start_ns}")
    return diff / 1e6


def e2e_ms(start_ns: int | None, end_ns: int | None) -> float | None:
    """End-to-end latency, ms: `end − start` (request written → stream finished)."""
    return duration_ms(start_ns, end_ns)


def time_to_first_output_ms(start_ns: int | None, first_output_ns: int | None) -> float | None:
    """Time to first output, ms: `first_output − start` (first reasoning or content delta)."""
    return duration_ms(start_ns, first_output_ns)


def ttft_ms(start_ns: int | None, first_content_ns: int | None) -> float | None:
    """Time to first (visible) token, ms: `first_content − start`; None if no content came."""
    return duration_ms(start_ns, first_content_ns)


# --- row formulas on milliseconds and counts --------------------------------------------


def generation_ms(e2e: float | None, ttfo: float | None) -> float | None:
    """Generation time, ms: `e2e_ms − time_to_first_output_ms`. None if either is missing."""
    if e2e is None or ttfo is None:
        return None
    return e2e - ttfo


def visible_generation_ms(e2e: float | None, ttft: float | None) -> float | None:
    """Visible generation time, ms: `e2e_ms − ttft_ms`. None if either is missing."""
    if e2e is None or ttft is None:
        return None
    return e2e - ttft


def decode_tok_s(output_tokens: int | None, generation: float | None) -> float | None:
    """Decode rate, tokens/s: `(output_tokens − 1) / (generation_ms / 1000)`.

    The first token is paid for by time-to-first-output, so only the tokens after it count.
    None if an input is missing, if there is no first token (`output_tokens < 1`), or if
    `generation_ms / 1000 <= 0`. One output token over a positive generation time gives
    0.0, exactly as the spec's formula does.
    """
    if output_tokens is None or generation is None:
        return None
    after_first = output_tokens - 1
    if after_first < 0:
        return None
    seconds = generation / 1000
    if seconds <= 0:
        return None
    return _finite(after_first / seconds)


def mean_inter_token_latency_ms(
    generation: float | None, output_tokens: int | None
) -> float | None:
    """Mean inter-token latency, ms: `generation_ms / (output_tokens − 1)`.

    None if an input is missing or `output_tokens − 1 <= 0` (no gap between tokens).
    """
    if output_tokens is None or generation is None:
        return None
    gaps = output_tokens - 1
    if gaps <= 0:
        return None
    return _finite(generation / gaps)


def effective_prefill_tok_s(
    prompt_tokens: int | None, ttfo: float | None
) -> float | None:
    """Effective prefill rate, tokens/s: `prompt_tokens / (time_to_first_output_ms / 1000)`.

    Includes queueing and scheduling, hence "effective". None if an input is missing or
    `time_to_first_output_ms / 1000 <= 0`.
    """
    if prompt_tokens is None or ttfo is None:
        return None
    seconds = ttfo / 1000
    if seconds <= 0:
        return None
    return _finite(prompt_tokens / seconds)


# --- values read from the server's usage object -----------------------------------------


def output_tokens_from(
    usage: Mapping[str, Any] | None, reasoning_chunks: int, content_chunks: int
) -> tuple[int, str]:
    """Output tokens and their source: `(usage.completion_tokens, "usage")` when the server
    sent an integer count, else `(reasoning_chunks + content_chunks, "chunks")`.

    A chunk carrying both a reasoning and a content delta counts in both chunk counts, so
    it counts twice here: it carried at least two pieces of text. Chunk counts undercount
    tokens anyway (see the spec), which is why the source is always recorded.
    """
    if usage is not None and _is_count(usage.get("completion_tokens")):
        return usage["completion_tokens"], "usage"
    return reasoning_chunks + content_chunks, "chunks"


def prompt_tokens_from(usage: Mapping[str, Any] | None) -> int | None:
    """`usage.prompt_tokens` when the server sent an integer count, else None."""
    if usage is not None and _is_count(usage.get("prompt_tokens")):
        return usage["prompt_tokens"]
    return None


def cached_tokens_from(usage: Mapping[str, Any] | None) -> int | None:
    """`usage.prompt_tokens_details.cached_tokens` when present as an integer, else None."""
    if usage is None:
        return None
    details = usage.get("prompt_tokens_details")
    if isinstance(details, Mapping) and _is_count(details.get("cached_tokens")):
        return details["cached_tokens"]
    return None


# --- the row -------------------------------------------------------------------------------


def derive_row(base: Mapping[str, Any]) -> dict[str, float | None]:
    """The derived fields of a row from its base fields.

    Reads `e2e_ms`, `time_to_first_output_ms`, `ttft_ms`, `output_tokens`, `prompt_tokens`
    (missing keys count as None) and returns `generation_ms`, `visible_generation_ms`,
    `decode_tok_s`, `mean_inter_token_latency_ms`, `effective_prefill_tok_s`. Used both to
    build rows from raw records and to re-check the rows of a benchmark file.
    """
    e2e = base.get("e2e_ms")
    ttfo = base.get("time_to_first_output_ms")
    ttft = base.get("ttft_ms")
    out = base.get("output_tokens")
    gen = generation_ms(e2e, ttfo)
    return {
        "generation_ms": gen,
        "visible_generation_ms": visible_generation_ms(e2e, ttft),
        "decode_tok_s": decode_tok_s(out, gen),
        "mean_inter_token_latency_ms": mean_inter_token_latency_ms(gen, out),
        "effective_prefill_tok_s": effective_prefill_tok_s(base.get("prompt_tokens"), ttfo),
    }


@dataclass(frozen=True, slots=True)
class RequestTiming:
    """One `request_timings[]` row of benchmark/v1: a completed request's figures.

    Field names and meanings are the spec's; times are float ms, rates float per second,
    counts int. `cached_tokens` is None when the server did not report it, and then the
    key is left out of `to_dict()` (the spec: "absent otherwise").
    """

    request_index: int
    planned_context_tokens: int | None
    prompt_tokens: int | None
    output_tokens: int
    output_token_source: str
    cached_tokens: int | None
    reasoning_chunks: int
    content_chunks: int
    e2e_ms: float
    time_to_first_output_ms: float | None
    ttft_ms: float | None
    generation_ms: float | None
    visible_generation_ms: float | None
    decode_tok_s: float | None
    mean_inter_token_latency_ms: float | None
    effective_prefill_tok_s: float | None

    def to_dict(self) -> dict[str, Any]:
        """The row as written to JSON (spec field order; `cached_tokens` only if present)."""
        d = {name: getattr(self, name) for name in ROW_FIELDS}
        if self.cached_tokens is None:
            del d["cached_tokens"]
        return d


def timing_from_record(rec: RequestRecord, request_index: int | None = None) -> RequestTiming:
    """The derived row of a completed raw record.

    `request_index` overrides the record's own index (the benchmark renumbers measured
    requests densely from 0). Raises ValueError for a failed record or one without an
    `end_ns`: only completed requests have rows.
    """
    if not rec.ok:
        raise ValueError(f"request {rec.request_index} failed; failures have no timing row")
    if rec.end_ns is None:
        raise ValueError(f"request {rec.request_index} completed without an end_ns")
    out, source = output_tokens_from(rec.usage, rec.reasoning_chunks, rec.content_chunks)
    base: dict[str, Any] = {
        "e2e_ms": e2e_ms(rec.start_ns, rec.end_ns),
        "time_to_first_output_ms": time_to_first_output_ms(rec.start_ns, rec.first_output_ns),
        "ttft_ms": ttft_ms(rec.start_ns, rec.first_content_ns),
        "output_tokens": out,
        "prompt_tokens": prompt_tokens_from(rec.usage),
    }
    return RequestTiming(
        request_index=rec.request_index if request_index is None else request_index,
        planned_context_tokens=rec.planned_context_tokens,
        prompt_tokens=base["prompt_tokens"],
        output_tokens=out,
        output_token_source=source,
        cached_tokens=cached_tokens_from(rec.usage),
        reasoning_chunks=rec.reasoning_chunks,
        content_chunks=rec.content_chunks,
        e2e_ms=base["e2e_ms"],
        time_to_first_output_ms=base["time_to_first_output_ms"],
        ttft_ms=base["ttft_ms"],
        **derive_row(base),
    )


def inter_token_gaps_ms(rec: RequestRecord) -> list[float]:
    """Gaps between consecutive output-carrying chunks, ms: `chunk_deltas_ns[1:] / 1e6`.

    These are chunk gaps, not token gaps (one chunk may carry several tokens). Kept for
    later inter-chunk-latency percentiles; not part of v1 rows.
    """
    return [d / 1e6 for d in rec.chunk_deltas_ns[1:]]


# --- the same formulas over columns ------------------------------------------------------
#
# `anvil postprocess` of a large run and `anvil verify` of a large file work on columns
# (numpy arrays) rather than one Python dict per row. The functions below are the row
# formulas above, operation for operation: the same IEEE-754 double operations in the same
# order on the same inputs (an integer becomes a double exactly as Python converts it), so
# each value is bit for bit the one the scalar function gives; tests/test_columns.py checks
# it. A null is NaN in a float column (no real value is NaN: every row value is finite) and
# `present == False` in an integer column.


def durations_ms(start_ns: Any, stop_ns: Any, stop_present: Any) -> Any:
    """`duration_ms` over int64 columns: `(stop − start) / 1e6`, NaN where `stop` is
    missing. The caller guarantees stop ≥ start and both within ±2**62 (no overflow)."""
    import numpy as np

    out = (np.where(stop_present, stop_ns, start_ns) - start_ns).astype(np.float64) / 1e6
    out[~stop_present] = np.nan
    return out


def derive_columns(e2e: Any, ttfo: Any, ttft: Any, output_tokens: Any, prompt_tokens: Any,
                   prompt_present: Any) -> dict[str, Any]:
    """`derive_row` over columns: float64 `e2e`, `ttfo`, `ttft` (NaN = null), int64
    `output_tokens` (never null in a row) and `prompt_tokens` with its `prompt_present`.
    Returns the five derived float64 columns, NaN where `derive_row` gives None."""
    import numpy as np

    nan = np.nan
    with np.errstate(all="ignore"):
        gen = e2e - ttfo  # generation_ms: NaN when either is null
        vis = e2e - ttft  # visible_generation_ms
        after_first = output_tokens - 1
        seconds = gen / 1000
        decode = np.where((after_first >= 0) & (seconds > 0),
                          after_first.astype(np.float64) / seconds, nan)
        itl = np.where((after_first > 0) & ~np.isnan(gen),
                       gen / after_first.astype(np.float64), nan)
        prefill_seconds = ttfo / 1000
        prefill = np.where(prompt_present & (prefill_seconds > 0),
                           prompt_tokens.astype(np.float64) / prefill_seconds, nan)
        for col in (decode, itl, prefill):  # _finite: an overflow to ±inf is null
            col[np.isinf(col)] = nan
    return {
        "generation_ms": gen,
        "visible_generation_ms": vis,
        "decode_tok_s": decode,
        "mean_inter_token_latency_ms": itl,
        "effective_prefill_tok_s": prefill,
    }


# Row fields by how a RowColumns holds them.
FLOAT_FIELDS = ("e2e_ms", "time_to_first_output_ms", "ttft_ms", "generation_ms",
                "visible_generation_ms", "decode_tok_s", "mean_inter_token_latency_ms",
                "effective_prefill_tok_s")
COUNT_FIELDS = ("request_index", "output_tokens", "reasoning_chunks", "content_chunks")
OPTIONAL_COUNT_FIELDS = ("planned_context_tokens", "prompt_tokens", "cached_tokens")
NULLABLE_FLOATS = frozenset(FLOAT_FIELDS) - {"e2e_ms"}
_COUNT_LIMIT = 2**53  # counts beyond this are left to the row-by-row code


@dataclass(frozen=True, slots=True)
class RowColumns:
    """`request_timings` as columns, one numpy array per field, in row order.

    - `floats`: each of FLOAT_FIELDS as float64, NaN for null;
    - `counts`: each of COUNT_FIELDS and OPTIONAL_COUNT_FIELDS as int64 (0 where null);
    - `present`: for each of OPTIONAL_COUNT_FIELDS, a bool array (False = null; for
      `cached_tokens`, the row has no such key);
    - `usage_source`: bool array, True where `output_token_source` is "usage".
    """

    floats: dict[str, Any]
    counts: dict[str, Any]
    present: dict[str, Any]
    usage_source: Any

    def __len__(self) -> int:
        return len(self.usage_source)

    def row_dicts(self, start: int = 0, stop: int | None = None) -> list[dict[str, Any]]:
        """Rows [start, stop) as `RequestTiming.to_dict()` gives them (spec field order,
        `cached_tokens` only where reported)."""
        import numpy as np

        stop = len(self) if stop is None else stop
        cols: dict[str, list[Any]] = {}
        for name in FLOAT_FIELDS:
            values = self.floats[name][start:stop]
            lst = values.tolist()
            for i in np.flatnonzero(np.isnan(values)).tolist():
                lst[i] = None
            cols[name] = lst
        for name in COUNT_FIELDS:
            cols[name] = self.counts[name][start:stop].tolist()
        for name in OPTIONAL_COUNT_FIELDS:
            lst = self.counts[name][start:stop].tolist()
            for i in np.flatnonzero(~self.present[name][start:stop]).tolist():
                lst[i] = None
            cols[name] = lst
        cols["output_token_source"] = [
            "usage" if u else "chunks" for u in self.usage_source[start:stop].tolist()]
        rows = [dict(zip(ROW_FIELDS, values, strict=True))
                for values in zip(*(cols[name] for name in ROW_FIELDS), strict=True)]
        for i in np.flatnonzero(~self.present["cached_tokens"][start:stop]).tolist():
            del rows[i]["cached_tokens"]
        return rows

    @classmethod
    def from_rows(cls, rows: Any) -> RowColumns | None:
        """The columns of `request_timings` as read from a file, or None unless every row
        is a dict with exactly the row fields (`cached_tokens` optional), each of its JSON
        type — counts non-negative ints below 2**53, e2e/ttfo/ttft non-negative finite
        floats, derived values finite floats or null (only those that may be), the source
        "usage" or "chunks". None means: check these rows one by one."""
        import numpy as np

        if type(rows) is not list or not set(map(type, rows)) <= {dict}:
            return None
        lengths = list(map(len, rows))
        n_required = len(ROW_FIELDS) - 1
        if not set(lengths) <= {n_required, n_required + 1}:
            return None
        try:
            columns = {name: [r[name] for r in rows] for name in ROW_FIELDS
                       if name != "cached_tokens"}
        except KeyError:
            return None
        cached = [r.get("cached_tokens", _ABSENT) for r in rows]
        with_key = len(cached) - cached.count(_ABSENT)
        # each row has the required fields; one more key is allowed only if it is this one
        if lengths.count(n_required + 1) != with_key:
            return None
        floats: dict[str, Any] = {}
        for name in FLOAT_FIELDS:
            values = columns[name]
            types = set(map(type, values))
            if not types <= ({float, type(None)} if name in NULLABLE_FLOATS else {float}):
                return None
            nulls: list[int] = []
            if type(None) in types:
                nulls = [i for i, v in enumerate(values) if v is None]
                for i in nulls:
                    values[i] = 0.0
            col = np.array(values, dtype=np.float64)
            if not np.isfinite(col).all():
                return None
            if name in ("e2e_ms", "time_to_first_output_ms", "ttft_ms") and (col < 0).any():
                return None
            col[nulls] = np.nan
            floats[name] = col
        counts: dict[str, Any] = {}
        present: dict[str, Any] = {}
        for name in COUNT_FIELDS + OPTIONAL_COUNT_FIELDS:
            mask = None
            if name == "cached_tokens":
                if None in (v for v in cached if v is not _ABSENT):
                    return None  # a null cached_tokens is not allowed: the key is omitted
                values = cached
                if with_key < len(values):
                    mask = np.array([v is not _ABSENT for v in values], dtype=bool)
                    values = [0 if v is _ABSENT else v for v in values]
            else:
                values = columns[name]
            if not set(map(type, values)) <= ({int, type(None)} if name in OPTIONAL_COUNT_FIELDS
                                               and name != "cached_tokens" else {int}):
                return None
            if mask is None and name in OPTIONAL_COUNT_FIELDS and None in values:
                mask = np.array([v is not None for v in values], dtype=bool)
                values = [0 if v is None else v for v in values]
            try:
                col = np.array(values, dtype=np.int64)
            except OverflowError:
                return None
            if len(col) and (col.min() < 0 or col.max() >= _COUNT_LIMIT):
                return None
            counts[name] = col
            if name in OPTIONAL_COUNT_FIELDS:
                present[name] = np.ones(len(col), dtype=bool) if mask is None else mask
        sources = columns["output_token_source"]
        if not set(map(type, sources)) <= {str} or not set(sources) <= set(OUTPUT_TOKEN_SOURCES):
            return None
        usage = np.array([s == "usage" for s in sources], dtype=bool)
        return cls(floats=floats, counts=counts, present=present, usage_source=usage)

    @classmethod
    def concat(cls, parts: Sequence[RowColumns]) -> RowColumns:
        """The rows of `parts` (one or more), one part after another."""
        import numpy as np

        if len(parts) == 1:
            return parts[0]

        def joined(name: str, field: str) -> Any:
            return np.concatenate([getattr(p, field)[name] for p in parts])

        first = parts[0]
        return cls(floats={k: joined(k, "floats") for k in first.floats},
                   counts={k: joined(k, "counts") for k in first.counts},
                   present={k: joined(k, "present") for k in first.present},
                   usage_source=np.concatenate([p.usage_source for p in parts]))


_ABSENT = object()
