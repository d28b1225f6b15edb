"""Chat completions: what the simulated model answers, and the exact moments it answers.

A request becomes an `OutputPlan` (how many reasoning and content tokens, why it stops:
`chatrequest.py`). A streaming answer is a `ChatStream`: token i is written at
``prefill_end + i * interval``, each deadline computed from the request's start (never from the
previous write), one transport write per SSE event framed as one HTTP chunk. A non-streaming
answer is one `chat.completion` written when the last token would have been.

The per-chunk path is kept cheap so that hundreds of streams fit on one core: the request-wide
part of every chunk's JSON is encoded once per request and each token's ``choices`` part once
per process; a chunk is then a single bytes ``%`` format.
"""

from __future__ import annotations

import dataclasses
import functools
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from anvil_metrics.sim.chatrequest import (
    ChatRequest,
    OutputPlan,
    RequestError,
    load_json_object,
    parse_chat_request,
    plan_output,
    usage_of,
)
from anvil_metrics.sim.config import SimConfig
from anvil_metrics.sim.httpproto import Headers, HttpConnection
from anvil_metrics.sim.ledger import LEDGER, AnswerStamps  # its own counts (/metrics)
from anvil_metrics.sim.prefixcache import PrefixCache
from anvil_metrics.sim.scheduler import Scheduler, Timed
from anvil_metrics.sim.tokenizer import prompt_token_ids

Admit = Callable[[HttpConnection, Callable[[int], None], int], None]  # Admission.enter

# Generated text: deterministic pieces, one per token. Content pieces include multi-byte UTF-8
# (2-, 3- and 4-byte sequences) so a client's incremental decoding is exercised.
REASONING_PIECES = (
    "Let", " me", " think", " about", " the", " question", ".", " First", ",", " the",
    " user", " wants", " a", " short", " answer", ";", " then", " I", " check", " it", ".",
    " Hmm", ",", " consider", " edge", " cases", " care", "fully", ".", "\n",
)  # fmt: skip
CONTENT_PIECES = (
    "Here", " is", " the", " answer", ":", " a", " café", " résumé", " —", " naïve",
    " façade", ",", " 日本", "語", " text", ",", " über", " 🙂", " and", " more", ".",
    " Ça", " va", "?", " Sí", "!", " Ω", "≈", "∑", "\n",
)  # fmt: skip

_FINISH_NULL = b"null"


def piece(channel: str, index: int) -> str:
    """Text of the `index`-th reasoning (``r``) or content (``c``) token."""
    pieces = REASONING_PIECES if channel == "r" else CONTENT_PIECES
    return pieces[index % len(pieces)]


def full_text(channel: str, count: int) -> str:
    """All `count` tokens of one channel joined, as a non-streaming answer carries them."""
    return "".join(piece(channel, i) for i in range(count))


# -- chunk encoding ----------------------------------------------------------------------------


def _choices(delta: dict[str, Any], finish: bytes = _FINISH_NULL) -> bytes:
    return b'"choices":[{"index":0,"delta":%s,"logprobs":null,"finish_reason":%s}]' % (
        orjson.dumps(delta),
        finish,
    )


@functools.cache
def token_bodies(field: str, channel: str) -> tuple[bytes, ...]:
    """Pre-encoded ``"choices":[…]}`` tails for every piece of a channel under `field`."""
    pieces = REASONING_PIECES if channel == "r" else CONTENT_PIECES
    return tuple(_choices({field: text}) + b"}" for text in pieces)


class ChunkEncoder:
    """Frames chunk JSON as ``data: …\\n\\n`` inside one HTTP chunk, stamping if asked.

    A chunk is ``head`` (id, object, created, model — fixed per request), the optional
    ``"anvil_sent_ns"`` stamp taken with `time.perf_counter_ns()` just before the write, then a
    ``"choices"…}`` tail.
    """

    __slots__ = ("head", "stamp")

    def __init__(self, completion_id: str, created: int, model: str, stamp: bool,
                 obj: bytes = b"chat.completion.chunk") -> None:
        self.head = b'{"id":"%s","object":"%s","created":%d,"model":%s,' % (
            completion_id.encode(),
            obj,
            created,
            orjson.dumps(model),
        )
        self.stamp = stamp

    def event(self, tail: bytes) -> bytes:
        """One SSE event carrying ``head + [stamp] + tail``, framed as one HTTP chunk."""
        if self.stamp:
            stamp = b'"anvil_sent_ns":%d,' % time.perf_counter_ns()
            size = 8 + len(self.head) + len(stamp) + len(tail)
            return b"%x\r\ndata: %s%s%s\n\n\r\n" % (size, self.head, stamp, tail)
        size = 8 + len(self.head) + len(tail)
        return b"%x\r\ndata: %s%s\n\n\r\n" % (size, self.head, tail)


def raw_event(payload: bytes) -> bytes:
    """A non-JSON SSE event (``[DONE]``) framed as one HTTP chunk."""
    return b"%x\r\ndata: %s\n\n\r\n" % (len(payload) + 8, payload)


DONE_EVENT = raw_event(b"[DONE]")
ROLE_TAIL = _choices({"role": "assistant", "content": ""}) + b"}"


# -- answering ---------------------------------------------------------------------------------


def t0_header(cfg: SimConfig, t0_ns: int, start_ns: int | None = None) -> Headers:
    """With ``--stamp-send``, the ``anvil-t0-ns`` response header: the request's t0 as
    ``time.monotonic_ns()`` (the clock of ``perf_counter_ns`` on Linux), and
    ``anvil-start-ns``, the start of its plan, from which every deadline follows:
    ``start + prefill + i * interval``. The start is t0 unless the request waited for a
    ``--max-running`` slot (`admission.py`); a test judges the admission by it exactly."""
    if not cfg.stamp_send:
        return ()
    start = t0_ns if start_ns is None else start_ns
    return (("anvil-t0-ns", str(t0_ns)), ("anvil-start-ns", str(start)))


class ChatStream:
    """One streaming answer, driven by the scheduler one absolute deadline at a time."""

    __slots__ = (
        "_conn", "_sched", "_cfg", "_plan", "_usage", "_enc", "_include_usage",
        "_t0", "_prefill_end", "_interval", "_next", "_last", "_reasoning", "_head_sent",
        "_bodies_r", "_bodies_c", "_usage_in_finish", "_send_done", "_start",
    )  # fmt: skip
    # what a chunk says it is, its id's prefix, the role chunk before the first token
    # (None: none); `completions.CompletionStream` changes them
    OBJECT = b"chat.completion.chunk"
    ID_PREFIX = "chatcmpl"
    ROLE: bytes | None = ROLE_TAIL

    def __init__(
        self,
        conn: HttpConnection,
        sched: Scheduler,
        cfg: SimConfig,
        request: ChatRequest,
        plan: OutputPlan,
        t0_ns: int,
        start_ns: int | None = None,
    ) -> None:
        """`t0_ns` is the request's arrival (``anvil-t0-ns``); the plan starts at `start_ns`,
        later when the request waited for a ``--max-running`` slot (None: at t0)."""
        self._conn, self._sched, self._cfg, self._plan = conn, sched, cfg, plan
        self._usage = usage_of(request, plan)
        self._include_usage = request.include_usage
        self._enc = ChunkEncoder(
            f"{self.ID_PREFIX}-{uuid.uuid4().hex}", int(time.time()), cfg.model, cfg.stamp_send,
            self.OBJECT,
        )
        self._t0 = t0_ns
        self._start = start = t0_ns if start_ns is None else start_ns  # admission
        self._prefill_end = start + cfg.prefill_ns(request.computed_tokens, start)
        self._interval = cfg.interval_ns
        self._next = 0
        self._last = plan.total - 1  # index of the token that carries finish_reason
        self._reasoning = plan.reasoning
        self._head_sent = False
        self._bodies_r = token_bodies(cfg.reasoning_field, "r")
        self._bodies_c = token_bodies("content", "c")
        self._usage_in_finish = cfg.usage_in_finish_chunk
        self._send_done = not cfg.no_done

    def start(self, first: Timed | None = None) -> None:
        """Send headers (and the role chunk, if immediate) now; schedule the first token.

        `first`, if given, is scheduled at the prefill deadline instead of the stream itself
        (a `PrefillDone` that fires the stream after filling the prefix cache).
        """
        LEDGER.started(self)
        if self._cfg.role_chunk == "immediate":
            self._send_head()
        self._sched.at(self._prefill_end, self if first is None else first)

    def _send_head(self) -> None:
        head = self._conn.stream_head(extra=t0_header(self._cfg, self._t0, self._start))
        self._conn.write(head if self.ROLE is None else head + self._enc.event(self.ROLE))
        self._head_sent = True

    def fire(self) -> None:
        """Write token `_next` (its deadline has passed) and schedule the one after.

        The hot path: one modulo lookup of a pre-encoded tail, one bytes format, one write,
        one heap push. A failure drops the connection so the client sees a truncated stream.
        """
        conn = self._conn
        if conn.closed:
            return
        try:
            if not self._head_sent:
                self._send_head()
            i = self._next
            if i == 0:
                LEDGER.first_token(self)
            if i >= self._last:
                self._finish(i)
                return
            conn.write(self._token_event(i))
            self._next = i + 1
            self._sched.at(self._prefill_end + (i + 1) * self._interval, self)
        except Exception:
            conn.abort()
            raise

    def _token_event(self, i: int) -> bytes:
        """Token `i`'s event, framed (not the last: `_finish` writes that one)."""
        r = self._reasoning
        if i < r:
            return self._enc.event(self._bodies_r[i % len(self._bodies_r)])
        return self._enc.event(self._bodies_c[(i - r) % len(self._bodies_c)])

    def _last_delta(self, i: int) -> dict[str, Any]:
        """The delta of the last token `i` (empty if there are no tokens)."""
        plan = self._plan
        if plan.total == 0:
            return {}
        if i < plan.reasoning:
            return {self._cfg.reasoning_field: piece("r", i)}
        return {"content": piece("c", i - plan.reasoning)}

    def _finish_tail(self, i: int) -> bytes:
        """The last token's chunk tail: its delta, finish_reason, usage."""
        tail = _choices(self._last_delta(i), orjson.dumps(self._plan.finish_reason))
        if self._usage_in_finish:
            tail += b',"usage":' + self._usage_bytes()
        return tail + b"}"

    def _usage_bytes(self) -> bytes:
        """The usage object's JSON (a fault changes it)."""
        return orjson.dumps(self._usage)

    def _finish(self, i: int) -> None:
        """Last token with finish_reason, then usage and [DONE] as configured, then the end."""
        events = [self._enc.event(self._finish_tail(i))]
        if self._include_usage and not self._cfg.usage_in_finish_chunk:
            events.append(self._enc.event(b'"choices":[],"usage":%s}' % self._usage_bytes()))
        if self._send_done:
            events.append(DONE_EVENT)
        self._end_with(events)

    def _end_with(self, events: list[bytes]) -> None:
        """Write the stream's last `events` and end its response: completed, no abort."""
        for event in events[:-1]:
            self._conn.write(event)
        LEDGER.ending(self)  # its response's end is no abort
        self._conn.stream_end(events[-1])
        LEDGER.completed(self)


class DelayedCompletion:
    """A non-streaming answer, sent whole when its last token would have been generated.

    Given its request's `t0_ns` (a chat completion's), it tells `LEDGER.on_answer` (`anvil
    sim --log-answers`) when it was sent: its first and last byte, one write."""

    __slots__ = ("_conn", "_body", "_headers", "_t0")

    def __init__(self, conn: HttpConnection, body: dict[str, Any], headers: Headers,
                 t0_ns: int | None = None) -> None:
        self._conn, self._body, self._headers, self._t0 = conn, body, headers, t0_ns

    def fire(self) -> None:
        if not self._conn.closed:
            hook = LEDGER.on_answer if self._t0 is not None else None
            sent_ns = time.monotonic_ns()
            try:
                self._conn.respond_json(200, self._body, self._headers)
            except Exception:
                self._conn.abort()
                raise
            if hook is not None and self._t0 is not None:
                usage = self._body["usage"]
                details = usage.get("prompt_tokens_details")
                hook(AnswerStamps(self._t0, sent_ns, sent_ns, usage["prompt_tokens"],
                                  None if details is None else details.get("cached_tokens"), True))


class Deferred:
    """Run `action` at a deadline unless the client has gone (a deferred start or answer)."""

    __slots__ = ("_conn", "_action")

    def __init__(self, conn: HttpConnection, action: Callable[[], None]) -> None:
        self._conn, self._action = conn, action

    def fire(self) -> None:
        if not self._conn.closed:
            try:
                self._action()
            except Exception:
                self._conn.abort()
                raise


class PrefillDone:
    """At a request's prefill deadline: its blocks enter the prefix cache, then `then` fires.

    Nothing is inserted if the client has gone by then (a failed request leaves no cache).
    Chaining `then` (the stream's first token, or a response due at the same instant) makes
    the insertion come first whatever the scheduler's order for equal deadlines.
    """

    __slots__ = ("_conn", "_cache", "_keys", "_then")

    def __init__(
        self,
        conn: HttpConnection,
        cache: PrefixCache,
        keys: Sequence[int],
        then: Timed | None = None,
    ) -> None:
        self._conn, self._cache, self._keys, self._then = conn, cache, keys, then

    def fire(self) -> None:
        if not self._conn.closed:
            self._cache.insert(self._keys)
        if self._then is not None:
            self._then.fire()


def completion_body(request: ChatRequest, plan: OutputPlan, cfg: SimConfig) -> dict[str, Any]:
    """The whole ``chat.completion`` object of a non-streaming answer."""
    reasoning = full_text("r", plan.reasoning) or None
    content = full_text("c", plan.content) or None
    message = {"role": "assistant", "content": content, cfg.reasoning_field: reasoning}
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": cfg.model,
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": plan.finish_reason}
        ],
        "usage": usage_of(request, plan),
    }


def answer_chat(
    conn: HttpConnection,
    sched: Scheduler,
    cfg: SimConfig,
    body: bytes,
    t0_ns: int,
    cache: PrefixCache | None = None,
    make_stream: Callable[..., ChatStream] = ChatStream,
    delay_ns: int = 0,
    admit: Admit | None = None,
    parse: Callable[[dict[str, Any], SimConfig], ChatRequest] = parse_chat_request,
) -> None:
    """Handle ``POST /v1/chat/completions``: refuse, stream, or answer whole at the end.

    With a prefix `cache`, only the uncached prompt tokens are prefilled, and the prompt's
    blocks enter the cache at the prefill deadline (`PrefillDone`). Fault injection only:
    `make_stream` builds the stream, and `delay_ns` holds every response byte until
    ``t0 + delay_ns`` and shifts the whole schedule (and ``anvil-t0-ns``) by it. With
    ``--max-running``, `admit` (`admission.Admission.enter`) starts a stream when a slot is
    free; its prefix-cache lookup and plan happen then, as a real scheduler's do.
    """
    try:
        data = load_json_object(body)
        request = parse(data, cfg)
    except RequestError as exc:
        if delay_ns:
            reply = functools.partial(conn.respond_json, exc.status, exc.body)
            sched.at(t0_ns + delay_ns, Deferred(conn, reply))
        else:
            conn.respond_json(exc.status, exc.body)
        return
    t0_ns += delay_ns
    if request.stream and (admit is not None or not delay_ns):
        begin = functools.partial(
            start_stream, conn, sched, cfg, data, request, t0_ns, cache, make_stream
        )
        if admit is None:
            begin(t0_ns)
        elif delay_ns:
            sched.at(t0_ns, Deferred(conn, functools.partial(admit, conn, begin, t0_ns)))
        else:
            admit(conn, begin, t0_ns)
        return
    keys: tuple[int, ...] = ()
    if cache is not None:
        lookup = cache.lookup(prompt_token_ids(data["messages"], cfg.tokenizer))
        keys = lookup.keys
        request = dataclasses.replace(request, cached_tokens=lookup.cached_tokens)
    plan = plan_output(request, cfg)
    if request.stream:  # delayed (slow_headers) without --max-running: looked up at once
        stream = make_stream(conn, sched, cfg, request, plan, t0_ns)
        first = None if cache is None else PrefillDone(conn, cache, keys, stream)
        sched.at(t0_ns, Deferred(conn, functools.partial(stream.start, first)))
        return
    prefill_end = t0_ns + cfg.prefill_ns(request.computed_tokens, t0_ns)
    end = prefill_end + max(plan.total - 1, 0) * cfg.interval_ns
    body = completion_body(request, plan, cfg)
    completion = DelayedCompletion(conn, body, t0_header(cfg, t0_ns), t0_ns)
    if cache is None:
        sched.at(end, completion)
    elif end == prefill_end:
        sched.at(end, PrefillDone(conn, cache, keys, completion))
    else:
        sched.at(prefill_end, PrefillDone(conn, cache, keys))
        sched.at(end, completion)


def start_stream(
    conn: HttpConnection,
    sched: Scheduler,
    cfg: SimConfig,
    data: dict[str, Any],
    request: ChatRequest,
    t0_ns: int,
    cache: PrefixCache | None,
    make_stream: Callable[..., ChatStream],
    start_ns: int,
) -> None:
    """Look the prompt up in the cache, plan, and start the stream, its plan at `start_ns`."""
    keys: tuple[int, ...] = ()
    if cache is not None:
        lookup = cache.lookup(prompt_token_ids(data["messages"], cfg.tokenizer))
        keys = lookup.keys
        request = dataclasses.replace(request, cached_tokens=lookup.cached_tokens)
    stream = make_stream(conn, sched, cfg, request, plan_output(request, cfg), t0_ns,
                         start_ns=start_ns)  # fmt: skip
    stream.start(None if cache is None else PrefillDone(conn, cache, keys, stream))
