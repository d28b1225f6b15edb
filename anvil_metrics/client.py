"""HTTP to an OpenAI-compatible endpoint: one streamed chat completion, observed.

geventhttpclient (Locust's FastHttp engine) is used directly rather than through
`FastHttpSession`, for three measured reasons: its `readline` returns each SSE line as soon
as it arrives (Locust's `iter_content`/`iter_lines` wait for full reads, +24 ms per event);
its timeouts can be set per client (FastHttp's 60 s `network_timeout` applies to every recv
and would cap a long prefill's TTFT); and the one Locust `request` event per stream is fired
by anvil with the end-to-end time, not the time to headers.

`Endpoint` parses the user's URL once: credentials are stripped from it (they are sent as a
header and never shown or stored), and `/v1` is appended unless the URL already ends in it.
"""

from __future__ import annotations

import _socket
import socket
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import gevent
import gevent.queue
import orjson
from geventhttpclient import HTTPClient
from geventhttpclient.response import (
    HTTPConnectionClosed,
    HTTPParseError,
    HTTPSocketPoolResponse,
)

from anvil_metrics.errors import UsageError
from anvil_metrics.observe import StreamObserver
from anvil_metrics.sse import EventSplitter, LineTooLong
from anvil_metrics.urls import strip_credentials

_perf_ns = time.perf_counter_ns
_ERROR_BODY_LIMIT = 64 * 1024


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A parsed endpoint. `base_url` is safe to show and store (no credentials)."""

    scheme: str
    host: str
    port: int
    api_path: str  # e.g. "/v1"
    userinfo_key: str | None = None  # a password given in the URL, used as the API key

    @property
    def base_url(self) -> str:
        host = self.host if ":" not in self.host else f"[{self.host}]"
        netloc = f"{host}:{self.port}"
        return urlunsplit((self.scheme, netloc, self.api_path, "", ""))

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        try:
            parts = urlsplit(url.strip())
            port = parts.port or (443 if parts.scheme == "https" else 80)  # ValueError if bad
        except ValueError:
            parts = None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise UsageError(
                f"--host {strip_credentials(url)!r} is not a usable URL; expected "
                "http(s)://HOST[:PORT][/v1], e.g. http://127.0.0.1:8000")
        path = parts.path.rstrip("/")
        if not path.endswith("/v1"):
            path = path + "/v1"
        return cls(parts.scheme, parts.hostname, port, path, parts.password or None)


SEND_CHUNK_BYTES = 64 * 1024
_YIELD_S = 1e-6  # a timer, not sleep(0): the hub polls sockets before timers fire


class SendStats:
    """The longest the hub was held by writing one chunk of a request (process-wide):
    the evidence that sending prompts never stalls other streams."""

    max_chunk_ns: int = 0
    chunks: int = 0


RECV_BYTES = 64 * 1024
MAX_LINE_BYTES = 16 * 1024 * 1024  # one SSE line; a 1 MiB chunk is fine, memory is bounded


class _TotalTimeout(Exception):
    """Raised into a request's greenlet when its total timeout expires."""


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


def _body_blocks(resp: Any, silence: Silence | None = None) -> Iterator[tuple[bytes, int]]:
    """The response body as it arrives: (bytes, perf_counter_ns right after the `recv`
    that delivered them). Whatever geventhttpclient's parser has already buffered (with
    the headers) comes first, stamped now. Reads once per `recv`, never waiting for a
    full buffer; chunked transfer encoding is decoded by geventhttpclient's parser.

    The socket is read directly (its non-blocking OS socket; on EAGAIN, a wait on its read
    watcher): gevent's `recv` on a socket with a timeout starts and cancels a timer around
    every wait, once per SSE event. Silences are bounded by `silence` instead, whose
    `last_ns` each read stamps."""
    buf = resp._body_buffer
    if buf:
        block = bytes(buf)
        del buf[:]
        yield block, _perf_ns()
    full = resp.block_size
    sock = resp._sock
    if sock is None:
        raise HTTPConnectionClosed("connection closed.")
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


def read_events(blocks: Iterable[tuple[bytes, int]], obs: StreamObserver,
                on_output_started: Callable[[], None] | None = None,
                limit: int = MAX_LINE_BYTES) -> int:
    """The one SSE path from body bytes to `obs`: each (block, arrival stamp) is split into
    events (`EventSplitter`) and each event is fed to the observer with its block's stamp,
    until the observer says the stream is over (`[DONE]`, a failure) or the body ends
    (`obs.on_eof`, stamped with the last block). Invalid UTF-8 and an endless line are
    `malformed_chunk` failures; errors of the transport (timeouts, resets) propagate.
    `on_output_started` is called once, after the block that brought the first output.
    Returns the body bytes read. Tests drive it with blocks cut anywhere."""
    splitter = EventSplitter(limit)
    nbytes = 0
    t: int | None = None
    waiting = on_output_started is not None
    try:
        for block, t in blocks:
            nbytes += len(block)
            for data in splitter.feed(block):
                if obs.on_data(data, t):
                    return nbytes
            if splitter.error is not None:  # after the events before it
                raise splitter.error
            if waiting and obs.first_output_ns is not None:
                waiting = False
                on_output_started()  # type: ignore[misc]
        t_end = t if t is not None else _perf_ns()
        for data in splitter.end():
            if obs.on_data(data, t_end):
                return nbytes
        obs.on_eof(t_end)
    except UnicodeDecodeError as e:
        obs.fail("malformed_chunk", f"stream is not valid UTF-8: {e}",
                 t if t is not None else _perf_ns(), phase=obs.phase)
    except LineTooLong as e:
        obs.fail("malformed_chunk", str(e), t if t is not None else _perf_ns(),
                 phase=obs.phase)
    return nbytes


def _not_reusable(sock: Any) -> bool:
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


def _idle_socket(pool: Any) -> Any:
    """A kept-alive socket from the pool without the pool's own liveness check, or None.

    The pool's `get_socket` checks an idle socket with a zero-timeout `select`, which under
    gevent is a turn of the hub: when the process is busy, one pass over every stream with
    data waiting, before the next request can be sent. `_not_reusable` makes the same
    check with a non-blocking peek. The pool's semaphore is taken as `get_socket` takes
    it; `return_socket` / `release_socket` give it back.

    These are geventhttpclient's (2.6) private attributes: a pool without them (another
    version) gets None, and the caller's `get_socket` hands out idle sockets as before."""
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


def _chunks(parts: Sequence[bytes], size: int = SEND_CHUNK_BYTES) -> Iterator[bytes]:
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


def _send_cooperatively(sock: Any, parts: Sequence[bytes]) -> None:
    """Write the request (`parts`, concatenated) in 64 KiB chunks, yielding to the hub
    between chunks.

    One `send` of a 1.4 MB prompt does not block on loopback (the socket buffer takes it),
    but the kernel does the receiving side's TCP work inside the call, and joining a
    request's 1.4 MB of parts costs ~1 ms: measured here, 64 streams sending 393k-token
    prompts held the hub 45-60 ms at a time, during which no other stream's bytes were
    stamped. The parts are sent as they are (no join), and each uninterrupted write is
    bounded by one chunk; the request is still stamped before its first byte.
    """
    for i, chunk in enumerate(_chunks(parts)):
        if i:
            gevent.sleep(_YIELD_S)
        t0 = _perf_ns()
        sock.sendall(chunk)
        held = _perf_ns() - t0
        SendStats.chunks += 1
        if held > SendStats.max_chunk_ns:
            SendStats.max_chunk_ns = held


class ChatClient:
    """One HTTP connection (Locust users each own one, as a browser-less client would)."""

    def __init__(self, endpoint: Endpoint, api_key: str | None = None,
                 connect_timeout_s: float = 30.0, network_timeout_s: float = 900.0,
                 idle_timeout_s: float | None = None, total_timeout_s: float | None = None
                 ) -> None:
        """`network_timeout_s` bounds each wait until a stream's first output (headers and
        prefill, per read); once it has begun, `idle_timeout_s` bounds each silence;
        `total_timeout_s` the whole request (checked per event)."""
        self.endpoint = endpoint
        self.first_byte_s = network_timeout_s
        self.idle_s = idle_timeout_s or network_timeout_s
        self.total_s = total_timeout_s or None
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        key = api_key or endpoint.userinfo_key
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self._http = HTTPClient(
            endpoint.host, port=endpoint.port, ssl=endpoint.scheme == "https",
            connection_timeout=connect_timeout_s, network_timeout=network_timeout_s,
            concurrency=1, headers=headers,
            # one recv takes what has arrived, up to 64 KiB (4 KiB split a burst of events
            # into several reads, each with its own parser pass)
            block_size=RECV_BYTES,
        )
        host = endpoint.host if ":" not in endpoint.host else f"[{endpoint.host}]"
        head = [f"POST {endpoint.api_path}/chat/completions HTTP/1.1",
                f"Host: {host}:{endpoint.port}", "User-Agent: anvil",
                "Content-Type: application/json", "Accept: text/event-stream"]
        if key:
            head.append(f"Authorization: Bearer {key}")
        # the streamed request is written by hand (see stream_chat); it ends in Content-Length
        self._head = ("\r\n".join(head) + "\r\nContent-Length: ").encode("latin-1")

    def close(self) -> None:
        self._http.close()

    def connect(self) -> None:
        """Open the connection ahead of the first measured request (a `GET /models`), so
        that request's clock starts, as the spec says, just before it is written to the
        socket rather than before a TCP handshake. Errors are left to the measured request."""
        try:
            self.get_json("/models")
        except Exception:  # noqa: BLE001 - reachability is judged by the real request
            pass

    # -- plain JSON calls (discovery, probes) -------------------------------------------
    def get_json(self, path: str) -> tuple[int, object]:
        resp = self._http.get(self.endpoint.api_path + path)
        try:
            return resp.status_code, _loads_or_text(resp.read())
        finally:
            resp.release()

    def post_json(self, path: str, body: dict, absolute: bool = False) -> tuple[int, object]:
        full = path if absolute else self.endpoint.api_path + path
        resp = self._http.post(full, body=orjson.dumps(body))
        try:
            return resp.status_code, _loads_or_text(resp.read())
        finally:
            resp.release()

    # -- the measured path ----------------------------------------------------------------
    def stream_chat(self, body: bytes | Sequence[bytes], obs: StreamObserver) -> int:
        """Send one streaming chat completion; feed `obs` until the stream ends.

        `obs.start_ns` is stamped just before the request bytes are written to the socket,
        as the spec defines `start`; the socket is taken (or connected) before the stamp.
        Every error becomes a typed failure on `obs`; nothing raises out but GreenletExit.
        Returns the body bytes read.
        """
        pool = self._http._connection_pool
        parts = (body,) if isinstance(body, bytes) else tuple(body)
        head = self._head + b"%d\r\n\r\n" % sum(len(p) for p in parts)
        sock = _idle_socket(pool)
        if sock is not None and _not_reusable(sock):
            pool.release_socket(sock)  # closed (or spoken on) while idle; nothing written
            sock = None
        if sock is None:
            sock = self._take_socket(pool, obs)  # a new connection
            if sock is None:
                return 0
        sock.settimeout(self.first_byte_s)  # an idle stream's socket may come back
        obs.start_ns = obs._last_ns = _perf_ns()
        timer = gevent.Timeout(self.total_s, _TotalTimeout()) if self.total_s else None
        if timer is not None:
            timer.start()
        try:
            return self._exchange(sock, pool, head, parts, obs)
        except _TotalTimeout:  # fired outside the places that record it with their phase
            if obs.failure is None:
                obs.fail("timeout", self._total_message(), _perf_ns(),
                         phase="headers" if obs.http_status is None else obs.phase)
            return 0
        finally:
            if timer is not None:
                timer.cancel()

    def _total_message(self) -> str:
        return f"the request ran past the total timeout ({self.total_s:g} s)"

    def _exchange(self, sock: Any, pool: Any, head: bytes, parts: tuple[bytes, ...],
                  obs: StreamObserver) -> int:
        """Write the request, read the answer into `obs`; every error a typed failure."""
        try:
            _send_cooperatively(sock, (head, *parts))
        except BaseException as e:
            pool.release_socket(sock)  # still ours: the response never took it; closes it
            if not isinstance(e, Exception):
                raise  # GreenletExit, KeyboardInterrupt
            if isinstance(e, _TotalTimeout):
                obs.fail("timeout", self._total_message(), _perf_ns(), phase="headers")
                return 0
            kind = "timeout" if isinstance(e, TimeoutError | gevent.Timeout) else "connection"
            obs.fail(kind, f"could not send the request: {type(e).__name__}: {e}",
                     _perf_ns(), phase="headers")
            return 0
        try:
            # on any failure the response releases the socket to the pool itself
            resp = HTTPSocketPoolResponse(sock, pool, block_size=self._http.block_size,
                                          method="POST")
        except _TotalTimeout:
            obs.fail("timeout", self._total_message(), _perf_ns(), phase="headers")
            return 0
        except (TimeoutError, gevent.Timeout):
            obs.fail("timeout", f"no response headers within the first-byte timeout "
                     f"({self.first_byte_s:g} s)", _perf_ns(), phase="headers")
            return 0
        except (ConnectionError, HTTPConnectionClosed, OSError, HTTPParseError) as e:
            obs.fail("connection", f"no valid response headers: {type(e).__name__}: {e}",
                     _perf_ns(), phase="headers")
            return 0
        obs.http_status = resp.status_code
        server_t0 = resp.get("anvil-t0-ns")  # anvil's simulator with --stamp-send
        if server_t0:
            obs.sent = {"t0_ns": int(server_t0)}
        if resp.status_code != 200:
            return self._http_error(resp, obs)
        first = [True]
        silence = Silence(self.first_byte_s)

        def prefill_over() -> None:
            # the first output arrived (a role-only first chunk does not count): from now
            # on each silence between reads is bounded by the idle timeout
            first[0] = False
            silence.set_limit(self.idle_s)

        nbytes = 0
        try:
            nbytes = read_events(_body_blocks(resp, silence), obs, prefill_over)
        except _TotalTimeout:
            obs.fail("timeout", self._total_message(), _perf_ns(), phase=obs.phase)
        except (TimeoutError, gevent.Timeout):
            which = (f"first-byte timeout ({self.first_byte_s:g} s)" if first[0]
                     else f"idle timeout ({self.idle_s:g} s)")
            obs.fail("timeout", f"no data within the {which}", _perf_ns(), phase=obs.phase)
        except (ConnectionError, HTTPConnectionClosed, OSError, HTTPParseError) as e:
            obs.fail("truncated", f"connection lost mid-stream: {type(e).__name__}: {e}",
                     _perf_ns(), phase=obs.phase)
        except BaseException:
            resp.release()  # killed mid-stream (GreenletExit): dropped now, not drained
            raise
        finally:
            silence.cancel()
            self._finish_response(resp, obs)
        return nbytes

    @staticmethod
    def _take_socket(pool: Any, obs: StreamObserver) -> Any:
        """A socket from the pool (a new connection if none is idle), or None with the
        connect failure recorded on `obs`."""
        try:
            return pool.get_socket()
        except (TimeoutError, gevent.Timeout) as e:
            obs.start_ns = obs._last_ns = _perf_ns()
            obs.fail("timeout", f"could not connect within the connect timeout ({e})",
                     obs.start_ns, phase="connect")
        except (ConnectionError, OSError) as e:
            obs.start_ns = obs._last_ns = _perf_ns()
            obs.fail("connection", f"could not connect: {type(e).__name__}: {e}",
                     obs.start_ns, phase="connect")
        return None

    def _http_error(self, resp, obs: StreamObserver) -> int:
        t = _perf_ns()
        try:
            raw = resp.read(_ERROR_BODY_LIMIT)
        except Exception:  # noqa: BLE001 - the status is what matters; the body is a bonus
            raw = b""
        finally:
            resp.release()
        msg = _error_message(raw) or f"HTTP {resp.status_code}"
        kind = "rate_limited" if resp.status_code == 429 else "http_error"
        retry_after = resp.get("retry-after")
        if retry_after:
            msg += f" (Retry-After: {retry_after})"
        obs.fail(kind, msg, t, phase="headers", http_status=resp.status_code)
        return len(raw)

    def _finish_response(self, resp, obs: StreamObserver) -> None:
        """Drain what is left after `[DONE]` so the connection can be reused. An incomplete
        response is never reused: `release()` closes its socket (geventhttpclient's
        `should_close` is true until the message is complete)."""
        try:
            if obs.failure is None and not resp.message_complete:
                with gevent.Timeout(5):
                    while resp.readline(b"\n"):
                        pass
        except (Exception, gevent.Timeout):  # noqa: BLE001 - a dirty connection is dropped
            pass
        finally:
            resp.release()


def _loads_or_text(raw: bytes) -> object:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw.decode("utf-8", "replace")


def _error_message(raw: bytes) -> str:
    """The OpenAI-style `error.message` of an error body, else its first 300 chars."""
    obj = _loads_or_text(raw)
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict) and "message" in err:
            return str(err["message"])
        if isinstance(err, str):
            return err
        return str(obj)[:300]
    return str(obj)[:300]
