"""toolcases: the tools suites' case table — what a right answer sends for each kind of
expected value, the JSON a reader of checks.json is shown, and a table whose cases only
name tools that exist. (The judges over these cases: `test_tools.py`.)

Why: the table is the answer key; an expected call naming a tool never declared, or an
alternative lost on the way to checks.json, fails a model that answered right or hides
from the reader what was accepted.
"""

from __future__ import annotations

import json

from anvil_metrics.checks import toolcases as tc

SPEC = {"city": tc.AnyOf(("Paris", "Paris, France")), "unit": tc.Exact("celsius"),
        "who": tc.Unordered(("a@x", tc.AnyOf(("b@x", "B@x")))), "days": [1, tc.Exact("2")],
        "n": 3}


def test_a_right_answer_takes_each_first_alternative() -> None:
    assert tc.concrete(SPEC) == {"city": "Paris", "unit": "celsius", "who": ["a@x", "b@x"],
                              "days": [1, "2"], "n": 3}


def test_the_reader_is_shown_every_alternative() -> None:
    assert tc.spec_json(SPEC) == {"city": {"any_of": ["Paris", "Paris, France"]},
                               "unit": "celsius",
                               "who": {"any_order": ["a@x", {"any_of": ["b@x", "B@x"]}]},
                               "days": [1, "2"], "n": 3}
    call = tc.ExpectedCall("get_weather", {"unit": tc.Exact("celsius")}, absent=("days",))
    assert tc.expected_json(call) == {"name": "get_weather", "arguments": {"unit": "celsius"},
                                   "absent": ["days"]}
    assert "absent" not in tc.expected_json(tc.ExpectedCall("f", {}))


def test_every_case_names_only_declared_tools() -> None:
    for case in tc.TOOL_CASES:
        assert set(case.tools) <= tc.TOOLS.keys(), case.id
        assert [t["function"]["name"] for t in tc.tool_specs(case.tools)] == list(case.tools)
        json.dumps([tc.expected_json(c) for c in case.calls])
    for case in tc.RECOVERY_CASES:
        assert case.tool in tc.TOOLS and set(case.tools) <= tc.TOOLS.keys(), case.id
        assert (case.kind == "correct_call") == (case.fixed is not None), case.id


def test_cases_are_found_by_their_prompt() -> None:
    assert len(tc.TOOL_CASES_BY_PROMPT) == len(tc.TOOL_CASES)
    assert len(tc.RECOVERY_CASES_BY_PROMPT) == len(tc.RECOVERY_CASES)
    assert all(tc.TOOL_CASES_BY_PROMPT[c.prompt] is c for c in tc.TOOL_CASES)
    assert all(t["type"] == "function" and t["function"]["parameters"]["type"] == "object"
               for t in tc.TOOLS.values())
