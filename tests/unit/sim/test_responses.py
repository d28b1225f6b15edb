"""The simulator's ``POST /v1/responses`` (`sim/responses.py`): which question gets which
answer, the event sequence OpenAI's reference gives (worked here for a 5-character text and a
16-character argument string), each fault's one change, and the route's refusals."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from simwire import Wire, http_chunks

from anvil_metrics.checks import responses as suite
from anvil_metrics.sim.config import SimConfig
from anvil_metrics.sim.responses import (
    FAULT_SUITE,
    ResponsesReply,
    input_items,
    response_events,
    scripted,
    sse,
    tool_names,
    user_text,
)

TOOLS = [{"type": "function", "name": suite.TOOL_NAME}]
TEXT_TYPES = ["response.created", "response.in_progress", "response.output_item.added",
              "response.content_part.added", "response.output_text.delta",
              "response.output_text.delta", "response.output_text.done",
              "response.content_part.done", "response.output_item.done", "response.completed"]


def fault(kind: str) -> frozenset[str]:
    return frozenset({f"{FAULT_SUITE}:{kind}"})


def test_input_and_its_user_text() -> None:
    assert input_items({"input": "hi"}) == [{"role": "user", "content": "hi"}]
    assert input_items({"input": [1, {"a": 1}]}) == [{"a": 1}] and input_items({}) == []
    items = [{"role": "user", "content": "first"},
             {"role": "user", "content": [{"type": "input_text", "text": "la"},
                                          {"type": "input_text", "text": "st"}]},
             {"type": "function_call_output", "output": "{}"}]
    assert user_text(items) == "last" and user_text([]) == ""
    assert tool_names({"tools": [*TOOLS, {"type": "web_search"}, {"type": "function"}, 3]}) == {
        suite.TOOL_NAME}


def test_the_scripts_answers() -> None:
    none: frozenset[str] = frozenset()
    assert scripted({"input": suite.TEXT_PROMPT}, none) == ResponsesReply(text="Paris")
    call = scripted({"input": suite.TOOL_PROMPT, "tools": TOOLS}, none)
    assert call == ResponsesReply(call=(suite.TOOL_NAME, '{"ticket_id":"T-4821"}'))
    assert scripted({"input": suite.TOOL_PROMPT}, none) is None  # the tool is not offered
    assert scripted({"input": "hello"}, none) is None
    after = {"tools": TOOLS, "input": [{"role": "user", "content": suite.TOOL_PROMPT},
             {"type": "function_call_output", "output": '{"resolution_code": "RC-9"}'}]}
    reply = scripted(after, none)
    assert reply is not None and reply.text.endswith("its resolution code is RC-9.")
    ignored = scripted(after, fault("ignore_output"))
    assert ignored is not None and "RC-9" not in ignored.text
    refused = scripted({"input": suite.TOOL_PROMPT, "tools": TOOLS}, fault("no_function_call"))
    assert refused is not None and refused.call is None


def test_a_text_answer_in_order() -> None:
    events = response_events(ResponsesReply(text="Paris"), "m", 7)
    assert [e["type"] for e in events] == TEXT_TYPES
    assert [e["delta"] for e in events if e["type"].endswith(".delta")] == ["Pari", "s"]
    done = events[-1]["response"]
    assert done["status"] == "completed" and done["output"][0]["content"][0]["text"] == "Paris"
    assert done["usage"] == {"input_tokens": 7, "output_tokens": 1, "total_tokens": 8}
    assert events[0]["response"]["id"] == done["id"]


def test_a_function_call_in_pieces_of_seven() -> None:
    args = '{"ticket_id":"T1"}'  # 18 characters: 7 + 7 + 4
    events = response_events(ResponsesReply(call=("f", args)), "m", 1)
    deltas = [e["delta"] for e in events if e["type"].endswith(".delta")]
    assert deltas == ['{"ticke', 't_id":"', 'T1"}']
    assert events[-2]["item"]["arguments"] == args and events[-2]["item"]["name"] == "f"
    assert events[-1]["response"]["usage"]["output_tokens"] == (1 + 18) // 4


@pytest.mark.parametrize("call", [False, True])
def test_each_fault_changes_one_thing(call: bool) -> None:
    reply = ResponsesReply(call=("f", "x" * 14)) if call else ResponsesReply(text="Paris")
    normal = response_events(reply, "m", 1)

    def types(events: list[dict[str, Any]]) -> list[str]:
        return [e["type"] for e in events]

    assert types(response_events(reply, "m", 1, fault("no_completed"))) == types(normal)[:-1]
    mismatch = response_events(reply, "m", 1, fault("delta_mismatch"))
    assert len(mismatch) == len(normal) - 1 and mismatch[-1]["type"] == "response.completed"
    wrong = response_events(reply, "m", 1, fault("wrong_order"))
    assert wrong[0]["type"].endswith(".delta") and wrong[1]["type"] == "response.created"


def test_sse_numbers_each_event_in_its_own_chunk() -> None:
    out = sse([{"type": "a.b", "x": 1}, {"type": "c"}])
    payload = b'event: a.b\ndata: {"type":"a.b","x":1,"sequence_number":0}\n\n'
    assert out[0] == b"%x\r\n%s\r\n" % (len(payload), payload)
    assert b'"sequence_number":1' in out[1]


def events_of(sent: bytes) -> list[dict[str, Any]]:
    """The ``data`` of each ``event:``/``data:`` chunk (the terminator left out)."""
    return [orjson.loads(c.split(b"data: ", 1)[1].split(b"\n\n")[0])
            for c in http_chunks(sent)[:-1]]


def test_the_route_with_script_answers_the_question() -> None:
    # (without --script the route is `responsesload`'s timed stream: test_responsesload.py)
    sent = Wire(cfg=SimConfig(script=True)).post(
        "/v1/responses", {"input": suite.TEXT_PROMPT, "stream": True})
    assert events_of(sent)[-1]["response"]["output"][0]["content"][0]["text"] == "Paris"


@pytest.mark.parametrize(("payload", "status", "param"), [
    ({"input": "hi"}, 400, "stream"),
    ({"input": [], "stream": True}, 400, "input"),
    ({"input": "hi", "stream": True, "model": "other"}, 404, "model"),
])
def test_the_route_refuses(payload: dict[str, Any], status: int, param: str) -> None:
    resp = Wire().ask("/v1/responses", payload)
    assert resp.status == status and orjson.loads(resp.body)["error"]["param"] == param
