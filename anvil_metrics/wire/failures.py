"""Which failure an exception is: the one table the client's except-clauses consult.

A request fails in one of five stages — connecting, writing, reading the response head,
reading the body, splitting the body into events — and what a given exception means
depends on the stage: a reset before the response head is a `connection` failure, the same
reset mid-body a `truncated` one. `FAILURE_KINDS_BY_EXCEPTION` lists, per stage and in the
order they are tried, the exception types anvil turns into failures, the failure kind (one
of `records.FAILURE_KINDS`; tests/unit/wire/test_failures.py holds them so), the phase when
the stage fixes it (None: the stream's phase, `prefill` or `decode`, when it failed) and the
message. An exception no row of its stage matches is not a failure of the request: it propagates (a
bug: `client_error`; a stop: `cancelled`, both recorded by `users.py`). Locust keeps the
same idea in its `FAILURE_EXCEPTIONS` tuple.

`is_context_overflow` says which HTTP failures were refusals for length, as each engine
words them (the `jobs` block's validity verdict counts them).

Messages are `str.format` templates over: `error` (`TypeName: text`), `text` (the
exception's own text) and what the caller passes (`total_s`, `first_byte_s`, `which`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from anvil_metrics.wire.sse import LineTooLong
from anvil_metrics.wire.transport import (
    CONNECTION_ERRORS,
    TIMEOUT_ERRORS,
    Cancelled,
    HeadTooLong,
    TotalTimeout,
)

STAGES = ("connect", "send", "headers", "body", "events")


@dataclass(frozen=True, slots=True)
class FailureRule:
    """`exceptions` raised in `stage` are a `kind` failure in `phase` (None: the stream's)."""

    stage: str
    exceptions: tuple[type[BaseException], ...]
    kind: str
    phase: str | None
    message: str


_TOTAL = "the request ran past the total timeout ({total_s:g} s)"
CANCELLED_MESSAGE = "cancelled on purpose by the client (--cancel-after)"

FAILURE_KINDS_BY_EXCEPTION: tuple[FailureRule, ...] = (
    FailureRule("connect", TIMEOUT_ERRORS, "timeout", "connect",
                "could not connect within the connect timeout ({text})"),
    FailureRule("connect", (ConnectionError, OSError), "connection", "connect",
                "could not connect: {error}"),
    FailureRule("send", (Cancelled,), "aborted", "headers", CANCELLED_MESSAGE),
    FailureRule("send", (TotalTimeout,), "timeout", "headers", _TOTAL),
    # an Exception only: a gevent.Timeout (a BaseException) raised while writing is not
    # caught here, as GreenletExit is not
    FailureRule("send", (TimeoutError,), "timeout", "headers",
                "could not send the request: {error}"),
    FailureRule("send", (Exception,), "connection", "headers",
                "could not send the request: {error}"),
    FailureRule("headers", (Cancelled,), "aborted", "headers", CANCELLED_MESSAGE),
    FailureRule("headers", (TotalTimeout,), "timeout", "headers", _TOTAL),
    FailureRule("headers", TIMEOUT_ERRORS, "timeout", "headers",
                "no response headers within the first-byte timeout ({first_byte_s:g} s)"),
    FailureRule("headers", (HeadTooLong,), "bad_response", "headers", "{text}"),
    FailureRule("headers", CONNECTION_ERRORS, "connection", "headers",
                "no valid response headers: {error}"),
    FailureRule("body", (Cancelled,), "aborted", None, CANCELLED_MESSAGE),
    FailureRule("body", (TotalTimeout,), "timeout", None, _TOTAL),
    FailureRule("body", TIMEOUT_ERRORS, "timeout", None, "no data within the {which}"),
    FailureRule("body", CONNECTION_ERRORS, "truncated", None,
                "connection lost mid-stream: {error}"),
    FailureRule("events", (UnicodeDecodeError,), "malformed_chunk", None,
                "stream is not valid UTF-8: {text}"),
    FailureRule("events", (LineTooLong,), "malformed_chunk", None, "{text}"),
)

# the stage's rules, in order: one tuple lookup per failure, no scan of other stages
_BY_STAGE: dict[str, tuple[FailureRule, ...]] = {
    stage: tuple(r for r in FAILURE_KINDS_BY_EXCEPTION if r.stage == stage)
    for stage in STAGES
}
# every stage's exceptions at once, for the except-clauses
CAUGHT: dict[str, tuple[type[BaseException], ...]] = {
    stage: tuple(e for r in rules for e in r.exceptions) for stage, rules in _BY_STAGE.items()
}


def classify(stage: str, exc: BaseException, **fields: object) -> tuple[str, str | None, str]:
    """(kind, phase or None for the stream's, message) of `exc` raised in `stage`.
    Raises LookupError for an exception no rule of the stage covers (the caller's
    except-clause names `CAUGHT[stage]`, so that is a bug)."""
    for rule in _BY_STAGE[stage]:
        if isinstance(exc, rule.exceptions):
            msg = rule.message.format(error=f"{type(exc).__name__}: {exc}", text=str(exc),
                                      **fields)
            return rule.kind, rule.phase, msg
    raise LookupError(f"no failure rule of stage {stage!r} covers {type(exc).__name__}")


# How servers word a prompt too long for the context (HTTP 400, or 413): vLLM ("This
# model's maximum context length is N tokens. However, you requested …"; V1's "The decoder
# prompt (length N) is longer than the maximum model length of M"), SGLang ("The input (N
# tokens) is longer than the model's context length (M tokens)."; "Requested token count
# exceeds the model's maximum context length of N tokens"), llama.cpp (error type
# `exceed_context_size_error`: "request (N tokens) exceeds the available context size (M
# tokens)", older "the request exceeds the available context size, try increasing it"),
# OpenAI's code `context_length_exceeded`, and `anvil sim` (vLLM's words)
_CONTEXT_OVERFLOW = re.compile(
    r"maximum context length|longer than the (?:model's context length|maximum model "
    r"length)|exceeds? the (?:available context size|model's maximum context length)|"
    r"exceed_context_size_error|context_length_exceeded", re.IGNORECASE)
CONTEXT_OVERFLOW_STATUSES = (400, 413)


def is_context_overflow(http_status: int | None, message: str | None) -> bool:
    """Whether a failed request was refused for its length: an HTTP 400 or 413 whose
    message names the context as vLLM, SGLang, llama.cpp or the simulator word it."""
    return (http_status in CONTEXT_OVERFLOW_STATUSES and message is not None
            and _CONTEXT_OVERFLOW.search(message) is not None)
