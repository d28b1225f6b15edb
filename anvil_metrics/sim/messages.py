"""`POST /v1/messages`: the Anthropic Messages API streamed on the chat stream's clock.

Why: `anvil run --endpoint messages` loads this endpoint, and its stamps must be judged
against the simulator's send stamps like a chat stream's. So a Messages request is the chat
request it stands for, as vLLM serves it (its `system`, a string or text blocks, then any
system messages, become the first message; its messages' text blocks their content;
`max_tokens` the cap; `thinking` enabled or disabled is `chat_template_kwargs.enable_thinking`,
`output_config.effort` the reasoning effort; `chat_template_kwargs` and `ignore_eos` as in
chat): counted, admitted, prefix-cached and timed by the same code (`chat.answer_chat`), and
only its events differ. As Anthropic's streaming reference and vLLM's `/v1/messages` send
them (``event: TYPE`` and ``data: {"type": TYPE, …}``):

- `message_start` with the headers: the message (id, model, empty content) and its usage in
  Anthropic's names: `input_tokens` the prompt less its prefix-cache hit,
  `cache_read_input_tokens` that hit, `cache_creation_input_tokens` 0, `output_tokens` 0;
- a `thinking` block for the reasoning tokens, then a `text` block for the content, each
  opened by `content_block_start` before its first token and closed by
  `content_block_stop`; one `thinking_delta` or `text_delta` `content_block_delta` per token;
- `message_delta` with `stop_reason` (`end_turn`, or `max_tokens` when the cap cut it) and
  `usage.output_tokens`, then `message_stop`; no `[DONE]`.

With ``--stamp-send`` each event carries ``"anvil_sent_ns"`` as a chat chunk does. A request
that is not a JSON object with `messages`, `max_tokens` and `stream: true` is refused with
HTTP 400 (an OpenAI error body, as the chat route's other refusals).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import orjson

from anvil_metrics.sim.chat import ChatStream, answer_chat, piece, t0_header
from anvil_metrics.sim.chatrequest import RequestError, load_json_object
from anvil_metrics.sim.config import SimConfig
from anvil_metrics.sim.httpproto import HttpConnection
from anvil_metrics.sim.prefixcache import PrefixCache
from anvil_metrics.sim.scheduler import Scheduler
from anvil_metrics.sim.script import content_text

_STOP = {"stop": b"end_turn", "length": b"max_tokens"}


def chat_body(data: dict[str, Any]) -> dict[str, Any]:
    """The chat request a Messages body stands for; raises `RequestError` as vLLM would."""
    if data.get("stream") is not True:
        raise RequestError(400, "only stream=true is simulated", param="stream")
    cap = data.get("max_tokens")
    if type(cap) is not int or cap <= 0:
        raise RequestError(400, "max_tokens must be a positive integer", param="max_tokens")
    given = data.get("messages")
    if not isinstance(given, list) or not given or not all(
            isinstance(m, dict) and m.get("role") in ("user", "assistant", "system")
            for m in given):
        raise RequestError(400, "messages must be a non-empty list of user and assistant "
                           "messages", param="messages")
    system = [content_text(data.get("system"))] + [
        content_text(m.get("content")) for m in given if m["role"] == "system"]
    messages = [{"role": "system", "content": "".join(system)}] if any(system) else []
    messages += [{"role": m["role"], "content": content_text(m.get("content"))}
                 for m in given if m["role"] != "system"]
    body: dict[str, Any] = {"model": data.get("model"), "messages": messages, "stream": True,
                            "max_tokens": cap}
    for key in ("ignore_eos", "chat_template_kwargs"):
        if key in data:
            body[key] = data[key]
    thinking = data.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") in ("enabled", "disabled"):
        body["chat_template_kwargs"] = {**body.get("chat_template_kwargs", {}),
                                        "enable_thinking": thinking["type"] == "enabled"}
    effort = (data.get("output_config") or {}).get("effort")
    if effort is not None:
        body["reasoning_effort"] = effort
    return body


class MessagesStream(ChatStream):
    """A `ChatStream` whose events are the Messages API's (see the module doc)."""

    __slots__ = ("_blocks", "_id")
    ROLE = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._blocks = 0  # the content blocks opened so far
        self._id = f"msg_{uuid.uuid4().hex}"

    def _event(self, kind: bytes, fields: bytes) -> bytes:
        """One event as ``event:``/``data:`` lines in one HTTP chunk, stamped just before
        the write when asked."""
        stamp = (b',"anvil_sent_ns":%d' % time.perf_counter_ns() if self._cfg.stamp_send
                 else b"")
        payload = b'event: %s\ndata: {"type":"%s"%s%s}\n\n' % (
            kind, kind, stamp, b"," + fields if fields else b"")
        return b"%x\r\n%s\r\n" % (len(payload), payload)

    def _send_head(self) -> None:
        usage = self._usage
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
        message = {"id": self._id, "type": "message", "role": "assistant", "content": [],
                   "model": self._cfg.model, "stop_reason": None, "stop_sequence": None,
                   "usage": {"input_tokens": usage["prompt_tokens"] - cached,
                             "cache_read_input_tokens": cached,
                             "cache_creation_input_tokens": 0, "output_tokens": 0}}
        head = self._conn.stream_head(extra=t0_header(self._cfg, self._t0, self._start))
        self._conn.write(head + self._event(b"message_start",
                                            b'"message":' + orjson.dumps(message)))
        self._head_sent = True

    def _token_event(self, i: int) -> bytes:
        """Token `i`'s delta (after its block's start, and the block before's stop, at its
        block's first token)."""
        reasoning = i < self._plan.reasoning
        k = i if reasoning else i - self._plan.reasoning
        opened = b""
        if k == 0:
            opened = self._stop_block() if self._blocks else b""
            block = b'{"type":"thinking","thinking":"","signature":""}' if reasoning else \
                b'{"type":"text","text":""}'
            opened += self._event(b"content_block_start",
                                  b'"index":%d,"content_block":%s' % (self._blocks, block))
            self._blocks += 1
        kind, field = (b"thinking_delta", b"thinking") if reasoning else (b"text_delta", b"text")
        return opened + self._event(b"content_block_delta", b'"index":%d,"delta":{"type":"%s",'
                                    b'"%s":%s}' % (self._blocks - 1, kind, field, orjson.dumps(
                                        piece("r" if reasoning else "c", k))))

    def _stop_block(self) -> bytes:
        return self._event(b"content_block_stop", b'"index":%d' % (self._blocks - 1))

    def _finish(self, i: int) -> None:
        """The last token's delta, its block's stop, `message_delta` (the stop reason and the
        output's count), then `message_stop`."""
        events = [self._token_event(i)] if self._plan.total else []
        if self._blocks:
            events.append(self._stop_block())
        events.append(self._event(b"message_delta", b'"delta":{"stop_reason":"%s",'
                                  b'"stop_sequence":null},"usage":{"output_tokens":%d}' % (
                                      _STOP.get(self._plan.finish_reason, b"end_turn"),
                                      self._usage["completion_tokens"])))
        events.append(self._event(b"message_stop", b""))
        self._end_with(events)


def answer_messages(conn: HttpConnection, sched: Scheduler, cfg: SimConfig, body: bytes,
                    t0_ns: int, cache: PrefixCache | None = None, admit: Any = None) -> None:
    """Handle ``POST /v1/messages``: refuse, or stream it as its chat request."""
    try:
        chat = chat_body(load_json_object(body))
    except RequestError as exc:
        conn.respond_json(exc.status, exc.body)
        return
    answer_chat(conn, sched, cfg, orjson.dumps(chat), t0_ns, cache, MessagesStream,
                admit=admit)
