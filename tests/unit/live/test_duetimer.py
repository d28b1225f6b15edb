"""`DueTimer`: never before the due time, on the timerfd and on the spin that stands in for
it where there is none; how late it wakes is printed (the machine decides that), with only
a loose sanity bound."""

from __future__ import annotations

import time

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
