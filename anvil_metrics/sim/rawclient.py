"""A raw-socket client for checking the simulator itself (tests and `benchmarks/sim_capacity.py`).

Checking a server's timing with a heavy client would measure the client. This one only records
bytes and the `time.perf_counter_ns()` of every receive while the stream runs; all parsing
happens afterwards (`parse_capture`), where each HTTP chunk is mapped back to the receive that
completed it. It also checks the framing promise: one HTTP chunk holds exactly one SSE event.

It is not anvil's measuring client (that one lives outside `sim/`), only the simulator's yardstick.
"""

from __future__ import annotations

import bisect
import selectors
import socket
import time
from dataclasses import dataclass, field
from typing import Any

import orjson


@dataclass(slots=True)
class Capture:
    """Bytes of one response as received, with (bytes so far, arrival ns) for every recv."""

    raw: bytearray = field(default_factory=bytearray)
    ends: list[int] = field(default_factory=list)
    times: list[int] = field(default_factory=list)

    def add(self, data: bytes, now_ns: int) -> None:
        self.raw += data
        self.ends.append(len(self.raw))
        self.times.append(now_ns)

    def arrival_of(self, end_offset: int) -> int:
        """Arrival time of the receive that brought byte `end_offset - 1`."""
        return self.times[bisect.bisect_left(self.ends, end_offset)]

    def looks_complete(self) -> bool:
        """Cheap end check for the receive loop: a chunked terminator, or all Content-Length."""
        raw = self.raw
        if raw.endswith(b"\r\n0\r\n\r\n"):
            return True
        head_end = raw.find(b"\r\n\r\n")
        if head_end < 0 or b"content-length:" not in raw[:head_end].lower():
            return False
        head = _parse_head(bytes(raw))
        return head is not None and len(raw) - head[2] >= int(head[1]["content-length"])


@dataclass(slots=True)
class Event:
    """One SSE event: its ``data`` payload, the parsed JSON (None for ``[DONE]``), arrival."""

    data: bytes
    chunk: dict[str, Any] | None
    arrival_ns: int


@dataclass(slots=True)
class Response:
    """A parsed response: status, headers, body (non-chunked) or events, and how it ended."""

    status: int
    headers: dict[str, str]
    body: bytes = b""
    events: list[Event] = field(default_factory=list)
    complete: bool = False  # the body ended as its framing says (terminating chunk / length)
    headers_arrival_ns: int = 0


def request_bytes(path: str, payload: Any = None, method: str = "POST") -> bytes:
    """A complete HTTP/1.1 request for 127.0.0.1 with a JSON body (or none)."""
    body = b"" if payload is None else orjson.dumps(payload)
    head = (
        f"{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\naccept: */*\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def _parse_head(raw: bytes) -> tuple[int, dict[str, str], int] | None:
    end = raw.find(b"\r\n\r\n")
    if end < 0:
        return None
    lines = raw[:end].decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, end + 4


def _sse_event(payload: bytes) -> bytes:
    """The ``data`` of an HTTP chunk that must hold exactly one ``data: …\\n\\n`` event."""
    if not payload.startswith(b"data: ") or not payload.endswith(b"\n\n"):
        raise ValueError(f"HTTP chunk is not one SSE event: {payload[:80]!r}")
    data = payload[6:-2]
    if b"\n\n" in data:
        raise ValueError("HTTP chunk holds more than one SSE event")
    return data


def _parse_chunks(capture: Capture, pos: int, response: Response) -> int:
    """Walk the chunked body from `pos`; return where the walk stopped."""
    raw = bytes(capture.raw)
    while True:
        line_end = raw.find(b"\r\n", pos)
        if line_end < 0:
            return pos
        size = int(raw[pos:line_end].split(b";")[0], 16)
        if size == 0:
            response.complete = raw.startswith(b"\r\n", line_end + 2)
            return line_end + 4
        start, stop = line_end + 2, line_end + 2 + size
        if len(raw) < stop + 2:
            return pos
        data = _sse_event(raw[start:stop])
        chunk = None if data == b"[DONE]" else orjson.loads(data)
        response.events.append(Event(data, chunk, capture.arrival_of(stop)))
        pos = stop + 2


def parse_capture(capture: Capture) -> Response | None:
    """Parse one response from `capture`; None if even its head has not fully arrived."""
    head = _parse_head(bytes(capture.raw))
    if head is None:
        return None
    status, headers, body_start = head
    response = Response(status, headers, headers_arrival_ns=capture.arrival_of(body_start))
    if headers.get("transfer-encoding") == "chunked":
        _parse_chunks(capture, body_start, response)
    else:
        length = int(headers.get("content-length", "0"))
        response.body = bytes(capture.raw[body_start : body_start + length])
        response.complete = len(response.body) == length
    return response


def exchange(
    port: int, path: str, payload: Any = None, method: str = "POST", timeout: float = 30.0
) -> tuple[int, Response]:
    """Send one request on a fresh connection and read the whole response (blocking).

    Returns the `perf_counter_ns()` taken just before the request was handed to the kernel
    (so never after the server saw it), and the parsed response with per-event arrival times.
    """
    capture = Capture()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        request = request_bytes(path, payload, method)
        sent_ns = time.perf_counter_ns()  # before the send: a sure lower bound of server t0
        sock.sendall(request)
        while True:
            data = sock.recv(65536)
            now = time.perf_counter_ns()
            if not data:
                break
            capture.add(data, now)
            if capture.looks_complete():
                break
    response = parse_capture(capture)
    if response is None:
        raise ConnectionError("connection closed before a response head")
    return sent_ns, response


def exchange_many(
    port: int, path: str, payloads: list[Any], method: str = "POST", timeout: float = 30.0
) -> list[tuple[int, Response]]:
    """`exchange` for several concurrent requests, one thread and one selector for all.

    Threads would stamp arrivals late whenever they wait for the GIL; one non-blocking loop
    stamps every receive as soon as the kernel reports it. Each connection first completes a
    ``GET /health`` so that the server has accepted it before the timed requests go out back
    to back (otherwise accepting the connections would be part of the measured time).
    """
    socks = [socket.create_connection(("127.0.0.1", port), timeout=timeout) for _ in payloads]
    for sock in socks:
        _warm(sock)
    captures = [Capture() for _ in payloads]
    sent: list[int] = []
    with selectors.DefaultSelector() as sel:
        for k, (sock, payload) in enumerate(zip(socks, payloads, strict=True)):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            request = request_bytes(path, payload, method)
            sent.append(time.perf_counter_ns())
            sock.sendall(request)
            sock.setblocking(False)
            sel.register(sock, selectors.EVENT_READ, k)
        _receive_all(sel, captures, time.monotonic() + timeout)
    for sock in socks:
        sock.close()
    results = []
    for sent_ns, capture in zip(sent, captures, strict=True):
        response = parse_capture(capture)
        if response is None:
            raise ConnectionError("connection closed before a response head")
        results.append((sent_ns, response))
    return results


def _receive_all(sel: selectors.BaseSelector, captures: list[Capture], give_up: float) -> None:
    open_count = len(captures)
    while open_count:
        if time.monotonic() > give_up:
            raise TimeoutError("responses did not complete in time")
        for key, _ in sel.select(timeout=1.0):
            data = key.fileobj.recv(65536)  # type: ignore[union-attr]
            now = time.perf_counter_ns()
            capture = captures[key.data]
            if data:
                capture.add(data, now)
            if not data or capture.looks_complete():
                sel.unregister(key.fileobj)
                open_count -= 1


def _warm(sock: socket.socket) -> None:
    """One keep-alive ``GET /health`` round trip on a blocking socket."""
    sock.sendall(request_bytes("/health", method="GET"))
    capture = Capture()
    while not capture.looks_complete():
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("connection closed during warm-up")
        capture.add(data, 0)
