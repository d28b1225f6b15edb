"""The simulator's tokenize endpoints (`sim/tokenapi.py`) called as the server calls them
(`answer`): each family's request and response shapes, its error envelope, and counts that
are the tokenizer's (hand-counted: "hello" is 2 tokens under words4, the chat of one user
"hello" 10)."""

from __future__ import annotations

from typing import Any

import orjson

from anvil_metrics.sim.config import SimConfig
from anvil_metrics.sim.tokenapi import APIS, answer
from anvil_metrics.sim.tokenizer import prompt_token_ids, render_chat, text_token_ids

CFG = SimConfig(max_context=4096)
HELLO = [{"role": "user", "content": "hello"}]


def call(api: str, path: str, body: Any) -> tuple[int, Any]:
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    status, out = answer(APIS[api], path, raw, CFG)
    return status, orjson.loads(out)


def test_the_families_routes() -> None:
    assert set(APIS["vllm"].routes) == {"/tokenize"}
    assert set(APIS["llamacpp"].routes) == {"/apply-template", "/tokenize"}
    assert set(APIS["sglang"].routes) == {"/v1/tokenize", "/tokenize"}
    assert APIS["none"].routes == {}


def test_vllm_counts_chats_with_the_template_and_prompts_without() -> None:
    status, out = call("vllm", "/tokenize", {"messages": HELLO})
    assert status == 200
    assert out == {"count": 10, "max_model_len": 4096,
                   "tokens": prompt_token_ids(HELLO).tolist()}
    _, bare = call("vllm", "/tokenize", {"messages": HELLO, "add_generation_prompt": False})
    assert bare["count"] == 7
    _, text = call("vllm", "/tokenize", {"prompt": "hello"})
    assert text["count"] == 2 and text["tokens"] == text_token_ids("hello")


def test_vllm_refusals_are_openai_errors() -> None:
    status, out = call("vllm", "/tokenize", {"text": "hello"})
    assert status == 400 and out["error"]["code"] == 400
    assert out["error"]["message"] == "send either 'messages' (a list) or 'prompt' (a string)"
    _, flag = call("vllm", "/tokenize", {"messages": HELLO, "add_generation_prompt": "yes"})
    assert flag["error"]["param"] == "add_generation_prompt"
    _, bad = call("vllm", "/tokenize", {"messages": [{"content": "x"}]})
    assert bad["error"]["param"] == "messages"
    assert call("vllm", "/tokenize", b"[1]")[0] == 400
    assert call("vllm", "/tokenize", b"{nope")[0] == 400


def test_llamacpp_template_then_tokens_give_the_chat_ids() -> None:
    _, rendered = call("llamacpp", "/apply-template", {"messages": HELLO})
    assert rendered == {"prompt": render_chat(HELLO)}
    _, toks = call("llamacpp", "/tokenize", {"content": rendered["prompt"], "add_special": True})
    assert toks == {"tokens": prompt_token_ids(HELLO).tolist()}
    assert call("llamacpp", "/tokenize", {"prompt": "hello"}) == (200, {"tokens": []})


def test_llamacpp_refusals_are_llamacpps() -> None:
    status, out = call("llamacpp", "/tokenize", {"content": [1, 2]})
    assert status == 400
    assert out == {"error": {"code": 400, "type": "invalid_request_error", "message":
                             "content must be a string (token-id arrays are not simulated)"}}
    assert call("llamacpp", "/tokenize", {"content": "x", "with_pieces": True})[0] == 400
    assert call("llamacpp", "/apply-template", {"prompt": "x"})[0] == 400
    assert call("llamacpp", "/apply-template", {"messages": [3]})[0] == 400


def test_sglang_counts_text_alone_one_or_many() -> None:
    _, one = call("sglang", "/v1/tokenize", {"prompt": "hello, world!"})
    assert one["count"] == 6 and one["max_model_len"] == 4096
    _, many = call("sglang", "/tokenize", {"prompt": ["hello", "a b"]})
    assert many["count"] == [2, 2] and many["tokens"][0] == text_token_ids("hello")


def test_sglang_refusals_are_sglangs() -> None:
    status, out = call("sglang", "/v1/tokenize", {"messages": HELLO})
    assert status == 400
    assert out == {"object": "error", "type": "Bad Request", "param": None, "code": 400,
                   "message": "1 validation error for TokenizeRequest\nprompt\n  Field required"}
    _, wrong = call("sglang", "/v1/tokenize", {"prompt": 3})
    assert wrong["param"] == "prompt"
    _, flag = call("sglang", "/v1/tokenize", {"prompt": "x", "add_special_tokens": 1})
    assert flag["param"] == "add_special_tokens"
