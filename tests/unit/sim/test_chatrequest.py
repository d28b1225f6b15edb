"""A chat request checked and its answer planned (`sim/chatrequest.py`), without a server.

The plans are worked out by hand from the rule in `plan_output`'s docstring (reasoning first,
then content, capped by max_tokens or the context left); the refusals are vLLM's, so their
status, param and code are what a client sees.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from anvil_metrics.sim import chatrequest
from anvil_metrics.sim.chatrequest import ChatRequest, OutputPlan, RequestError, parse_chat_request
from anvil_metrics.sim.config import SimConfig
from anvil_metrics.sim.tokenizer import count_chat_tokens

CFG = SimConfig(reasoning_tokens=20, content_tokens=50, max_context=1000,
                model="m", aliases=("alias",))
USER = [{"role": "user", "content": "How far is the moon?"}]


def request(prompt: int = 10, max_tokens: int | None = None, *, ignore_eos: bool = False,
            min_tokens: int = 0, thinking: bool = True) -> ChatRequest:
    return ChatRequest(prompt, max_tokens, True, False, ignore_eos, min_tokens, thinking)


@pytest.mark.parametrize("req,plan", [
    (request(), OutputPlan(20, 50, "stop")),
    (request(max_tokens=3), OutputPlan(3, 0, "length")),
    (request(max_tokens=30), OutputPlan(20, 10, "length")),
    (request(max_tokens=70), OutputPlan(20, 50, "stop")),
    (request(max_tokens=100, ignore_eos=True), OutputPlan(20, 80, "length")),
    (request(min_tokens=90), OutputPlan(20, 70, "stop")),
    (request(thinking=False), OutputPlan(0, 50, "stop")),
    (request(prompt=992), OutputPlan(8, 0, "length")),  # the context left: 1000 - 992
])
def test_plan_output(req: ChatRequest, plan: OutputPlan) -> None:
    assert chatrequest.plan_output(req, CFG) == plan


def test_usage_counts_reasoning_inside_completion() -> None:
    plan = OutputPlan(2, 3, "stop")
    assert chatrequest.usage_of(request(prompt=10), plan) == {
        "prompt_tokens": 10, "total_tokens": 15, "completion_tokens": 5,
        "completion_tokens_details": {"reasoning_tokens": 2}}
    cached = ChatRequest(10, None, True, False, False, 0, True, cached_tokens=4)
    assert chatrequest.usage_of(cached, plan)["prompt_tokens_details"] == {"cached_tokens": 4}
    assert cached.computed_tokens == 6 and request(prompt=10).computed_tokens == 10


def test_a_body_becomes_a_request() -> None:
    data: dict[str, Any] = {
        "model": "alias", "messages": USER, "stream": True, "max_tokens": 9,
        "max_completion_tokens": 7, "min_tokens": 2, "ignore_eos": True,
        "stream_options": {"include_usage": True},
        "chat_template_kwargs": {"enable_thinking": False}}
    got = parse_chat_request(data, CFG)
    assert got == ChatRequest(count_chat_tokens(USER, CFG.tokenizer), 7, True, True, True, 2,
                              False)
    plain = parse_chat_request({"messages": USER, "stream": None}, CFG)
    assert (plain.max_tokens, plain.stream, plain.include_usage, plain.thinking) == (
        None, False, False, True)


def refusal(data: dict[str, Any]) -> RequestError:
    with pytest.raises(RequestError) as exc:
        parse_chat_request(data, CFG)
    return exc.value


@pytest.mark.parametrize("data,status,param,code", [
    ({"messages": []}, 400, "messages", 400),
    ({"messages": "hi"}, 400, "messages", 400),
    ({"messages": USER, "model": "other"}, 404, "model", "model_not_found"),
    ({"messages": USER, "max_tokens": 0}, 400, "max_tokens", 400),
    ({"messages": USER, "max_tokens": True}, 400, "max_tokens", 400),
    ({"messages": USER, "max_tokens": 3, "min_tokens": 4}, 400, "min_tokens", 400),
    ({"messages": USER, "stream": "yes"}, 400, "stream", 400),
    ({"messages": USER, "stream_options": []}, 400, "stream_options", 400),
    ({"messages": USER, "max_tokens": 1000}, 400, "messages", "context_length_exceeded"),
])
def test_refusals_name_the_field(data: dict[str, Any], status: int, param: str,
                                 code: str | int) -> None:
    err = refusal(data).body["error"]
    assert (refusal(data).status, err["param"], err["code"]) == (status, param, code)
    assert err["type"] == "invalid_request_error"


def test_context_messages_are_vllms() -> None:
    prompt = count_chat_tokens(USER, CFG.tokenizer)
    asked = refusal({"messages": USER, "max_tokens": 1001 - prompt})
    assert str(asked) == (
        f"This model's maximum context length is 1000 tokens. However, you requested 1001 "
        f"tokens ({prompt} in the messages, {1001 - prompt} in the completion). Please reduce "
        "the length of the messages or completion.")
    assert parse_chat_request({"messages": USER, "max_tokens": 1000 - prompt}, CFG)
    tight = SimConfig(max_context=prompt)
    with pytest.raises(RequestError, match=f"your request has {prompt} input tokens"):
        parse_chat_request({"messages": USER}, tight)


def test_the_body_must_be_a_json_object() -> None:
    assert chatrequest.load_json_object(orjson.dumps({"a": 1})) == {"a": 1}
    for body, words in ((b"{nope", "malformed JSON body"), (b"[1]", "must be a JSON object")):
        with pytest.raises(RequestError, match=words) as exc:
            chatrequest.load_json_object(body)
        assert exc.value.status == 400
