"""The scripted simulator's answers to `quality` (see `sim/script.py`), from its case tables.

Questions are recognised by the exact text of the last user turn (a session's earlier turns
get a short reply); a tool task by its first user turn, its step by the tool results already
in the conversation. Faults: `intelligence_wrong` (every question answered wrongly),
`session_forget` (the last turn of a conversation forgets the fact), `tools_skip_step`
(answers after the first tool, never calling the second, with a made-up value).
"""

from __future__ import annotations

from typing import Any

import orjson

from anvil_metrics.checks.quality import INTELLIGENCE, SESSION, TOOLS, ToolTask
from anvil_metrics.sim.script import ScriptedReply, content_text, last_user_text

FAULTS: dict[str, tuple[str, ...]] = {
    "quality": ("intelligence_wrong", "session_forget", "tools_skip_step"),
}

_QUESTIONS = {q.prompt: q.answer for q in INTELLIGENCE}
_TURNS = {turn: (c, i) for c in SESSION for i, turn in enumerate(c.turns)}
_TASKS = {t.prompt: t for t in TOOLS}


def answer(data: dict[str, Any], faults: frozenset[str]) -> ScriptedReply | None:
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages:
        return None
    if data.get("tools"):
        first = next((m for m in messages if isinstance(m, dict) and m.get("role") == "user"),
                     None)
        task = _TASKS.get(content_text(first.get("content"))) if first else None
        return None if task is None else _tool_step(task, messages, faults)
    text = last_user_text(data)
    if text in _QUESTIONS:
        if "quality:intelligence_wrong" in faults:
            return ScriptedReply(content="I believe the answer is 42000.")
        return ScriptedReply(content=_QUESTIONS[text])
    if text in _TURNS:
        conversation, index = _TURNS[text]
        if index < len(conversation.turns) - 1:
            return ScriptedReply(content="OK.")
        if "quality:session_forget" in faults:
            return ScriptedReply(content="I am sorry, I do not remember you telling me that.")
        return ScriptedReply(content=f"{conversation.answer}.")
    return None


def _tool_step(task: ToolTask, messages: list[Any], faults: frozenset[str]) -> ScriptedReply:
    done = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "tool")
    if done >= len(task.steps):
        return ScriptedReply(content=f"The tools say: {task.answer}.")
    if done == 1 and "quality:tools_skip_step" in faults:
        return ScriptedReply(content="It is most likely 100, going by typical values.")
    step = task.steps[done]
    return ScriptedReply(tool_calls=((step.name,
                                      orjson.dumps({step.parameter: step.expects}).decode()),))
