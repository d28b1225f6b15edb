"""jsonmode: the json suite's pure scoring — each case's value meets its own schema, each
failure says why — and every fault the simulator's script knows for the json,
reasoning_leakage and responses_subset suites. (reasoning_leakage's scoring:
`test_reasoning.py`; responses_subset's: `test_responses.py`.)"""

from __future__ import annotations

import orjson
import pytest

from anvil_metrics.checks import jsonmode
from anvil_metrics.sim import responses as simresp
from anvil_metrics.sim.script import check_faults

CASE = {c.id: c for c in jsonmode.CASES}


def test_every_json_case_value_meets_its_own_schema() -> None:
    for case in jsonmode.CASES:
        assert jsonmode.judge_content(case, orjson.dumps(case.value).decode()).passed, case.id


def test_json_schema_cases_send_a_strict_schema_and_object_cases_none() -> None:
    for case in jsonmode.CASES:
        fmt = case.response_format()
        if case.format_type == "json_schema":
            assert fmt["json_schema"]["strict"] is True
            assert fmt["json_schema"]["schema"] == dict(case.schema)
        else:
            assert fmt == {"type": "json_object"}


def test_json_whitespace_around_is_allowed() -> None:
    assert jsonmode.judge_content(CASE["object_person"], '\n  {"name": "alice", "age": 30}\n'
                                  ).passed


@pytest.mark.parametrize("content,why", [
    ("", "empty"),
    ("Sure: name Alice, age 30", "not JSON"),
    ('```json\n{"name": "Alice", "age": 30}\n```', "fenced"),
    ('{"name": "Alice"}', "schema violation"),
    ('{"name": "Alice", "age": "30"}', "schema violation at age"),
    ('{"name": "Alice", "age": 31}', "/age: expected 30"),
    ('{"name": "Bob", "age": 30}', "/name: expected 'Alice'"),
])
def test_json_failures_say_why(content: str, why: str) -> None:
    j = jsonmode.judge_content(CASE["object_person"], content)
    assert not j.passed and why in j.error


def test_json_strict_schema_refuses_extra_keys_and_values_outside_the_enum() -> None:
    case = CASE["schema_order"]
    extra = jsonmode.judge_content(case, '{"drink":"tea","quantity":3,"size":"large","x":1}')
    assert not extra.passed and "Additional properties" in extra.error
    enum = jsonmode.judge_content(case, '{"drink":"tea","quantity":3,"size":"huge"}')
    assert not enum.passed and "size" in enum.error


def test_json_value_comparison() -> None:
    assert jsonmode.value_problem({"a": [1, 2]}, {"a": [1, 2], "b": 0}) is None
    assert jsonmode.value_problem({"a": "X"}, {"a": " x "}) is None
    assert "/a: expected [1,2]" in jsonmode.value_problem({"a": [1, 2]}, {"a": [1]})
    assert jsonmode.value_problem([1, 2], [2, 1]) == "/0: expected 1, got 2"
    assert jsonmode.value_problem(30, 30.0) is not None  # an integer was asked for
    assert jsonmode.value_problem(True, 1) is not None




def test_every_fault_named_in_the_brief_is_accepted() -> None:
    names = [f"responses_subset:{k}" for k in simresp.FAULT_KINDS]
    names += [f"json:{k}" for k in ("not_json", "fenced", "schema_violation", "wrong_value")]
    names += [f"reasoning_leakage:{k}" for k in ("reasoning_delta", "think_tag",
                                                 "wrong_answer")]
    assert check_faults(names) == tuple(names)
