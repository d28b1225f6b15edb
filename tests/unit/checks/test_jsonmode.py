"""The pure scoring of the json, reasoning_leakage and responses_subset checks, and the
simulator's /v1/responses event builder read back by the check's own parser."""

from __future__ import annotations

import orjson
import pytest

from anvil_metrics.checks import jsonmode, reasoning, responses
from anvil_metrics.checks.results import CaseResult
from anvil_metrics.sim import responses as simresp
from anvil_metrics.sim.script import check_faults

CASE = {c.id: c for c in jsonmode.CASES}


# -- json --------------------------------------------------------------------------------------


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




# -- reasoning_leakage -------------------------------------------------------------------------


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


# -- responses_subset --------------------------------------------------------------------------


def _stream(reply: simresp.ResponsesReply, faults: tuple[str, ...] = ()
            ) -> list[tuple[str, str]]:
    """The simulator's events for `reply` as (SSE name, data), as the client reads them."""
    out = []
    for event in simresp.response_events(reply, "m", 10, frozenset(faults)):
        out.append((event["type"], orjson.dumps(event).decode()))
    return out


def test_a_well_formed_text_stream() -> None:
    s = responses.summarize(_stream(simresp.ResponsesReply(text="Paris")))
    assert s.problems == [] and s.text == s.done_text == s.completed_text == "Paris"
    assert responses.judge_text(s).passed
    assert responses.shown(s)["events"][4] == "response.output_text.delta ×2"


def test_a_well_formed_call_stream() -> None:
    reply = simresp.ResponsesReply(call=(responses.TOOL_NAME, '{"ticket_id": "T-4821"}'))
    s = responses.summarize(_stream(reply))
    assert s.problems == [] and s.calls[0].name == responses.TOOL_NAME and s.calls[0].call_id
    assert responses.judge_call(s).passed
    assert not responses.judge_text(s).passed  # a call is not the text asked for
    assert "called a tool again" in responses.judge_output(s).error


@pytest.mark.parametrize("fault,why", [
    ("no_completed", "ended without response.completed"),
    ("wrong_order", "the first event is response.output_text.delta"),
    ("delta_mismatch", "the deltas add up to 'Pari'"),
])
def test_protocol_breaches(fault: str, why: str) -> None:
    s = responses.summarize(_stream(simresp.ResponsesReply(text="Paris"),
                                    (f"responses_subset:{fault}",)))
    j = responses.judge_text(s)
    assert not j.passed and why in j.error


def test_call_argument_deltas_must_add_up() -> None:
    reply = simresp.ResponsesReply(call=(responses.TOOL_NAME, '{"ticket_id": "T-4821"}'))
    s = responses.summarize(_stream(reply, ("responses_subset:delta_mismatch",)))
    assert "function_call_arguments.done says" in responses.judge_call(s).error


def test_stream_breaches_found_by_the_parser() -> None:
    good = _stream(simresp.ResponsesReply(text="Paris"))
    assert "has no events" in responses.summarize([]).problems[0]
    assert "not JSON" in responses.summarize([("message", "{")] + good).problems[0]
    assert "SSE event name" in responses.summarize([("other", good[0][1])] + good[1:]
                                                   ).problems[0]
    after = responses.summarize(good + [good[-2]])
    assert any("after response.completed" in p for p in after.problems)
    assert responses.summarize(good + [("message", "[DONE]")]).problems == []
    unnumbered = [(n, orjson.dumps({**orjson.loads(d), "sequence_number": 5}).decode())
                  for n, d in good]
    assert "sequence_number does not increase" in responses.summarize(unnumbered).problems
    failed = orjson.loads(good[-1][1])
    failed["response"]["status"] = "failed"
    s = responses.summarize(good[:-1] + [(good[-1][0], orjson.dumps(failed).decode())])
    assert "status 'failed'" in s.problems[0]


def test_judges_check_the_answer() -> None:
    wrong = responses.summarize(_stream(simresp.ResponsesReply(text="Lyon")))
    assert "expected 'Paris'" in responses.judge_text(wrong).error
    no_call = responses.summarize(_stream(simresp.ResponsesReply(text="I cannot.")))
    assert "no function_call item" in responses.judge_call(no_call).error
    other = responses.summarize(_stream(simresp.ResponsesReply(call=("other", "{}"))))
    assert "called 'other'" in responses.judge_call(other).error
    bad_args = responses.summarize(_stream(simresp.ResponsesReply(
        call=(responses.TOOL_NAME, '{"ticket_id": "T-1"}'))))
    assert "expected" in responses.judge_call(bad_args).error
    token = responses.summarize(_stream(simresp.ResponsesReply(text=f"It is {responses.TOKEN}")))
    assert responses.judge_output(token).passed
    missing = responses.summarize(_stream(simresp.ResponsesReply(text="It is resolved.")))
    assert responses.TOKEN in responses.judge_output(missing).error


def test_second_turn_input_carries_the_call_and_its_output() -> None:
    call = responses.FunctionCall("call_1", responses.TOOL_NAME, '{"ticket_id":"T-4821"}')
    user, fc, out = responses.output_input(call)
    assert user["role"] == "user" and fc["type"] == "function_call"
    assert fc["call_id"] == out["call_id"] == "call_1" and out["type"] == "function_call_output"
    assert responses.TOKEN in out["output"]
    assert responses.output_input(None)[1]["call_id"] == responses.OUR_CALL_ID


def test_scripted_responses_read_the_token_from_the_tool_output() -> None:
    data = {"input": responses.output_input(None), "tools": responses.TOOLS}
    data["input"][2]["output"] = '{"resolution_code": "QQ-1"}'
    assert "QQ-1" in simresp.scripted(data, frozenset()).text
    assert simresp.scripted({"input": "hello"}, frozenset()) is None
    assert simresp.scripted({"input": responses.TOOL_PROMPT}, frozenset()) is None  # no tools


def test_every_fault_named_in_the_brief_is_accepted() -> None:
    names = [f"responses_subset:{k}" for k in simresp.FAULT_KINDS]
    names += [f"json:{k}" for k in ("not_json", "fenced", "schema_violation", "wrong_value")]
    names += [f"reasoning_leakage:{k}" for k in ("reasoning_delta", "think_tag",
                                                 "wrong_answer")]
    assert check_faults(names) == tuple(names)


def test_the_answer_is_judged_without_the_leaked_thinking() -> None:
    assert reasoning.visible_answer("<think>a b c</think>\n\n42") == "\n\n42"
    assert reasoning.visible_answer("a b c</think>42") == "42"
    assert reasoning.visible_answer("42<think>and then") == "42"
    j = reasoning.judge_answer(reasoning.CASES[0], "<think>" + "x " * 50 + "</think>42", "")
    assert j.error == "<think> in the content with thinking disabled"


def test_text_needs_its_message_item_and_content_part() -> None:
    good = _stream(simresp.ResponsesReply(text="Paris"))
    no_part = [e for e in good if e[0] != "response.content_part.added"]
    assert "without response.content_part.added" in responses.summarize(no_part).problems[0]
    no_item = [e for e in good if e[0] != "response.output_item.added"]
    assert "without a message item" in responses.summarize(no_item).problems[0]
    call = _stream(simresp.ResponsesReply(call=(responses.TOOL_NAME, "{}")))
    no_call_item = [e for e in call if e[0] != "response.output_item.added"]
    assert "without a function_call item" in responses.summarize(no_call_item).problems[0]
