"""reasoning: the reasoning_leakage suite's scoring — a short answer found, a leak (reasoning
streamed, a think tag in the content) named, the run's leakage figure from its cases.

Why: a leak is a promotion gate; an answer judged with its leaked thinking left in, or a
transport error read as "no leak", would pass a model that thinks when told not to.
"""

from __future__ import annotations

import pytest

from anvil_metrics.checks import reasoning
from anvil_metrics.checks.results import CaseResult


@pytest.mark.parametrize("content,ok", [
    ("42", True), (" 42.\n", True), ("17 + 25 = 42", True), ("The answer is 42.", True),
    ("421", False), ("forty-two", False), ("", False),
    ("42 " + "and more words " * 5, False),
])
def test_short_answer(content: str, ok: bool) -> None:
    assert (reasoning.short_answer_problem(content, "42") is None) is ok


def test_short_answer_ignores_case() -> None:
    assert reasoning.short_answer_problem("rome.", "Rome") is None


def test_leak_needs_no_reasoning_and_no_think_tag() -> None:
    case = reasoning.CASES[0]
    assert reasoning.judge_answer(case, "42", "").passed
    leaked = reasoning.judge_answer(case, "42", "Let me think")
    assert not leaked.passed and leaked.extra == {"leaked": True}
    assert "reasoning streamed" in leaked.error
    tag = reasoning.judge_answer(case, "<think>hmm</think>42", "")
    assert not tag.passed and tag.extra["leaked"] and "<think>" in tag.error
    closing = reasoning.judge_answer(case, "hmm</THINK>42", "")
    assert not closing.passed and closing.extra["leaked"]
    wrong = reasoning.judge_answer(case, "41", "")
    assert not wrong.passed and wrong.extra == {"leaked": False}
    # transformers serve's whitespace-only reasoning delta carries no thought
    assert reasoning.judge_answer(case, "42", "\n\n").passed


def test_the_requests_disable_thinking_and_one_sets_an_effort() -> None:
    bodies = [reasoning.request_body(c) for c in reasoning.CASES]
    assert all(b["chat_template_kwargs"] == {"enable_thinking": False} and b["stream"]
               for b in bodies)
    assert [b.get("reasoning_effort") for b in bodies].count("low") == 1


def _case(leaked: bool | None, kind: str | None = None) -> CaseResult:
    extra = {} if leaked is None else {"leaked": leaked}
    return CaseResult("c", False, "x", None, error="e" if kind else None, error_kind=kind,
                      extra=extra)


def test_leakage_figure() -> None:
    assert reasoning.leakage_of([_case(False), _case(False)]) is False
    assert reasoning.leakage_of([_case(False), _case(True)]) is True
    assert reasoning.leakage_of([_case(False), _case(None, "transport")]) is None
    assert reasoning.leakage_of([_case(False), _case(None, "refused")]) is None
    assert reasoning.leakage_of([_case(True), _case(None, "transport")]) is True
    assert reasoning.leakage_of([]) is None


def test_the_answer_is_judged_without_the_leaked_thinking() -> None:
    assert reasoning.visible_answer("<think>a b c</think>\n\n42") == "\n\n42"
    assert reasoning.visible_answer("a b c</think>42") == "42"
    assert reasoning.visible_answer("42<think>and then") == "42"
    j = reasoning.judge_answer(reasoning.CASES[0], "<think>" + "x " * 50 + "</think>42", "")
    assert j.error == "<think> in the content with thinking disabled"
