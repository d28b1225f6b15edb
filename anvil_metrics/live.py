"""Running figures of the run in progress, for the web UI's LLM tab: exact percentiles in
compact arrays, and charts from a bounded sketch.

Why its own module: Locust's own percentiles come from response-time buckets rounded to
about two significant digits, and an LLM stream has several moments Locust does not know.
`LiveStats` is fed every finished raw record (on the process that writes `requests.jsonl`:
the single Locust process, or the master of a distributed run), derives the rows of the
records that arrived together with the same functions as `benchmark.json`
(`derive.rows_from_raw`, the catalogue's formulas) and takes nearest-rank percentiles over
all rows so far: at the end of a run the tab's p50/p95 equal the file's, bit for bit. Which
figures it shows, and their labels, are the catalogue's (`catalog.LIVE_FIELDS`).

Memory, now that runs last hours: the table's percentiles stay EXACT, over every completed
request, but each metric's values live in one growable float64 array (`ExactValues`: 8
bytes a value, at most 12 with the growth slack past the first INITIAL_CAPACITY), not a list
of Python floats (~32 bytes a value: the float object and its pointer; a day at 64
requests/s was ~2 GB). The values are the rows' own float64s, so the ranks pick the file's
values (a −0.0 and a 0.0 tied at one rank could come out with either sign, where the file's
stable sort keeps row order; no live metric is ever −0.0: durations and rates). A snapshot
stays cheap however long the run: the array is a sorted prefix and a tail of the values
since; a snapshot sorts the tail (timsort: last snapshot's sorted tail plus the new values)
and picks each rank from the two sorted runs by binary search; the tail is merged into the
prefix once it is an eighth of it (amortised O(1) moves per value). Measured
(`benchmarks/soak.py --snapshot-cost`, all 7 metrics): at 1.1M values each, ~2 ms a
snapshot and ~36 ms for the rare one that merges; at 6.2M (a day at 64 requests/s), ~16 ms
with the tail near its largest and ~0.2 s for a merge (every n/8 new values). Only the web
UI asks for snapshots (a headless run never does).
The charts' series is BOUNDED instead: per bucket of arrival time
(at most MAX_BUCKETS, merged pairwise as the run grows) it keeps a log-bucketed count of
each charted value (`_Sketch`, relative width SKETCH_GAMMA), and shows each bucket's
nearest-rank median to within SKETCH_REL_ERROR (under 1 %) of the exact one; its memory
depends on the spread of the values, never on the number of requests. Both are said on
the page and in the tab (`ACCURACY_NOTE`).
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
from anvil_metrics.derive import rows_from_raw
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
MAX_BUCKETS = 240
INITIAL_CAPACITY = 1024  # values; the array grows by half when full
MIN_MERGE = 4096  # the tail is merged into the sorted prefix past this many values and
MERGE_FRACTION = 8  # past this fraction of the prefix
SKETCH_GAMMA = 1.02  # a sketch bin holds values within a factor 1.02 of each other
SKETCH_REL_ERROR = (SKETCH_GAMMA - 1) / (SKETCH_GAMMA + 1)  # < 0.01
ACCURACY_NOTE = ("table: exact nearest-rank percentiles over all {n} completed requests; "
                 "charts: per-bucket medians within 1 %")


class ExactValues:
    """Every value of one metric, as float64 in one growable array: a sorted prefix
    `[:sorted_n]` and the values appended since, unsorted `[sorted_n:n]`."""

    def __init__(self, capacity: int = INITIAL_CAPACITY) -> None:
        self._buf = np.empty(max(1, capacity), dtype=np.float64)
        self.n = 0
        self.sorted_n = 0

    def __len__(self) -> int:
        return self.n

    @property
    def nbytes(self) -> int:
        """Bytes held by the values (the whole array, slack included)."""
        return self._buf.nbytes

    def extend(self, values: Any) -> None:
        """Append a float64 array (no NaN: the caller drops missing values)."""
        k = len(values)
        if self.n + k > len(self._buf):
            grown = np.empty(max(self.n + k, len(self._buf) * 3 // 2), dtype=np.float64)
            grown[:self.n] = self._buf[:self.n]
            self._buf = grown
        self._buf[self.n:self.n + k] = values
        self.n += k

    def _runs(self) -> tuple[Any, Any]:
        """The two sorted runs (prefix, tail), merging the tail in when it has grown."""
        n, s = self.n, self.sorted_n
        tail = self._buf[s:n]
        tail.sort(kind="stable")  # timsort: the tail sorted last time + the new values
        if n - s > max(MIN_MERGE, s // MERGE_FRACTION):
            self._buf[:n].sort(kind="stable")  # two sorted runs: one merge pass
            self.sorted_n = s = n
        return self._buf[:s], self._buf[s:n]

    def percentiles(self, ps: tuple[int, ...]) -> dict[str, float | None]:
        """{"p50": …, …, "min": …, "max": …}: nearest rank (`stats.nearest_rank_index`)."""
        if self.n == 0:
            return {**{f"p{p}": None for p in ps}, "min": None, "max": None}
        a, b = self._runs()
        out: dict[str, float | None] = {
            f"p{p}": _kth(a, b, stats.nearest_rank_index(self.n, p)) for p in ps}
        out["min"] = _kth(a, b, 0)
        out["max"] = _kth(a, b, self.n - 1)
        return out


def _kth(a: Any, b: Any, k: int) -> float:
    """The k-th smallest (0-based) of the union of sorted arrays a and b."""
    lo, hi = max(0, k + 1 - len(b)), min(k + 1, len(a))  # how many come from a
    while lo < hi:
        i = (lo + hi) // 2
        if a[i] < b[k - i]:  # a[:i+1] are all among the k+1 smallest
            lo = i + 1
        else:
            hi = i
    j = k + 1 - lo
    if lo == 0:
        return float(b[j - 1])
    if j == 0:
        return float(a[lo - 1])
    return float(max(a[lo - 1], b[j - 1]))


class _Sketch:
    """Counts of values in log bins of relative width SKETCH_GAMMA (bin 0: values ≤ 0);
    its nearest-rank median is within SKETCH_REL_ERROR of the exact one."""

    __slots__ = ("bins", "n")

    def __init__(self) -> None:
        self.bins: Counter[int] = Counter()
        self.n = 0

    def add(self, v: float) -> None:
        self.bins[math.ceil(math.log(v, SKETCH_GAMMA)) if v > 0 else -(1 << 30)] += 1
        self.n += 1

    def merge(self, other: _Sketch) -> None:
        self.bins.update(other.bins)
        self.n += other.n

    def median(self) -> float | None:
        if self.n == 0:
            return None
        k = stats.nearest_rank_index(self.n, 50) + 1
        seen = 0
        for key in sorted(self.bins):
            seen += self.bins[key]
            if seen >= k:
                if key == -(1 << 30):
                    return 0.0
                return 2 * SKETCH_GAMMA ** key / (SKETCH_GAMMA + 1)  # mid-bin, relatively
        raise AssertionError("unreachable")


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
        self.values: dict[str, ExactValues] = {m.field: ExactValues() for m in LIVE_METRICS}
        self.series = _Series()
        self.finished = False
        self._end_s: float | None = None
        self._pending: list[tuple[RequestRecord, float]] = []
        self._drainer: gevent.Greenlet | None = None

    def finish(self) -> None:
        """The run has ended: the figures are final and the clock stops."""
        self.finished = True
        if self._end_s is None:
            self._end_s = time.perf_counter()

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

    def values_nbytes(self) -> int:
        """Bytes held by the exact values of every live metric (slack included)."""
        return sum(v.nbytes for v in self.values.values())

    def snapshot(self) -> dict[str, Any]:
        """Everything the LLM tab shows, as JSON-ready values (missing is None)."""
        self._drain()
        metrics = []
        for m in LIVE_METRICS:
            values = self.values[m.field]
            metrics.append({"field": m.field, "label": m.label, "unit": m.unit,
                            "count": len(values), **values.percentiles(LIVE_PERCENTILES)})
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
            "accuracy": ACCURACY_NOTE.format(n=self.completed),
            "series": self.series.as_json(),
        }
