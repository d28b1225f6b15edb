"""A request's own header lines (a conversation's session header) reach the server, on a
fresh connection and on a reused one, and the next request without them sends none."""

from __future__ import annotations

from pathlib import Path

import orjson

from anvil_metrics.urls import Endpoint
from anvil_metrics.wire.client import ChatClient
from anvil_metrics.wire.observe import StreamObserver


def test_a_requests_own_headers_reach_the_server(simulator, tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    sim = simulator("--prefill-ms", "1", "--interval-ms", "1", "--reasoning-tokens", "0",
                    "--content-tokens", "3", "--log-requests", str(log))
    client = ChatClient(Endpoint.parse(sim.url), None, network_timeout_s=30)
    body = orjson.dumps({"model": "sim-model", "stream": True, "max_tokens": 3,
                         "messages": [{"role": "user", "content": "hi"}]})
    try:
        for i, headers in enumerate((b"X-Session-ID: conv-1\r\n", b"X-Session-ID: conv-2\r\n",
                                     b"")):
            obs = StreamObserver(i, 0, keep_text=True)
            client.stream_chat(body, obs, headers)
            record = obs.finish()
            assert record.failure is None and record.content_chunks == 3
            assert obs.text is not None and len(obs.text) == 3
    finally:
        client.close()
    sessions = [orjson.loads(x)["session"] for x in log.read_bytes().splitlines()]
    assert sessions == ["conv-1", "conv-2", None]
