"""Is the load generator itself the bottleneck? The `client` block's verdict and figures.

Why: a saturated client reports its own lag as server latency (`vllm bench serve` once
reported a 134 s TTFT that was its own). Every run therefore measures its generator and
says so when the generator, not the server, may have set the numbers:

- `saturated` is true when the event loop's lag p99 over the load exceeds
  `LAG_P99_LIMIT_MS` (a stream's stamps can be that late) or the load process used more
  than `CPU_LIMIT_PCT` of one core (it had no headroom left); `verdict` says which. Null
  when neither was measured (a run rebuilt from records without the figures).
- `achieved_concurrency` = Σ request durations / `wall_clock_ms` over the measured
  requests (Little's law: the time-averaged number of requests in flight), to set against
  the requested `concurrency`.
- `start_delay_ms` {p50, p99, max}: per request, how late it was written to the socket
  after the moment it was due: its user's previous request had ended (or the user had
  started) and its ticket had been handed out. What remains is the client's own work and
  scheduling between two requests of one stream.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from anvil_metrics.post import stats

LAG_P99_LIMIT_MS = 10.0
CPU_LIMIT_PCT = 90.0


def verdict(lag_p99_ms: float | None, cpu_pct: float | None) -> tuple[bool | None, list[str]]:
    """(saturated, reasons) from one load process's loop lag p99 and CPU share."""
    if lag_p99_ms is None and cpu_pct is None:
        return None, []
    reasons = []
    if lag_p99_ms is not None and lag_p99_ms > LAG_P99_LIMIT_MS:
        reasons.append(f"event-loop lag p99 {lag_p99_ms:.1f} ms > {LAG_P99_LIMIT_MS:g} ms")
    if cpu_pct is not None and cpu_pct > CPU_LIMIT_PCT:
        reasons.append(f"CPU {cpu_pct:.0f} % of one core > {CPU_LIMIT_PCT:g} %")
    return bool(reasons), reasons


def health_verdict(health: Mapping[str, Any]) -> tuple[bool | None, list[str]]:
    """`verdict` of a health dict ({loop_lag_ms: {p99}, cpu_pct})."""
    lag = health.get("loop_lag_ms") or {}
    p99 = lag.get("p99") if isinstance(lag, Mapping) else None
    cpu = health.get("cpu_pct")
    return verdict(p99 if isinstance(p99, int | float) else None,
                   cpu if isinstance(cpu, int | float) else None)


def achieved_concurrency(start_ns: Any, end_ns: Any, has_end: Any,
                         wall_clock_ms: float | None) -> float | None:
    """Σ (end − start) / wall clock over the measured records that have an end (numpy int64
    stamps; `has_end` a bool mask); the busy time is summed exactly, as Python integers."""
    if not wall_clock_ms:
        return None
    busy_ns = sum((end_ns[has_end] - start_ns[has_end]).tolist())
    return busy_ns / 1e6 / wall_clock_ms


def start_delay_ms(delay_ns: Any) -> dict[str, float | None] | None:
    """p50/p99/max, ms, of the measured records' `extra.start_delay_ns` (a numpy int64
    column of those that have one, in record order); None if none has it."""
    if not len(delay_ns):
        return None
    values = delay_ns / 1e6  # float64, each int64 → double then ÷ as Python's int / float
    p50, p99 = stats.nearest_rank_columns(values, (50, 99))
    return {"p50": p50, "p99": p99, "max": float(values.max())}


def verdict_text(saturated: bool | None, reasons: Sequence[str]) -> str:
    if saturated is None:
        return "not measured"
    if not saturated:
        return "ok"
    return "saturated: " + "; ".join(reasons)


def workers_health(named: list[tuple[str, dict[str, Any]]]) -> dict[str, Any] | None:
    """A distributed run's `client` block from each worker's (name, health figures): the
    worst worker's loop lag (by p99), the highest CPU share, and saturated when any worker
    was (each reason named by its worker); None without any worker's figures."""
    if not named:
        return None

    def p99(h: dict[str, Any]) -> float:
        lag = h.get("loop_lag_ms") or {}
        return lag.get("p99") if isinstance(lag.get("p99"), int | float) else -1.0

    worst = max((h for _, h in named), key=p99)
    cpus = [h["cpu_pct"] for _, h in named if isinstance(h.get("cpu_pct"), int | float)]
    reasons: list[str] = []
    verdicts: list[bool | None] = []
    for name, h in named:
        sat, why = health_verdict(h)
        verdicts.append(sat)
        reasons += [f"worker {name}: {r}" for r in why]
    saturated = (True if any(verdicts) else
                 None if all(v is None for v in verdicts) else False)
    return {"loop_lag_ms": worst.get("loop_lag_ms"), "cpu_pct": max(cpus) if cpus else None,
            "achieved_concurrency": None, "saturated": saturated,
            "verdict": verdict_text(saturated, reasons)}
