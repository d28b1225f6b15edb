"""Running figures of the run in progress, for the web UI's LLM tab: bounded sketches while
it runs, the file's exact figures once it is over.

Why its own module: Locust's own percentiles come from response-time buckets rounded to
about two significant digits, and an LLM stream has several moments Locust does not know.
`LiveStats` is fed every finished raw record (on the process that writes `requests.jsonl`:
the single Locust process, or the master of a distributed run) and derives the rows of the
records that arrived together with the same functions as `benchmark.json`
(`derive.rows_from_raw`, the catalogue's formulas). Which figures it shows, and their
labels, are the catalogue's (`catalog.LIVE_FIELDS`).

Memory, now that runs last hours or days: nothing it keeps grows with the number of
requests. Each metric's values go into a log-binned sketch (`_Sketch`: counts of values
within a factor SKETCH_GAMMA = 1.02 of each other, exact min and max): a percentile read
from it is within SKETCH_REL_ERROR (under 1 %) of the exact nearest-rank one, and its size
depends on the spread of the values (a few hundred bins), never on how many there are. An
exact store costs at least 8 bytes a value per metric, 56 bytes a request for the seven
live metrics: +10 MB in a 30-minute soak at ~100 requests/s, 0.4 GB over a day (measured
with `benchmarks/soak.py`: exact float64 arrays grew the load process 80 bytes a request).
When the run is over, `finish(rows)` takes the exact figures from the rows `benchmark.json`
was built from, so the final tab equals the file bit for bit. The charts' series is
bounded the same way: per bucket of arrival time (at most MAX_BUCKETS, merged pairwise as
the run grows) a sketch of each charted value, shown as the bucket's median. The page and
the tab say which figures are sketched and which exact (`accuracy`).

Two more views for the `/anvil/` page, both bounded:

- the TTFT CDF (`ttft_cdf`): the values at the nearest-rank percentiles 0, 1, …, 100
  (`CDF_PERCENTILES`: 101 points, whatever the number of requests) of `ttft_ms` over the
  measured requests completed so far. While the run goes they are read from the table's own
  sketch (within 1 %; p0 and p100 are its exact min and max); at the end from the file's
  rows with `stats.nearest_rank_columns`, the function the table and `benchmark.json` use,
  so its p50 and p95 points are `ttft_p50_ms` and `ttft_p95_ms` bit for bit.
- the flow (`flow`): per second of the run, the measured requests in flight (their mean
  over the second, time-weighted, and the most at once) and the completed requests,
  failures and output tokens that finished in it (output tok/s and requests/s are those
  over the second's length). In flight comes from the request budget
  (`control.RequestBudget.read_in_flight`: tickets handed out and not yet given back, kept
  with their integral over time and their peak, O(1) a request; on a distributed master,
  tickets granted to a worker and not yet back as a record), read by one greenlet once a
  second (`FLOW_TICK_S`), on the tick; what finished is counted where the records are
  drained, by the time each record arrived. A second is shown once its tick has passed
  (the series lags the run by at most a second), so a rate is never read off part of a
  second, but for the last: the load's end closes it (a piece under half a second joins
  the second before it). At most MAX_FLOW_POINTS points: past that, neighbours merge
  pairwise and the interval doubles (rates and means over the longer interval, the peak
  the larger): 10 minutes at 1 s, then 20 at 2 s, and so on; ~35 kB of JSON at most.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import gevent
import numpy as np

from anvil_metrics import catalog
from anvil_metrics.live.control import InFlight
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

SERIES_FIELDS = ("ttft_ms", "decode_tok_s")
MAX_PENDING = 1024
DRAIN_BATCH = 64  # records derived together when the loop is idle (snapshots take all)
MAX_BUCKETS = 120  # chart points at most (each a sketch of ~100 bins: ~1 MB in all)
SKETCH_GAMMA = 1.02  # a sketch bin holds values within a factor 1.02 of each other
SKETCH_REL_ERROR = (SKETCH_GAMMA - 1) / (SKETCH_GAMMA + 1)  # < 0.01
ACCURACY_RUNNING = ("table and charts: nearest-rank percentiles within 1 % (log-binned "
                    "sketches of all {n} completed requests); exact in benchmark.json")
ACCURACY_FINAL = ("table and TTFT CDF: exact nearest-rank percentiles over all {n} completed "
                  "requests, from benchmark.json's rows; p50 charts: per-bucket medians "
                  "within 1 %")
CDF_FIELD = "ttft_ms"
CDF_PERCENTILES = tuple(range(101))  # the CDF's points: nearest-rank p0, p1, …, p100
FLOW_TICK_S = 1.0  # in flight is read once a tick; the flow's finest interval
MAX_FLOW_POINTS = 600  # the flow's points at most (merged pairwise past that)


T = TypeVar("T")


class _Sketch:
    """Counts of values in log bins of relative width SKETCH_GAMMA (one bin for values
    <= 0), with the exact min and max: a nearest-rank percentile read from it is within
    SKETCH_REL_ERROR of the exact one (the bin's relative middle stands for its values)."""

    __slots__ = ("bins", "n", "lo", "hi")

    def __init__(self) -> None:
        self.bins: Counter[int] = Counter()
        self.n = 0
        self.lo = math.inf
        self.hi = -math.inf

    def add(self, v: float) -> None:
        self.bins[_bin(v)] += 1
        self.n += 1
        self.lo, self.hi = min(self.lo, v), max(self.hi, v)

    def extend(self, values: Any) -> None:
        """Add a float64 array (no NaN: the caller drops missing values)."""
        if not len(values):
            return
        with np.errstate(divide="ignore"):
            keys = np.where(values > 0, np.ceil(np.log(np.where(values > 0, values, 1.0))
                                                / _LOG_GAMMA), _ZERO_BIN).astype(np.int64)
        uniq, counts = np.unique(keys, return_counts=True)
        self.bins.update(dict(zip(uniq.tolist(), counts.tolist(), strict=True)))
        self.n += len(values)
        self.lo, self.hi = min(self.lo, float(values.min())), max(self.hi, float(values.max()))

    def merge(self, other: _Sketch) -> None:
        self.bins.update(other.bins)
        self.n += other.n
        self.lo, self.hi = min(self.lo, other.lo), max(self.hi, other.hi)

    def percentiles(self, ps: tuple[int, ...]) -> dict[str, float | None]:
        """{"p50": …, …, "min": …, "max": …}: nearest rank over the bins (min, max exact, and
        so is a percentile whose rank is the first or the last)."""
        if self.n == 0:
            return {**{f"p{p}": None for p in ps}, "min": None, "max": None}
        wanted = sorted((stats.nearest_rank_index(self.n, p) + 1, p) for p in ps)
        out: dict[str, float | None] = {}
        seen, at = 0, 0
        for key in sorted(self.bins):
            seen += self.bins[key]
            while at < len(wanted) and seen >= wanted[at][0]:
                rank = wanted[at][0]
                value = 0.0 if key == _ZERO_BIN else 2 * SKETCH_GAMMA ** key / (SKETCH_GAMMA + 1)
                # the smallest and the largest value are known exactly
                out[f"p{wanted[at][1]}"] = (self.lo if rank == 1 else self.hi if rank == self.n
                                            else min(max(value, self.lo), self.hi))
                at += 1
        return {**{f"p{p}": out[f"p{p}"] for p in ps}, "min": self.lo, "max": self.hi}

    def median(self) -> float | None:
        return self.percentiles((50,))["p50"]


_LOG_GAMMA = math.log(SKETCH_GAMMA)
_ZERO_BIN = -(1 << 30)


def _bin(v: float) -> int:
    return math.ceil(math.log(v) / _LOG_GAMMA) if v > 0 else _ZERO_BIN


def _pairwise(buckets: dict[int, T], empty: Callable[[], T], merge: Callable[[T, T], T]
              ) -> dict[int, T]:
    """Time buckets of twice the width: bucket k of the result is buckets 2k and 2k+1
    merged (in key order) into `empty()`. How the live series stay bounded."""
    out: dict[int, T] = {}
    for key in sorted(buckets):
        out[key // 2] = merge(out[key // 2] if key // 2 in out else empty(), buckets[key])
    return out


class _Series:
    """Per-time-bucket sketches of a few fields; bucket width doubles to stay bounded."""

    def __init__(self, width_s: float = 1.0) -> None:
        self.width_s = width_s
        self.buckets: dict[int, dict[str, _Sketch]] = {}
        self.counts: dict[int, int] = {}  # completed rows per bucket

    def add(self, t_s: float, row: dict[str, Any]) -> None:
        key = int(t_s // self.width_s)
        bucket = self.buckets.get(key)
        if bucket is None:
            bucket = self.buckets[key] = {f: _Sketch() for f in SERIES_FIELDS}
        self.counts[key] = self.counts.get(key, 0) + 1
        for f in SERIES_FIELDS:
            v = row.get(f)
            if v is not None and not math.isnan(v):
                bucket[f].add(v)
        if len(self.buckets) > MAX_BUCKETS:
            self._coarsen()

    def _coarsen(self) -> None:
        def merge(into: dict[str, _Sketch], bucket: dict[str, _Sketch]) -> dict[str, _Sketch]:
            for f in SERIES_FIELDS:
                into[f].merge(bucket[f])
            return into

        self.buckets = _pairwise(self.buckets, lambda: {f: _Sketch() for f in SERIES_FIELDS},
                                 merge)
        self.counts = _pairwise(self.counts, int, lambda a, b: a + b)
        self.width_s *= 2

    def as_json(self) -> dict[str, Any]:
        keys = sorted(self.buckets)
        out: dict[str, Any] = {"bucket_s": self.width_s,
                               "t_s": [(k + 1) * self.width_s for k in keys],
                               "median_rel_error": SKETCH_REL_ERROR}
        for f in SERIES_FIELDS:
            out[f + "_p50"] = [self.buckets[k][f].median() for k in keys]
        out["completed"] = [self.counts[k] for k in keys]
        return out


def ttft_cdf(count: int, values: list[float | None]) -> dict[str, Any]:
    """The TTFT CDF's payload from the values at CDF_PERCENTILES (nearest rank) of `count`
    values: point i is (values[i], percent[i] / 100), the fraction of requests whose TTFT is
    at most values[i] (at least percent[i] %); no points without values."""
    field = next(m for m in LIVE_METRICS if m.field == CDF_FIELD)
    shown = count > 0
    return {"field": field.field, "label": field.label, "unit": field.unit, "count": count,
            "percent": list(CDF_PERCENTILES) if shown else [],
            "value": list(values) if shown else []}


class _FlowBucket:
    """One interval of the flow: what finished in it, and its in-flight readings."""

    __slots__ = ("completed", "failed", "output_tokens", "in_area_s", "in_time_s", "in_max")

    def __init__(self) -> None:
        self.completed = self.failed = self.output_tokens = 0
        self.in_area_s = self.in_time_s = 0.0  # ∫ in flight dt (request·s) and over how long
        self.in_max: int | None = None

    def merged(self, other: _FlowBucket) -> _FlowBucket:
        """This bucket with `other` added into it."""
        self.merge(other)
        return self

    def merge(self, other: _FlowBucket) -> None:
        self.completed += other.completed
        self.failed += other.failed
        self.output_tokens += other.output_tokens
        self.in_area_s += other.in_area_s
        self.in_time_s += other.in_time_s
        if other.in_max is not None:
            self.in_max = other.in_max if self.in_max is None else max(self.in_max,
                                                                       other.in_max)


class _Flow:
    """Requests in flight and what finished, per interval of the run's clock (seconds
    since `LiveStats` began): interval k is [k·width_s, (k+1)·width_s); width doubles past
    MAX_FLOW_POINTS intervals. See the module docstring."""

    def __init__(self) -> None:
        self.width_s = FLOW_TICK_S
        self.buckets: dict[int, _FlowBucket] = {}
        self.sampled_to_s = 0.0  # every tick up to here has been sampled
        self.end_s: float | None = None  # the load is over: the last interval ends here

    def _bucket(self, key_at: Callable[[float], int]) -> _FlowBucket:
        key = key_at(self.width_s)
        bucket = self.buckets.get(key)
        if bucket is None:
            if len(self.buckets) >= MAX_FLOW_POINTS:
                self._coarsen()
                return self._bucket(key_at)
            bucket = self.buckets[key] = _FlowBucket()
        return bucket

    def _coarsen(self) -> None:
        self.buckets = _pairwise(self.buckets, _FlowBucket, _FlowBucket.merged)
        self.width_s *= 2

    def finished(self, t_s: float, completed: bool, output_tokens: int = 0) -> None:
        """A measured request's record arrived at `t_s`: counted in the interval holding it."""
        bucket = self._bucket(lambda w: max(0, int(t_s // w)))
        if completed:
            bucket.completed += 1
            bucket.output_tokens += output_tokens
        else:
            bucket.failed += 1

    def sample(self, t_s: float, area_s: float, span_s: float, peak: int) -> None:
        """The reading at `t_s` (a tick): over the `span_s` before it, `area_s` request·s in
        flight and at most `peak` at once; it belongs to the interval that ends at (or holds)
        `t_s`."""
        # (rounded: a tick's time over the width is a whole number, 0.3 / 0.1 is not quite)
        bucket = self._bucket(lambda w: max(0, math.ceil(round(t_s / w, 9)) - 1))
        bucket.in_area_s += area_s
        bucket.in_time_s += span_s
        bucket.in_max = peak if bucket.in_max is None else max(bucket.in_max, peak)
        self.sampled_to_s = max(self.sampled_to_s, t_s)

    def end(self, t_s: float, area_s: float, span_s: float, peak: int) -> None:
        """The load is over at `t_s`: the last reading, and the last interval ends there."""
        if self.end_s is None:
            self.sample(t_s, area_s, span_s, peak)
            self.end_s = t_s

    def as_json(self) -> dict[str, Any]:
        """The points: every interval whose tick has passed (and, once the load is over,
        the last one, up to its end; a last piece under half a tick joins the interval
        before it, so no rate is read off a sliver)."""
        w = self.width_s
        until = self.end_s if self.end_s is not None else self.sampled_to_s
        spans: list[tuple[float, float, _FlowBucket]] = []
        for key in sorted(self.buckets):
            start_s, stop_s = key * w, min((key + 1) * w, until)
            if self.end_s is None and (key + 1) * w > until:
                continue  # the interval in progress
            spans.append((start_s, max(stop_s, start_s), self.buckets[key]))
        if self.end_s is not None and len(spans) > 1 and \
                spans[-1][1] - spans[-1][0] < FLOW_TICK_S / 2:
            start_s, _, into = spans[-2]
            joined = _FlowBucket()
            joined.merge(into)
            joined.merge(spans[-1][2])
            spans[-2:] = [(start_s, spans[-1][1], joined)]
        out: dict[str, list[Any]] = {k: [] for k in (
            "t_s", "span_s", "in_flight", "in_flight_max", "completed", "failed",
            "output_tokens", "output_tok_s", "completed_per_s")}
        for start_s, stop_s, b in spans:
            span_s = stop_s - start_s
            out["t_s"].append(stop_s)
            out["span_s"].append(span_s)  # the rates below are counts over exactly this
            out["in_flight"].append(b.in_area_s / b.in_time_s if b.in_time_s > 0 else None)
            out["in_flight_max"].append(b.in_max)
            out["completed"].append(b.completed)
            out["failed"].append(b.failed)
            out["output_tokens"].append(b.output_tokens)
            out["output_tok_s"].append(b.output_tokens / span_s if span_s > 0 else None)
            out["completed_per_s"].append(b.completed / span_s if span_s > 0 else None)
        return {"tick_s": FLOW_TICK_S, "interval_s": w, **out}


class LiveStats:
    """Exact figures over the measured records seen so far (warm-ups are only counted)."""

    def __init__(self, run_id: str, requests_planned: int | None) -> None:
        self.run_id = run_id
        self.requests_planned = requests_planned
        self.t0_s = time.perf_counter()
        self.completed = 0
        self.failed = 0
        self.warmups = 0
        self.output_tokens = 0
        self.failure_kinds: Counter[str] = Counter()
        self.values: dict[str, _Sketch] = {m.field: _Sketch() for m in LIVE_METRICS}
        self._final: dict[str, dict[str, Any]] | None = None  # exact, from the file's rows
        self.series = _Series()
        self.flow = _Flow()
        self._final_cdf: dict[str, Any] | None = None  # exact, from the file's rows
        self._sampler: gevent.Greenlet | None = None
        self._read_in_flight: Callable[[], InFlight] | None = None
        self._last_reading: InFlight | None = None
        self.finished = False
        self._end_s: float | None = None
        self._pending: list[tuple[RequestRecord, float]] = []
        self._drainer: gevent.Greenlet | None = None

    def finish(self, rows: RowColumns | None = None) -> None:
        """The run has ended: the clock stops; with `rows` (those `benchmark.json` was built
        from), the table's figures become the exact ones."""
        self.finished = True
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

    def start_flow(self, read_in_flight: Callable[[], InFlight]) -> None:
        """Read the budget's in-flight figures (`RequestBudget.read_in_flight`) now and once
        a tick, on the tick, until `end_flow`: one greenlet, one reading a second."""
        if self._sampler is None and self.flow.end_s is None:
            self._read_in_flight = read_in_flight
            self._last_reading = read_in_flight()
            self._sampler = gevent.spawn(self._sample_ticks)

    def _sample_ticks(self) -> None:
        tick = 1
        while self.flow.end_s is None:  # ended by end_flow (which also kills it)
            gevent.sleep(max(0.0, self.t0_s + tick * FLOW_TICK_S - time.perf_counter()))
            self.flow.sample(tick * FLOW_TICK_S, *self._reading())
            # a hub stalled past the next tick skips it (the reading spans the stall)
            tick = max(tick + 1, int((time.perf_counter() - self.t0_s) / FLOW_TICK_S) + 1)

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
                self.flow.end_s = t_s
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
        try:
            gevent.idle()
            self._drain()
        finally:
            self._drainer = None

    def _drain(self) -> None:
        pending, self._pending = self._pending, []
        done = ColumnBuilder()
        arrived: list[float] = []
        for record, t_s in pending:
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
        }

    def _cdf(self) -> dict[str, Any]:
        if self._final_cdf is not None:
            return self._final_cdf
        sketch = self.values[CDF_FIELD]
        got = sketch.percentiles(CDF_PERCENTILES)
        return ttft_cdf(sketch.n, [got[f"p{p}"] for p in CDF_PERCENTILES])
