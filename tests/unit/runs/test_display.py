"""The progress display: plain lines at their interval and never a control code; on a
terminal, rich's table redrawn in place (cursor moves), SATURATED and stuck shown; Locust's
log handlers routed above the live region while it is shown, and put back after."""

from __future__ import annotations

import io
import logging
import sys

from anvil_metrics.live.progress import SETTING_UP, Progress
from anvil_metrics.live.stuck import StuckReport
from anvil_metrics.runs.display import LiveTable, PlainLines, make_display


def _p(done: int, **kw: object) -> Progress:
    return Progress(run_id="r1", phase="running", elapsed_s=float(done), requests_planned=10,
                    requests_done=done, completed_requests=done, **kw)  # type: ignore[arg-type]


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_plain_lines_come_at_their_interval_and_the_last_state_at_close() -> None:
    out: list[str] = []
    clock = Clock()
    plain = PlainLines(out.append, every_s=10.0, title="run 2 of 4: fp8", clock=clock)
    plain.show(None)  # set-up within the interval: unsaid (a failure stays one line)
    clock.t = 10.0
    plain.show(None)  # still setting up after the interval: said
    for t in range(11, 35):
        clock.t = float(t)
        plain.show(_p(t % 10))
    plain.close()
    assert out[0] == f"run 2 of 4: fp8: {SETTING_UP}"
    assert [line.split(" | ")[0] for line in out[1:]] == [
        "run 2 of 4: fp8: running 0/10 requests",  # t=20
        "run 2 of 4: fp8: running 0/10 requests",  # t=30
        "run 2 of 4: fp8: running 4/10 requests"]  # the last reading, at close
    assert not any("\x1b" in line or "\r" in line for line in out)


def test_off_a_terminal_the_display_is_plain_and_quiet_is_none() -> None:
    stream = io.StringIO()
    shown = make_display(stream, every_s=1.0)
    assert isinstance(shown, PlainLines)
    shown.show(_p(3))
    assert stream.getvalue().startswith("running 3/10 requests | ") and "\x1b" not in \
        stream.getvalue()
    assert make_display(stream, every_s=None) is None


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_the_table_is_redrawn_in_place() -> None:
    stream = Tty()
    shown = make_display(stream, every_s=10.0, title="capacity step 3: users 8")
    assert isinstance(shown, LiveTable)
    shown.show(None)
    shown.show(_p(4, saturated=True, verdict="saturated: CPU 95 % of one core > 90 %",
                  stuck=StuckReport(30.0, 2, 2, 0, 31.0, 0, 31.0, None)))
    shown.close()
    text = stream.getvalue()
    assert "capacity step 3: users 8" in text and SETTING_UP in text
    assert "4/10 requests" in text
    assert "SATURATED (CPU 95 % of one core > 90 %)" in text
    assert "every request in flight is stuck (2)" in text and "the longest 31 s" in text
    assert "\x1b[2K" in text or "\x1b[1A" in text  # the region is erased and redrawn


def test_log_handlers_print_above_the_region_and_are_put_back() -> None:
    logger = logging.getLogger("anvil.test_display")
    handler = logging.StreamHandler(sys.__stderr__)
    logger.addHandler(handler)
    try:
        shown = LiveTable(Tty(), route_logs=True)
        shown.show(_p(1))
        assert handler.stream is not sys.__stderr__  # rich's proxy meanwhile
        shown.close()
        assert handler.stream is sys.__stderr__
    finally:
        logger.removeHandler(handler)


def test_a_reading_a_little_early_is_on_time() -> None:
    """Snapshots come once a second with the loop's jitter: a line every 2 s stays every 2 s
    (seen: 2 s, then 3 s, when a reading came a millisecond before the interval)."""
    out: list[str] = []
    clock = Clock()
    plain = PlainLines(out.append, every_s=2.0, clock=clock)
    for t in (0.0, 1.0, 1.999, 2.999, 3.998, 4.998, 5.997):
        clock.t = t
        plain.show(_p(1))
    assert len(out) == 4  # at 0, 1.999, 3.998, 5.997


def test_an_agent_replay_shows_its_jobs_on_a_terminal_and_in_plain_lines() -> None:
    agent = Progress(run_id="r1", phase="running", elapsed_s=9.0, requests_done=90,
                     completed_requests=90, jobs_planned=40, jobs_completed=9, jobs_cut=1,
                     jobs_in_flight=4, job_latency_p50_ms=1530.25)
    stream = Tty()
    shown = make_display(stream, every_s=10.0)
    assert isinstance(shown, LiveTable)
    shown.show(agent)
    shown.close()
    text = stream.getvalue()
    assert "10/40 jobs" in text
    assert "in flight 4, completed 9, cut 1, job latency p50 1530.2 ms" in text
    plain = io.StringIO()
    lines = make_display(plain, every_s=1.0)
    assert isinstance(lines, PlainLines)
    lines.show(agent)
    assert plain.getvalue().startswith("running 10/40 jobs | jobs in flight 4, completed 9")
    other = Tty()  # any other run: no jobs row
    table = make_display(other, every_s=10.0)
    assert isinstance(table, LiveTable)
    table.show(_p(4))
    table.close()
    assert "job" not in other.getvalue()
