"""Kept-alive connections a server closes between requests (llama.cpp's server closes after
every streamed response): a pooled connection already closed is replaced before anything is
written; a request that was written is never sent twice (a failure after the write is a
typed failure, not a silent retry). A server that keeps connections open gets one for
streams in a row, also through a pool that shows only its public methods; one that spoke
on an idle connection (a late 408, a TLS close_notify) gets a new one. A stream killed
mid-body drops its connection at once."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import self_signed_cert

from anvil_metrics.urls import Endpoint
from anvil_metrics.wire.client import ChatClient
from anvil_metrics.wire.observe import StreamObserver

STREAM = (b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'
          b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
          b"data: [DONE]\n\n")


def _chunked(body: bytes) -> bytes:
    return b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)


def _read_request(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        part = conn.recv(65536)
        if not part:
            return b""
        data += part
    head, rest = data.split(b"\r\n\r\n", 1)
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    while len(rest) < length:
        rest += conn.recv(65536)
    return head


class ClosingServer:
    """Answers one request per connection with an SSE stream, then closes the connection:
    by default only once the client's next request arrived on it (the close crosses the
    write); with `close_delay_s`, that long after answering. With `close_first` the very
    first connection is closed before answering anything."""

    def __init__(self, close_first: bool = False, close_delay_s: float | None = None,
                 drop_after_work: int | None = None) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.requests = 0
        self.connections = 0
        self.close_first = close_first
        self.close_delay_s = close_delay_s
        self.drop_after_work = drop_after_work  # this request: read, work 100 ms, drop
        self._stop = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                if self.close_first and self.connections == 1:
                    _read_request(conn)
                    continue
                head = _read_request(conn)
                if not head:
                    continue
                self.requests += 1
                if self.requests == self.drop_after_work:
                    time.sleep(0.1)  # the server took the request and worked on it
                    continue
                if head.startswith(b"GET"):
                    body = b'{"data":[{"id":"m"}]}'
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
                else:
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                                 b"Transfer-Encoding: chunked\r\n"
                                 b"Keep-Alive: timeout=5, max=100\r\n\r\n" + _chunked(STREAM))
                if self.close_delay_s is None:
                    # close only once the client's next request has arrived: the close
                    # crosses that write (the request is never answered, nor counted)
                    conn.recv(65536)
                else:
                    time.sleep(self.close_delay_s)

    def close(self) -> None:
        self._stop = True
        self.sock.close()


@pytest.fixture
def server() -> Iterator[ClosingServer]:
    s = ClosingServer()
    yield s
    s.close()


def _stream(client: ChatClient, i: int) -> StreamObserver:
    obs = StreamObserver(i, time.perf_counter_ns())
    client.stream_chat(b'{"model":"m","stream":true,"messages":[]}', obs)
    return obs


def test_a_close_that_crosses_the_write_is_a_failure_not_a_resend(
        server: ClosingServer) -> None:
    """The server closes each connection only once the next request has arrived on it:
    that request fails (typed), is not sent again, and the next one uses a new connection."""
    client = ClientFor(server.port)
    try:
        results = [_stream(client, i).finish() for i in range(4)]
    finally:
        client.close()
    kinds = [None if r.failure is None else r.failure.kind for r in results]
    assert kinds == [None, "connection", None, "connection"], kinds
    assert all(r.content_chunks == 1 for r in results if r.failure is None)
    assert server.requests == 2  # the two that were answered; nothing sent twice


def test_an_already_closed_connection_is_replaced_before_writing() -> None:
    server = ClosingServer(close_delay_s=0.0)
    client = ClientFor(server.port)
    try:
        results = []
        for i in range(4):
            results.append(_stream(client, i).finish())
            time.sleep(0.05)  # the server's close has arrived before the next request
    finally:
        client.close()
        server.close()
    assert [r.failure for r in results] == [None] * 4
    assert server.requests == 4


def test_a_request_the_server_worked_on_is_never_sent_twice() -> None:
    """The server reads request 2 (its third, after GET /models), works 100 ms, drops the
    connection: a failure, not a silent second send."""
    server = ClosingServer(close_delay_s=0.0, drop_after_work=3)
    client = ClientFor(server.port)
    try:
        client.connect()
        time.sleep(0.2)  # let each close arrive before the next request (a busy CI box)
        results = []
        for i in range(3):
            results.append(_stream(client, i).finish())
            time.sleep(0.2)
    finally:
        client.close()
        server.close()
    assert results[0].failure is None
    assert results[1].failure is not None and results[1].failure.kind == "connection"
    assert results[2].failure is None
    assert server.requests == 4  # GET + 3 requests, each received once


def test_a_connection_that_never_answered_is_not_retried() -> None:
    server = ClosingServer(close_first=True)
    client = ClientFor(server.port)
    try:
        first = _stream(client, 0).finish()
        second = _stream(client, 1).finish()
    finally:
        client.close()
        server.close()
    assert first.failure is not None and first.failure.kind == "connection"
    assert second.failure is None


class KeepingServer:
    """Answers every request on a connection with an SSE stream and keeps it open; with
    `late`, then sends those bytes while the connection is idle, and with `close` closes
    it after them (over TLS with `tls`: a close_notify alert, then the TCP close)."""

    def __init__(self, late: bytes = b"", close: bool = False,
                 tls: ssl.SSLContext | None = None) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.connections = self.requests = 0
        self.late, self.close_after, self.tls = late, close, tls
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        try:
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
            with conn:
                while _read_request(conn):
                    self.requests += 1
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                                 b"Transfer-Encoding: chunked\r\n\r\n" + _chunked(STREAM))
                    time.sleep(0.05)  # the client has put the connection back: idle
                    if self.late:
                        conn.sendall(self.late)
                    if self.close_after:
                        if isinstance(conn, ssl.SSLSocket):
                            conn.unwrap()  # close_notify, as nginx and Go send it
                        return
        except (OSError, ValueError):
            pass

    def close(self) -> None:
        self.sock.close()


class _PublicOnly:
    """A connection pool showing only its public methods, as a geventhttpclient whose
    private attributes differ from 2.6's would."""

    def __init__(self, pool: object) -> None:
        self._pool = pool

    def __getattr__(self, name: str) -> object:
        if name in ("_socket_queue", "_semaphore"):
            raise AttributeError(name)
        return getattr(self._pool, name)


@pytest.mark.parametrize("pool", ["geventhttpclient 2.6", "public methods only"])
def test_streams_in_a_row_share_one_kept_alive_connection(pool: str) -> None:
    server = KeepingServer()
    client = ClientFor(server.port)
    if pool == "public methods only":
        client.transport.pool = _PublicOnly(client.transport.pool)
    try:
        results = [_stream(client, i).finish() for i in range(3)]
    finally:
        client.close()
        server.close()
    assert [r.failure for r in results] == [None] * 3
    assert all(r.content_chunks == 1 for r in results)
    assert (server.requests, server.connections) == (3, 1)


@pytest.mark.parametrize("late,close", [
    (b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
     True),
    (b"x", False),
], ids=["a late 408, then the close", "a stray byte, left open"])
def test_an_idle_connection_with_bytes_waiting_is_not_reused(late: bytes, close: bool) -> None:
    """Bytes no request asked for mean the connection must not carry the next request (it
    would read them as its answer): each request gets a new connection, and succeeds."""
    server = KeepingServer(late=late, close=close)
    client = ClientFor(server.port)
    try:
        results = []
        for i in range(3):
            results.append(_stream(client, i).finish())
            time.sleep(0.2)  # the late bytes have arrived
    finally:
        client.close()
        server.close()
    assert [r.failure for r in results] == [None] * 3
    assert (server.requests, server.connections) == (3, 3)


def test_an_https_connection_closed_with_close_notify_is_replaced(tmp_path: Path) -> None:
    """A TLS server closes an idle connection with a close_notify alert before the TCP
    close: the alert's bytes are waiting, so the connection is replaced, not written to."""
    cert, key = self_signed_cert(tmp_path)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    server = KeepingServer(close=True, tls=tls)
    client = ChatClient(Endpoint.parse(f"https://127.0.0.1:{server.port}"), None,
                        network_timeout_s=5)
    client.transport.pool.ssl_context.load_verify_locations(cert)
    try:
        results = []
        for i in range(3):
            results.append(_stream(client, i).finish())
            time.sleep(0.2)  # the alert and the close have arrived
    finally:
        client.close()
        server.close()
    assert [r.failure for r in results] == [None] * 3
    assert (server.requests, server.connections) == (3, 3)


def ClientFor(port: int) -> ChatClient:  # noqa: N802 - reads as a constructor in the tests
    return ChatClient(Endpoint.parse(f"http://127.0.0.1:{port}"), None, network_timeout_s=5)


def test_a_line_that_never_ends_is_malformed_not_unbounded() -> None:
    """A stream line past MAX_LINE_BYTES without a newline: a malformed_chunk failure, with
    the client's buffer bounded, instead of reading it all into memory."""
    from anvil_metrics.wire.client import MAX_LINE_BYTES

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def serve() -> None:
        conn, _ = srv.accept()
        with conn:
            _read_request(conn)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                         b"Connection: close\r\n\r\ndata: ")
            block = b"x" * 65536
            try:
                for _ in range(MAX_LINE_BYTES // len(block) + 64):
                    conn.sendall(block)
            except OSError:
                pass  # the client gave up, as it should

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    client = ClientFor(srv.getsockname()[1])
    try:
        rec = _stream(client, 0).finish()
    finally:
        client.close()
        srv.close()
    assert rec.failure is not None and rec.failure.kind == "malformed_chunk"
    assert "longer than" in rec.failure.message


def test_a_stream_killed_mid_body_drops_its_connection_at_once(monkeypatch) -> None:
    """A GreenletExit (Locust stopping a user) at the yield after a full read: the
    connection is closed at once, not drained for seconds first."""
    import sys

    import gevent

    from anvil_metrics.wire import transport as transport_module

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    closed_after_s: list[float] = []

    def serve() -> None:
        conn, _ = srv.accept()
        with conn:
            _read_request(conn)
            event = b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
                         + event * (300_000 // len(event)))  # several full reads; no end
            t = time.monotonic()
            conn.settimeout(10)
            try:
                while conn.recv(65536):
                    pass
            except OSError:
                pass
            closed_after_s.append(time.monotonic() - t)

    threading.Thread(target=serve, daemon=True).start()
    real_sleep = gevent.sleep

    def sleep(seconds: float = 0, *args: object) -> None:
        if seconds == 0 and sys._getframe(1).f_code.co_name == "body_blocks":
            raise gevent.GreenletExit
        real_sleep(seconds, *args)

    monkeypatch.setattr(transport_module.gevent, "sleep", sleep)
    client = ClientFor(srv.getsockname()[1])
    t = time.monotonic()
    try:
        with pytest.raises(gevent.GreenletExit):
            _stream(client, 0)
        elapsed = time.monotonic() - t
    finally:
        monkeypatch.undo()
        client.close()
        srv.close()
    for _ in range(50):
        if closed_after_s:
            break
        time.sleep(0.1)
    assert elapsed < 4  # loose: a drain would take its 5 s
    assert closed_after_s and closed_after_s[0] < 4
