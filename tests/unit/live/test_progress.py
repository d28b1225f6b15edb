"""The progress snapshot's pure parts: the last-10-s rates, the ETA, the plain line (every
figure, None shown as "-", never a control code) and the file's round trip."""

from __future__ import annotations

from pathlib import Path

import msgspec

from anvil_metrics.live.progress import (
    SETTING_UP,
    Progress,
    RateWindow,
    eta_s,
    progress_line,
    read_progress,
    write_progress,
)
from anvil_metrics.live.stuck import StuckReport


def _p(**kw: object) -> Progress:
    return Progress(run_id="r", phase="running", elapsed_s=1.0, **kw)  # type: ignore[arg-type]


def test_rates_are_over_the_last_ten_seconds_only() -> None:
    w = RateWindow(10.0)
    assert w.add(0.0, 0, 0) == (None, None, None)
    for t in range(1, 11):  # 1 request and 100 tokens a second for 10 s
        got = w.add(float(t), t, 100 * t)
    assert got == (1.0, 100.0, 10.0)
    for t in range(11, 21):  # then 3 a second: the first ten seconds have left the window
        got = w.add(float(t), 10 + 3 * (t - 10), 1000 + 300 * (t - 10))
    assert got == (3.0, 300.0, 10.0)


def test_eta_of_a_budget_is_the_requests_left_at_the_recent_rate() -> None:
    assert eta_s(_p(requests_planned=100, requests_done=40, requests_per_s=4.0)) == 15.0
    assert eta_s(_p(requests_planned=100, requests_done=40)) is None  # no rate yet
    # a budget with a time limit: whichever comes first
    assert eta_s(_p(requests_planned=100, requests_done=40, requests_per_s=1.0,
                    duration_s=30.0, duration_elapsed_s=20.0)) == 10.0


def test_eta_of_a_duration_or_sweep_is_its_rest() -> None:
    assert eta_s(_p(duration_s=60.0, duration_elapsed_s=45.5)) == 14.5
    assert eta_s(_p(duration_s=60.0)) is None  # the duration has not begun (warm-ups)
    assert eta_s(_p(duration_s=40.0, duration_elapsed_s=10.0, steps=4, step=1)) == 30.0
    assert eta_s(_p()) is None  # until stopped


FULL = _p(requests_planned=100, requests_done=43, warmup_planned=2, warmup_done=2,
          in_flight_requests=7, completed_requests=37, failed_by_kind={"http_error": 2,
          "timeout": 1}, cancelled_requests=3, requests_per_s=3.25, output_tok_s=410.0,
          rate_window_s=10.0, ttft_p50_ms=120.0, ttft_p95_ms=300.5, decode_tok_s_p50=44.0,
          eta_s=17.6, loop_lag_p99_ms=12.3, cpu_pct=40.0, saturated=True,
          verdict="saturated: event-loop lag p99 12.3 ms > 10 ms", step=1, steps=4,
          step_load="8 users", stuck=StuckReport(30.0, 7, 2, 1, 45.2, 1, 45.2, 31.0))


def test_the_plain_line_has_every_figure() -> None:
    line = progress_line(FULL, "capacity step 3: users 8")
    for part in ("capacity step 3: users 8: running 43/100 requests", "step 2/4: 8 users",
                 "in flight 7", "completed 37", "failed 3 (http_error 2, timeout 1)",
                 "cancelled 3", "3.2 req/s, 410.0 output tok/s (last 10 s)",
                 "TTFT p50 120.0 p95 300.5 ms", "decode p50 44.0 tok/s", "ETA 0:18",
                 "client SATURATED (event-loop lag p99 12.3 ms > 10 ms)",
                 "3 of 7 requests in flight are stuck: 2 waiting for their first byte "
                 "(the longest 45 s, headers received for 1), 1 idle mid-stream for 31 s"):
        assert part in line, part
    assert "\x1b" not in line and "\r" not in line and "\n" not in line


def test_missing_figures_are_shown_as_missing_never_zero() -> None:
    line = progress_line(_p(duration_s=60.0, duration_elapsed_s=5.0))
    assert "0:05/1:00" in line
    assert "in flight -" in line and "- req/s, - output tok/s (last - s)" in line
    assert "TTFT p50 - p95 - ms" in line and "decode p50 - tok/s" in line
    assert "client not measured" in line and "stuck" not in line
    assert progress_line(None, "run 2 of 4: fp8") == f"run 2 of 4: fp8: {SETTING_UP}"


def test_all_stuck_is_said() -> None:
    line = progress_line(_p(stuck=StuckReport(30.0, 4, 4, 0, 31.0, 0, 31.0, None)))
    assert ("every request in flight is stuck (4): 4 waiting for their first byte (the "
            "longest 31 s)") in line


def test_warm_up_and_time_only_amounts() -> None:
    assert "warm-up 1/3 |" in progress_line(Progress(run_id="r", phase="warm-up",
                                                   elapsed_s=1.0, warmup_planned=3,
                                                   warmup_done=1))
    assert "running 1:01:05 elapsed" in progress_line(Progress(
        run_id="r", phase="running", elapsed_s=3665.0))


def test_the_file_round_trips_and_a_bad_file_is_none(tmp_path: Path) -> None:
    path = tmp_path / "progress.json"
    assert read_progress(path) is None
    write_progress(path, FULL)
    assert read_progress(path) == FULL
    assert list(tmp_path.iterdir()) == [path]  # the temp file was renamed over it
    path.write_bytes(b'{"run_id": 3}')
    assert read_progress(path) is None
    assert msgspec.json.decode(msgspec.json.encode(FULL))["stuck"]["oldest_s"] == 45.2


def test_an_agent_replay_counts_jobs_and_any_other_run_does_not() -> None:
    agent = Progress(run_id="r", phase="running", elapsed_s=30.0, requests_done=240,
                     completed_requests=238, in_flight_requests=19, jobs_planned=200,
                     jobs_completed=11, jobs_cut=1, jobs_in_flight=16,
                     job_latency_p50_ms=8125.5)
    assert agent.jobs_done == 12
    line = progress_line(agent)
    assert line.startswith("running 12/200 jobs | jobs in flight 16, completed 11, cut 1, "
                           "job latency p50 8125.5 ms | in flight 19 | completed 238")
    waiting = progress_line(msgspec.structs.replace(
        agent, jobs_completed=0, jobs_cut=0, jobs_in_flight=None, job_latency_p50_ms=None))
    assert "0/200 jobs" in waiting and "jobs in flight -, completed 0, cut 0, job latency " \
        "p50 - ms" in waiting  # none done yet: missing, never 0 ms
    plain = progress_line(FULL)
    assert "job" not in plain and FULL.jobs_done is None
