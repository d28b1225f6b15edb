"""`DueTimer`: never before the due time, on the timerfd and on the spin that stands in for
it where there is none; how late it wakes is printed (the machine decides that), with only
a loose sanity bound."""

from __future__ import annotations

import socket
import time

import gevent
import gevent.socket
import numpy as np

from anvil_metrics.live.duetimer import DueTimer


def late_ms(timer: DueTimer, n: int = 40) -> np.ndarray:
    out = []
    for i in range(n):
        due = time.perf_counter_ns() + 200_000 + 37_000 * i
        timer.wait_until(due)
        now = time.perf_counter_ns()
        assert now >= due
        out.append((now - due) / 1e6)
    return np.array(out)


def test_the_timerfd_wakes_at_the_due_time_never_before() -> None:
    timer = DueTimer()
    assert timer.precise
    late = late_ms(timer)
    print(f"\n[timerfd] late p50 {np.median(late):.3f} ms, max {late.max():.3f} ms")
    assert np.median(late) < 50  # sanity only: a stalled machine, not a precision claim
    timer.close()
    timer.close()  # twice is harmless


def test_without_a_timerfd_the_spin_is_never_early_either() -> None:
    timer = DueTimer()
    timer.close()  # as on a system without timerfd: the spin
    assert not timer.precise
    late = late_ms(timer, 10)
    print(f"\n[spin] late p50 {np.median(late):.3f} ms")


def test_a_due_request_runs_before_the_streams_ready_with_it() -> None:
    """The timerfd fires in the same loop iteration as 40 readable sockets (the event loop
    is held past the due time while they are written to): the waiter runs first."""
    timer = DueTimer()
    pairs = [socket.socketpair() for _ in range(40)]
    order: list[str] = []

    def reader(i: int, sock: socket.socket) -> None:
        gevent.socket.wait_read(sock.fileno())
        order.append(f"stream {i}")

    due = time.perf_counter_ns() + 20_000_000
    readers = [gevent.spawn(reader, i, b) for i, (_, b) in enumerate(pairs)]
    waiter = gevent.spawn(lambda: (timer.wait_until(due), order.append("due")))
    gevent.sleep(0.005)  # everyone is waiting on the loop now
    while time.perf_counter_ns() < due:  # hold the loop: no switch until both are ready
        pass
    for a, _ in pairs:
        a.send(b"x")
    time.sleep(0.002)  # a blocking sleep (not gevent's): the loop stays held
    gevent.joinall([waiter, *readers], timeout=10)
    assert len(order) == 41, order
    assert order[0] == "due", order[:5]
    for a, b in pairs:
        a.close()
        b.close()
    timer.close()
