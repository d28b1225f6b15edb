"""A check suite as a request class of the load (`[[request_class]] check = "json"`).

Why: a suite run by `anvil check` asks one question at a time, outside any load; a server
that answers right alone and wrong under batch pressure (batch-variant numerics, a
structured-output or speculative-decoding bug that shows only when batched) passes it. A
check class sends the suite's own questions inside the measured load, streamed like every
request, and each finished answer is judged by the suite's own judge — nothing here judges
anything itself.

Each suite judged one answer at a time from its streamed text has an entry in `SUITES`:
its number of cases, case k's chat body (the suite's `request_body`; the load adds the
model, `stream` and the usage option) and its judge of (content, reasoning). Request k of
a check class asks case k mod n (k: the request index, so the case is the same in
whichever user, worker or order it is sent). The verdict is `(passed, reason)`: the judge's
own words for a failure, cut to `REASON_CHARS`. The text kept for the judge is the
answer's own (content and reasoning deltas), kept only for a check class's requests.

Measured cost of a judgement (this machine, `tests/unit/checks/test_underload.py` times
it loosely): json ~60 µs an answer (orjson and jsonschema; jsonschema's import, ~0.1 s, is
paid once before the load by `prepare`), reasoning_leakage ~3 µs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from anvil_metrics.checks import jsonmode, reasoning
from anvil_metrics.checks.suite import Judgement

REASON_CHARS = 160  # a failure's reason as a record keeps it


@dataclass(frozen=True, slots=True)
class JudgedSuite:
    """One suite as a check class uses it."""

    name: str
    cases: int
    body: Callable[[int], dict[str, Any]]  # case k's chat body (k < cases)
    judge: Callable[[int, str, str], Judgement]  # (case k, content, reasoning)
    case_id: Callable[[int], str]


def _json_judge(k: int, content: str, _reasoning: str) -> Judgement:
    return jsonmode.judge_content(jsonmode.CASES[k], content)


def _reasoning_judge(k: int, content: str, thought: str) -> Judgement:
    return reasoning.judge_answer(reasoning.CASES[k], content, thought)


SUITES: dict[str, JudgedSuite] = {
    jsonmode.SUITE: JudgedSuite(
        jsonmode.SUITE, len(jsonmode.CASES),
        lambda k: jsonmode.request_body(jsonmode.CASES[k]), _json_judge,
        lambda k: jsonmode.CASES[k].id),
    reasoning.SUITE: JudgedSuite(
        reasoning.SUITE, len(reasoning.CASES),
        lambda k: reasoning.request_body(reasoning.CASES[k]), _reasoning_judge,
        lambda k: reasoning.CASES[k].id),
}


def case_of(suite: str, index: int) -> int:
    """Request `index`'s case of `suite`: index mod its number of cases."""
    return index % SUITES[suite].cases


def case_body(suite: str, index: int) -> dict[str, Any]:
    """Request `index`'s body as the suite asks it (no model, not yet streamed)."""
    return SUITES[suite].body(case_of(suite, index))


def verdict(suite: str, index: int, content: str, thought: str) -> tuple[bool, str | None]:
    """Request `index`'s answer judged by its suite's own judge: (passed, None) or (False,
    the judge's reason, at most `REASON_CHARS`)."""
    s = SUITES[suite]
    j = s.judge(case_of(suite, index), content, thought)
    return j.passed, None if j.passed else (j.error or "wrong answer")[:REASON_CHARS]


def prepare(suite: str) -> None:
    """Pay a judge's one-off costs before the load (jsonschema's import, ~0.1 s)."""
    if suite == jsonmode.SUITE:
        jsonmode.schema_problem({}, jsonmode.CASES[0].schema)
