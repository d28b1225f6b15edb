"""The live figures pushed as OpenTelemetry metrics to an OTLP/HTTP receiver (`--otlp-endpoint`).

Why: the stacks users report into (a collector, then Grafana, MLflow, Datadog) take metrics
pushed over OTLP under the GenAI semantic conventions' names, as AIPerf sends them; a scrape
of `/anvil/metrics` needs a Prometheus that can reach the load host. So, with the flag (or
`$OTEL_EXPORTER_OTLP_ENDPOINT`), every finished record of the run is recorded into
OpenTelemetry instruments (the `[otlp]` extra: the OpenTelemetry SDK and its OTLP/HTTP
exporter) and pushed every `--otlp-interval`, then once more when `benchmark.json` is written.

What is sent is `OTLP_METRICS`, one table (the README's table is held equal to it by a test):
a metric has a semantic-convention name where one means the same thing (the GenAI metrics of
semantic-conventions v1.41.0, docs/gen-ai/gen-ai-metrics.md: `gen_ai.client.operation.duration`,
`gen_ai.client.operation.time_to_first_chunk`, `gen_ai.client.token.usage`), else an
`anvil.*` name: TTFT to the first content token is not the convention's first chunk (any
chunk, role-only included: anvil's `time_to_first_chunk_ms`, sent under that name), and the
per-request mean ITL is not `time_per_output_chunk` (one value per chunk).

The histograms take each completed measured request's row values, derived with the
catalogue's formulas as `benchmark.json`'s rows are (`derive.rows_from_raw`), so their final
counts and sums are the file's: warm-ups are only counted (`anvil.requests.warmup`), failed
requests are counted by kind (`error.type`), and a figure a row lacks (null) is not recorded.
Temporality is cumulative: each push holds the run's totals so far.

Off the load's loop: this module runs as a child process (`python -m anvil_metrics.live.otlp`,
started before the load and stopped by `otlppush.py`, scheduled below the load process) that
reads `requests.jsonl` as the run appends it (each line is flushed as it is written), the
lines post-processing reads. Why not in the load process: recording a request into the
SDK's instruments costs 42-69 µs (`benchmarks/otlp_cost.py`; a slice of 32: ~2 ms of hub),
and at ~750 requests/s, with the recording and export in a greenlet, the loop lag's p99 went
from 4.4-6.0 ms to 8.4-8.5 ms (Locust monkey-patches threads, so the SDK's own reader thread
would have been a greenlet too; a real OS thread would hold the GIL as long). Here the SDK
runs no thread (its reader's interval is infinite): the child's loop collects, which
exports. The load process only sends it the gauges once an interval (one short line) and
`end`. An export that fails is logged by the SDK (on the child's stderr, the load process's)
and the run goes on; nothing from the receiver is read but its status.
"""

from __future__ import annotations

import argparse
import os
import select
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import orjson

from anvil_metrics.post.derive import rows_from_raw
from anvil_metrics.post.rawcolumns import COL, ColumnBuilder
from anvil_metrics.records import read_request

SIGNAL_PATH = "/v1/metrics"  # OTLP/HTTP's metrics path under a base endpoint
EXPORT_TIMEOUT_S = 10.0
READ_BYTES = 1 << 22  # requests.jsonl read this much at a time
# the conventions' advised bucket boundaries (gen-ai-metrics.md, v1.41.0)
DURATION_BUCKETS_S = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24,
                      20.48, 40.96, 81.92)
FIRST_CHUNK_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                         1.0, 2.5, 5.0, 7.5, 10.0)
TOKEN_BUCKETS = tuple(float(4 ** k) for k in range(14))  # 1, 4, 16, … 67108864


@dataclass(frozen=True, slots=True)
class OtlpMetric:
    """One metric sent: its name, instrument, unit, what it is made of (a row field: that
    field / `divisor` of each completed measured request; else a count or reading), its
    meaning and its buckets (a histogram)."""

    name: str
    instrument: str  # histogram, counter, gauge
    unit: str
    meaning: str
    field: str | None = None
    divisor: int = 1
    buckets: tuple[float, ...] = ()


OTLP_METRICS: tuple[OtlpMetric, ...] = (
    OtlpMetric("gen_ai.client.operation.duration", "histogram", "s",
               "end to end (`e2e_ms` / 1000) of each completed measured request", "e2e_ms",
               1000, DURATION_BUCKETS_S),
    OtlpMetric("gen_ai.client.operation.time_to_first_chunk", "histogram", "s",
               "time to the first SSE chunk of any kind (`time_to_first_chunk_ms` / 1000) "
               "of each completed measured request: the convention's definition",
               "time_to_first_chunk_ms", 1000, FIRST_CHUNK_BUCKETS_S),
    OtlpMetric("anvil.request.time_to_first_token", "histogram", "s",
               "TTFT (`ttft_ms` / 1000: to the first content token) of each completed "
               "measured request that has content", "ttft_ms", 1000, FIRST_CHUNK_BUCKETS_S),
    OtlpMetric("anvil.request.inter_token_latency", "histogram", "s",
               "mean ITL (`mean_inter_token_latency_ms` / 1000) of each completed measured "
               "request that has one", "mean_inter_token_latency_ms", 1000,
               FIRST_CHUNK_BUCKETS_S),
    OtlpMetric("gen_ai.client.token.usage", "histogram", "{token}",
               "`prompt_tokens` (`gen_ai.token.type=input`) and `output_tokens` (`=output`) "
               "of each completed measured request; its sum is the run's tokens", None, 1,
               TOKEN_BUCKETS),
    OtlpMetric("anvil.requests.completed", "counter", "{request}",
               "measured requests completed"),
    OtlpMetric("anvil.requests.failed", "counter", "{request}",
               "measured requests failed, by failure kind (`error.type`)"),
    OtlpMetric("anvil.requests.warmup", "counter", "{request}",
               "warm-up requests done (never measured)"),
    OtlpMetric("anvil.requests.in_flight", "gauge", "{request}",
               "measured requests sent and not yet finished, at each push"),
    OtlpMetric("anvil.users", "gauge", "{user}", "the users Locust is asked to run, at each push"),
)
TOKEN_TYPES = (("prompt_tokens", "input"), ("output_tokens", "output"))


def signal_url(endpoint: str) -> str:
    """The metrics URL of an OTLP/HTTP endpoint: a base (`http://host:4318`, as
    `$OTEL_EXPORTER_OTLP_ENDPOINT` is) gains `/v1/metrics`; a URL already ending in it is
    kept."""
    path = urlsplit(endpoint).path.rstrip("/")
    if path.endswith(SIGNAL_PATH):
        return endpoint
    return endpoint.rstrip("/") + SIGNAL_PATH


# the conventions' `gen_ai.operation.name` (a required attribute) of each endpoint anvil posts
# to: its well-known values chat, text_completion, embeddings
OPERATIONS = {"chat": "chat", "responses": "chat", "messages": "chat",
              "completions": "text_completion", "embeddings": "embeddings"}


def attributes(run_id: str, model: str | None, root_url: str,
               endpoint: str = "chat") -> dict[str, str | int]:
    """Every data point's attributes: the run, the operation, the model asked and the
    server."""
    url = urlsplit(root_url)
    out: dict[str, str | int] = {"anvil.run_id": run_id,
                                 "gen_ai.operation.name": OPERATIONS[endpoint],
                                 "gen_ai.request.model": model or ""}
    if url.hostname:
        out["server.address"] = url.hostname
        out["server.port"] = url.port or (443 if url.scheme == "https" else 80)
    return out


class Instruments:
    """The metrics of `OTLP_METRICS` on one meter, fed raw request lines (no gevent, no
    thread: the child below is their one caller); `gauges` holds the latest readings the
    load process sent (None: none yet, nothing observed)."""

    def __init__(self, attrs: dict[str, str | int], provider: Any) -> None:
        from opentelemetry.metrics import Observation

        self.attrs = attrs
        self.gauges: dict[str, float | None] = {}
        meter = provider.get_meter("anvil")
        self.histograms = {m.name: meter.create_histogram(
            m.name, unit=m.unit, description=m.meaning,
            explicit_bucket_boundaries_advisory=list(m.buckets))
            for m in OTLP_METRICS if m.instrument == "histogram"}
        self.counters = {m.name: meter.create_counter(m.name, unit=m.unit, description=m.meaning)
                         for m in OTLP_METRICS if m.instrument == "counter"}

        def observe(name: str) -> Any:
            def read(_options: Any) -> list[Any]:
                v = self.gauges.get(name)
                return [] if v is None else [Observation(v, self.attrs)]
            return read

        for m in OTLP_METRICS:
            if m.instrument == "gauge":
                meter.create_observable_gauge(m.name, [observe(m.name)], unit=m.unit,
                                              description=m.meaning)

    def record(self, lines: Iterable[Any]) -> None:
        """Count the request lines (`records.RequestLine`) and put each completed measured
        one's row values in the histograms (a null value is left out, as the file's
        aggregates leave it out)."""
        done = ColumnBuilder()
        for r in lines:
            if r.warmup:
                self.counters["anvil.requests.warmup"].add(1, self.attrs)
            elif r.failure is not None:
                self.counters["anvil.requests.failed"].add(
                    1, {**self.attrs, "error.type": r.failure.kind})
            else:
                done.add(0, r)
        if not done.n_records:
            return
        table = done.table()
        rows = rows_from_raw(table, table[:, COL["request_index"]])
        self.counters["anvil.requests.completed"].add(len(rows), self.attrs)
        for m in OTLP_METRICS:
            if m.field is not None:
                h = self.histograms[m.name]
                for v in rows.values(m.field):
                    if not np.isnan(v):
                        h.record(float(v) / m.divisor, self.attrs)
        tokens = self.histograms["gen_ai.client.token.usage"]
        for field, kind in TOKEN_TYPES:
            at = {**self.attrs, "gen_ai.token.type": kind}
            for v in rows.values(field):
                if not np.isnan(v):
                    tokens.record(int(v), at)


class Tail:
    """The request lines appended to `requests.jsonl` since the last read (whole lines
    only: the writer flushes each line, a torn last one waits for its end)."""

    def __init__(self, path: Path) -> None:
        self.f = open(path, "rb")  # noqa: SIM115 - kept open while the run goes on
        self.rest = b""

    def lines(self) -> list[Any]:
        out = []
        while chunk := self.f.read(READ_BYTES):
            text = self.rest + chunk
            cut = text.rfind(b"\n") + 1
            self.rest = text[cut:]
            for raw in text[:cut].splitlines():
                d = orjson.loads(raw)
                if d.get("type") == "request":
                    line = read_request(d, raw)
                    if not isinstance(line, str):  # a refused line: post-processing says why
                        out.append(line)
        return out


def _below_the_load(below: bool) -> None:
    """While the load runs (`below`), run only when the CPU has nothing else to do (Linux's
    SCHED_IDLE: a waking load process preempts this at once, where a niced process could
    still hold its slice for milliseconds); after it, as any process again, so that the last
    push is not starved by a busy host. Where the policy cannot be set, as it is."""
    policy = getattr(os, "SCHED_IDLE" if below else "SCHED_OTHER", None)
    if policy is not None:
        try:
            os.sched_setscheduler(0, policy, os.sched_param(0))
        except OSError:
            pass


def main(argv: list[str] | None = None) -> int:
    """The child: push every `--interval-s` and at `end` (or the load process gone: stdin
    closed), then say `done`. Stdin lines `g IN_FLIGHT USERS` update the gauges."""
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource

    p = argparse.ArgumentParser(prog="anvil-otlp-push")
    for name in ("raw", "endpoint", "attrs"):
        p.add_argument(name)
    p.add_argument("--interval-s", type=float, required=True)
    a = p.parse_args(argv)
    reader = PeriodicExportingMetricReader(
        OTLPMetricExporter(endpoint=signal_url(a.endpoint), timeout=EXPORT_TIMEOUT_S),
        export_interval_millis=float("inf"))  # no thread: this loop collects
    provider = MeterProvider(metric_readers=[reader],
                             resource=Resource.create({"service.name": "anvil"}))
    metrics, tail = Instruments(orjson.loads(a.attrs), provider), Tail(Path(a.raw))
    os.write(1, b"ready\n")  # imported and set up: the load may begin
    _below_the_load(True)
    due = time.monotonic() + a.interval_s
    while True:
        ready, _, _ = select.select([sys.stdin.buffer], [], [],
                                    max(0.0, due - time.monotonic()))
        if ready:
            word = sys.stdin.buffer.readline()
            if not word or word.startswith(b"end"):
                break
            if word.startswith(b"g "):
                _, in_flight, users = word.split()
                metrics.gauges["anvil.requests.in_flight"] = float(in_flight)
                metrics.gauges["anvil.users"] = None if users == b"-" else float(users)
            continue
        metrics.record(tail.lines())
        reader.collect()
        due = max(due + a.interval_s, time.monotonic())
    _below_the_load(False)
    metrics.record(tail.lines())
    reader.collect()
    provider.shutdown()
    os.write(1, b"done\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
