"""The greenlet that reads a run's progress once a second and writes `progress.json`.

Why a greenlet of its own, off the hot path: the figures are already kept live by the
session's pieces (`figures.LiveStats`: counts, failures, sketches; the request budget's in
flight; `runclock.RunClock`'s duration and step; `loadwindow.LoadWindow`'s loop lag and
CPU; the stuck-request watch), so a snapshot is a handful of reads, once a second — nothing
is added to a request's path. The records that ended since the last tick are derived by
`LiveStats`'s idle-time drainer, a slice at a time (`LiveStats.settle`; the same derivation
the web UI's tab runs), so a reading's counts may be a second behind, and the last reading
(`final`) has them all: deriving them at the tick stalled every stream (at 256 streams the
loop lag max went 24 -> 73 ms with hundreds at once; the lag p99 1.32 ms against 0.90 ms
without the progress with up to 63).

It writes the snapshot (`progress.Progress`) to `<run_dir>/progress.json` for `anvil run`'s
parent, which draws it, and hands it to `on_snapshot` (the plugin's in-process display or
plain log line, `runs/display.py`). In a distributed run's master the workers' loop lag is
not known until they report at the end: the client verdict is then None ("unknown live"),
never the master's own figures passed off as the run's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gevent
import msgspec

from anvil_metrics.live.jobfigures import JobFigures
from anvil_metrics.live.progress import (
    CANCELLED_KINDS,
    PROGRESS_FILE,
    Progress,
    RateWindow,
    eta_s,
    write_progress,
)
from anvil_metrics.live.stuck import StuckReport
from anvil_metrics.post.saturation import verdict, verdict_text

log = logging.getLogger("anvil")
TICK_S = 1.0
DISTRIBUTED_VERDICT = "unknown live (the workers' loop lag is reported at the end)"


class ProgressWatch:
    """Reads `session` (a `session.RunSession`) once a tick, from `start()` to `stop()`."""

    def __init__(self, session: Any, *, distributed: bool = False,
                 on_snapshot: Callable[[Progress], None] | None = None,
                 tick_s: float = TICK_S) -> None:
        self.session = session
        self.distributed = distributed
        self.on_snapshot = on_snapshot
        self.tick_s = tick_s
        self.path: Path = Path(session.run_dir) / PROGRESS_FILE
        self.rates = RateWindow()
        self.t0_s = time.perf_counter()
        self.latest: Progress | None = None
        self._greenlet: gevent.Greenlet | None = None

    def start(self) -> None:
        if self._greenlet is None:
            self._greenlet = gevent.spawn(self._run)

    def stop(self) -> None:
        """No more readings (idempotent); the last one stays in the file."""
        g, self._greenlet = self._greenlet, None
        if g is not None:
            g.kill(block=False)

    def _run(self) -> None:
        tick = 0
        while True:
            try:
                self.tick()
            except Exception:  # a display must never end a measurement: say so, stop showing
                log.exception("anvil: the live progress failed; the run goes on without it")
                return
            tick = max(tick + 1, int((time.perf_counter() - self.t0_s) / self.tick_s))
            gevent.sleep(max(0.0, self.t0_s + tick * self.tick_s - time.perf_counter()))

    def tick(self, final: bool = False) -> Progress:
        """One reading: made, written and handed on; `final`: the load is over, every record
        is counted (`LiveStats.settle`)."""
        p = self.read(time.perf_counter(), final)
        self.latest = p
        try:
            write_progress(self.path, p)
        except OSError as e:  # a full disk: the run goes on, without its progress file
            log.warning("anvil: could not write %s: %s", self.path, e)
        if self.on_snapshot is not None:
            self.on_snapshot(p)
        return p

    def read(self, now_s: float, final: bool = False) -> Progress:
        """The snapshot at `now_s` (`perf_counter`); `final`: with every record derived."""
        s = self.session
        live, budget, sc = s.live, s.budget, s.scenario
        in_flight = budget.in_flight + budget.warmups_in_flight  # a stuck warm-up is shown too
        live.settle(final)
        kinds = dict(live.failure_kinds)
        cancelled = sum(kinds.pop(k, 0) for k in CANCELLED_KINDS)
        per_s, tok_s, span_s = self.rates.add(now_s, live.completed, live.output_tokens)
        ttft = live.values["ttft_ms"].percentiles((50, 95))
        decode = live.values["decode_tok_s"].percentiles((50,))
        lag_p99, cpu = (None, None) if self.distributed else s.load.so_far()
        saturated, reasons = verdict(lag_p99, cpu)
        began = s.clock.duration_began_ns
        step = s.clock.step
        phase = ("finishing" if s.ended_by is not None else
                 "warm-up" if live.warmups < budget.warmup else "running")
        p = Progress(
            run_id=s.run_id, phase=phase, elapsed_s=round(now_s - live.t0_s, 3),
            duration_s=sc.duration_s,
            duration_elapsed_s=None if began is None else round(
                time.perf_counter_ns() / 1e9 - began / 1e9, 3),
            requests_planned=sc.requests, requests_done=live.completed + live.failed,
            warmup_planned=budget.warmup, warmup_done=live.warmups,
            in_flight_requests=in_flight, completed_requests=live.completed,
            failed_by_kind=kinds, cancelled_requests=cancelled,
            requests_per_s=per_s, output_tok_s=tok_s, rate_window_s=span_s,
            ttft_p50_ms=ttft["p50"], ttft_p95_ms=ttft["p95"],
            decode_tok_s_p50=decode["p50"],
            loop_lag_p99_ms=lag_p99, cpu_pct=cpu, saturated=saturated,
            verdict=DISTRIBUTED_VERDICT if self.distributed else verdict_text(
                saturated, reasons),
            step=None if step is None else step[0], steps=None if step is None else step[1],
            step_load=None if step is None else step[2],
            # a master's merged report can outlive the workers' last requests by a second
            stuck=_stuck(s) if in_flight else None, **_jobs(live.jobs))
        return msgspec.structs.replace(p, eta_s=eta_s(p))


def _jobs(jobs: JobFigures | None) -> dict[str, Any]:
    """An agent replay's job figures for the snapshot (none for any other run)."""
    if jobs is None:
        return {}
    j = jobs.snapshot()
    return {"jobs_planned": j["planned"], "jobs_completed": j["completed"],
            "jobs_cut": j["cut"], "jobs_in_flight": j["in_flight"],
            "job_latency_p50_ms": j["latency_p50_ms"]}


def _stuck(session: Any) -> StuckReport | None:
    """The stuck-request watch's report, where the session has one (issue 47, item 2)."""
    report = getattr(session, "stuck_report", None)
    return report() if callable(report) else None
