"""Hand the C heap's free pages back to the system once a minute, while a run's load lasts.

Why: runs last hours now (`--duration`), and a load process's resident memory must stay flat.
Measured in `benchmarks/soak.py` (64 streams, ~265 requests/s, glibc's `mallinfo2` read each
minute inside the Locust process): the memory the C heap had in use stayed at 14.6 MB, yet
the heap's FREE bytes grew from 2.7 to 5.2 MB in ten minutes and the process's RSS with
them (+5.5 % and +7.0 % over two 30-minute soaks): glibc keeps freed chunks resident when a
live chunk lies above them, so a busy heap's high-water pages are never returned. (Python's
own objects were not the cause: tracemalloc found no growing allocation site.)
`malloc_trim(0)` gives back every whole free page of the heap (glibc ≥ 2.8 `madvise`s the
middle of the heap too). It is the standard remedy for this glibc behaviour (Dask's workers
call it for the same reason).

Its cost: one call walks the heap's free lists, once a minute, on the event loop — measured
in a 30-minute soak: 0.5-0.8 ms a call, the longest 8.5 ms while other jobs shared the CPUs.
Off glibc (musl, macOS) `Trimmer.start` does nothing.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable

import gevent

PERIOD_S = 60.0


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's `malloc_trim`, or None where there is none."""
    try:  # the process's own symbols (dlopen(NULL)): no library search, no subprocess
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


class Trimmer:
    """A greenlet that calls `malloc_trim(0)` every `period_s` until stopped."""

    def __init__(self, period_s: float = PERIOD_S) -> None:
        self.period_s = period_s
        self.trims = 0
        self.longest_ns = 0  # the longest call so far
        self._greenlet: gevent.Greenlet | None = None

    def start(self) -> None:
        trim = _malloc_trim()
        if trim is None or self._greenlet is not None:
            return
        self._greenlet = gevent.spawn(self._run, trim)

    def _run(self, trim: Callable[[int], int]) -> None:
        while True:
            gevent.sleep(self.period_s)
            t = time.perf_counter_ns()
            trim(0)
            self.longest_ns = max(self.longest_ns, time.perf_counter_ns() - t)
            self.trims += 1

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None
