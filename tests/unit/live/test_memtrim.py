"""memtrim: the trimmer calls glibc's `malloc_trim` once a period, on the event loop,
until stopped; where there is no such function it does nothing.

Why: a run of hours must keep its resident memory flat; a trimmer that never runs, or
one that keeps running after the run, would go unseen.
"""

from __future__ import annotations

import gevent
import pytest

from anvil_metrics.live import memtrim


def test_it_trims_each_period_until_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(memtrim, "_malloc_trim", lambda: lambda pad: calls.append(pad) or 1)
    trimmer = memtrim.Trimmer(period_s=0)  # every pass of the hub
    trimmer.start()
    trimmer.start()  # a second start does not start a second greenlet
    for _ in range(3):
        gevent.sleep(0)
    trimmer.stop()
    for _ in range(3):  # a trim already due when it was stopped may still run
        gevent.sleep(0)
    done = trimmer.trims
    for _ in range(5):
        gevent.sleep(0)
    assert done >= 2 and trimmer.trims == done == len(calls)
    assert set(calls) == {0} and trimmer.longest_ns >= 0


def test_without_malloc_trim_nothing_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memtrim, "_malloc_trim", lambda: None)
    trimmer = memtrim.Trimmer(period_s=0)
    trimmer.start()
    gevent.sleep(0)
    trimmer.stop()
    assert trimmer.trims == 0


def test_the_real_function_is_found_on_glibc() -> None:
    import platform

    trim = memtrim._malloc_trim()
    if platform.libc_ver()[0] != "glibc":
        pytest.skip("not glibc")
    assert trim is not None and trim(0) in (0, 1)
