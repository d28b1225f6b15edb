"""The `reasoning_leakage` suite: with thinking disabled, does reasoning still come out?

Why it exists: a reasoning model served with thinking disabled
(`chat_template_kwargs.enable_thinking=false`) must answer directly. When the chat template,
the reasoning parser or the engine gets this wrong, reasoning leaks: as `reasoning` /
`reasoning_content` deltas, or as `<think>…</think>` inside the content, which every client
then shows to its users and pays for.

Each case asks a short question with one right answer, streamed (deltas are where leaks
show), with thinking disabled. A case passes only if nothing leaked — no reasoning text in
any delta, no `<think>` or `</think>` in the content — AND the answer is right: a server
that answers nonsense must not pass a check just because its nonsense holds no reasoning.

`reasoning_effort` "where set": the check has no option for it, so one case (`effort_low`)
also sends `reasoning_effort: "low"`, as clients that always send an effort do. "low" is the
one value every OpenAI-compatible server accepts (several refuse "none" or "minimal"); with
`enable_thinking=false` beside it, the server must still not reason. (gpt-oss-style models,
which always reason whatever the template says, fail here — correctly: thinking cannot be
disabled on them.)

The suite's `thinking_disabled_reasoning_leakage`: true when any case leaked; false when
none leaked and every case got an answer; None when some case got none (an error or a
refusal), so "no leak seen" is never claimed from a partial run.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from anvil_metrics.checks.results import ANSWER_CHARS, CaseResult, SuiteResult
from anvil_metrics.checks.suite import CheckContext, Judgement, run_case, suite_result

SUITE = "reasoning_leakage"
MAX_TOKENS = 200
SHORT_ANSWER_WORDS = 12  # a longer answer is not the short answer asked for
THINK_TAG = re.compile(r"</?think>", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class ReasoningCase:
    id: str
    prompt: str
    answer: str  # the right answer, one word or number
    reasoning_effort: str | None = None


CASES: tuple[ReasoningCase, ...] = (
    ReasoningCase("sum", "What is 17 + 25? Reply with the number only.", "42"),
    ReasoningCase("capital", "What is the capital city of Italy? Reply with one word only.",
                  "Rome"),
    ReasoningCase("opposite", "What is the opposite of the word \"hot\"? Reply with one "
                  "word only.", "cold"),
    ReasoningCase("effort_low", "What is 9 times 7? Reply with the number only.", "63",
                  reasoning_effort="low"),
)
CASE_BY_PROMPT = {c.prompt: c for c in CASES}


def request_body(case: ReasoningCase) -> dict[str, Any]:
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": case.prompt}],
        "stream": True,
        "temperature": 0,
        "max_tokens": MAX_TOKENS,
        "chat_template_kwargs": {"enable_thinking": False},
    }
    if case.reasoning_effort is not None:
        body["reasoning_effort"] = case.reasoning_effort
    return body


# -- scoring (pure) ----------------------------------------------------------------------------


def short_answer_problem(content: str, expected: str) -> str | None:
    """None when `content` is a short answer that says `expected` (as a whole word, case
    ignored), else why not. Short: at most `SHORT_ANSWER_WORDS` words, so an answer that
    lists candidates does not pass; "17 + 25 = 42." passes, as a person would judge it."""
    text = content.strip()
    if not text:
        return "the answer is empty"
    if len(text.split()) > SHORT_ANSWER_WORDS:
        return f"not a short answer ({len(text.split())} words): {text[:80]!r}"
    if not re.search(rf"(?<!\w){re.escape(expected)}(?!\w)", text, re.IGNORECASE):
        return f"expected {expected!r}, got {text[:80]!r}"
    return None


def leak_problem(content: str, reasoning: str) -> str | None:
    """Why this answer leaked reasoning, None when it did not. Whitespace alone is not
    reasoning: transformers serve opens every answer with a "\n\n" reasoning delta even
    with thinking disabled (measured, tests/realserver), and no thought leaks through it."""
    if reasoning.strip():
        return f"reasoning streamed with thinking disabled: {reasoning[:80]!r}"
    tag = THINK_TAG.search(content)
    if tag:
        return f"{tag.group(0)} in the content with thinking disabled"
    return None


def visible_answer(content: str) -> str:
    """The content without leaked thinking: what follows the last `</think>`, and before
    an unclosed `<think>` (the answer is judged on this; the tags are judged as a leak)."""
    lower = content.lower()
    if "</think>" in lower:
        content = content[lower.rindex("</think>") + len("</think>"):]
    start = content.lower().find("<think>")
    return content if start < 0 else content[:start]


def judge_answer(case: ReasoningCase, content: str, reasoning: str) -> Judgement:
    leak = leak_problem(content, reasoning)
    wrong = short_answer_problem(visible_answer(content), case.answer)
    problem = "; ".join(p for p in (leak, wrong) if p) or None
    shown = {"content": content[:ANSWER_CHARS], "reasoning": reasoning[:ANSWER_CHARS]}
    return Judgement(problem is None, shown, problem, extra={"leaked": leak is not None})


def leakage_of(cases: Sequence[CaseResult]) -> bool | None:
    """The suite's `thinking_disabled_reasoning_leakage` (see the module docstring)."""
    if any(c.extra.get("leaked") for c in cases):
        return True
    if not cases or any(c.error_kind is not None for c in cases):
        return None
    return False


# -- the suite ---------------------------------------------------------------------------------


def run_reasoning_leakage(ctx: CheckContext) -> SuiteResult:
    started = time.monotonic()
    results = []
    for case in CASES:
        def judge(case: ReasoningCase = case) -> Judgement:
            answer = ctx.client.chat(request_body(case))
            return judge_answer(case, answer.content, answer.reasoning)
        expected = f"{case.answer}, with no reasoning and no <think> in the content"
        results.append(run_case(ctx, case.id, expected, judge))
    return suite_result(SUITE, results, started,
                        thinking_disabled_reasoning_leakage=leakage_of(results))
