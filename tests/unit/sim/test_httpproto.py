"""The simulator's HTTP/1.1 layer (`sim/httpproto.py`) on a fake transport: requests parsed
whole however the bytes arrive, pipelined requests answered in order, each protocol error one
JSON error and a closed connection, responses framed byte for byte as written here, and the
`when_done` callbacks run once, last registered first."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from simwire import FakeClock, FakeTransport, NowIntake, Wire

from anvil_metrics.sim.httpproto import (
    MAX_BODY_BYTES,
    MAX_HEADER_BYTES,
    STREAM_END,
    HttpConnection,
    HttpRequest,
    Intake,
    error_body,
)


class Recorder:
    """A handler that keeps each request and answers it at once (or when told)."""

    def __init__(self, answer: bool = True) -> None:
        self.requests: list[HttpRequest] = []
        self.conns: list[HttpConnection] = []
        self.answer = answer

    def __call__(self, request: HttpRequest, conn: HttpConnection, t0_ns: int) -> None:
        self.requests.append(request)
        self.conns.append(conn)
        if self.answer:
            conn.respond_json(200, {"n": len(self.requests)})


def ok(n: int, extra: str = "") -> bytes:
    body = b'{"n":%d}' % n
    return (b"HTTP/1.1 200 OK\r\nserver: anvil-sim\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n%s\r\n" % (len(body), extra.encode()) + body)


def test_a_request_in_pieces_is_parsed_once_whole() -> None:
    rec = Recorder()
    wire = Wire(rec)
    raw = (b"POST /v1/x?a=1 HTTP/1.1\r\nHost: h\r\nX-Thing:  v \r\ncontent-length: 5\r\n\r\n"
           b"hello")
    for k in range(0, len(raw), 7):
        wire.send(raw[k : k + 7])
    assert rec.requests == [HttpRequest("POST", "/v1/x", "a=1", {"host": "h", "x-thing": "v",
                                        "content-length": "5"}, b"hello", True)]
    assert wire.transport.sent() == ok(1)


def test_pipelined_requests_wait_their_turn() -> None:
    rec = Recorder(answer=False)
    wire = Wire(rec)
    wire.send(b"GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\n\r\n")
    assert [r.path for r in rec.requests] == ["/a"]  # /b waits until /a is answered
    rec.conns[0].respond(200, b"A")
    assert [r.path for r in rec.requests] == ["/a", "/b"]
    rec.conns[1].respond(200, b"B")
    sent = wire.transport.sent()
    assert sent.count(b"HTTP/1.1 200 OK") == 2 and sent.index(b"\r\n\r\nA") < sent.index(b"B")


def test_connection_close_is_honoured() -> None:
    wire = Wire(Recorder())
    wire.send(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert wire.transport.sent() == ok(1, "connection: close\r\n")
    assert wire.transport.closed and wire.conn.closed


@pytest.mark.parametrize(("raw", "status", "message"), [
    (b"GET / HTTP/1.0\r\n\r\n", 505, "only HTTP/1.1 is supported, got 'HTTP/1.0'"),
    (b"GET /\r\n\r\n", 400, "malformed request line"),
    (b"GET / HTTP/1.1\r\nno colon\r\n\r\n", 400, "malformed header line"),
    (b"GET / HTTP/1.1\r\n x: 1\r\n\r\n", 400, "malformed header line"),
    (b"POST / HTTP/1.1\r\ncontent-length: -3\r\n\r\n", 400, "bad Content-Length"),
    (b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n", 411,
     "chunked request bodies are not supported; send Content-Length"),
    (b"POST / HTTP/1.1\r\ncontent-length: %d\r\n\r\n" % (MAX_BODY_BYTES + 1), 413,
     "request body too large"),
    (b"GET / HTTP/1.1\r\nx: " + b"a" * MAX_HEADER_BYTES, 431, "request head too large"),
])
def test_protocol_errors_answer_once_and_close(raw: bytes, status: int, message: str) -> None:
    rec = Recorder()
    wire = Wire(rec)
    wire.send(raw)
    response = wire.response()
    assert rec.requests == []
    assert response.status == status and response.headers["connection"] == "close"
    assert orjson.loads(response.body) == error_body(message, status)
    assert wire.transport.closed


def test_expect_continue_once_before_the_body() -> None:
    rec = Recorder()
    wire = Wire(rec)
    wire.send(b"POST / HTTP/1.1\r\nexpect: 100-continue\r\ncontent-length: 2\r\n\r\n")
    wire.send(b"h")
    assert wire.transport.sent() == b"HTTP/1.1 100 Continue\r\n\r\n"
    wire.send(b"i")
    assert rec.requests[0].body == b"hi"


def test_a_stream_is_chunked_and_ends_with_the_terminator() -> None:
    def handler(request: HttpRequest, conn: HttpConnection, t0_ns: int) -> None:
        conn.write(conn.stream_head(extra=(("x-a", "1"),)) + b"3\r\nabc\r\n")
        conn.stream_end(b"1\r\nd\r\n")

    wire = Wire(handler)
    wire.send(b"GET / HTTP/1.1\r\n\r\n")
    assert wire.transport.sent() == (
        b"HTTP/1.1 200 OK\r\nserver: anvil-sim\r\ncontent-type: text/event-stream; "
        b"charset=utf-8\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\nx-a: 1\r\n"
        b"\r\n3\r\nabc\r\n1\r\nd\r\n" + STREAM_END)


def test_done_callbacks_run_once_last_registered_first() -> None:
    order: list[str] = []

    def handler(request: HttpRequest, conn: HttpConnection, t0_ns: int) -> None:
        conn.when_done(lambda: order.append("first"))
        conn.when_done(lambda: order.append("second"))
        if request.path == "/answer":
            conn.respond(200, b"")

    wire = Wire(handler)
    wire.send(b"GET /answer HTTP/1.1\r\n\r\n")
    assert order == ["second", "first"]
    wire.send(b"GET /wait HTTP/1.1\r\n\r\n")
    wire.conn.connection_lost(None)  # the client goes mid-response
    wire.conn.connection_lost(None)
    assert order == ["second", "first"] * 2 and wire.conn.closed


def test_a_failing_handler_aborts_its_connection(capsys: pytest.CaptureFixture[str]) -> None:
    def handler(request: HttpRequest, conn: HttpConnection, t0_ns: int) -> None:
        raise RuntimeError("boom")

    wire = Wire(handler)
    wire.send(b"GET / HTTP/1.1\r\n\r\n")
    assert wire.transport.aborted and wire.conn.closed and wire.transport.writes == []
    assert "RuntimeError: boom" in capsys.readouterr().err


def test_writes_after_the_connection_is_lost_go_nowhere() -> None:
    transport = FakeTransport(FakeClock())
    closed: list[Any] = []
    conn = HttpConnection(Recorder(answer=False), NowIntake(), closed.append)  # type: ignore[arg-type]
    conn.connection_made(transport)
    conn.connection_lost(None)
    conn.write(b"late")
    assert transport.writes == [] and closed == [conn]


def test_the_intake_handles_each_connection_on_the_next_loop_turn() -> None:
    async def main() -> list[str]:
        rec = Recorder()
        intake = Intake(asyncio.get_running_loop())
        conns = [HttpConnection(rec, intake) for _ in range(3)]
        for k, conn in enumerate(conns):
            conn.connection_made(FakeTransport(FakeClock()))
            conn.data_received(b"GET /%d HTTP/1.1\r\n\r\n" % k)
        assert intake.waiting() and rec.requests == []  # read now, handled after
        await asyncio.sleep(0)
        assert rec.requests  # the next turn handles them, for one slice (at least one)
        turns = 1
        while intake.waiting():  # a stalled machine can end a slice early: one per turn
            await asyncio.sleep(0)
            turns += 1
        assert turns <= len(conns)
        return [r.path for r in rec.requests]

    assert asyncio.run(main()) == ["/0", "/1", "/2"]


def test_error_body_is_openais_envelope() -> None:
    assert error_body("no", 404, "not_found_error") == {
        "error": {"message": "no", "type": "not_found_error", "param": None, "code": 404}}
    assert error_body("x", 400, param="n", code="bad")["error"] == {
        "message": "x", "type": "invalid_request_error", "param": "n", "code": "bad"}
