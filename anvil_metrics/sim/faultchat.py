"""What each injected fault (`faults.py`) does on the wire to one chat completion request.

Kept out of `chat.py` so that a request without a fault takes exactly the old path: the
server calls `answer_with_fault` only for a request that drew a fault, and only such a
request's stream is a `FaultyChatStream`, whose per-chunk check costs nothing elsewhere.

"Token chunk K" below is the SSE event of generated token K (0-based, reasoning then content);
the role-only chunk is not counted. A chunk-count fault acts when token chunk K is due, i.e.
after K token chunks were sent; an answer with K tokens or fewer never reaches it and is sent
normally. Stream-shaping faults do nothing to a non-streaming request (it still uses up its
request index); http*, reset_before_headers, stall_first_byte and slow_headers apply to both.
What each kind puts on the wire (the request is always read whole first):

- ``http400|http500|http503``: that status, ``Content-Length`` JSON body
  ``{"error": {"message": "injected fault: KIND", "type", "param": null, "code": STATUS}}``
  (type ``invalid_request_error`` for 400, ``server_error`` for 5xx); keep-alive as usual.
- ``http429=S``: the same with status 429, type ``rate_limit_error`` and ``retry-after: S``.
- ``reset_before_headers``: nothing; the socket gets SO_LINGER 0 and is closed (TCP RST).
- ``reset_mid_stream=K``: headers, role chunk, K token chunks, then RST (no terminator).
- ``malformed_chunk=K``: after K token chunks one HTTP chunk ``data: {not json\n\n``, then
  the rest of the stream exactly as normal (finish, usage, ``[DONE]``, terminator).
- ``stream_error=K``: after K token chunks vLLM's in-stream error event
  ``data: {"object":"error","message":"injected failure","type":"InternalServerError",
  "code":500}``, then ``data: [DONE]`` and the chunked terminator (as vLLM does); no
  finish_reason, no usage. The connection stays open.
- ``stall_first_byte=S``: nothing at all for S seconds, then the request is answered exactly
  as if it had arrived S later (t0, prefill and every deadline, ``anvil-t0-ns`` included).
- ``stall_mid_stream=S``: token 1 and every later token come S seconds later than planned.
- ``no_done``: finish chunk, usage chunk if asked, then the terminator without ``[DONE]``.
- ``end_before_finish=K``: K token chunks, then the terminator: no finish_reason, no
  usage, no ``[DONE]``.
- ``no_usage``: no usage anywhere, even with ``include_usage`` or ``--usage-in-finish-chunk``.
- ``oversize_chunk``: the first content token's delta is 1 MiB of ASCII text instead of its
  piece (one well-formed SSE event, one HTTP chunk); usage is unchanged, so the big delta
  counts as one content token. No effect on an answer without content tokens.
- ``slow_headers=S``: the request is parsed, validated and planned at once, but no byte is
  written before t0 + S: the head (and immediate role chunk) then, and the whole plan shifted
  by S (first token at t0 + S + prefill, token i at t0 + S + prefill + i * interval; a
  non-streaming body or error answer at its time + S). ``anvil-t0-ns`` reports t0 + S, the
  origin the deadlines follow from. On the wire it looks like ``stall_first_byte``; the
  difference is only when the request is validated and looked up in the prefix cache.

A hostile server's faults, each what a client must survive without a stuck run, a traceback
or unbounded memory (`tests/e2e/test_hostile_server.py` runs each against `anvil run`):

- ``headers_then_silence``: the 200 stream head, then nothing at all until the client goes.
- ``endless_stream``: the stream ignores ``max_tokens``: token chunks at the usual interval,
  forever (no finish_reason, no end) until the client goes.
- ``html_200``: status 200, ``content-type: text/html; charset=utf-8``, a small HTML page
  (`HTML_PAGE`, ``Content-Length``), as a proxy's login or error page answers.
- ``huge_header=BYTES``: the stream head carries one more header line, ``x-anvil-filler:``
  and BYTES bytes of ``a``; the stream follows as normal.
- ``huge_line=BYTES``: after the role chunk one HTTP chunk ``data: `` then BYTES bytes of
  ``x`` without a newline (written as the client reads it, never built whole: `BulkWrite`),
  then ``\n\n`` and the rest of the stream as normal.
- ``invalid_utf8=K``: after K token chunks one content chunk whose text has the bytes
  ``\xff\xfe`` (not UTF-8), then the rest as normal.
- ``nan_usage`` / ``negative_usage``: the usage (wherever it goes) says
  ``"completion_tokens":NaN`` (not JSON: Python's ``json.dumps`` writes it) / ``-5``.
- ``comment_flood=LINES``: after the role chunk one HTTP chunk of LINES comment lines
  ``: keep-alive`` and a blank line (written as the client reads it), then the stream as
  normal.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator
from itertools import repeat
from typing import Any

import orjson

from anvil_metrics.sim.chat import (
    DONE_EVENT,
    Admit,
    ChatStream,
    Deferred,
    _choices,
    answer_chat,
    raw_event,
    t0_header,
)
from anvil_metrics.sim.chatrequest import ChatRequest, OutputPlan
from anvil_metrics.sim.config import SimConfig
from anvil_metrics.sim.faults import HTTP_STATUS, Fault
from anvil_metrics.sim.httpproto import HttpConnection, error_body
from anvil_metrics.sim.ledger import LEDGER
from anvil_metrics.sim.prefixcache import PrefixCache
from anvil_metrics.sim.scheduler import Scheduler

OVERSIZE_BYTES = 1 << 20  # the oversize_chunk content delta: 1 MiB of ASCII text
MALFORMED_EVENT = raw_event(b"{not json")
STREAM_ERROR_EVENT = raw_event(
    b'{"object":"error","message":"injected failure","type":"InternalServerError","code":500}'
)  # vLLM's in-stream error shape
INVALID_UTF8_TAIL = _choices({"content": "@@"}).replace(b"@@", b"\xff\xfe") + b"}"
HTML_PAGE = (b"<!DOCTYPE html>\n<html><head><title>Sign in</title></head>"
             b"<body><p>Please sign in to continue.</p></body></html>\n")
BULK_PIECE_BYTES = 64 * 1024  # one write of a bulk fault
BULK_BUFFER_BYTES = 1 << 20  # a bulk fault writes while less than this waits in the socket
BULK_RETRY_NS = 1_000_000  # ... and looks again 1 ms later
COMMENT_LINE = b": keep-alive\n"
ERROR_TYPES = {
    400: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "server_error",
}


@functools.cache
def oversize_text() -> str:
    """1 MiB of readable ASCII (so 1 MiB of UTF-8 too), built once per process."""
    unit = "oversize chunk filler text 0123456789 "
    return (unit * (OVERSIZE_BYTES // len(unit) + 1))[:OVERSIZE_BYTES]


class BulkWrite:
    """Writes `pieces` to `conn` as the client takes them: while less than
    `BULK_BUFFER_BYTES` wait in the transport, then again `BULK_RETRY_NS` later, so a
    200 MB fault never sits in the simulator's memory; `then()` once all are written.
    Nothing more once the client has gone."""

    __slots__ = ("_conn", "_sched", "_pieces", "_then")

    def __init__(self, conn: HttpConnection, sched: Scheduler, pieces: Iterator[bytes],
                 then: Callable[[], None]) -> None:
        self._conn, self._sched, self._pieces, self._then = conn, sched, pieces, then

    def fire(self) -> None:
        conn = self._conn
        while not conn.closed:
            if conn.buffered() >= BULK_BUFFER_BYTES:
                self._sched.at(self._sched.now_ns() + BULK_RETRY_NS, self)
                return
            piece = next(self._pieces, None)
            if piece is None:
                self._then()
                return
            conn.write(piece)


def huge_line_pieces(size: int) -> Iterator[bytes]:
    """One HTTP chunk: ``data: `` and `size` bytes of ``x`` without a newline, then the
    blank line that ends the event; 64 KiB a piece, one piece object reused."""
    whole, rest = divmod(size, BULK_PIECE_BYTES)
    yield b"%x\r\ndata: " % (size + 8)
    yield from repeat(b"x" * BULK_PIECE_BYTES, whole)
    yield b"x" * rest + b"\n\n\r\n"


def comment_pieces(lines: int) -> Iterator[bytes]:
    """One HTTP chunk: `lines` SSE comment lines, then a blank line."""
    per = BULK_PIECE_BYTES // len(COMMENT_LINE)
    whole, rest = divmod(lines, per)
    yield b"%x\r\n" % (lines * len(COMMENT_LINE) + 1)
    yield from repeat(COMMENT_LINE * per, whole)
    yield COMMENT_LINE * rest + b"\n\r\n"


class FaultyChatStream(ChatStream):
    """A `ChatStream` that misbehaves once, as its fault says (see the module docstring)."""

    __slots__ = ("_fault", "_at")

    def __init__(
        self,
        conn: HttpConnection,
        sched: Scheduler,
        cfg: SimConfig,
        request: ChatRequest,
        plan: OutputPlan,
        t0_ns: int,
        fault: Fault,
        start_ns: int | None = None,
    ) -> None:
        super().__init__(conn, sched, cfg, request, plan, t0_ns, start_ns)
        self._fault = fault
        kind = fault.kind
        self._at = -1  # token index at which `_act` runs; -1: never
        if kind in ("reset_mid_stream", "malformed_chunk", "stream_error", "end_before_finish"):
            self._at = fault.count
        elif kind == "stall_mid_stream":
            self._at = 1
        elif kind == "oversize_chunk" and plan.content:
            self._at = plan.reasoning  # the first content token becomes the big one
        elif kind == "no_done":
            self._send_done = False
        elif kind == "no_usage":
            self._include_usage = False
            self._usage_in_finish = False
        elif kind == "endless_stream":
            self._last = sys.maxsize  # the finish never comes
        elif kind == "invalid_utf8":
            self._at = fault.count
        elif kind in ("huge_line", "comment_flood"):
            self._at = 0

    def start(self, first: Any = None) -> None:
        if self._fault.kind != "headers_then_silence":
            super().start(first)
            return
        LEDGER.started(self)
        self._conn.write(self._conn.stream_head(extra=t0_header(self._cfg, self._t0,
                                                                self._start)))

    def _send_head(self) -> None:
        if self._fault.kind != "huge_header":
            super()._send_head()
            return
        head = self._conn.stream_head(extra=(
            ("x-anvil-filler", "a" * self._fault.count),
            *t0_header(self._cfg, self._t0, self._start)))
        self._conn.write(head + self._enc.event(self.ROLE) if self.ROLE else head)
        self._head_sent = True

    def _usage_bytes(self) -> bytes:
        kind = self._fault.kind
        if kind == "nan_usage":
            return orjson.dumps({**self._usage, "completion_tokens": 0}).replace(
                b'"completion_tokens":0', b'"completion_tokens":NaN')
        if kind == "negative_usage":
            return orjson.dumps({**self._usage, "completion_tokens": -5})
        return super()._usage_bytes()

    def fire(self) -> None:
        if self._next == self._at and not self._conn.closed:
            self._at = -1
            if not self._head_sent:
                self._send_head()
            if self._act(self._next):
                return
        super().fire()

    def _act(self, i: int) -> bool:
        """Misbehave before token `i` is written; True if the normal write must not follow."""
        conn, kind = self._conn, self._fault.kind
        if kind == "reset_mid_stream":
            conn.reset()
        elif kind == "malformed_chunk":
            conn.write(MALFORMED_EVENT)
            return False
        elif kind == "stream_error":
            conn.write(STREAM_ERROR_EVENT)
            conn.stream_end(DONE_EVENT)
        elif kind == "end_before_finish":
            conn.stream_end()
        elif kind == "invalid_utf8":
            conn.write(self._enc.event(INVALID_UTF8_TAIL))
            return False
        elif kind in ("huge_line", "comment_flood"):
            count = self._fault.count
            pieces = huge_line_pieces(count) if kind == "huge_line" else comment_pieces(count)
            sched = self._sched
            BulkWrite(conn, sched, pieces, lambda: sched.at(sched.now_ns(), self)).fire()
        elif kind == "stall_mid_stream":
            self._prefill_end += self._fault.ns  # this token and all later ones move
            self._sched.at(self._prefill_end + i * self._interval, self)
        elif kind == "oversize_chunk":
            if i >= self._last:  # the finish chunk carries it (`_last_delta`)
                self._at = i
                return False
            LEDGER.first_token(self)  # when it is token 0 (no reasoning before it)
            conn.write(self._enc.event(_choices({"content": oversize_text()}) + b"}"))
            self._next = i + 1
            self._sched.at(self._prefill_end + (i + 1) * self._interval, self)
        return True

    def _last_delta(self, i: int) -> dict[str, Any]:
        if self._fault.kind == "oversize_chunk" and i == self._at:
            return {"content": oversize_text()}
        return super()._last_delta(i)


def answer_with_fault(
    conn: HttpConnection,
    sched: Scheduler,
    cfg: SimConfig,
    body: bytes,
    t0_ns: int,
    cache: PrefixCache | None,
    fault: Fault,
    admit: Admit | None = None,
) -> None:
    """Answer one chat completion request (already fully read) with `fault` injected.

    With ``--max-running`` (`admit`), a streaming request that is answered at all waits for a
    slot as any other; the http* and reset_before_headers faults never take one, and
    stall_first_byte and slow_headers join the queue at t0 + S (slow_headers is then looked
    up in the prefix cache and planned when admitted, not at once).
    """
    kind = fault.kind
    if kind in HTTP_STATUS:
        status = HTTP_STATUS[kind]
        message = f"injected fault: {kind}"
        extra: tuple[tuple[str, str], ...] = ()
        if kind == "http429":
            extra = (("retry-after", str(fault.count)),)
        conn.respond(status, orjson.dumps(error_body(message, status, ERROR_TYPES[status])),
                     extra=extra)  # fmt: skip
    elif kind == "reset_before_headers":
        conn.reset()
    elif kind == "html_200":
        conn.respond(200, HTML_PAGE, content_type="text/html; charset=utf-8")
    elif kind == "stall_first_byte":
        later = t0_ns + fault.ns
        answer = functools.partial(answer_chat, conn, sched, cfg, body, later, cache, admit=admit)
        sched.at(later, Deferred(conn, answer))
    elif kind == "slow_headers":
        answer_chat(conn, sched, cfg, body, t0_ns, cache, delay_ns=fault.ns, admit=admit)
    else:
        stream = functools.partial(FaultyChatStream, fault=fault)
        answer_chat(conn, sched, cfg, body, t0_ns, cache, make_stream=stream, admit=admit)
