"""A minimal HTTP/1.1 server protocol: just enough for OpenAI-style clients, nothing hidden.

Why hand-written: a framework adds buffering, middleware and its own scheduling between "the
deadline passed" and "the bytes hit the socket", which is exactly the gap the simulator must
not have. Here one `write()` is one `transport.write()`, sockets have TCP_NODELAY, and the
moment a request body is complete is known to the microsecond.

Supported: HTTP/1.1 only, keep-alive (and pipelining, handled one request at a time),
``Content-Length`` request bodies, ``Expect: 100-continue``, ``Content-Length`` responses and
``Transfer-Encoding: chunked`` streams. Not supported (answered with an error): HTTP/1.0,
chunked request bodies, oversized headers or bodies.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import sys
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024

REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    411: "Length Required",
    413: "Payload Too Large",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
    505: "HTTP Version Not Supported",
}

STREAM_END = b"0\r\n\r\n"
_LINGER_ZERO = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST, not FIN
INTAKE_SLICE_NS = 300_000  # request handling per loop turn before sockets are read again


@dataclass(slots=True)
class HttpRequest:
    """One parsed request. Header names are lower-case; `path` has no query string."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes
    keep_alive: bool


class HttpError(Exception):
    """A protocol-level problem: answer `status` with `message`, then close the connection."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def error_body(
    message: str,
    status: int,
    err_type: str = "invalid_request_error",
    param: str | None = None,
    code: str | int | None = None,
) -> dict[str, Any]:
    """The OpenAI error envelope ``{"error": {message, type, param, code}}``."""
    return {
        "error": {
            "message": message,
            "type": err_type,
            "param": param,
            "code": status if code is None else code,
        }
    }


Handler = Callable[[HttpRequest, "HttpConnection", int], None]
Headers = Sequence[tuple[str, str]]


def _parse_head(head: bytes) -> tuple[str, str, str, dict[str, str]]:
    """Request line and headers of one request head (without the blank line)."""
    try:
        lines = head.decode("latin-1").split("\r\n")
        method, target, version = lines[0].split(" ")
    except ValueError as exc:
        raise HttpError(400, "malformed request line") from exc
    if version != "HTTP/1.1":
        raise HttpError(505, f"only HTTP/1.1 is supported, got {version!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise HttpError(400, "malformed header line")
        headers[name.lower()] = value.strip()
    return method, target, version, headers


def _content_length(headers: dict[str, str]) -> int:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        raise HttpError(411, "chunked request bodies are not supported; send Content-Length")
    raw = headers.get("content-length", "0")
    if not raw.isdigit():
        raise HttpError(400, "bad Content-Length")
    length = int(raw)
    if length > MAX_BODY_BYTES:
        raise HttpError(413, "request body too large")
    return length


class Intake:
    """Handles received requests in short slices, so sockets are read (and stamped) between.

    Parsing and tokenizing a long prompt takes a fraction of a millisecond. Handled straight
    from `data_received`, a burst of requests would delay the *reading* (and so the t0 stamp)
    of each request by the handling of all those ahead of it. Here every turn of the loop
    first reads (and stamps) whatever has arrived, then handles queued requests for at most
    `INTAKE_SLICE_NS`.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queue: deque[HttpConnection] = deque()
        self._scheduled = False

    def waiting(self) -> bool:
        """Whether received requests wait to be handled (the timer should not spin then)."""
        return bool(self._queue)

    def push(self, conn: HttpConnection) -> None:
        self._queue.append(conn)
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._next)

    def _next(self) -> None:
        give_up = time.monotonic_ns() + INTAKE_SLICE_NS
        queue = self._queue
        while queue:
            queue.popleft().process_received()
            if time.monotonic_ns() > give_up:
                break
        if queue:
            self._loop.call_soon(self._next)
        else:
            self._scheduled = False


class HttpConnection(asyncio.Protocol):
    """One client connection: parses requests, hands each to `handler`, writes its response.

    The handler is called as ``handler(request, connection, t0_ns)`` where ``t0_ns`` is
    ``time.monotonic_ns()`` taken when the bytes completing the request were received (for a
    pipelined request held back behind another, when its turn came). It must eventually
    finish the response with `respond`/`respond_json`, or `stream_head` … `stream_end`;
    until then later pipelined requests wait in the buffer.
    """

    def __init__(
        self,
        handler: Handler,
        intake: Intake,
        on_close: Callable[[HttpConnection], None] | None = None,
    ) -> None:
        self._handler = handler
        self._intake = intake
        self._on_close = on_close
        self._transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._busy = False
        self._in_process = False
        self._keep_alive = True
        self._sent_continue = False
        self._queued = False
        self._rx_ns = 0  # monotonic ns of the latest receive
        self._when_done: list[Callable[[], None]] = []
        self.closed = False

    # -- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        """Stamp and buffer only; the request is handled later, through the `Intake`."""
        self._rx_ns = time.monotonic_ns()
        self._buf += data
        if not self._busy and not self._queued:
            self._queued = True
            self._intake.push(self)

    def process_received(self) -> None:
        """Handle what `data_received` buffered; t0 is the stamp of the latest receive."""
        self._queued = False
        if not self._busy:
            self._process(self._rx_ns)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._transport = None
        self._settle()
        if self._on_close is not None:
            self._on_close(self)

    # -- request side -----------------------------------------------------------------------

    def _process(self, now: int) -> None:
        self._in_process = True
        try:
            while not self._busy and not self.closed:
                try:
                    request = self._take_request()
                except HttpError as exc:
                    self._keep_alive = False
                    self.respond_json(exc.status, error_body(exc.message, exc.status))
                    return
                if request is None:
                    return
                self._busy = True
                self._keep_alive = request.keep_alive
                try:
                    self._handler(request, self, now)
                except Exception:  # a bug answers one request, not the server
                    traceback.print_exc(file=sys.stderr)
                    self.abort()
                    return
                now = time.monotonic_ns()  # a pipelined request starts when we get to it
        finally:
            self._in_process = False

    def _take_request(self) -> HttpRequest | None:
        """Remove one complete request from the buffer, or return None if it is incomplete."""
        end = self._buf.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buf) > MAX_HEADER_BYTES:
                raise HttpError(431, "request head too large")
            return None
        method, target, _version, headers = _parse_head(bytes(self._buf[:end]))
        length = _content_length(headers)
        start = end + 4
        if len(self._buf) - start < length:
            self._maybe_continue(headers)
            return None
        body = bytes(self._buf[start : start + length])
        del self._buf[: start + length]
        self._sent_continue = False
        path, _, query = target.partition("?")
        keep_alive = headers.get("connection", "").lower() != "close"
        return HttpRequest(method, path, query, headers, body, keep_alive)

    def _maybe_continue(self, headers: dict[str, str]) -> None:
        if headers.get("expect", "").lower() == "100-continue" and not self._sent_continue:
            self._sent_continue = True
            self.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    # -- response side ----------------------------------------------------------------------

    def when_done(self, callback: Callable[[], None]) -> None:
        """Call `callback` once, when the current response ends: completed, or the connection
        aborted, reset or lost (``--max-running`` frees a slot or leaves its queue with it; the
        ledger stops counting the stream as running). Several callbacks run last-registered
        first, so a stream leaves the running count before its slot admits the next one."""
        self._when_done.append(callback)

    def _settle(self) -> None:
        done, self._when_done = self._when_done, []
        for callback in reversed(done):
            callback()

    def write(self, data: bytes) -> None:
        """One transport write (the caller frames chunks itself on the hot path)."""
        if self._transport is not None:
            self._transport.write(data)

    def buffered(self) -> int:
        """Bytes written and not yet taken by the socket (a bulk writer waits while many)."""
        return 0 if self._transport is None else self._transport.get_write_buffer_size()

    def _head(self, status: int, headers: Headers) -> bytes:
        lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Unknown')}", "server: anvil-sim"]
        lines += [f"{name}: {value}" for name, value in headers]
        if not self._keep_alive:
            lines.append("connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def respond(
        self,
        status: int,
        body: bytes,
        content_type: str = "application/json",
        extra: Headers = (),
    ) -> None:
        """A complete response with Content-Length, then the next request (or close)."""
        head = self._head(
            status,
            [("content-type", content_type), ("content-length", str(len(body))), *extra],
        )
        self.write(head + body)
        self._complete()

    def respond_json(self, status: int, obj: Any, extra: Headers = ()) -> None:
        self.respond(status, orjson.dumps(obj), extra=extra)

    def stream_head(
        self, content_type: str = "text/event-stream; charset=utf-8", extra: Headers = ()
    ) -> bytes:
        """Header bytes of a 200 chunked response, for the caller to send with its first event."""
        return self._head(
            200,
            [
                ("content-type", content_type),
                ("cache-control", "no-cache"),
                ("transfer-encoding", "chunked"),
                *extra,
            ],
        )

    def stream_end(self, last: bytes = b"") -> None:
        """Write `last` (already framed) and the terminating chunk in one write; finish."""
        self.write(last + STREAM_END)
        self._complete()

    def _complete(self) -> None:
        self._busy = False
        self._settle()  # before the next pipelined request can register its own callback
        if self.closed or self._transport is None:
            return
        if not self._keep_alive:
            self._transport.close()
            self.closed = True
            return
        if self._buf and not self._in_process:
            self._process(time.monotonic_ns())

    def abort(self) -> None:
        """Drop the connection now (server shutdown)."""
        if self._transport is not None:
            self._transport.abort()
        self.closed = True
        self._settle()

    def reset(self) -> None:
        """Drop the connection with a TCP RST (fault injection): SO_LINGER 0, then abort."""
        if self._transport is not None:
            sock = self._transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_ZERO)
            self._transport.abort()
        self.closed = True
        self._settle()
