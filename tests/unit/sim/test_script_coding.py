"""The scripted answers to the `coding` suite (`sim/script_coding.py`): each case's own
solution from the suite's table, or the one bug each fault promises."""

from __future__ import annotations

import pytest

from anvil_metrics.checks.coding import CASES, CodingCase
from anvil_metrics.sim.script_coding import FAULTS, HANG_CASE, answer, code_for


def ask(prompt: str, *faults: str) -> str | None:
    reply = answer({"messages": [{"role": "user", "content": prompt}]}, frozenset(faults))
    return None if reply is None else reply.content


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_each_case_gets_its_solution_in_a_python_block(case: CodingCase) -> None:
    assert ask(case.prompt) == f"Here is the function:\n\n```python\n{case.solution}\n```\n"
    assert code_for(case, frozenset({"coding:wrong"})) == case.wrong != case.solution
    def_line, _, body = case.solution.partition("\n")
    assert def_line.startswith("def ") and def_line.endswith(":")
    assert code_for(case, frozenset({"coding:syntax"})) == f"{def_line[:-1]}\n{body}"


def test_no_code_and_hang() -> None:
    case = CASES[0]
    prose = ask(case.prompt, "coding:no_code")
    assert prose is not None and "```" not in prose
    hang = {c.id: code_for(c, frozenset({"coding:hang"})) for c in CASES}
    assert "while True" in hang[HANG_CASE]
    assert all(hang[c.id] == c.solution for c in CASES if c.id != HANG_CASE)
    assert FAULTS == {"coding": ("wrong", "syntax", "no_code", "hang")}


def test_other_questions_are_not_ours() -> None:
    assert ask("Write a function.") is None
    assert answer({}, frozenset()) is None
