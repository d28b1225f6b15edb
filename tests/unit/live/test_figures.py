"""The live figures' storage: bounded sketches while a run goes, exact figures at its end.

Runs last hours now: what `LiveStats` keeps must not grow with the number of requests, its
running percentiles must be within the stated error of `stats.nearest_rank`'s, and once the
run is over (`finish(rows)`) the table must be `benchmark.json`'s figures exactly
(tests/unit/live/test_webui.py and cluster/test_master.py check that through real runs). The
same for the TTFT CDF (nearest-rank p0..p100), and the flow's in-flight samples are read
from a real request budget. The sketch itself is tested in test_sketch.py, the charts'
series and the flow's counts and rates in test_series.py.
"""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable

import gevent
import numpy as np
from rawbuild import rows_of

from anvil_metrics.live import series as series_module
from anvil_metrics.live.control import RequestBudget
from anvil_metrics.live.figures import (
    CDF_PERCENTILES,
    DRAIN_BATCH,
    DRAIN_SLICE,
    FORCE_PENDING,
    LIVE_METRICS,
    LIVE_PERCENTILES,
    LiveStats,
)
from anvil_metrics.live.sketch import SKETCH_REL_ERROR
from anvil_metrics.post import stats
from anvil_metrics.records import RequestRecord


def _within(got: float | None, exact: float | None) -> bool:
    if exact is None or got is None:
        return got is exact
    return abs(got - exact) <= SKETCH_REL_ERROR * abs(exact) * (1 + 1e-9)


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


def test_live_stats_memory_does_not_grow_with_requests_and_ends_exact() -> None:
    """Through the public API: past the first 5000 requests, what LiveStats keeps grows by
    a few bins at most (not per request); `finish(rows)` makes the table exact."""
    live = LiveStats("run", None)
    records = [_record(i) for i in range(20_000)]
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
    assert snap["completed"] == 20_000 and not snap["exact"]
    # exact float64 arrays would keep 56 bytes a request (840 kB for these 15,000); the
    # sketch's few new bins and their dicts' growth must stay under a tenth of that (seen:
    # 26-32 kB, a fixed amount rather than a per-request one: 32 kB was 2.14 bytes a
    # request here, where a bound of 2 bytes a request, set for 40,000, failed it)
    grew = after - before
    print(f"\n[live stats] grew {grew} bytes over 15,000 requests")
    assert grew < 56 * 15_000 / 10, grew
    assert live.bins() < 400 * len(LIVE_METRICS)
    assert snap["accuracy"].startswith("table and charts: nearest-rank percentiles within 1 %")
    rows = rows_of(records)
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


# --- the TTFT CDF and the flow's in-flight readings ---------------------------------------


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
    rows = rows_of(records)
    live.finish(rows)
    final = live.snapshot()
    assert final["ttft_cdf"]["value"] == by_hand
    assert [stats.nearest_rank(ttfts, p) for p in CDF_PERCENTILES] == by_hand
    table = next(m for m in final["metrics"] if m["field"] == "ttft_ms")
    # the CDF's p50 and p95 are the table's, bit for bit (and so benchmark.json's)
    assert (final["ttft_cdf"]["value"][50], final["ttft_cdf"]["value"][95]) == \
        (table["p50"], table["p95"]) == (250.0, 431.0)


def test_in_flight_is_read_from_the_budget_on_each_tick(monkeypatch) -> None:
    """The live page's in-flight series through the real pieces: a request budget, its
    tickets taken and given back, and LiveStats' sampler (on a short tick, for speed)."""
    monkeypatch.setattr(series_module, "FLOW_TICK_S", 0.1)
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


def _until(done: Callable[[], bool], limit_s: float = 30.0) -> None:
    """Yield to the hub until `done()` (a busy machine derives slower: wait for the event,
    not for a time), at most `limit_s`."""
    deadline = time.monotonic() + limit_s
    while not done():
        assert time.monotonic() < deadline, "not done in time"
        gevent.sleep(0.005)


def _waiting(live: LiveStats, n: int) -> None:
    for i in range(n):
        live.take(_record(i))


def test_pending_records_are_derived_when_the_loop_is_idle_without_a_due_request() -> None:
    live = LiveStats("r", None)
    live.start_flow(RequestBudget(None, 0, [512]).read_in_flight, lambda: None)
    _waiting(live, DRAIN_BATCH)
    assert live.completed == 0  # queued, not derived where the stream ended
    _until(lambda: not live._pending)
    assert live.completed == DRAIN_BATCH
    live.end_flow()


def test_the_derivation_keeps_clear_of_a_due_request() -> None:
    """The next request is always 0.1 ms from due (a fast open loop without room): nothing
    is derived until FORCE_PENDING records wait, then one slice at a time; with room,
    slices run until none waits."""
    live = LiveStats("r", None)
    due = {"in_ns": 100_000}
    live.start_flow(RequestBudget(None, 0, [512]).read_in_flight,
                    lambda: time.perf_counter_ns() + due["in_ns"])
    _waiting(live, DRAIN_BATCH)
    gevent.sleep(0.02)
    assert live.completed == 0 and len(live._pending) == DRAIN_BATCH
    _waiting(live, FORCE_PENDING - DRAIN_BATCH)
    _until(lambda: live.completed > 0)
    gevent.sleep(0.02)
    assert live.completed == DRAIN_SLICE  # one slice: then fewer than FORCE_PENDING wait
    assert len(live._pending) == FORCE_PENDING - DRAIN_SLICE
    due["in_ns"] = 10_000_000_000  # room: every slice runs
    _until(lambda: not live._pending)
    assert live.completed == FORCE_PENDING
    live.end_flow()
