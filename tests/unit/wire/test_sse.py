"""The hot-path SSE splitter against its reference, sseclient-py fed one line at a time:
for any byte stream, cut anywhere, the same payloads in the same order, or the same
UTF-8 failure after the same payloads."""

from __future__ import annotations

import time

import pytest
from fuzzing import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from sseref import LineSource, iter_events

from anvil_metrics.wire.sse import EventSplitter, LineTooLong, begins_as_sse

PIECES = [
    b"data: ", b"data:", b"data", b": comment", b":", b"event: x", b"id: 7", b"retry: 5",
    b"nodata: y", b"\n", b"\n", b"\n", b"\r", b"\r\n", b" ", b"  ", b"\t", b"\x0b", b"\x1c",
    b'{"choices":[{"delta":{"content":"hi"}}]}', b"[DONE]", b"\xc3\xa9", b"\xc2\xa0",
    b"\xe2\x80\xa8", b"\xff", b"\xc3", b"x", b"data: {}", b"\n\n",
]


def _readline_dropping_tail(chunks: list[bytes]):
    """What the client's line reader did: whole `\\n` lines; an unterminated last line is
    dropped at the end of the stream."""
    data = b"".join(chunks)
    lines = data.split(b"\n")
    lines.pop()  # the unterminated remainder (or b"")
    it = iter(line + b"\n" for line in lines)
    return lambda: next(it, b"")


def reference(chunks: list[bytes]) -> tuple[list[str], str | None]:
    out: list[str] = []
    try:
        for data in iter_events(LineSource(_readline_dropping_tail(chunks))):
            out.append(data)
    except UnicodeDecodeError:
        return out, "utf-8"
    return out, None


def splitter(chunks: list[bytes]) -> tuple[list[str], str | None]:
    """The splitter's payloads as str. A payload it hands over as bytes is decoded here,
    as orjson will: invalid UTF-8 there ends the stream at that event, as sseclient-py's
    decoding error does."""
    s = EventSplitter()
    out: list[str] = []

    def take(payloads: list[str | bytes]) -> bool:
        for p in payloads:
            try:
                out.append(p.decode("utf-8") if isinstance(p, bytes) else p)
            except UnicodeDecodeError:
                return False
        return True

    try:
        for chunk in chunks:
            if not take(s.feed(chunk)) or s.error is not None:
                return out, "utf-8"
        if not take(s.end()):
            return out, "utf-8"
    except UnicodeDecodeError:
        return out, "utf-8"
    return out, None


def _cut(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


@settings(max_examples=examples(1500), deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=40), st.lists(st.integers(0, 10_000),
                                                                max_size=8))
def test_splitter_agrees_with_sseclient(pieces: list[bytes], cuts: list[int]) -> None:
    data = b"".join(pieces)
    assert splitter(_cut(data, cuts)) == reference([data])


@settings(max_examples=examples(500), deadline=None)
@given(st.binary(max_size=300), st.lists(st.integers(0, 10_000), max_size=8))
def test_splitter_agrees_on_random_bytes(data: bytes, cuts: list[int]) -> None:
    assert splitter(_cut(data, cuts)) == reference([data])


def test_common_and_odd_events() -> None:
    stream = (b'data: {"a":1}\n\n: keep-alive\n\ndata: x\ndata: y\n\nevent: e\n\n'
              b"data:nospace\r\n\r\ndata: [DONE]\n\n")
    assert splitter([stream]) == (['{"a":1}', "x\ny", "nospace", "[DONE]"], None)
    assert splitter([b"data: a\n\ndata: b\n"]) == (["a", "b"], None)  # left at the end
    assert splitter([b"data: a\n\ndata: b"]) == (["a"], None)  # unterminated line dropped
    assert splitter([b"data: \xc3", b"\xa9\n\n"]) == (["\u00e9"], None)  # é cut in two
    # an invalid event ends the stream after the events before it in the same read
    assert splitter([b"data: a\n\n\xff\n\ndata: b\n\n"]) == (["a"], "utf-8")


def test_a_line_without_end_is_bounded() -> None:
    s = EventSplitter(limit=1000)
    s.feed(b"data: " + b"x" * 500)
    with pytest.raises(LineTooLong):
        s.feed(b"x" * 600)


def test_a_long_event_in_small_reads_is_one_payload() -> None:
    payload = b"y" * 100_000
    stream = b"data: " + payload + b"\n\ndata: [DONE]\n\n"
    reads = [stream[i:i + 1000] for i in range(0, len(stream), 1000)]
    assert splitter(reads) == ([payload.decode(), "[DONE]"], None)
    assert splitter([stream[:-1], stream[-1:]]) == ([payload.decode(), "[DONE]"], None)


def _best_of_5(reads: list[bytes]) -> float:
    best = float("inf")
    for _ in range(5):
        s = EventSplitter()
        t0 = time.perf_counter()
        for r in reads:
            s.feed(r)
        best = min(best, time.perf_counter() - t0)
    return best


def test_a_long_line_costs_its_length_not_its_length_squared() -> None:
    """4 MiB of one line in 8 KiB reads against the same bytes in one read: each read
    is kept, not joined to all before it and scanned again (that cost 41 s for the 16 MiB
    limit; 512 reads of it would be ~250 times the one read, here a few times at most)."""
    line = b"data: " + b"x" * (4 << 20)
    small = _best_of_5([line[i:i + 8192] for i in range(0, len(line), 8192)])
    whole = _best_of_5([line])
    assert small < 30 * whole + 0.01, (small, whole)


@pytest.mark.parametrize(("head", "verdict"), [
    (b"data: {}", True), (b": ping", True), (b"event: x", True), (b"\xef\xbb\xbfdata:", True),
    (b"\r\n\ndata\n", True), (b"retry:", True), (b"", None), (b"da", None), (b"\xef", None),
    (b"data", None), (b"<!DOCTYPE html>", False), (b'{"error":1}', False),
    (b"database", False), (b"idle", False)])
def test_begins_as_sse(head: bytes, verdict: bool | None) -> None:
    assert begins_as_sse(head) is verdict


def test_millions_of_comment_lines_do_not_pile_up_to_the_cap() -> None:
    """Keep-alive comments before an answer: dropped as they come, so neither the line cap
    nor the re-joining of a growing event is reached (the event after them is read)."""
    splitter = EventSplitter(limit=64 * 1024)
    block = b": keep-alive\n" * 5000  # 65 KB a block, a million lines in all
    for _ in range(200):
        assert splitter.feed(block) == []
    assert splitter.feed(b"\ndata: x\n\n") == ["x"]
