"""suite: one case asked — a judge's verdict kept with its timing and retries, a transport
error an errored case, a 4xx refusal a failed one — and a suite's result assembled.

Why: every suite asks through `run_case`; a CheckError that escaped it would end a suite
half-way, and a retry not taken with its own case would be charged to the next one.
"""

from __future__ import annotations

import time

import pytest

from anvil_metrics.checks.client import CheckError
from anvil_metrics.checks.results import Retry
from anvil_metrics.checks.suite import (
    CheckContext,
    CheckOptions,
    Judgement,
    run_case,
    suite_result,
)


class _Client:
    def __init__(self) -> None:
        self.pending: list[Retry] = [Retry(1, 503, "before this case", 0.0)]

    def take_retries(self) -> tuple[Retry, ...]:
        out, self.pending = tuple(self.pending), []
        return out


def _ctx(client: _Client) -> CheckContext:
    return CheckContext(client, CheckOptions())  # type: ignore[arg-type]  # a stand-in


def test_a_judgement_becomes_the_case() -> None:
    client = _Client()

    def judge() -> Judgement:
        client.pending.append(Retry(1, 503, "loading", 0.5))  # during this case
        return Judgement(False, "5", extra={"tokens": 3})

    case = run_case(_ctx(client), "c1", "4", judge)
    assert (case.id, case.passed, case.expected, case.answer) == ("c1", False, "4", "5")
    assert case.error == "wrong answer" and case.extra == {"tokens": 3}
    assert [r.reason for r in case.retries] == ["loading"]  # not the one from before
    assert case.elapsed_s >= 0


@pytest.mark.parametrize(("kind", "errored"), [("transport", True), ("refused", False)])
def test_a_check_error_is_an_errored_or_refused_case(kind: str, errored: bool) -> None:
    def judge() -> Judgement:
        raise CheckError("POST /chat/completions: HTTP 400: no", kind)

    case = run_case(_ctx(_Client()), "c2", "x", judge)
    assert not case.passed and case.errored is errored and case.error_kind == kind
    assert case.error == "POST /chat/completions: HTTP 400: no" and case.answer is None


def test_a_passing_judgement_with_an_error_is_a_bug_in_the_suite() -> None:
    with pytest.raises(ValueError, match="a passing judgement carries an error"):
        run_case(_ctx(_Client()), "c3", "x", lambda: Judgement(True, "x", error="but"))


def test_the_suite_result() -> None:
    passed = run_case(_ctx(_Client()), "c4", "x", lambda: Judgement(True, "x"))
    result = suite_result("json", [passed], time.monotonic(), note=1)
    assert (result.suite, result.result, result.passed, result.total) == ("json", "pass", 1, 1)
    assert result.extra == {"note": 1} and result.elapsed_s >= 0
    assert CheckOptions().context_tokens == 131_072 and CheckOptions().near_limit_tokens is None
