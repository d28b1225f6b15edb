"""quality: the quality suite's tables and judges — a word found whole, an answer judged
without its thinking, a tool task's calls and final answer — and the simulator's script
that plays each part.

Why: "391" found inside "3910", or an answer taken from the model's thinking, would pass
a wrong answer.
"""

from __future__ import annotations

import orjson
import pytest

from anvil_metrics.checks import quality as q
from anvil_metrics.prep.prompts import messages_for
from anvil_metrics.sim import script_quality


def test_quality_tables_have_the_published_sizes():
    assert (len(q.INTELLIGENCE), len(q.SESSION), len(q.TOOLS)) == (6, 3, 3)


@pytest.mark.parametrize("text,word,found", [
    ("The answer is 391.", "391", True), ("3910", "391", False), ("1391", "391", False),
    ("**Canberra**", "canberra", True), ("It is 3.7 °C", "3.7", True),
    ("13.7", "3.7", False), ("3.75", "3.7", False), ("at 16:15.", "16:15", True),
])
def test_has_word(text, word, found):
    assert q.has_word(text, word) is found


def test_judge_text():
    assert q.judge_text("97", "97") == (True, None)
    assert "no answer" in q.judge_text("97", " ", "length")[1]
    assert "not in the answer" in q.judge_text("97", "89")[1]
    assert "not in the answer" in q.judge_text("97", "<think>97?</think>89")[1]


def test_tool_results_and_the_tools_judge():
    task = q.TOOLS[0]
    first, second = task.steps
    ok = {first.parameter: first.expects.upper()}  # case and spacing do not matter
    assert q.tool_result(task, first.name, ok) == dict(first.result)
    assert "error" in q.tool_result(task, first.name, {first.parameter: "nobody"})
    assert "error" in q.tool_result(task, "rm_rf", {})
    calls = [(first.name, ok), (second.name, {second.parameter: second.expects})]
    assert q.judge_tools(task, calls, f"It was {task.answer}.") == (True, None)
    assert "was never called" in q.judge_tools(task, calls[:1], task.answer)[1]
    assert "no final answer" in q.judge_tools(task, calls, None)[1]
    assert "lacks" in q.judge_tools(task, calls, "It was 100.")[1]


def test_script_quality_plays_each_part():
    question = q.INTELLIGENCE[0]
    data = {"messages": messages_for(question.prompt)}
    assert script_quality.answer(data, frozenset()).content == question.answer
    assert question.answer not in script_quality.answer(
        data, frozenset({"quality:intelligence_wrong"})).content
    conv = q.SESSION[0]
    first = {"messages": messages_for(conv.turns[0])}
    assert script_quality.answer(first, frozenset()).content == "OK."
    last = {"messages": messages_for(conv.turns[-1])}
    assert conv.answer in script_quality.answer(last, frozenset()).content
    assert conv.answer not in script_quality.answer(
        last, frozenset({"quality:session_forget"})).content
    task = q.TOOLS[1]
    start = {"messages": messages_for(task.prompt), "tools": task.tools()}
    ((name, args),) = script_quality.answer(start, frozenset()).tool_calls
    assert (name, orjson.loads(args)) == (task.steps[0].name,
                                          {task.steps[0].parameter: task.steps[0].expects})
    after_one = {**start, "messages": [*start["messages"], {"role": "tool", "content": "{}"}]}
    assert script_quality.answer(after_one, frozenset()).tool_calls[0][0] == task.steps[1].name
    skipped = script_quality.answer(after_one, frozenset({"quality:tools_skip_step"}))
    assert not skipped.tool_calls and task.answer not in skipped.content
    assert script_quality.answer({"messages": messages_for("hi")}, frozenset()) is None
