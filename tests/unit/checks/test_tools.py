"""The tool-call judges (`checks/tools.py`) and their case table, without a server: the
comparison rules, parallel calls in any order, streamed fragments assembled by the client
(also when a server reuses index 0), and every case's own right answer passing."""

from __future__ import annotations

import json
import random

import pytest

from anvil_metrics.checks.client import ChatAnswer, ToolCall, add_chunk
from anvil_metrics.checks.toolcases import (
    RECOVERY_CASES,
    TOOL_CASES,
    TOOLS,
    AnyOf,
    Exact,
    ExpectedCall,
    Unordered,
    concrete,
    expected_json,
)
from anvil_metrics.checks.tools import (
    argument_problem,
    judge_calls,
    judge_recovery,
    make_token,
    match_call,
    recovery_messages,
    undeclared,
)

_IDS = iter(range(1_000_000))


def call(name: str, arguments: object) -> ToolCall:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ToolCall(f"call_{next(_IDS)}", name, text)


WEATHER = ExpectedCall("get_weather", {"city": AnyOf(("Paris", "Paris, France"))})
TIME = ExpectedCall("get_time", {"city": "Tokyo"})


@pytest.mark.parametrize("spec, value, said", [
    ("Paris", "Pariss", 'arguments: "Pariss" != "Paris"'),
    ("Paris", 1, 'arguments: 1 is not a string ("Paris" expected)'),
    (Exact("USD"), "usd", 'arguments: "usd" != "USD"'),
    (AnyOf(("09:30", "09:30:00")), "9.30", 'arguments: "9.30" is none of ["09:30", '
     '"09:30:00"]'),
    (3, "3", 'arguments: "3" is not a number (3 expected)'),
    (21.5, 22, "arguments: 22 != 21.5"),
    (True, "true", 'arguments: "true" is not true'),
    ({"to": ["a", "b"]}, {"to": ["a", "c"]}, 'arguments.to[1]: "c" != "b"'),
    ({"to": ["a", "b"]}, {"to": "a"}, 'arguments.to: "a" is not a list of 2'),
    (Unordered((1, 2, 7)), [7, 1], "arguments: [7, 1] is not a list of 3 (any order)"),
    (Unordered((1, 2, 7)), [7, 1, 3], "arguments: [7, 1, 3] is not [1, 2, 7] in any order"),
    ({"start": {"date": Exact("2025-03-14")}}, {"start": {"time": "09:30"}},
     "arguments.start.date: missing"),
    ({"date": Exact("2025-03-14")}, "2025-03-14", 'arguments: "2025-03-14" is not an object'),
])
def test_argument_problem_says_where_and_why(spec, value, said):
    """The verdicts are jsonmatch's (`test_jsonmatch.py`); the words are the suite's."""
    assert argument_problem(spec, value) == said
    assert argument_problem(spec, concrete(spec)) is None


def test_undeclared_finds_unknown_keys_also_in_nested_objects():
    schema = TOOLS["create_event"]["function"]["parameters"]
    args = {"title": "x", "start": {"date": "d", "time": "t", "zone": "UTC"}, "color": "red"}
    assert undeclared(args, schema) == ["arguments.start.zone", "arguments.color"]
    assert undeclared({"title": "x", "start": {"date": "d", "time": "t"}}, schema) == []


def test_match_call_name_absent_and_undeclared_arguments():
    assert match_call(WEATHER, "get_weather", {"city": "Paris", "unit": "celsius"}) is None
    assert "expected 'get_weather'" in match_call(WEATHER, "get_time", {"city": "Paris"})
    assert "not a parameter" in match_call(WEATHER, "get_weather", {"city": "Paris", "x": 1})
    search = ExpectedCall("search_products", {"query": "lamps"}, absent=("max_price",))
    assert "max_price was sent" in match_call(search, "search_products",
                                              {"query": "lamps", "max_price": 50})
    assert match_call(search, "search_products", {"query": "Lamps", "in_stock_only": True}) \
        is None


def test_parallel_calls_match_in_any_order():
    calls = [call("get_time", {"city": "Tokyo"}), call("get_weather", {"city": "Paris"})]
    assert judge_calls([WEATHER, TIME], calls, "") is None


@pytest.mark.parametrize("calls, content, fragment", [
    ([], "It is sunny.", "no tool call; answered in text"),
    ([call("get_weather", {"city": "Paris"})], "", "2 calls expected, 1 made (no call of "
     "'get_time')"),
    ([call("get_weather", {"city": "Paris"}), call("get_time", {"city": "Tokyo"}),
      call("get_time", {"city": "Tokyo"})], "", "unexpected extra call(s): get_time"),
    ([call("get_weather", '{"city": "Paris"'), call("get_time", {"city": "Tokyo"})], "",
     "arguments are not JSON"),
    ([call("get_weather", '{"city": "Paris"}{"city": "Tokyo"}')], "",
     "several JSON values run together"),
    ([call("get_weather", "[1]"), call("get_time", {"city": "Tokyo"})], "",
     "JSON but not an object"),
    ([call("get_weather", {"city": "Lyon"}), call("get_time", {"city": "Tokyo"})], "",
     'arguments.city: "Lyon" is none of'),
])
def test_judge_calls_failures(calls, content, fragment):
    why = judge_calls([WEATHER, TIME], calls, content)
    assert why is not None and fragment in why


def test_every_call_needs_a_name_and_an_id_of_its_own():
    paris = json.dumps({"city": "Paris"})
    tokyo = json.dumps({"city": "Tokyo"})
    nameless = [ToolCall("a", "", paris), ToolCall("b", "get_time", tokyo)]
    assert judge_calls([WEATHER, TIME], nameless, "") == "tool call 0 has no function name"
    no_id = [ToolCall("a", "get_weather", paris), ToolCall("", "get_time", tokyo)]
    assert judge_calls([WEATHER, TIME], no_id, "") == "tool call 1 (get_time) has no id"
    same = [ToolCall("a", "get_weather", paris), ToolCall("a", "get_time", tokyo)]
    assert "share an id" in judge_calls([WEATHER, TIME], same, "")
    assert "has no id" in judge_recovery(RECOVERY_CASES[3], None,
                                         [ToolCall(None, "get_weather", paris)], "")


def test_no_call_case_wants_text_and_no_call():
    assert judge_calls([], [], "Paris.", "Paris") is None
    assert "does not say 'Paris'" in judge_calls([], [], "Lyon", "Paris")
    assert "though no tool was needed" in judge_calls(
        [], [call("get_weather", {"city": "Paris"})], "", "Paris")


def _chunk(frag: dict) -> dict:
    return {"choices": [{"index": 0, "delta": {"tool_calls": [frag]}, "finish_reason": None}]}


def _fragments(calls: list[tuple[str, str]], index_of=lambda i: i) -> list[dict]:
    """A stream as vLLM sends it: per call, the name first, then the arguments in pieces."""
    out = []
    for i, (name, arguments) in enumerate(calls):
        out.append(_chunk({"index": index_of(i), "id": f"call_{i}", "type": "function",
                           "function": {"name": name, "arguments": ""}}))
        out += [_chunk({"index": index_of(i), "function": {"arguments": arguments[j:j + 5]}})
                for j in range(0, len(arguments), 5)]
    return out


def test_streamed_fragments_assemble_by_index_and_pass():
    answer = ChatAnswer()
    for chunk in _fragments([("get_weather", '{"city": "Paris"}'),
                             ("get_time", '{"city": "Tokyo"}')]):
        add_chunk(answer, chunk)
    assert [c.id for c in answer.tool_calls] == ["call_0", "call_1"]
    assert judge_calls([WEATHER, TIME], answer.tool_calls, answer.content) is None


def test_fragments_of_two_calls_on_index_0_are_caught():
    answer = ChatAnswer()
    for chunk in _fragments([("get_weather", '{"city": "Paris"}'),
                             ("get_time", '{"city": "Tokyo"}')], index_of=lambda i: 0):
        add_chunk(answer, chunk)
    assert len(answer.tool_calls) == 1
    why = judge_calls([WEATHER, TIME], answer.tool_calls, "")
    assert why is not None and "several JSON values run together" in why


def test_every_case_passes_its_own_answer_and_names_offered_tools():
    assert len(TOOL_CASES) == 20
    assert len({c.id for c in TOOL_CASES}) == 20 and len({c.prompt for c in TOOL_CASES}) == 20
    for case in TOOL_CASES:
        right = [call(e.name, concrete(e.arguments)) for e in case.calls]
        content = f"{case.text_contains}." if not right else ""
        assert judge_calls(case.calls, right, content, case.text_contains) is None, case.id
        for e in case.calls:
            assert e.name in case.tools, case.id
            assert undeclared(concrete(e.arguments),
                              TOOLS[e.name]["function"]["parameters"]) == [], case.id
        json.dumps([expected_json(e) for e in case.calls])  # what checks.json shows


def test_recovery_judge():
    rng = random.Random(0)
    use, fix = RECOVERY_CASES[0], RECOVERY_CASES[3]
    token = make_token(use.token_prefix, rng)
    assert token.startswith("ORD-") and len(token) == 10
    assert token in recovery_messages(use, token)[-1]["content"]
    assert judge_recovery(use, token, [], f"Your order number is {token}.") is None
    assert "does not quote" in judge_recovery(use, token, [], "It has shipped.")
    assert "again instead of answering" in judge_recovery(
        use, token, [call("get_latest_order", {})], "")
    assert judge_recovery(fix, None, [call("get_weather", {"city": "Paris"})], "") is None
    assert "repeated the call" in judge_recovery(fix, None,
                                                 [call("get_weather", {"city": "Pariss"})], "")
    assert "no corrected call" in judge_recovery(fix, None, [], "Did you mean Paris?")
    assert "expected 'get_weather'" in judge_recovery(
        fix, None, [call("get_time", {"city": "Paris"})], "")


def test_recovery_cases_pass_their_own_fix():
    for case in RECOVERY_CASES:
        if case.fixed is not None:
            right = call(case.fixed.name, concrete(case.fixed.arguments))
            assert judge_recovery(case, None, [right], "") is None, case.id
        else:
            assert "{token}" in case.result and case.token_prefix, case.id


def test_tokens_follow_the_seed():
    a = [make_token("X-", random.Random("s:1")) for _ in range(2)]
    assert a[0] == a[1]
    assert make_token("X-", random.Random("s:1")) != make_token("X-", random.Random("s:2"))
