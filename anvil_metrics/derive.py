"""The per-request formulas of benchmark/v1, one function each, and the derived row.

Why one function per formula: `anvil postprocess` (raw records → rows) and `anvil verify`
(rows in a file → the same rows again) must agree to the last bit, so both call these
functions and nothing else computes a per-request figure. Each function states its unit,
its formula and its inputs, and returns None — never NaN or ±inf — when an input is
missing or a divisor is zero or negative (benchmark-v1.md: "null, never NaN or Infinity").

Evaluation order matters for bit-exactness and follows the spec literally:
`decode_tok_s = (output_tokens − 1) / (generation_ms / 1000)`, not `… * 1000 / …`.
Durations from integer `perf_counter_ns` stamps are `(b − a) / 1e6`: the integer
difference is exact, and one correctly rounded division makes the milliseconds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
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
