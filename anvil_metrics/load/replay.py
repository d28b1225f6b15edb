"""A trace replayed as load: `--trace FILE` and its flags, and the schedule its timestamps give
(and `--dataset`'s place in the scenario, checked the same way before any load).

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
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from anvil_metrics.errors import UsageError
from anvil_metrics.load.dataset import DatasetPlan
from anvil_metrics.load.scenario import Scenario
from anvil_metrics.load.trace import MOONCAKE_BLOCK_TOKENS, TracePlan, TraceRequest


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


# flags a replay cannot have: its arrivals, count and sizes are the trace's
_NOT_WITH_TRACE = (("rate", "--rate"), ("rates", "--rates"), ("steps", "--steps"),
                   ("duration", "--duration"))


def replay_scenario(sc: Scenario, v: Mapping[str, Any]) -> Scenario:
    """`sc` replaying `--trace` (`v`: the typed options): the trace is read and checked
    here, so a bad line stops the run before any load; its request count is the budget
    (`--requests N`, like `--trace-limit N`, replays the first N)."""
    for dest, flag in _NOT_WITH_TRACE:
        if v.get(dest) is not None:
            raise UsageError(f"{flag} is not allowed with --trace: a replay's arrivals, "
                             "request count and sizes are the trace's (use --trace-limit, "
                             "--trace-speed)")
    if sc.conversation is not None or sc.shared_prefix_burst:
        raise UsageError(f"--trace is not allowed with {sc.source or 'the scenario'}: its "
                         "[conversation] or shared-prefix bursts make the load itself")
    if sc.endpoint != "chat":
        raise UsageError(f"--trace is not allowed with --endpoint {sc.endpoint}: a trace's "
                         "prompts are chat completions (--endpoint chat)")
    if sc.mix is not None:
        raise UsageError(f"--trace is not allowed with {sc.source or 'the scenario'}: its "
                         "[[request_class]] or [models] shape each request, as the trace does")
    limits = [n for n in (v.get("trace_limit"), v.get("requests")) if n is not None]
    plan = TracePlan(v["trace"], v.get("trace_format"), v.get("trace_speed") or 1.0,
                     min(limits) if limits else None,
                     v.get("trace_block") or MOONCAKE_BLOCK_TOKENS,
                     v.get("trace_model"), v.get("trace_window"))
    reqs = plan.read()
    return replace(sc, trace=plan, requests=len(reqs), warmup_requests=0, arrivals=None,
                   duration_s=None)


def dataset_scenario(sc: Scenario, v: Mapping[str, Any]) -> Scenario:
    """`sc` sending `--dataset`'s prompts (`v`: the typed options), read and checked here so
    a bad entry stops the run before any load."""
    if sc.trace is not None or sc.shared_prefix_burst:
        raise UsageError("--dataset is not allowed with --trace or shared-prefix bursts: "
                         "those make their own prompts")
    if sc.endpoint != "chat":
        raise UsageError(f"--dataset is not allowed with --endpoint {sc.endpoint}: a "
                         "dataset's prompts are chat completions (--endpoint chat)")
    if sc.mix is not None:
        raise UsageError(f"--dataset is not allowed with {sc.source or 'the scenario'}: its "
                         "[[request_class]] or [models] shape each request, as the dataset "
                         "does")
    plan = DatasetPlan(v["dataset"], v.get("dataset_format"))
    plan.read()
    return replace(sc, dataset=plan)
