"""Running figures of the run in progress, for the web UI's LLM tab: bounded sketches while
it runs, the file's exact figures once it is over.

Why its own module: Locust's own percentiles come from response-time buckets rounded to
about two significant digits, and an LLM stream has several moments Locust does not know.
`LiveStats` is fed every finished raw record (on the process that writes `requests.jsonl`:
the single Locust process, or the master of a distributed run) when a web UI shows them
(`RunOptions.live_figures`: a headless run, which nobody watches, spends nothing on them)
and derives the rows of the records that arrived together with the same functions as
`benchmark.json` (`derive.rows_from_raw`, the catalogue's formulas). Which figures it shows,
and their labels, are the catalogue's (`catalog.LIVE_FIELDS`).

Memory, now that runs last hours or days: nothing it keeps grows with the number of
requests. Each metric's values go into a log-binned sketch (`sketch.Sketch`): a percentile
read from it is within SKETCH_REL_ERROR (under 1 %) of the exact nearest-rank one, and its
size depends on the spread of the values (a few hundred bins), never on how many there are.
An exact store costs at least 8 bytes a value per metric, 56 bytes a request for the seven
live metrics: +10 MB in a 30-minute soak at ~100 requests/s, 0.4 GB over a day (measured
with `benchmarks/soak.py`: exact float64 arrays grew the load process 80 bytes a request).
When the run is over, `finish(rows)` takes the exact figures from the rows `benchmark.json`
was built from, so the final tab equals the file bit for bit. The charts' series and the flow
are bounded the same way (`series.py`). The page and the tab say which figures are sketched
and which exact (`accuracy`).

Two more views for the `/anvil/` page, both bounded:

- the TTFT CDF (`ttft_cdf`): the values at the nearest-rank percentiles 0, 1, …, 100
  (`CDF_PERCENTILES`: 101 points, whatever the number of requests) of `ttft_ms` over the
  measured requests completed so far. While the run goes they are read from the table's own
  sketch (within 1 %; p0 and p100 are its exact min and max); at the end from the file's
  rows with `stats.nearest_rank_columns`, the function the table and `benchmark.json` use,
  so its p50 and p95 points are `ttft_p50_ms` and `ttft_p95_ms` bit for bit.
- the flow (`series.Flow`): per second of the run, the measured requests in flight and what
  finished in it; in flight is read from the request budget by one greenlet here, once a
  tick (`start_flow`).

An agent replay's job figures (jobs in flight, completed, cut, job latency) are kept beside
them, from the same records and the jobs' ends (`jobfigures.JobFigures`).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gevent
import numpy as np

from anvil_metrics import catalog
from anvil_metrics.live.control import InFlight
from anvil_metrics.live.jobfigures import JobFigures
from anvil_metrics.live.series import SERIES_FIELDS, Flow, Series
from anvil_metrics.live.sketch import Sketch
from anvil_metrics.post import stats
from anvil_metrics.post.derive import RowColumns, rows_from_raw
from anvil_metrics.post.rawcolumns import COL, ColumnBuilder
from anvil_metrics.records import RequestRecord

LIVE_PERCENTILES = (50, 90, 95, 99)


@dataclass(frozen=True, slots=True)
class LiveMetric:
    """One per-request figure shown live: row field, label and unit."""

    field: str
    label: str
    unit: str


LIVE_METRICS: tuple[LiveMetric, ...] = tuple(
    LiveMetric(f.name, f.label, f.unit) for f in catalog.LIVE_FIELDS)

MAX_PENDING = 1024
DRAIN_BATCH = 64  # records derived together when the loop is idle (snapshots take all)
# while an open loop's next request waits for its due time: slices of DRAIN_SLICE records,
# each started only with ROOM_FACTOR times the last slice's duration left before that time
# (else looked at again after WAIT_S); past FORCE_PENDING waiting records a slice runs anyway
DRAIN_SLICE = 8
ROOM_FACTOR = 1.5
FIRST_SLICE_NS = 1_000_000  # the guess before any slice was timed
WAIT_S = 0.001
FORCE_PENDING = 4 * DRAIN_BATCH
ACCURACY_RUNNING = ("table and charts: nearest-rank percentiles within 1 % (log-binned "
                    "sketches of all {n} completed requests); exact in benchmark.json")
ACCURACY_FINAL = ("table and TTFT CDF: exact nearest-rank percentiles over all {n} completed "
                  "requests, from benchmark.json's rows; p50 charts: per-bucket medians "
                  "within 1 %")
CDF_FIELD = "ttft_ms"
CDF_PERCENTILES = tuple(range(101))  # the CDF's points: nearest-rank p0, p1, …, p100


def ttft_cdf(count: int, values: list[float | None]) -> dict[str, Any]:
    """The TTFT CDF's payload from the values at CDF_PERCENTILES (nearest rank) of `count`
    values: point i is (values[i], percent[i] / 100), the fraction of requests whose TTFT is
    at most values[i] (at least percent[i] %); no points without values."""
    field = next(m for m in LIVE_METRICS if m.field == CDF_FIELD)
    shown = count > 0
    return {"field": field.field, "label": field.label, "unit": field.unit, "count": count,
            "percent": list(CDF_PERCENTILES) if shown else [],
            "value": list(values) if shown else []}


class LiveStats:
    """Exact figures over the measured records seen so far (warm-ups are only counted)."""

    def __init__(self, run_id: str, requests_planned: int | None,
                 jobs: JobFigures | None = None) -> None:
        self.run_id = run_id
        self.jobs = jobs  # an agent replay's (None: any other run)
        self.requests_planned = requests_planned
        self.t0_s = time.perf_counter()
        self.completed = 0
        self.failed = 0
        self.warmups = 0
        self.output_tokens = 0
        self.failure_kinds: Counter[str] = Counter()
        self.values: dict[str, Sketch] = {m.field: Sketch() for m in LIVE_METRICS}
        self._final: dict[str, dict[str, Any]] | None = None  # exact, from the file's rows
        self.series = Series()
        self.flow = Flow()
        self._final_cdf: dict[str, Any] | None = None  # exact, from the file's rows
        self._sampler: gevent.Greenlet | None = None
        self._read_in_flight: Callable[[], InFlight] | None = None
        self._last_reading: InFlight | None = None
        self.finished = False
        self._end_s: float | None = None
        self._pending: list[tuple[RequestRecord, float]] = []
        self._drainer: gevent.Greenlet | None = None
        self._next_due_ns: Callable[[], int | None] | None = None
        self._slice_ns = FIRST_SLICE_NS

    def finish(self, rows: RowColumns | None = None,
               jobs_block: dict[str, Any] | None = None) -> None:
        """The run has ended: the clock stops; with `rows` (those `benchmark.json` was built
        from), the table's figures become the exact ones, and with `jobs_block` (its
        `jobs` block) the job figures."""
        self.finished = True
        if self.jobs is not None:
            self._drain()
            self.jobs.finish(jobs_block)
        if self._end_s is None:
            self._end_s = time.perf_counter()
        self.end_flow()
        if rows is not None:
            self._drain()
            ttft = rows.values(CDF_FIELD)
            ttft = ttft[~np.isnan(ttft)]
            self._final_cdf = ttft_cdf(len(ttft), stats.nearest_rank_columns(
                ttft, CDF_PERCENTILES))
            self._final = {}
            for m in LIVE_METRICS:
                col = rows.values(m.field)
                col = col[~np.isnan(col)]
                ps = (*LIVE_PERCENTILES, 0, 100)
                got = stats.nearest_rank_columns(col, ps)
                self._final[m.field] = {"count": len(col), **{
                    f"p{p}": v for p, v in zip(LIVE_PERCENTILES, got, strict=False)},
                    "min": got[-2], "max": got[-1]}

    def start_flow(self, read_in_flight: Callable[[], InFlight],
                   next_due_ns: Callable[[], int | None] | None = None) -> None:
        """Read the budget's in-flight figures (`RequestBudget.read_in_flight`) now and once
        a tick, on the tick, until `end_flow`: one greenlet, one reading a second.
        `next_due_ns` (`RequestBudget.next_due_ns`): when the next open-loop request falls
        due, which the derivation of pending records keeps clear of (`_drain_when_idle`)."""
        self._next_due_ns = next_due_ns
        if self._sampler is None and self.flow.end_s is None:
            self._read_in_flight = read_in_flight
            self._last_reading = read_in_flight()
            self._sampler = gevent.spawn(self._sample_ticks)

    def _sample_ticks(self) -> None:
        tick, tick_s = 1, self.flow.tick_s
        while self.flow.end_s is None:  # ended by end_flow (which also kills it)
            gevent.sleep(max(0.0, self.t0_s + tick * tick_s - time.perf_counter()))
            self.flow.sample(tick * tick_s, *self._reading())
            # a hub stalled past the next tick skips it (the reading spans the stall)
            tick = max(tick + 1, int((time.perf_counter() - self.t0_s) / tick_s) + 1)

    def _reading(self) -> tuple[float, float, int]:
        """The budget's figures since the previous reading: request·s in flight, over how
        many seconds, and the most at once."""
        assert self._read_in_flight is not None and self._last_reading is not None
        now, last = self._read_in_flight(), self._last_reading
        self._last_reading = now
        return (now.area_ns - last.area_ns) / 1e9, (now.t_ns - last.t_ns) / 1e9, now.peak

    def end_flow(self) -> None:
        """The load is over (every record is in): the flow's last reading and its end."""
        if self._sampler is not None:
            self._sampler.kill(block=False)
            self._sampler = None
        if self.flow.end_s is None:
            self._drain()
            t_s = time.perf_counter() - self.t0_s
            if self._read_in_flight is None:  # never sampled (no load was started)
                self.flow.end_unread(t_s)
            else:
                self.flow.end(t_s, *self._reading())

    def take(self, record: RequestRecord) -> None:
        """Take one finished raw record (call it where `requests.jsonl` is written). Only
        queued here, with its arrival time: the derivation runs when the event loop is
        idle (or a snapshot is asked for), not at the moment a stream ends, when other
        streams' stamps are due, and DRAIN_BATCH records at a time: rows are derived as
        columns (one numpy pass costs ~0.25 ms however few rows it holds; a batch of 64,
        ~10 µs a row). At most MAX_PENDING records wait (memory stays bounded however busy
        the loop is)."""
        self._pending.append((record, time.perf_counter() - self.t0_s))
        if len(self._pending) >= MAX_PENDING:
            self._drain()
        elif len(self._pending) >= DRAIN_BATCH and self._drainer is None:
            self._drainer = gevent.spawn(self._drain_when_idle)

    def _drain_when_idle(self) -> None:
        """Derive the pending records when the event loop is idle, a slice of DRAIN_SLICE at
        a time (one idle turn each); while an open loop's next request waits for its due
        time, each slice is started only with room for it before that time. Why: a batch
        of 64 took ~2.6 ms here, and at 500 req/s every 64th request went out that late
        (lag p99 2.8 ms); a closed loop's streams waited as long (256 streams with the
        live progress: lag p99 1.32 ms against 0.90 without, `benchmarks/progress_cost.py`)."""
        try:
            while self._pending:
                gevent.idle()
                due_ns = None if self._next_due_ns is None else self._next_due_ns()
                if due_ns is None:
                    self._drain(DRAIN_SLICE)
                    continue
                room_ns = due_ns - time.perf_counter_ns()
                if (room_ns < ROOM_FACTOR * self._slice_ns
                        and len(self._pending) < FORCE_PENDING):
                    gevent.sleep(WAIT_S)  # past that due time; then look again
                    continue
                t_ns = time.perf_counter_ns()
                self._drain(DRAIN_SLICE)
                self._slice_ns = time.perf_counter_ns() - t_ns
        finally:
            self._drainer = None

    def _drain(self, most: int | None = None) -> None:
        """Derive the first `most` pending records (all by default)."""
        if most is None or most >= len(self._pending):
            pending, self._pending = self._pending, []
        else:
            pending, self._pending = self._pending[:most], self._pending[most:]
        done = ColumnBuilder()
        arrived: list[float] = []
        for record, t_s in pending:
            if self.jobs is not None:
                self.jobs.take(record)
            if record.warmup:
                self.warmups += 1
            elif record.failure is not None:
                self.failed += 1
                self.failure_kinds[record.failure.kind] += 1
                self.flow.finished(t_s, completed=False)
            else:
                done.add_record(0, record)
                arrived.append(t_s)
        if not arrived:
            return
        table = done.table()
        rows = rows_from_raw(table, table[:, COL["request_index"]])
        self.completed += len(rows)
        self.output_tokens += int(rows.counts["output_tokens"].sum())
        for m in LIVE_METRICS:  # as in the file's rows: NaN is null, left out
            col = rows.values(m.field)
            self.values[m.field].extend(col[~np.isnan(col)])
        series = {f: rows.values(f).tolist() for f in SERIES_FIELDS}
        tokens = rows.counts["output_tokens"].tolist()
        for i, t_s in enumerate(arrived):
            self.series.add(t_s, {f: series[f][i] for f in SERIES_FIELDS})
            self.flow.finished(t_s, completed=True, output_tokens=int(tokens[i]))

    def job_ended(self, job: int, answered: int, completed: bool, **_: Any) -> None:
        """An agent job has ended (a listener on `anvil_events.job_end`)."""
        if self.jobs is not None:
            self.jobs.ended(job, answered, completed)

    def settle(self, final: bool = False) -> None:
        """Have the pending records derived: by the idle-time drainer, a slice at a time (the
        progress snapshot's counts once a second, `progresswatch.py`, a second behind at
        most, never a stall of a batch on a busy loop), or now when `final` (the load is
        over: the last reading has every record)."""
        if final:
            self._drain()
        elif self._pending and self._drainer is None:
            self._drainer = gevent.spawn(self._drain_when_idle)

    def bins(self) -> int:
        """Bins held by the table's sketches (what their memory grows with)."""
        return sum(len(v.bins) for v in self.values.values())

    def snapshot(self) -> dict[str, Any]:
        """Everything the LLM tab shows, as JSON-ready values (missing is None)."""
        self._drain()
        metrics = []
        for m in LIVE_METRICS:
            figures = (self._final[m.field] if self._final is not None else
                       {"count": self.values[m.field].n,
                        **self.values[m.field].percentiles(LIVE_PERCENTILES)})
            metrics.append({"field": m.field, "label": m.label, "unit": m.unit, **figures})
        return {
            "run_id": self.run_id,
            "finished": self.finished,
            "elapsed_s": round((self._end_s or time.perf_counter()) - self.t0_s, 3),
            "requests_planned": self.requests_planned,
            "requests": self.completed + self.failed,
            "completed": self.completed,
            "failed": self.failed,
            "warmup_requests": self.warmups,
            "output_tokens": self.output_tokens,
            "failures_by_kind": dict(self.failure_kinds),
            "metrics": metrics,
            "accuracy": (ACCURACY_FINAL if self._final is not None
                         else ACCURACY_RUNNING).format(n=self.completed),
            "exact": self._final is not None,
            "series": self.series.as_json(),
            "ttft_cdf": self._cdf(),
            "flow": self.flow.as_json(),
            "jobs": None if self.jobs is None else self.jobs.snapshot(),
        }

    def _cdf(self) -> dict[str, Any]:
        if self._final_cdf is not None:
            return self._final_cdf
        sketch = self.values[CDF_FIELD]
        got = sketch.percentiles(CDF_PERCENTILES)
        return ttft_cdf(sketch.n, [got[f"p{p}"] for p in CDF_PERCENTILES])
