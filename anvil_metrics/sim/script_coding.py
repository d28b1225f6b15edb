"""The scripted simulator's answers to the `coding` suite (`checks/coding.py`).

Why: the suite must be shown able to pass and to fail in each way it can detect, against a
real server. It recognises a question by the exact prompt of a case and answers with the
case's right solution in a ```python block, or — per active fault — wrongly:

    coding:wrong    every case gets its plausible bug (`CodingCase.wrong`): asserts fail
    coding:syntax   every case's solution loses the colon of its `def` line
    coding:no_code  prose, no code block
    coding:hang     `is_prime` loops forever (the sandbox's CPU limit or timeout stops it);
                    the other cases are right, so one hang costs one timeout in tests
"""

from __future__ import annotations

from typing import Any

from anvil_metrics.checks.coding import BY_PROMPT, CodingCase
from anvil_metrics.sim.script import ScriptedReply, last_user_text

FAULTS = {"coding": ("wrong", "syntax", "no_code", "hang")}
HANG_CASE = "is_prime"


def answer(data: dict[str, Any], faults: frozenset[str]) -> ScriptedReply | None:
    case = BY_PROMPT.get(last_user_text(data))
    if case is None:
        return None
    if "coding:no_code" in faults:
        return ScriptedReply("I would walk through the input once, keep what I have seen so "
                             "far, and return the result at the end.")
    return ScriptedReply(f"Here is the function:\n\n```python\n{code_for(case, faults)}\n```\n")


def code_for(case: CodingCase, faults: frozenset[str]) -> str:
    if "coding:wrong" in faults:
        return case.wrong
    if "coding:syntax" in faults:
        return case.solution.replace(":\n", "\n", 1)
    if "coding:hang" in faults and case.id == HANG_CASE:
        return f"def {case.signature}:\n    while True:\n        pass"
    return case.solution
