"""The HTTP transport under anvil's streams: the one module that touches geventhttpclient's
and gevent's private internals, and checks them before the first request.

geventhttpclient (Locust's FastHttp engine) does the connecting, pooling and HTTP parsing,
but three things anvil measures need its internals: a stream's body is read straight from
the non-blocking OS socket (`HTTPSocketResponse._sock`, gevent's `socket._sock` and
`socket._read_event`), taking what the parser already buffered (`HTTPResponse._body_buffer`);
an idle kept-alive socket is taken from the pool without the pool's hub-turning liveness
check (`ConnectionPool._socket_queue`, `._semaphore`); the pool itself is
`HTTPClient._connection_pool`. Those names are not geventhttpclient's API and may change in
any release, so the supported versions are pinned in `pyproject.toml` (the same range as
`SUPPORTED_GEVENTHTTPCLIENT`) and `require_private_api` checks, once, when the first
transport is created, that each of them exists; a geventhttpclient without one is refused
with one line (`TransportUnsupported`) instead of failing every request mid-run.

Every check is made on real objects built offline (no connection): an `HTTPClient` for a
port nothing is asked of, a bare response parser, a response whose headers come from a
stand-in socket's `recv`, and an unconnected gevent socket. The pool's two attributes are
optional: without them `idle_socket` returns None and the pool's own `get_socket` hands out
idle sockets as before (slower under load, never wrong).
"""

from __future__ import annotations

import _socket
import socket
import time
from collections.abc import Iterator, Sequence
from typing import Any

import gevent
import gevent.queue
import gevent.socket
import geventhttpclient
from gevent.ssl import SSLSocket
from geventhttpclient import HTTPClient
from geventhttpclient.response import (
    HTTPConnectionClosed,
    HTTPParseError,
    HTTPResponse,
    HTTPSocketPoolResponse,
)

from anvil_metrics.errors import TransportUnsupported

_perf_ns = time.perf_counter_ns

# the geventhttpclient versions whose internals were checked (2.6.1); pyproject.toml pins
# the same range (tests/unit/wire/test_transport.py holds them equal)
SUPPORTED_GEVENTHTTPCLIENT = ">=2.6,<2.7"

# what a transport's errors are, for the failure table (failures.py)
TIMEOUT_ERRORS: tuple[type[BaseException], ...] = (TimeoutError, gevent.Timeout)
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    ConnectionError, HTTPConnectionClosed, OSError, HTTPParseError)

SEND_CHUNK_BYTES = 64 * 1024
RECV_BYTES = 64 * 1024
# the longest response head the client reads (geventhttpclient has no limit: an endless
# header would grow without bound); real servers send a few KiB
MAX_HEAD_BYTES = 1024 * 1024
MAX_ANSWER_BYTES = 16 * 1024 * 1024  # a plain JSON answer's default limit (set-up's)
_YIELD_S = 1e-6  # a timer, not sleep(0): the hub polls sockets before timers fire


# -- the check of the internals --------------------------------------------------------------
def installed_version() -> str:
    return getattr(geventhttpclient, "__version__", None) or "(unknown version)"


class _StandInSocket:
    """Answers a response's one `recv` with a response head whose one-byte body is still to
    come (so the response keeps the socket, as a stream's does)."""

    def recv(self, _n: int) -> bytes:
        return b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n"


class _StandInPool:
    def return_socket(self, _sock: object) -> None:
        pass

    def release_socket(self, _sock: object) -> None:
        pass


def _missing(obj: object, owner: str, names: Sequence[str]) -> str | None:
    for name in names:
        if not hasattr(obj, name):
            return f"{owner}.{name}"
    return None


def missing_private_attribute() -> str | None:
    """The first private attribute the transport reads that the installed geventhttpclient
    (or gevent) lacks, as `Class.attribute`, or None when all are there."""
    http = HTTPClient("127.0.0.1", port=9)  # nothing is connected until a request
    missing = _missing(http, "HTTPClient", ("_connection_pool",))
    if missing:
        return missing  # and nothing to close
    http.close()
    missing = _missing(HTTPResponse(), "HTTPResponse", ("_body_buffer", "message_complete"))
    if missing:
        return missing
    stand_in = _StandInSocket()
    resp = HTTPSocketPoolResponse(stand_in, _StandInPool())
    try:
        if getattr(resp, "_sock", None) is not stand_in:
            return "HTTPSocketPoolResponse._sock"
        missing = _missing(resp, "HTTPSocketPoolResponse", ("_body_buffer", "block_size"))
    finally:
        resp.release()
    if missing:
        return missing
    sock = gevent.socket.socket()  # unconnected: an fd, no traffic
    try:
        missing = _missing(sock, "gevent.socket.socket", ("_sock", "_read_event", "hub"))
    finally:
        sock.close()
    return missing


_checked = False


def require_private_api() -> None:
    """Raise `TransportUnsupported` (one line: version, attribute, supported range) unless
    every internal the transport reads exists; checked once per process."""
    global _checked
    if _checked:
        return
    missing = missing_private_attribute()
    if missing is not None:
        raise TransportUnsupported(installed_version(), missing, SUPPORTED_GEVENTHTTPCLIENT)
    _checked = True


# -- the read side: timeouts and the body -----------------------------------------------------
class TotalTimeout(Exception):
    """Raised into a request's greenlet when its total timeout expires."""


class HeadTooLong(HTTPParseError):
    """The response head went on past `MAX_HEAD_BYTES`."""


class AnswerTooLong(HTTPParseError):
    """A plain answer's body went on past the client's limit (`Transport.get`, `post`)."""


class _BoundedResponse(HTTPSocketPoolResponse):
    """geventhttpclient's response, its head bounded by `MAX_HEAD_BYTES` (counted as fed
    while the head is incomplete: at most one read past the limit is held)."""

    _head_bytes = 0

    def feed(self, data: str | bytes) -> None:
        if not self.headers_complete:
            self._head_bytes += len(data)
            super().feed(data)
            if not self.headers_complete and self._head_bytes > MAX_HEAD_BYTES:
                raise HeadTooLong(f"the response head is longer than {MAX_HEAD_BYTES} bytes, "
                                  "the client's limit")
            return
        super().feed(data)


def read_at_most(resp: Any, limit: int) -> bytes:
    """A plain answer's whole body, or `AnswerTooLong` once it is longer than `limit`
    (never more than one read past it in memory)."""
    length = resp.content_length
    if length is not None and length > limit:
        raise AnswerTooLong(f"an answer of {length} bytes, longer than the client's limit "
                            f"({limit} bytes)")
    parts, total = [], 0
    while piece := resp.read(RECV_BYTES):
        total += len(piece)
        if total > limit:
            raise AnswerTooLong(f"an answer longer than the client's limit ({limit} bytes)")
        parts.append(piece)
    return b"".join(parts)


class Cancelled(Exception):
    """Raised into a request's greenlet at its planned cancellation (`load/cancel.py`)."""


class SilenceTimeout(TimeoutError):
    """Raised into a stream's greenlet by its `Silence` watchdog."""


class Silence:
    """A stream's watchdog: raises SilenceTimeout into the stream's greenlet once nothing
    has arrived for `limit_s` (the first-byte timeout until the first output, then the idle
    timeout; `set_limit` changes it on the way).

    Why not the socket's own timeout: gevent starts and cancels a timer around every wait of
    a socket with a timeout, once per SSE event, ~6 % of a loaded worker's CPU (measured at
    256 streams). This watchdog is one timer per stream that fires at most once per limit:
    when it finds bytes arrived since (`last_ns`, stamped by the reader), it re-arms for the
    rest of the limit; only a real silence raises.
    """

    __slots__ = ("last_ns", "limit_s", "_loop", "_greenlet", "_timer")

    def __init__(self, limit_s: float) -> None:
        self.last_ns = _perf_ns()
        self.limit_s = limit_s
        self._loop = gevent.get_hub().loop
        self._greenlet = gevent.getcurrent()
        self._timer: Any = None
        self._arm(limit_s)

    def _arm(self, seconds: float) -> None:
        self._timer = self._loop.timer(max(seconds, 0.0))
        self._timer.start(self._expired)

    def _left_s(self) -> float:
        """What is left of the limit, counted from the last bytes."""
        return self.limit_s - (_perf_ns() - self.last_ns) / 1e9

    def _expired(self) -> None:  # runs in the hub
        self._timer.close()
        left_s = self._left_s()
        if left_s > 0:
            self._arm(left_s)
        else:
            self._timer = None
            self._greenlet.throw(SilenceTimeout(f"nothing received for {self.limit_s:g} s"))

    def set_limit(self, limit_s: float) -> None:
        """From now on silences are bounded by `limit_s` (counted from the last bytes)."""
        self.limit_s = limit_s
        if self._timer is not None:
            self._timer.close()
            self._arm(self._left_s())

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.close()
            self._timer = None


def body_blocks(resp: Any, silence: Silence | None = None) -> Iterator[tuple[bytes, int]]:
    """The response body as it arrives: (bytes, perf_counter_ns right after the `recv`
    that delivered them). Whatever geventhttpclient's parser has already buffered (with
    the headers) comes first, stamped now. Reads once per `recv`, never waiting for a
    full buffer; chunked transfer encoding is decoded by geventhttpclient's parser.

    The socket is read directly (its non-blocking OS socket; on EAGAIN, a wait on its read
    watcher): gevent's `recv` on a socket with a timeout starts and cancels a timer around
    every wait, once per SSE event. Silences are bounded by `silence` instead, whose
    `last_ns` each read stamps. A TLS socket is read through gevent's TLS layer (the OS
    socket holds ciphertext), with its timeout off for the same reason."""
    buf = resp._body_buffer
    if buf:
        block = bytes(buf)
        del buf[:]
        yield block, _perf_ns()
    if resp.message_complete:  # it came whole with the headers (a small JSON answer)
        return
    full = resp.block_size
    sock = resp._sock
    if sock is None:
        raise HTTPConnectionClosed("connection closed.")
    if isinstance(sock, SSLSocket):
        # TLS: the OS socket holds ciphertext, so read through gevent's TLS layer; without
        # a socket timeout its waits start no timer (`silence` bounds them, as below)
        sock.settimeout(None)
        raw_recv = sock.recv
    else:
        raw_recv = sock._sock.recv  # the OS socket, non-blocking (gevent keeps it so)
    wait, readable = sock.hub.wait, sock._read_event
    while not resp.message_complete:
        if resp._sock is None:
            raise HTTPConnectionClosed("connection closed.")
        try:
            # read first, as gevent does: what arrived while this stream was busy (the
            # next event of a quick pair, e.g. usage then [DONE]) is stamped now, not after
            # a turn of the hub behind every other ready stream
            data = raw_recv(full)
        except (BlockingIOError, InterruptedError):
            try:
                wait(readable)
            except BaseException:
                resp.release()
                raise
            continue
        except BaseException:
            resp.release()
            raise
        t = _perf_ns()
        if silence is not None:
            silence.last_ns = t
        try:
            resp.feed(data)
        except BaseException:
            resp.release()
            raise
        if buf:
            block = bytes(buf)
            del buf[:]
            yield block, t
        elif resp.message_complete:
            yield b"", t  # the end itself (e.g. the last chunk's terminator) arrived now
        elif not data:
            resp.release()
            raise HTTPConnectionClosed("connection closed mid-response.")
        if len(data) == full:
            # a full read: more is probably waiting, and would be read without yielding;
            # let the other streams stamp theirs before this one drains its backlog
            gevent.sleep(0)


# -- the write side ---------------------------------------------------------------------------
class SendStats:
    """One run's writes of request chunks: how many, and the longest the hub was held by
    one (the evidence that sending prompts never stalls other streams). The run's session
    owns one and its users' clients count into it (`ChatClient(send_stats=…)`), so a run
    counts its own writes only, from zero."""

    __slots__ = ("chunks", "max_chunk_ns")

    def __init__(self) -> None:
        self.chunks = 0
        self.max_chunk_ns = 0

    def wrote(self, held_ns: int) -> None:
        """One chunk was written, holding the hub `held_ns`."""
        self.chunks += 1
        if held_ns > self.max_chunk_ns:
            self.max_chunk_ns = held_ns


def chunks(parts: Sequence[bytes], size: int = SEND_CHUNK_BYTES) -> Iterator[bytes]:
    """The concatenation of `parts` in pieces of `size` bytes (the last may be shorter),
    slicing large parts without copying them and joining only the small pieces."""
    pending: list[memoryview] = []
    filled = 0
    for part in parts:
        view = memoryview(part)
        off = 0
        while off < len(view):
            take = min(size - filled, len(view) - off)
            pending.append(view[off:off + take])
            filled += take
            off += take
            if filled == size:
                yield pending[0] if len(pending) == 1 else b"".join(pending)
                pending, filled = [], 0
    if pending:
        yield pending[0] if len(pending) == 1 else b"".join(pending)


def send_cooperatively(sock: Any, parts: Sequence[bytes],
                       stats: SendStats | None = None) -> None:
    """Write the request (`parts`, concatenated) in 64 KiB chunks, yielding to the hub
    between chunks; each chunk's write is counted in `stats` (None: not counted).

    One `send` of a 1.4 MB prompt does not block on loopback (the socket buffer takes it),
    but the kernel does the receiving side's TCP work inside the call, and joining a
    request's 1.4 MB of parts costs ~1 ms: measured here, 64 streams sending 393k-token
    prompts held the hub 45-60 ms at a time, during which no other stream's bytes were
    stamped. The parts are sent as they are (no join), and each uninterrupted write is
    bounded by one chunk; the request is still stamped before its first byte.
    """
    for i, chunk in enumerate(chunks(parts)):
        if i:
            gevent.sleep(_YIELD_S)
        t0 = _perf_ns()
        sock.sendall(chunk)
        if stats is not None:
            stats.wrote(_perf_ns() - t0)


# -- the pool ---------------------------------------------------------------------------------
def not_reusable(sock: Any) -> bool:
    """True unless this idle kept-alive socket is open with nothing to read: a
    non-blocking peek at the OS socket finds "nothing yet" only then. Anything else — EOF,
    an error, or bytes no request asked for (a TLS close_notify before the server's close,
    a late `408 Request Timeout`) — means the connection must not carry a request, as the
    pool's own check (readable at all) says.

    A kept-alive connection the server closed while it sat in the pool (llama.cpp's server
    closes after each streamed response; any server may at its keep-alive timeout) is
    found this way and replaced before anything is written. A request that was written is
    never sent again: a failure after the write is a typed failure (a silent retry could
    double the load the server saw and hide the failure)."""
    # gevent's socket keeps the OS one in `_sock`; the C-level recv never waits (gevent's
    # would, on EAGAIN) and reads the TCP bytes under a TLS layer
    raw = getattr(sock, "_sock", sock)
    try:
        _socket.socket.recv(raw, 1, socket.MSG_PEEK | socket.MSG_DONTWAIT)  # data or EOF
    except (BlockingIOError, InterruptedError):
        return False  # nothing to read yet: idle and open
    except Exception:  # noqa: BLE001 - closed, reset, or not a socket we can peek at
        pass
    return True


def idle_socket(pool: Any) -> Any:
    """A kept-alive socket from the pool without the pool's own liveness check, or None.

    The pool's `get_socket` checks an idle socket with a zero-timeout `select`, which under
    gevent is a turn of the hub: when the process is busy, one pass over every stream with
    data waiting, before the next request can be sent. `not_reusable` makes the same
    check with a non-blocking peek. The pool's semaphore is taken as `get_socket` takes
    it; `return_socket` / `release_socket` give it back.

    A pool without these private attributes (another version, or a wrapper) gets None, and
    the caller's `get_socket` hands out idle sockets as before."""
    queue = getattr(pool, "_socket_queue", None)
    semaphore = getattr(pool, "_semaphore", None)
    if queue is None or semaphore is None:
        return None
    if not queue.qsize() or not semaphore.acquire(blocking=False):
        return None
    try:
        return queue.get(block=False)
    except gevent.queue.Empty:
        semaphore.release()
        return None


class Transport:
    """One HTTP connection pool of size 1 to one host: plain requests, and the pieces of a
    hand-written streamed request (a socket, the write, the response head, the body).

    `pool` is the connection pool the streamed path uses (tests may wrap it)."""

    def __init__(self, host: str, port: int, *, tls: bool, headers: dict[str, str],
                 connect_timeout_s: float, network_timeout_s: float,
                 max_answer_bytes: int = MAX_ANSWER_BYTES) -> None:
        """`max_answer_bytes`: the longest plain answer `get` and `post` read."""
        require_private_api()
        self.max_answer_bytes = max_answer_bytes
        self._http = HTTPClient(
            host, port=port, ssl=tls,
            connection_timeout=connect_timeout_s, network_timeout=network_timeout_s,
            concurrency=1, headers=headers,
            # one recv takes what has arrived, up to 64 KiB (4 KiB split a burst of events
            # into several reads, each with its own parser pass)
            block_size=RECV_BYTES,
        )
        self.pool: Any = self._http._connection_pool

    def close(self) -> None:
        self._http.close()

    def get(self, path: str) -> tuple[int, bytes]:
        """A plain GET: (status, body); `AnswerTooLong` past `max_answer_bytes`."""
        resp = self._http.get(path)
        try:
            return resp.status_code, read_at_most(resp, self.max_answer_bytes)
        finally:
            resp.release()

    def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        """A plain POST: (status, body); `AnswerTooLong` past `max_answer_bytes`."""
        resp = self._http.post(path, body=body)
        try:
            return resp.status_code, read_at_most(resp, self.max_answer_bytes)
        finally:
            resp.release()

    def reuse_idle(self) -> Any:
        """An idle kept-alive socket that can carry a request, or None (one found closed or
        spoken on while idle is closed here; nothing was written to it)."""
        sock = idle_socket(self.pool)
        if sock is not None and not_reusable(sock):
            self.pool.release_socket(sock)
            return None
        return sock

    def connect(self) -> Any:
        """A socket from the pool: a new connection if none is idle (may raise)."""
        return self.pool.get_socket()

    def discard(self, sock: Any) -> None:
        """Close a socket no response took (a failed write) and free its pool slot."""
        self.pool.release_socket(sock)

    def read_head(self, sock: Any) -> Any:
        """The response to the request just written, its head read (may raise, e.g.
        `HeadTooLong`; on any failure the response has released the socket to the pool
        itself)."""
        return _BoundedResponse(sock, self.pool, block_size=self._http.block_size,
                                      method="POST")
