"""Absolute-deadline timers for the simulator, precise to tens of microseconds.

The simulator promises that token i leaves at ``prefill_end + i * interval``. asyncio's own
timers cannot keep that promise well: on Linux the selector rounds its wait up to a whole
millisecond, so a timer fires up to ~1 ms late, and the error is different for every chunk.
A client measuring inter-token latency would then measure the simulator, not itself.

`TimerfdScheduler` keeps one heap of deadlines for all streams and arms a single Linux
``timerfd`` (``CLOCK_MONOTONIC``, absolute time, nanosecond resolution; reached through ctypes)
at the earliest one. The fd sits in the asyncio loop like any socket, so waking costs one epoll
return and no thread. Deadlines closer than `SPIN_NS` to the one just served are waited for by
spinning, which is cheaper than a sleep/wake round trip and more precise, but only early in a
round and never while requests wait to be handled; a round gives the loop back after
`SLICE_NS` so sockets are still read (and requests stamped) when the simulator is overloaded.
`AsyncioScheduler` is the portable fallback built on ``loop.call_at``.

Both take deadlines as integer ``time.monotonic_ns()`` values and never fire a callback before
its deadline. Callers compute every deadline from the request's start, so a late fire never
shifts the following ones. `now_ns` gives the same guarantee to work that starts *because*
something fired (``--max-running``: a queued request admitted when a stream ends): while an
item fires it is that item's deadline, not the clock, so a late fire does not delay the next.
"""

from __future__ import annotations

import asyncio
import ctypes
import heapq
import itertools
import os
import sys
import time
import traceback
from collections.abc import Callable
from typing import Protocol

_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = 0o4000
_TFD_CLOEXEC = 0o2000000
_TFD_TIMER_ABSTIME = 1

# Busy-wait for a deadline closer than this instead of re-arming the timer and sleeping: a
# sleep/wake round trip (timerfd_settime, epoll_wait, a context switch) costs about as much CPU,
# more in a VM, and is less precise.
SPIN_NS = 30_000
# Spin-waits happen only this early in a dispatch round, so spinning never holds the loop long.
SPIN_WINDOW_NS = 200_000
# Longest stretch spent firing before the event loop gets to read sockets again: requests are
# stamped (t0) when read, so this bounds how late a t0 can be while streams are busy.
SLICE_NS = 1_000_000


class Timed(Protocol):
    """Something to run at a deadline (a stream's next chunk, a delayed response)."""

    def fire(self) -> None: ...


class Scheduler(Protocol):
    """Runs `item.fire()` once, as soon as possible after `deadline_ns` (monotonic ns)."""

    def at(self, deadline_ns: int, item: Timed) -> None: ...

    def now_ns(self) -> int: ...

    def close(self) -> None: ...


def _fire(item: Timed) -> None:
    """Run one callback; a failing stream must not take the shared timer down with it."""
    try:
        item.fire()
    except Exception:  # report and keep serving the other streams
        traceback.print_exc(file=sys.stderr)


class AsyncioScheduler:
    """Fallback: one `loop.call_at` per deadline (up to ~1 ms late on Linux)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._firing_ns = 0  # deadline of the item firing now; 0: none

    def at(self, deadline_ns: int, item: Timed) -> None:
        self._loop.call_at(deadline_ns / 1e9, self._due, deadline_ns, item)

    def now_ns(self) -> int:
        """The deadline of the item firing now, else the monotonic clock."""
        return self._firing_ns or time.monotonic_ns()

    def _due(self, deadline_ns: int, item: Timed) -> None:
        if time.monotonic_ns() < deadline_ns:  # float rounding: never fire early
            self.at(deadline_ns, item)
            return
        self._firing_ns = deadline_ns
        try:
            _fire(item)
        finally:
            self._firing_ns = 0

    def close(self) -> None:
        """Nothing to release: pending handles die with the loop."""


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


class TimerfdScheduler:
    """One heap of deadlines, one absolute CLOCK_MONOTONIC timerfd armed at the earliest."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, work_waiting: Callable[[], bool] | None = None
    ) -> None:
        self._work_waiting = work_waiting or (lambda: False)
        self._libc = ctypes.CDLL(None, use_errno=True)
        fd = self._libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "timerfd_create failed")
        self._fd: int = fd
        self._spec = _Itimerspec()
        self._spec_ref = ctypes.byref(self._spec)
        self._heap: list[tuple[int, int, Timed]] = []
        self._seq = itertools.count()
        self._armed = sys.maxsize  # deadline the timerfd is set to, maxsize = disarmed
        self._dispatching = False
        self._firing_ns = 0  # deadline of the item firing now; 0: none
        self._loop = loop
        loop.add_reader(fd, self._on_ready)

    def at(self, deadline_ns: int, item: Timed) -> None:
        heapq.heappush(self._heap, (deadline_ns, next(self._seq), item))
        if not self._dispatching and deadline_ns < self._armed:
            self._arm(deadline_ns)

    def now_ns(self) -> int:
        """The deadline of the item firing now, else the monotonic clock."""
        return self._firing_ns or time.monotonic_ns()

    def _arm(self, deadline_ns: int) -> None:
        """Set the timer to `deadline_ns` (0 disarms). Resets the fd's expiry count, so no
        read is ever needed: a wake is always followed by exactly one re-arm."""
        value = self._spec.it_value
        value.tv_sec, value.tv_nsec = divmod(deadline_ns, 1_000_000_000)
        if self._libc.timerfd_settime(self._fd, _TFD_TIMER_ABSTIME, self._spec_ref, None):
            raise OSError(ctypes.get_errno(), "timerfd_settime failed")
        self._armed = deadline_ns or sys.maxsize

    def _on_ready(self) -> None:
        self._dispatching = True
        start = time.monotonic_ns()
        try:
            while True:
                try:
                    self._dispatch(start + SPIN_WINDOW_NS, start + SLICE_NS)
                    break
                except Exception:  # one broken stream must not stop the others
                    traceback.print_exc(file=sys.stderr)
        finally:
            self._dispatching = False
            self._firing_ns = 0
            self._arm(self._heap[0][0] if self._heap else 0)

    def _dispatch(self, spin_until: int, give_up: int) -> None:
        """Fire everything due; spin through short gaps while the loop has nothing else to do.

        Returns to the event loop at `give_up` at the latest, so an overloaded simulator still
        accepts connections and reads requests (it then runs late, never early).
        """
        heap, clock, pop = self._heap, time.monotonic_ns, heapq.heappop
        while heap:
            deadline = heap[0][0]
            now = clock()
            if deadline > now:
                if deadline - now > SPIN_NS or deadline > spin_until or self._work_waiting():
                    return
                while clock() < deadline:
                    pass
            elif now > give_up:
                return
            self._firing_ns = deadline
            pop(heap)[2].fire()

    def close(self) -> None:
        self._loop.remove_reader(self._fd)
        os.close(self._fd)
        self._heap.clear()


def make_scheduler(
    loop: asyncio.AbstractEventLoop,
    kind: str = "auto",
    work_waiting: Callable[[], bool] | None = None,
) -> Scheduler:
    """`kind` is ``timerfd``, ``asyncio`` or ``auto`` (timerfd where Linux offers it).

    `work_waiting` tells the timerfd scheduler not to spin while requests wait to be handled.
    """
    if kind == "asyncio":
        return AsyncioScheduler(loop)
    try:
        return TimerfdScheduler(loop, work_waiting)
    except (OSError, AttributeError, NotImplementedError):
        if kind == "timerfd":
            raise
        return AsyncioScheduler(loop)
