"""A request's own header lines (a conversation's session header) reach the server, on a
fresh connection and on a reused one, and the next request without them sends none; a
Messages API request's key goes as a bearer and as `x-api-key`, with `anthropic-version`."""

from __future__ import annotations

import zlib
from pathlib import Path

import orjson

from anvil_metrics.urls import Endpoint
from anvil_metrics.wire.client import ChatClient, auth_headers
from anvil_metrics.wire.eventsobs import MessagesObserver
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


def test_a_messages_request_carries_the_key_both_ways_and_the_api_version(
        simulator, tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    sim = simulator("--prefill-ms", "1", "--interval-ms", "1", "--reasoning-tokens", "1",
                    "--content-tokens", "2", "--log-requests", str(log))
    body = orjson.dumps({"model": "sim-model", "stream": True, "max_tokens": 8,
                         "system": "be brief", "messages": [{"role": "user", "content": "hi"}]})
    for extra in ({}, {"anthropic-version": "2099-01-01", "X-Api-Key": "theirs"}):
        client = ChatClient(Endpoint.parse(sim.url), "sk-1", network_timeout_s=30,
                            path="/messages", extra_headers=extra)
        try:
            obs = MessagesObserver(0, 0)
            client.stream_chat(body, obs)
            record = obs.finish()
        finally:
            client.close()
        assert record.failure is None and (record.reasoning_chunks, record.content_chunks) == (
            1, 2) and record.finish_reason == "stop"
    first, second = (orjson.loads(x) for x in log.read_bytes().splitlines())
    assert first["path"] == "/v1/messages" and first["system"] == [8, zlib.crc32(b"be brief")]
    assert {k: first["headers"][k] for k in ("authorization", "x-api-key",
                                            "anthropic-version")} == {
        "authorization": "Bearer sk-1", "x-api-key": "sk-1", "anthropic-version": "2023-06-01"}
    # a header given by name is the one sent, not anvil's
    assert (second["headers"]["x-api-key"], second["headers"]["anthropic-version"]) == (
        "theirs", "2099-01-01")


def test_only_a_messages_request_names_the_api_version() -> None:
    assert auth_headers("k", "/chat/completions", {}) == {"Authorization": "Bearer k"}
    assert auth_headers(None, "/messages", {}) == {"anthropic-version": "2023-06-01"}
    assert auth_headers(None, "/chat/completions", {}) == {}
