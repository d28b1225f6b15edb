"""Kept-alive connections a server closes between requests (llama.cpp's server closes after
every streamed response): the next request is sent once more on a new connection instead of
failing; a connection that fails before it ever answered is not retried."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from anvil_metrics.client import ChatClient, Endpoint
from anvil_metrics.observe import StreamObserver

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
    """Answers each request on a connection with one SSE stream, then closes it (and,
    with `close_first`, closes the very first connection before answering anything)."""

    def __init__(self, close_first: bool = False) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.requests = 0
        self.connections = 0
        self.close_first = close_first
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
                if head.startswith(b"GET"):
                    body = b'{"data":[{"id":"m"}]}'
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
                else:
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                                 b"Transfer-Encoding: chunked\r\n"
                                 b"Keep-Alive: timeout=5, max=100\r\n\r\n" + _chunked(STREAM))
                time.sleep(0.01)  # the close reaches the client after it reused the socket

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


def test_a_closed_kept_alive_connection_is_retried_once(server: ClosingServer) -> None:
    client = ClientFor(server.port)
    try:
        results = [_stream(client, i).finish() for i in range(5)]
    finally:
        client.close()
    assert [r.failure for r in results] == [None] * 5
    assert all(r.content_chunks == 1 for r in results)
    assert server.requests == 5  # each request answered once: nothing sent twice


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


def ClientFor(port: int) -> ChatClient:  # noqa: N802 - reads as a constructor in the tests
    return ChatClient(Endpoint.parse(f"http://127.0.0.1:{port}"), None, network_timeout_s=5)
