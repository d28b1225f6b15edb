"""Requests that have waited too long: for their first byte, or silent mid-stream.

Why: a server that sends its headers and then nothing, or stops mid-answer, leaves a run
silent for as long as its timeouts allow (`first_byte_s` is 1,800 s by default, right for a
393k-token prefill). The run should say so long before: how many requests, how long, in
which phase. `StuckReport` is what the live display, the log and the progress file read;
the watch that fills it is this module's (issue 47).
"""

from __future__ import annotations

from dataclasses import dataclass

STUCK_AFTER_S = 30.0  # the default threshold (settable: --stuck-after)


@dataclass(frozen=True, slots=True)
class StuckReport:
    """The requests in flight that have waited at least `threshold_s`, read at one moment.

    - `waiting_first_byte_requests`: sent, and no byte of the answer yet (headers or body);
    - `idle_mid_stream_requests`: the answer began, and nothing arrived since;
    - `oldest_s`: the longest of those waits (None when none is stuck);
    - `in_flight_requests`: every request in flight then (stuck or not).
    """

    threshold_s: float
    in_flight_requests: int
    waiting_first_byte_requests: int
    idle_mid_stream_requests: int
    oldest_s: float | None

    @property
    def stuck_requests(self) -> int:
        return self.waiting_first_byte_requests + self.idle_mid_stream_requests

    @property
    def all_stuck(self) -> bool:
        """Every request in flight is stuck (and some are in flight)."""
        return self.in_flight_requests > 0 and self.stuck_requests >= self.in_flight_requests
