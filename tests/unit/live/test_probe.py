"""The probe runner against a port nobody listens on: its lines, its failures, its stop."""

from __future__ import annotations

import socket
from pathlib import Path

import gevent
import orjson

from anvil_metrics.live.probe import PROBE_FILE, ProbeRunner
from anvil_metrics.urls import Endpoint
from anvil_metrics.wire.client import ChatClient


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_idle_then_scheduled_probes_are_written_and_failures_kept(tmp_path: Path) -> None:
    endpoint = Endpoint.parse(f"http://127.0.0.1:{_closed_port()}")
    made: list[ChatClient] = []

    def client() -> ChatClient:
        made.append(ChatClient(endpoint, connect_timeout_s=1.0, network_timeout_s=1.0))
        return made[-1]

    steps = iter(range(1000))
    runner = ProbeRunner(endpoint, client, "m", 50.0, 3, 1, "n0", tmp_path, lambda: next(steps))
    runner.idle_baseline()
    runner.start()
    gevent.sleep(0.3)
    runner.stop()
    lines = [orjson.loads(x) for x in (tmp_path / PROBE_FILE).read_bytes().splitlines()]
    assert lines[0] == {"type": "plan", "rate_rps": 50.0, "idle": 3, "seed": 1}
    probes = lines[1:]
    assert [p["phase"] for p in probes[:3]] == ["idle"] * 3
    assert all(p["step"] is None for p in probes[:3])
    load = probes[3:]
    assert 3 <= len(load) <= 60  # ~15 due in 0.3 s at 50/s; bounded by the schedule
    assert sorted(p["step"] for p in load) == list(range(len(load)))  # asked once each
    assert sorted(p["probe"] for p in probes) == list(range(len(probes)))
    assert all(p["failure"] == "connection" and p["first_output_ns"] is None for p in probes)
    # probes reuse their own idle connections: never more clients than probes at once
    assert 1 <= len(made) < len(probes)
