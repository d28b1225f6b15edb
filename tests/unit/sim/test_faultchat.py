"""What each injected fault does on the wire (`sim/faultchat.py`), in process (`simwire`):
the bytes and their moments as the module's docstring promises, against a plan of 2 reasoning
and 3 content tokens, 10 ms prefill and 2 ms between tokens (fake clock: exact times)."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest
from simwire import Wire, http_chunks

from anvil_metrics.sim.chat import DONE_EVENT
from anvil_metrics.sim.config import SimConfig
from anvil_metrics.sim.faultchat import (
    COMMENT_LINE,
    HTML_PAGE,
    MALFORMED_EVENT,
    OVERSIZE_BYTES,
    STREAM_ERROR_EVENT,
    oversize_text,
)
from anvil_metrics.sim.faults import parse_rule
from anvil_metrics.sim.httpproto import error_body
from anvil_metrics.sim.rawclient import Response

MS = 1_000_000
HI = [{"role": "user", "content": "hi"}]
STREAM = {"messages": HI, "stream": True, "stream_options": {"include_usage": True}}


def wire_with(*specs: str) -> Wire:
    return Wire(cfg=SimConfig(prefill_ms=10.0, interval_ms=2.0, reasoning_tokens=2,
                              content_tokens=3, stamp_send=True,
                              faults=tuple(parse_rule(s) for s in specs)))


def chunks(resp: Response) -> list[dict[str, Any]]:
    return [e.chunk for e in resp.events if e.chunk is not None]


def token_count(resp: Response) -> int:
    """Token chunks: those with a delta that is not the role's."""
    return sum(1 for c in chunks(resp) if c["choices"] and "role" not in c["choices"][0]["delta"])


@pytest.mark.parametrize(("spec", "status", "kind", "extra"), [
    ("http400@0", 400, "invalid_request_error", None),
    ("http500@0", 500, "server_error", None),
    ("http503@0", 503, "server_error", None),
    ("http429=7@0", 429, "rate_limit_error", "7"),
])
def test_http_statuses_then_the_next_request_is_normal(spec: str, status: int, kind: str,
                                                       extra: str | None) -> None:
    wire = wire_with(spec)
    resp = wire.ask("/v1/chat/completions", STREAM)
    fault = spec.partition("=")[0].partition("@")[0]
    assert resp.status == status and resp.headers.get("retry-after") == extra
    assert orjson.loads(resp.body) == error_body(f"injected fault: {fault}", status, kind)
    wire.transport.writes.clear()
    again = wire.ask("/v1/chat/completions", STREAM)  # keep-alive: index 1 has no fault
    assert again.status == 200 and again.complete and token_count(again) == 5


def test_reset_before_headers_writes_nothing() -> None:
    wire = wire_with("reset_before_headers@0")
    wire.send(b"POST /v1/chat/completions HTTP/1.1\r\ncontent-length: 2\r\n\r\n{}")
    assert wire.transport.writes == [] and wire.transport.aborted and wire.conn.closed


def test_reset_mid_stream_after_k_tokens() -> None:
    wire = wire_with("reset_mid_stream=2@0")
    resp = wire.ask("/v1/chat/completions", STREAM)
    assert token_count(resp) == 2 and not resp.complete and wire.transport.aborted


def test_malformed_chunk_then_the_rest_as_normal() -> None:
    wire = wire_with("malformed_chunk=1@0")
    parts = http_chunks(wire.post("/v1/chat/completions", STREAM))  # not `ask`: not all JSON
    assert parts.index(MALFORMED_EVENT) == 2  # role, token 0, then the broken event
    assert len(parts) == 1 + 1 + 5 + 1 + 1 + 1  # role, bad, 5 tokens, usage, [DONE], end
    assert parts[-2:] == [DONE_EVENT, b"0\r\n\r\n"]


def test_stream_error_as_vllm_sends_it() -> None:
    wire = wire_with("stream_error=2@0")
    wire.ask("/v1/chat/completions", STREAM)
    parts = http_chunks(wire.transport.sent())
    assert parts[3:] == [STREAM_ERROR_EVENT, DONE_EVENT, b"0\r\n\r\n"]  # after role + 2 tokens
    assert b'"finish_reason":"stop"' not in wire.transport.sent()
    assert not wire.conn.closed


@pytest.mark.parametrize("kind", ["stall_first_byte", "slow_headers"])
def test_first_byte_and_every_deadline_move_by_s(kind: str) -> None:
    wire = wire_with(f"{kind}=0.5@0")
    before = time.monotonic_ns()
    resp = wire.ask("/v1/chat/completions", STREAM)
    t0 = int(resp.headers["anvil-t0-ns"])
    assert before + 500 * MS <= t0 <= time.monotonic_ns() + 500 * MS  # t0 reported + S
    assert resp.headers_arrival_ns == t0  # not a byte before t0 + S
    tokens = [e.arrival_ns - t0 for e in resp.events if e.chunk and e.chunk["choices"]][1:]
    assert tokens == [10 * MS + i * 2 * MS for i in range(5)]


def test_stall_mid_stream_delays_token_one_and_after() -> None:
    wire = wire_with("stall_mid_stream=0.1@0")
    resp = wire.ask("/v1/chat/completions", STREAM)
    t0 = int(resp.headers["anvil-t0-ns"])
    tokens = [e.arrival_ns - t0 for e in resp.events if e.chunk and e.chunk["choices"]][1:]
    assert tokens == [10 * MS] + [110 * MS + i * 2 * MS for i in range(1, 5)]


def test_no_done_no_usage_and_end_before_finish() -> None:
    no_done = wire_with("no_done@0").ask("/v1/chat/completions", STREAM)
    assert no_done.complete and no_done.events[-1].chunk["usage"]  # type: ignore[index]
    assert all(e.data != b"[DONE]" for e in no_done.events)
    no_usage = wire_with("no_usage@0").ask("/v1/chat/completions", STREAM)
    assert no_usage.complete and all("usage" not in c for c in chunks(no_usage))
    assert token_count(no_usage) == 5
    cut = wire_with("end_before_finish=3@0").ask("/v1/chat/completions", STREAM)
    assert cut.complete and token_count(cut) == 3 and len(cut.events) == 4
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks(cut))


def test_oversize_chunk_is_the_first_content_token() -> None:
    assert len(oversize_text()) == OVERSIZE_BYTES and oversize_text().isascii()
    resp = wire_with("oversize_chunk@0").ask("/v1/chat/completions", STREAM)
    contents = [c["choices"][0]["delta"].get("content") for c in chunks(resp) if c["choices"]]
    assert contents == ["", None, None, oversize_text(), " is", " the"]
    assert chunks(resp)[-1]["usage"]["completion_tokens"] == 5


def test_stream_faults_leave_a_whole_answer_alone() -> None:
    wire = wire_with("end_before_finish=1@0")
    resp = wire.ask("/v1/chat/completions", {"messages": HI})
    assert resp.status == 200 and orjson.loads(resp.body)["usage"]["completion_tokens"] == 5


def test_hostile_faults_on_the_wire() -> None:
    """html_200's page; nan_usage's and negative_usage's counts; invalid_utf8's bytes;
    huge_line's and comment_flood's one chunk, then the stream as normal."""
    page = wire_with("html_200@0").ask("/v1/chat/completions", STREAM)
    assert (page.status, page.headers["content-type"]) == (200, "text/html; charset=utf-8")
    assert page.body == HTML_PAGE
    assert b'"completion_tokens":NaN' in wire_with("nan_usage@0").post(
        "/v1/chat/completions", STREAM)
    assert b'"completion_tokens":-5' in wire_with("negative_usage@0").post(
        "/v1/chat/completions", STREAM)
    assert b'"content":"\xff\xfe"' in wire_with("invalid_utf8=1@0").post(
        "/v1/chat/completions", STREAM)
    for spec, body in (("huge_line=70000@0", b"data: " + b"x" * 70000 + b"\n\n"),
                       ("comment_flood=6000@0", COMMENT_LINE * 6000 + b"\n")):
        parts = http_chunks(wire_with(spec).post("/v1/chat/completions", STREAM))
        assert parts[1] == b"%x\r\n%s\r\n" % (len(body), body)  # after the role chunk
        assert parts[-2:] == [DONE_EVENT, b"0\r\n\r\n"]  # then as normal, to the end
