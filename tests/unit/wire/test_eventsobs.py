"""Responses API events and a whole embeddings answer → observer (`wire/eventsobs.py`).

The events go through the client's one SSE path (`client.read_events`, the real splitter),
each block stamped by hand, so every stamp is known exactly; the record each observer makes
must be one `records.record_problem` accepts.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from anvil_metrics.records import record_problem
from anvil_metrics.wire.client import read_events, read_whole
from anvil_metrics.wire.eventsobs import OBSERVERS, MessagesObserver, ResponsesObserver, on_whole
from anvil_metrics.wire.observe import StreamObserver, prompt_tokens_of
from anvil_metrics.wire.truth import SendStamps

USAGE = {"input_tokens": 40, "input_tokens_details": {"cached_tokens": 8},
         "output_tokens": 3, "output_tokens_details": {"reasoning_tokens": 1},
         "total_tokens": 43}


def event(kind: str, **fields: Any) -> bytes:
    return b"event: %s\ndata: %s\n\n" % (kind.encode(), orjson.dumps({"type": kind, **fields}))


def response(status: str = "completed", usage: dict | None = USAGE) -> dict[str, Any]:
    return {"id": "resp_1", "status": status, "usage": usage}


def stream(end: bytes | None = None) -> list[bytes]:
    """A reasoning token, then two content tokens, as vLLM streams them; block k at k ms."""
    return [event("response.created", response=response("in_progress", None)),
            event("response.in_progress", response=response("in_progress", None)),
            event("response.output_item.added", item={"type": "reasoning"}),
            event("response.reasoning_text.delta", delta="Hm"),
            event("response.output_item.added", item={"type": "message"}),
            event("response.output_text.delta", delta=""),  # empty: no output
            event("response.output_text.delta", delta="Hi"),
            event("response.output_text.delta", delta=" there"),
            event("response.output_text.done", text="Hi there"),
            end if end is not None else event("response.completed", response=response())]


def feed(blocks: list[bytes], keep_text: bool = True) -> ResponsesObserver:
    obs = ResponsesObserver(0, 0, keep_text=keep_text)
    read_events(((b, k * 1_000_000) for k, b in enumerate(blocks, 1)), obs)
    return obs


def test_a_stream_gives_the_stamps_counts_usage_and_id() -> None:
    obs = feed(stream())
    assert (obs.response_id, obs.first_chunk_ns, obs.first_output_ns, obs.first_content_ns,
            obs.end_ns) == ("resp_1", 3_000_000, 4_000_000, 7_000_000, 10_000_000)
    assert (obs.reasoning_chunks, obs.content_chunks, obs.channels) == (1, 2, ["r", "c", "c"])
    assert obs.deltas == [4_000_000, 3_000_000, 1_000_000]
    assert obs.text == ["Hi", " there"] and obs.finish_reason == "stop"
    assert obs.usage == USAGE and prompt_tokens_of(obs.usage) == 40
    assert obs.failure is None and record_problem(obs.finish().to_json_dict()) is None


def test_events_cut_anywhere_give_the_same_observation() -> None:
    whole = b"".join(stream())
    one = feed([whole])
    for cut in (1, 7, 64):
        obs = ResponsesObserver(0, 0)
        read_events(((whole[i:i + cut], 1) for i in range(0, len(whole), cut)), obs)
        assert (obs.reasoning_chunks, obs.content_chunks, obs.finish_reason, obs.usage) == (
            one.reasoning_chunks, one.content_chunks, one.finish_reason, one.usage)


def test_a_cut_by_max_output_tokens_is_length() -> None:
    obs = feed(stream(event("response.completed", response={
        **response("incomplete"), "incomplete_details": {"reason": "max_output_tokens"}})))
    assert obs.finish_reason == "length" and obs.failure is None


@pytest.mark.parametrize(("end", "kind", "words"), [
    (event("response.failed", response={"status": "failed", "error": {"message": "oom"}}),
     "stream_error", "oom"),
    (event("error", message="bad things"), "stream_error", "bad things"),
    (event("response.completed", response=response("cancelled")), "stream_error",
     "'cancelled'"),
    (event("response.output_text.delta", delta=7), "malformed_chunk", "not a string"),
    (b"data: [1, 2]\n\n", "malformed_chunk", "not a JSON object"),
])
def test_what_ends_a_response_badly(end: bytes, kind: str, words: str) -> None:
    obs = feed(stream(end))
    assert obs.failure is not None and obs.failure.kind == kind
    assert words in obs.failure.message and obs.failure.phase == "decode"


def test_a_stream_without_its_end_is_truncated() -> None:
    obs = feed(stream()[:-1])
    assert obs.failure is not None and obs.failure.kind == "truncated"


def test_the_simulators_send_stamps_are_kept() -> None:
    obs = ResponsesObserver(0, 0)
    obs.on_head(200, SendStamps(5))
    blocks = [event("response.output_text.delta", delta="a", anvil_sent_ns=11),
              event("response.completed", response=response(), anvil_sent_ns=12)]
    read_events(((b, 20) for b in blocks), obs)
    assert obs.truth.stamps == {"t0_ns": 5, "chunks_sent_ns": [11], "first_output_sent_ns": 11,
                                "first_content_sent_ns": 11, "last_sent_ns": 12}


EMBEDDING = {"object": "list", "data": [{"object": "embedding", "index": 0,
                                         "embedding": [0.5, 0.25]}],
             "usage": {"prompt_tokens": 12, "total_tokens": 12}}


def test_an_embeddings_answer_is_read_whole_and_ends_at_its_last_byte() -> None:
    obs = StreamObserver(0, 0)
    raw = orjson.dumps({**EMBEDDING, "anvil_sent_ns": 3})
    obs.on_head(200, SendStamps(1))
    n = read_whole([(raw[:10], 2_000_000), (raw[10:], 5_000_000)], obs)
    assert n == len(raw) and obs.end_ns == 5_000_000 and obs.done and obs.failure is None
    assert obs.usage == EMBEDDING["usage"] and obs.first_output_ns is None
    assert obs.truth.stamps == {"t0_ns": 1, "last_sent_ns": 3}
    record = obs.finish()
    assert record_problem(record.to_json_dict()) is None and record.finish_reason is None


@pytest.mark.parametrize(("raw", "kind"), [
    (b"{not json", "malformed_chunk"),
    (b"[]", "malformed_chunk"),
    (orjson.dumps({**EMBEDDING, "data": []}), "malformed_chunk"),
    (orjson.dumps({**EMBEDDING, "usage": 3}), "malformed_chunk"),
    (orjson.dumps({"error": {"message": "too long"}}), "stream_error"),
])
def test_a_bad_embeddings_answer_is_a_failure(raw: bytes, kind: str) -> None:
    obs = StreamObserver(0, 0)
    on_whole(obs, raw, 9)
    assert obs.failure is not None and obs.failure.kind == kind and obs.end_ns == 9


# -- the Anthropic Messages API ------------------------------------------------------------

START_USAGE = {"input_tokens": 30, "cache_read_input_tokens": 10,
               "cache_creation_input_tokens": 2, "output_tokens": 1}


def messages_stream(end: bytes | None = None, stop: str = "end_turn") -> list[bytes]:
    """A thinking token (and its signature), then two text tokens, as Anthropic streams
    them; block k at k ms."""
    return [event("message_start", message={"id": "msg_1", "usage": START_USAGE}),
            event("ping"),
            event("content_block_start", index=0, content_block={"type": "thinking"}),
            event("content_block_delta", index=0, delta={"type": "thinking_delta",
                                                         "thinking": "Hm"}),
            event("content_block_delta", index=0, delta={"type": "signature_delta",
                                                         "signature": "c2ln"}),
            event("content_block_stop", index=0),
            event("content_block_start", index=1, content_block={"type": "text"}),
            event("content_block_delta", index=1, delta={"type": "text_delta", "text": ""}),
            event("content_block_delta", index=1, delta={"type": "text_delta", "text": "Hi"}),
            event("content_block_delta", index=1, delta={"type": "text_delta",
                                                         "text": " there"}),
            event("content_block_stop", index=1),
            event("message_delta", delta={"stop_reason": stop}, usage={"output_tokens": 3}),
            end if end is not None else event("message_stop")]


def feed_messages(blocks: list[bytes]) -> MessagesObserver:
    obs = MessagesObserver(0, 0, keep_text=True)
    read_events(((b, k * 1_000_000) for k, b in enumerate(blocks, 1)), obs)
    return obs


def test_a_messages_stream_gives_the_stamps_counts_and_merged_usage() -> None:
    obs = feed_messages(messages_stream())
    # first chunk: the first block opened; a signature or an empty delta is no output
    assert (obs.first_chunk_ns, obs.first_output_ns, obs.first_content_ns, obs.end_ns) == (
        3_000_000, 4_000_000, 9_000_000, 13_000_000)
    assert (obs.reasoning_chunks, obs.content_chunks, obs.channels) == (1, 2, ["r", "c", "c"])
    assert obs.deltas == [4_000_000, 5_000_000, 1_000_000]
    assert obs.text == ["Hi", " there"] and obs.finish_reason == "stop"
    assert obs.usage == {**START_USAGE, "output_tokens": 3}
    # the prompt: input_tokens and the cache's reads and writes, which it leaves out
    assert prompt_tokens_of(obs.usage) == 42
    assert obs.failure is None and record_problem(obs.finish().to_json_dict()) is None


@pytest.mark.parametrize(("stop", "finish"), [("max_tokens", "length"),
                                              ("stop_sequence", "stop"),
                                              ("tool_use", "tool_calls"),
                                              ("refusal", "refusal")])
def test_a_messages_stop_reason_is_a_finish_reason(stop: str, finish: str) -> None:
    assert feed_messages(messages_stream(stop=stop)).finish_reason == finish


def test_a_messages_stream_cut_before_message_stop() -> None:
    ended = feed_messages(messages_stream()[:-1])  # after a stop reason: a clean end
    assert ended.failure is None and ended.end_ns == 12_000_000
    cut = feed_messages(messages_stream()[:-3])
    assert cut.failure is not None and cut.failure.kind == "truncated"


@pytest.mark.parametrize(("end", "kind", "words"), [
    (event("error", error={"type": "overloaded_error", "message": "Overloaded"}),
     "stream_error", "Overloaded"),
    (event("content_block_delta", index=1, delta={"type": "text_delta", "text": 7}),
     "malformed_chunk", "not a string"),
    (event("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": -1}),
     "malformed_chunk", "output_tokens"),
])
def test_what_ends_a_message_badly(end: bytes, kind: str, words: str) -> None:
    obs = feed_messages(messages_stream(end))
    assert obs.failure is not None and obs.failure.kind == kind
    assert words in obs.failure.message and obs.failure.phase == "decode"


def test_the_simulators_send_stamps_are_kept_for_messages() -> None:
    obs = MessagesObserver(0, 0)
    obs.on_head(200, SendStamps(5))
    blocks = [event("content_block_delta", delta={"type": "thinking_delta", "thinking": "a"},
                    anvil_sent_ns=11),
              event("content_block_delta", delta={"type": "text_delta", "text": "b"},
                    anvil_sent_ns=12),
              event("message_stop", anvil_sent_ns=13)]
    read_events(((b, 20) for b in blocks), obs)
    assert obs.truth.stamps == {"t0_ns": 5, "chunks_sent_ns": [11, 12], "first_output_sent_ns": 11,
                                "first_content_sent_ns": 12, "last_sent_ns": 13}


def test_each_endpoints_observer() -> None:
    assert OBSERVERS == {"responses": ResponsesObserver, "messages": MessagesObserver}
