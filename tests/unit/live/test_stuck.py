"""stuck: the report of the requests in flight (phases, counts, longest waits), its words,
what the log says of successive reports (at the threshold, every further threshold, at
once when every request is stuck, once on recovery), and the workers' reports merged.

Why: a run against a server that stopped answering must say so long before its timeouts
end the requests, with the right count and phase, and must not flood the log while it stays
stuck. Every test drives the watch with a fake clock and stand-in streams (the attributes
of a `StreamObserver` the scan reads), so no test waits.
"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from anvil_metrics.live.stuck import (
    STUCK_AFTER_S,
    StuckLog,
    StuckReport,
    StuckWatch,
    merged,
    scan,
)
from anvil_metrics.wire.observe import StreamObserver

S = 1_000_000_000


class FakeStream(SimpleNamespace):
    __hash__ = object.__hash__  # kept in a set, as the users' observers are


def stream(start_s: float, *, output_s: float | None = None, bytes_s: float | None = None,
           headers: bool = False, done: bool = False) -> FakeStream:
    """A request in flight since `start_s`: its first output at `output_s` (None: none yet),
    its last bytes at `bytes_s` (None: its start), its head received or not."""
    return FakeStream(start_ns=int(start_s * S),
                      first_output_ns=None if output_s is None else int(output_s * S),
                      last_bytes_ns=int((start_s if bytes_s is None else bytes_s) * S),
                      http_status=200 if headers else None, done=done)


def test_the_default_threshold_is_30_s() -> None:
    assert STUCK_AFTER_S == 30.0


def test_a_scan_counts_each_phase_from_its_own_stamp() -> None:
    now = 100.0
    streams = [
        stream(55, headers=True),  # headers, then nothing for 45 s: waiting for its first byte
        stream(69),  # no head for 31 s
        stream(95, headers=True),  # 5 s: not stuck
        stream(10, output_s=20, bytes_s=69),  # output began, silent for 31 s
        stream(10, output_s=20, bytes_s=99),  # streaming (a long request, not a silent one)
        stream(0, done=True),  # finished, its record on the way: not in flight
    ]
    r = scan(streams, 30.0, int(now * S))
    assert (r.in_flight_requests, r.waiting_first_byte_requests, r.headers_received_requests,
            r.idle_mid_stream_requests, r.stuck_requests) == (5, 2, 1, 1, 3)
    assert (r.oldest_waiting_first_byte_s, r.oldest_idle_mid_stream_s, r.oldest_s) == (
        45.0, 31.0, 45.0)
    assert not r.all_stuck
    assert r.text() == ("3 of 5 requests in flight are stuck: 2 waiting for their first byte "
                        "(the longest 45 s, headers received for 1), 1 idle mid-stream for "
                        "31 s")


def test_a_wait_for_the_first_output_counts_from_the_start_despite_early_bytes() -> None:
    """A role-only chunk (bytes, no output) does not restart the wait for the first byte of
    the answer; once output has begun, the silence counts from the last bytes."""
    early = stream(0, bytes_s=25, headers=True)  # head and role chunk at 25 s, then nothing
    r = scan([early], 30.0, 31 * S)
    assert (r.waiting_first_byte_requests, r.oldest_s) == (1, 31.0)
    assert r.text() == ("every request in flight is stuck (1): 1 waiting for its first byte "
                        "for 31 s (headers received)")


def test_the_threshold_is_inclusive_and_below_it_nothing_is_stuck() -> None:
    at, below = stream(0), stream(0.5)
    r = scan([at, below], 30.0, 30 * S)
    assert (r.stuck_requests, r.in_flight_requests, r.oldest_s) == (1, 2, 30.0)
    none = scan([below], 30.0, 30 * S)
    assert (none.stuck_requests, none.oldest_s, none.oldest_idle_mid_stream_s) == (0, None, None)
    assert none.text() == "none of the 1 request in flight is stuck"


def test_the_scan_reads_real_observers() -> None:
    """The attributes the scan reads are a `StreamObserver`'s: one waiting, one streaming
    then silent."""
    waiting = StreamObserver(0, 0)
    waiting.begin(1 * S)
    waiting.on_head(200)
    silent = StreamObserver(1, 0)
    silent.begin(1 * S)
    silent.on_data('{"choices": [{"delta": {"content": "a"}}]}', 2 * S)
    silent.last_bytes_ns = 2 * S  # as `client.read_events` stamps each received block
    r = scan({waiting, silent}, 30.0, 40 * S)
    assert (r.waiting_first_byte_requests, r.headers_received_requests,
            r.idle_mid_stream_requests) == (1, 1, 1)
    assert (r.oldest_waiting_first_byte_s, r.oldest_idle_mid_stream_s) == (39.0, 38.0)
    assert r.all_stuck and r.text().startswith("every request in flight is stuck (2): ")


class Clock:
    def __init__(self) -> None:
        self.now_ns = 0

    def __call__(self) -> int:
        return self.now_ns


def run_watch(watch: StuckWatch, clock: Clock, until_s: int,
              each_second: object = None) -> list[tuple[int, str]]:
    """Check `watch` once a second up to `until_s` (as its greenlet does), calling
    `each_second(t)` first; the (second, line) of each line it said."""
    said: list[tuple[int, str]] = []
    watch._say = lambda line: said.append((clock.now_ns // S, line))
    for t in range(1, until_s + 1):
        clock.now_ns = t * S
        if callable(each_second):
            each_second(t)
        watch.check()
    return said


def test_the_log_says_it_at_the_threshold_then_every_further_threshold_then_recovery() -> None:
    clock = Clock()
    stuck, busy = stream(0, headers=True), stream(0, output_s=1)
    streams = {stuck, busy}
    watch = StuckWatch(30.0, streams, clock=clock)

    def tick(t: int) -> None:
        busy.last_bytes_ns = t * S  # bytes every second: never idle
        if t == 100:  # the stuck one's first output, and bytes since
            stuck.first_output_ns = stuck.last_bytes_ns = t * S

    said = run_watch(watch, clock, 110, tick)
    assert [t for t, _ in said] == [30, 60, 90, 100]
    assert said[0][1] == ("1 of 2 requests in flight is stuck: 1 waiting for its first byte "
                          "for 30 s (headers received)")
    assert "for 90 s" in said[2][1]
    assert said[3][1] == "no request is stuck any more (2 in flight)"
    assert watch.latest is not None and watch.latest.stuck_requests == 0


def test_every_request_stuck_is_said_at_once() -> None:
    """Two requests: one stuck from 30 s; the other goes silent mid-stream at 40 s, so from
    70 s every request in flight is stuck, said then rather than at the next threshold."""
    clock = Clock()
    a, b = stream(0), stream(0, output_s=1)
    watch = StuckWatch(30.0, [a, b], clock=clock)

    def tick(t: int) -> None:
        if t <= 40:
            b.last_bytes_ns = t * S

    said = run_watch(watch, clock, 100, tick)
    assert [t for t, _ in said] == [30, 60, 70, 100]
    assert said[2][1] == ("every request in flight is stuck (2): 1 waiting for its first byte "
                          "for 70 s, 1 idle mid-stream for 30 s")
    assert said[3][1].startswith("every request in flight is stuck (2)")


def test_a_request_that_ends_takes_its_stuck_wait_with_it() -> None:
    """Removed from the set (recorded) or done, a request is no longer in flight: the next
    check says none is stuck."""
    clock = Clock()
    a = stream(0)
    streams = {a}
    watch = StuckWatch(5.0, streams, clock=clock)
    said = run_watch(watch, clock, 6, lambda t: streams.discard(a) if t == 6 else None)
    assert said == [(5, "every request in flight is stuck (1): 1 waiting for its first byte "
                        "for 5 s"),
                    (6, "no request is stuck any more (0 in flight)")]


def test_a_watch_at_0_is_off() -> None:
    watch = StuckWatch(0.0, set())
    assert not watch.on
    watch.start()
    assert watch._greenlet is None


def report(in_flight: int, waiting: int, idle: int, *, headers: int = 0,
           wait_s: float | None = None, idle_s: float | None = None) -> StuckReport:
    known = [s for s in (wait_s, idle_s) if s is not None]
    return StuckReport(30.0, in_flight, waiting, idle, max(known) if known else None,
                       headers, wait_s, idle_s)


def test_workers_reports_merge_into_the_masters() -> None:
    one = report(4, 2, 0, headers=1, wait_s=45.0)
    two = report(3, 1, 1, wait_s=31.0, idle_s=50.0)
    idle = report(2, 0, 0)
    m = merged(30.0, [one, two, idle])
    assert m == report(9, 3, 1, headers=1, wait_s=45.0, idle_s=50.0)
    assert m.oldest_s == 50.0 and m.stuck_requests == 4 and not m.all_stuck
    clock = Clock()
    master = StuckWatch(30.0, set(), clock=clock)  # a master: no users of its own
    master.take("w1", one)
    master.take("w2", report(3, 3, 0, wait_s=40.0))
    assert master.report().all_stuck is False  # 5 of 7
    master.take("w1", report(2, 2, 0, wait_s=46.0))  # a worker's newer report replaces its old
    r = master.check()
    assert (r.in_flight_requests, r.stuck_requests, r.all_stuck) == (5, 5, True)
    assert r.oldest_waiting_first_byte_s == 46.0


def test_a_worker_passes_each_report_on_and_says_nothing() -> None:
    clock = Clock()
    sent: list[StuckReport] = []
    watch = StuckWatch(30.0, [stream(0)], say=None, on_report=sent.append, clock=clock)
    clock.now_ns = 31 * S
    watch.check()
    assert [r.stuck_requests for r in sent] == [1]


@pytest.mark.parametrize("stuck_after", [1.0, 30.0])
def test_the_log_repeats_every_threshold_whatever_it_is(stuck_after: float) -> None:
    log = StuckLog()
    r = replace(report(1, 1, 0, wait_s=stuck_after), threshold_s=stuck_after)
    step = int(stuck_after * S)
    assert log.see(r, 0) is not None
    assert log.see(r, step - 1) is None
    assert log.see(r, step) is not None
    assert log.see(r, 2 * step - 1) is None
