"""responses: the responses_subset suite's parser and judges, read back from the simulator's
/v1/responses event builder — a well-formed stream, each protocol breach named, the
answers checked.

Why: the suite says whether a server speaks the Responses protocol; a parser that lets a
missing event or a delta that does not add up through would pass a server clients break on.
"""

from __future__ import annotations

import orjson
import pytest

from anvil_metrics.checks import responses
from anvil_metrics.sim import responses as simresp


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


def test_text_needs_its_message_item_and_content_part() -> None:
    good = _stream(simresp.ResponsesReply(text="Paris"))
    no_part = [e for e in good if e[0] != "response.content_part.added"]
    assert "without response.content_part.added" in responses.summarize(no_part).problems[0]
    no_item = [e for e in good if e[0] != "response.output_item.added"]
    assert "without a message item" in responses.summarize(no_item).problems[0]
    call = _stream(simresp.ResponsesReply(call=(responses.TOOL_NAME, "{}")))
    no_call_item = [e for e in call if e[0] != "response.output_item.added"]
    assert "without a function_call item" in responses.summarize(no_call_item).problems[0]
