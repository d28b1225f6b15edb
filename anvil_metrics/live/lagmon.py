"""Event-loop lag of the gevent hub: how late a greenlet wakes up.

Why: every stream's timestamps are taken on the gevent hub. If anything holds the hub
(prompt building, JSON work, GC, the OS scheduler descheduling the process), every stream's
next timestamp is late by that much, and the client, not the server, has added latency. A
greenlet that asks to sleep 1 ms and records how late it wakes measures exactly that delay.
Its summary goes into the benchmark's `client.loop_lag_ms: {p50, p99, max}` (the spec's
generator-health block) and later into the client-saturation check.

Overshoot of one wake-up = (time woken) − (time slept + interval), clamped at 0. Even an idle
hub shows a floor (timer granularity, OS wake-up): p50 ≈ 0.15 ms, max a few ms.

Cost: `record` is ~0.3 µs; a whole wake-up (OS timer wake, one turn of the hub's loop,
two greenlet switches) cost ~70–80 µs of CPU on a 2-core VM, ~6–7% of one core at 1 ms.

Memory is bounded for runs of any length: a fixed histogram of 10 µs buckets from 0 to
100 ms (10,000 int64 counters), an overflow counter for wake-ups ≥ 100 ms late, and an exact
count, maximum and count of wake-ups later than 5 ms. Percentiles are nearest-rank (rank
`k = (p·n + 99) // 100`, as in `stats.nearest_rank`), reported as the upper edge of the bucket
holding rank k (resolution 0.01 ms, never under-reporting) but never above the exact maximum.
A rank that falls in the overflow is reported as the maximum (the overflow's only known
upper bound).
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gevent
import numpy as np

BUCKET_NS = 10_000  # 10 µs
BUCKETS = 10_000  # 0 .. 100 ms
OVER_NS = 5_000_000  # `over_5ms` counts wake-ups later than this
MAX_STALLS = 20  # the first this many wake-ups later than OVER_NS are kept, with their time


@dataclass(frozen=True, slots=True)
class LagSummary:
    """Loop-lag figures in milliseconds; the percentiles and max are None with no samples."""

    samples: int
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    over_5ms: int  # wake-ups later than 5 ms
    max_at_ns: int | None = None  # clock time of the latest wake-up (None: fed by `record`)

    def as_json(self) -> dict[str, Any]:
        """The `client.loop_lag_ms` block: {p50, p99, max, samples, over_5ms}."""
        return {
            "p50": self.p50_ms,
            "p99": self.p99_ms,
            "max": self.max_ms,
            "samples": self.samples,
            "over_5ms": self.over_5ms,
        }


class LoopLagMonitor:
    """A greenlet that sleeps `interval_s` again and again and records how late it wakes.

    `clock` returns integer nanoseconds (monotonic). All state lives on the hub's thread, so
    `summary()` may be called from any greenlet while the monitor runs.
    """

    def __init__(
        self, interval_s: float = 0.001, clock: Callable[[], int] = time.perf_counter_ns
    ) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s must be positive, got {interval_s!r}")
        self.interval_s = interval_s
        self._interval_ns = round(interval_s * 1e9)
        self._clock = clock
        self._hist = array("q", bytes(8 * BUCKETS))
        self._overflow = 0
        self._count = 0
        self._max_ns = 0
        self._over = 0
        self._max_at_ns: int | None = None
        self.stalls: list[tuple[int, int]] = []  # (woke at ns, late by ns), first MAX_STALLS
        self._greenlet: gevent.Greenlet | None = None

    def start(self) -> None:
        """Spawn the sampling greenlet; does nothing if it is already running. After `stop`,
        starting again keeps adding to the same figures."""
        if self._greenlet is None:
            self._greenlet = gevent.spawn(self._run)

    def stop(self) -> LagSummary:
        """Kill the sampling greenlet (if running) and return the summary."""
        g, self._greenlet = self._greenlet, None
        if g is not None:
            g.kill(block=True)
        return self.summary()

    def record(self, overshoot_ns: int) -> None:
        """Add one wake-up that was `overshoot_ns` late (negative counts as 0).

        The per-sample path: one integer division, one histogram increment, three compares.
        """
        if overshoot_ns < 0:
            overshoot_ns = 0
        i = overshoot_ns // BUCKET_NS
        if i < BUCKETS:
            self._hist[i] += 1
        else:
            self._overflow += 1
        self._count += 1
        if overshoot_ns > self._max_ns:
            self._max_ns = overshoot_ns
        if overshoot_ns > OVER_NS:
            self._over += 1

    def summary(self) -> LagSummary:
        """Current figures (exact samples, max and over_5ms; histogram percentiles)."""
        n = self._count
        if n == 0:
            return LagSummary(samples=0, p50_ms=None, p99_ms=None, max_ms=None, over_5ms=0)
        cum = np.cumsum(np.frombuffer(self._hist, dtype=np.int64))
        return LagSummary(
            samples=n,
            p50_ms=self._percentile_ms(cum, n, 50),
            p99_ms=self._percentile_ms(cum, n, 99),
            max_ms=self._max_ns / 1e6,
            over_5ms=self._over,
            max_at_ns=self._max_at_ns,
        )

    def _percentile_ms(self, cum: np.ndarray, n: int, p: int) -> float:
        k = max(1, (p * n + 99) // 100)
        if k > int(cum[-1]):  # rank in the overflow: the max is its only upper bound
            return self._max_ns / 1e6
        i = int(np.searchsorted(cum, k, side="left"))  # first bucket with cum >= k
        if (i + 1) * BUCKET_NS >= self._max_ns:
            return self._max_ns / 1e6
        return (i + 1) / 100  # upper edge in ms, correctly rounded

    def _run(self) -> None:
        clock = self._clock
        interval_s = self.interval_s
        interval_ns = self._interval_ns
        record = self.record
        sleep = gevent.sleep
        while True:
            slept = clock()
            # ref=False: the monitor alone never keeps the hub's loop alive.
            sleep(interval_s, ref=False)
            woke = clock()
            late = woke - slept - interval_ns
            if late > self._max_ns:
                self._max_at_ns = woke
            if late > OVER_NS and len(self.stalls) < MAX_STALLS:
                self.stalls.append((woke, late))
            record(late)
