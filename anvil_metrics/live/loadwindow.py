"""One load process's own health over its load window: loop lag, CPU and the verdict.

Why here and not beside the verdict's rules (`post/saturation.py`): measuring needs the
running event loop (`lagmon`) and the C heap's trimmer (`memtrim`), which belong to a live
run; the rules that judge the figures are plain functions a post-processor and `verify`
use without gevent. A single process's `RunSession` and each distributed worker's
`WorkerSession` both measure through `LoadWindow`.
"""

from __future__ import annotations

import time
from typing import Any

from anvil_metrics.live.lagmon import LoopLagMonitor
from anvil_metrics.live.memtrim import Trimmer
from anvil_metrics.post.saturation import verdict, verdict_text

CPU_MIN_WINDOW_S = 5.0  # the live CPU share is judged over at least this much load


class LoadWindow:
    """One load process's own figures over its load window: loop lag (a `LoopLagMonitor`)
    and CPU from `begin()` to `end()`, with the verdict. A single process's `RunSession`
    and each distributed worker's `WorkerSession` both use it; `end()` is idempotent.
    Meanwhile the C heap's free pages go back to the system once a minute (`memtrim.py`):
    a long run's resident memory stays flat."""

    def __init__(self) -> None:
        self.lag = LoopLagMonitor()
        self.trimmer = Trimmer()
        self.health: dict[str, Any] | None = None
        self.started = False
        self._cpu0_s = time.process_time()
        self._wall0_s = time.perf_counter()
        self._load0_ns = time.perf_counter_ns()

    def begin(self) -> None:
        """The load starts now (set-up stalls, e.g. a final garbage collection, are not
        load)."""
        self.started = True
        self.lag.start()
        self._cpu0_s = time.process_time()
        self._wall0_s = time.perf_counter()
        self._load0_ns = time.perf_counter_ns()
        self.trimmer.start()

    def so_far(self) -> tuple[float | None, float | None]:
        """(loop lag p99 ms, CPU % of one core) since `begin()`, read while the load goes
        (the live progress: `progresswatch.py`); (None, None) before it began, and the CPU
        None over its first CPU_MIN_WINDOW_S (the set-up's last work would read as 100 %)."""
        if not self.started:
            return None, None
        wall_s = time.perf_counter() - self._wall0_s
        cpu_s = time.process_time() - self._cpu0_s
        return self.lag.summary().p99_ms, (cpu_s / wall_s * 100 if wall_s >= CPU_MIN_WINDOW_S
                                           else None)

    def end(self) -> dict[str, Any]:
        """Freeze the figures (the load is over; shutting down is not load) and return
        them: the `client` block's keys, plus `load_s`/`cpu_s` for the raw `run_end`."""
        if self.health is not None:
            return self.health
        self.trimmer.stop()
        lag = self.lag.stop()
        wall_s = time.perf_counter() - self._wall0_s
        cpu_s = time.process_time() - self._cpu0_s
        cpu = cpu_s / wall_s * 100 if wall_s > 0 else None
        lag_json = lag.as_json()
        saturated, reasons = verdict(lag_json.get("p99"), cpu)
        if lag.max_at_ns is not None:  # when the worst stall happened, for diagnosis
            lag_json["max_at_s"] = round((lag.max_at_ns - self._load0_ns) / 1e9, 3)
        lag_json["stalls"] = [[round((at - self._load0_ns) / 1e9, 3), round(late / 1e6, 2)]
                              for at, late in self.lag.stalls]  # [s into the load, ms late]
        self.health = {"loop_lag_ms": lag_json, "cpu_pct": cpu,
                       "achieved_concurrency": None, "saturated": saturated,
                       "verdict": verdict_text(saturated, reasons),
                       "load_s": wall_s, "cpu_s": cpu_s}
        return self.health
