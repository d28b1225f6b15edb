"""Loop-lag monitor: exact figures from known overshoots, and a real blocked hub."""

from __future__ import annotations

import itertools
import random

import gevent
import gevent.monkey
import pytest

from anvil_metrics.live.lagmon import LagSummary, LoopLagMonitor

MS = 1_000_000  # ns

# The real, blocking time.sleep even if something has monkey-patched `time`.
blocking_sleep = gevent.monkey.get_original("time", "sleep")


def fed(values_ns) -> LoopLagMonitor:
    mon = LoopLagMonitor()
    for v in values_ns:
        mon.record(v)
    return mon


def test_empty_summary():
    s = LoopLagMonitor().summary()
    assert s == LagSummary(samples=0, p50_ms=None, p99_ms=None, max_ms=None, over_5ms=0)
    assert s.as_json() == {"p50": None, "p99": None, "max": None, "samples": 0, "over_5ms": 0}


def test_hundred_samples_exact():
    values = [k * MS for k in range(1, 101)]  # 1 .. 100 ms; 100 ms is in the overflow
    random.Random(7).shuffle(values)
    s = fed(values).summary()
    assert s.samples == 100
    assert s.p50_ms == 50.01  # rank 50 = 50 ms, upper edge of its 10 µs bucket
    assert s.p99_ms == 99.01  # rank 99 = 99 ms
    assert s.max_ms == 100.0  # exact, though 100 ms is past the histogram
    assert s.over_5ms == 95   # 6 .. 100 ms
    assert s.as_json() == {"p50": 50.01, "p99": 99.01, "max": 100.0, "samples": 100,
                           "over_5ms": 95}


def test_overflow_values():
    s = fed([250 * MS, 150 * MS, 1_000 * MS + 123]).summary()
    assert s.samples == 3
    assert s.max_ms == 1000.000123  # max stays exact
    # Ranks in the overflow report the max: the only upper bound known for them.
    assert s.p50_ms == s.p99_ms == 1000.000123
    assert s.over_5ms == 3

    s = fed([2 * MS] * 99 + [300 * MS]).summary()
    assert (s.samples, s.p50_ms, s.p99_ms, s.max_ms) == (100, 2.01, 2.01, 300.0)
    s = fed([2 * MS] * 98 + [300 * MS] * 2).summary()
    assert (s.p50_ms, s.p99_ms, s.max_ms) == (2.01, 300.0, 300.0)


def test_upper_edge_resolution():
    # 12_345 ns lies in bucket [10, 20) µs: reported as its upper edge, 0.02 ms.
    s = fed([12_345, 12_345, 50_000]).summary()
    assert (s.p50_ms, s.p99_ms, s.max_ms) == (0.02, 0.05, 0.05)
    # Bucket boundaries: 9_999 ns is in the first bucket, 10_000 ns in the second.
    assert fed([9_999, 1 * MS]).summary().p50_ms == 0.01
    assert fed([10_000, 1 * MS]).summary().p50_ms == 0.02
    # Never above the exact max.
    s = fed([12_345]).summary()
    assert (s.p50_ms, s.p99_ms, s.max_ms) == (0.012345, 0.012345, 0.012345)
    assert fed([1]).summary().p50_ms == 1e-6
    assert fed([0, 0]).summary().p99_ms == 0.0
    # Never under-reports: each percentile is >= the true nearest-rank value.
    rng = random.Random(3)
    values = [rng.randrange(0, 120 * MS) for _ in range(1000)]
    s = fed(values).summary()
    ordered = sorted(values)
    for p, got in ((50, s.p50_ms), (99, s.p99_ms)):
        true_ms = ordered[(p * len(values) + 99) // 100 - 1] / 1e6
        assert true_ms <= got
        assert got <= s.max_ms
        if true_ms < 100:
            assert got - true_ms <= 0.01 + 1e-9


def test_over_5ms_is_strict_and_negative_clamps():
    s = fed([5 * MS, 5 * MS + 1, 7 * MS, -3 * MS]).summary()
    assert s.over_5ms == 2
    assert s.samples == 4
    assert s.p50_ms == 5.01  # rank 2 of (0, 5, 5.000001, 7) ms: its bucket's upper edge
    assert s.max_ms == 7.0


def test_negative_overshoot_counts_as_zero():
    s = fed([-5, -1_000_000]).summary()
    assert (s.samples, s.p50_ms, s.max_ms, s.over_5ms) == (2, 0.0, 0.0, 0)


def test_rejects_bad_interval():
    for bad in (0, -0.001, float("nan")):
        with pytest.raises(ValueError):
            LoopLagMonitor(interval_s=bad)


def test_loop_uses_clock_and_interval():
    # Fake clock: each wake-up is 3 ms after its sleep began; interval 1 ms -> 2 ms late.
    ticks = itertools.count()

    def clock() -> int:
        n = next(ticks)
        return n // 2 * 10 * MS + n % 2 * 3 * MS

    mon = LoopLagMonitor(interval_s=0.001, clock=clock)
    mon.start()
    gevent.sleep(0.02)
    s = mon.stop()
    assert s.samples >= 1
    assert (s.p50_ms, s.p99_ms, s.max_ms, s.over_5ms) == (2.0, 2.0, 2.0, 0)


def test_start_stop_idempotent_and_greenlet_runs():
    mon = LoopLagMonitor()
    assert mon.stop() == mon.summary()  # stop before start: empty, no error
    mon.start()
    g = mon._greenlet
    mon.start()
    assert mon._greenlet is g  # no second greenlet
    waited = 0
    while mon.summary().samples <= 10 and waited < 500:  # ~1 ms a sample; a busy machine's
        gevent.sleep(0.01)  # stalls take longer, so wait for the samples, not a time
        waited += 1
    assert mon.summary().samples > 10  # callable while running
    first = mon.stop()
    assert g.dead
    assert first.samples > 10
    gevent.sleep(0.01)
    assert mon.stop() == first == mon.summary()  # stopped: nothing more is recorded


def test_blocked_hub_is_measured():
    mon = LoopLagMonitor()
    mon.start()
    gevent.sleep(0.01)
    gevent.spawn(blocking_sleep, 0.02).join()  # holds the hub for 20 ms
    gevent.sleep(0.01)
    s = mon.stop()
    assert s.max_ms >= 15
    assert s.over_5ms >= 1
