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

from anvil_metrics.load.agentread import read_jobs
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
        return replace(sc, trace=replace(sc.trace, jobs=sc.trace.jobs or len(jobs)))
    limits = [n for n in (sc.trace.limit, sc.requests) if n is not None]
    plan = replace(sc.trace, limit=min(limits) if limits else None)
    return replace(sc, trace=plan, requests=len(plan.read()))

