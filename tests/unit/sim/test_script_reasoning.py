"""The scripted answers to `reasoning_leakage` (`sim/script_reasoning.py`): a reasoning model
that reasons unless thinking is disabled, and each way of leaking a fault asks for."""

from __future__ import annotations

from typing import Any

from anvil_metrics.checks.reasoning import CASES
from anvil_metrics.sim import responses
from anvil_metrics.sim.script import ScriptedReply
from anvil_metrics.sim.script_reasoning import FAULTS, THOUGHT, answer, thinking_disabled

CASE = CASES[0]
OFF = {"chat_template_kwargs": {"enable_thinking": False}}


def ask(extra: dict[str, Any], *faults: str) -> ScriptedReply | None:
    data = {"messages": [{"role": "user", "content": CASE.prompt}], **extra}
    return answer(data, frozenset(faults))


def test_thinking_disabled_only_by_false() -> None:
    assert thinking_disabled(OFF)
    assert not thinking_disabled({}) and not thinking_disabled(
        {"chat_template_kwargs": {"enable_thinking": 0}})
    assert not thinking_disabled({"chat_template_kwargs": "no"})


def test_reasons_unless_disabled() -> None:
    assert ask({}) == ScriptedReply(content=CASE.answer, reasoning=THOUGHT)
    assert ask(OFF) == ScriptedReply(content=CASE.answer)


def test_each_leak() -> None:
    assert ask(OFF, "reasoning_leakage:reasoning_delta") == ScriptedReply(CASE.answer, THOUGHT)
    tagged = ask(OFF, "reasoning_leakage:think_tag")
    assert tagged == ScriptedReply(f"<think>{THOUGHT}</think>\n\n{CASE.answer}")
    wrong = ask(OFF, "reasoning_leakage:wrong_answer")
    assert wrong is not None and wrong.content != CASE.answer and not wrong.reasoning


def test_other_questions_and_the_responses_faults() -> None:
    assert answer({"messages": [{"role": "user", "content": "hi"}]}, frozenset()) is None
    assert FAULTS[responses.FAULT_SUITE] == responses.FAULT_KINDS
