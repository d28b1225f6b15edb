"""The OTLP push's table, names, attributes and recording (`live/otlp.py`), with the SDK's
in-memory reader in place of the exporter: what a run's records become, counted as
`benchmark.json` counts them. The real push, over HTTP from a real run: tests/e2e/test_otlp.py."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("opentelemetry.sdk.metrics")

from conftest import REPO  # noqa: E402
from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: E402
from otlpreceiver import record  # noqa: E402
from rawbuild import rows_of  # noqa: E402

from anvil_metrics.live.otlp import (  # noqa: E402
    OTLP_METRICS,
    Instruments,
    Tail,
    attributes,
    signal_url,
)
from anvil_metrics.live.recorder import RawWriter  # noqa: E402
from anvil_metrics.load.scenariofields import ENDPOINTS  # noqa: E402

# the client metrics of the GenAI semantic conventions (semantic-conventions v1.41.0,
# docs/gen-ai/gen-ai-metrics.md): a gen_ai.* name anvil sends must be one of them
CONVENTION_NAMES = {"gen_ai.client.token.usage", "gen_ai.client.operation.duration",
                    "gen_ai.client.operation.time_to_first_chunk",
                    "gen_ai.client.operation.time_per_output_chunk"}


def test_names_are_the_conventions_or_anvils_own_and_each_once() -> None:
    names = [m.name for m in OTLP_METRICS]
    assert len(set(names)) == len(names)
    for m in OTLP_METRICS:
        assert m.name in CONVENTION_NAMES or m.name.startswith("anvil."), m.name
        assert (m.instrument == "histogram") == bool(m.buckets), m.name
        assert list(m.buckets) == sorted(m.buckets), m.name


def test_the_readme_table_is_the_code_table() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    rows = [f"| `{m.name}` | {m.instrument} | `{m.unit}` | {m.meaning} |" for m in OTLP_METRICS]
    table = "| metric | instrument | unit | what |\n|---|---|---|---|\n" + "\n".join(rows)
    assert table in readme
    sent = set(re.findall(r"^\| `((?:gen_ai|anvil)\.[a-z_.]+)` \|", readme, re.M))
    assert sent == {m.name for m in OTLP_METRICS}


@pytest.mark.parametrize("given,url", [
    ("http://127.0.0.1:4318", "http://127.0.0.1:4318/v1/metrics"),
    ("http://127.0.0.1:4318/", "http://127.0.0.1:4318/v1/metrics"),
    ("https://otel.example/base", "https://otel.example/base/v1/metrics"),
    ("http://c:4318/v1/metrics", "http://c:4318/v1/metrics"),
])
def test_a_base_endpoint_gains_the_metrics_path(given: str, url: str) -> None:
    assert signal_url(given) == url


def test_every_point_names_the_run_the_model_and_the_server() -> None:
    assert attributes("benchmark-X", "m1", "http://10.0.0.2:8000") == {
        "anvil.run_id": "benchmark-X", "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "m1", "server.address": "10.0.0.2", "server.port": 8000}
    assert attributes("r", None, "https://h")["server.port"] == 443
    got = {e: attributes("r", "m", "http://h", e)["gen_ai.operation.name"]
           for e in ENDPOINTS}  # every endpoint anvil posts to has its operation
    assert got["completions"] == "text_completion" and got["embeddings"] == "embeddings"


def _points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    data = reader.get_metrics_data()
    return {m.name: list(m.data.data_points) for rm in data.resource_metrics
            for sm in rm.scope_metrics for m in sm.metrics}


def test_the_histograms_and_counters_are_the_rows_and_their_sums(tmp_path: Path) -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    attrs = {"anvil.run_id": "r", "gen_ai.request.model": "m"}
    metrics = Instruments(attrs, provider)
    metrics.gauges.update({"anvil.requests.in_flight": 3, "anvil.users": 4})
    done = [record(i, content=i != 2) for i in range(40)]  # one without content: no TTFT
    writer = RawWriter(tmp_path / "requests.jsonl")  # the file the child reads as it grows
    tail = Tail(writer.path)
    writer.write_header("r", {})
    for k, r in enumerate([record(0, warmup=True), *done, record(41, failure="http_error"),
                           record(42, failure="timeout"), record(43, failure="timeout")]):
        writer.take(r)
        if k in (0, 17):
            metrics.record(tail.lines())  # read as it goes: every line once
    with open(writer.path, "ab") as f:
        f.write(b'{"type":"request","request_')  # a torn last line waits for its end
    metrics.record(tail.lines())
    writer.close()
    got = _points(reader)
    rows = rows_of(done)
    assert got["anvil.requests.completed"][0].value == 40
    assert got["anvil.requests.warmup"][0].value == 1
    assert {p.attributes["error.type"]: p.value for p in got["anvil.requests.failed"]} == {
        "http_error": 1, "timeout": 2}
    for m in OTLP_METRICS:
        if m.field is not None:
            col = rows.values(m.field)
            col = col[~np.isnan(col)]
            assert len(col) >= 39, m.name
            (h,) = got[m.name]
            assert h.count == len(col) and h.attributes == attrs, m.name
            assert math.isclose(h.sum, float(np.sum(col / m.divisor)), rel_tol=1e-12), m.name
    assert len(rows.values("ttft_ms")[~np.isnan(rows.values("ttft_ms"))]) == 39
    tokens = {p.attributes["gen_ai.token.type"]: p for p in got["gen_ai.client.token.usage"]}
    assert tokens["input"].sum == sum(500 + i for i in range(40))
    assert tokens["output"].sum == int(rows.counts["output_tokens"].sum())
    assert got["anvil.requests.in_flight"][0].value == 3
    assert got["anvil.users"][0].value == 4
    provider.shutdown()
