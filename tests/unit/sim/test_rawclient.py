"""The simulator's yardstick client (`sim/rawclient.py`): requests byte for byte, captures
parsed back into events each stamped with the receive that completed it (worked by hand on
tiny captures), the one-event-per-chunk promise enforced, and `exchange`/`exchange_many`
against a stdlib HTTP/1.1 server on 127.0.0.1."""

from __future__ import annotations

import time
from http.server import BaseHTTPRequestHandler

import orjson
import pytest
from conftest import http_server

from anvil_metrics.sim.rawclient import (
    Capture,
    exchange,
    exchange_many,
    parse_capture,
    request_bytes,
)

CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: b\r\n\r\n"


def event(payload: bytes) -> bytes:
    data = b"data: " + payload + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


def captured(*parts: tuple[bytes, int]) -> Capture:
    capture = Capture()
    for data, at in parts:
        capture.add(data, at)
    return capture


def test_request_bytes() -> None:
    assert request_bytes("/x", {"a": 1}) == (
        b"POST /x HTTP/1.1\r\nhost: 127.0.0.1\r\naccept: */*\r\ncontent-type: application/json"
        b"\r\ncontent-length: 7\r\n\r\n{\"a\":1}")
    assert request_bytes("/h", method="GET").endswith(b"content-length: 0\r\n\r\n")


def test_each_byte_arrives_with_its_receive() -> None:
    capture = captured((b"abc", 10), (b"defg", 20))
    assert [capture.arrival_of(n) for n in (1, 3, 4, 7)] == [10, 10, 20, 20]


def test_looks_complete() -> None:
    assert not captured((b"HTTP/1.1 200 OK\r\n", 0)).looks_complete()
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n"
    assert not captured((head + b"abc", 0)).looks_complete()
    assert captured((head + b"abcd", 0)).looks_complete()
    assert not captured((CHUNKED + event(b"{}"), 0)).looks_complete()
    assert captured((CHUNKED + event(b"{}") + b"0\r\n\r\n", 0)).looks_complete()


def test_a_stream_parsed_back_with_arrivals() -> None:
    first, second = event(b'{"n":1}'), event(b"[DONE]")
    capture = captured((CHUNKED + first[:5], 100), (first[5:] + second[:3], 200),
                       (second[3:] + b"0\r\n\r\n", 300))
    resp = parse_capture(capture)
    assert resp is not None and resp.complete and resp.status == 200
    assert resp.headers == {"transfer-encoding": "chunked", "x-a": "b"}
    assert resp.headers_arrival_ns == 100
    assert [(e.data, e.chunk, e.arrival_ns) for e in resp.events] == [
        (b'{"n":1}', {"n": 1}, 200), (b"[DONE]", None, 300)]


def test_partial_and_whole_bodies() -> None:
    assert parse_capture(captured((b"HTTP/1.1 200 OK\r\n", 0))) is None
    cut = parse_capture(captured((CHUNKED + event(b"{}") + b"5\r\nda", 0)))
    assert cut is not None and not cut.complete and len(cut.events) == 1
    head = b"HTTP/1.1 404 Not Found\r\nContent-Length: 4\r\n\r\n"
    short = parse_capture(captured((head + b"ab", 0)))
    assert short is not None and short.status == 404 and short.body == b"ab" and not short.complete
    whole = parse_capture(captured((head + b"abcd", 0)))
    assert whole is not None and whole.body == b"abcd" and whole.complete


@pytest.mark.parametrize(("chunk", "why"), [
    (b"data: {}\n\ndata: {}\n\n", "more than one SSE event"),
    (b"event: x\ndata: {}\n\n", "not one SSE event"),
    (b"data: {}\n", "not one SSE event"),
])
def test_a_chunk_must_hold_one_event(chunk: bytes, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_capture(captured((CHUNKED + b"%x\r\n%s\r\n" % (len(chunk), chunk), 0)))


class Echo(BaseHTTPRequestHandler):
    """GET /health: ``{}``; POST: the body back as one SSE event, then [DONE], keep-alive."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.write(event(body) + event(b"[DONE]") + b"0\r\n\r\n")

    def log_message(self, *args: object) -> None:
        pass


def test_exchange_and_exchange_many_on_127_0_0_1() -> None:
    with http_server(Echo) as port:
        before = time.perf_counter_ns()
        sent, resp = exchange(port, "/v1/x", {"k": 0})
        assert before <= sent <= resp.events[0].arrival_ns
        assert resp.complete and [e.chunk for e in resp.events] == [{"k": 0}, None]
        _, health = exchange(port, "/health", method="GET")
        assert orjson.loads(health.body) == {} and health.complete
        many = exchange_many(port, "/v1/x", [{"k": k} for k in range(3)])
    assert [r.events[0].chunk for _, r in many] == [{"k": k} for k in range(3)]
    assert all(r.complete and s <= r.events[-1].arrival_ns for s, r in many)
