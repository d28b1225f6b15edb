"""`--otlp-endpoint`: a real run against the simulator pushes its figures to a local OTLP/HTTP
receiver, and the last push's values are `benchmark.json`'s.

Which requests count, as in the file: the histograms and `anvil.requests.completed` hold the
measured requests that completed (the rows of `request_timings`), `anvil.requests.failed`
the measured ones that failed (`failures`, by kind), `anvil.requests.warmup` the warm-ups.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk.metrics")
pytest.importorskip("opentelemetry.exporter.otlp.proto.http")

from conftest import anvil, load_json, result_path, write_scenario  # noqa: E402
from otlpreceiver import receiver  # noqa: E402
from simfork import start_simulator  # noqa: E402

pytestmark = pytest.mark.e2e

SCENARIO = """
measurement_protocol = "otlp"
concurrency = 3
requests = 14
warmup_requests = 2
max_tokens = 12
context_tokens = 1024
max_context_tokens = 2048
"""


def _one(final: dict, name: str, **attrs: str) -> object:
    points = [p for a, p in final[name] if all(a.get(k) == v for k, v in attrs.items())]
    assert len(points) == 1, (name, attrs, final[name])
    return points[0]


def test_the_last_push_equals_benchmark_json(tmp_path: Path) -> None:
    sc = write_scenario(tmp_path / "s.toml", SCENARIO)
    with (start_simulator(["--prefill-ms", "5", "--reasoning-tokens", "2", "--content-tokens",
                           "10", "--interval-ms", "10",
                           "--fault", "http500@3,9"]) as sim,
          receiver() as (url, got)):
        p = anvil("run", str(sc), "--host", sim.url, "--otlp-endpoint", url,
                  "--otlp-interval", "0.1", "--results-dir", str(tmp_path / "res"), "--quiet")
    assert p.returncode == 0, p.stdout + p.stderr
    doc = load_json(result_path(p))
    rows, failures = doc["request_timings"], doc["failures"]
    assert len(failures) == 2 and len(rows) == 12  # the faults hit measured requests
    # the pushes during the run (tests/unit/live/test_otlppush.py holds them), then the last
    assert got.exports and set(got.paths) == {"/v1/metrics"}
    final = got.final()
    run = {"anvil.run_id": doc["run_id"], "gen_ai.request.model": doc["model"],
           "gen_ai.operation.name": "chat"}
    for name, points in final.items():  # every point names the run, model and server
        for attrs, _ in points:
            assert run.items() <= attrs.items() and attrs["server.address"] == "127.0.0.1", name
    assert _one(final, "anvil.requests.completed").as_int == len(rows)
    assert _one(final, "anvil.requests.failed", **{"error.type": "http_error"}).as_int == 2
    assert _one(final, "anvil.requests.warmup").as_int == 2
    for name, field in (("gen_ai.client.operation.time_to_first_chunk",
                         "time_to_first_chunk_ms"),
                        ("anvil.request.time_to_first_token", "ttft_ms"),
                        ("gen_ai.client.operation.duration", "e2e_ms"),
                        ("anvil.request.inter_token_latency", "mean_inter_token_latency_ms")):
        values = [r[field] for r in rows if r[field] is not None]
        h = _one(final, name)
        assert h.count == len(values) == len(rows), name
        assert math.isclose(h.sum, sum(v / 1000 for v in values), rel_tol=1e-9), name
        assert sum(h.bucket_counts) == h.count
    for kind, field in (("input", "prompt_tokens"), ("output", "output_tokens")):
        h = _one(final, "gen_ai.client.token.usage", **{"gen_ai.token.type": kind})
        assert (h.count, h.sum) == (len(rows), sum(r[field] for r in rows)), kind
