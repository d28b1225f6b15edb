"""The stream watchdog (`client.Silence`) that replaced per-read socket timeouts: it bounds
silences, not streams — bytes arriving re-arm it — and a shorter limit takes effect at once."""

from __future__ import annotations

import time

import gevent
import pytest

from anvil_metrics.wire.transport import Silence, SilenceTimeout


def _steady_then_silent(limit_s: float, beats: int, beat_s: float) -> tuple[float, float]:
    """Bytes every `beat_s` for `beats` beats, then silence: (seconds the beats took,
    seconds from the last byte to the SilenceTimeout)."""
    silence = Silence(limit_s)
    t0 = time.perf_counter()
    try:
        for _ in range(beats):
            gevent.sleep(beat_s)
            silence.last_ns = time.perf_counter_ns()
        beats_s = time.perf_counter() - t0
        last = time.perf_counter()
        with pytest.raises(SilenceTimeout):
            gevent.sleep(10 * limit_s)
        return beats_s, time.perf_counter() - last
    finally:
        silence.cancel()


def test_a_steady_stream_longer_than_the_limit_is_not_cut() -> None:
    beats_s, silent_s = gevent.spawn(_steady_then_silent, 0.2, 8, 0.1).get(timeout=10)
    assert beats_s >= 0.75  # four limits' worth of steady bytes, no timeout
    assert 0.19 <= silent_s < 1.0  # then a silence of one limit ends it (loose above)


def test_a_shorter_limit_counts_from_the_last_bytes() -> None:
    def run() -> float:
        silence = Silence(30.0)  # the first-byte timeout, long
        try:
            gevent.sleep(0.1)
            silence.last_ns = time.perf_counter_ns()
            silence.set_limit(0.2)  # the first output: the idle timeout from now on
            t0 = time.perf_counter()
            with pytest.raises(SilenceTimeout):
                gevent.sleep(5)
            return time.perf_counter() - t0
        finally:
            silence.cancel()

    assert 0.19 <= gevent.spawn(run).get(timeout=10) < 1.0  # loose above: 5 s if it never cut


def test_a_cancelled_watchdog_never_fires() -> None:
    def run() -> bool:
        silence = Silence(0.05)
        silence.cancel()
        gevent.sleep(0.2)
        return True

    assert gevent.spawn(run).get(timeout=5)
