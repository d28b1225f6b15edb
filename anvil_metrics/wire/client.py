"""HTTP to an OpenAI-compatible endpoint: one streamed chat completion, observed (or a
completion, a Responses stream, an embeddings answer: the same request, another path).

geventhttpclient (Locust's FastHttp engine) is used directly rather than through
`FastHttpSession`, for three measured reasons: its `readline` returns each SSE line as soon
as it arrives (Locust's `iter_content`/`iter_lines` wait for full reads, +24 ms per event);
its timeouts can be set per client (FastHttp's 60 s `network_timeout` applies to every recv
and would cap a long prefill's TTFT); and the one Locust `request` event per stream is fired
by anvil with the end-to-end time, not the time to headers.

This module is the request's logic: the bytes of the request, when its start is stamped,
which timeout bounds which wait, and the body's events fed to the observer. The sockets,
pool and response parser are `transport.py`'s (the only module that touches
geventhttpclient's internals); which failure an exception is, `failures.py`'s table.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import gevent
import orjson

from anvil_metrics.headers import head_lines
from anvil_metrics.urls import Endpoint
from anvil_metrics.wire import truth
from anvil_metrics.wire.eventsobs import on_whole
from anvil_metrics.wire.failures import CANCELLED_MESSAGE, CAUGHT, classify
from anvil_metrics.wire.observe import StreamObserver
from anvil_metrics.wire.sse import EventSplitter, LineTooLong, begins_as_sse
from anvil_metrics.wire.transport import (
    Cancelled,
    SendStats,
    Silence,
    TotalTimeout,
    Transport,
    body_blocks,
    send_cooperatively,
)

_perf_ns = time.perf_counter_ns
_ERROR_BODY_LIMIT = 64 * 1024
# one SSE line or event, and one plain JSON answer (`transport.MAX_ANSWER_BYTES`); a 1 MiB
# chunk is fine, memory is bounded (the scenario's `request.max_line_bytes` sets it)
MAX_LINE_BYTES = 16 * 1024 * 1024
EVENT_STREAM = "text/event-stream"
SHOWN_BYTES = 80  # of a body that is not an event stream, in its failure's message
ANTHROPIC_VERSION = "2023-06-01"  # the Messages API's version header (`auth_headers`)


def is_event_stream(content_type: str | list[str] | None) -> bool:
    """Whether a response's content type is an event stream's (none said: it may be)."""
    if isinstance(content_type, list):
        content_type = content_type[0] if content_type else None
    return content_type is None or (
        content_type.partition(";")[0].strip().lower() == EVENT_STREAM)


def not_an_event_stream(content_type: str | list[str] | None, head: bytes) -> str:
    """The message of a 200 answer that is not an event stream: its content type and its
    first `SHOWN_BYTES` bytes (escaped as Python writes bytes)."""
    said = "no content-type" if content_type is None else f"content-type {content_type!r}"
    return (f"a 200 answer that is not an event stream: {said}, its body begins "
            f"{head[:SHOWN_BYTES]!r}")


def read_events(blocks: Iterable[tuple[bytes, int]], obs: StreamObserver,
                on_output_started: Callable[[], None] | None = None,
                limit: int = MAX_LINE_BYTES,
                content_type: str | list[str] | None = EVENT_STREAM) -> int:
    """The one SSE path from body bytes to `obs`: each (block, arrival stamp) is split into
    events (`EventSplitter`) and each event is fed to the observer with its block's stamp,
    until the observer says the stream is over (`[DONE]`, a failure) or the body ends
    (`obs.on_eof`, stamped with the last block). Invalid UTF-8 and an endless line are
    `malformed_chunk` failures; a response whose `content_type` is not an event stream's,
    or whose body does not begin as one (`sse.begins_as_sse`), a `bad_response` at its
    first block; errors of the transport (timeouts, resets) propagate.
    `on_output_started` is called once, after the block that brought the first output.
    Returns the body bytes read. Tests drive it with blocks cut anywhere."""
    splitter = EventSplitter(limit)
    nbytes = 0
    t: int | None = None
    waiting = on_output_started is not None
    sse = is_event_stream(content_type)
    start = b""  # the body's first bytes, until they tell whether it is an event stream
    deciding, bad = True, False
    try:
        for block, t in blocks:
            obs.last_bytes_ns = t  # what a stuck request's silence counts from
            nbytes += len(block)
            if deciding and block:
                start += block
                verdict = begins_as_sse(start) if sse else False
                if verdict is None and len(start) > 65536:  # 64 KiB of line ends: may be
                    verdict = True
                if verdict is not None:
                    deciding, bad = False, not verdict
                    if bad:
                        break
            for data in splitter.feed(block):
                if obs.on_data(data, t):
                    return nbytes
            if splitter.error is not None:  # after the events before it
                raise splitter.error
            if waiting and obs.first_output_ns is not None:
                waiting = False
                on_output_started()  # type: ignore[misc]
        t_end = t if t is not None else _perf_ns()
        if bad or not sse:  # (no body, with another content type)
            obs.fail("bad_response", not_an_event_stream(content_type, start), t_end,
                     phase=obs.phase)
            return nbytes
        for data in splitter.end():
            if obs.on_data(data, t_end):
                return nbytes
        obs.on_eof(t_end)
    except CAUGHT["events"] as e:
        kind, _, msg = classify("events", e)
        obs.fail(kind, msg, t if t is not None else _perf_ns(), phase=obs.phase)
    return nbytes


def read_whole(blocks: Iterable[tuple[bytes, int]], obs: StreamObserver,
               limit: int = MAX_LINE_BYTES) -> int:
    """A whole JSON answer (an embedding's) into `obs`, ended at its last block's stamp;
    one longer than `limit` is a `malformed_chunk` failure (memory is bounded). Returns the
    body bytes read; errors of the transport propagate."""
    parts, last, total = [], None, 0
    for block, t in blocks:
        total += len(block)
        if total > limit:
            kind, _, msg = classify("events", LineTooLong(
                f"an answer longer than {limit} bytes"))
            obs.fail(kind, msg, t, phase=obs.phase)
            return total
        parts.append(block)
        last = t
    raw = b"".join(parts)
    on_whole(obs, raw, last if last is not None else _perf_ns())
    return len(raw)


def auth_headers(key: str | None, path: str, extra: Mapping[str, str]) -> dict[str, str]:
    """What a request authenticates with: the key as `Authorization: Bearer` (OpenAI's,
    vLLM's, SGLang's); a Messages API request's (`path` /messages) also as `x-api-key`,
    with `anthropic-version` (Anthropic's and its gateways'). A header of the same name
    among the `extra` ones is theirs, not this one."""
    out = {"Authorization": f"Bearer {key}"} if key else {}
    if path == "/messages":
        out.update({"x-api-key": key} if key else {})
        out["anthropic-version"] = ANTHROPIC_VERSION
    given = {k.lower() for k in extra}
    return {k: v for k, v in out.items() if k.lower() not in given}


class ChatClient:
    """One HTTP connection (Locust users each own one, as a browser-less client would)."""

    def __init__(self, endpoint: Endpoint, api_key: str | None = None,
                 connect_timeout_s: float = 30.0, network_timeout_s: float = 900.0,
                 idle_timeout_s: float | None = None, total_timeout_s: float | None = None,
                 extra_headers: Mapping[str, str] | None = None,
                 path: str = "/chat/completions", streamed: bool = True,
                 send_stats: SendStats | None = None,
                 max_line_bytes: int = MAX_LINE_BYTES) -> None:
        """`network_timeout_s` bounds each wait until a stream's first output (headers and
        prefill, per read); once it has begun, `idle_timeout_s` bounds each silence;
        `total_timeout_s` the whole request (checked per event); `extra_headers` (checked:
        `anvil_metrics.headers`) go with every request, probes too; `path`: what the
        measured requests are posted to, under the API path (`/completions` for
        `--endpoint completions`); `streamed`: False when the answer is one JSON object
        (`/embeddings`), its end the arrival of its last byte (`eventsobs.on_whole`);
        `send_stats`: the run's count of request chunks written, which this client's
        measured requests add to (None: not counted); `max_line_bytes`: the longest SSE
        line or event, whole answer or plain JSON answer it holds (longer: a failure)."""
        self.streamed = streamed
        self.max_line_bytes = max_line_bytes
        self._send_stats = send_stats
        self.endpoint = endpoint
        self.first_byte_s = network_timeout_s
        self.idle_s = idle_timeout_s or network_timeout_s
        self.total_s = total_timeout_s or None
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        auth = auth_headers(api_key or endpoint.userinfo_key, path, extra_headers or {})
        headers.update(auth)
        headers.update(extra_headers or {})
        self.transport = Transport(endpoint.host, endpoint.port,
                                   tls=endpoint.scheme == "https", headers=headers,
                                   connect_timeout_s=connect_timeout_s,
                                   network_timeout_s=network_timeout_s,
                                   max_answer_bytes=max_line_bytes)
        host = endpoint.host if ":" not in endpoint.host else f"[{endpoint.host}]"
        head = [f"POST {endpoint.api_path}{path} HTTP/1.1",
                f"Host: {host}:{endpoint.port}", "User-Agent: anvil",
                "Content-Type: application/json",
                f"Accept: {'text/event-stream' if streamed else 'application/json'}"]
        head += [f"{k}: {v}" for k, v in auth.items()]
        # the streamed request is written by hand (see stream_chat): these lines, the extra
        # headers, a request's own header lines, then its Content-Length
        self._head = ("\r\n".join(head) + "\r\n").encode("latin-1") + head_lines(
            extra_headers or {})

    def close(self) -> None:
        self.transport.close()

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
        status, raw = self.transport.get(self.endpoint.api_path + path)
        return status, _loads_or_text(raw)

    def post_json(self, path: str, body: dict, absolute: bool = False) -> tuple[int, object]:
        full = path if absolute else self.endpoint.api_path + path
        status, raw = self.transport.post(full, orjson.dumps(body))
        return status, _loads_or_text(raw)

    # -- the measured path ----------------------------------------------------------------
    def stream_chat(self, body: bytes | Sequence[bytes], obs: StreamObserver,
                    headers: bytes = b"", cancel_after: str | float | None = None) -> int:
        """Send one streaming chat completion; feed `obs` until the stream ends. `headers`:
        this request's own header lines, each ending in CRLF (a conversation's session
        header), checked by whoever made them. `cancel_after`: close it on purpose at that
        point (`load/cancel.py`: "prefill", "decode", or ms after the start), an `aborted`
        failure in the phase it was in.

        The start is stamped (`obs.begin`, keeping the `due_ns` the caller gave) just
        before the request bytes are written to the socket, as the spec defines `start`;
        the socket is taken (or connected) before the stamp. Every error becomes a typed
        failure on `obs`; nothing raises out but GreenletExit. Returns the body bytes read.
        """
        parts = (body,) if isinstance(body, bytes) else tuple(body)
        head = self._head + headers + b"Content-Length: %d\r\n\r\n" % sum(
            len(p) for p in parts)
        sock = self.transport.reuse_idle()
        if sock is None:
            sock = self._connect(obs)  # a new connection
            if sock is None:
                return 0
        sock.settimeout(self.first_byte_s)  # an idle stream's socket may come back
        obs.begin(_perf_ns(), obs.due_ns)
        timers = [gevent.Timeout(s, e) for s, e in (
            (self.total_s, TotalTimeout()),
            (cancel_after / 1000 if isinstance(cancel_after, float) else None, Cancelled()))
            if s]
        for timer in timers:
            timer.start()
        try:
            return self._exchange(sock, head, parts, obs, cancel_after)
        except (TotalTimeout, Cancelled) as e:  # fired outside the places that record it
            if obs.failure is None:
                self._fail(obs, "headers" if obs.http_status is None else "body", e)
            return 0
        finally:
            for timer in timers:
                timer.cancel()

    def _fail(self, obs: StreamObserver, stage: str, exc: BaseException,
              which: str = "") -> None:
        """Record `exc`, raised in `stage`, as the failure `failures.py`'s table makes it."""
        kind, phase, msg = classify(stage, exc, total_s=self.total_s,
                                    first_byte_s=self.first_byte_s, which=which)
        obs.fail(kind, msg, _perf_ns(), phase=obs.phase if phase is None else phase)

    def _exchange(self, sock: Any, head: bytes, parts: tuple[bytes, ...],
                  obs: StreamObserver, cancel_after: str | float | None = None) -> int:
        """Write the request, read the answer into `obs`; every error a typed failure."""
        try:
            send_cooperatively(sock, (head, *parts), self._send_stats)
        except CAUGHT["send"] as e:
            self.transport.discard(sock)  # still ours: the response never took it
            self._fail(obs, "send", e)
            return 0
        except BaseException:  # GreenletExit, KeyboardInterrupt, gevent.Timeout
            self.transport.discard(sock)
            raise
        if cancel_after == "prefill":  # written: the server has it, and it is closed now
            self.transport.discard(sock)
            obs.fail("aborted", CANCELLED_MESSAGE, _perf_ns(), phase="prefill")
            return 0
        try:
            resp = self.transport.read_head(sock)  # on a failure it released the socket
        except CAUGHT["headers"] as e:
            self._fail(obs, "headers", e)
            return 0
        # its status, and the send stamps of anvil's simulator with --stamp-send (if any)
        obs.on_head(resp.status_code, truth.from_headers(resp.get))
        if resp.status_code != 200:
            return self._http_error(resp, obs)
        first = [True]
        silence = Silence(self.first_byte_s)

        def prefill_over() -> None:
            # the first output arrived (a role-only first chunk does not count): from now
            # on each silence between reads is bounded by the idle timeout
            first[0] = False
            silence.set_limit(self.idle_s)
            if cancel_after == "decode":  # decoding: closed now, its first output stamped
                raise Cancelled()

        nbytes = 0
        try:
            blocks = body_blocks(resp, silence)
            nbytes = (read_events(blocks, obs, prefill_over, self.max_line_bytes,
                                  resp.get("content-type")) if self.streamed
                      else read_whole(blocks, obs, self.max_line_bytes))
        except CAUGHT["body"] as e:
            which = (f"first-byte timeout ({self.first_byte_s:g} s)" if first[0]
                     else f"idle timeout ({self.idle_s:g} s)")
            self._fail(obs, "body", e, which)
        except BaseException:
            resp.release()  # killed mid-stream (GreenletExit): dropped now, not drained
            raise
        finally:
            silence.cancel()
            self._finish_response(resp, obs)
        return nbytes

    def _connect(self, obs: StreamObserver) -> Any:
        """A socket from the pool (a new connection if none is idle), or None with the
        connect failure recorded on `obs` (its start stamped when the connect failed)."""
        try:
            return self.transport.connect()
        except CAUGHT["connect"] as e:
            kind, phase, msg = classify("connect", e)
            t = _perf_ns()
            obs.begin(t, obs.due_ns)
            obs.fail(kind, msg, t, phase=phase)
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
