"""`POST /v1/responses` as load: the Responses API streamed on the chat stream's clock.

Why: `anvil run --endpoint responses` loads this endpoint, and its stamps must be judged
against the simulator's send stamps like a chat stream's. So a Responses request is the chat
request it stands for (its `input` items, after the stored turns of `previous_response_id`,
are the messages; `max_output_tokens` the cap; `reasoning.effort`, `ignore_eos` and
`chat_template_kwargs` as in chat): counted, admitted, prefix-cached and timed by the same
code (`chat.answer_chat`), and only its events differ. As vLLM's (OpenAI's streaming-events
reference): ``event: TYPE`` and ``data: {"type": TYPE, "sequence_number": n, …}``;
`response.created` and `response.in_progress` with the headers; an output item (a reasoning
one, then a message) added before its first delta; one `response.reasoning_text.delta` or
`response.output_text.delta` per token; the items' done events and `response.completed`
(status `incomplete` when `max_output_tokens` cut it) with `usage` in the Responses names
(`input_tokens`, `output_tokens`, their `_details`); no `[DONE]`. With ``--stamp-send`` each
event carries ``"anvil_sent_ns"`` as a chat chunk does.

A completed response is stored (bounded, oldest dropped first) as its messages plus the
answer's text, so a later request's `previous_response_id` continues it, as vLLM does with
``VLLM_ENABLE_RESPONSES_API_STORE=1``: without the stored system messages (`instructions`
do not carry over; the request's own come first) and the reasoning (a reasoning-only answer
adds no message); an unknown id is vLLM's 404. `--script` keeps its
own route (`responses.py`): the checks' questions, answered at once.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections import OrderedDict
from typing import Any

import orjson

from anvil_metrics.sim.chat import ChatStream, answer_chat, full_text, piece, t0_header
from anvil_metrics.sim.chatrequest import RequestError, load_json_object
from anvil_metrics.sim.config import SimConfig
from anvil_metrics.sim.httpproto import HttpConnection
from anvil_metrics.sim.prefixcache import PrefixCache
from anvil_metrics.sim.responses import input_items
from anvil_metrics.sim.scheduler import Scheduler

STORE_LIMIT = 65_536  # responses kept for previous_response_id


class ResponseStore:
    """Completed responses' messages (their input, then the answer), by response id."""

    def __init__(self, limit: int = STORE_LIMIT) -> None:
        self._limit = limit
        self._messages: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()

    def get(self, response_id: str) -> list[dict[str, Any]] | None:
        return self._messages.get(response_id)

    def put(self, response_id: str, messages: list[dict[str, Any]]) -> None:
        self._messages[response_id] = messages
        while len(self._messages) > self._limit:
            self._messages.popitem(last=False)


def chat_body(data: dict[str, Any], store: ResponseStore) -> dict[str, Any]:
    """The chat request a Responses body stands for; raises `RequestError` as vLLM would."""
    if data.get("stream") is not True:
        raise RequestError(400, "only stream=true is simulated", param="stream")
    items = input_items(data)
    messages = [{"role": i["role"], "content": i.get("content", "")} for i in items
                if i.get("type", "message") == "message" and isinstance(i.get("role"), str)]
    if not messages:
        raise RequestError(400, "input must be a string or a non-empty list of messages",
                           param="input")
    previous = data.get("previous_response_id")
    if previous is not None:
        before = store.get(previous) if isinstance(previous, str) else None
        if before is None:
            raise RequestError(404, f"Response with id '{previous}' not found.",
                               param="previous_response_id")
        # a stored response's system messages do not carry over (OpenAI's rule, vLLM's)
        messages = [m for m in before if m["role"] != "system"] + messages
    if isinstance(data.get("instructions"), str):
        messages = [{"role": "system", "content": data["instructions"]}, *messages]
    body: dict[str, Any] = {"model": data.get("model"), "messages": messages, "stream": True}
    for key, to in (("max_output_tokens", "max_tokens"), ("ignore_eos", "ignore_eos"),
                    ("chat_template_kwargs", "chat_template_kwargs")):
        if key in data:
            body[to] = data[key]
    reasoning = data.get("reasoning")
    if isinstance(reasoning, dict) and "effort" in reasoning:
        body["reasoning_effort"] = reasoning["effort"]
    return body


def responses_usage(chat_usage: dict[str, Any]) -> dict[str, Any]:
    """A chat usage object (`chatrequest.usage_of`) in the Responses API's names."""
    details = chat_usage.get("prompt_tokens_details") or {}
    return {"input_tokens": chat_usage["prompt_tokens"],
            "input_tokens_details": {"cached_tokens": details.get("cached_tokens", 0)},
            "output_tokens": chat_usage["completion_tokens"],
            "output_tokens_details": chat_usage["completion_tokens_details"],
            "total_tokens": chat_usage["total_tokens"]}


class EventEncoder:
    """Frames one Responses event as ``event:``/``data:`` lines in one HTTP chunk, numbered
    in order and stamped (``"anvil_sent_ns"``) just before the write when asked."""

    __slots__ = ("_n", "_stamp")

    def __init__(self, stamp: bool) -> None:
        self._n, self._stamp = 0, stamp

    def event(self, kind: bytes, fields: bytes = b"") -> bytes:
        n, self._n = self._n, self._n + 1
        stamp = b',"anvil_sent_ns":%d' % time.perf_counter_ns() if self._stamp else b""
        payload = b'event: %s\ndata: {"type":"%s","sequence_number":%d%s%s}\n\n' % (
            kind, kind, n, stamp, b"," + fields if fields else b"")
        return b"%x\r\n%s\r\n" % (len(payload), payload)


class ResponsesStream(ChatStream):
    """A `ChatStream` whose events are the Responses API's (see the module doc)."""

    __slots__ = ("_events", "_response", "_messages", "_store", "_items")
    ROLE = None

    def __init__(self, *args: Any, messages: list[dict[str, Any]], store: ResponseStore,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._events = EventEncoder(self._cfg.stamp_send)
        self._response = {"id": f"resp_{uuid.uuid4().hex}", "object": "response",
                          "created_at": int(time.time()), "model": self._cfg.model,
                          "status": "in_progress", "output": [], "error": None,
                          "incomplete_details": None, "usage": None}
        self._messages, self._store = messages, store
        self._items: list[dict[str, Any]] = []  # the output items added so far

    def _response_event(self, kind: bytes, **changes: Any) -> bytes:
        return self._events.event(kind, b'"response":' + orjson.dumps(
            {**self._response, **changes}))

    def _send_head(self) -> None:
        head = self._conn.stream_head(extra=t0_header(self._cfg, self._t0, self._start))
        self._conn.write(head + self._response_event(b"response.created")
                         + self._response_event(b"response.in_progress"))
        self._head_sent = True

    def _channel(self, i: int) -> str:
        return "r" if i < self._plan.reasoning else "c"

    def _where(self) -> bytes:
        return b'"item_id":"%s","output_index":%d,"content_index":0' % (
            self._items[-1]["id"].encode(), len(self._items) - 1)

    def _open_item(self, channel: str) -> list[bytes]:
        """Close the reasoning item (if one is open) and add the item of `channel`."""
        out = self._close_item() if self._items else []
        reasoning = channel == "r"
        item = {"id": f"{'rs' if reasoning else 'msg'}_{uuid.uuid4().hex}",
                "type": "reasoning" if reasoning else "message", "status": "in_progress",
                "content": [], **({} if reasoning else {"role": "assistant"})}
        self._items.append(item)
        index = b'"output_index":%d,' % (len(self._items) - 1)
        out.append(self._events.event(b"response.output_item.added",
                                      index + b'"item":' + orjson.dumps(item)))
        part = {"type": "reasoning_text" if reasoning else "output_text", "text": ""}
        out.append(self._events.event(b"response.content_part.added",
                                      self._where() + b',"part":' + orjson.dumps(part)))
        return out

    def _close_item(self) -> list[bytes]:
        item = self._items[-1]
        reasoning = item["type"] == "reasoning"
        count = self._plan.reasoning if reasoning else self._plan.content
        text = full_text("r" if reasoning else "c", count)
        part = {"type": "reasoning_text" if reasoning else "output_text", "text": text}
        item.update(status="completed", content=[part])
        kind = b"reasoning_text" if reasoning else b"output_text"
        where = self._where()
        return [self._events.event(b"response.%s.done" % kind,
                                   where + b',"text":' + orjson.dumps(text)),
                self._events.event(b"response.content_part.done",
                                   where + b',"part":' + orjson.dumps(part)),
                self._events.event(b"response.output_item.done", b'"output_index":%d,"item":'
                                   % (len(self._items) - 1) + orjson.dumps(item))]

    def _token_event(self, i: int) -> bytes:
        """Token `i`'s delta event (after its output item's added events, at its first)."""
        channel = self._channel(i)
        k = i if channel == "r" else i - self._plan.reasoning
        kind = b"response.reasoning_text.delta" if channel == "r" else \
            b"response.output_text.delta"
        opened = self._open_item(channel) if k == 0 else []
        return b"".join(opened) + self._events.event(
            kind, self._where() + b',"delta":' + orjson.dumps(piece(channel, k)))

    def _finish(self, i: int) -> None:
        """The last token's delta, the items' done events, then `response.completed`."""
        events = [self._token_event(i)] if self._plan.total else []
        if self._items:
            events += self._close_item()
        usage = responses_usage(self._usage)
        length = self._plan.finish_reason == "length"
        events.append(self._response_event(
            b"response.completed", status="incomplete" if length else "completed",
            incomplete_details={"reason": "max_output_tokens"} if length else None,
            output=self._items, usage=usage))
        answer = full_text("c", self._plan.content)
        # the answer continues the history as vLLM's does: its message item (a
        # reasoning-only answer has none, and adds nothing)
        self._store.put(self._response["id"], [*self._messages, *(
            [{"role": "assistant", "content": answer}] if answer else [])])
        self._end_with(events)


def answer_responses_load(conn: HttpConnection, sched: Scheduler, cfg: SimConfig, body: bytes,
                          t0_ns: int, store: ResponseStore, cache: PrefixCache | None = None,
                          admit: Any = None) -> None:
    """Handle an unscripted ``POST /v1/responses``: refuse, or stream it as its chat request."""
    try:
        chat = chat_body(load_json_object(body), store)
    except RequestError as exc:
        conn.respond_json(exc.status, exc.body)
        return
    stream = functools.partial(ResponsesStream, messages=chat["messages"], store=store)
    answer_chat(conn, sched, cfg, orjson.dumps(chat), t0_ns, cache, stream, admit=admit)
