"""The `coding` suite's pure parts: the answer key is right (every solution passes its own
hidden tests, every planted bug fails one), code is taken from the right block and the
test program is built as promised. (How a program's end is classified: `test_sandbox.py`.)"""

from __future__ import annotations

import pytest

from anvil_metrics.checks.coding import (
    CASES,
    CodingCase,
    expected_of,
    extract_code,
    program_with_tests,
)
from anvil_metrics.sim.script_coding import FAULTS, answer, code_for


def _runs(code: str, case: CodingCase) -> bool:
    """Run the (trusted: our own answer key) program in this process; True when all pass."""
    namespace: dict = {}
    try:
        exec(compile(program_with_tests(code, case, "tok").replace("print('tok')", ""),
                     case.id, "exec"), namespace)
    except AssertionError:
        return False
    return True


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_the_answer_key_passes_and_the_planted_bug_fails(case: CodingCase) -> None:
    assert _runs(case.solution, case)
    assert not _runs(case.wrong, case)
    with pytest.raises(SyntaxError):
        compile(code_for(case, frozenset({"coding:syntax"})), case.id, "exec")
    assert case.prompt.startswith(f"Write a Python function `{case.signature}` that ")


def test_case_ids_and_prompts_are_unique() -> None:
    assert len({c.id for c in CASES}) == len({c.prompt for c in CASES}) == len(CASES) == 6


def test_extract_code_takes_the_block_that_defines_the_function() -> None:
    text = ("Example first:\n```python\nprint(f(1))\n```\nThe function:\n"
            "```py\ndef f(x):\n    return x\n```\n```\nf(2)\n```")
    assert extract_code(text, "f") == "def f(x):\n    return x"
    assert extract_code("```python\nx = 1\n```", "f") == "x = 1"  # judged: NameError
    assert extract_code("```Python3\ndef f(): pass\n```", "f") == "def f(): pass"
    assert extract_code("cut off:\n```python\ndef f(x):\n    return", "f") == \
        "def f(x):\n    return"


def test_extract_code_ignores_prose_and_other_languages() -> None:
    assert extract_code("def f(x): return x", "f") is None  # not fenced
    assert extract_code("```bash\ndef f(x)\n```", "f") is None
    assert extract_code("", "f") is None


def test_the_program_runs_the_hidden_tests_then_prints_the_token() -> None:
    case = next(c for c in CASES if c.id == "is_prime")
    program = program_with_tests("CODE", case, "abc123")
    assert program.startswith("CODE\n")
    assert "_anvil_check('is_prime(4)', is_prime(4), False)" in program
    assert program.rstrip().endswith("print('abc123')")
    assert "is_prime(4) == False" in expected_of(case)


def test_tuples_compare_as_lists() -> None:
    case = next(c for c in CASES if c.id == "merge_intervals")
    as_tuples = case.solution.replace("merged.append([start, end])",
                                      "merged.append((start, end))")
    as_tuples = as_tuples.replace("merged[-1][1] = max(merged[-1][1], end)",
                                  "merged[-1] = (merged[-1][0], max(merged[-1][1], end))")
    assert _runs(as_tuples, case)


def test_the_script_answers_its_own_questions_only() -> None:
    case = CASES[0]
    ask = {"messages": [{"role": "user", "content": case.prompt}]}
    right = answer(ask, frozenset())
    assert right is not None and f"```python\n{case.solution}\n```" in right.content
    assert "```" not in answer(ask, frozenset({"coding:no_code"})).content
    assert answer({"messages": [{"role": "user", "content": "hello"}]}, frozenset()) is None
    assert FAULTS == {"coding": ("wrong", "syntax", "no_code", "hang")}
    hang = code_for(next(c for c in CASES if c.id == "is_prime"), frozenset({"coding:hang"}))
    assert "while True" in hang
    assert code_for(case, frozenset({"coding:hang"})) == case.solution
