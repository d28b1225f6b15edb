"""Nearest-rank percentiles and the `metrics` block of benchmark/v1.

Why its own module: `build_benchmark` and `verify_benchmark` both call `aggregate`, so the
aggregates in a file and the ones verify recomputes come from one piece of code.

Every aggregate is defined so that it does not depend on row order and is reproducible to
the last bit by any implementation that follows the definitions:

- percentiles are nearest-rank, with the rank computed in integers:
  `k = (p·n + 99) // 100` (= ceil(p·n/100)), value = k-th smallest, as a float;
- sums of counts are exact integer sums;
- sums and means of floats use `math.fsum` (the correctly rounded sum, independent of
  order; a mean is `fsum(xs) / len(xs)`, as `statistics.fmean`).

`aggregate_columns` computes the same block from a `derive.RowColumns` with numpy (see the
section at the end for why its values are the same to the last bit).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from anvil_metrics.derive import RequestTiming

PERCENTILES = (50, 95)

# metric-name stem, row field, name pattern. Times put the percentile before `_ms`
# (`ttft_p50_ms`); rates and counts append it (`decode_tok_s_p50`), as in the spec example.
PERCENTILE_METRICS: tuple[tuple[str, str], ...] = (
    ("ttft_{p}_ms", "ttft_ms"),
    ("time_to_first_output_{p}_ms", "time_to_first_output_ms"),
    ("e2e_{p}_ms", "e2e_ms"),
    ("generation_{p}_ms", "generation_ms"),
    ("decode_tok_s_{p}", "decode_tok_s"),
    ("effective_prefill_tok_s_{p}", "effective_prefill_tok_s"),
    ("mean_inter_token_latency_ms_{p}", "mean_inter_token_latency_ms"),
    ("prompt_tokens_{p}", "prompt_tokens"),
)
SUM_METRICS = ("output_tokens", "prompt_tokens", "reasoning_chunks", "content_chunks")

METRIC_KEYS: frozenset[str] = frozenset(
    [pattern.format(p=f"p{p}") for pattern, _ in PERCENTILE_METRICS for p in PERCENTILES]
    + list(SUM_METRICS)
    + [
        "output_token_sources",
        "ttft_samples",
        "prompt_token_samples",
        "throughput_tok_s",
        "content_chunks_s",
        "prefix_cache_hit_avg",
    ]
)


def nearest_rank_index(n: int, p: int) -> int:
    """0-based index of the nearest-rank p-th percentile among n sorted values.

    1-based rank `k = ceil(p·n / 100) = (p·n + 99) // 100`, at least 1 (so p=0 is the
    minimum). Integers only: no floating-point rounding can move the rank.
    """
    if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p <= 100:
        raise ValueError(f"percentile must be an integer 0..100, got {p!r}")
    if n < 1:
        raise ValueError("no values")
    return max(1, (p * n + 99) // 100) - 1


def nearest_rank(values: Iterable[float | int | None], p: int) -> float | None:
    """Nearest-rank p-th percentile (p an integer 0..100) of the non-None values, as float.

    None when there are no values. numpy's `percentile(..., method="inverted_cdf")` agrees
    for p50/p95/p99; at other p it can differ through floating-point rounding of p·n/100.
    """
    present = sorted(v for v in values if v is not None)
    if not present:
        nearest_rank_index(1, p)  # still reject a bad p
        return None
    return float(present[nearest_rank_index(len(present), p)])


def _rate(numerator: float | int, seconds: float) -> float | None:
    """numerator / seconds, None when the divisor is zero or negative or the result is not
    finite."""
    if seconds <= 0:
        return None
    value = numerator / seconds
    return value if math.isfinite(value) else None


def throughput_tok_s(output_tokens: int, wall_clock_ms: float | None) -> float | None:
    """Run throughput, tokens/s: `Σ output_tokens / (wall_clock_ms / 1000)`; None when the
    wall clock is missing, zero or negative."""
    if wall_clock_ms is None:
        return None
    return _rate(output_tokens, wall_clock_ms / 1000)


def content_chunks_s(rows: Sequence[Mapping[str, Any]]) -> float | None:
    """Content chunks per visible second over chunk-counted rows:
    `Σ content_chunks / fsum(visible_generation_ms / 1000)` over the rows whose
    `output_token_source` is "chunks" and that have a `visible_generation_ms` (a row without
    one received no content, so it adds nothing to either sum). None when there are no such
    rows or their visible time sums to zero."""
    picked = [
        r
        for r in rows
        if r.get("output_token_source") == "chunks" and r.get("visible_generation_ms") is not None
    ]
    if not picked:
        return None
    chunks = sum(r["content_chunks"] for r in picked)
    seconds = math.fsum(r["visible_generation_ms"] / 1000 for r in picked)
    return _rate(chunks, seconds)


def prefix_cache_hit_avg(rows: Sequence[Mapping[str, Any]]) -> float | None:
    """Mean prefix-cache hit ratio: `fsum(cached_tokens / prompt_tokens) / count` over the
    rows that have `cached_tokens` and a positive `prompt_tokens` (the ratio is undefined
    otherwise). None when no row qualifies."""
    ratios = [
        r["cached_tokens"] / r["prompt_tokens"]
        for r in rows
        if r.get("cached_tokens") is not None
        and r.get("prompt_tokens") is not None
        and r["prompt_tokens"] > 0
    ]
    if not ratios:
        return None
    return math.fsum(ratios) / len(ratios)


def _as_mapping(row: RequestTiming | Mapping[str, Any]) -> Mapping[str, Any]:
    return row.to_dict() if isinstance(row, RequestTiming) else row


def aggregate(
    rows: Sequence[RequestTiming | Mapping[str, Any]], wall_clock_ms: float | None
) -> dict[str, Any]:
    """The `metrics` block of benchmark/v1 from the rows of completed requests.

    `rows` are `RequestTiming`s or row dicts as read from a file (a missing `cached_tokens`
    key means not reported). Returns exactly the keys in METRIC_KEYS: percentiles as float
    or None, sums and sample counts as int, `output_token_sources` as {source: count} for the
    sources present, rates as float or None. The result does not depend on row order.
    """
    rs = [_as_mapping(r) for r in rows]
    m: dict[str, Any] = {}
    for pattern, field in PERCENTILE_METRICS:
        column = [r.get(field) for r in rs]
        for p in PERCENTILES:
            m[pattern.format(p=f"p{p}")] = nearest_rank(column, p)
    m["output_tokens"] = sum(r["output_tokens"] for r in rs)
    m["prompt_tokens"] = sum(r["prompt_tokens"] for r in rs if r.get("prompt_tokens") is not None)
    m["reasoning_chunks"] = sum(r["reasoning_chunks"] for r in rs)
    m["content_chunks"] = sum(r["content_chunks"] for r in rs)
    m["output_token_sources"] = dict(sorted(Counter(r["output_token_source"] for r in rs).items()))
    m["ttft_samples"] = sum(1 for r in rs if r.get("ttft_ms") is not None)
    m["prompt_token_samples"] = sum(1 for r in rs if r.get("prompt_tokens") is not None)
    m["throughput_tok_s"] = throughput_tok_s(m["output_tokens"], wall_clock_ms)
    m["content_chunks_s"] = content_chunks_s(rs)
    m["prefix_cache_hit_avg"] = prefix_cache_hit_avg(rs)
    return m


def planned_vs_counted_error_pct_max(rows: Sequence[Mapping[str, Any]]) -> float | None:
    """%: max over rows with both of |prompt_tokens − planned_context_tokens| / planned · 100
    (the prompt factory's worst miss; `prompt_calibration.planned_vs_counted_error_pct_max`).
    None when no row has both."""
    errs = [
        abs(r["prompt_tokens"] - r["planned_context_tokens"]) / r["planned_context_tokens"] * 100
        for r in rows
        if r.get("prompt_tokens") is not None and r.get("planned_context_tokens")
    ]
    return max(errs) if errs else None


# --- the same aggregates over columns ------------------------------------------------------
#
# `aggregate` and `planned_vs_counted_error_pct_max` over a `derive.RowColumns`: the same
# definitions computed with numpy, value for value (tests/test_columns.py checks it): the
# nearest-rank value is the k-th smallest of the same values — found with a partition, and
# among equal zeros taken in row order, as the stable sort above takes them (-0.0 and 0.0
# compare equal but are different values) —; integer sums are Python integer sums; float
# sums are `math.fsum` of the same per-row doubles; ratios of counts below 2**53 are one
# correctly rounded division of exactly converted integers, as Python's `int / int`.


def nearest_rank_column(values: Any, p: int) -> float | None:
    """`nearest_rank` of a numpy column that has no null (float64 or int64)."""
    return nearest_rank_columns(values, (p,))[0]


def nearest_rank_columns(values: Any, ps: Sequence[int]) -> list[float | None]:
    """`nearest_rank(values, p)` for each p of `ps`, over a numpy column without nulls."""
    import numpy as np

    n = len(values)
    if n == 0:
        for p in ps:
            nearest_rank_index(1, p)  # still reject a bad p
        return [None for _ in ps]
    ks = [nearest_rank_index(n, p) for p in ps]
    part = np.partition(values, sorted(set(ks)))
    out: list[float | None] = []
    for k in ks:
        v = part[k]
        if v == 0 and values.dtype.kind == "f":
            # ties among ±0.0: the stable sort keeps them in row order
            below = int(np.count_nonzero(values < 0))
            v = values[values == 0][k - below]
        out.append(float(v))
    return out


def aggregate_columns(rows: Any, wall_clock_ms: float | None) -> dict[str, Any]:
    """`aggregate` of the rows a `derive.RowColumns` holds (same keys, same values)."""
    import numpy as np

    floats, counts, present = rows.floats, rows.counts, rows.present
    m: dict[str, Any] = {}
    for pattern, field in PERCENTILE_METRICS:
        if field in floats:
            column = floats[field]
            column = column[~np.isnan(column)]
        else:
            column = counts[field][present[field]] if field in present else counts[field]
        for p, value in zip(PERCENTILES, nearest_rank_columns(column, PERCENTILES),
                            strict=True):
            m[pattern.format(p=f"p{p}")] = value
    prompt_present = present["prompt_tokens"]
    m["output_tokens"] = sum(counts["output_tokens"].tolist())
    m["prompt_tokens"] = sum(counts["prompt_tokens"][prompt_present].tolist())
    m["reasoning_chunks"] = sum(counts["reasoning_chunks"].tolist())
    m["content_chunks"] = sum(counts["content_chunks"].tolist())
    n_usage = int(np.count_nonzero(rows.usage_source))
    sources = {"chunks": len(rows) - n_usage, "usage": n_usage}
    m["output_token_sources"] = {k: v for k, v in sorted(sources.items()) if v}
    m["ttft_samples"] = int(np.count_nonzero(~np.isnan(floats["ttft_ms"])))
    m["prompt_token_samples"] = int(np.count_nonzero(prompt_present))
    m["throughput_tok_s"] = throughput_tok_s(m["output_tokens"], wall_clock_ms)
    visible = floats["visible_generation_ms"]
    picked = ~rows.usage_source & ~np.isnan(visible)
    if picked.any():
        chunks = sum(counts["content_chunks"][picked].tolist())
        m["content_chunks_s"] = _rate(chunks, math.fsum((visible[picked] / 1000).tolist()))
    else:
        m["content_chunks_s"] = None
    cached = present["cached_tokens"] & prompt_present & (counts["prompt_tokens"] > 0)
    if cached.any():
        ratios = (counts["cached_tokens"][cached].astype(np.float64)
                  / counts["prompt_tokens"][cached].astype(np.float64))
        m["prefix_cache_hit_avg"] = math.fsum(ratios.tolist()) / len(ratios)
    else:
        m["prefix_cache_hit_avg"] = None
    return m


def planned_vs_counted_error_pct_max_columns(rows: Any) -> float | None:
    """`planned_vs_counted_error_pct_max` of the rows a `derive.RowColumns` holds."""
    import numpy as np

    counts, present = rows.counts, rows.present
    planned = counts["planned_context_tokens"]
    picked = present["prompt_tokens"] & present["planned_context_tokens"] & (planned != 0)
    if not picked.any():
        return None
    prompt, planned = counts["prompt_tokens"][picked], planned[picked]
    errs = np.abs(prompt - planned).astype(np.float64) / planned.astype(np.float64) * 100
    return float(errs.max())
