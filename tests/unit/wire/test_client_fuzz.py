"""Property tests of the SSE parsing path: body blocks → `client.read_events`
(`EventSplitter` → observer), the very function `ChatClient.stream_chat` runs.

(a) A valid stream gives the same record however its bytes are cut into reads, and the
    record matches what the stream holds (counts, channels, usage, finish, failure kind);
    each event is stamped with the arrival of the read that completed it.
(b) Random bytes, and random mutations of a valid stream (byte-level and JSON-level), never
    raise out of the path: the result is a success or a typed failure, and the record
    survives the raw file's JSON round trip.

The clock ticks 1 ms per read. (The splitter itself is checked against sseclient-py in
`test_sse_splitter.py`.)
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import orjson
import pytest
from fuzzing import examples
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from anvil_metrics.records import FAILURE_KINDS, PHASES, RequestRecord
from anvil_metrics.wire.client import read_events
from anvil_metrics.wire.observe import StreamObserver


def feed(parts: list[bytes]) -> RequestRecord:
    blocks = [(part, 1_000_000 * (i + 1)) for i, part in enumerate(parts)]
    obs = StreamObserver(0, 0)
    read_events(blocks, obs)
    return obs.finish()


def split(stream: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *sorted(c % (len(stream) + 1) for c in cuts), len(stream)]
    return [stream[a:b] for a, b in itertools.pairwise(bounds)]


def summary(rec: RequestRecord) -> tuple:
    """What a record says of the stream, whatever the reads: its stamps depend on them."""
    f = rec.failure
    return (rec.reasoning_chunks, rec.content_chunks, rec.chunk_channels, rec.usage,
            rec.finish_reason, None if f is None else (f.kind, f.phase))


# ---- building valid streams -------------------------------------------------------------

MULTIBYTE = ["é", "ü", "日本語", "—", "😀", "𝄞", "Ωμέγα", "\u2028", "\x85", "ä\u0308", "ß"]
texts = st.one_of(
    st.text(max_size=6),
    st.lists(st.sampled_from(MULTIBYTE), min_size=1, max_size=4).map("".join),
    st.just(""),
)
reasoning_field = st.sampled_from(["reasoning", "reasoning_content"])


@dataclass(frozen=True)
class Ev:
    kind: str                    # r, c, b, role, empty, comment, keepalive, blank, error
    reasoning: str = ""
    content: str = ""
    field: str = "reasoning"
    note: str = ""


events = st.one_of(
    st.builds(Ev, kind=st.just("r"), reasoning=texts, field=reasoning_field),
    st.builds(Ev, kind=st.just("c"), content=texts),
    st.builds(Ev, kind=st.just("b"), reasoning=texts, content=texts, field=reasoning_field),
    st.builds(Ev, kind=st.sampled_from(["role", "empty", "keepalive", "blank"])),
    st.builds(Ev, kind=st.just("comment"),
              note=st.text(st.characters(codec="utf-8", exclude_characters="\r\n"), max_size=10)),
    st.builds(Ev, kind=st.just("idline")),
)


@dataclass(frozen=True)
class Plan:
    events: list[Ev]
    finish: str | None           # finish_reason of a last chunk, or no finish chunk
    usage_where: str             # none | own | finish
    done: bool
    error_at: int | None         # an error object before events[error_at]
    crlf: bool
    space: bool                  # "data: x" or "data:x"
    unterminated: bool           # the last event's blank line is missing


plans = st.builds(
    Plan,
    events=st.lists(events, max_size=12),
    finish=st.sampled_from([None, "stop", "length"]),
    usage_where=st.sampled_from(["none", "own", "finish"]),
    done=st.booleans(),
    error_at=st.one_of(st.none(), st.integers(0, 12)),
    crlf=st.booleans(),
    space=st.booleans(),
    unterminated=st.booleans(),
)

USAGE = {"prompt_tokens": 300, "completion_tokens": 7, "total_tokens": 307}


def chunk_obj(delta: dict | None, finish: str | None = None, usage: dict | None = None,
              choices: bool = True) -> dict:
    obj: dict = {"id": "x", "object": "chat.completion.chunk", "model": "m"}
    obj["choices"] = ([{"index": 0, "delta": delta or {}, "finish_reason": finish}]
                      if choices else [])
    if usage is not None:
        obj["usage"] = usage
    return obj


def build(plan: Plan) -> tuple[bytes, dict]:
    """The stream's bytes and what its record must hold."""
    nl = b"\r\n" if plan.crlf else b"\n"
    pre = b"data: " if plan.space else b"data:"
    out: list[bytes] = []
    exp = {"r": 0, "c": 0, "channels": "", "usage": None, "finish": None, "failure": None}

    def data(obj: object) -> None:
        out.append(pre + (obj if isinstance(obj, bytes) else orjson.dumps(obj)) + nl + nl)

    def output(r: str, c: str) -> None:
        if r or c:
            exp["r"] += bool(r)
            exp["c"] += bool(c)
            exp["channels"] += "b" if r and c else ("r" if r else "c")

    stopped = False
    for i, ev in enumerate(plan.events):
        if plan.error_at == i:
            data({"error": {"message": "boom", "code": 500}})
            exp["failure"] = "stream_error"
            stopped = True
            break
        if ev.kind in ("r", "c", "b"):
            delta: dict = {}
            if ev.kind in ("r", "b"):
                delta[ev.field] = ev.reasoning
            if ev.kind in ("c", "b"):
                delta["content"] = ev.content
            data(chunk_obj(delta))
            output(ev.reasoning if ev.kind != "c" else "", ev.content if ev.kind != "r" else "")
        elif ev.kind == "role":
            data(chunk_obj({"role": "assistant", "content": ""}))
        elif ev.kind == "empty":
            data(chunk_obj({"content": ""}))
        elif ev.kind == "comment":
            out.append(b":" + ev.note.encode() + nl + nl)
        elif ev.kind == "keepalive":
            out.append(b": keep-alive" + nl + nl)
        elif ev.kind == "blank":
            out.append(nl)
        elif ev.kind == "idline":  # an event with only id/event/retry fields: no data
            out.append(b"id: 7" + nl + b"event: ping" + nl + b"retry: 100" + nl + nl)
    if not stopped:
        usage = USAGE if plan.usage_where != "none" else None
        if plan.finish is not None:
            data(chunk_obj({}, finish=plan.finish,
                           usage=usage if plan.usage_where == "finish" else None))
            exp["finish"] = plan.finish
        if plan.usage_where == "own" or (plan.usage_where == "finish" and plan.finish is None):
            data(chunk_obj(None, usage=usage, choices=False))
        exp["usage"] = usage
        if plan.done:
            data(b"[DONE]")
        elif plan.finish is None:
            exp["failure"] = "truncated"
    stream = b"".join(out)
    if plan.unterminated and stream.endswith(nl + nl):
        stream = stream[: -len(nl)]
    return stream, exp


cut_lists = st.lists(st.integers(min_value=0, max_value=10_000), max_size=40)


@settings(max_examples=examples(1000), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=plans, cuts=cut_lists, cut_every=st.integers(1, 9))
def test_rechunking_a_valid_stream_changes_nothing(plan: Plan, cuts: list[int],
                                                   cut_every: int) -> None:
    stream, exp = build(plan)
    whole = feed([stream])
    f = whole.failure
    assert (whole.reasoning_chunks, whole.content_chunks, whole.chunk_channels) == (
        exp["r"], exp["c"], exp["channels"]), stream
    assert whole.usage == exp["usage"] and whole.finish_reason == exp["finish"], stream
    assert (None if f is None else f.kind) == exp["failure"], (stream, f)
    # one read: every event arrived with it
    stamps = [whole.first_output_ns, whole.first_content_ns, whole.end_ns]
    assert all(x in (None, 1_000_000) for x in stamps), stamps
    assert all(d == 0 for d in whole.chunk_deltas_ns[1:])
    # cut at random places, and at every `cut_every` bytes (through multi-byte characters)
    assert summary(feed(split(stream, cuts))) == summary(whole)
    every = [stream[i:i + cut_every] for i in range(0, len(stream), cut_every)]
    assert summary(feed(every)) == summary(whole)
    # one byte a read, with empty reads in between
    assert summary(feed([x for b in stream for x in (bytes([b]), b"")])) == summary(whole)


# ---- never raising ----------------------------------------------------------------------

def check_typed(rec: RequestRecord) -> None:
    """A success (ended cleanly) or a typed failure; the record's own invariants hold and
    it survives the raw file's round trip."""
    assert rec.end_ns is not None
    if rec.failure is None:
        assert rec.finish_reason is not None or rec.end_ns is not None
    else:
        assert rec.failure.kind in FAILURE_KINDS and rec.failure.phase in PHASES
        assert isinstance(rec.failure.message, str)
    ch = rec.chunk_channels
    assert len(ch) == len(rec.chunk_deltas_ns)
    assert rec.reasoning_chunks == ch.count("r") + ch.count("b")
    assert rec.content_chunks == ch.count("c") + ch.count("b")
    assert (rec.first_output_ns is None) == (ch == "")
    assert all(d >= 0 for d in rec.chunk_deltas_ns)
    assert rec.usage is None or isinstance(rec.usage, dict)
    back = RequestRecord.from_json_dict(orjson.loads(orjson.dumps(rec.to_json_dict())))
    assert back == rec


@settings(max_examples=examples(1000), deadline=None)
@given(raw=st.binary(max_size=300), cuts=cut_lists)
@example(raw=b"data: \xff\xfe\n\n", cuts=[])
@example(raw=b"data: {\"choices\": [{\"delta\": {\"content\": \"a\"}}]}\r\r", cuts=[7])
@example(raw=b"\r\r\r\n\n\r", cuts=[1, 2])
@example(raw=b'data: {"usage": {"n": 123456789012345678901234567890}}\n\n', cuts=[])
@example(raw=b"data: " + b"[" * 5000 + b"\n\n", cuts=[])
def test_random_bytes_never_raise(raw: bytes, cuts: list[int]) -> None:
    check_typed(feed(split(raw, cuts)))


SSE_ATOMS = [b"data:", b"data: ", b"\n", b"\r\n", b"\r", b":", b"[DONE]", b"{", b"}",
             b'"choices"', b'"delta"', b'"content"', b'"error"', b"\xff", b"\xe6\x97", b" "]


@st.composite
def byte_mutations(draw) -> bytes:
    stream, _ = build(draw(plans))
    buf = bytearray(stream)
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["insert", "delete", "replace", "atom", "truncate"]))
        pos = draw(st.integers(0, len(buf)))
        if op == "insert":
            buf[pos:pos] = draw(st.binary(min_size=1, max_size=4))
        elif op == "delete":
            del buf[pos:pos + draw(st.integers(1, 8))]
        elif op == "replace" and pos < len(buf):
            buf[pos] = draw(st.integers(0, 255))
        elif op == "atom":
            buf[pos:pos] = draw(st.sampled_from(SSE_ATOMS))
        elif op == "truncate":
            del buf[pos:]
    return bytes(buf)


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream=byte_mutations(), cuts=cut_lists)
def test_mutated_streams_never_raise(stream: bytes, cuts: list[int]) -> None:
    rec = feed(split(stream, cuts))
    check_typed(rec)
    assert summary(feed([stream])) == summary(rec)  # cutting still changes nothing


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                 max_size=3),
    max_leaves=8,
)
CHUNK_PATHS = [("choices",), ("choices", 0), ("choices", 0, "delta"),
               ("choices", 0, "delta", "content"), ("choices", 0, "delta", "reasoning"),
               ("choices", 0, "delta", "reasoning_content"), ("choices", 0, "finish_reason"),
               ("usage",), ("error",), ("object",), ("anvil_sent_ns",)]


def set_path(obj: dict, path: tuple, value: object) -> None:
    *head, last = path
    for k in head:
        obj = obj[k]
    obj[last] = value


@settings(max_examples=examples(1000), deadline=None)
@given(n_before=st.integers(0, 3), path=st.sampled_from(CHUNK_PATHS), value=json_values,
       done=st.booleans())
def test_json_level_mutations_are_typed(n_before: int, path: tuple, value: object,
                                        done: bool) -> None:
    """One chunk of an otherwise valid stream has a random JSON value at one place."""
    bad = chunk_obj({"content": "x"}, finish=None)
    set_path(bad, path, value)
    payload = orjson.dumps(bad)
    good = [b"data: " + orjson.dumps(chunk_obj({"content": "a"})) + b"\n\n"] * n_before
    tail = [b"data: " + orjson.dumps(chunk_obj({}, finish="stop")) + b"\n\n"]
    stream = b"".join([*good, b"data: " + payload + b"\n\n", *tail,
                       b"data: [DONE]\n\n" if done else b""])
    rec = feed([stream])
    check_typed(rec)


@pytest.mark.parametrize("chunk", [
    b'{"choices": [{"delta": {}, "finish_reason": 5}]}',
    b'{"choices": [{"delta": {}, "finish_reason": ["stop"]}]}',
    b'{"choices": [{"delta": {"content": 5}, "finish_reason": "stop"}]}',
    b'{"choices": [{"delta": {"content": {"a": 1}}, "finish_reason": "stop"}]}',
    b'{"choices": [{"delta": {"reasoning": true}, "finish_reason": "stop"}]}',
])
def test_non_string_text_or_finish_reason_is_malformed(chunk: bytes) -> None:
    """Found by the JSON-level mutations above (their check is only "typed", so they pass)."""
    rec = feed([b"data: " + chunk + b"\n\n"])
    assert rec.failure is not None and rec.failure.kind == "malformed_chunk", rec


@pytest.mark.parametrize(("content_type", "body", "shown"), [
    ("text/html; charset=utf-8", b"<html>" + b"\xff" * 100, b"<html>" + b"\xff" * 74),
    ("text/event-stream", b"<!DOCTYPE html>", b"<!DOCTYPE html>"),
    ("application/json", b"", b""),
])
def test_a_200_answer_that_is_not_an_event_stream_is_a_bad_response(
        content_type: str, body: bytes, shown: bytes) -> None:
    """Another content type, or a body that does not begin as SSE: `bad_response` at once,
    naming the type and the first 80 bytes (of those that came with the first read) as
    Python escapes them."""
    obs = StreamObserver(0, 0)
    read_events([(body, 1)] if body else [], obs, content_type=content_type)
    f = obs.finish().failure
    assert f is not None and (f.kind, f.phase) == ("bad_response", "prefill")
    assert f.message == (f"a 200 answer that is not an event stream: content-type "
                         f"{content_type!r}, its body begins {shown!r}")
