"""The scripted answers to `tools`, `streaming_tools` and `tool_result_recovery`
(`sim/script_tools.py`): the expected calls from the case table, each fault's one break, and
the recovery turn after a tool's result."""

from __future__ import annotations

import json
from typing import Any

import pytest

from anvil_metrics.checks.toolcases import (
    RECOVERY_CASES,
    TOOL_CASES,
    concrete,
    tool_specs,
)
from anvil_metrics.sim.script import ScriptedReply
from anvil_metrics.sim.script_tools import _stringify_first_scalar, _wrong, answer

BY_ID = {c.id: c for c in TOOL_CASES}
RECOVERY = {c.id: c for c in RECOVERY_CASES}


def ask(case_id: str, *faults: str, stream: bool = False) -> ScriptedReply:
    case = BY_ID[case_id]
    data = {"messages": [{"role": "user", "content": case.prompt}],
            "tools": tool_specs(case.tools), "stream": stream}
    reply = answer(data, frozenset(faults))
    assert reply is not None
    return reply


def calls(reply: ScriptedReply) -> list[tuple[str, Any]]:
    return [(name, json.loads(args)) for name, args in reply.tool_calls]


@pytest.mark.parametrize("case", TOOL_CASES, ids=lambda c: c.id)
def test_the_expected_calls(case: Any) -> None:
    reply = ask(case.id)
    assert calls(reply) == [(c.name, concrete(c.arguments)) for c in case.calls]
    if not case.calls:
        assert reply.content == f"{case.text_contains}."


def test_the_call_faults() -> None:
    right = calls(ask("parallel_mixed"))
    assert len(right) == 2
    assert ask("single_weather", "tools:no_call").tool_calls == ()
    renamed = calls(ask("parallel_mixed", "tools:wrong_name"))
    assert {n for n, _ in renamed}.isdisjoint({n for n, _ in right})
    offered = {t["function"]["name"] for t in tool_specs(BY_ID["parallel_mixed"].tools)}
    assert {n for n, _ in renamed} <= offered
    assert calls(ask("single_weather", "tools:wrong_name"))[0][0] == "get_weather_v2"
    assert calls(ask("parallel_mixed", "tools:missing_parallel")) == right[:1]
    assert calls(ask("parallel_mixed", "tools:extra_call")) == [*right, right[0]]
    assert calls(ask("parallel_mixed", "tools:missing_name"))[0] == ("", right[0][1])
    with pytest.raises(json.JSONDecodeError):
        calls(ask("single_weather", "tools:bad_json"))
    changed = calls(ask("single_weather", "tools:wrong_arguments"))
    assert changed != calls(ask("single_weather")) and changed[0][0] == "get_weather"
    extra = calls(ask("single_weather", "tools:extra_argument"))[0][1]
    assert len(extra) == len(calls(ask("single_weather"))[0][1]) + 1


def test_streamed_requests_play_the_streaming_faults() -> None:
    assert ask("single_weather", "tools:no_call", stream=True).tool_calls != ()
    assert ask("single_weather", "streaming_tools:no_call", stream=True).tool_calls == ()
    reused = ask("parallel_mixed", "streaming_tools:index_reuse", stream=True)
    right = ask("parallel_mixed").tool_calls
    assert reused.tool_calls == ((right[0][0], right[0][1] + right[1][1]),)


def test_wrong_values_and_stringified_scalars() -> None:
    assert [_wrong(v) for v in (True, 3, 2.5, "Paris", [1, 2], {"a": 1})] == [
        False, 4, 3.5, "Atlantis", [1], {}]
    assert _stringify_first_scalar({"a": "s", "b": 2, "c": 3}) == {"a": "s", "b": "2", "c": 3}
    assert _stringify_first_scalar({"a": [True, 1]}) == {"a": ["true", 1]}
    assert _stringify_first_scalar({"a": "s"}) == {"a": "s"}


def recover(case_id: str, result: str, *faults: str) -> ScriptedReply | None:
    case = RECOVERY[case_id]
    data = {"tools": tool_specs((case.tool, *case.tools)), "messages": [
        {"role": "user", "content": case.prompt},
        {"role": "assistant", "tool_calls": []},
        {"role": "tool", "content": result}]}
    return answer(data, frozenset(faults))


def test_recovery_uses_the_result_or_fixes_the_call() -> None:
    used = recover("result_order_id", '{"order_id": "ORD-77", "status": "shipped", "items": 2}')
    assert used == ScriptedReply(content="Here it is: ORD-77.")
    ignored = recover("result_order_id", '{"order_id": "ORD-77"}',
                      "tool_result_recovery:ignore_result")
    assert ignored is not None and "ORD-77" not in ignored.content
    fixed = recover("error_symbol", "{}")
    assert fixed == ScriptedReply(tool_calls=(("get_stock_price", '{"symbol": "AAPL"}'),))
    again = recover("error_symbol", "{}", "tool_result_recovery:repeat_bad_call")
    assert again == ScriptedReply(tool_calls=(("get_stock_price", '{"symbol": "APPLE"}'),))
    gave_up = recover("error_symbol", "{}", "tool_result_recovery:give_up")
    assert gave_up is not None and gave_up.tool_calls == ()


def test_what_is_not_ours() -> None:
    case = TOOL_CASES[0]
    assert answer({"messages": [{"role": "user", "content": case.prompt}]}, frozenset()) is None
    assert answer({"messages": [{"role": "user", "content": "hi"}], "tools": [{}]},
                  frozenset()) is None
    assert answer({"messages": [], "tools": [{}]}, frozenset()) is None
