"""The load process's handle on the OTLP push child (`live/otlppush.py`): the child is ready
before `start` returns, is told the gauges, pushes what `requests.jsonl` holds at `end`, and
is gone after `finish` (its PID reaped)."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import gevent
import pytest

pytest.importorskip("opentelemetry.sdk.metrics")
pytest.importorskip("opentelemetry.exporter.otlp.proto.http")

from otlpreceiver import receiver, record  # noqa: E402

from anvil_metrics.live.otlppush import OtlpPush  # noqa: E402
from anvil_metrics.live.recorder import RawWriter  # noqa: E402


def _session(tmp_path: Path, url: str | None, interval_s: float = 60.0) -> SimpleNamespace:
    return SimpleNamespace(
        opts=SimpleNamespace(otlp_endpoint=url, otlp_interval_s=interval_s), run_id="benchmark-T",
        model="m1", endpoint=SimpleNamespace(root_url="http://127.0.0.1:8000"),
        run_dir=tmp_path, scenario=SimpleNamespace(endpoint="chat"),
        budget=SimpleNamespace(in_flight=2),
        clock=SimpleNamespace(controls=SimpleNamespace(users_now=lambda: 5)))


def test_no_endpoint_no_child(tmp_path: Path) -> None:
    assert OtlpPush.start(_session(tmp_path, None)) is None


def test_the_child_pushes_the_file_at_the_end_and_is_gone(tmp_path: Path) -> None:
    writer = RawWriter(tmp_path / "requests.jsonl")
    writer.write_header("benchmark-T", {})
    with receiver() as (url, got):
        push = OtlpPush.start(_session(tmp_path, url, interval_s=0.05))
        assert push is not None and push.proc.poll() is None  # ready, waiting
        for i in range(3):
            writer.take(record(i))
        limit = time.monotonic() + 30  # pushed while the run goes on (a bound, not a speed)
        while not got.exports and time.monotonic() < limit:
            gevent.sleep(0.02)  # its greenlet tells the gauges meanwhile
        assert got.exports, "no push during the run"
        for i in range(3, 5):
            writer.take(record(i))
        writer.take(record(5, failure="timeout"))
        writer.close()
        push.finish()
    assert push.proc.returncode is not None
    final = got.final()
    (completed,) = final["anvil.requests.completed"]
    assert completed[1].as_int == 5 and completed[0]["anvil.run_id"] == "benchmark-T"
    assert final["anvil.requests.failed"][0][0]["error.type"] == "timeout"
    assert final["anvil.requests.in_flight"][0][1].as_double == 2
    assert final["anvil.users"][0][1].as_double == 5
