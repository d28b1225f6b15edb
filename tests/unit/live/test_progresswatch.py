"""The progress snapshot read from a session's live pieces, against known truth: records
fed to a real `LiveStats` (counts, failures by kind, cancelled, warm-ups, the sketches'
TTFT and decode percentiles), a real request budget's in flight, the clock's duration and
step, the client verdict by `post.saturation.verdict` (flipping to saturated), and the
stuck watch's report when the session has one."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gevent

from anvil_metrics.live.control import RequestBudget
from anvil_metrics.live.figures import LiveStats
from anvil_metrics.live.progress import read_progress
from anvil_metrics.live.progresswatch import DISTRIBUTED_VERDICT, ProgressWatch
from anvil_metrics.live.sketch import SKETCH_REL_ERROR
from anvil_metrics.live.stuck import StuckReport
from anvil_metrics.post import stats
from anvil_metrics.records import Failure, RequestRecord


def _record(i: int, *, warmup: bool = False, kind: str | None = None) -> RequestRecord:
    start = 1_000_000_000 + i * 3_000_000
    first = start + 20_000_000 + (i * 7919) % 9_000_000
    if kind is not None:
        return RequestRecord(request_index=i, start_ns=start, end_ns=start + 1000,
                             planned_context_tokens=512, warmup=warmup,
                             failure=Failure(kind=kind, message="x"))
    return RequestRecord(
        request_index=i, start_ns=start, first_output_ns=first, first_content_ns=first,
        end_ns=first + 200_000_000, planned_context_tokens=512, warmup=warmup,
        content_chunks=4, chunk_deltas_ns=(first - start, 50_000_000, 50_000_000,
                                           50_000_000 + (i * 104729) % 50_000_000),
        usage={"prompt_tokens": 500, "completion_tokens": 4})


class Load:
    def __init__(self) -> None:
        self.figures: tuple[float | None, float | None] = (0.5, 20.0)

    def so_far(self) -> tuple[float | None, float | None]:
        return self.figures


def _session(tmp_path: Path, **kw: Any) -> SimpleNamespace:
    budget = RequestBudget(100, 2, [512])
    return SimpleNamespace(
        run_id="r1", run_dir=tmp_path, live=LiveStats("r1", 100), budget=budget,
        scenario=SimpleNamespace(duration_s=None, requests=100), load=Load(),
        clock=SimpleNamespace(duration_began_ns=None, step=None), ended_by=None, **kw)


def test_the_snapshot_counts_what_was_fed(tmp_path: Path) -> None:
    s = _session(tmp_path)
    watch = ProgressWatch(s)
    assert watch.read(time.perf_counter()).phase == "warm-up"
    warm = s.budget.take()  # a warm-up in flight is in flight (a stuck one is shown)
    assert warm is not None and warm.warmup
    assert watch.read(time.perf_counter()).in_flight_requests == 1
    s.budget.give_back(warm)
    s.live.take(_record(0, warmup=True))
    s.live.take(_record(1, warmup=True, kind="http_error"))  # a failed warm-up: a warm-up
    done = [_record(i) for i in range(40)]
    for r in done:
        s.live.take(r)
    for i, kind in enumerate(("http_error", "http_error", "timeout", "cancelled",
                              "aborted")):
        s.live.take(_record(100 + i, kind=kind))
    s.budget.give_back(s.budget.take())  # the other warm-up's ticket; 3 measured ones out
    assert all(s.budget.take() is not None for _ in range(3))
    assert watch.tick().completed_requests == 0  # the tick leaves them to the drainer,
    gevent.sleep(0.05)  # which derives them when the loop is idle, a slice at a time
    p = watch.tick()
    assert (p.phase, p.warmup_done, p.warmup_planned) == ("running", 2, 2)
    assert (p.completed_requests, p.requests_done, p.requests_planned) == (40, 45, 100)
    assert p.failed_by_kind == {"http_error": 2, "timeout": 1}
    assert p.cancelled_requests == 2 and p.in_flight_requests == 3
    ttft = [(r.first_content_ns - r.start_ns) / 1e6 for r in done]
    for got, q in ((p.ttft_p50_ms, 50), (p.ttft_p95_ms, 95)):
        exact = stats.nearest_rank(ttft, q)
        assert got is not None and exact is not None
        assert abs(got - exact) <= SKETCH_REL_ERROR * exact * (1 + 1e-9)
    assert p.decode_tok_s_p50 is not None and p.decode_tok_s_p50 > 0
    assert (p.saturated, p.verdict, p.loop_lag_p99_ms, p.cpu_pct) == (False, "ok", 0.5, 20.0)
    assert p.stuck is None and p.step is None
    assert read_progress(tmp_path / "progress.json") == p  # written for the parent


def test_rates_and_eta_come_from_the_last_readings(tmp_path: Path) -> None:
    s = _session(tmp_path)
    watch = ProgressWatch(s)
    watch.read(100.0)
    for i in range(20):
        s.live.take(_record(i))
    p = watch.read(104.0, final=True)  # 20 requests, 4 output tokens each, in 4 s
    assert (p.requests_per_s, p.output_tok_s, p.rate_window_s) == (5.0, 20.0, 4.0)
    assert p.eta_s == (100 - 20) / 5.0


def test_the_verdict_turns_saturated_as_it_happens(tmp_path: Path) -> None:
    s = _session(tmp_path)
    watch = ProgressWatch(s)
    assert watch.read(1.0).saturated is False
    s.load.figures = (12.5, 40.0)  # the loop lags past LAG_P99_LIMIT_MS
    p = watch.read(2.0)
    assert p.saturated is True and p.verdict == (
        "saturated: event-loop lag p99 12.5 ms > 10 ms")
    s.load.figures = (None, None)  # nothing measured yet
    assert (watch.read(3.0).saturated, watch.read(3.0).verdict) == (None, "not measured")


def test_a_distributed_master_says_unknown_not_its_own_lag(tmp_path: Path) -> None:
    s = _session(tmp_path)
    s.load.figures = (50.0, 99.0)  # the master's own: not the workers'
    p = ProgressWatch(s, distributed=True).read(1.0)
    assert (p.saturated, p.loop_lag_p99_ms, p.cpu_pct) == (None, None, None)
    assert p.verdict == DISTRIBUTED_VERDICT


def test_duration_step_and_stuck_are_read(tmp_path: Path) -> None:
    report = StuckReport(30.0, 8, 5, 3, 42.0)
    s = _session(tmp_path, stuck_report=lambda: report)
    s.scenario = SimpleNamespace(duration_s=40.0, requests=None)
    s.clock = SimpleNamespace(duration_began_ns=time.perf_counter_ns() - 25_000_000_000,
                              step=(2, 4, "8 users"))
    s.ended_by = "duration"
    # nothing in flight: a report (a master's merge of its workers' last ones) is not shown
    assert ProgressWatch(s).read(time.perf_counter()).stuck is None
    for _ in range(2):  # the warm-ups, done; then one measured request in flight: it is
        s.budget.give_back(s.budget.take())
    assert s.budget.take() is not None and s.budget.in_flight == 1
    p = ProgressWatch(s).read(time.perf_counter())
    assert p.phase == "finishing" and p.stuck == report
    assert (p.step, p.steps, p.step_load) == (2, 4, "8 users")
    assert p.duration_elapsed_s is not None and 25.0 <= p.duration_elapsed_s < 35.0
    assert p.eta_s == 40.0 - p.duration_elapsed_s


def test_an_agent_replay_snapshot_counts_its_jobs(tmp_path: Path) -> None:
    """Jobs in flight are the budget's starts not over; completed, cut and the latency
    p50 the live job figures' (`jobfigures.py`); the amount is jobs of the budget's."""
    from anvil_metrics.live.jobfigures import JobFigures

    budget = RequestBudget(None, 0, [512], conversations=3)
    jobs = JobFigures(3, in_flight=lambda: budget.starts_going)
    s = _session(tmp_path)
    s.budget, s.live = budget, LiveStats("r1", None, jobs)
    s.scenario = SimpleNamespace(duration_s=None, requests=None)
    first = [budget.take() for _ in range(2)]  # two jobs started
    r = _record(0)
    s.live.take(RequestRecord(**{**{f: getattr(r, f) for f in r.__struct_fields__},
                                 "extra": {"job": first[0].start}}))
    s.live.job_ended(job=first[0].start, answered=1, completed=True)
    budget.give_back(first[0], conversation_over=True)
    p = ProgressWatch(s).read(time.perf_counter(), final=True)
    assert (p.jobs_planned, p.jobs_completed, p.jobs_cut, p.jobs_in_flight) == (3, 1, 0, 1)
    latency_ms = (r.end_ns - r.start_ns) / 1e6
    assert abs(p.job_latency_p50_ms - latency_ms) <= SKETCH_REL_ERROR * latency_ms
    plain = ProgressWatch(_session(tmp_path)).read(time.perf_counter())
    assert plain.jobs_planned is None and plain.jobs_completed is None
