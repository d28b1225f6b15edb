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

Over several replicas (`--host URL,URL`, the record's `extra.replica`) both rules count per
replica, each over its own requests only, as behind a load balancer: one replica's answers
never reset another's streak, and one replica's failures never end the run alone. A replica
for which a rule holds is counted dead, once and for the rest of the run (`on_dead`, a list
of listeners: the balancer then skips it under least-in-flight, and on a distributed master
every worker is told so its balancer skips it too; `stopped_at_s` keeps when, for the
`replicas` block); the run goes on while any replica answers and aborts when every one is dead, the
reason naming each URL and when it stopped.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence

from anvil_metrics.load.options import ABORT_MIN_WINDOW_REQUESTS, AbortRule
from anvil_metrics.records import Failure, RequestRecord

# failures that say the server was not reached or stopped answering mid-way
UNANSWERED = frozenset({"connection", "truncated", "timeout"})


class _Stream:
    """One server's (or replica's) records under the rule: its unanswered streak and its
    window of recent ends (module docstring)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.streak = 0  # unanswered requests in a row
        self.streak_first: tuple[int, str] | None = None  # (when, what) its first failed
        self.last = ""  # what the streak's latest failure said
        self.last_any = ""  # what the latest failure of any kind said
        self.window: deque[tuple[int, bool]] = deque()  # (ended at, failed), oldest first
        self.window_failed = 0

    def take(self, now: int, failure: Failure | None, window_s: float) -> None:
        if failure is not None and failure.kind in UNANSWERED:
            if self.streak == 0:
                self.streak_first = (now, failure.message or failure.kind)
            self.streak += 1
            self.last = failure.message or failure.kind
        else:  # answered: a completion, or an HTTP error (the server is there)
            self.streak, self.streak_first = 0, None
        if failure is not None:
            status = f" {failure.http_status}" if failure.http_status else ""
            self.last_any = f"{failure.kind}{status}: {failure.message or failure.kind}"
        self.window.append((now, failure is not None))
        self.window_failed += failure is not None
        start = now - int(window_s * 1e9)
        while self.window and self.window[0][0] < start:
            self.window_failed -= self.window.popleft()[1]


class FailureWatch:
    """A `RecordSink` applying `rule` (module docstring); `pace`: requests in a row per unit
    of `after_failures` (the concurrency, closed loop; 1, open loop); `url`: the server, as
    the reason names it (no credentials), or each replica's in order; `began_ns()`: when the
    load began (None: not yet); `on_dead(replica)`: a replica was counted dead (more
    listeners may be appended to `self.on_dead`)."""

    def __init__(self, rule: AbortRule, pace: int, url: str | Sequence[str],
                 on_abort: Callable[[str], None],
                 began_ns: Callable[[], int | None] = lambda: None,
                 clock_ns: Callable[[], int] = time.perf_counter_ns,
                 on_dead: Callable[[int], None] = lambda _replica: None) -> None:
        self.rule = rule
        self.limit = rule.after_failures * max(1, pace)
        # the ratio needs as many requests as the streak rule (never sooner on as few: a
        # burst of 16 users' first requests all answered 429 is not yet a dead server)
        self.window_min = max(ABORT_MIN_WINDOW_REQUESTS, self.limit)
        self.streams = [_Stream(u) for u in ((url,) if isinstance(url, str) else url)]
        # when each replica was counted dead (s since the load began), None: never
        self.stopped_at_s: list[float | None] = [None] * len(self.streams)
        self.reasons: list[str | None] = [None] * len(self.streams)
        self._on_abort: Callable[[str], None] | None = on_abort
        self.on_dead: list[Callable[[int], None]] = [on_dead]
        self._began_ns = began_ns
        self._clock_ns = clock_ns
        self.reason: str | None = None

    @property
    def streak(self) -> int:
        """The longest unanswered streak of any replica now."""
        return max(s.streak for s in self.streams)

    def replicas_end(self) -> dict[str, list[float | None]]:
        """The raw `run_end`'s `replicas_stopped_at_s` over several replicas, else {}."""
        return {"replicas_stopped_at_s": self.stopped_at_s} if len(self.streams) > 1 else {}

    def take(self, record: RequestRecord) -> None:
        if self._on_abort is None:
            return
        failure = record.failure
        if failure is not None and failure.kind in ("cancelled", "aborted"):
            return  # the client's own: the run's end, or on purpose (`load/cancel.py`)
        i = (record.extra or {}).get("replica") or 0
        if i >= len(self.streams) or self.reasons[i] is not None:
            return  # a replica counted dead stays dead
        now = self._clock_ns()
        stream = self.streams[i]
        stream.take(now, failure, self.rule.window_s)
        dead = self._stopped_answering(stream) or self._failing(stream)
        if dead is None:
            return
        (at_ns, self.reasons[i]) = dead
        began = self._began_ns()
        self.stopped_at_s[i] = 0.0 if began is None else max(0.0, (at_ns - began) / 1e9)
        for tell in self.on_dead:
            tell(i)
        if any(r is None for r in self.reasons):
            return
        self.reason = (self.reasons[0] if len(self.reasons) == 1 else
                       "every replica stopped answering: " + "; ".join(map(str, self.reasons)))
        on_abort, self._on_abort = self._on_abort, None
        on_abort(self.reason)

    def _at_s(self, t_ns: int, word: str = "at") -> str:
        """" at 12.4 s" (seconds since the load began), or "" before it began."""
        began = self._began_ns()
        return "" if began is None else f" {word} {max(0.0, (t_ns - began) / 1e9):.1f} s"

    def _stopped_answering(self, s: _Stream) -> tuple[int, str] | None:
        if not self.limit or s.streak < self.limit or s.streak_first is None:
            return None
        t_ns, first = s.streak_first
        was = "" if first == s.last else f", the first: {first}"
        return t_ns, (f"the server at {s.url} stopped answering{self._at_s(t_ns)}: {s.last} "
                      f"({s.streak} requests in a row could not reach it{was}; "
                      f"--abort-after-failures {self.rule.after_failures})")

    def _failing(self, s: _Stream) -> tuple[int, str] | None:
        n = len(s.window)
        if n < self.window_min or s.window_failed < self.rule.failure_ratio * n:
            return None
        first = s.window[0][0]
        return first, (f"the server at {s.url} failed {s.window_failed} of the {n} requests "
                       f"that ended in {self.rule.window_s:g} s{self._at_s(first, 'from')}, "
                       f"the latest: {s.last_any} (--abort-failure-ratio "
                       f"{self.rule.failure_ratio:g})")
