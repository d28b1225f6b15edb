"""When a run ends itself: the server stopped answering, or every request is failing.

Locust keeps a failing user from stopping a run, which is right for a load test and wrong
for a benchmark: a server that died at 12 s would otherwise be "measured" for the rest of
the run, as thousands of instant failures. `FailureWatch` sees every finished record (it
is one of the recorder's sinks, on a single process or a distributed master, so it sees the
whole run's records, warm-ups included; cancelled ones are the run's own stop and do not
count) and calls `on_abort(reason)` once, the first time either rule of the run's
`AbortRule` holds:

- **stopped answering**: `after_failures × pace` requests in a row failed to reach the
  server — `connection` (refused, reset before an answer), `truncated` (the connection lost
  mid-stream) or `timeout` — with no answered request between them (a completion, or an
  HTTP error: the server is there). `pace` is the run's
  concurrency in a closed loop (every user failed about `after_failures` times in a row:
  with the users' back-off, see `users.py`, that takes ~6 s at the default 10 however many
  users there are) and 1 in an open loop (the schedule, not the users, sets how fast
  requests go out). An HTTP error is an answer and does not count here;
- **failing**: of the requests that ended in the last `window_s` — at least as many as the
  first rule's count, and at least `ABORT_MIN_WINDOW_REQUESTS` — a fraction of
  `failure_ratio` or more failed (any kind: a server answering every request with 404 or 500
  is caught here).

The reason names the server, when (seconds since the load began, on the watch's own clock:
when this process learned of the failure) and how: "the server at URL stopped answering at
12.4 s: connection refused (…)". O(1) a record, a deque of the window's end times.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from anvil_metrics.load.options import ABORT_MIN_WINDOW_REQUESTS, AbortRule
from anvil_metrics.records import RequestRecord

# failures that say the server was not reached or stopped answering mid-way
UNANSWERED = frozenset({"connection", "truncated", "timeout"})


class FailureWatch:
    """A `RecordSink` applying `rule` (module docstring); `pace`: requests in a row per unit
    of `after_failures` (the concurrency, closed loop; 1, open loop); `url`: the server, as
    the reason names it (no credentials); `began_ns()`: when the load began (None: not yet)."""

    def __init__(self, rule: AbortRule, pace: int, url: str,
                 on_abort: Callable[[str], None],
                 began_ns: Callable[[], int | None] = lambda: None,
                 clock_ns: Callable[[], int] = time.perf_counter_ns) -> None:
        self.rule = rule
        self.limit = rule.after_failures * max(1, pace)
        # the ratio needs as many requests as the streak rule (never sooner on as few: a
        # burst of 16 users' first requests all answered 429 is not yet a dead server)
        self.window_min = max(ABORT_MIN_WINDOW_REQUESTS, self.limit)
        self.url = url
        self._on_abort: Callable[[str], None] | None = on_abort
        self._began_ns = began_ns
        self._clock_ns = clock_ns
        self.streak = 0  # unanswered requests in a row
        self._streak_first: tuple[int, str] | None = None  # (when, what) its first failed
        self._last = ""  # what the streak's latest failure said
        self._last_any = ""  # what the latest failure of any kind said
        self._window: deque[tuple[int, bool]] = deque()  # (ended at, failed), oldest first
        self._window_failed = 0
        self.reason: str | None = None

    def take(self, record: RequestRecord) -> None:
        if self._on_abort is None:
            return
        failure = record.failure
        if failure is not None and failure.kind in ("cancelled", "aborted"):
            return  # the client's own: the run's end, or on purpose (`load/cancel.py`)
        now = self._clock_ns()
        if failure is not None and failure.kind in UNANSWERED:
            if self.streak == 0:
                self._streak_first = (now, failure.message or failure.kind)
            self.streak += 1
            self._last = failure.message or failure.kind
        else:  # answered: a completion, or an HTTP error (the server is there)
            self.streak, self._streak_first = 0, None
        if failure is not None:
            status = f" {failure.http_status}" if failure.http_status else ""
            self._last_any = f"{failure.kind}{status}: {failure.message or failure.kind}"
        self._slide(now, failure is not None)
        reason = self._stopped_answering() or self._failing()
        if reason is not None:
            self.reason = reason
            on_abort, self._on_abort = self._on_abort, None
            on_abort(reason)

    def _slide(self, now: int, failed: bool) -> None:
        self._window.append((now, failed))
        self._window_failed += failed
        start = now - int(self.rule.window_s * 1e9)
        while self._window and self._window[0][0] < start:
            self._window_failed -= self._window.popleft()[1]

    def _at_s(self, t_ns: int, word: str = "at") -> str:
        """" at 12.4 s" (seconds since the load began), or "" before it began."""
        began = self._began_ns()
        return "" if began is None else f" {word} {max(0.0, (t_ns - began) / 1e9):.1f} s"

    def _stopped_answering(self) -> str | None:
        if not self.limit or self.streak < self.limit or self._streak_first is None:
            return None
        t_ns, first = self._streak_first
        was = "" if first == self._last else f", the first: {first}"
        return (f"the server at {self.url} stopped answering{self._at_s(t_ns)}: {self._last} "
                f"({self.streak} requests in a row could not reach it{was}; "
                f"--abort-after-failures {self.rule.after_failures})")

    def _failing(self) -> str | None:
        n = len(self._window)
        if n < self.window_min or self._window_failed < self.rule.failure_ratio * n:
            return None
        first = self._window[0][0]
        return (f"the server at {self.url} failed {self._window_failed} of the {n} requests "
                f"that ended in {self.rule.window_s:g} s{self._at_s(first, 'from')}, the "
                f"latest: {self._last_any} (--abort-failure-ratio {self.rule.failure_ratio:g})")
