"""`OverloadWatch` on records whose TTFT and queue are known: a queue that grows with TTFTs
that double is stopped at the second check, with the reason; TTFTs that double while the
queue holds, a flat TTFT while the queue grows, and noise are not."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from rawbuild import completed

from anvil_metrics.live.overload import OverloadWatch

MS = 1_000_000


class Clock:
    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> int:
        return self.ns


def feed(ttft_at: Callable[[float], float], in_flight_at: Callable[[float], int],
         seconds: float = 40, rate: float = 20, seed: int = 0) -> tuple[list[str], float]:
    """Records ending `rate` a second for `seconds`, TTFT `ttft_at(t)` (+ 5 % noise); the
    reasons the watch gave (10 s window) and when."""
    clock, said = Clock(), []
    t = {"now": 0.0}
    watch = OverloadWatch(10.0, "http://127.0.0.1:9", lambda: in_flight_at(t["now"]),
                          said.append, began_ns=lambda: 0, clock_ns=clock)
    rng = np.random.default_rng(seed)
    for i in range(int(seconds * rate)):
        t["now"] = i / rate
        clock.ns = int(t["now"] * 1e9)
        ttft = ttft_at(t["now"]) * (1 + 0.05 * rng.standard_normal())
        start = clock.ns - int((ttft + 50) * MS)
        watch.take(completed(i, start_ns=start, first_output_ns=start + int(ttft * MS),
                             first_content_ns=start + int(ttft * MS), end_ns=clock.ns))
        if said:
            return said, t["now"]
    return said, t["now"]


def test_a_growing_queue_with_doubling_ttfts_is_stopped_with_the_reason() -> None:
    """TTFT 100 ms growing 100 % every 5 s after 12 s; the queue grows with it."""
    said, at = feed(lambda t: 100 * 2 ** (max(0.0, t - 12) / 5), lambda t: int(10 + 5 * t))
    assert len(said) == 1, said
    assert said[0].startswith("the server at http://127.0.0.1:9 is over capacity at ")
    assert "two checks in a row" in said[0] and "--stop-overloaded 10s" in said[0]
    assert 12 < at < 40


def test_a_queue_growing_at_a_steady_pace_is_stopped_late_in_a_run_too() -> None:
    """10 % more offered than served, from 30 s on: the wait grows 100 ms a second, a few
    per cent of the TTFT per window by then (a ratio rule would miss it)."""
    said, at = feed(lambda t: 1_000 + 100 * max(0.0, t - 30), lambda t: int(t),
                    seconds=60)
    assert len(said) == 1 and "100 ms a second" in said[0], said
    assert 30 < at < 50


def test_doubling_ttfts_with_a_queue_that_holds_go_on() -> None:
    said, _ = feed(lambda t: 100 * 2 ** (t / 5), lambda t: 16)
    assert said == []


def test_a_flat_ttft_with_a_growing_queue_goes_on() -> None:
    said, _ = feed(lambda t: 100.0, lambda t: int(5 * t))
    assert said == []


def test_noise_is_not_overload() -> None:
    for seed in range(3):
        said, _ = feed(lambda t: 100.0, lambda t: int(10 + t), seed=seed)
        assert said == []
