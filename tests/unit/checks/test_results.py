"""results: the one rule that turns a suite's cases into its verdict (a transport error is an
error, never a pass and never a failure; a 4xx refusal is a failure), answers cut, retries
kept.

Why: every suite reports through these types; a transport error read as a failure would
blame the model for the network.
"""

from __future__ import annotations

import pytest

from anvil_metrics.checks.results import ANSWER_CHARS, CaseResult, Retry, SuiteResult, verdict


def case(i: int, passed: bool = True, kind: str | None = None) -> CaseResult:
    return CaseResult(f"c{i}", passed, "4", "4" if passed else "5",
                      error=None if passed else "wrong", error_kind=kind)


def test_the_verdict_rule() -> None:
    assert verdict([case(1), case(2)]) == "pass"
    assert verdict([case(1), case(2, False)]) == "fail"
    assert verdict([case(1), case(2, False, "refused")]) == "fail"  # a 4xx: it declined
    assert verdict([case(1), case(2, False), case(3, False, "transport")]) == "error"
    assert verdict([]) == "error"  # nothing was asked: nothing can be said
    with pytest.raises(ValueError, match="passed with an error_kind"):
        CaseResult("x", True, 1, 1, error_kind="transport")
    with pytest.raises(ValueError, match="error_kind 'nope'"):
        CaseResult("x", False, 1, 1, error_kind="nope")


def test_answers_are_cut_and_retries_kept() -> None:
    c = CaseResult("long", False, "x", "y" * 2000, error="wrong", elapsed_s=1.23456,
                   retries=(Retry(1, 503, "loading", 1.0),), extra={"prompt_tokens": 9})
    out = c.to_json()
    assert len(out["answer"]) == ANSWER_CHARS and out["elapsed_s"] == 1.235
    assert out["retries"] == [{"attempt": 1, "status": 503, "reason": "loading",
                               "wait_s": 1.0}]
    assert out["prompt_tokens"] == 9 and "error_kind" not in out
    s = SuiteResult("json", (case(1), case(2, False)), 2.0, {"note": 1})
    assert (s.result, s.passed, s.total) == ("fail", 1, 2)
    assert SuiteResult("json", (), 0.0, error="no jsonschema").result == "error"
