"""The simulator's `POST /v1/responses` (OpenAI Responses API), streamed only.

Why: `anvil check responses_subset` must be tested against a real server process, both ways.
Without `--script` the simulator streams its fixed nonsense text (`chat.CONTENT_PIECES`)
with a correct event sequence, so the check fails on the answer, never on the protocol, and
never calls a tool. With `--script` it answers the suite's questions (`checks/responses.py`)
right — the text, the function call, then the answer quoting the token it reads from the
`function_call_output` — or wrong per `--script-fault responses_subset:KIND`:

    no_completed      the stream ends without response.completed
    wrong_order       the first delta comes before response.created
    delta_mismatch    the deltas lose their last piece; the done event and the completed
                      response keep the whole text (or arguments)
    no_function_call  the tool question is answered with text
    ignore_output     the final answer does not quote the tool output's token

The events and their fields follow OpenAI's streaming-events reference (as vLLM emits
them): ``event: TYPE`` then ``data: {"type": TYPE, "sequence_number": n, ...}``, no [DONE].
Answers are written at once: this route checks content and protocol, not timing. A request
with ``stream`` not true gets 400 — only streaming is simulated.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

import orjson

from anvil_metrics.checks import responses as suite
from anvil_metrics.sim.chat import full_text
from anvil_metrics.sim.chatrequest import RequestError, check_model, load_json_object
from anvil_metrics.sim.config import SimConfig
from anvil_metrics.sim.httpproto import HttpConnection
from anvil_metrics.sim.script import content_text

FAULT_SUITE = "responses_subset"
FAULT_KINDS = ("no_completed", "wrong_order", "delta_mismatch", "no_function_call",
               "ignore_output")


@dataclass(frozen=True, slots=True)
class ResponsesReply:
    """What the response holds: text, or one function call (name, arguments JSON text)."""

    text: str = ""
    call: tuple[str, str] | None = None


# -- what to answer ----------------------------------------------------------------------------


def input_items(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's `input` as items (a plain string is one user message)."""
    value = data.get("input")
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    return [i for i in value if isinstance(i, dict)] if isinstance(value, list) else []


def user_text(items: list[dict[str, Any]]) -> str:
    """The last user message's text (string content, or its text parts joined)."""
    for item in reversed(items):
        if item.get("role") == "user" and item.get("type", "message") == "message":
            return content_text(item.get("content"))
    return ""


def tool_names(data: dict[str, Any]) -> set[str]:
    return {t.get("name") for t in data.get("tools") or () if isinstance(t, dict)
            and t.get("type") == "function" and isinstance(t.get("name"), str)}


def scripted(data: dict[str, Any], faults: frozenset[str]) -> ResponsesReply | None:
    """The scripted answer to one of the suite's questions, None for any other request."""
    items = input_items(data)
    question = user_text(items)
    outputs = [i for i in items if i.get("type") == "function_call_output"]
    if question == suite.TEXT_PROMPT:
        return ResponsesReply(text=suite.TEXT_ANSWER)
    if question != suite.TOOL_PROMPT or suite.TOOL_NAME not in tool_names(data):
        return None
    if outputs:
        if f"{FAULT_SUITE}:ignore_output" in faults:
            return ResponsesReply(text="I have looked the ticket up for you.")
        code = _field(outputs[-1].get("output"), "resolution_code")
        return ResponsesReply(text=f"The ticket is resolved; its resolution code is {code}.")
    if f"{FAULT_SUITE}:no_function_call" in faults:
        return ResponsesReply(text="I cannot look tickets up, sorry.")
    return ResponsesReply(call=(suite.TOOL_NAME, orjson.dumps(suite.TOOL_ARGUMENTS).decode()))


def _field(output: Any, key: str) -> str:
    """`key` of a tool output that is a JSON object's text, "" when it is not there."""
    try:
        value = orjson.loads(output) if isinstance(output, str) else output
    except orjson.JSONDecodeError:
        return ""
    found = value.get(key) if isinstance(value, dict) else None
    return found if isinstance(found, str) else ""


# -- the event stream --------------------------------------------------------------------------


def _pieces(text: str, size: int = 4) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


def response_events(reply: ResponsesReply, model: str, input_tokens: int,
                    faults: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """The stream's events in order, without `sequence_number` (numbered when written)."""
    mismatch = f"{FAULT_SUITE}:delta_mismatch" in faults
    response: dict[str, Any] = {
        "id": f"resp_{uuid.uuid4().hex}", "object": "response", "created_at": int(time.time()),
        "model": model, "status": "in_progress", "output": [], "error": None,
        "incomplete_details": None, "usage": None}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": dict(response)},
        {"type": "response.in_progress", "response": dict(response)},
    ]
    if reply.call is not None:
        name, arguments = reply.call
        item: dict[str, Any] = {"id": f"fc_{uuid.uuid4().hex}", "type": "function_call",
                                "status": "in_progress", "call_id": f"call_{uuid.uuid4().hex}",
                                "name": name, "arguments": ""}
        where = {"item_id": item["id"], "output_index": 0}
        pieces = _pieces(arguments, 7)
        events.append({"type": "response.output_item.added", "output_index": 0,
                       "item": dict(item)})
        events += [{"type": "response.function_call_arguments.delta", **where, "delta": p}
                   for p in pieces[:-1 if mismatch else None]]
        events.append({"type": "response.function_call_arguments.done", **where, "name": name,
                       "arguments": arguments})
        item = {**item, "status": "completed", "arguments": arguments}
    else:
        item = {"id": f"msg_{uuid.uuid4().hex}", "type": "message", "role": "assistant",
                "status": "in_progress", "content": []}
        where = {"item_id": item["id"], "output_index": 0, "content_index": 0}
        part = {"type": "output_text", "text": "", "annotations": []}
        events.append({"type": "response.output_item.added", "output_index": 0,
                       "item": dict(item)})
        events.append({"type": "response.content_part.added", **where, "part": part})
        pieces = _pieces(reply.text)
        events += [{"type": "response.output_text.delta", **where, "delta": p, "logprobs": []}
                   for p in pieces[:-1 if mismatch else None]]
        events.append({"type": "response.output_text.done", **where, "text": reply.text,
                       "logprobs": []})
        part = {**part, "text": reply.text}
        events.append({"type": "response.content_part.done", **where, "part": part})
        item = {**item, "status": "completed", "content": [part]}
    events.append({"type": "response.output_item.done", "output_index": 0, "item": item})
    output_tokens = max(1, len(reply.text + "".join(reply.call or ())) // 4)
    usage = {"input_tokens": input_tokens, "output_tokens": output_tokens,
             "total_tokens": input_tokens + output_tokens}
    events.append({"type": "response.completed", "response": {
        **response, "status": "completed", "output": [item], "usage": usage}})
    if f"{FAULT_SUITE}:no_completed" in faults:
        events.pop()
    if f"{FAULT_SUITE}:wrong_order" in faults:
        first = next(i for i, e in enumerate(events) if e["type"].endswith(".delta"))
        events.insert(0, events.pop(first))
    return events


def sse(events: list[dict[str, Any]]) -> list[bytes]:
    """Each event as ``event:``/``data:`` lines with its `sequence_number`, one HTTP chunk."""
    out = []
    for n, event in enumerate(events):
        payload = b"event: %s\ndata: %s\n\n" % (
            event["type"].encode(), orjson.dumps({**event, "sequence_number": n}))
        out.append(b"%x\r\n%s\r\n" % (len(payload), payload))
    return out


def answer_responses(conn: HttpConnection, cfg: SimConfig, body: bytes,
                     faults: frozenset[str] | None) -> None:
    """Handle ``POST /v1/responses``; `faults` is None without ``--script`` (nonsense text),
    else the script's active faults."""
    try:
        data = load_json_object(body)
        check_model(data, cfg)
        if data.get("stream") is not True:
            raise RequestError(400, "only stream=true is simulated", param="stream")
        if not input_items(data):
            raise RequestError(400, "input must be a string or a non-empty list",
                               param="input")
    except RequestError as exc:
        conn.respond_json(exc.status, exc.body)
        return
    reply = scripted(data, faults) if faults is not None else None
    if reply is None:
        reply, faults = ResponsesReply(text=full_text("c", cfg.content_tokens)), frozenset()
    events = sse(response_events(reply, cfg.model, max(1, len(body) // 4), faults))
    conn.write(conn.stream_head())
    for e in events[:-1]:
        conn.write(e)
    conn.stream_end(events[-1])
