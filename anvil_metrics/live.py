"""Exact running figures of the run in progress, for the web UI's LLM tab.

Why its own module: Locust's own percentiles come from response-time buckets rounded to
about two significant digits, and an LLM stream has several moments Locust does not know.
`LiveStats` is fed every finished raw record (on the process that writes `requests.jsonl`:
the single Locust process, or the master of a distributed run), derives the rows of the
records that arrived together with the same functions as `benchmark.json`
(`derive.rows_from_raw`, the catalogue's formulas) and takes nearest-rank percentiles over
all rows so far: at the end of a run the tab's p50/p95 equal the file's, bit for bit. Which
figures it shows, and their labels, are the catalogue's (`catalog.LIVE_FIELDS`).

Per metric it keeps one float per completed request (a few MB for 100k requests). The
time series for the charts keeps, per bucket of arrival time, the same exact values, and
reports each bucket's median; buckets are merged pairwise when there are too many, so the
series stays bounded however long the run.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import gevent

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


class _Series:
    """Per-time-bucket values of a few fields; bucket width doubles to stay bounded."""

    def __init__(self, width_s: float = 1.0) -> None:
        self.width_s = width_s
        self.buckets: dict[int, dict[str, list[float]]] = {}

    def add(self, t_s: float, row: dict[str, Any]) -> None:
        key = int(t_s // self.width_s)
        bucket = self.buckets.setdefault(key, {f: [] for f in SERIES_FIELDS})
        for f in SERIES_FIELDS:
            v = row.get(f)
            if v is not None:
                bucket[f].append(v)
        if len(self.buckets) > MAX_BUCKETS:
            self._coarsen()

    def _coarsen(self) -> None:
        merged: dict[int, dict[str, list[float]]] = {}
        for key, bucket in self.buckets.items():
            into = merged.setdefault(key // 2, {f: [] for f in SERIES_FIELDS})
            for f in SERIES_FIELDS:
                into[f].extend(bucket[f])
        self.buckets = merged
        self.width_s *= 2

    def as_json(self) -> dict[str, Any]:
        keys = sorted(self.buckets)
        out: dict[str, Any] = {"bucket_s": self.width_s,
                               "t_s": [(k + 1) * self.width_s for k in keys]}
        for f in SERIES_FIELDS:
            out[f + "_p50"] = [stats.nearest_rank(self.buckets[k][f], 50) for k in keys]
        out["completed"] = [len(self.buckets[k][SERIES_FIELDS[0]]) or
                            len(self.buckets[k][SERIES_FIELDS[1]]) for k in keys]
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
        self.values: dict[str, list[float]] = {m.field: [] for m in LIVE_METRICS}
        self._sorted: dict[str, bool] = {m.field: True for m in LIVE_METRICS}
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
        rows = rows_from_raw(table, table[:, COL["request_index"]]).row_dicts()
        for row, t_s in zip(rows, arrived, strict=True):
            self._count(row, t_s)

    def _count(self, row: dict[str, Any], t_s: float) -> None:
        self.completed += 1
        self.output_tokens += row["output_tokens"]
        for m in LIVE_METRICS:
            v = row.get(m.field)
            if v is not None:
                values = self.values[m.field]
                if values and v < values[-1]:
                    self._sorted[m.field] = False
                values.append(v)
        self.series.add(t_s, row)

    def _sorted_values(self, field: str) -> list[float]:
        values = self.values[field]
        if not self._sorted[field]:
            values.sort()
            self._sorted[field] = True
        return values

    def snapshot(self) -> dict[str, Any]:
        """Everything the LLM tab shows, as JSON-ready values (missing is None)."""
        self._drain()
        metrics = []
        for m in LIVE_METRICS:
            values = self._sorted_values(m.field)
            row: dict[str, Any] = {"field": m.field, "label": m.label, "unit": m.unit,
                                   "count": len(values)}
            for p in LIVE_PERCENTILES:  # nearest rank on the already sorted values
                row[f"p{p}"] = (float(values[stats.nearest_rank_index(len(values), p)])
                                if values else None)
            row["min"] = values[0] if values else None
            row["max"] = values[-1] if values else None
            metrics.append(row)
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
            "series": self.series.as_json(),
        }
