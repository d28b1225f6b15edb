"""Waking at an open loop's due time to the microsecond, under gevent, without spinning.

Why: gevent's loop (libev on epoll) sleeps in `epoll_wait`, whose timeout is whole
milliseconds, rounded up: a request slept to its due time went out ~1 ms late (schedule lag
p50 0.98 ms at 20 req/s, `benchmarks/pacing.py`), and at hundreds of requests a second that
is most of a gap. A Linux timerfd armed at the due time (CLOCK_MONOTONIC, the clock of
`time.perf_counter_ns`) becomes readable at that instant, and a readable descriptor ends
`epoll_wait` at once, whatever its timeout: so the last stretch before a due time is a
wait for the timerfd (a wait on its gevent watcher), which costs no CPU while it waits. Where
there is no timerfd (not Linux), that stretch is spun with `gevent.sleep(0)` instead, which
is as exact but busy. (AIPerf fixed its under-delivery at high rates the same way.)

The timerfd's watcher has libev's highest priority (`WAKE_PRIORITY`): when it fires in the
same loop iteration as many sockets (a busy client reading hundreds of streams), libev
calls the due request's greenlet before any stream's, so a request waits for at most the
greenlet running when its time came, not for every stream that had bytes at that moment.

That priority orders only the watchers libev collected in one poll. A timerfd that expires
while the loop is working through an iteration's watchers (at 800 req/s a dozen streams'
reads, each ~0.1 ms of Python) is seen only at the next poll, after all of them: schedule
lag p99 1.3-1.4 ms at 800 req/s (`benchmarks/pacing.py`). So while a request waits, every
greenlet switch back to the hub is watched (`greenlet.settrace`: 1.5 µs a switch in a slow
hour of this VM): the first switch after the due time feeds the timer's watcher (libev's
`ev_feed_event`), which makes it pending at once at its priority, and libev, which goes back
to its highest pending priority after every callback, calls the due request next, after the
greenlet that was running.

One `DueTimer` per waiter: `RequestBudget` waits for one arrival at a time, under its lock.
"""

from __future__ import annotations

import ctypes
import os
import time
from typing import Any

import gevent
import greenlet

_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = os.O_NONBLOCK
_TFD_CLOEXEC = os.O_CLOEXEC
_TFD_TIMER_ABSTIME = 1
_READ = 1  # libev's EV_READ
WAKE_PRIORITY = 2  # libev's EV_MAXPRI: called first among the watchers ready at once


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.timerfd_create  # noqa: B018 - present on Linux only
        return libc
    except (OSError, AttributeError):
        return None


class DueTimer:
    """`wait_until(due_ns)` returns at `due_ns` (perf_counter_ns), never before."""

    def __init__(self) -> None:
        self._libc = _libc()
        self._fd = -1
        self._watcher: Any = None
        self._due_ns = 0
        if self._libc is not None:
            fd = self._libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
            self._fd = fd if fd >= 0 else -1
        if self._fd >= 0:
            self._watcher = gevent.get_hub().loop.io(self._fd, _READ, priority=WAKE_PRIORITY)

    @property
    def precise(self) -> bool:
        """True with a timerfd (a wait costs no CPU); False: the spin."""
        return self._fd >= 0

    def wait_until(self, due_ns: int) -> None:
        if self._fd < 0:
            while time.perf_counter_ns() < due_ns:
                gevent.sleep(0)
            return
        spec = _Itimerspec(_Timespec(0, 0), _Timespec(*divmod(due_ns, 1_000_000_000)))
        if self._libc.timerfd_settime(self._fd, _TFD_TIMER_ABSTIME,  # type: ignore[union-attr]
                                      ctypes.byref(spec), None) != 0:
            raise OSError(ctypes.get_errno(), "timerfd_settime")
        hub = gevent.get_hub()
        self._due_ns = due_ns
        _HURRY.add(self)
        try:
            while time.perf_counter_ns() < due_ns:
                hub.wait(self._watcher)
        finally:
            _HURRY.discard(self)
        try:
            os.read(self._fd, 8)  # the expiry count: disarmed until set again
        except BlockingIOError:
            pass

    def _hurry(self, now_ns: int) -> None:
        """Past the due time: feed the timer's watcher, unless libev has it pending."""
        w = self._watcher
        if now_ns >= self._due_ns and w.active and not w.pending:
            w.feed(_READ, w.callback, *w.args)

    def close(self) -> None:
        if self._fd >= 0:
            self._watcher.close()
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:  # a budget's timer goes with it (one per run, not closed)
        self.close()


class _Hurry:
    """The greenlet switch trace (module docstring), installed while any `DueTimer` of the
    process waits (a distributed worker's users wait at once, each on its own) and removed
    with the last: at each switch back to the hub, every waiter past its due time is fed.
    gevent runs in one thread here; a trace installed before the first waiter is called
    after this one and put back after the last."""

    def __init__(self) -> None:
        self.waiting: set[DueTimer] = set()
        self.previous: Any = None
        self.hub: Any = None

    def add(self, timer: DueTimer) -> None:
        if not self.waiting:
            self.hub = gevent.get_hub()
            self.previous = greenlet.settrace(self)
        self.waiting.add(timer)

    def discard(self, timer: DueTimer) -> None:
        self.waiting.discard(timer)
        if not self.waiting:
            greenlet.settrace(self.previous)
            self.previous = self.hub = None

    def __call__(self, event: str, args: Any) -> None:
        if event == "switch" and args[1] is self.hub:
            now_ns = time.perf_counter_ns()
            for timer in self.waiting:
                timer._hurry(now_ns)
        if self.previous is not None:
            self.previous(event, args)


_HURRY = _Hurry()
