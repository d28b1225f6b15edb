"""The live job figures (`live/jobfigures.py`), held to jobs built by hand: a completed
job is counted once its end is told and all its answered requests' records have arrived,
in either order; a cut one once its end or its first record is in, never twice; its
latency is its first start (its due in an open loop) to its last answer's end; in flight
is the budget's; the final figures are the file's block; a run without agent jobs shows
none (LiveStats, the tab's rows)."""

from __future__ import annotations

from anvil_metrics.live.figures import LiveStats
from anvil_metrics.live.jobfigures import JobFigures
from anvil_metrics.live.webui import job_rows, tab_rows
from anvil_metrics.records import Failure, RequestRecord

MS = 1_000_000


def _rec(i: int, job: int, start_ms: float, end_ms: float, *, delay_ms: float = 0,
         failed: bool = False, warmup: bool = False) -> RequestRecord:
    start, end = round(start_ms * MS), round(end_ms * MS)
    return RequestRecord(
        request_index=i, start_ns=start, end_ns=end, first_output_ns=None if failed else end,
        first_content_ns=None if failed else end, planned_context_tokens=64,
        content_chunks=0 if failed else 1, chunk_deltas_ns=() if failed else (end - start,),
        usage=None if failed else {"prompt_tokens": 64, "completion_tokens": 1},
        failure=Failure("http_error", "boom", 500) if failed else None, warmup=warmup,
        extra={"job": job, "session": 0, "turn": 1, "start_delay_ns": round(delay_ms * MS)})


def test_a_job_counts_once_its_end_and_all_its_records_are_in_either_order() -> None:
    jobs = JobFigures(4, in_flight=lambda: 2)
    jobs.take(_rec(0, 0, 1000, 1100))
    jobs.take(_rec(1, 0, 1050, 1400))  # a sub-agent's, ends last
    assert jobs.snapshot()["completed"] == 0  # its end not told yet
    jobs.ended(0, 3, True)
    assert jobs.snapshot()["completed"] == 0  # one of its 3 records still on its way
    jobs.take(_rec(2, 0, 1200, 1300))
    # job 1: its end told before any record (a worker's message ahead of its records)
    jobs.ended(1, 1, True)
    jobs.take(_rec(3, 1, 2000, 2250))
    jobs.take(_rec(4, 2, 3000, 3100, warmup=True))  # a warm-up is no job's request
    snap = jobs.snapshot()
    assert snap == {"planned": 4, "in_flight": 2, "completed": 2, "cut": 0,
                    "latency_p50_ms": snap["latency_p50_ms"],
                    "latency_p95_ms": snap["latency_p95_ms"], "exact": False}
    # latencies 400 ms (1000 → 1400) and 250 ms: nearest-rank p50 250, p95 400 (within 1 %)
    assert abs(snap["latency_p50_ms"] - 250) <= 2.5
    assert abs(snap["latency_p95_ms"] - 400) <= 4


def test_a_failed_request_or_an_unfinished_job_is_cut_and_has_no_latency() -> None:
    jobs = JobFigures(None)
    jobs.take(_rec(0, 5, 0, 10))
    jobs.ended(5, 1, False)  # its second request failed: cut at once, whatever comes later
    jobs.take(_rec(1, 5, 10, 20, failed=True))  # its failure's record, late: ignored
    jobs.take(_rec(2, 6, 0, 10))
    jobs.ended(6, 1, False)  # stopped between two turns: all it sent answered, still cut
    jobs.ended(7, 0, False)  # nothing answered and no record seen: not counted yet
    snap = jobs.snapshot()
    assert (snap["completed"], snap["cut"], snap["latency_p50_ms"]) == (0, 2, None)
    jobs.take(_rec(3, 7, 0, 5, failed=True))  # its failed first request: started, cut
    jobs.take(_rec(4, 7, 0, 5, failed=True))  # (another would be ignored)
    jobs.ended(8, 0, False)  # never sent a measured request: never counted
    assert (jobs.snapshot()["completed"], jobs.snapshot()["cut"]) == (0, 3)
    assert jobs.snapshot()["in_flight"] is None  # no budget to read


def test_an_open_loop_counts_from_the_first_due() -> None:
    for from_due, want in ((True, 130.0), (False, 100.0)):
        jobs = JobFigures(1, from_due=from_due)
        jobs.take(_rec(0, 0, 1000, 1050, delay_ms=30))  # due at 970
        jobs.take(_rec(1, 0, 1060, 1100, delay_ms=2))
        jobs.ended(0, 2, True)
        got = jobs.snapshot()["latency_p50_ms"]
        assert abs(got - want) <= want * 0.01, (from_due, got)


def test_the_final_figures_are_the_files_block() -> None:
    jobs = JobFigures(3, in_flight=lambda: 1)
    jobs.take(_rec(0, 0, 0, 100))
    jobs.ended(0, 1, True)
    jobs.finish({"completed": 2, "cut": 1, "latency_p50_ms": 98.5, "latency_p95_ms": 120.25})
    assert jobs.snapshot() == {"planned": 3, "in_flight": 0, "completed": 2, "cut": 1,
                               "latency_p50_ms": 98.5, "latency_p95_ms": 120.25,
                               "exact": True}
    kept = JobFigures(3)
    kept.take(_rec(0, 0, 0, 100))
    kept.ended(0, 1, True)
    kept.finish(None)  # no block in the file (none built): the running figures stay
    assert kept.snapshot()["completed"] == 1


def test_live_stats_feeds_its_jobs_from_records_and_ends_and_shows_them() -> None:
    live = LiveStats("run", None, JobFigures(2, in_flight=lambda: 0))
    live.take(_rec(0, 0, 0, 40))
    live.job_ended(job=0, answered=1, completed=True)  # before its record was derived
    live.take(_rec(1, 1, 0, 50, failed=True))
    live.job_ended(job=1, answered=1, completed=False)
    snap = live.snapshot()
    assert (snap["jobs"]["completed"], snap["jobs"]["cut"]) == (1, 1)
    assert abs(snap["jobs"]["latency_p50_ms"] - 40) <= 0.4
    rows = {r["metric"]: r for r in tab_rows(snap)}
    assert rows["agent jobs completed (of 2 planned)"]["count"] == 1
    assert rows["agent jobs cut (a request failed or was never sent)"]["count"] == 1
    latency = rows["job latency, completed jobs (first start to last answer)"]
    assert latency["count"] == 1 and abs(latency["p50"] - 40) <= 0.4
    plain = LiveStats("run", None)  # any other run: no job figures anywhere
    plain.take(_rec(0, 0, 0, 40))
    plain.job_ended(job=0, answered=1, completed=True)
    assert plain.snapshot()["jobs"] is None and job_rows(None) == []
    assert not any("job" in r["metric"] for r in tab_rows(plain.snapshot()))
