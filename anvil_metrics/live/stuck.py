"""Requests that have waited too long: for their first byte, or silent mid-stream.

Why: a server that sends its headers and then nothing, or stops mid-answer, leaves a run
silent for as long as its timeouts allow (`first_byte_s` is 1,800 s by default, right for a
393k-token prefill). The run should say so long before: how many requests, how long, in
which phase. `StuckReport` is what the live display, the log and the progress file read;
`StuckWatch` fills it.

Why a scan rather than a timer per request: the hot path only keeps a set of the requests
in flight (a user adds its observer before sending and removes it once recorded) and one
stamp per received block (`StreamObserver.last_bytes_ns`); once a second one greenlet walks
the set (a few hundred attribute reads), off the streams' way. The phases follow the
client's two silence timeouts (`wire/client.py`): before the first output (`first_byte_s`)
a request's wait counts from its start, headers or a role-only chunk notwithstanding; once
output has begun (`idle_s`) it counts from the last bytes received. A stuck request is only
said, never cancelled: the timeouts decide its end.

A distributed run's workers each watch their own requests and send their report to the
master when it changes (`cluster/wire.py`'s `anvil_stuck`); the master's watch merges the
latest of each into its own and is the one that logs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import gevent

from anvil_metrics.load.scenariofields import Timeouts

log = logging.getLogger("anvil")

STUCK_AFTER_S = Timeouts().stuck_after_s  # the default threshold (settable: --stuck-after)
SCAN_S = 1.0  # how often the requests in flight are looked at


@dataclass(frozen=True, slots=True)
class StuckReport:
    """The requests in flight that have waited at least `threshold_s`, read at one moment.

    - `waiting_first_byte_requests`: sent, and no output yet (no response head, or headers
      and perhaps a role-only chunk, then nothing), for `threshold_s` since the start;
    - `idle_mid_stream_requests`: the output began, and no byte arrived for `threshold_s`;
    - `oldest_s`: the longest of those waits (None when none is stuck);
    - `in_flight_requests`: every request in flight then (stuck or not);
    - `headers_received_requests`: of the requests waiting for their first byte, those whose
      response head had arrived (a server that sends its headers and then nothing);
    - `oldest_waiting_first_byte_s`, `oldest_idle_mid_stream_s`: the longest wait in each
      phase (None when none is stuck in it).
    """

    threshold_s: float
    in_flight_requests: int
    waiting_first_byte_requests: int
    idle_mid_stream_requests: int
    oldest_s: float | None
    headers_received_requests: int = 0
    oldest_waiting_first_byte_s: float | None = None
    oldest_idle_mid_stream_s: float | None = None

    @property
    def stuck_requests(self) -> int:
        return self.waiting_first_byte_requests + self.idle_mid_stream_requests

    @property
    def all_stuck(self) -> bool:
        """Every request in flight is stuck (and some are in flight)."""
        return self.in_flight_requests > 0 and self.stuck_requests >= self.in_flight_requests

    def text(self) -> str:
        """The report in words, e.g. "3 of 8 requests in flight are stuck: 2 waiting for
        their first byte (the longest 45 s, headers received for 1), 1 idle mid-stream for
        31 s" ("none of the N requests in flight is stuck" when none is)."""
        n, stuck = self.in_flight_requests, self.stuck_requests
        if stuck == 0:
            return f"none of the {n} request{_s(n)} in flight is stuck"
        head = (f"every request in flight is stuck ({n})" if self.all_stuck else
                f"{stuck} of {n} requests in flight {'is' if stuck == 1 else 'are'} stuck")
        parts = []
        wait, idle = self.waiting_first_byte_requests, self.idle_mid_stream_requests
        if wait:
            headers = self.headers_received_requests
            got = ("headers received" if wait == 1 else f"headers received for {headers}"
                   ) if headers else ""
            parts.append(f"{wait} waiting for {'its' if wait == 1 else 'their'} first byte "
                         + _longest(wait, self.oldest_waiting_first_byte_s, got))
        if idle:
            parts.append(f"{idle} idle mid-stream " + _longest(idle,
                                                               self.oldest_idle_mid_stream_s))
        return f"{head}: {', '.join(parts)}"


def _s(n: int) -> str:
    return "" if n == 1 else "s"


def _longest(n: int, seconds: float | None, more: str = "") -> str:
    """How long one request has waited ("for 45 s"), or the longest of several ("(the
    longest 45 s)"), with `more` said beside it."""
    took = f"{seconds or 0:.0f} s"
    if n == 1:
        return f"for {took}" + (f" ({more})" if more else "")
    return f"(the longest {took}" + (f", {more})" if more else ")")


class Stream(Protocol):
    """What the watch reads of a request in flight (a `wire.observe.StreamObserver`)."""

    start_ns: int
    first_output_ns: int | None
    last_bytes_ns: int
    http_status: int | None
    done: bool


def scan(streams: Iterable[Stream], threshold_s: float, now_ns: int) -> StuckReport:
    """The report of `streams` at `now_ns` (a `perf_counter_ns` stamp): a request not yet
    done is stuck once it has waited `threshold_s` in its phase (the module docstring)."""
    limit = threshold_s * 1e9
    n = waiting = headers = idle = 0
    oldest_wait = oldest_idle = 0
    for s in streams:
        if s.done:  # finished, its record on the way
            continue
        n += 1
        if s.first_output_ns is None:
            waited = now_ns - s.start_ns
            if waited >= limit:
                waiting += 1
                headers += s.http_status is not None
                oldest_wait = max(oldest_wait, waited)
        else:
            quiet = now_ns - s.last_bytes_ns
            if quiet >= limit:
                idle += 1
                oldest_idle = max(oldest_idle, quiet)
    wait_s = oldest_wait / 1e9 if waiting else None
    idle_s = oldest_idle / 1e9 if idle else None
    return StuckReport(threshold_s, n, waiting, idle, _most(wait_s, idle_s), headers,
                       wait_s, idle_s)


def _most(*seconds: float | None) -> float | None:
    known = [s for s in seconds if s is not None]
    return max(known) if known else None


def merged(threshold_s: float, reports: Iterable[StuckReport]) -> StuckReport:
    """One report of several processes' (a master's of its workers'): counts added, the
    longest waits the longest of theirs."""
    rs = list(reports)
    wait_s = _most(*(r.oldest_waiting_first_byte_s for r in rs))
    idle_s = _most(*(r.oldest_idle_mid_stream_s for r in rs))
    return StuckReport(threshold_s, sum(r.in_flight_requests for r in rs),
                       sum(r.waiting_first_byte_requests for r in rs),
                       sum(r.idle_mid_stream_requests for r in rs), _most(wait_s, idle_s),
                       sum(r.headers_received_requests for r in rs), wait_s, idle_s)


class StuckLog:
    """What the log says of successive reports: the moment requests are stuck, then again
    every further threshold while some stay stuck (at once when every request in flight
    has become stuck), and once when none is stuck any more. `see` returns the line to
    log, or None."""

    def __init__(self) -> None:
        self._next_ns: int | None = None  # when the next line is due; None: none stuck
        self._all = False

    def see(self, report: StuckReport, now_ns: int) -> str | None:
        if report.stuck_requests == 0:
            if self._next_ns is None:
                return None
            self._next_ns, self._all = None, False
            return f"no request is stuck any more ({report.in_flight_requests} in flight)"
        became_all = report.all_stuck and not self._all
        self._all = report.all_stuck
        if self._next_ns is not None and now_ns < self._next_ns and not became_all:
            return None
        self._next_ns = now_ns + int(report.threshold_s * 1e9)
        return report.text()


def _warn(line: str) -> None:
    log.warning("anvil: %s", line)


class StuckWatch:
    """One process's watch over its requests in flight (`streams`, the set its users add
    to and remove from), with its workers' latest reports on a distributed run's master
    (`take`). Once a second (`start`: one greenlet) it makes the report (`check`), keeps it
    (`latest`), says what `StuckLog` says through `say` (None: nothing, a worker's) and
    hands it to `on_report` (a worker's: to its master). `threshold_s` 0: off (no greenlet,
    no report)."""

    def __init__(self, threshold_s: float, streams: Collection[Stream], *,
                 say: Callable[[str], None] | None = _warn,
                 on_report: Callable[[StuckReport], None] | None = None,
                 clock: Callable[[], int] = time.perf_counter_ns) -> None:
        self.threshold_s = threshold_s
        self.streams = streams
        self._say = say
        self._on_report = on_report
        self._clock = clock
        self._log = StuckLog()
        self._workers: dict[str, StuckReport] = {}
        self.latest: StuckReport | None = None
        self._greenlet: Any = None

    @property
    def on(self) -> bool:
        return self.threshold_s > 0

    def take(self, worker: str, report: StuckReport) -> None:
        """A worker's latest report (a master's watch): merged into every report from now."""
        self._workers[worker] = report

    def report(self, now_ns: int | None = None) -> StuckReport:
        """The report now: this process's requests in flight, and its workers' latest."""
        now = self._clock() if now_ns is None else now_ns
        own = scan(self.streams, self.threshold_s, now)
        if not self._workers:
            return own
        return merged(self.threshold_s, (own, *self._workers.values()))

    def check(self, now_ns: int | None = None) -> StuckReport:
        """Make the report, keep it, log what is due and pass it on."""
        now = self._clock() if now_ns is None else now_ns
        report = self.latest = self.report(now)
        if self._say is not None:
            line = self._log.see(report, now)
            if line is not None:
                self._say(line)
        if self._on_report is not None:
            self._on_report(report)
        return report

    def start(self) -> None:
        if self.on and self._greenlet is None:
            self._greenlet = gevent.spawn(self._loop)

    def _loop(self) -> None:
        try:
            while True:
                gevent.sleep(SCAN_S)
                self.check()
        except Exception:  # a bug: said once, and the run goes on without the watch
            log.exception("anvil: the watch of stuck requests failed")

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None
