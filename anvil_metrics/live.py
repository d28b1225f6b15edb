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
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import gevent
import numpy as np

from anvil_metrics import catalog, stats
from anvil_metrics.derive import RowColumns, rows_from_raw
from anvil_metrics.rawcolumns import COL, ColumnBuilder
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
ACCURACY_FINAL = ("table: exact nearest-rank percentiles over all {n} completed requests, "
                  "from benchmark.json's rows; charts: per-bucket medians within 1 %")


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
        """{"p50": …, …, "min": …, "max": …}: nearest rank over the bins (min, max exact)."""
        if self.n == 0:
            return {**{f"p{p}": None for p in ps}, "min": None, "max": None}
        wanted = sorted((stats.nearest_rank_index(self.n, p) + 1, p) for p in ps)
        out: dict[str, float | None] = {}
        seen, at = 0, 0
        for key in sorted(self.bins):
            seen += self.bins[key]
            while at < len(wanted) and seen >= wanted[at][0]:
                value = 0.0 if key == _ZERO_BIN else 2 * SKETCH_GAMMA ** key / (SKETCH_GAMMA + 1)
                out[f"p{wanted[at][1]}"] = min(max(value, self.lo), self.hi)
                at += 1
        return {**{f"p{p}": out[f"p{p}"] for p in ps}, "min": self.lo, "max": self.hi}

    def median(self) -> float | None:
        return self.percentiles((50,))["p50"]


_LOG_GAMMA = math.log(SKETCH_GAMMA)
_ZERO_BIN = -(1 << 30)


def _bin(v: float) -> int:
    return math.ceil(math.log(v) / _LOG_GAMMA) if v > 0 else _ZERO_BIN


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
        merged: dict[int, dict[str, _Sketch]] = {}
        counts: dict[int, int] = {}
        for key, bucket in self.buckets.items():
            into = merged.setdefault(key // 2, {f: _Sketch() for f in SERIES_FIELDS})
            counts[key // 2] = counts.get(key // 2, 0) + self.counts[key]
            for f in SERIES_FIELDS:
                into[f].merge(bucket[f])
        self.buckets, self.counts = merged, counts
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
        if rows is not None:
            self._drain()
            self._final = {}
            for m in LIVE_METRICS:
                col = rows.values(m.field)
                col = col[~np.isnan(col)]
                ps = (*LIVE_PERCENTILES, 0, 100)
                got = stats.nearest_rank_columns(col, ps)
                self._final[m.field] = {"count": len(col), **{
                    f"p{p}": v for p, v in zip(LIVE_PERCENTILES, got, strict=False)},
                    "min": got[-2], "max": got[-1]}

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
        for i, t_s in enumerate(arrived):
            self.series.add(t_s, {f: series[f][i] for f in SERIES_FIELDS})

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
        }
