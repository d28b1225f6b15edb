"""Chat completions (`sim/chat.py`) in process (`simwire`): what the simulated model writes and
the exact moment it writes it. With a fake clock each write's time is its deadline, so token i
must be stamped ``t0 + prefill + i * interval`` exactly, t0 being the ``anvil-t0-ns`` the server
reports; the text is the pieces in order, and the usage the plan's (the prompt hand-counted:
one user "hi" is 3 + 4 + 1 + 1 = 9 tokens under words4)."""

from __future__ import annotations

from typing import Any

import orjson
from simwire import Wire

from anvil_metrics.sim.chat import (
    CONTENT_PIECES,
    DONE_EVENT,
    REASONING_PIECES,
    ChunkEncoder,
    full_text,
    piece,
    raw_event,
)
from anvil_metrics.sim.config import SimConfig
from anvil_metrics.sim.rawclient import Response

MS = 1_000_000
CFG = SimConfig(prefill_ms=10.0, interval_ms=2.0, reasoning_tokens=2, content_tokens=3,
                stamp_send=True)
HI = [{"role": "user", "content": "hi"}]
STREAM = {"messages": HI, "stream": True, "stream_options": {"include_usage": True}}


def chat(cfg: SimConfig, payload: dict[str, Any]) -> Response:
    return Wire(cfg=cfg).ask("/v1/chat/completions", payload)


def deltas(resp: Response) -> list[dict[str, Any]]:
    return [e.chunk["choices"][0]["delta"] for e in resp.events
            if e.chunk is not None and e.chunk["choices"]]


def test_pieces_cycle_and_join() -> None:
    assert piece("r", 0) == "Let" and piece("c", 1) == " is"
    assert piece("c", len(CONTENT_PIECES)) == piece("c", 0)
    assert piece("r", len(REASONING_PIECES) + 2) == " think"
    assert full_text("r", 3) == "Let me think" and full_text("c", 0) == ""


def test_events_are_one_http_chunk_each() -> None:
    assert raw_event(b"[DONE]") == DONE_EVENT == b"e\r\ndata: [DONE]\n\n\r\n"
    event = ChunkEncoder("chatcmpl-x", 7, 'm"1', stamp=False).event(b'"choices":[]}')
    size, _, rest = event.partition(b"\r\n")
    payload = rest.removesuffix(b"\r\n")
    assert int(size, 16) == len(payload) and payload.startswith(b"data: ")
    assert orjson.loads(payload[6:-2]) == {"id": "chatcmpl-x", "object": "chat.completion.chunk",
                                           "created": 7, "model": 'm"1', "choices": []}


def test_a_stream_writes_each_token_at_its_deadline() -> None:
    resp = chat(CFG, STREAM)
    assert resp.status == 200 and resp.complete
    t0 = int(resp.headers["anvil-t0-ns"])
    assert deltas(resp) == [{"role": "assistant", "content": ""},
                            {"reasoning_content": "Let"}, {"reasoning_content": " me"},
                            {"content": "Here"}, {"content": " is"}, {"content": " the"}]
    tokens = [e for e in resp.events if e.chunk and e.chunk["choices"]][1:]
    assert [e.arrival_ns - t0 for e in tokens] == [10 * MS + i * 2 * MS for i in range(5)]
    assert [e.chunk["anvil_sent_ns"] > 0 for e in tokens] == [True] * 5  # type: ignore[index]
    finishes = [e.chunk["choices"][0]["finish_reason"] for e in tokens]  # type: ignore[index]
    assert finishes == [None] * 4 + ["stop"]
    usage = resp.events[-2].chunk
    assert usage is not None and usage["choices"] == []
    assert usage["usage"] == {"prompt_tokens": 9, "completion_tokens": 5, "total_tokens": 14,
                              "completion_tokens_details": {"reasoning_tokens": 2}}
    assert resp.events[-1].data == b"[DONE]"


def test_stream_shapes_of_other_servers() -> None:
    cfg = SimConfig(prefill_ms=0.0, interval_ms=1.0, reasoning_tokens=1, content_tokens=1,
                    reasoning_field="reasoning", usage_in_finish_chunk=True, no_done=True,
                    role_chunk="with-first-token")
    resp = chat(cfg, STREAM)
    assert deltas(resp) == [{"role": "assistant", "content": ""}, {"reasoning": "Let"},
                            {"content": "Here"}]
    assert resp.events[0].arrival_ns == resp.events[1].arrival_ns  # the role with the token
    last = resp.events[-1].chunk
    assert last is not None and last["usage"]["completion_tokens"] == 2  # no [DONE] after it
    assert "anvil-t0-ns" not in resp.headers


def test_a_whole_answer_comes_when_its_last_token_would() -> None:
    resp = chat(CFG, {"messages": HI, "max_tokens": 4})
    assert resp.status == 200
    t0 = int(resp.headers["anvil-t0-ns"])
    assert resp.headers_arrival_ns - t0 == 10 * MS + 3 * 2 * MS
    body = orjson.loads(resp.body)
    assert body["object"] == "chat.completion" and body["model"] == "sim-model"
    choice = body["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": "Here is",
                                 "reasoning_content": "Let me"}
    assert choice["finish_reason"] == "length"  # 5 wanted, 4 allowed
    assert body["usage"]["total_tokens"] == 9 + 4


def test_refusals_are_answered_at_once() -> None:
    wire = Wire(cfg=CFG)
    resp = wire.ask("/v1/chat/completions", {"messages": []})
    assert resp.status == 400 and wire.sched.heap == []
    assert orjson.loads(resp.body)["error"]["param"] == "messages"


def test_a_client_gone_gets_no_more_tokens() -> None:
    wire = Wire(cfg=CFG)
    wire.send(b"POST /v1/chat/completions HTTP/1.1\r\ncontent-length: %d\r\n\r\n%s"
              % (len(orjson.dumps(STREAM)), orjson.dumps(STREAM)))
    written = len(wire.transport.writes)  # the head and the role chunk
    wire.conn.connection_lost(None)
    wire.sched.run()
    assert written == 1 and len(wire.transport.writes) == written


def test_a_cached_prefix_shortens_the_prefill() -> None:
    cfg = SimConfig(prefill_ms=0.0, prefill_ms_per_token=1.0, interval_ms=1.0,
                    reasoning_tokens=0, content_tokens=1, prefix_cache=True,
                    prefix_cache_block=4, stamp_send=True)
    payload = {"messages": [{"role": "user", "content": "a b c d e f g h i j k l m n"}]}
    first = Wire(cfg=cfg)
    one = first.ask("/v1/chat/completions", payload)
    first.transport.writes.clear()
    two = first.ask("/v1/chat/completions", payload)  # same connection, same server

    def prefill_ms(resp: Response) -> float:
        return (resp.headers_arrival_ns - int(resp.headers["anvil-t0-ns"])) / MS

    prompt = orjson.loads(one.body)["usage"]["prompt_tokens"]
    cached = orjson.loads(two.body)["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert orjson.loads(one.body)["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert prompt == 22 and cached == 20  # five whole blocks of 4; the last 2 are computed
    assert prefill_ms(one) == prompt and prefill_ms(two) == prompt - cached
