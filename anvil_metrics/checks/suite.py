"""What every suite is given (`CheckContext`) and how it asks one case (`run_case`).

Why its own module: a suite is a list of questions and a judge for each answer; asking,
timing, catching a transport error and collecting retries are the same for all of them and
live here, so a suite module holds only its questions and its scoring.

A suite is a function ``run(ctx: CheckContext) -> SuiteResult``, named in `registry.py`.
A judge returns a `Judgement`; raising `CheckError` makes the case an error ("transport")
or a failure ("refused", a 4xx) — see `client.py`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from anvil_metrics.checks.client import CheckClient, CheckError
from anvil_metrics.checks.results import CaseResult, SuiteResult

DEFAULT_CONTEXT_TOKENS = 131_072
DEFAULT_TIMEOUT_S = 120.0
DEFAULT_LONG_TIMEOUT_S = 1800.0  # one 389k-token prefill took 193 s on a GPU; minutes on CPU
NEAR_LIMIT_MARGIN_TOKENS = 4096  # near_limit asks for the server's limit minus this (rounded)


@dataclass(frozen=True, slots=True)
class CheckOptions:
    """The knobs of a check run (flags of `anvil check`, or a campaign's `[checks]`)."""

    context_tokens: int = DEFAULT_CONTEXT_TOKENS  # retrieval's prompt size
    near_limit_tokens: int | None = None  # None: the server's max_model_len minus the margin
    timeout_s: float = DEFAULT_TIMEOUT_S  # one ordinary request
    long_timeout_s: float = DEFAULT_LONG_TIMEOUT_S  # one long-context request
    seed: int = 0  # retrieval's keys, values and depths
    max_tokens: int | None = None  # caps every answer's budget (None: each suite's own)
    transport: str | None = None  # multimodal: how images reach the model, as the operator says
    speculation: str | None = None  # the variant's speculation (campaigns), for the record


@dataclass(frozen=True, slots=True)
class CheckContext:
    client: CheckClient
    options: CheckOptions
    max_model_len: int | None = None  # from the server's /v1/models, None when it says nothing


@dataclass(frozen=True, slots=True)
class Judgement:
    """A judge's verdict on one answer: `answer` is what the reader is shown."""

    passed: bool
    answer: Any
    error: str | None = None  # why it failed; None when it passed
    extra: Mapping[str, Any] = field(default_factory=dict)


def run_case(ctx: CheckContext, case_id: str, expected: Any,
             judge: Callable[[], Judgement]) -> CaseResult:
    """Ask one case: time it, keep its retries, turn a `CheckError` into an errored or
    refused case. Anything else raised is a bug in the suite and propagates."""
    ctx.client.take_retries()
    t0 = time.monotonic()
    try:
        j = judge()
    except CheckError as e:
        return CaseResult(case_id, False, expected, None, error=str(e), error_kind=e.kind,
                          elapsed_s=time.monotonic() - t0, retries=ctx.client.take_retries())
    if j.passed and j.error is not None:
        raise ValueError(f"case {case_id}: a passing judgement carries an error")
    return CaseResult(case_id, j.passed, expected, j.answer,
                      error=None if j.passed else (j.error or "wrong answer"),
                      elapsed_s=time.monotonic() - t0, retries=ctx.client.take_retries(),
                      extra=j.extra)


def suite_result(suite: str, cases: Sequence[CaseResult], started: float,
                 **extra: Any) -> SuiteResult:
    """The suite's result; `started` is its `time.monotonic()` at the start."""
    return SuiteResult(suite, tuple(cases), time.monotonic() - started, extra)
