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


def test_each_endpoint_has_its_own_fields_and_prompt_key() -> None:
    sc = Scenario(measurement_protocol="p", max_tokens=8, reasoning_effort="low",
                  fixed_output_tokens=True, extra_body={"top_p": 0.5}, endpoint="responses")
    assert body_fields(sc, "m") == {"model": "m", "stream": True, "max_output_tokens": 8,
                                    "reasoning": {"effort": "low"}, "ignore_eos": True,
                                    "top_p": 0.5}
    emb = Scenario(measurement_protocol="p", max_tokens=8, endpoint="embeddings",
                   extra_body={"dimensions": 4})
    assert body_fields(emb, "m") == {"model": "m", "encoding_format": "float", "dimensions": 4}
    prompts = PromptFactory(CAL, seed=3, run_nonce="ab12cd34")
    for endpoint, key, text in (("responses", "input", False), ("embeddings", "input", True),
                                ("completions", "prompt", True)):
        builder = BodyBuilder(Scenario(measurement_protocol="p", endpoint=endpoint), "m",
                              prompts)
        doc = orjson.loads(builder.build(100, 2))
        messages = prompts.messages(100, 2)
        assert doc[key] == (messages[-1]["content"] if text else messages), endpoint
        assert "messages" not in doc


def test_a_messages_body_has_the_apis_names_and_its_system_prompt_on_top() -> None:
    sc = Scenario(measurement_protocol="p", max_tokens=8, reasoning_effort="low",
                  thinking_mode="on", extra_body={"top_k": 5}, endpoint="messages",
                  system_prompt="be brief")
    assert body_fields(sc, "m") == {"model": "m", "stream": True, "max_tokens": 8,
                                    "output_config": {"effort": "low"},
                                    "thinking": {"type": "enabled", "budget_tokens": 7},
                                    "chat_template_kwargs": {"enable_thinking": True},
                                    "top_k": 5}
    off = Scenario(measurement_protocol="p", thinking_mode="off", endpoint="messages")
    assert body_fields(off, "m")["thinking"] == {"type": "disabled"}
    prompts = PromptFactory(CAL, seed=3, run_nonce="ab12cd34", system_prompt="be brief")
    doc = orjson.loads(BodyBuilder(sc, "m", prompts).build(100, 2))
    system, *rest = prompts.messages(100, 2)
    assert system == {"role": "system", "content": "be brief"}
    assert doc["system"] == "be brief" and doc["messages"] == rest
    plain = PromptFactory(CAL, seed=3, run_nonce="ab12cd34")
    doc = orjson.loads(BodyBuilder(sc, "m", plain).build(100, 2))
    assert "system" not in doc and doc["messages"] == plain.messages(100, 2)


def test_a_messages_conversation_sends_its_system_prompt_on_top_each_turn() -> None:
    from anvil_metrics.load.body import ConversationBodies
    from anvil_metrics.prep.turns import ConversationPrompts, TurnSizes, size_turn_texts

    sc = _conversation_scenario("server", request={"endpoint": "messages"})
    prompts = ConversationPrompts(size_turn_texts(TurnSizes(40, 0, 20), CAL, 0, "n0nce123"),
                                  "n0nce123")
    conv = ConversationBodies(sc, "m", prompts).start(3)
    system, *rest = prompts.opening()
    first = orjson.loads(b"".join(conv.next_body()))
    assert first == {**body_fields(sc, "m"), "system": system["content"],
                     "messages": [*rest, prompts.user_message(3, 1)]}
    conv.answered("an answer", 90)
    second = orjson.loads(b"".join(conv.next_body()))
    assert second["system"] == system["content"] and second["messages"] == [
        *rest, prompts.user_message(3, 1), {"role": "assistant", "content": "an answer"},
        prompts.user_message(3, 2)]


def test_token_id_prompts_are_exactly_the_planned_count_and_each_its_own() -> None:
    from anvil_metrics.load.body import HEAD_IDS

    seen_texts: list[str] = []

    def ids_of(text: str) -> list[int]:  # a fake server: a word is an id
        seen_texts.append(text)
        return [len(w) * 100 + i % 7 for i, w in enumerate(text.split())]

    sc = Scenario(measurement_protocol="p", endpoint="completions", prompt_ids=True)
    prompts = PromptFactory(CAL, seed=3, run_nonce="ab12cd34")
    builder = BodyBuilder(sc, "m", prompts, ids_of)
    builder.prepare([100, 5000])
    assert len(seen_texts) == 2  # each size's text asked for once, before the load
    server = {t for size in (100, 5000) for t in ids_of(prompts.messages(size, 0)[-1][
        "content"])}
    bodies = set()
    for size in (100, 5000):
        for k, warmup in ((0, False), (0, True), (1, False), (977, False)):
            doc = orjson.loads(builder.build(size, k, warmup))
            ids = doc["prompt"]
            assert len(ids) == size and set(ids) <= server  # every id one the server gave
            assert {k: v for k, v in doc.items() if k != "prompt"} == body_fields(sc, "m")
            bodies.add(tuple(ids[:HEAD_IDS]))
    assert len(bodies) == 4  # the head numbers (request, warm-up), whatever the size


def _conversation_scenario(history: str, extra: dict | None = None,
                           **more: object) -> Scenario:
    from anvil_metrics.load.scenario import scenario_from_dict

    return scenario_from_dict({
        "measurement_protocol": "p", "max_tokens": 32, "max_context_tokens": 8192,
        "request": {"extra_body": extra or {}, **more.pop("request", {})},  # type: ignore
        "conversation": {"turns": 3, "turn_tokens": 40, "system_prompt_tokens": 20,
                         "history": history, **more}})


def test_previous_response_id_sends_the_new_message_after_the_last_answers_id() -> None:
    from anvil_metrics.load.body import ConversationBodies
    from anvil_metrics.prep.turns import ConversationPrompts, TurnSizes, size_turn_texts

    sc = _conversation_scenario("server", request={"endpoint": "responses"},
                                previous_response_id=True)
    prompts = ConversationPrompts(size_turn_texts(TurnSizes(40, 0, 20), CAL, 0, "n0nce123"),
                                  "n0nce123")
    conv = ConversationBodies(sc, "m", prompts).start(3)
    first = orjson.loads(b"".join(conv.next_body()))
    system, *rest = prompts.opening()
    assert system["role"] == "system"  # sent as each turn's instructions: a stored
    # response's system message does not carry over (OpenAI's rule, vLLM's)
    assert first["input"] == [*rest, prompts.user_message(3, 1)]
    assert first["instructions"] == system["content"]
    assert "previous_response_id" not in first and first["max_output_tokens"] == 32
    conv.answered("an answer", 90, "resp_abc")
    second = orjson.loads(b"".join(conv.next_body()))
    assert second == {**body_fields(sc, "m"), "previous_response_id": "resp_abc",
                      "instructions": system["content"],
                      "input": [prompts.user_message(3, 2)]}
    assert conv.extra()["history_tokens"] == 90
    resend = ConversationBodies(_conversation_scenario("server", request={
        "endpoint": "responses"}), "m", prompts).start(3)
    resend.next_body()
    resend.answered("an answer", 90, "resp_abc")  # the id is not used: the history is sent
    assert len(orjson.loads(b"".join(resend.next_body()))["input"]) == len(
        prompts.opening()) + 3


def test_a_conversations_bodies_carry_its_whole_history_in_order() -> None:
    from anvil_metrics.load.body import ConversationBodies
    from anvil_metrics.prep.turns import ConversationPrompts, TurnSizes, size_turn_texts

    sc = _conversation_scenario("server", {"metadata": {"messages": []}, "note": '"messages":[]'})
    texts = size_turn_texts(TurnSizes(40, 0, 20), CAL, 0, "n0nce123")
    prompts = ConversationPrompts(texts, "n0nce123")
    bodies = ConversationBodies(sc, "m", prompts)
    conv, other = bodies.start(7), bodies.start(8)
    expected = prompts.opening()
    for k, answer in enumerate(['Answer "one" \\ é', "two"], start=1):
        doc = orjson.loads(b"".join(conv.next_body()))
        expected = [*expected, prompts.user_message(7, k)]
        assert doc["messages"] == expected and conv.turn == k
        assert {k: v for k, v in doc.items() if k != "messages"} == {
            **body_fields(sc, "m"), "metadata": {"messages": []}, "note": '"messages":[]'}
        assert conv.extra() == {"conversation": 7, "turn": k, "turns": 3,
                                "history_tokens": None if k == 1 else 100 + k - 1}
        conv.answered(answer, 100 + k)
        expected = [*expected, {"role": "assistant", "content": answer}]
    assert orjson.loads(b"".join(other.next_body()))["messages"] == [
        *prompts.opening(), prompts.user_message(8, 1)]
    assert "ignore_eos" not in body_fields(sc, "m")
    # one session header value per conversation: the run nonce and its number
    assert (conv.header, other.header) == (b"X-Session-ID: n0nce123-7\r\n",
                                           b"X-Session-ID: n0nce123-8\r\n")
    assert not conv.over and conv.think_s() == 0.0
    conv.next_body()
    assert conv.over  # 3 turns drawn, 3 sent


def test_no_session_header_when_the_scenario_says_none() -> None:
    from anvil_metrics.load.body import ConversationBodies
    from anvil_metrics.load.scenario import scenario_from_dict
    from anvil_metrics.prep.turns import ConversationPrompts, TurnSizes, size_turn_texts

    sc = scenario_from_dict({
        "measurement_protocol": "p", "max_tokens": 32, "max_context_tokens": 8192,
        "conversation": {"turns": 2, "turn_tokens": 40, "session_header": ""}})
    texts = size_turn_texts(TurnSizes(40), CAL, 0, "n0nce123")
    bodies = ConversationBodies(sc, "m", ConversationPrompts(texts, "n0nce123"))
    assert bodies.start(0).header == b""


def test_fixed_history_asks_for_answers_of_exactly_max_tokens() -> None:
    fields = body_fields(_conversation_scenario("fixed"), "m")
    assert fields["ignore_eos"] is True and fields["min_tokens"] == 32 == fields["max_tokens"]


def test_a_plain_traces_session_request_begins_with_the_one_before() -> None:
    """Session turns: each message is the session's previous message (its first words when
    shorter) and new words; built out of order (another worker built the turn before) it
    is the same; one session header per session, none outside a session."""
    from anvil_metrics.load.body import TraceBodies
    from anvil_metrics.load.trace import TraceRequest
    from anvil_metrics.prep.traceprompts import TracePrompts

    reqs = [TraceRequest(1, 0, 30, 2, session_id="a"), TraceRequest(2, 1, 20, 2),
            TraceRequest(3, 2, 50, 2, session_id="a"), TraceRequest(4, 3, 40, 2,
                                                                   session_id="a"),
            TraceRequest(5, 4, 60, 2, session_id="b\r\nX: y")]
    sc = Scenario(measurement_protocol="t")

    def bodies() -> TraceBodies:
        return TraceBodies(sc, "m", reqs, TracePrompts("n1", 16, 5), "n1")

    def words(b: TraceBodies, k: int) -> list[str]:
        return b.messages(k)[0]["content"].split(" ")

    b = bodies()
    w0, w2, w3 = words(b, 0), words(b, 2), words(b, 3)
    assert (len(w0), len(w2), len(w3)) == (25, 45, 35)  # input less the template's 5
    assert w2[:25] == w0 and w3 == w2[:35]  # the one before, whole or cut
    out_of_order = bodies()
    assert words(out_of_order, 3) == w3 and words(out_of_order, 0) == w0
    assert b.header_for(0) == b.header_for(2) == b"X-Session-ID: n1-a\r\n"
    assert b.header_for(1) == b""
    odd = b.header_for(4)  # not sent as given: its CRC-32
    assert odd.startswith(b"X-Session-ID: n1-") and b"\r\nX" not in odd and odd.endswith(b"\r\n")


def test_every_body_source_answers_the_one_interface() -> None:
    """`RequestBodies`: what a user, the session and the plugin ask of any source. Planned
    sizes keep the budget's size, send no header lines and add nothing to the record; a
    dataset plans its own size (none, uncounted); a new source need only build its bodies."""
    from anvil_metrics.load.body import DatasetBodies, RequestBodies
    from anvil_metrics.load.dataset import DatasetEntry

    sc = Scenario(measurement_protocol="p", max_tokens=8)
    planned = BodyBuilder(sc, "m", PromptFactory(CAL, 3, "n0nce123"))
    planned.prepare([100])
    dataset = DatasetBodies(sc, "m", [DatasetEntry(None, ("q",))])

    class Fixed(RequestBodies):
        def build_parts(self, size: int, index: int, warmup: bool = False
                        ) -> tuple[bytes, ...]:
            return (b'{"n": %d}' % index,)

    for source in (planned, dataset, Fixed()):
        assert orjson.loads(b"".join(source.build_parts(100, 4)))
        assert (source.header_for(4), source.extra(4)) == (b"", None)
    assert (planned.planned(4, 100), Fixed().planned(4, 100)) == (100, 100)
    assert dataset.planned(4, 100) is None


def test_the_output_cap_is_what_each_body_sends() -> None:
    """`output_cap`: the body's own `max_tokens` (`max_output_tokens` for responses), none
    for an embedding: what the observer's overrun limit is made from."""
    prompts = PromptFactory(CAL, seed=3, run_nonce="ab12cd34")
    for endpoint in ("chat", "completions", "responses", "embeddings", "messages"):
        builder = BodyBuilder(Scenario(measurement_protocol="p", max_tokens=9,
                                       endpoint=endpoint), "m", prompts)
        doc = orjson.loads(builder.build(100, 2))
        assert builder.output_cap(2) == doc.get("max_tokens", doc.get("max_output_tokens"))
        assert (builder.output_cap(2) is None) == (endpoint == "embeddings")
