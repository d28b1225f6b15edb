"""`retrieval` and `near_limit`: can the model still find one fact in a very long prompt?

A quantization or a KV-cache format that degrades attention far from the question passes
every short check and loses the needle at 131k tokens. So, RULER-style (multi-key needle in
a haystack): sentence-like filler with several "The special magic value for KEY is VALUE."
sentences, one asked for and the others distractors, at several depths; the answer passes
when it contains the asked VALUE exactly (and no distractor's value). Keys, values and
depths come from `--seed`.

The prompt's size is part of the verdict: a check that claims 131k tokens must have sent
131k tokens, so each case's `usage.prompt_tokens` must be within `SIZE_TOLERANCE_PCT` of
the plan (planned and measured are kept in the case). Sizing (`haystack.py`) is done once
per suite; each case then costs one long request, with `--long-timeout`.

`near_limit` asks one such question at the server's limit less a margin (`--near-limit`,
else max_model_len - 4096 rounded down to a thousand: 393,216 -> 389,000) and reports how
long that request took. A prompt the server cannot take (planned context plus the answer's
tokens above its max_model_len) fails without being sent: the server was not asked to do
what the check needs, and a 400 after minutes of upload says less than this.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from anvil_metrics.checks.client import CheckError
from anvil_metrics.checks.haystack import (
    Fit,
    Haystack,
    SizingError,
    fit_words,
    make_haystacks,
    new_nonce,
    prompt_text,
    start_words,
)
from anvil_metrics.checks.results import SuiteResult
from anvil_metrics.checks.suite import (
    NEAR_LIMIT_MARGIN_TOKENS,
    CheckContext,
    Judgement,
    run_case,
    suite_result,
)
from anvil_metrics.prep.prompts import (
    Calibration,
    CountTokens,
    calibrate_by_probe,
    messages_for,
)

DEPTHS = (0.1, 0.35, 0.65, 0.9)
DISTRACTORS = 4
NEAR_LIMIT_DEPTH = 0.5
SIZE_TOLERANCE_PCT = 0.5
ANSWER_TOKENS = 2048  # a short answer, and room to think first; counted in the limit


def case_id(depth: float) -> str:
    return f"depth_{round(depth * 100):02d}"


def over_limit(planned_tokens: int, max_model_len: int | None, option: str) -> str | None:
    """Why a prompt of `planned_tokens` cannot be asked of this server, None when it can
    (or when the server does not say its limit: then it is asked)."""
    if max_model_len is None or planned_tokens + ANSWER_TOKENS <= max_model_len:
        return None
    return (f"context {planned_tokens} (+{ANSWER_TOKENS} answer tokens) exceeds the server's "
            f"max_model_len {max_model_len}; pass {option}")


def near_limit_tokens(option: int | None, max_model_len: int | None) -> int | None:
    """near_limit's prompt size: the option, else the limit less the margin rounded down to
    a thousand (393,216 -> 389,000); None when neither is known."""
    if option is not None:
        return option
    if max_model_len is None:
        return None
    return (max_model_len - NEAR_LIMIT_MARGIN_TOKENS) // 1000 * 1000


def size_error_pct(prompt_tokens: int, planned_tokens: int) -> float:
    return (prompt_tokens - planned_tokens) / planned_tokens * 100


def judge_needle(haystack: Haystack, content: str, prompt_tokens: int | None,
                 planned_tokens: int, finish_reason: str | None = None
                 ) -> tuple[bool, str | None]:
    """(passed, why not): the asked value is in `content` exactly, no distractor's value
    is, and the server's count of the prompt is within `SIZE_TOLERANCE_PCT` of the plan.
    Thinking left inline in the content (up to a `</think>`) is not judged: weighing the
    candidates there is no wrong answer."""
    problems = []
    value = haystack.needle.value
    content = content.rsplit("</think>", 1)[-1]  # thinking inline in the content is not the answer
    others = [v for v in haystack.distractor_values if v in content]
    if value not in content:
        if others:
            problems.append(f"answered another key's value {others[0]}, not {value}")
        elif not content.strip():
            problems.append(f"no answer (empty content, finish_reason {finish_reason})")
        else:
            problems.append(f"the value {value} is not in the answer")
    elif others:
        problems.append(f"the answer also gives another key's value {others[0]}")
    if prompt_tokens is None:
        problems.append("the answer has no usage.prompt_tokens: the prompt's size is not "
                        "verified")
    else:
        miss = size_error_pct(prompt_tokens, planned_tokens)
        if abs(miss) > SIZE_TOLERANCE_PCT:
            problems.append(f"the prompt was {prompt_tokens} tokens by usage.prompt_tokens, "
                            f"{miss:+.2f} % off the planned {planned_tokens} (allowed "
                            f"±{SIZE_TOLERANCE_PCT} %)")
    return (not problems, "; ".join(problems) or None)


def _count(ctx: CheckContext, messages: list[dict], timeout_s: float) -> int:
    """The server's count of `messages`: a `max_tokens=1` probe's `usage.prompt_tokens`."""
    answer = ctx.client.chat({"messages": messages, "max_tokens": 1}, timeout_s=timeout_s)
    if answer.prompt_tokens is None:
        raise SizingError("the server's answer has no usage.prompt_tokens, so the prompt "
                          "cannot be sized or its size verified")
    return answer.prompt_tokens


class Sizer:
    """The filler's word count for `planned_tokens`, fitted on the first call (the first
    case's time and retries carry it) and kept — or its failure kept, so later cases fail
    or error the same way without asking again."""

    def __init__(self, ctx: CheckContext, suite: str, planned_tokens: int,
                 haystack: Haystack) -> None:
        self.ctx = ctx
        self.suite = suite
        self.planned_tokens = planned_tokens
        self.haystack = haystack
        self._outcome: Fit | Exception | None = None
        self.probes: int | None = None  # sizing requests spent (2 short, the rest long)

    def fit(self) -> Fit:
        if self._outcome is None:
            try:
                self._outcome = self._fit()
            except (CheckError, SizingError) as e:
                self._outcome = e
        if isinstance(self._outcome, Exception):
            raise self._outcome
        return self._outcome

    def _fit(self) -> Fit:
        ctx, seed = self.ctx, self.ctx.options.seed
        calibration = calibrate_by_probe(
            lambda m: _count(ctx, m, ctx.options.timeout_s), seed)
        fit = fit_haystack(lambda m: _count(ctx, m, ctx.options.long_timeout_s), calibration,
                           self.planned_tokens, self.haystack, seed, self.suite)
        self.probes = 2 + fit.probes
        return sized(fit, self.planned_tokens)


def fit_haystack(count: CountTokens, calibration: Calibration, planned_tokens: int,
                 haystack: Haystack, seed: int, suite: str) -> Fit:
    """The filler's word count that makes `haystack`'s prompt `planned_tokens` by `count`
    (the server's count of a chat prompt): the one sizing, `anvil check`'s and a check
    class's under load (`underload`)."""
    first = start_words(calibration, planned_tokens, haystack)
    nonce = new_nonce()  # the probes' own: no case is served from their cache

    def count_words(words: int) -> int:
        return count(messages_for(prompt_text(haystack, words, seed, suite, nonce, first)))

    return fit_words(count_words, planned_tokens, calibration, first)


def sized(fit: Fit, planned_tokens: int) -> Fit:
    """`fit`, or a `SizingError` when its closest count is not within the tolerance."""
    if abs(size_error_pct(fit.counted_tokens, planned_tokens)) > SIZE_TOLERANCE_PCT:
        raise SizingError(f"the prompt could not be sized: the closest of {fit.probes} "
                          f"probes was {fit.counted_tokens} tokens for the planned "
                          f"{planned_tokens}")
    return fit


@dataclass(frozen=True, slots=True)
class _Plan:
    suite: str
    planned_tokens: int
    refused: str | None  # over the server's limit: not asked


def _ask(ctx: CheckContext, plan: _Plan, haystack: Haystack, sizer: Sizer) -> Judgement:
    extra: dict[str, Any] = {"planned_tokens": plan.planned_tokens, "prompt_tokens": None,
                             "key": haystack.needle.key, "depth": haystack.needle.depth}
    if plan.refused is not None:
        return Judgement(False, None, plan.refused, extra)
    try:
        fit = sizer.fit()
    except SizingError as e:
        return Judgement(False, None, str(e), extra)
    text = prompt_text(haystack, fit.words, ctx.options.seed, plan.suite, new_nonce())
    t0 = time.monotonic()
    answer = ctx.client.chat({"messages": messages_for(text), "max_tokens": ANSWER_TOKENS,
                              "temperature": 0}, timeout_s=ctx.options.long_timeout_s)
    extra["request_elapsed_s"] = round(time.monotonic() - t0, 3)
    extra["prompt_tokens"] = answer.prompt_tokens
    if answer.prompt_tokens is not None:
        extra["size_error_pct"] = round(size_error_pct(answer.prompt_tokens,
                                                       plan.planned_tokens), 3)
    passed, error = judge_needle(haystack, answer.content, answer.prompt_tokens,
                                 plan.planned_tokens, answer.finish_reason)
    return Judgement(passed, answer.content, error, extra)


def run_retrieval(ctx: CheckContext) -> SuiteResult:
    """Four needles at depths 10/35/65/90 % of a `--context`-token prompt."""
    started = time.monotonic()
    planned = ctx.options.context_tokens
    plan = _Plan("retrieval", planned, over_limit(planned, ctx.max_model_len, "--context"))
    haystacks = make_haystacks(ctx.options.seed, DEPTHS, DISTRACTORS)
    sizer = Sizer(ctx, plan.suite, planned, haystacks[0])
    cases = [run_case(ctx, case_id(h.needle.depth), h.needle.value,
                      lambda h=h: _ask(ctx, plan, h, sizer)) for h in haystacks]
    return suite_result("retrieval", cases, started, requested_context_tokens=planned,
                        depths=list(DEPTHS), distractors=DISTRACTORS,
                        sizing_probes=sizer.probes)


def run_near_limit(ctx: CheckContext) -> SuiteResult:
    """One needle in a prompt at the server's limit less a margin; the request's time."""
    started = time.monotonic()
    planned = near_limit_tokens(ctx.options.near_limit_tokens, ctx.max_model_len)
    if planned is None:
        return SuiteResult("near_limit", (), time.monotonic() - started,
                           {"requested_context_tokens": None},
                           error="the server does not say its max_model_len and --near-limit "
                           "was not given: no size to ask near")
    plan = _Plan("near_limit", planned, over_limit(planned, ctx.max_model_len, "--near-limit"))
    (haystack,) = make_haystacks(ctx.options.seed, (NEAR_LIMIT_DEPTH,), DISTRACTORS,
                                 salt="near_limit")
    sizer = Sizer(ctx, plan.suite, planned, haystack)
    case = run_case(ctx, "near_limit", haystack.needle.value,
                    lambda: _ask(ctx, plan, haystack, sizer))
    return suite_result("near_limit", [case], started, requested_context_tokens=planned,
                        prompt_tokens=case.extra.get("prompt_tokens"),
                        request_elapsed_s=case.extra.get("request_elapsed_s"),
                        sizing_probes=sizer.probes)
