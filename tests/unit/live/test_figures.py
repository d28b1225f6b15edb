"""The live figures' storage: bounded sketches while a run goes, exact figures at its end.

Runs last hours now: what `LiveStats` keeps must not grow with the number of requests, its
running percentiles must be within the stated error of `stats.nearest_rank`'s, and once the
run is over (`finish(rows)`) the table must be `benchmark.json`'s figures exactly
(tests/unit/live/test_webui.py and dist/test_master.py check that through real runs). The
same for the TTFT CDF (nearest-rank p0..p100), and the flow's per-second counts, rates
and in-flight samples are checked against hand-worked inputs.
"""

from __future__ import annotations

import math
import random
import time
import tracemalloc

import gevent
import numpy as np
import pytest

from anvil_metrics.live import figures as live_module
from anvil_metrics.live.control import RequestBudget
from anvil_metrics.live.figures import (
    CDF_PERCENTILES,
    LIVE_METRICS,
    LIVE_PERCENTILES,
    MAX_BUCKETS,
    MAX_FLOW_POINTS,
    SKETCH_GAMMA,
    SKETCH_REL_ERROR,
    LiveStats,
    _Flow,
    _Series,
    _Sketch,
)
from anvil_metrics.post import stats
from anvil_metrics.post.derive import RowColumns, rows_from_raw
from anvil_metrics.post.rawcolumns import COL, ColumnBuilder
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
    assert final["exact"] and final["accuracy"].startswith("table and TTFT CDF: exact nearest-rank")
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


# --- the TTFT CDF and the flow (in flight, throughput) ------------------------------------


def _ttft_record(i: int, ttft_ms: int, tokens: int = 21) -> RequestRecord:
    start = 1_000_000_000 * (i + 1)
    first = start + ttft_ms * 1_000_000
    return RequestRecord(
        request_index=i, start_ns=start, first_output_ns=first, first_content_ns=first,
        end_ns=first + 100_000_000, planned_context_tokens=512, content_chunks=2,
        chunk_deltas_ns=(ttft_ms * 1_000_000, 100_000_000),
        usage={"prompt_tokens": 500, "completion_tokens": tokens})


def test_ttft_cdf_is_the_nearest_rank_percentiles_0_to_100() -> None:
    """Five TTFTs, worked by hand: the nearest rank of p among 5 is ceil(5p/100), so p0..p20
    are the smallest, p21..p40 the second, …, p81..p100 the largest. While the run goes the
    points come from the sketch (within 1 %; p0 and p100 exact), at its end from the rows,
    exactly, with the function the table and benchmark.json use."""
    ttfts = [431, 107, 389, 212, 250]
    by_hand = [107.0] * 21 + [212.0] * 20 + [250.0] * 20 + [389.0] * 20 + [431.0] * 20
    assert CDF_PERCENTILES == tuple(range(101))
    live = LiveStats("run", None)
    assert live.snapshot()["ttft_cdf"] == {"field": "ttft_ms", "label": "TTFT (first content)",
                                           "unit": "ms", "count": 0, "percent": [],
                                           "value": []}
    records = [_ttft_record(i, ms) for i, ms in enumerate(ttfts)]
    for r in records:
        live.take(r)
    running = live.snapshot()["ttft_cdf"]
    assert running["count"] == 5 and running["percent"] == list(range(101))
    assert running["value"][0] == 107.0 and running["value"][100] == 431.0  # exact ends
    assert all(_within(got, want) for got, want in zip(running["value"], by_hand,
                                                       strict=True)), running["value"]
    rows = _rows(records)
    live.finish(rows)
    final = live.snapshot()
    assert final["ttft_cdf"]["value"] == by_hand
    assert [stats.nearest_rank(ttfts, p) for p in CDF_PERCENTILES] == by_hand
    table = next(m for m in final["metrics"] if m["field"] == "ttft_ms")
    # the CDF's p50 and p95 are the table's, bit for bit (and so benchmark.json's)
    assert (final["ttft_cdf"]["value"][50], final["ttft_cdf"]["value"][95]) == \
        (table["p50"], table["p95"]) == (250.0, 431.0)


def test_flow_counts_what_finished_in_each_second_and_its_mean_in_flight() -> None:
    flow = _Flow()
    for t_s, tokens in ((0.1, 10), (0.5, 20), (0.99, 30), (1.0, 7), (2.5, 100)):
        flow.finished(t_s, completed=True, output_tokens=tokens)
    flow.finished(1.5, completed=False)
    assert flow.as_json()["t_s"] == []  # no tick has passed: nothing shown yet
    flow.sample(1.0, 2.5, 1.0, 3)  # second 0: 2.5 request·s in flight, 3 at most
    flow.sample(2.0, 2.0, 1.0, 2)
    got = flow.as_json()
    assert (got["t_s"], got["span_s"]) == ([1.0, 2.0], [1.0, 1.0])  # second 2 is open
    assert got["completed"] == [3, 1] and got["failed"] == [0, 1]
    assert got["output_tokens"] == [60, 7] and got["output_tok_s"] == [60.0, 7.0]
    assert got["completed_per_s"] == [3.0, 1.0]
    assert got["in_flight"] == [2.5, 2.0] and got["in_flight_max"] == [3, 2]
    flow.sample(3.0, 4.0, 1.0, 4)
    flow.end(3.8, 0.4, 0.8, 1)  # the load is over: the last 0.8 s is a point of its own
    got = flow.as_json()
    assert got["t_s"] == [1.0, 2.0, 3.0, 3.8] and got["span_s"] == [1.0, 1.0, 1.0, 3.8 - 3.0]
    assert got["output_tokens"] == [60, 7, 100, 0] and got["output_tok_s"][2] == 100.0
    assert got["in_flight"] == [2.5, 2.0, 4.0, 0.5] and got["in_flight_max"] == [3, 2, 4, 1]
    flow.end(9.0, 5.0, 5.2, 5)  # once only
    assert flow.as_json() == got


def test_flow_joins_a_last_sliver_to_the_second_before_it() -> None:
    flow = _Flow()
    flow.sample(1.0, 2.0, 1.0, 2)
    flow.finished(1.5, completed=True, output_tokens=30)
    flow.sample(2.0, 1.5, 1.0, 2)
    flow.finished(2.1, completed=True, output_tokens=12)  # 0.1 s after the tick
    flow.end(2.2, 0.0, 0.2, 1)
    got = flow.as_json()
    # not 12 tokens / 0.2 s = 60 tok/s: (30 + 12) tokens over 1.2 s
    assert got["t_s"] == [1.0, 2.2] and got["span_s"] == [1.0, 2.2 - 1.0]
    assert got["output_tokens"] == [0, 42] and got["output_tok_s"][1] == 42 / (2.2 - 1.0)
    assert got["in_flight"] == [2.0, 1.5 / 1.2] and got["in_flight_max"] == [2, 2]
    alone = _Flow()  # a run shorter than half a tick: its one point is all there is
    alone.finished(0.2, completed=True, output_tokens=9)
    alone.end(0.3, 0.6, 0.3, 3)
    assert alone.as_json()["output_tok_s"] == [9 / 0.3]
    assert alone.as_json()["in_flight"] == [0.6 / 0.3]


def test_flow_stays_bounded_and_merges_pairwise() -> None:
    flow = _Flow()
    seconds = 2000
    for s in range(seconds):
        flow.finished(s + 0.5, completed=True, output_tokens=s % 7)
        flow.sample(s + 1.0, s % 5, 1.0, s % 5)  # in flight 0,1,2,3,4,0,1,…
    got = flow.as_json()
    # 2000 s > 600 points: 2 s (1000 > 600), then 4 s intervals: 500 points
    assert got["interval_s"] == 4.0 and len(got["t_s"]) == seconds // 4 <= MAX_FLOW_POINTS
    assert len(flow.buckets) <= MAX_FLOW_POINTS
    assert sum(got["completed"]) == seconds
    assert sum(got["output_tokens"]) == sum(s % 7 for s in range(seconds))
    assert got["t_s"][:2] == [4.0, 8.0] and set(got["span_s"]) == {4.0}
    # interval 0 holds seconds 0..3: in flight 0, 1, 2, 3
    assert (got["in_flight"][0], got["in_flight_max"][0]) == (1.5, 3)
    assert got["output_tok_s"][0] == (0 + 1 + 2 + 3) / 4


def test_in_flight_is_read_from_the_budget_on_each_tick(monkeypatch) -> None:
    """The live page's in-flight series through the real pieces: a request budget, its
    tickets taken and given back, and LiveStats' sampler (on a short tick, for speed)."""
    monkeypatch.setattr(live_module, "FLOW_TICK_S", 0.1)
    budget = RequestBudget(None, 1, [10])
    warm = budget.take()
    assert warm is not None and warm.warmup and budget.in_flight == 0  # warm-ups: not counted
    budget.give_back(warm)
    live = LiveStats("run", None)
    live.start_flow(budget.read_in_flight)
    tickets = [budget.take() for _ in range(3)]
    budget.give_back(tickets[0])
    assert budget.in_flight == 2

    def wait_ticks(n: int) -> int:
        """Until n more ticks were read (bounded: 5 s); how many intervals there are."""
        want = live.flow.sampled_to_s + n * 0.1 - 1e-9
        deadline = time.monotonic() + 5
        while live.flow.sampled_to_s < want:
            assert time.monotonic() < deadline, "the sampler did not tick"
            gevent.sleep(0.02)
        return len(live.flow.buckets)

    wait_ticks(1)  # the first tick saw the three takes and the give-back
    held = wait_ticks(2)
    for t in tickets[1:]:
        budget.give_back(t)
    assert budget.in_flight == 0
    wait_ticks(2)
    live.end_flow()
    got = live.snapshot()["flow"]
    means, peaks = got["in_flight"], got["in_flight_max"]
    assert None not in means and len(means) >= 5
    # the ticks wholly before the give-backs: 2 in flight all along, 3 at most at the start
    assert means[1:held] == [2.0] * (held - 1) and peaks[:held] == [3] + [2] * (held - 1)
    assert 0 < means[held] <= 2 and peaks[held] == 2  # the give-backs' tick
    assert means[held + 1:] == [0.0] * (len(means) - held - 1)  # and after them
    sampled = live.flow.sampled_to_s
    gevent.sleep(0.25)
    assert live.flow.sampled_to_s == sampled  # the sampler stopped at end_flow
