"""The live page's time series (`live/series.py`): the charts' per-bucket medians and the
flow's per-second counts, rates and in-flight means, against hand-worked inputs; both stay
bounded however long the run, by merging neighbouring buckets pairwise."""

from __future__ import annotations

import math
import random

import pytest

from anvil_metrics.live.series import MAX_BUCKETS, MAX_FLOW_POINTS, Flow, Series, pairwise
from anvil_metrics.live.sketch import SKETCH_GAMMA, SKETCH_REL_ERROR


def test_pairwise_merges_neighbours_in_key_order() -> None:
    got = pairwise({0: "a", 1: "b", 3: "d", 4: "e", 7: "h"}, str, lambda x, y: x + y)
    assert got == {0: "ab", 1: "d", 2: "e", 3: "h"}
    assert pairwise({5: 2, 4: 1}, int, lambda x, y: x * 10 + y) == {2: 12}


def test_series_memory_does_not_grow_with_requests() -> None:
    series = Series()
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


def test_flow_counts_what_finished_in_each_second_and_its_mean_in_flight() -> None:
    flow = Flow()
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
    flow = Flow()
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
    alone = Flow()  # a run shorter than half a tick: its one point is all there is
    alone.finished(0.2, completed=True, output_tokens=9)
    alone.end(0.3, 0.6, 0.3, 3)
    assert alone.as_json()["output_tok_s"] == [9 / 0.3]
    assert alone.as_json()["in_flight"] == [0.6 / 0.3]


def test_flow_stays_bounded_and_merges_pairwise() -> None:
    flow = Flow()
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


def test_a_flow_never_read_ends_without_a_reading() -> None:
    """No load was started (`LiveStats.end_flow` before any reading): the flow ends where it
    is told, its counts kept and no in-flight figure made up; a later end changes nothing."""
    flow = Flow()
    flow.finished(0.4, completed=True, output_tokens=5)
    flow.end_unread(0.5)
    got = flow.as_json()
    assert (got["t_s"], got["completed"], got["output_tokens"]) == ([0.5], [1], [5])
    assert (got["in_flight"], got["in_flight_max"]) == ([None], [None])
    flow.end(2.0, 1.0, 1.5, 2)
    assert flow.as_json() == got
