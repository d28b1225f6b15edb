"""The failure table: every rule names a known kind, stage and phase, and each stage maps the
exceptions it meets to the kind the client has always given them (a reset is `connection`
before the response head, `truncated` after; a timeout is always `timeout`; a
gevent.Timeout while writing, like GreenletExit, is not a failure but propagates); and a
refusal for length as each engine words it is a context overflow, nothing else is."""

from __future__ import annotations

import gevent
import pytest
from geventhttpclient.response import HTTPConnectionClosed, HTTPParseError

from anvil_metrics.records import FAILURE_KINDS, PHASES
from anvil_metrics.wire.failures import (
    CAUGHT,
    FAILURE_KINDS_BY_EXCEPTION,
    STAGES,
    classify,
    is_context_overflow,
)
from anvil_metrics.wire.sse import LineTooLong
from anvil_metrics.wire.transport import SilenceTimeout, TotalTimeout


def test_every_rule_names_a_known_kind_stage_and_phase() -> None:
    for rule in FAILURE_KINDS_BY_EXCEPTION:
        assert rule.kind in FAILURE_KINDS, rule
        assert rule.stage in STAGES, rule
        assert rule.phase is None or rule.phase in PHASES, rule


FIELDS = {"total_s": 30.0, "first_byte_s": 5.0, "which": "idle timeout (2 s)"}


@pytest.mark.parametrize("stage,exc,kind,phase,message", [
    ("connect", TimeoutError("timed out"), "timeout", "connect",
     "could not connect within the connect timeout (timed out)"),
    ("connect", gevent.Timeout(1), "timeout", "connect", None),
    ("connect", ConnectionRefusedError(111, "refused"), "connection", "connect",
     "could not connect: ConnectionRefusedError: [Errno 111] refused"),
    ("connect", OSError("no route"), "connection", "connect", None),
    ("send", TotalTimeout(), "timeout", "headers",
     "the request ran past the total timeout (30 s)"),
    ("send", TimeoutError("t"), "timeout", "headers",
     "could not send the request: TimeoutError: t"),
    ("send", BrokenPipeError(32, "pipe"), "connection", "headers", None),
    ("send", ValueError("odd"), "connection", "headers",
     "could not send the request: ValueError: odd"),
    ("headers", TotalTimeout(), "timeout", "headers", None),
    ("headers", SilenceTimeout("s"), "timeout", "headers",
     "no response headers within the first-byte timeout (5 s)"),
    ("headers", gevent.Timeout(1), "timeout", "headers", None),
    ("headers", HTTPConnectionClosed("closed"), "connection", "headers",
     "no valid response headers: HTTPConnectionClosed: closed"),
    ("headers", HTTPParseError("bad"), "connection", "headers", None),
    ("headers", ConnectionResetError(104, "reset"), "connection", "headers", None),
    ("body", TotalTimeout(), "timeout", None, "the request ran past the total timeout (30 s)"),
    ("body", SilenceTimeout("s"), "timeout", None, "no data within the idle timeout (2 s)"),
    ("body", gevent.Timeout(1), "timeout", None, None),
    ("body", ConnectionResetError(104, "reset"), "truncated", None,
     "connection lost mid-stream: ConnectionResetError: [Errno 104] reset"),
    ("body", HTTPConnectionClosed("gone"), "truncated", None, None),
    ("body", HTTPParseError("bad chunk"), "truncated", None, None),
    ("events", LineTooLong("a line longer than 16 bytes"), "malformed_chunk", None,
     "a line longer than 16 bytes"),
    ("events", UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"),
     "malformed_chunk", None, None),
])
def test_each_stage_maps_its_exceptions(stage: str, exc: BaseException, kind: str,
                                        phase: str | None, message: str | None) -> None:
    assert isinstance(exc, CAUGHT[stage])
    got_kind, got_phase, got_message = classify(stage, exc, **FIELDS)
    assert (got_kind, got_phase) == (kind, phase)
    if message is not None:
        assert got_message == message


@pytest.mark.parametrize("stage,exc", [
    ("send", gevent.Timeout(1)), ("send", gevent.GreenletExit()),
    ("headers", ValueError("a bug")), ("body", KeyError("a bug")),
    ("body", gevent.GreenletExit()), ("events", ValueError("x")),
    ("connect", RuntimeError("a bug")),
])
def test_what_no_rule_covers_propagates(stage: str, exc: BaseException) -> None:
    assert not isinstance(exc, CAUGHT[stage])
    with pytest.raises(LookupError):
        classify(stage, exc, **FIELDS)


@pytest.mark.parametrize("status,message", [
    (400, "This model's maximum context length is 4096 tokens. However, you requested 5000 "
          "tokens (4990 in the messages, 10 in the completion). Please reduce the length of "
          "the messages or completion."),  # vLLM, and anvil sim
    (400, "'max_tokens' or 'max_completion_tokens' is too large: 100. This model's maximum "
          "context length is 4096 tokens and your request has 4090 input tokens (100 > 4096 "
          "- 4090)."),  # newer vLLM
    (400, "The decoder prompt (length 5000) is longer than the maximum model length of "
          "4096. Make sure that `max_model_len` is no smaller than the number of text "
          "tokens."),  # vLLM V1
    (400, "The input (5000 tokens) is longer than the model's context length (4096 "
          "tokens)."),  # SGLang
    (400, "Requested token count exceeds the model's maximum context length of 4096 tokens. "
          "You requested a total of 5000 tokens: 4990 tokens from the input messages and 10 "
          "tokens for the completion."),  # SGLang
    (400, "request (5000 tokens) exceeds the available context size (4096 tokens)"),  # llama
    (400, "the request exceeds the available context size, try increasing it"),  # llama.cpp
    (413, "context_length_exceeded"),
])
def test_each_engines_refusal_for_length_is_a_context_overflow(status, message) -> None:
    assert is_context_overflow(status, message)


@pytest.mark.parametrize("status,message", [
    (500, "This model's maximum context length is 4096 tokens."),  # not a refusal
    (400, "temperature must be >= 0"), (503, "busy"), (400, None), (None, "x")])
def test_other_failures_are_not(status, message) -> None:
    assert not is_context_overflow(status, message)
