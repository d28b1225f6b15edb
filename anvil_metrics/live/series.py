"""The live page's time series, bounded however long the run: the charts' per-bucket medians
(`Series`) and the flow (`Flow`: in flight and what finished, per second of the run).

Why its own module: both are series over the run's clock that must not grow with its length,
and both stay bounded the same way: past their most points, neighbouring time buckets merge
pairwise (`pairwise`) and the interval doubles.

- The charts: per bucket of arrival time (at most MAX_BUCKETS) a sketch (`sketch.Sketch`) of
  each charted value (SERIES_FIELDS: the catalogue's fields with a `series` title), shown as
  the bucket's median (`series_key`: `<field>_p50` in live.json), within 1 %.
- The flow: per second of the run, the measured requests in flight (their mean over the
  second, time-weighted, and the most at once) and the completed requests, failures and
  output tokens that finished in it (output tok/s and requests/s are those over the second's
  length). In flight comes from the request budget (`control.RequestBudget.read_in_flight`:
  tickets handed out and not yet given back, kept with their integral over time and their
  peak, O(1) a request; on a distributed master, tickets granted to a worker and not yet back
  as a record), read by one greenlet once a second (`FLOW_TICK_S`, `figures.LiveStats`), on
  the tick; what finished is counted where the records are drained, by the time each record
  arrived. A second is shown once its tick has passed (the series lags the run by at most a
  second), so a rate is never read off part of a second, but for the last: the load's end
  closes it (a piece under half a second joins the second before it). At most
  MAX_FLOW_POINTS points: past that, neighbours merge pairwise and the interval doubles
  (rates and means over the longer interval, the peak the larger): 10 minutes at 1 s, then
  20 at 2 s, and so on; ~35 kB of JSON at most.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

from anvil_metrics import catalog
from anvil_metrics.live.sketch import SKETCH_REL_ERROR, Sketch

SERIES_FIELDS = tuple(f.name for f in catalog.ROW if f.series)
MAX_BUCKETS = 120  # chart points at most (each a sketch of ~100 bins: ~1 MB in all)
FLOW_TICK_S = 1.0  # in flight is read once a tick; the flow's finest interval
MAX_FLOW_POINTS = 600  # the flow's points at most (merged pairwise past that)

T = TypeVar("T")


def series_key(name: str) -> str:
    """The live.json `series` key of a charted field's per-bucket medians."""
    return f"{name}_p50"


def pairwise(buckets: dict[int, T], empty: Callable[[], T], merge: Callable[[T, T], T]
              ) -> dict[int, T]:
    """Time buckets of twice the width: bucket k of the result is buckets 2k and 2k+1
    merged (in key order) into `empty()`. How the live series stay bounded."""
    out: dict[int, T] = {}
    for key in sorted(buckets):
        out[key // 2] = merge(out[key // 2] if key // 2 in out else empty(), buckets[key])
    return out


class Series:
    """Per-time-bucket sketches of a few fields; bucket width doubles to stay bounded."""

    def __init__(self, width_s: float = 1.0) -> None:
        self.width_s = width_s
        self.buckets: dict[int, dict[str, Sketch]] = {}
        self.counts: dict[int, int] = {}  # completed rows per bucket

    def add(self, t_s: float, row: dict[str, Any]) -> None:
        key = int(t_s // self.width_s)
        bucket = self.buckets.get(key)
        if bucket is None:
            bucket = self.buckets[key] = {f: Sketch() for f in SERIES_FIELDS}
        self.counts[key] = self.counts.get(key, 0) + 1
        for f in SERIES_FIELDS:
            v = row.get(f)
            if v is not None and not math.isnan(v):
                bucket[f].add(v)
        if len(self.buckets) > MAX_BUCKETS:
            self._coarsen()

    def _coarsen(self) -> None:
        def merge(into: dict[str, Sketch], bucket: dict[str, Sketch]) -> dict[str, Sketch]:
            for f in SERIES_FIELDS:
                into[f].merge(bucket[f])
            return into

        self.buckets = pairwise(self.buckets, lambda: {f: Sketch() for f in SERIES_FIELDS},
                                 merge)
        self.counts = pairwise(self.counts, int, lambda a, b: a + b)
        self.width_s *= 2

    def as_json(self) -> dict[str, Any]:
        keys = sorted(self.buckets)
        out: dict[str, Any] = {"bucket_s": self.width_s,
                               "t_s": [(k + 1) * self.width_s for k in keys],
                               "median_rel_error": SKETCH_REL_ERROR}
        for f in SERIES_FIELDS:
            out[series_key(f)] = [self.buckets[k][f].median() for k in keys]
        out["completed"] = [self.counts[k] for k in keys]
        return out


class FlowBucket:
    """One interval of the flow: what finished in it, and its in-flight readings."""

    __slots__ = ("completed", "failed", "output_tokens", "in_area_s", "in_time_s", "in_max")

    def __init__(self) -> None:
        self.completed = self.failed = self.output_tokens = 0
        self.in_area_s = self.in_time_s = 0.0  # ∫ in flight dt (request·s) and over how long
        self.in_max: int | None = None

    def count(self, completed: bool, output_tokens: int = 0) -> None:
        """A measured request finished in this interval: completed (with its output
        tokens) or failed."""
        if completed:
            self.completed += 1
            self.output_tokens += output_tokens
        else:
            self.failed += 1

    def read(self, area_s: float, span_s: float, peak: int) -> None:
        """An in-flight reading of this interval: `area_s` request·s over `span_s`, at most
        `peak` at once."""
        self.in_area_s += area_s
        self.in_time_s += span_s
        self.in_max = peak if self.in_max is None else max(self.in_max, peak)

    def merged(self, other: FlowBucket) -> FlowBucket:
        """This bucket with `other` added into it."""
        self.merge(other)
        return self

    def merge(self, other: FlowBucket) -> None:
        self.completed += other.completed
        self.failed += other.failed
        self.output_tokens += other.output_tokens
        self.in_area_s += other.in_area_s
        self.in_time_s += other.in_time_s
        if other.in_max is not None:
            self.in_max = other.in_max if self.in_max is None else max(self.in_max,
                                                                       other.in_max)


class Flow:
    """Requests in flight and what finished, per interval of the run's clock (seconds
    since `LiveStats` began): interval k is [k·width_s, (k+1)·width_s); width doubles past
    MAX_FLOW_POINTS intervals. See the module docstring."""

    def __init__(self) -> None:
        self.tick_s = FLOW_TICK_S  # the sampler's tick (`LiveStats` reads it here)
        self.width_s = self.tick_s
        self.buckets: dict[int, FlowBucket] = {}
        self.sampled_to_s = 0.0  # every tick up to here has been sampled
        self.end_s: float | None = None  # the load is over: the last interval ends here

    def _bucket(self, key_at: Callable[[float], int]) -> FlowBucket:
        key = key_at(self.width_s)
        bucket = self.buckets.get(key)
        if bucket is None:
            if len(self.buckets) >= MAX_FLOW_POINTS:
                self._coarsen()
                return self._bucket(key_at)
            bucket = self.buckets[key] = FlowBucket()
        return bucket

    def _coarsen(self) -> None:
        self.buckets = pairwise(self.buckets, FlowBucket, FlowBucket.merged)
        self.width_s *= 2

    def finished(self, t_s: float, completed: bool, output_tokens: int = 0) -> None:
        """A measured request's record arrived at `t_s`: counted in the interval holding it."""
        self._bucket(lambda w: max(0, int(t_s // w))).count(completed, output_tokens)

    def sample(self, t_s: float, area_s: float, span_s: float, peak: int) -> None:
        """The reading at `t_s` (a tick): over the `span_s` before it, `area_s` request·s in
        flight and at most `peak` at once; it belongs to the interval that ends at (or holds)
        `t_s`."""
        # (rounded: a tick's time over the width is a whole number, 0.3 / 0.1 is not quite)
        self._bucket(lambda w: max(0, math.ceil(round(t_s / w, 9)) - 1)).read(
            area_s, span_s, peak)
        self.sampled_to_s = max(self.sampled_to_s, t_s)

    def end(self, t_s: float, area_s: float, span_s: float, peak: int) -> None:
        """The load is over at `t_s`: the last reading, and the last interval ends there."""
        if self.end_s is None:
            self.sample(t_s, area_s, span_s, peak)
            self.end_s = t_s

    def end_unread(self, t_s: float) -> None:
        """The load is over at `t_s` and was never read (no load was started): the last
        interval ends there, without a reading."""
        if self.end_s is None:
            self.end_s = t_s

    def as_json(self) -> dict[str, Any]:
        """The points: every interval whose tick has passed (and, once the load is over,
        the last one, up to its end; a last piece under half a tick joins the interval
        before it, so no rate is read off a sliver)."""
        w = self.width_s
        until = self.end_s if self.end_s is not None else self.sampled_to_s
        spans: list[tuple[float, float, FlowBucket]] = []
        for key in sorted(self.buckets):
            start_s, stop_s = key * w, min((key + 1) * w, until)
            if self.end_s is None and (key + 1) * w > until:
                continue  # the interval in progress
            spans.append((start_s, max(stop_s, start_s), self.buckets[key]))
        if self.end_s is not None and len(spans) > 1 and \
                spans[-1][1] - spans[-1][0] < self.tick_s / 2:
            start_s, _, into = spans[-2]
            joined = FlowBucket()
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
        return {"tick_s": self.tick_s, "interval_s": w, **out}
