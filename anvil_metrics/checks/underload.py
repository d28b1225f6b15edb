"""A check suite as a request class of the load (`[[request_class]] check = "json"`).

Why: a suite run by `anvil check` asks one question at a time, outside any load; a server
that answers right alone and wrong under batch pressure (batch-variant numerics, a
structured-output, tool-parser or speculative-decoding bug that shows only when batched)
passes it. A check class sends the suite's own questions inside the measured load, streamed
like every request, and each finished answer is judged by the suite's own judge — nothing
here judges anything itself.

Each suite judged one answer at a time from its stream has an entry in `SUITES`: its number
of cases, case k's chat body (the suite's own; the load adds the model, `stream` and the
usage option) and its judge of the answer as the observer kept it (`wire.observe.
KeptAnswer`). Request k of a check class asks case k mod n (k: the request index, so the
case is the same in whichever user, worker or order it is sent). The verdict is `(passed,
reason)`: the judge's own words for a failure, cut to `REASON_CHARS`; an answer longer
than the observer keeps (`KEEP_CHARS`) fails without being judged.

- `json`, `reasoning_leakage`: every case.
- `tools`: the 20 cases of `toolcases.TOOL_CASES` (one question, one answer; the calls
  streamed and assembled by index as `anvil check streaming_tools` assembles them, then
  judged as `tools` judges a whole answer). `tool_result_recovery` is left out: its cases
  answer a conversation that carries a tool's result, a second turn of the first.
- `retrieval`: its 4 needles (depths 10/35/65/90 %) in a prompt of the class's
  `context_tokens`, sized before the load by the server's count as `anvil check retrieval`
  sizes it (`retrieval.fit_haystack`), each request's own nonce in its head (no prefix
  cache serves one request from another); judged with the server's `usage.prompt_tokens`
  (within `SIZE_TOLERANCE_PCT` of the plan, as the check asks).

Measured cost of a judgement (this machine, `tests/unit/checks/test_underload.py` times
it loosely): json ~60 µs an answer (orjson and jsonschema; jsonschema's import, ~0.1 s, is
paid once before the load by `prepare`), reasoning_leakage ~3 µs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from anvil_metrics.checks import jsonmode, reasoning, retrieval, toolcases, tools
from anvil_metrics.checks.client import ToolCall, add_tool_fragments
from anvil_metrics.checks.haystack import Haystack, make_haystacks, prompt_text, start_words
from anvil_metrics.checks.suite import Judgement
from anvil_metrics.prep.prompts import (
    Calibration,
    CountTokens,
    calibrate_by_probe,
    messages_for,
)
from anvil_metrics.wire.observe import KEEP_CHARS, KeptAnswer

REASON_CHARS = 160  # a failure's reason as a record keeps it
NONCE = "\u2063nonce\u2063"  # where a retrieval body's head takes its request's nonce


@dataclass(frozen=True, slots=True)
class JudgedSuite:
    """One suite as a check class uses it."""

    name: str
    cases: int
    body: Callable[[int], dict[str, Any]]  # case k's chat body (k < cases)
    judge: Callable[[int, KeptAnswer], Judgement]  # (case k, its answer)
    case_id: Callable[[int], str]
    sized: bool = False  # its prompts are the class's `context_tokens` (`Haystacks`)


def _json_judge(k: int, answer: KeptAnswer) -> Judgement:
    return jsonmode.judge_content(jsonmode.CASES[k], answer.content)


def _reasoning_judge(k: int, answer: KeptAnswer) -> Judgement:
    return reasoning.judge_answer(reasoning.CASES[k], answer.content, answer.reasoning)


def _tools_judge(k: int, answer: KeptAnswer) -> Judgement:
    case = toolcases.TOOL_CASES[k]
    calls: list[ToolCall] = []
    add_tool_fragments(calls, answer.tool_fragments)
    why = tools.judge_calls(case.calls, calls, answer.content, case.text_contains)
    return Judgement(why is None, None, why)


def _no_body(k: int) -> dict[str, Any]:
    raise AssertionError("a sized suite's bodies are its Haystacks'")


def _no_judge(k: int, answer: KeptAnswer) -> Judgement:
    raise AssertionError("a sized suite's judge is its Haystacks'")


SUITES: dict[str, JudgedSuite] = {
    jsonmode.SUITE: JudgedSuite(
        jsonmode.SUITE, len(jsonmode.CASES),
        lambda k: jsonmode.request_body(jsonmode.CASES[k]), _json_judge,
        lambda k: jsonmode.CASES[k].id),
    reasoning.SUITE: JudgedSuite(
        reasoning.SUITE, len(reasoning.CASES),
        lambda k: reasoning.request_body(reasoning.CASES[k]), _reasoning_judge,
        lambda k: reasoning.CASES[k].id),
    "tools": JudgedSuite(
        "tools", len(toolcases.TOOL_CASES),
        lambda k: tools.tool_body(toolcases.TOOL_CASES[k], stream=False), _tools_judge,
        lambda k: toolcases.TOOL_CASES[k].id),
    "retrieval": JudgedSuite(
        "retrieval", len(retrieval.DEPTHS), _no_body, _no_judge,
        lambda k: retrieval.case_id(retrieval.DEPTHS[k]), sized=True),
}


def case_of(suite: str, index: int) -> int:
    """Request `index`'s case of `suite`: index mod its number of cases."""
    return index % SUITES[suite].cases


def case_body(suite: str, index: int) -> dict[str, Any]:
    """Request `index`'s body as the suite asks it (no model, not yet streamed)."""
    return SUITES[suite].body(case_of(suite, index))


def verdict(suite: str, index: int, answer: KeptAnswer,
            judge: Callable[[int, KeptAnswer], Judgement] | None = None
            ) -> tuple[bool, str | None]:
    """Request `index`'s answer judged by its suite's own judge (`judge`: a sized suite's,
    its `Haystacks.judge`): (passed, None) or (False, the judge's reason, at most
    `REASON_CHARS`)."""
    if answer.cut:
        return False, f"the answer is longer than the {KEEP_CHARS} characters kept to judge it"
    j = (judge or SUITES[suite].judge)(case_of(suite, index), answer)
    return j.passed, None if j.passed else (j.error or "wrong answer")[:REASON_CHARS]


def prepare(suite: str) -> None:
    """Pay a judge's one-off costs before the load (jsonschema's import, ~0.1 s)."""
    if suite == jsonmode.SUITE:
        jsonmode.schema_problem({}, jsonmode.CASES[0].schema)


class Haystacks:
    """The retrieval suite under load: its needles' prompts of `planned_tokens`, sized
    before the load by `count` (the server's count; `calibration` its linear fit, counted
    anew when it has none), as `anvil check retrieval` sizes them; without `count` (a
    distributed worker) the calibration's estimate. A `SizingError` when the fit misses."""

    def __init__(self, planned_tokens: int, seed: int, count: CountTokens | None,
                 calibration: Calibration) -> None:
        self.planned_tokens = planned_tokens
        self.cases: tuple[Haystack, ...] = make_haystacks(seed, retrieval.DEPTHS,
                                                          retrieval.DISTRACTORS)
        if count is None:
            words = start_words(calibration, planned_tokens, self.cases[0])
        else:
            if calibration.method == "none":
                calibration = calibrate_by_probe(count, seed)
            words = retrieval.sized(retrieval.fit_haystack(
                count, calibration, planned_tokens, self.cases[0], seed, "retrieval"),
                planned_tokens).words
        self.words = words
        self._texts = [prompt_text(h, words, seed, "retrieval", NONCE) for h in self.cases]

    def body(self, index: int) -> dict[str, Any]:
        """Request `index`'s body with `NONCE` where its head's nonce goes."""
        return {"messages": messages_for(self._texts[case_of("retrieval", index)]),
                "max_tokens": retrieval.ANSWER_TOKENS, "temperature": 0}

    def judge(self, k: int, answer: KeptAnswer) -> Judgement:
        passed, why = retrieval.judge_needle(self.cases[k], answer.content,
                                             answer.prompt_tokens, self.planned_tokens,
                                             answer.finish_reason)
        return Judgement(passed, None, why)
