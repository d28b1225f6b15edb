"""The live figures in Prometheus's text exposition format, for `GET /anvil/metrics`.

Why: Grafana and Prometheus read a running load the way they read every other service, by
scraping it, and `/anvil/live.json` is anvil's own shape. So the web UI serves the same
figures a second way: `exposition(snapshot, model)` takes one `LiveStats.snapshot()` (the
dictionary `/anvil/live.json` is built from) and writes it with `prometheus_client`'s own
writer (a `CollectorRegistry` made for the request, holding one `LiveCollector`). Nothing
is computed here: every number is the snapshot's, only converted to the unit its name
says (ms / 1000 → seconds). A figure the snapshot does not have yet (None: no request has
given it) is left out of the exposition, never written as 0. Before the process's first
run the exposition is empty.

What each metric is (all over the latest run of this Locust process, the merged one on a
distributed run's master; measured requests only, warm-ups are counted apart):

- one summary per figure of the live table, generated from the catalogue
  (`catalog.LIVE_FIELDS`, as `figures.LIVE_METRICS`): `anvil_<field>_seconds` for a field
  in ms (`anvil_ttft_seconds`, `anvil_e2e_seconds`, `anvil_time_to_first_output_seconds`,
  `anvil_reasoning_seconds`, `anvil_mean_inter_token_latency_seconds`), and
  `anvil_<field>_tokens_per_second` for one in tok/s (`anvil_decode_tokens_per_second`,
  `anvil_effective_prefill_tokens_per_second`). Its `quantile` samples are the table's
  nearest-rank p50, p90, p95, p99 ("0.5", "0.9", "0.95", "0.99") and its min and max ("0",
  "1"); `_count` is the number of completed requests that have the figure. While the run
  goes they are read from the live sketches (within 1 %, min and max exact); once it has
  ended they are `benchmark.json`'s exact figures (`anvil_figures_exact`). There is no
  `_sum`: the live table keeps none, and one made up here would be a second computation;
- `anvil_requests_completed_total`, `anvil_requests_failed_total`: measured requests that
  completed, that failed; `anvil_request_failures_total{kind}`: the failed ones by failure
  kind (`records.FAILURE_KINDS`; a kind appears once it has happened);
  `anvil_warmup_requests_total`: warm-up requests done (never measured);
  `anvil_output_tokens_total`: output tokens of the completed measured requests;
- `anvil_requests_planned`: the requests the run will make, when it has a number;
- `anvil_requests_in_flight`, `anvil_requests_in_flight_max`: the flow's latest interval
  (a second, longer on a long run: `series.Flow`): measured requests started and not yet
  finished, time-weighted mean over it, and the most at once in it (on a distributed
  master, tickets granted and not yet back as records). Absent until its first tick;
- `anvil_run_elapsed_seconds`: the run's clock (it stops when the run ends);
  `anvil_run_finished`: 1 once the run has ended, else 0; `anvil_figures_exact`: 1 when the
  summaries are the exact figures from `benchmark.json`'s rows, 0 while sketched;
- `anvil_run_info{run_id, model}`: 1, the run's id and the model it asks (join on it to
  tell runs apart: a new run in the same process starts the counters again from 0).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
    SummaryMetricFamily,
)

from anvil_metrics.live.figures import LIVE_METRICS, LIVE_PERCENTILES, LiveMetric

PREFIX = "anvil_"
# the text format every Prometheus reads (0.0.4), whatever the client library calls latest
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4

# a live figure's unit: (the field name's suffix, the metric name's suffix, the divisor)
UNITS: dict[str, tuple[str, str, int]] = {
    "ms": ("_ms", "_seconds", 1000),
    "tok/s": ("_tok_s", "_tokens_per_second", 1),
}

# the snapshot's key of each figure of a summary, and its `quantile` label
QUANTILES: tuple[tuple[str, str], ...] = (
    *((f"p{p}", f"{p / 100:g}") for p in LIVE_PERCENTILES),
    ("min", "0"),
    ("max", "1"),
)


def metric_name(m: LiveMetric) -> tuple[str, int]:
    """A live figure's Prometheus name and what its values are divided by: the field's
    name with its unit suffix replaced by the base unit's (`ttft_ms` → `anvil_ttft_seconds`,
    / 1000). A unit or a name this does not know is an error, never a silent guess."""
    if m.unit not in UNITS:
        raise ValueError(f"live figure {m.field}: no Prometheus unit for {m.unit!r}")
    old, new, divisor = UNITS[m.unit]
    if not m.field.endswith(old):
        raise ValueError(f"live figure {m.field}: its name does not end in {old!r}")
    return f"{PREFIX}{m.field.removesuffix(old)}{new}", divisor


SUMMARIES: tuple[tuple[LiveMetric, str, int], ...] = tuple(
    (m, *metric_name(m)) for m in LIVE_METRICS)


def _summary(m: LiveMetric, name: str, divisor: int, figures: dict[str, Any]) -> Metric:
    """One live figure as a summary: its quantiles that have values, and its count."""
    family = SummaryMetricFamily(
        name, f"{m.label}: nearest-rank quantiles of the live table's {m.field}"
        f"{f' / {divisor}' if divisor != 1 else ''} over the completed requests "
        "(quantile 0: min, 1: max)")
    for key, quantile in QUANTILES:
        value = figures.get(key)
        if value is not None:
            family.add_sample(name, {"quantile": quantile}, float(value) / divisor)
    family.add_sample(f"{name}_count", {}, float(figures["count"]))
    return family


def _counter(name: str, doc: str, value: Any) -> Metric:
    return CounterMetricFamily(f"{PREFIX}{name}", doc, value=float(value))


def _gauge(name: str, doc: str, value: Any) -> Metric | None:
    return None if value is None else GaugeMetricFamily(f"{PREFIX}{name}", doc,
                                                        value=float(value))


def _counts(snap: dict[str, Any]) -> Iterator[Metric | None]:
    yield _counter("requests_completed", "measured requests completed", snap["completed"])
    yield _counter("requests_failed", "measured requests failed", snap["failed"])
    kinds = CounterMetricFamily(f"{PREFIX}request_failures", "measured requests failed, "
                                "by failure kind", labels=["kind"])
    for kind, n in sorted(snap["failures_by_kind"].items()):
        kinds.add_metric([kind], float(n))
    yield kinds
    yield _counter("warmup_requests", "warm-up requests done (not measured)",
                   snap["warmup_requests"])
    yield _counter("output_tokens", "output tokens of the completed measured requests",
                   snap["output_tokens"])
    yield _gauge("requests_planned", "measured requests the run will make",
                 snap["requests_planned"])


def _run(snap: dict[str, Any], model: str | None) -> Iterator[Metric | None]:
    flow = snap["flow"]
    last = len(flow["t_s"]) - 1
    yield _gauge("requests_in_flight", "measured requests in flight: time-weighted mean "
                 "over the flow's latest interval", flow["in_flight"][last] if last >= 0
                 else None)
    yield _gauge("requests_in_flight_max", "measured requests in flight: the most at once "
                 "in the flow's latest interval", flow["in_flight_max"][last] if last >= 0
                 else None)
    yield _gauge("run_elapsed_seconds", "seconds since the run's live figures began "
                 "(stops at its end)", snap["elapsed_s"])
    yield _gauge("run_finished", "1 once the run has ended, else 0", int(snap["finished"]))
    yield _gauge("figures_exact", "1 when the summaries are benchmark.json's exact "
                 "figures, 0 while sketched (within 1 %)", int(snap["exact"]))
    yield InfoMetricFamily(f"{PREFIX}run", "the run's id and the model it asks",
                           value={"run_id": snap["run_id"], "model": model or ""})


class LiveCollector:
    """A `prometheus_client` collector of one snapshot (see the module docstring)."""

    def __init__(self, snapshot: dict[str, Any] | None, model: str | None) -> None:
        self.snapshot = snapshot
        self.model = model

    def collect(self) -> Iterator[Metric]:
        snap = self.snapshot
        if snap is None:
            return
        by_field = {m["field"]: m for m in snap["metrics"]}
        for m, name, divisor in SUMMARIES:
            yield _summary(m, name, divisor, by_field[m.field])
        yield from (f for f in (*_counts(snap), *_run(snap, self.model)) if f is not None)


def exposition(snapshot: dict[str, Any] | None, model: str | None = None) -> bytes:
    """The text exposition (CONTENT_TYPE) of one `LiveStats.snapshot()` (None: no run yet,
    an empty exposition) and the run's model."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LiveCollector(snapshot, model))
    return generate_latest(registry)
