"""The live figures' storage: bounded sketches while a run goes, exact figures at its end.

Runs last hours now: what `LiveStats` keeps must not grow with the number of requests, its
running percentiles must be within the stated error of `stats.nearest_rank`'s, and once the
run is over (`finish(rows)`) the table must be `benchmark.json`'s figures exactly
(tests/unit/test_webui.py and test_dist.py check that through real runs).
"""

from __future__ import annotations

import math
import random
import tracemalloc

import numpy as np
import pytest

from anvil_metrics import stats
from anvil_metrics.derive import RowColumns, rows_from_raw
from anvil_metrics.live import (
    LIVE_METRICS,
    LIVE_PERCENTILES,
    MAX_BUCKETS,
    SKETCH_GAMMA,
    SKETCH_REL_ERROR,
    LiveStats,
    _Series,
    _Sketch,
)
from anvil_metrics.rawcolumns import COL, ColumnBuilder
from anvil_metrics.records import RequestRecord


def _expected(values: list[float]) -> dict[str, float | None]:
    out = {f"p{p}": stats.nearest_rank(values, p) for p in LIVE_PERCENTILES}
    out["min"] = min(values) if values else None
    out["max"] = max(values) if values else None
    return out


def _within(got: float | None, exact: float | None) -> bool:
    if exact is None or got is None:
        return got is exact
    return abs(got - exact) <= SKETCH_REL_ERROR * abs(exact) * (1 + 1e-9)


def test_sketch_percentiles_are_within_the_stated_error_and_bounded() -> None:
    rng = np.random.default_rng(7)
    sketch = _Sketch()
    fed: list[float] = []
    assert sketch.percentiles(LIVE_PERCENTILES) == _expected([])
    bins = []
    while len(fed) < 200_000:
        # batches of 1..3000, with ties, zeros and a slow drift, as a long run's TTFTs
        batch = np.round(rng.lognormal(5 + len(fed) / 1e5, 0.5, rng.integers(1, 3000)), 1)
        batch[rng.random(len(batch)) < 0.01] = 0.0
        sketch.extend(batch)
        fed.extend(batch.tolist())
        if rng.random() < 0.1:
            ordered = np.sort(np.array(fed))
            got = sketch.percentiles(LIVE_PERCENTILES)
            for p in LIVE_PERCENTILES:
                exact = float(ordered[stats.nearest_rank_index(len(fed), p)])
                assert _within(got[f"p{p}"], exact), (p, got, exact)
            assert (got["min"], got["max"]) == (ordered[0], ordered[-1])
            bins.append(len(sketch.bins))
    assert sketch.n == len(fed)
    # the bins span the values' spread (a factor ~e^3 here), not their number
    assert max(bins) < 1000 and max(bins) - bins[len(bins) // 2] < 200, bins


def test_one_value_at_a_time_and_whole_arrays_give_the_same_sketch() -> None:
    rng = random.Random(3)
    values = [rng.choice([rng.uniform(0, 100), 5.0, 0.0, 1e-9, 3e5]) for _ in range(3000)]
    one, many = _Sketch(), _Sketch()
    for v in values:
        one.add(v)
    many.extend(np.array(values[:1000]))
    many.extend(np.array(values[1000:]))
    assert one.bins == many.bins and one.n == many.n == 3000
    ps = (0, 1, 33, 50, 77, 100)
    assert one.percentiles(ps) == many.percentiles(ps)
    for p in ps:
        assert _within(one.percentiles(ps)[f"p{p}"], stats.nearest_rank(values, p)), p


def _record(i: int) -> RequestRecord:
    start = 1_000_000_000 + i * 3_000_000
    first = start + 20_000_000 + (i * 7919) % 9_000_000
    return RequestRecord(
        request_index=i, start_ns=start, first_output_ns=first - 5_000_000,
        first_content_ns=first, end_ns=first + 200_000_000 + (i * 104729) % 50_000_000,
        planned_context_tokens=512, reasoning_chunks=1, content_chunks=4,
        chunk_deltas_ns=(first - start - 5_000_000, 5_000_000, 50_000_000, 50_000_000,
                         50_000_000 + (i * 104729) % 50_000_000),
        usage={"prompt_tokens": 500, "completion_tokens": 21})


def _rows(records: list[RequestRecord]) -> RowColumns:
    cols = ColumnBuilder()
    for r in records:
        cols.add_record(0, r)
    table = cols.table()
    return rows_from_raw(table, table[:, COL["request_index"]])


def test_live_stats_memory_does_not_grow_with_requests_and_ends_exact() -> None:
    """Through the public API: past the first 5000 requests, what LiveStats keeps grows by
    a few bins at most (not per request); `finish(rows)` makes the table exact."""
    live = LiveStats("run", None)
    records = [_record(i) for i in range(45_000)]
    for r in records[:5000]:
        live.take(r)
    live.snapshot()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for r in records[5000:]:
            live.take(r)
        snap = live.snapshot()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert snap["completed"] == 45_000 and not snap["exact"]
    per_request = (after - before) / 40_000
    assert per_request < 2, per_request  # 56 bytes a request with exact float64 arrays
    assert live.bins() < 400 * len(LIVE_METRICS)
    assert snap["accuracy"].startswith("table and charts: nearest-rank percentiles within 1 %")
    rows = _rows(records)
    for m in snap["metrics"]:
        col = rows.values(m["field"])
        col = col[~np.isnan(col)]
        exact = stats.nearest_rank_columns(col, LIVE_PERCENTILES)
        assert all(_within(m[f"p{p}"], e) for p, e in zip(LIVE_PERCENTILES, exact,
                                                           strict=True)), m
    live.finish(rows)
    final = live.snapshot()
    assert final["exact"] and final["accuracy"].startswith("table: exact nearest-rank")
    for m in final["metrics"]:
        col = rows.values(m["field"])
        col = col[~np.isnan(col)]
        exact = stats.nearest_rank_columns(col, (*LIVE_PERCENTILES, 0, 100))
        assert [m[f"p{p}"] for p in LIVE_PERCENTILES] + [m["min"], m["max"]] == exact, m
        assert m["count"] == len(col)


def test_sketch_median_is_within_the_stated_error() -> None:
    rng = np.random.default_rng(5)
    for scale in (0.003, 1.0, 250.0, 8e6):
        values = (rng.lognormal(0, 1.5, 4001) * scale).tolist() + [0.0]
        sketch = _Sketch()
        for v in values:
            sketch.add(v)
        exact = stats.nearest_rank(values, 50)
        assert abs(sketch.median() - exact) <= SKETCH_REL_ERROR * exact * (1 + 1e-9), scale
        assert len(sketch.bins) < 1000  # bounded by the spread, not by the count
    assert _Sketch().median() is None
    zeros = _Sketch()
    zeros.add(0.0)
    assert zeros.median() == 0.0


def test_series_memory_does_not_grow_with_requests() -> None:
    series = _Series()
    rng = random.Random(2)
    sizes = []
    for i in range(60_000):
        series.add(i / 20, {"ttft_ms": rng.uniform(90, 110), "decode_tok_s": float("nan")})
        if i % 20_000 == 19_999:
            sizes.append(sum(len(s.bins) for b in series.buckets.values() for s in b.values()))
    out = series.as_json()
    assert len(out["t_s"]) <= MAX_BUCKETS and sum(out["completed"]) == 60_000
    # bins: at most MAX_BUCKETS buckets × the bins spanning 90..110, however many requests
    spread = math.ceil(math.log(110 / 90, SKETCH_GAMMA)) + 1
    assert max(sizes) <= (MAX_BUCKETS + 1) * spread, sizes
    assert all(out["decode_tok_s_p50"][i] is None for i in range(len(out["t_s"])))
    assert all(90 * (1 - SKETCH_REL_ERROR) <= v <= 110 * (1 + SKETCH_REL_ERROR)
               for v in out["ttft_ms_p50"])
    assert out["median_rel_error"] == pytest.approx(SKETCH_REL_ERROR)
