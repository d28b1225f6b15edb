"""The scripted answers to `quality` (`sim/script_quality.py`): the tables' answers, a
session's short replies until its last turn, a two-step tool task one call at a time, and
each fault's wrong turn."""

from __future__ import annotations

from typing import Any

import orjson

from anvil_metrics.checks.quality import INTELLIGENCE, SESSION, TOOLS
from anvil_metrics.sim.script import ScriptedReply
from anvil_metrics.sim.script_quality import answer

NONE: frozenset[str] = frozenset()


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def test_questions() -> None:
    q = INTELLIGENCE[0]
    assert answer({"messages": [user(q.prompt)]}, NONE) == ScriptedReply(content=q.answer)
    wrong = answer({"messages": [user(q.prompt)]}, frozenset({"quality:intelligence_wrong"}))
    assert wrong is not None and wrong.content != q.answer
    assert answer({"messages": [user("hello")]}, NONE) is None
    assert answer({"messages": []}, NONE) is None and answer({}, NONE) is None


def test_a_session_remembers_until_told_to_forget() -> None:
    conv = SESSION[0]
    assert answer({"messages": [user(conv.turns[0])]}, NONE) == ScriptedReply(content="OK.")
    last = {"messages": [user(t) for t in conv.turns]}
    assert answer(last, NONE) == ScriptedReply(content=f"{conv.answer}.")
    forgot = answer(last, frozenset({"quality:session_forget"}))
    assert forgot is not None and conv.answer not in forgot.content


def test_a_tool_task_step_by_step() -> None:
    task = TOOLS[0]
    first, second = task.steps
    messages: list[Any] = [user(task.prompt)]
    data = {"messages": messages, "tools": task.tools()}
    step1 = answer(data, NONE)
    assert step1 == ScriptedReply(tool_calls=(
        (first.name, orjson.dumps({first.parameter: first.expects}).decode()),))
    messages.append({"role": "tool", "content": orjson.dumps(first.result).decode()})
    step2 = answer(data, NONE)
    assert step2 is not None and step2.tool_calls[0][0] == second.name
    skipped = answer(data, frozenset({"quality:tools_skip_step"}))
    assert skipped is not None and skipped.tool_calls == () and task.answer not in skipped.content
    messages.append({"role": "tool", "content": orjson.dumps(second.result).decode()})
    assert answer(data, NONE) == ScriptedReply(content=f"The tools say: {task.answer}.")
    assert answer({"messages": [user("other")], "tools": task.tools()}, NONE) is None
