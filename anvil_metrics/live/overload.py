"""When a run ends itself because its server is over capacity (`--stop-overloaded WINDOW`,
opt-in).

Why: in an open loop, a server offered more than it can serve queues the excess, and the
queue, and with it every TTFT, grows for as long as the run lasts. The figures of such a run
measure how long it lasted, not the server; minutes of GPU time are spent to learn what the
first seconds showed. GuideLLM and MLCommons' harness stop such runs; anvil does when asked,
and says why.

`OverloadWatch` is one of the recorder's sinks (a single process, or a distributed master:
every record of the run reaches it). It keeps the TTFT (time to first output; content where
the stream has none) and end time of the requests that completed in the last `window_s`.
At most every half window it checks them:

- the TTFT rose: from the window's earlier half of requests (by end time) to its later
  half, the median TTFT grew by at least `MIN_SLOPE` of the time between the halves' median
  end times (0.05: 50 ms more every second, what a queue gains when the server is offered
  5 % more than it serves: its wait grows by the excess), and a Mann-Whitney U test of the
  two halves gives p < `P_LIMIT` (`post.significance`), with at least `MIN_REQUESTS`
  requests in the window. (A ratio of TTFTs would not do: a queue growing at a steady pace
  doubles its wait early in a run, and later only adds a few per cent per window); and
- the queue rose: the requests in flight (tickets out of the budget, not yet recorded) are
  more than at the previous check.

The run ends when both hold at two checks in a row (a rise that lasted at least half a
window beyond one check): as an abort would, no new request, marked `aborted` with the
reason (exit code 3). A closed loop cannot queue beyond its users, so its TTFTs level off;
the rule holds there too, only more rarely.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

import numpy as np

from anvil_metrics.post.significance import mann_whitney
from anvil_metrics.records import RequestRecord

MIN_SLOPE = 0.05  # ms of TTFT gained per ms of run time
P_LIMIT = 0.001
MIN_REQUESTS = 20


class OverloadWatch:
    """A `RecordSink` applying the rule of the module docstring over `window_s`;
    `in_flight()`: requests out now; `url`: the server as the reason names it;
    `began_ns()`: when the load began (None: not yet)."""

    def __init__(self, window_s: float, url: str, in_flight: Callable[[], int],
                 on_overload: Callable[[str], None],
                 began_ns: Callable[[], int | None] = lambda: None,
                 clock_ns: Callable[[], int] = time.perf_counter_ns) -> None:
        self.window_ns = int(window_s * 1e9)
        self.window_s = window_s
        self.url = url
        self._in_flight = in_flight
        self._on_overload: Callable[[str], None] | None = on_overload
        self._began_ns = began_ns
        self._clock_ns = clock_ns
        self._window: deque[tuple[int, float]] = deque()  # (ended at, TTFT ms), oldest first
        self._next_check_ns: int | None = None
        self._rising = 0  # checks in a row at which both rose
        self._last_in_flight: int | None = None
        self.reason: str | None = None

    def take(self, record: RequestRecord) -> None:
        if self._on_overload is None or not record.ok or record.end_ns is None:
            return
        first = record.first_output_ns or record.first_content_ns
        if first is None:
            return
        now = self._clock_ns()
        self._window.append((now, (first - record.start_ns) / 1e6))
        while self._window[0][0] < now - self.window_ns:
            self._window.popleft()
        if self._next_check_ns is None:
            self._next_check_ns = now + self.window_ns  # a whole window before the first
        if now < self._next_check_ns:
            return
        self._next_check_ns = now + self.window_ns // 2
        self._check(now)

    def _check(self, now: int) -> None:
        ends = np.array([e for e, _ in self._window], dtype=np.float64) / 1e6  # ms
        ttft = np.array([t for _, t in self._window])
        in_flight = self._in_flight()
        grew = self._last_in_flight is not None and in_flight > self._last_in_flight
        before = self._last_in_flight
        self._last_in_flight = in_flight
        half = len(ttft) // 2
        rose = None
        if len(ttft) >= MIN_REQUESTS:
            early, late = np.median(ttft[:half]), np.median(ttft[half:])
            apart_ms = np.median(ends[half:]) - np.median(ends[:half])
            test = mann_whitney(ttft[half:], ttft[:half])
            if (apart_ms > 0 and late - early >= MIN_SLOPE * apart_ms and test is not None
                    and test.p_two_sided < P_LIMIT):
                rose = (float(early), float(late), test.p_two_sided,
                        float((late - early) / apart_ms * 1000))
        self._rising = self._rising + 1 if rose is not None and grew else 0
        if self._rising < 2 or rose is None:
            return
        began = self._began_ns()
        at = "" if began is None else f" at {(now - began) / 1e9:.1f} s"
        self.reason = (
            f"the server at {self.url} is over capacity{at}: the median TTFT of the requests "
            f"that ended in the last {self.window_s:g} s rose from {rose[0]:.1f} to "
            f"{rose[1]:.1f} ms ({rose[3]:.0f} ms a second, Mann-Whitney p {rose[2]:.1e}), two "
            f"checks in a row, while the requests in flight grew from {before} to {in_flight} "
            f"(--stop-overloaded {self.window_s:g}s)")
        on_overload, self._on_overload = self._on_overload, None
        on_overload(self.reason)
