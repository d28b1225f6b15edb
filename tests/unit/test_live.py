"""The live figures' storage: exact percentiles in compact arrays, a bounded chart series.

Runs last hours now: what `LiveStats` keeps per request must be a few bytes, not a Python
float object per metric, and its percentiles must still be `stats.nearest_rank`'s exactly
(at the end of a run the LLM tab equals `benchmark.json` bit for bit; tests/unit/
test_webui.py and test_dist.py check that through real runs).
"""

from __future__ import annotations

import math
import random
import tracemalloc

import numpy as np
import pytest

from anvil_metrics import stats
from anvil_metrics.live import (
    INITIAL_CAPACITY,
    LIVE_METRICS,
    LIVE_PERCENTILES,
    MAX_BUCKETS,
    SKETCH_GAMMA,
    SKETCH_REL_ERROR,
    ExactValues,
    LiveStats,
    _kth,
    _Series,
    _Sketch,
)
from anvil_metrics.records import RequestRecord


def _expected(values: list[float]) -> dict[str, float | None]:
    out = {f"p{p}": stats.nearest_rank(values, p) for p in LIVE_PERCENTILES}
    out["min"] = min(values) if values else None
    out["max"] = max(values) if values else None
    return out


def test_exact_values_take_at_most_16_bytes_each_and_stay_exact() -> None:
    rng = np.random.default_rng(7)
    store = ExactValues()
    fed: list[float] = []
    assert store.percentiles(LIVE_PERCENTILES) == _expected([])
    while len(fed) < 200_000:
        # batches of 1..3000, with ties and a slow drift, as a long run's TTFTs
        batch = np.round(rng.lognormal(5 + len(fed) / 1e5, 0.5, rng.integers(1, 3000)), 1)
        store.extend(batch)
        fed.extend(batch.tolist())
        if rng.random() < 0.1:  # a snapshot now and then: merged prefix or not
            ordered = np.sort(np.array(fed))  # nearest_rank's ranks, faster on 200k values
            assert store.percentiles(LIVE_PERCENTILES) == {
                **{f"p{p}": float(ordered[stats.nearest_rank_index(len(fed), p)])
                   for p in LIVE_PERCENTILES}, "min": ordered[0], "max": ordered[-1]}
    assert len(store) == len(fed)
    assert store.nbytes / len(fed) <= 16, store.nbytes / len(fed)
    assert store.nbytes >= 8 * len(fed)
    assert len(fed) > INITIAL_CAPACITY * 2 ** 6  # many growths behind us
    assert store.percentiles(LIVE_PERCENTILES) == _expected(fed)


def test_percentiles_are_exact_whether_or_not_the_tail_was_merged() -> None:
    rng = random.Random(3)
    store = ExactValues(capacity=1)
    fed: list[float] = []
    for step in range(400):
        batch = [rng.choice([rng.uniform(0, 100), 5.0, 0.0]) for _ in range(rng.randint(1, 90))]
        store.extend(np.array(batch))
        fed.extend(batch)
        if step % 7 == 0:
            assert store.percentiles(LIVE_PERCENTILES) == _expected(fed), step
    assert store.sorted_n > 0  # the tail was merged into the prefix at least once
    assert store.percentiles((0, 1, 33, 50, 77, 100)) == {
        **{f"p{p}": stats.nearest_rank(fed, p) for p in (0, 1, 33, 50, 77, 100)},
        "min": min(fed), "max": max(fed)}


def test_kth_of_two_sorted_runs() -> None:
    rng = random.Random(11)
    for _ in range(2000):
        a = np.sort(np.array([rng.randint(0, 9) for _ in range(rng.randint(0, 8))], float))
        b = np.sort(np.array([rng.randint(0, 9) for _ in range(rng.randint(0, 8))], float))
        union = sorted([*a.tolist(), *b.tolist()])
        for k in range(len(union)):
            assert _kth(a, b, k) == union[k], (a, b, k)


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


def test_live_stats_memory_per_request_is_tens_of_bytes() -> None:
    """Through the public API: what LiveStats allocates and keeps per request, beyond the
    first 5000, is far below the ~32 bytes a Python float per metric cost (7 metrics)."""
    live = LiveStats("run", None)
    for i in range(5000):
        live.take(_record(i))
    live.snapshot()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(5000, 25_000):
            live.take(_record(i))
        snap = live.snapshot()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert snap["completed"] == 25_000
    per_request = (after - before) / 20_000
    assert per_request <= 12 * len(LIVE_METRICS) + 16, per_request  # arrays, growth slack
    assert live.values_nbytes() / 25_000 <= 16 * len(LIVE_METRICS)
    ttft = next(m for m in snap["metrics"] if m["field"] == "ttft_ms")
    assert ttft["count"] == 25_000
    assert snap["accuracy"].startswith("table: exact nearest-rank percentiles over all 25000")


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
