"""A local OTLP/HTTP metrics receiver for the tests: the collector's protocol, decoded.

Why: `--otlp-endpoint` is judged by what a receiver gets, not by what anvil meant to send.
This is a stdlib HTTP server on 127.0.0.1 (`conftest.http_server`) that answers
`POST /v1/metrics` with 200 and decodes each body as an `ExportMetricsServiceRequest` with
`opentelemetry-proto` (the package the exporter itself depends on); `final` reads the last
export's data points. `record` makes the raw records the OTLP tests push.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from conftest import http_server
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)

from anvil_metrics.records import Failure, RequestRecord


@dataclass
class Received:
    """Every export request decoded, in order, and the paths they came to."""

    exports: list[Any] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)

    def final(self) -> dict[str, list[tuple[dict[str, Any], Any]]]:
        """The last export's metrics: name -> [(attributes, data point)]."""
        out: dict[str, list[tuple[dict[str, Any], Any]]] = {}
        for rm in self.exports[-1].resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    kind = m.WhichOneof("data")
                    points = getattr(m, kind).data_points
                    out[m.name] = [(_attrs(p.attributes), p) for p in points]
        return out


def _attrs(kvs: Any) -> dict[str, Any]:
    return {kv.key: getattr(kv.value, kv.value.WhichOneof("value")) for kv in kvs}


@contextmanager
def receiver() -> Iterator[tuple[str, Received]]:
    """Yields the receiver's base URL (`http://127.0.0.1:PORT`) and what it received."""
    got = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            request = ExportMetricsServiceRequest()
            request.ParseFromString(body)
            got.exports.append(request)
            got.paths.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    with http_server(Handler) as port:
        yield f"http://127.0.0.1:{port}", got


def record(i: int, *, content: bool = True, warmup: bool = False,
            failure: str | None = None) -> RequestRecord:
    """Request `i` as a run records it: TTFT, end and tokens grow with i; without content,
    no TTFT; a warm-up, or a failure of `failure`'s kind."""
    start = 1_000_000_000 * (i + 1)
    first = start + (20 + 7 * i) * 1_000_000
    return RequestRecord(
        request_index=i, start_ns=start, first_output_ns=first,
        first_content_ns=first if content else None, end_ns=first + (90 + i) * 1_000_000,
        planned_context_tokens=512, content_chunks=3 if content else 0,
        reasoning_chunks=0 if content else 3, warmup=warmup,
        chunk_deltas_ns=(first - start, 40_000_000, 50_000_000 + i * 1_000_000),
        usage={"prompt_tokens": 500 + i, "completion_tokens": 20 + i},
        failure=None if failure is None else Failure(kind=failure),
        extra={"first_chunk_ns": start + 5_000_000 + i * 100_000})
