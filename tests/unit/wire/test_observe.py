"""Stream shapes → observer: the rules of first output/content, usage, end and failures.

Streams are fed through the real SSE path (`LineSource` + sseclient-py) from raw bytes cut
at arbitrary places, with a fake clock, so stamps are known exactly.
"""

from __future__ import annotations

import itertools
from typing import Any

import orjson
import pytest
from sseref import LineSource, iter_events, lines_from_bytes

from anvil_metrics.wire.observe import StreamObserver


def chunk(delta: dict | None = None, finish: str | None = None, usage: dict | None = None,
          choices: bool = True) -> bytes:
    obj: dict = {"id": "x", "object": "chat.completion.chunk", "model": "m"}
    obj["choices"] = ([{"index": 0, "delta": delta or {}, "finish_reason": finish}]
                      if choices else [])
    if usage is not None:
        obj["usage"] = usage
    return b"data: " + orjson.dumps(obj) + b"\n\n"


DONE = b"data: [DONE]\n\n"
USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


def run(stream: bytes, cut: int | None = None, judge: Any = None) -> StreamObserver:
    """Feed `stream` (split every `cut` bytes, or whole) with a clock that ticks 1 ms per
    line read; returns the observer after the stream ends."""
    parts = [stream] if cut is None else [stream[i:i + cut] for i in range(0, len(stream), cut)]
    clock = itertools.count(1_000_000, 1_000_000)
    source = LineSource(lines_from_bytes(parts), clock=lambda: next(clock))
    obs = StreamObserver(0, 0, judge=judge)
    for data in iter_events(source):
        if obs.on_data(data, source.last_line_ns):
            break
    else:
        obs.on_eof(source.last_line_ns)
    return obs


def test_role_only_and_empty_chunks_do_not_count() -> None:
    s = (chunk({"role": "assistant", "content": ""}) + chunk({"content": ""})
         + chunk({"reasoning_content": ""}) + chunk({"content": "Hi"})
         + chunk({}, finish="stop") + DONE)
    obs = run(s)
    rec = obs.finish()
    assert rec.failure is None
    assert rec.content_chunks == 1 and rec.reasoning_chunks == 0
    # each event is 2 lines (data + blank); the 4th event ends at line 8 → 8 ms
    assert rec.first_output_ns == 8_000_000 == rec.first_content_ns
    assert rec.end_ns == 12_000_000
    assert rec.chunk_channels == "c"
    assert rec.chunk_deltas_ns == (8_000_000,)


def test_tool_call_deltas_are_content_output_and_kept_only_for_a_judge() -> None:
    call = {"index": 0, "id": "c1", "function": {"name": "get_time", "arguments": ""}}
    piece = {"index": 0, "function": {"arguments": '{"city": "Oslo"}'}}
    s = (chunk({"role": "assistant", "content": ""}) + chunk({"tool_calls": [call]})
         + chunk({"tool_calls": [piece]}) + chunk({}, finish="tool_calls") + DONE)
    obs = run(s)
    rec = obs.finish()
    assert rec.failure is None and rec.content_chunks == 2 and rec.chunk_channels == "cc"
    assert rec.first_output_ns == rec.first_content_ns == 4_000_000
    assert obs.fragments is None and obs.kept_chars == 0  # no judge: nothing kept
    got = []
    obs = run(s, judge=lambda answer: got.append(answer) or {})
    obs.finish()
    (answer,) = got
    assert answer.tool_fragments == (call, piece) and answer.content == ""
    assert answer.finish_reason == "tool_calls" and not answer.cut


@pytest.mark.parametrize("field", ["reasoning", "reasoning_content"])
def test_reasoning_field_names(field: str) -> None:
    s = (chunk({"role": "assistant"}) + chunk({field: "think"}) + chunk({field: "more"})
         + chunk({"content": "answer"}, finish="stop") + chunk(None, usage=USAGE, choices=False)
         + DONE)
    rec = run(s).finish()
    assert rec.reasoning_chunks == 2 and rec.content_chunks == 1
    assert rec.first_output_ns == 4_000_000
    assert rec.first_content_ns == 8_000_000
    assert rec.usage == USAGE
    assert rec.chunk_channels == "rrc"
    assert rec.chunk_deltas_ns == (4_000_000, 2_000_000, 2_000_000)
    assert rec.finish_reason == "stop"


def test_reasoning_preferred_over_reasoning_content_when_both() -> None:
    s = chunk({"reasoning": "a", "reasoning_content": ""}) + chunk({}, finish="stop") + DONE
    rec = run(s).finish()
    assert rec.reasoning_chunks == 1


def test_usage_inside_finish_chunk_and_no_done_is_success() -> None:
    s = chunk({"content": "a"}) + chunk({"content": "b"}, finish="stop", usage=USAGE)
    rec = run(s).finish()
    assert rec.failure is None
    assert rec.usage == USAGE
    assert rec.end_ns == 5_000_000  # stamped when the read returned end of body


def test_end_before_finish_reason_is_truncated() -> None:
    s = chunk({"content": "a"}) + chunk({"content": "b"})
    rec = run(s).finish()
    assert rec.failure is not None
    assert rec.failure.kind == "truncated" and rec.failure.phase == "decode"


def test_error_object_in_stream() -> None:
    s = chunk({"content": "a"}) + b'data: {"error": {"message": "boom", "code": 500}}\n\n'
    rec = run(s).finish()
    assert rec.failure is not None and rec.failure.kind == "stream_error"
    assert "boom" in rec.failure.message


def test_malformed_chunk() -> None:
    rec = run(b"data: {not json\n\n").finish()
    assert rec.failure is not None and rec.failure.kind == "malformed_chunk"
    assert rec.failure.phase == "prefill"


def test_multibyte_utf8_split_across_reads() -> None:
    text = "日本語 — café ü"
    s = chunk({"reasoning": "é"}) + chunk({"content": text}, finish="stop") + DONE
    whole = run(s).finish()
    for cut in (1, 2, 3, 5, 7):
        rec = run(s, cut=cut).finish()
        assert rec.failure is None
        assert (rec.reasoning_chunks, rec.content_chunks) == (1, 1)
        assert rec.chunk_deltas_ns == whole.chunk_deltas_ns


def test_crlf_framing() -> None:
    s = (chunk({"content": "a"}) + chunk({}, finish="stop") + DONE).replace(b"\n", b"\r\n")
    rec = run(s).finish()
    assert rec.failure is None and rec.content_chunks == 1


def test_comments_and_keepalives_are_ignored() -> None:
    s = b": keep-alive\n\n" + chunk({"content": "a"}, finish="stop") + b": ping\n\n" + DONE
    rec = run(s).finish()
    assert rec.failure is None and rec.content_chunks == 1


@pytest.mark.parametrize("payload", [
    b'{"choices": {"0": {}}}',            # choices is an object
    b'{"choices": [{"delta": "text"}]}',   # delta is a string
    b'{"choices": [{"delta": ["a"]}]}',    # delta is a list
    b'{"choices": ["x"]}',                 # choice is a string
    b'{"usage": [1, 2]}',                  # usage is not an object
    b'[1, 2, 3]',                          # not an object at all
])
def test_unexpected_shapes_are_malformed_chunks(payload: bytes) -> None:
    rec = run(chunk({"content": "a"}) + b"data: " + payload + b"\n\n" + DONE).finish()
    assert rec.failure is not None and rec.failure.kind == "malformed_chunk"
    assert rec.failure.phase == "decode" and rec.content_chunks == 1


def test_vllm_style_error_object() -> None:
    rec = run(b'data: {"object": "error", "message": "overloaded", "code": 503}\n\n').finish()
    assert rec.failure is not None and rec.failure.kind == "stream_error"
    assert "overloaded" in rec.failure.message and rec.failure.phase == "prefill"


def test_begin_stamps_the_start_the_first_delta_and_the_start_delay() -> None:
    """`begin` moves the start (the first chunk's delta is counted from it, not from the
    construction stamp) and records how late the request went out."""
    obs = StreamObserver(0, 100)
    obs.begin(1_000, due_ns=400)
    obs.on_data(orjson.dumps({"choices": [{"index": 0, "delta": {"content": "a"}}]}), 1_250)
    obs.on_data(b"[DONE]", 1_300)
    rec = obs.finish()
    assert rec.start_ns == 1_000 and rec.chunk_deltas_ns == (250,)
    assert rec.extra == {"start_delay_ns": 600, "first_chunk_ns": 1_250}
    obs = StreamObserver(0, 100)
    obs.begin(1_000, due_ns=400)
    obs.begin(2_000)  # no due time: no delay recorded
    obs.on_data(b"[DONE]", 2_100)
    rec = obs.finish()
    assert rec.start_ns == 2_000 and "start_delay_ns" not in rec.extra


def _stamped(delta: dict | None, sent_ns: int, choices: bool = True) -> bytes:
    obj = orjson.loads(chunk(delta, choices=choices)[len(b"data: "):])
    obj["anvil_sent_ns"] = sent_ns
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def test_send_stamps_are_kept_only_for_a_stamping_server() -> None:
    """The simulator's send stamps go to `extra.server` when the stream has a `truth`
    (the client attaches one when the response carries `anvil-t0-ns`); without it, the
    same chunks leave no trace."""
    from anvil_metrics.wire.truth import SendStamps, from_headers

    stream = (_stamped({"role": "assistant", "content": ""}, 5) + _stamped({"reasoning": "a"}, 6)
              + _stamped({"content": "b"}, 7) + _stamped({"content": "c"}, 8)
              + _stamped(None, 9, choices=False) + DONE)
    plain = run(stream).finish()
    assert "server" not in plain.extra
    obs = StreamObserver(0, 0)
    obs.on_head(200, from_headers({"anvil-t0-ns": "3"}.get))
    assert isinstance(obs.truth, SendStamps) and from_headers({}.get) is None
    source = LineSource(lines_from_bytes([stream]), clock=lambda: 1)
    for data in iter_events(source):
        if obs.on_data(data, source.last_line_ns):
            break
    assert obs.finish().extra["server"] == {
        "t0_ns": 3, "last_sent_ns": 9, "chunks_sent_ns": [6, 7, 8],
        "first_output_sent_ns": 6, "first_content_sent_ns": 7}


def test_kept_text_is_the_content_only_and_only_when_asked() -> None:
    stream = (chunk({"role": "assistant"}) + chunk({"reasoning_content": "think "})
              + chunk({"content": "Hé"}) + chunk({"reasoning": "x", "content": "llo"})
              + chunk({"content": ""}) + chunk({"content": " 😀"}) + chunk({}, "stop", USAGE)
              + DONE)
    kept = StreamObserver(0, 0, keep_text=True)
    plain = StreamObserver(0, 0)
    for obs in (kept, plain):
        for data in iter_events(LineSource(lines_from_bytes([stream]), clock=lambda: 1)):
            if obs.on_data(data, 1):
                break
    assert kept.text is not None and "".join(kept.text) == "Héllo 😀"
    assert plain.text is None
    assert kept.finish() == plain.finish()  # the record is the same either way


def test_more_output_chunks_than_max_tokens_allows_is_an_overrun() -> None:
    """2 x max_tokens + 64 output chunks pass (reasoning counted), the next one fails the
    request as `overrun` and ends it; without a cap there is no limit."""
    limit = 2 * 3 + 64
    obs = StreamObserver(0, 0, max_tokens=3)
    for i in range(limit):
        delta = {"reasoning": "r"} if i % 2 else {"content": "c"}
        assert not obs.on_data(chunk(delta)[6:-2], i + 1)
    assert obs.on_data(chunk({"content": "c"})[6:-2], limit + 1)  # over: the stream ends
    rec = obs.finish()
    assert rec.failure is not None and (rec.failure.kind, rec.failure.phase) == (
        "overrun", "decode")
    assert f"more than {limit} output chunks (2 x max_tokens 3 + 64)" in rec.failure.message
    assert rec.reasoning_chunks + rec.content_chunks == len(rec.chunk_deltas_ns) == limit
    free = StreamObserver(0, 0)
    assert not any(free.on_data(chunk({"content": "c"})[6:-2], i) for i in range(1, 200))


@pytest.mark.parametrize("usage", [{"completion_tokens": -5}, {"prompt_tokens": 1.5},
                                   {"total_tokens": "7"}])
def test_a_usage_count_that_is_not_a_count_is_malformed(usage: dict) -> None:
    obs = StreamObserver(0, 0)
    assert obs.on_data(chunk({"content": "c"}, usage=usage)[6:-2], 1)
    failure = obs.finish().failure
    key = next(iter(usage))
    assert failure is not None and failure.kind == "malformed_chunk"
    assert f"usage.{key} is {usage[key]!r}, not a count of tokens" in failure.message
