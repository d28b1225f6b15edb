"""body: the scenario's switches in the request body, and each request's bytes — built by
concatenation around a size's one serialised template — equal to the JSON of its own
messages.

Why: the builder never re-serialises the prompt; a marker split in the wrong place, or a
head not escaped as JSON, would send one request's prompt with another's identity, or a
body the server cannot parse.
"""

from __future__ import annotations

import orjson
import pytest

from anvil_metrics.load.body import BodyBuilder, body_fields
from anvil_metrics.load.scenario import Scenario
from anvil_metrics.prep.prompts import Calibration, PromptFactory, SharedPrefix

CAL = Calibration("probe", 20.0, 1.7)


def test_the_default_body_asks_for_a_stream_with_usage() -> None:
    sc = Scenario(measurement_protocol="p", max_tokens=64)
    assert body_fields(sc, "m") == {"model": "m", "max_tokens": 64, "stream": True,
                                    "stream_options": {"include_usage": True}}


def test_each_switch_reaches_the_body() -> None:
    sc = Scenario(measurement_protocol="p", max_tokens=8, include_usage=False,
                  reasoning_effort="low", thinking_mode="off", fixed_output_tokens=True,
                  extra_body={"chat_template_kwargs": {"x": 1}, "top_p": 0.5})
    assert body_fields(sc, "m") == {
        "model": "m", "max_tokens": 8, "stream": True, "reasoning_effort": "low",
        "chat_template_kwargs": {"enable_thinking": False, "x": 1},  # merged, not replaced
        "ignore_eos": True, "min_tokens": 8, "top_p": 0.5}
    on = Scenario(measurement_protocol="p", thinking_mode="on", extra_body={"stream": False})
    assert body_fields(on, "m")["chat_template_kwargs"] == {"enable_thinking": True}
    assert body_fields(on, "m")["stream"] is False  # extra_body has the last word


@pytest.mark.parametrize("shared", [None, SharedPrefix(prefix_tokens=40, group_size=2)])
def test_each_requests_bytes_are_the_json_of_its_messages(shared: SharedPrefix | None) -> None:
    sc = Scenario(measurement_protocol="p", system_prompt="be brief")
    prompts = PromptFactory(CAL, seed=3, run_nonce="ab12cd34", system_prompt="be brief",
                            shared=shared)
    builder = BodyBuilder(sc, "m", prompts)
    builder.prepare([100, 200])
    seen = set()
    for size, i, warmup in ((100, 0, False), (100, 1, False), (100, 3, False),
                            (200, 0, True), (200, 5, False)):
        body = builder.build(size, i, warmup)
        assert b"".join(builder.build_parts(size, i, warmup)) == body
        assert orjson.loads(body) == {**body_fields(sc, "m"),
                                      "messages": prompts.messages(size, i, warmup)}
        seen.add(body)
    assert len(seen) == 5  # no two requests send the same bytes
