"""`sim/responsesload.py`: a Responses request streamed as the chat request it stands for —
its events (in the order OpenAI's reference and the checks' own reader expect), each delta
at its token's deadline on a fake clock, the usage in the Responses names, the cut by
`max_output_tokens`, and `previous_response_id` continuing a stored response."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from simwire import Wire, http_chunks

from anvil_metrics.checks.responses import summarize
from anvil_metrics.sim.chat import full_text
from anvil_metrics.sim.chatrequest import RequestError
from anvil_metrics.sim.config import SimConfig
from anvil_metrics.sim.responsesload import ResponseStore, chat_body
from anvil_metrics.sim.tokenizer import count_chat_tokens

CFG = SimConfig(reasoning_tokens=2, content_tokens=3, prefill_ms=100.0, interval_ms=10.0,
                stamp_send=True)


def post(wire: Wire, payload: dict[str, Any]) -> tuple[bytes, list[tuple[int, str, dict]]]:
    """Send one request: the response's head, and (write time − anvil-t0-ns, SSE event
    name, data) of each event in order."""
    before = len(wire.transport.writes)
    wire.post("/v1/responses", payload)
    writes = wire.transport.writes[before:]
    sent = b"".join(d for _, d in writes)
    head = sent[:sent.index(b"\r\n\r\n")]
    if not head.startswith(b"HTTP/1.1 200"):
        return head, []
    t0 = int(head.split(b"anvil-t0-ns: ")[1].split(b"\r\n")[0])
    out, pos = [], 0
    for t, data in writes:
        part = sent[pos:pos + len(data)]
        pos += len(data)
        body = part.split(b"\r\n\r\n", 1)[1] if part.startswith(b"HTTP/") else part
        for chunk in http_chunks(b"\r\n\r\n" + body):  # this write's chunks
            if chunk.startswith(b"0\r\n"):
                continue
            name, data_line = chunk.split(b"\r\n", 1)[1].split(b"\n", 1)
            out.append((t - t0, name.removeprefix(b"event: ").decode(),
                        orjson.loads(data_line.removeprefix(b"data: ").split(b"\n\n")[0])))
    return head, out


def test_the_stream_is_the_protocol_on_the_chat_clock() -> None:
    _, events = post(Wire(cfg=CFG), {"input": "hello there", "stream": True})
    summary = summarize((name, orjson.dumps(data).decode()) for _, name, data in events)
    assert summary.problems == [] and summary.completed is not None
    assert summary.completed_text == full_text("c", 3) and summary.text == full_text("c", 3)
    assert [e["sequence_number"] for _, _, e in events] == list(range(len(events)))
    deltas = [(t, e["type"]) for t, _, e in events if e["type"].endswith(".delta")]
    # token i at prefill + i * interval, as a chat stream's (the last one with the ends)
    assert deltas == [(100_000_000 + i * 10_000_000, kind) for i, kind in enumerate(
        ["response.reasoning_text.delta"] * 2 + ["response.output_text.delta"] * 3)]
    usage = summary.completed["usage"]
    prompt = count_chat_tokens([{"role": "user", "content": "hello there"}], CFG.tokenizer)
    assert usage == {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": 0},
                     "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 2},
                     "total_tokens": prompt + 5}
    assert summary.completed["status"] == "completed"
    assert [i["type"] for i in summary.completed["output"]] == ["reasoning", "message"]


def test_max_output_tokens_cuts_it_incomplete() -> None:
    _, events = post(Wire(cfg=CFG), {"input": "hi", "stream": True, "max_output_tokens": 3})
    last = events[-1][2]["response"]
    assert (last["status"], last["incomplete_details"], last["usage"]["output_tokens"]) == (
        "incomplete", {"reason": "max_output_tokens"}, 3)


def test_previous_response_id_continues_the_stored_conversation() -> None:
    wire = Wire(cfg=CFG)
    _, first = post(wire, {"input": "one two", "stream": True})
    rid = first[-1][2]["response"]["id"]
    assert first[0][2]["response"]["id"] == rid  # response.created names it
    _, second = post(wire, {"input": [{"role": "user", "content": "three"}],
                            "previous_response_id": rid, "stream": True})
    history = [{"role": "user", "content": "one two"},
               {"role": "assistant", "content": full_text("c", 3)},
               {"role": "user", "content": "three"}]
    assert second[-1][2]["response"]["usage"]["input_tokens"] == count_chat_tokens(
        history, CFG.tokenizer)
    # as vLLM: the stored system message does not carry over (the request's instructions
    # come first), nor does a reasoning-only answer (it has no message item)
    wire = Wire(cfg=SimConfig(reasoning_tokens=2, content_tokens=3, stamp_send=True))
    _, one = post(wire, {"input": [{"role": "system", "content": "old"},
                                   {"role": "user", "content": "q"}],
                         "stream": True, "max_output_tokens": 2})  # reasoning only
    _, two = post(wire, {"input": "r", "instructions": "new", "stream": True,
                         "previous_response_id": one[-1][2]["response"]["id"]})
    assert two[-1][2]["response"]["usage"]["input_tokens"] == count_chat_tokens(
        [{"role": "system", "content": "new"}, {"role": "user", "content": "q"},
         {"role": "user", "content": "r"}], CFG.tokenizer)
    head, none = post(wire, {"input": "x", "previous_response_id": "resp_nope", "stream": True})
    assert head.startswith(b"HTTP/1.1 404") and none == []


def test_a_body_becomes_its_chat_request() -> None:
    body = chat_body({"model": "m", "input": [{"role": "user", "content": "q"}],
                      "instructions": "be brief", "max_output_tokens": 7, "ignore_eos": True,
                      "reasoning": {"effort": "low"}, "stream": True}, ResponseStore())
    assert body == {"model": "m", "stream": True, "max_tokens": 7, "ignore_eos": True,
                    "reasoning_effort": "low",
                    "messages": [{"role": "system", "content": "be brief"},
                                 {"role": "user", "content": "q"}]}


@pytest.mark.parametrize(("data", "status", "param"), [
    ({"input": "hi"}, 400, "stream"),
    ({"input": [{"type": "function_call_output", "output": "x"}], "stream": True}, 400,
     "input"),
    ({"input": "hi", "previous_response_id": 3, "stream": True}, 404,
     "previous_response_id"),
])
def test_what_is_refused(data: dict[str, Any], status: int, param: str) -> None:
    with pytest.raises(RequestError) as e:
        chat_body(data, ResponseStore())
    assert e.value.status == status and e.value.body["error"]["param"] == param


def test_the_store_keeps_the_newest() -> None:
    store = ResponseStore(limit=2)
    for k in range(3):
        store.put(f"r{k}", [{"role": "user", "content": str(k)}])
    assert store.get("r0") is None and store.get("r2") == [{"role": "user", "content": "2"}]
