"""The scripted mode's dispatcher and writer (`sim/script.py`): every family's faults known
and a bad one refused in one line, the first script that knows a question answers it, and
an answer written as chunks a client reassembles into exactly the reply (pieces of 12
characters, tool arguments of 7: worked here for a 26-character text)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from simwire import Wire

from anvil_metrics.checks import reasoning
from anvil_metrics.sim import script, script_json
from anvil_metrics.sim.httpproto import HttpConnection, HttpRequest
from anvil_metrics.sim.script import (
    MODULES,
    ScriptedReply,
    chat_chunks,
    check_faults,
    content_text,
    finish_reason,
    known_faults,
    last_user_text,
    message_of,
)

TEXT = "abcdefghijklmnopqrstuvwxyz"
REPLY = ScriptedReply(content=TEXT, reasoning="think", tool_calls=(("f", '{"a": 12345}'),))


def test_every_family_is_loaded_and_its_faults_known() -> None:
    assert [m.__name__.rpartition(".")[2] for m in script.modules()] == list(MODULES)
    known = known_faults()
    assert known["json"] == script_json.FAULTS["json"]
    assert "responses_subset" in known and "coding" in known
    assert check_faults([]) == () and check_faults(["json:fenced"]) == ("json:fenced",)
    for bad in ("json:nope", "nope:fenced", "json"):
        with pytest.raises(ValueError, match=f"--script-fault '{bad}' is not known; allowed: "):
            check_faults([bad])


def test_the_first_script_that_knows_answers() -> None:
    case = reasoning.CASES[0]
    reply = script.answer({"messages": [{"role": "user", "content": case.prompt}]}, frozenset())
    assert reply is not None and reply.content == case.answer
    assert script.answer({"messages": [{"role": "user", "content": "hi"}]}, frozenset()) is None


def test_the_question_is_the_last_user_text() -> None:
    data = {"messages": [{"role": "user", "content": "old"}, {"role": "assistant",
            "content": "x"}, {"role": "user", "content": [{"type": "text", "text": "ne"},
                                                          {"type": "image_url"},
                                                          {"type": "text", "text": "w"}]}]}
    assert last_user_text(data) == "new"
    assert last_user_text({"messages": [{"role": "system", "content": "s"}]}) == ""
    assert last_user_text({}) == "" and content_text(None) == "" and content_text("s") == "s"


def test_finish_and_message() -> None:
    assert finish_reason(ScriptedReply("x")) == "stop"
    assert finish_reason(REPLY) == "tool_calls"
    assert finish_reason(ScriptedReply("x", finish_reason="length")) == "length"
    message = message_of(REPLY, "reasoning")
    assert message["content"] == TEXT and message["reasoning"] == "think"
    assert message["tool_calls"][0]["function"] == {"name": "f", "arguments": '{"a": 12345}'}
    assert message_of(ScriptedReply(), "reasoning_content") == {"role": "assistant",
                                                                "content": None}


def payloads(events: list[bytes]) -> list[Any]:
    out = []
    for e in events:
        data = e.split(b"data: ", 1)[1].rsplit(b"\n\n", 1)[0]
        out.append(None if data == b"[DONE]" else orjson.loads(data))
    return out


def test_chunks_reassemble_into_the_reply() -> None:
    chunks = payloads(chat_chunks(REPLY, "m", "reasoning_content", {"total_tokens": 3}))
    assert chunks[-1] is None and chunks[-2]["usage"] == {"total_tokens": 3}
    deltas = [c["choices"][0]["delta"] for c in chunks[:-2]]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert [d["content"] for d in deltas if "content" in d][1:] == [TEXT[:12], TEXT[12:24],
                                                                    TEXT[24:]]
    assert "".join(d.get("reasoning_content", "") for d in deltas) == "think"
    calls = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    assert calls[0]["function"] == {"name": "f", "arguments": ""}
    assert [c["function"]["arguments"] for c in calls[1:]] == ['{"a": 1', '2345}']
    assert chunks[-3]["choices"][0]["finish_reason"] == "tool_calls"
    assert len({c["id"] for c in chunks[:-1]}) == 1 and {c["model"] for c in chunks[:-1]} == {
        "m"}
    no_usage = payloads(chat_chunks(ScriptedReply("x"), "m", "r", None))
    assert len(no_usage) == 4  # role, content, finish, [DONE]


@pytest.mark.parametrize("stream", [False, True])
def test_respond_streamed_or_whole(stream: bool) -> None:
    data = {"stream": stream, "stream_options": {"include_usage": True}}
    reply = ScriptedReply(content="abcdefghij")  # 10 characters: 10 // 4 = 2 tokens

    def handler(request: HttpRequest, conn: HttpConnection, t0_ns: int) -> None:
        script.respond(conn, data, reply, "m", "reasoning_content", 5)

    resp = Wire(handler).ask("/", {})
    usage = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
    if stream:
        assert resp.complete and resp.events[-2].chunk["usage"] == usage  # type: ignore[index]
        assert resp.events[-1].data == b"[DONE]"
    else:
        whole = orjson.loads(resp.body)
        assert whole["usage"] == usage and whole["choices"][0]["message"]["content"] == (
            "abcdefghij")
