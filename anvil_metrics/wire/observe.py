"""One stream's observer: stamps, chunk counts, usage and, if it fails, why.

The observer is a small state machine fed the stream's SSE payloads with their arrival
stamps; it does no I/O, so every stream shape (role-only first chunk, empty deltas,
`reasoning` vs `reasoning_content`, usage in its own `choices: []` chunk or inside the
finish chunk, no `[DONE]`) is tested without a network. The rules are those of
`../shared/spec/benchmark-v1.md` ("Clock and events") and `../shared/design/SERVERS.md`:

- first output: the first chunk with a non-empty reasoning or content delta; a role-only or
  empty chunk does not count;
- first chunk: the first chunk with any `choices` entry, role-only and empty ones included —
  what vLLM's server-side TTFT and its bench client stamp (the first generated token may be
  hidden by a reasoning parser, its chunk still goes out); a usage-only chunk
  (`choices: []`) or an error is not one;
- reasoning is read from `delta.reasoning` first, then `delta.reasoning_content`;
- usage is taken from wherever it arrives (last one wins);
- the end is `[DONE]`, or a clean end of the response after a `finish_reason`; a response
  that ends before any `finish_reason` is a `truncated` failure;
- an `error` object inside the stream is a `stream_error`; a payload that is not a JSON
  object is a `malformed_chunk`;
- more output chunks (reasoning and content: both count toward `max_tokens` on vLLM and
  SGLang) than `overrun_limit(max_tokens)` is an `overrun` failure: a server that ignores
  `max_tokens` would otherwise stream forever. A chunk carries one token or more, so an
  honest server sends at most `max_tokens` of them; the limit doubles that and adds 64 (a
  margin no honest server needs), and costs one integer compare per output chunk.

- a delta's `tool_calls` fragments are output on the content channel (the tool parser took
  them out of the content: they are the answer's tokens), counted as a content delta is.

A stream from anvil's stamping simulator also gets `truth`, a `truth.SendStamps` that keeps
the simulator's send stamps beside the observer's (None for any other server).

Everything an observer holds is set by the observer itself: what the caller knows of the
request before it goes out comes to the constructor (`extra`: a conversation's turn, a mix's
class and model), the response head to `on_head`, each payload to `on_data`, a whole answer
to `on_answer`, the end to `on_eof` or `fail`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from anvil_metrics.records import Failure, RequestRecord, input_total
from anvil_metrics.wire.truth import SendStamps

# the most answer text kept for a check class's judge (content, reasoning, tool-call
# fragments together): a longer answer is judged a failure, never kept whole
KEEP_CHARS = 1 << 18


@dataclass(frozen=True, slots=True)
class KeptAnswer:
    """A check class's answer as its judge gets it (`checks.underload`): the text as
    received, the `delta.tool_calls` fragments in order (assembled by their judge, as `anvil
    check` assembles a stream's), the server's prompt count and the finish reason. `cut`:
    the answer was longer than `KEEP_CHARS` and not all of it was kept."""

    content: str
    reasoning: str
    tool_fragments: tuple[Any, ...]
    prompt_tokens: int | None
    finish_reason: str | None
    cut: bool = False


def overrun_limit(max_tokens: int | None) -> int:
    """The most output chunks a request capped at `max_tokens` may bring before it is an
    `overrun` (the module docstring); no cap (None: an embedding's) is no limit."""
    return sys.maxsize if max_tokens is None else 2 * max_tokens + 64


_USAGE_COUNTS = ("prompt_tokens", "completion_tokens", "total_tokens", "input_tokens",
                 "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


def checked_usage(usage: object) -> dict:
    """`usage` if it is an object whose token counts (those it has) are whole numbers >= 0;
    else a ValueError or TypeError naming the bad one (a `malformed_chunk`: a negative or
    fractional count would be averaged into the run's figures)."""
    if not isinstance(usage, dict):
        raise TypeError("usage is not an object")
    for key in _USAGE_COUNTS:
        n = usage.get(key)
        if n is not None and (type(n) is not int or n < 0):
            raise ValueError(f"usage.{key} is {n!r}, not a count of tokens")
    return usage


def prompt_tokens_of(usage: object) -> int | None:
    """The prompt's count in a usage object: `prompt_tokens`, or the Responses or Messages
    API's (`records.input_total`); None when it has neither as an integer."""
    if not isinstance(usage, dict):
        return None
    n = usage["prompt_tokens"] if "prompt_tokens" in usage else input_total(
        usage.get("input_tokens"), usage.get("cache_read_input_tokens"),
        usage.get("cache_creation_input_tokens"))
    return n if type(n) is int else None


def error_message(err: object) -> str:
    """An error object's `message` (its whole text when it has none)."""
    return err.get("message", str(err)) if isinstance(err, dict) else str(err)


class StreamObserver:
    """Accumulates one request's observations; `finish()` returns its `RequestRecord`.

    `on_first_output` / `on_first_content` are called (with the stamp in ns) the moment
    those events happen, so Locust listeners can see them live.
    """

    __slots__ = (
        "request_index",
        "start_ns",
        "warmup",
        "planned_context_tokens",
        "worker",
        "first_output_ns",
        "first_content_ns",
        "first_chunk_ns",
        "end_ns",
        "reasoning_chunks",
        "content_chunks",
        "deltas",
        "channels",
        "usage",
        "finish_reason",
        "http_status",
        "failure",
        "done",
        "_last_ns",
        "last_bytes_ns",
        "on_first_output",
        "on_first_content",
        "truth",
        "due_ns",
        "waited_for_user",
        "text",
        "thought",
        "judge",
        "fragments",
        "kept_chars",
        "extra",
        "response_id",
        "max_tokens",
        "max_chunks",
    )

    def __init__(
        self,
        request_index: int,
        start_ns: int,
        *,
        warmup: bool = False,
        planned_context_tokens: int | None = None,
        worker: str | None = None,
        on_first_output: Callable[[StreamObserver, int], None] | None = None,
        on_first_content: Callable[[StreamObserver, int], None] | None = None,
        keep_text: bool = False,
        judge: Callable[[KeptAnswer], Mapping[str, Any]] | None = None,
        extra: Mapping[str, int | None] | None = None,
        max_tokens: int | None = None,
    ) -> None:
        self.request_index = request_index
        self.start_ns = start_ns
        self.warmup = warmup
        self.planned_context_tokens = planned_context_tokens
        self.worker = worker
        self.first_output_ns: int | None = None
        self.first_content_ns: int | None = None
        self.first_chunk_ns: int | None = None
        self.end_ns: int | None = None
        self.reasoning_chunks = 0
        self.content_chunks = 0
        self.deltas: list[int] = []
        self.channels: list[str] = []
        self.usage: dict | None = None
        self.finish_reason: str | None = None
        self.http_status: int | None = None
        self.failure: Failure | None = None
        self.done = False
        self._last_ns = start_ns
        # when bytes of the answer last arrived (its start until then), stamped by
        # `client.read_events` per received block: a stuck request's silence (`live/stuck.py`)
        self.last_bytes_ns = start_ns
        self.on_first_output = on_first_output
        self.on_first_content = on_first_content
        self.truth: SendStamps | None = None  # the simulator's send stamps, if it sends them
        self.due_ns: int | None = None  # when the request was due to go out (`begin`)
        self.waited_for_user = False  # open loop: no user was free when it fell due
        # `keep_text`: the content deltas as received (a conversation's next turn sends
        # the answer back as history); None otherwise, and nothing is kept
        self.text: list[str] | None = [] if keep_text or judge is not None else None
        # `judge`: a check class's (`load/mixbodies.py`), of its `KeptAnswer` (content,
        # reasoning and tool-call fragments kept as received, for it alone, at most
        # `KEEP_CHARS`), called by `finish` once the stamps are taken; its verdict joins
        # `extra`. None: nothing judged, no reasoning nor tool call kept
        self.judge = judge
        self.thought: list[str] | None = [] if judge is not None else None
        self.fragments: list[Any] | None = [] if judge is not None else None
        self.kept_chars = 0
        # what the record carries in `extra` besides the stream's own: a conversation's
        # turn (conversation, turn, turns, history_tokens), a mix's class_index and
        # model_index; None: nothing
        self.extra = extra
        # the answer's id (a Responses API stream's, `eventsobs`); None for the others
        self.response_id: str | None = None
        # the request's output cap as sent (None: none), and the output chunks it allows
        self.max_tokens = max_tokens
        self.max_chunks = overrun_limit(max_tokens)

    def begin(self, t_ns: int, due_ns: int | None = None, *,
              waited_for_user: bool | None = None) -> None:
        """Stamp the start of the request: `t_ns` just before its first byte is written (or
        its connect failed); `due_ns` when it was due to go out (None: no delay recorded);
        `waited_for_user` (open loop; None keeps what was set): no user was free when it
        fell due. The one way a start is set after construction."""
        self.start_ns = t_ns
        self._last_ns = self.last_bytes_ns = t_ns
        self.due_ns = due_ns
        if waited_for_user is not None:
            self.waited_for_user = waited_for_user

    def sent_to(self, replica: int) -> None:
        """The request goes to replica `replica` (its position in `--host URL,URL`): kept in
        its record's `extra`."""
        self.extra = {**(self.extra or {}), "replica": replica}

    def gated(self, wait_ns: int, release: Callable[[], None]) -> None:
        """The request waited `wait_ns` at the client's prefill gate before it was sent
        (`live/prefillgate`): kept in its record's `extra`; `release` frees its slot at
        its first output, before the hook it was given."""
        self.extra = {**(self.extra or {}), "prefill_gate_wait_ns": wait_ns}
        then = self.on_first_output

        def first_output(obs: StreamObserver, t_ns: int) -> None:
            release()
            if then is not None:
                then(obs, t_ns)

        self.on_first_output = first_output

    def on_head(self, http_status: int, truth: SendStamps | None = None) -> None:
        """The response head arrived: its HTTP status, and the simulator's send stamps
        when it sends them (`truth.from_headers`)."""
        self.http_status = http_status
        self.truth = truth

    @property
    def phase(self) -> str:
        """Where the stream is now: `prefill` before the first output, then `decode`."""
        return "prefill" if self.first_output_ns is None else "decode"

    def on_data(self, data: str | bytes, t_ns: int) -> bool:
        """Feed one SSE `data` payload (str, or the raw bytes: orjson checks their UTF-8)
        that arrived at `t_ns`. Returns True when the stream is over (`[DONE]` or a
        failure)."""
        if data == b"[DONE]" or data == "[DONE]":
            self.end_ns = t_ns
            self.done = True
            return True
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError as e:
            return self.fail("malformed_chunk", f"chunk is not valid JSON ({e}): {data[:200]!r}",
                             t_ns, phase=self.phase)
        if not isinstance(chunk, dict):
            return self.fail("malformed_chunk", f"chunk is not a JSON object: {data[:200]!r}",
                             t_ns, phase=self.phase)
        try:
            return self._on_chunk(chunk, t_ns)
        except (AttributeError, TypeError, KeyError, IndexError, ValueError) as e:
            return self.fail("malformed_chunk",
                             f"chunk has an unexpected shape ({type(e).__name__}: {e}): "
                             f"{data[:200]!r}", t_ns, phase=self.phase)

    def _on_chunk(self, chunk: dict, t_ns: int) -> bool:
        err = chunk.get("error")
        if err is not None or chunk.get("object") == "error":
            err = chunk if err is None else err
            return self.fail("stream_error", f"server error in stream: {error_message(err)}",
                             t_ns,
                             phase=self.phase)
        usage = chunk.get("usage")
        if usage is not None:
            self.usage = checked_usage(usage)
        choices = chunk.get("choices")
        if not choices:
            if self.truth is not None:
                self.truth.chunk(chunk, False, False)
            return False
        if self.first_chunk_ns is None:
            self.first_chunk_ns = t_ns
        choice = choices[0]
        delta = choice.get("delta")
        if delta is None and "text" in choice:  # /v1/completions: its text is the output
            delta = {"content": choice["text"]}
        if delta:
            reasoning = delta.get("reasoning") or delta.get("reasoning_content")
            content = delta.get("content")
            calls = delta.get("tool_calls")
            if not isinstance(reasoning or "", str) or not isinstance(content or "", str):
                raise TypeError("a delta's text is not a string")
            if reasoning or content or calls:
                if self._output(bool(reasoning), bool(content or calls), t_ns):
                    return True
                if self.judge is not None:
                    self._keep(content, reasoning, calls)
                elif content and self.text is not None:
                    self.text.append(content)
            if self.truth is not None:
                self.truth.chunk(chunk, bool(reasoning or content or calls),
                                 bool(content or calls))
        elif self.truth is not None:
            self.truth.chunk(chunk, False, False)
        fr = choice.get("finish_reason")
        if fr:
            if not isinstance(fr, str):
                raise TypeError("finish_reason is not a string")
            self.finish_reason = fr
        return False

    def _keep(self, content: str | None, reasoning: str | None, calls: Any) -> None:
        """Keep a check class's delta for its judge, up to `KEEP_CHARS` in all (past it,
        nothing more is kept and the answer is judged a failure: `KeptAnswer.cut`)."""
        if not isinstance(calls, list):
            calls = () if calls is None else (calls,)  # not a list: its judge says why
        size = len(content or "") + len(reasoning or "") + sum(
            len(orjson.dumps(c)) for c in calls)
        self.kept_chars += size
        if self.kept_chars > KEEP_CHARS:
            return
        if content:
            self.text.append(content)  # type: ignore[union-attr]
        if reasoning:
            self.thought.append(reasoning)  # type: ignore[union-attr]
        self.fragments.extend(calls)  # type: ignore[union-attr]

    def kept(self) -> KeptAnswer:
        """What a check class's judge is given (`KeptAnswer`)."""
        return KeptAnswer("".join(self.text or ()), "".join(self.thought or ()),
                          tuple(self.fragments or ()), prompt_tokens_of(self.usage),
                          self.finish_reason, self.kept_chars > KEEP_CHARS)

    def _output(self, reasoning: bool, content: bool, t_ns: int) -> bool:
        """Count one output chunk; True when it is one too many (an `overrun`: over)."""
        deltas = self.deltas
        if len(deltas) >= self.max_chunks:
            return self._overrun(t_ns)
        deltas.append(t_ns - self._last_ns)
        self._last_ns = t_ns
        if self.first_output_ns is None:
            self.first_output_ns = t_ns
            if self.on_first_output is not None:
                self.on_first_output(self, t_ns)
        if reasoning:
            self.reasoning_chunks += 1
        if content:
            self.content_chunks += 1
            if self.first_content_ns is None:
                self.first_content_ns = t_ns
                if self.on_first_content is not None:
                    self.on_first_content(self, t_ns)
        self.channels.append("b" if reasoning and content else ("r" if reasoning else "c"))
        return False

    def _overrun(self, t_ns: int) -> bool:
        """The chunk past `max_chunks` arrived: it is not counted, the request fails."""
        return self.fail("overrun", f"more than {self.max_chunks} output chunks (2 x "
                         f"max_tokens {self.max_tokens} + 64): the server ignored max_tokens; "
                         "the connection was closed", t_ns, phase=self.phase)

    def on_eof(self, t_ns: int) -> bool:
        """The response body ended without `[DONE]`."""
        if self.done:
            return True
        if self.finish_reason is not None:
            self.end_ns = t_ns
            self.done = True
            return True
        return self.fail("truncated", "response ended before any finish_reason", t_ns,
                         phase=self.phase)

    def on_answer(self, answer: dict, usage: dict | None, t_ns: int) -> bool:
        """An answer that came whole (an embeddings answer, checked by
        `eventsobs.on_whole`), with its `usage`; its last byte arrived at `t_ns`, its end."""
        self.usage = usage
        if self.truth is not None:
            self.truth.chunk(answer, False, False)
        self.end_ns = t_ns
        self.done = True
        return True

    def fail(self, kind: str, message: str, t_ns: int, *, phase: str | None = None,
             http_status: int | None = None) -> bool:
        if self.failure is None:
            self.failure = Failure(kind=kind, message=message,
                                   http_status=http_status if http_status is not None
                                   else self.http_status, phase=phase)
            self.end_ns = t_ns
        self.done = True
        return True

    def finish(self) -> RequestRecord:
        if self.judge is not None and self.failure is None:
            verdict = self.judge(self.kept())
            self.extra = {**(self.extra or {}), **verdict}
        return RequestRecord(
            request_index=self.request_index,
            start_ns=self.start_ns,
            end_ns=self.end_ns,
            first_output_ns=self.first_output_ns,
            first_content_ns=self.first_content_ns,
            warmup=self.warmup,
            planned_context_tokens=self.planned_context_tokens,
            reasoning_chunks=self.reasoning_chunks,
            content_chunks=self.content_chunks,
            chunk_deltas_ns=tuple(self.deltas),
            chunk_channels="".join(self.channels),
            usage=self.usage,
            finish_reason=self.finish_reason,
            http_status=self.http_status,
            failure=self.failure,
            worker=self.worker,
            extra=self._record_extra(),
        )

    def _record_extra(self) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        if self.first_chunk_ns is not None:  # role-only chunks included (the module's rules)
            extra["first_chunk_ns"] = self.first_chunk_ns
        if self.due_ns is not None:  # how late the request went out (saturation.py)
            extra["start_delay_ns"] = max(0, self.start_ns - self.due_ns)
        if self.waited_for_user:
            extra["waited_for_user"] = True
        if self.extra is not None:
            extra.update(self.extra)
        if self.truth is not None:
            extra["server"] = self.truth.stamps
        return extra
