"""Nearest-rank percentiles and the `metrics` block of benchmark/v1.

Why its own module: `build_benchmark` and `verify_benchmark` both call `aggregate`, so the
aggregates in a file and the ones verify recomputes come from one piece of code; which keys
there are, and what each means, is the catalogue's (`catalog.AGGREGATES`).

Every aggregate is defined so that it does not depend on row order and is reproducible to
the last bit by any implementation that follows the definitions:

- percentiles are nearest-rank, with the rank computed in integers:
  `k = (p·n + 99) // 100` (= ceil(p·n/100)), value = k-th smallest, as a float — found with
  a partition, and among equal zeros taken in row order, as a stable sort takes them (-0.0
  and 0.0 compare equal but are different values);
- sums of counts are exact integer sums;
- sums and means of floats use `math.fsum` (the correctly rounded sum, independent of
  order; a mean is `fsum(xs) / len(xs)`, as `statistics.fmean`);
- ratios of counts below 2**53 are one correctly rounded division of exactly converted
  integers, as Python's `int / int`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from anvil_metrics import catalog
from anvil_metrics.post.derive import RowColumns

PERCENTILES = catalog.PERCENTILES


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


def nearest_rank_columns(values: Any, ps: Sequence[int]) -> list[float | None]:
    """`nearest_rank(values, p)` for each p of `ps`, over a numpy column without nulls."""
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


def _rate(numerator: float | int, seconds: float) -> float | None:
    """numerator / seconds, None when the divisor is zero or negative or the result is not
    finite."""
    if seconds <= 0:
        return None
    value = numerator / seconds
    return value if math.isfinite(value) else None


def throughput_tok_s(tokens: int, wall_clock_ms: float | None) -> float | None:
    """Run throughput, tokens/s: `Σ tokens / (wall_clock_ms / 1000)` (output tokens:
    `throughput_tok_s`; prompt tokens: `input_throughput_tok_s`); None when the wall clock
    is missing, zero or negative."""
    if wall_clock_ms is None:
        return None
    return _rate(tokens, wall_clock_ms / 1000)


def aggregate(rows: RowColumns, wall_clock_ms: float | None) -> dict[str, Any]:
    """The `metrics` block of benchmark/v1 from the rows of completed requests: every key of
    `catalog.AGGREGATES` (but those whose row fields `rows` lacks): percentiles as float or
    None, sums and sample counts as int, `output_token_sources` as {source: count} for the
    sources present, rates as float or None. The result does not depend on row order."""
    m: dict[str, Any] = {}
    for f in catalog.ROW:
        if f.percentiles is None or f.name in rows.absent:
            continue
        column = rows.values(f.name)
        column = column[~np.isnan(column)]
        if f.kind == "count":
            column = column.astype(np.int64)
        for name, value in zip(f.percentile_names(),
                               nearest_rank_columns(column, catalog.PERCENTILES), strict=True):
            m[name] = value
    counts, present = rows.counts, rows.present
    prompt_present = present["prompt_tokens"]
    m["output_tokens"] = sum(counts["output_tokens"].tolist())
    m["prompt_tokens"] = sum(counts["prompt_tokens"][prompt_present].tolist())
    m["reasoning_chunks"] = sum(counts["reasoning_chunks"].tolist())
    m["content_chunks"] = sum(counts["content_chunks"].tolist())
    n_usage = int(np.count_nonzero(rows.usage_source))
    sources = {"chunks": len(rows) - n_usage, "usage": n_usage}
    m["output_token_sources"] = {k: v for k, v in sorted(sources.items()) if v}
    m["ttft_samples"] = int(np.count_nonzero(~np.isnan(rows.floats["ttft_ms"])))
    m["prompt_token_samples"] = int(np.count_nonzero(prompt_present))
    m["throughput_tok_s"] = throughput_tok_s(m["output_tokens"], wall_clock_ms)
    m["input_throughput_tok_s"] = (throughput_tok_s(m["prompt_tokens"], wall_clock_ms)
                                   if prompt_present.any() else None)
    visible = rows.floats["visible_generation_ms"]
    picked = ~rows.usage_source & ~np.isnan(visible)
    m["content_chunks_s"] = None
    if picked.any():
        chunks = sum(counts["content_chunks"][picked].tolist())
        m["content_chunks_s"] = _rate(chunks, math.fsum((visible[picked] / 1000).tolist()))
    m.update(per_user(rows))
    cached = present["cached_tokens"] & prompt_present & (counts["prompt_tokens"] > 0)
    m["prefix_cache_hit_avg"] = None
    if cached.any():
        ratios = (counts["cached_tokens"][cached].astype(np.float64)
                  / counts["prompt_tokens"][cached].astype(np.float64))
        m["prefix_cache_hit_avg"] = math.fsum(ratios.tolist()) / len(ratios)
    assert m.keys() == expected_keys(rows.absent), "catalog.AGGREGATES and aggregate disagree"
    return m


def per_user(rows: RowColumns) -> dict[str, float | None]:
    """Tok/s per user from the rows (never throughput ÷ concurrency): the mean of each
    request's `decode_tok_s` (its p50 is the percentile beside it), and the same weighted
    by each request's generation time, `Σ (output_tokens − 1) / fsum(generation_ms /
    1000)`, over the rows that have a `decode_tok_s`."""
    decode = rows.floats["decode_tok_s"]
    picked = ~np.isnan(decode)
    if not picked.any():
        return {"decode_tok_s_mean": None, "decode_tok_s_weighted": None}
    after_first = sum((rows.counts["output_tokens"][picked] - 1).tolist())
    seconds = math.fsum((rows.floats["generation_ms"][picked] / 1000).tolist())
    return {"decode_tok_s_mean": math.fsum(decode[picked].tolist()) / int(picked.sum()),
            "decode_tok_s_weighted": _rate(after_first, seconds)}


# keys added on their own (not a percentile of an added row field, which rows without the
# field lack): a file written before one lacks it, in `metrics` and in each step's
ADDED_KEYS = frozenset(a.name for a in catalog.AGGREGATES
                       if a.added and not a.conditional and not set(a.inputs) & catalog.ADDED)


def expected_keys(absent: frozenset[str]) -> frozenset[str]:
    """The `metrics` keys of rows that lack the `absent` added fields."""
    return frozenset(a.name for a in catalog.AGGREGATES
                     if not (a.added and set(a.inputs) & absent) and not a.conditional)


def planned_vs_counted_error_pct_max(rows: RowColumns) -> float | None:
    """%: max over rows with both of |prompt_tokens − planned_context_tokens| / planned · 100
    (the prompt factory's worst miss; `prompt_calibration.planned_vs_counted_error_pct_max`),
    rows that carried images or audio left out: the server counts their media in
    prompt_tokens, which the text's plan never held. None when no row has both."""
    counts, present = rows.counts, rows.present
    planned = counts["planned_context_tokens"]
    picked = present["prompt_tokens"] & present["planned_context_tokens"] & (planned != 0)
    for media in ("media_images", "media_audio_clips"):
        if media in counts:
            picked &= ~(present[media] & (counts[media] > 0))
    if not picked.any():
        return None
    prompt, planned = counts["prompt_tokens"][picked], planned[picked]
    errs = np.abs(prompt - planned).astype(np.float64) / planned.astype(np.float64) * 100
    return float(errs.max())


Z95 = 1.959963984540054  # the standard normal's 97.5th percentile: a two-sided 95 % interval


def wilson_interval(passed: int, n: int, z: float = Z95) -> tuple[float, float] | None:
    """Wilson's score interval for a proportion `passed / n` (None when n is 0): unlike the
    normal approximation it stays within [0, 1] and is not empty at 0 or n passed, which a
    pass rate under load often is."""
    if n == 0:
        return None
    p, z2 = passed / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def pass_rate(rows: RowColumns) -> dict[str, Any]:
    """A check class's rows' verdicts (`check_passed`): judged, passed, the pass rate
    (passed / judged, null when none was judged) and its 95 % Wilson interval."""
    judged = rows.present["check_passed"]
    n = int(judged.sum())
    passed = int(rows.counts["check_passed"][judged].sum())
    ci = wilson_interval(passed, n)
    return {"judged": n, "passed": passed, "pass_rate": passed / n if n else None,
            "pass_rate_ci95_low": None if ci is None else ci[0],
            "pass_rate_ci95_high": None if ci is None else ci[1]}
