"""`sim/completions`: a completions body checked as vLLM checks it, its prompt counted raw,
and its chunks shaped as vLLM's `text_completion` stream."""

from __future__ import annotations

import orjson
import pytest

from anvil_metrics.sim.chatrequest import RequestError
from anvil_metrics.sim.completions import parse_completion_request, text_bodies
from anvil_metrics.sim.config import SimConfig
from anvil_metrics.sim.tokenizer import count_text_tokens


def test_a_prompt_is_counted_raw() -> None:
    cfg = SimConfig()
    req = parse_completion_request({"model": cfg.model, "prompt": "one two three",
                                    "max_tokens": 4, "stream": True,
                                    "stream_options": {"include_usage": True}}, cfg)
    assert req.prompt_tokens == count_text_tokens("one two three", cfg.tokenizer)
    assert (req.max_tokens, req.stream, req.include_usage, req.thinking) == (4, True, True,
                                                                              False)


@pytest.mark.parametrize("body,param", [
    ({"prompt": ""}, "prompt"), ({"messages": [{"role": "user", "content": "x"}]}, "prompt"),
    ({"prompt": "x", "max_tokens": 0}, "max_tokens"),
    ({"prompt": "x", "model": "another"}, "model"),
])
def test_a_bad_body_is_refused_naming_its_field(body: dict, param: str) -> None:
    with pytest.raises(RequestError) as e:
        parse_completion_request(body, SimConfig())
    assert orjson.loads(orjson.dumps(e.value.body))["error"]["param"] == param


def test_each_chunk_is_a_text_choice() -> None:
    tail = orjson.loads(b"{" + text_bodies()[0])
    assert tail["choices"][0].keys() == {"index", "text", "logprobs", "finish_reason"}
    assert tail["choices"][0]["text"] and tail["choices"][0]["finish_reason"] is None
