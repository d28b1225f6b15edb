"""A trace replayed as load: the schedule its timestamps give, and a scenario's trace (its
`[trace]`, or `--trace FILE` and its flags) and dataset read before any load.

Why apart from `trace.py` (which reads and checks a file, and `anvil trace stats` uses
alone): a replay is an open-loop run whose arrivals are the trace's own. Request k of the
trace (its first `--trace-limit` requests) falls due `(timestamp_k − timestamp_0) /
--trace-speed` after the schedule's origin, to the nanosecond of the millisecond stamps,
and asks for `input_tokens` in (its planned size: its blocks, `prep/traceprompts.py`) and
exactly `output_tokens` out (`max_tokens`, `ignore_eos`, `min_tokens`). `RequestBudget`
hands the tickets out at those due times as it does a `--rate` schedule's, so lag and the
from-due latencies are measured the same way.
"""

from __future__ import annotations

import math
from dataclasses import replace

from anvil_metrics.errors import UsageError
from anvil_metrics.load.agentjob import Job
from anvil_metrics.load.agentread import read_jobs
from anvil_metrics.load.arrivals import Schedule
from anvil_metrics.load.scenario import Scenario
from anvil_metrics.load.trace import TraceRequest


class TraceSchedule:
    """Due offsets of the trace's requests in integer ns from the schedule's origin (the
    `offset_ns` of `arrivals.Schedule`)."""

    def __init__(self, reqs: list[TraceRequest], speed: float) -> None:
        if not (math.isfinite(speed) and speed > 0):
            raise ValueError(f"speed must be a number > 0, got {speed!r}")
        first = reqs[0].timestamp_ms
        self._offsets = [round((r.timestamp_ms - first) * 1e6 / speed) for r in reqs]

    def offset_ns(self, k: int) -> int:
        """When request `k` is due, in ns after the origin (request 0: 0)."""
        return self._offsets[k]


class JobSchedule(TraceSchedule):
    """Agent jobs' starts at their recorded times (`Job.start_s`, `--trace-speed`): start
    k (the run's job k, which replays the trace's job k mod n: `agentread.read_jobs` puts
    them in start order) falls due `(start_k − start_0) / speed` after the origin. Past the
    trace's last job the starts go round again, each round one span and one mean gap later
    (a trace of one job: each round at once)."""

    def __init__(self, jobs: list[Job], speed: float) -> None:
        if not (math.isfinite(speed) and speed > 0):
            raise ValueError(f"speed must be a number > 0, got {speed!r}")
        starts = [j.start_s for j in jobs]
        if not starts or None in starts:
            raise ValueError("every job needs its recorded start (Job.start_s)")
        first = starts[0]
        self._offsets = [round((t - first) * 1e9 / speed) for t in starts]  # type: ignore
        span = self._offsets[-1]
        self._round_ns = span + (span // (len(jobs) - 1) if len(jobs) > 1 else 0)

    def offset_ns(self, k: int) -> int:
        laps, k = divmod(k, len(self._offsets))
        return laps * self._round_ns + self._offsets[k]

    def arrivals(self) -> dict[str, object]:
        """The raw header's `params.load.arrivals`: the trace's own, at the rate it offers
        on average ((n − 1) over the scaled span of one round)."""
        span_s = self._offsets[-1] / 1e9
        rate = (len(self._offsets) - 1) / span_s if span_s > 0 else None
        return {"arrival": "trace", "rate_rps": rate, "burstiness": None, "seed": None}


def read_inputs(sc: Scenario) -> Scenario:
    """`sc` with its trace and dataset read and checked, so a bad line stops the run before
    any load: a replay's budget is the trace's request count (`requests`, like the trace's
    `limit`, replays only the first that many: the plan keeps the lower); an agent
    replay's, its jobs (`--jobs`, else each of the trace's once)."""
    if sc.dataset is not None:
        sc.dataset.read()
    if sc.trace is None:
        return sc
    if sc.trace.agent:  # agent jobs: read and checked here, replayed by `live/agentrun.py`
        jobs = read_jobs(sc.trace.path, sc.trace.fmt)
        untimed = next((j for j in jobs if j.start_s is None), None)
        if sc.trace.job_times and untimed is not None:
            raise UsageError(
                f"--trace-speed {sc.trace.speed:g}: job {untimed.id!r} of "
                f"{sc.trace.path} records no start time (a Weka trace never does; "
                "agent-jsonl: the job line's start_s; otel: its spans' times): replay "
                "these jobs with --agents N or --rate R")
        return replace(sc, trace=replace(sc.trace, jobs=sc.trace.jobs or len(jobs)))
    limits = [n for n in (sc.trace.limit, sc.requests) if n is not None]
    plan = replace(sc.trace, limit=min(limits) if limits else None)
    return replace(sc, trace=plan, requests=len(plan.read()))


def open_loop_schedule(sc: Scenario, trace: list[TraceRequest] | None,
                       jobs: list[Job] | None = None) -> Schedule | TraceSchedule | None:
    """An open loop's due times: the trace's (a replay; agent jobs' recorded starts), the
    `--rate` plan's, or None (a closed loop)."""
    if trace is not None and sc.trace is not None:
        return TraceSchedule(trace, sc.trace.speed)
    if jobs is not None and sc.trace is not None and sc.trace.job_times:
        return JobSchedule(jobs, sc.trace.speed)
    return Schedule(sc.arrivals) if sc.arrivals else None
