"""`sim/messages.py`: a Messages request streamed as the chat request it stands for — its
events in the order Anthropic's reference gives, each delta at its token's deadline on a
fake clock, the usage in Anthropic's names (the prefix cache's hit apart from
`input_tokens`), the cut by `max_tokens`, the body's conversion and its refusals; and what
the client's own observer reads from those bytes."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from simwire import Wire

from anvil_metrics.sim.chat import full_text
from anvil_metrics.sim.chatrequest import RequestError
from anvil_metrics.sim.config import SimConfig
from anvil_metrics.sim.messages import chat_body
from anvil_metrics.sim.tokenizer import count_chat_tokens
from anvil_metrics.wire.client import read_events
from anvil_metrics.wire.eventsobs import MessagesObserver
from anvil_metrics.wire.observe import prompt_tokens_of

CFG = SimConfig(reasoning_tokens=2, content_tokens=3, prefill_ms=100.0, interval_ms=10.0,
                stamp_send=True)
ASKED = {"model": "sim-model", "max_tokens": 16, "stream": True, "system": "be brief",
         "messages": [{"role": "user", "content": "hello there"}]}
CHAT = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}]


def events(wire: Wire, payload: dict[str, Any]) -> list[tuple[int, dict]]:
    """(write time − the request's arrival, data) of each event of one request."""
    before = len(wire.transport.writes)
    raw = wire.post("/v1/messages", payload)
    assert raw.startswith(b"HTTP/1.1 200")
    t0 = int(raw.split(b"anvil-t0-ns: ")[1].split(b"\r\n")[0])
    out = []
    for t, data in wire.transport.writes[before:]:  # each write's events, at its time
        body = data.split(b"\r\n\r\n", 1)[1] if data.startswith(b"HTTP/") else data
        for chunk in _unchunked(body).split(b"\n\n"):
            if chunk:
                name, line = chunk.split(b"\n")
                event = orjson.loads(line.removeprefix(b"data: "))
                assert name == b"event: " + event["type"].encode()
                out.append((t - t0, event))
    return out


def test_the_stream_is_the_protocol_on_the_chat_clock() -> None:
    got = events(Wire(cfg=CFG), ASKED)
    assert [e["type"] for _, e in got] == [
        "message_start", "content_block_start", "content_block_delta", "content_block_delta",
        "content_block_stop", "content_block_start", "content_block_delta",
        "content_block_delta", "content_block_delta", "content_block_stop", "message_delta",
        "message_stop"]
    deltas = [(t, e["index"], e["delta"]["type"]) for t, e in got
              if e["type"] == "content_block_delta"]
    # token i at prefill + i * interval, as a chat stream's (the last one with the ends)
    assert deltas == [(100_000_000 + i * 10_000_000, 0 if i < 2 else 1, kind) for i, kind in
                      enumerate(["thinking_delta"] * 2 + ["text_delta"] * 3)]
    assert "".join(e["delta"].get("text", "") for _, e in got
                   if e["type"] == "content_block_delta") == full_text("c", 3)
    assert [e["content_block"]["type"] for _, e in got if e["type"] == "content_block_start"] \
        == ["thinking", "text"]
    prompt = count_chat_tokens(CHAT, CFG.tokenizer)
    assert got[0][1]["message"]["usage"] == {"input_tokens": prompt,
                                             "cache_read_input_tokens": 0,
                                             "cache_creation_input_tokens": 0,
                                             "output_tokens": 0}
    assert got[-2][1]["delta"]["stop_reason"] == "end_turn"
    assert got[-2][1]["usage"] == {"output_tokens": 5}
    assert all(type(e["anvil_sent_ns"]) is int for _, e in got)


def test_the_clients_observer_reads_what_was_sent() -> None:
    wire = Wire(cfg=CFG)
    raw = wire.post("/v1/messages", ASKED)
    body = raw.split(b"\r\n\r\n", 1)[1]
    obs = MessagesObserver(0, 0, keep_text=True)
    read_events([(_unchunked(body), 1)], obs)
    assert obs.failure is None and obs.finish_reason == "stop"
    assert (obs.reasoning_chunks, obs.content_chunks) == (2, 3)
    assert "".join(obs.text or []) == full_text("c", 3)
    assert prompt_tokens_of(obs.usage) == count_chat_tokens(CHAT, CFG.tokenizer)


def _unchunked(body: bytes) -> bytes:
    """The bytes of HTTP chunks, without their framing (to the last one, or the end)."""
    out, pos = b"", 0
    while pos < len(body):
        line_end = body.index(b"\r\n", pos)
        size = int(body[pos:line_end], 16)
        if size == 0:
            break
        out += body[line_end + 2:line_end + 2 + size]
        pos = line_end + 4 + size
    return out


def test_max_tokens_cuts_it_and_the_cache_hit_is_apart_from_input_tokens() -> None:
    wire = Wire(cfg=SimConfig(reasoning_tokens=2, content_tokens=3, prefix_cache=True,
                              stamp_send=True,
                              prefix_cache_block=4))
    long = {**ASKED, "max_tokens": 3, "messages": [
        {"role": "user", "content": "one two three four five six seven eight nine ten"}]}
    first = events(wire, long)
    second = events(wire, long)
    assert first[-2][1]["delta"]["stop_reason"] == "max_tokens"
    assert first[-2][1]["usage"] == {"output_tokens": 3}
    cold, warm = first[0][1]["message"]["usage"], second[0][1]["message"]["usage"]
    assert cold["cache_read_input_tokens"] == 0 and warm["cache_read_input_tokens"] > 0
    assert warm["input_tokens"] + warm["cache_read_input_tokens"] == cold["input_tokens"]


def test_a_body_becomes_its_chat_request() -> None:
    body = chat_body({"model": "m", "max_tokens": 7, "stream": True, "ignore_eos": True,
                      "system": [{"type": "text", "text": "be "}],
                      "messages": [{"role": "system", "content": "brief"},
                                   {"role": "user", "content": [{"type": "text", "text": "q"}]},
                                   {"role": "assistant", "content": "a"}],
                      "thinking": {"type": "enabled", "budget_tokens": 6},
                      "output_config": {"effort": "low"}})
    assert body == {"model": "m", "stream": True, "max_tokens": 7, "ignore_eos": True,
                    "chat_template_kwargs": {"enable_thinking": True},
                    "reasoning_effort": "low",
                    "messages": [{"role": "system", "content": "be brief"},
                                 {"role": "user", "content": "q"},
                                 {"role": "assistant", "content": "a"}]}
    off = chat_body({**ASKED, "thinking": {"type": "disabled"}})
    assert off["chat_template_kwargs"] == {"enable_thinking": False}


@pytest.mark.parametrize(("data", "param"), [
    ({**ASKED, "stream": False}, "stream"),
    ({k: v for k, v in ASKED.items() if k != "max_tokens"}, "max_tokens"),
    ({**ASKED, "max_tokens": 0}, "max_tokens"),
    ({**ASKED, "messages": []}, "messages"),
    ({**ASKED, "messages": [{"role": "tool", "content": "x"}]}, "messages"),
])
def test_what_is_refused(data: dict[str, Any], param: str) -> None:
    with pytest.raises(RequestError) as err:
        chat_body(data)
    assert err.value.status == 400 and err.value.body["error"]["param"] == param
    wire = Wire(cfg=CFG)
    raw = wire.post("/v1/messages", data)
    assert raw.startswith(b"HTTP/1.1 400") and orjson.loads(
        raw.split(b"\r\n\r\n", 1)[1])["error"]["param"] == param
