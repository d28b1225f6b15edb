"""The simulator's answers to `tools`, `streaming_tools` and `tool_result_recovery`.

Why here: the scripted simulator must call tools as a correct server would, and break them
in each way the judge (`checks/tools.py`) can see, so its pass path and every failure are
tested over real HTTP. The answers come from the case table (`checks/toolcases.py`); a
request is ours when it offers `tools` and its last user message is one of our prompts
(for recovery, when the conversation ends in a `tool` message).

A streamed request plays the `streaming_tools:` faults, an ordinary one the `tools:` faults.
`index_reuse` sends every call's argument fragments on index 0 under the first call's
name: what a client assembles from a server that reuses index 0 for the second call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from anvil_metrics.checks.toolcases import (
    RECOVERY_CASES_BY_PROMPT,
    TOOL_CASES_BY_PROMPT,
    RecoveryCase,
    ToolCase,
    concrete,
)
from anvil_metrics.sim.script import ScriptedReply, content_text, last_user_text

_CALL_FAULTS = ("wrong_name", "wrong_arguments", "wrong_type", "no_call", "bad_json",
                "missing_parallel", "extra_call", "extra_argument", "missing_name")
FAULTS: dict[str, tuple[str, ...]] = {
    "tools": _CALL_FAULTS,
    "streaming_tools": (*_CALL_FAULTS, "index_reuse"),
    "tool_result_recovery": ("ignore_result", "repeat_bad_call", "give_up"),
}

Call = tuple[str, dict[str, Any]]


def answer(data: dict[str, Any], faults: frozenset[str]) -> ScriptedReply | None:
    """Our answer to chat request `data` under `faults`, None when it is not our question."""
    messages = data.get("messages")
    if not data.get("tools") or not isinstance(messages, list) or not messages:
        return None
    last = messages[-1] if isinstance(messages[-1], dict) else {}
    text = last_user_text(data)
    if last.get("role") == "tool" and text in RECOVERY_CASES_BY_PROMPT:
        kinds = _kinds(faults, "tool_result_recovery")
        return _recovery(RECOVERY_CASES_BY_PROMPT[text], content_text(last.get("content")),
                         kinds)
    if last.get("role") == "user" and text in TOOL_CASES_BY_PROMPT:
        suite = "streaming_tools" if data.get("stream") else "tools"
        return _tool_reply(TOOL_CASES_BY_PROMPT[text], data, _kinds(faults, suite))
    return None


def _kinds(faults: frozenset[str], suite: str) -> frozenset[str]:
    return frozenset(f.partition(":")[2] for f in faults if f.partition(":")[0] == suite)


def _tool_reply(case: ToolCase, data: dict[str, Any], kinds: frozenset[str]) -> ScriptedReply:
    calls: list[Call] = [(c.name, concrete(c.arguments)) for c in case.calls]
    if "no_call" in kinds and calls:
        return ScriptedReply(content="I cannot look that up right now, but it is probably "
                             "fine.")
    if "wrong_name" in kinds:
        expected = {name for name, _ in calls}
        calls = [(_other_tool(expected, data), args) for _, args in calls]
    if "wrong_arguments" in kinds and calls:
        name, args = calls[0]
        key = next(iter(case.calls[0].arguments), None)
        if key is not None:
            calls[0] = (name, {**args, key: _wrong(args[key])})
    if "wrong_type" in kinds and calls:
        calls[0] = (calls[0][0], _stringify_first_scalar(calls[0][1]))
    if "missing_parallel" in kinds:
        calls = calls[:1]
    if "extra_call" in kinds:
        calls = [*calls, calls[0]] if calls else [("get_weather", {"city": "Paris"})]
    if "extra_argument" in kinds and calls:
        absent = case.calls[0].absent
        calls[0] = (calls[0][0], {**calls[0][1], (absent[0] if absent else "verbose"): 100})
    if "missing_name" in kinds and calls:
        calls[0] = ("", calls[0][1])
    texts = [(name, json.dumps(args)) for name, args in calls]
    if "bad_json" in kinds and texts:
        texts[0] = (texts[0][0], texts[0][1][:-1])  # the closing brace lost
    if "index_reuse" in kinds and len(texts) > 1:
        texts = [(texts[0][0], "".join(a for _, a in texts))]
    content = "" if texts else (f"{case.text_contains}." if case.text_contains else "Done.")
    return ScriptedReply(content=content, tool_calls=tuple(texts))


def _other_tool(expected: set[str], data: dict[str, Any]) -> str:
    """An offered tool that is none of the `expected` ones (an invented name if none is)."""
    offered = [t.get("function", {}).get("name") for t in data.get("tools") or ()
               if isinstance(t, dict)]
    others = [n for n in offered if isinstance(n, str) and n not in expected]
    return others[0] if others else f"{min(expected)}_v2"


def _wrong(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return "Atlantis"
    if isinstance(value, list):
        return value[:-1]
    return {}


def _stringify_first_scalar(args: Mapping[str, Any]) -> dict[str, Any]:
    """`args` with its first number or boolean (top level or in a list) sent as a string."""
    out = dict(args)
    for key, value in args.items():
        if isinstance(value, bool | int | float):
            out[key] = json.dumps(value)
            return out
        if isinstance(value, list) and value and isinstance(value[0], bool | int | float):
            out[key] = [json.dumps(value[0]), *value[1:]]
            return out
    return out


def _recovery(case: RecoveryCase, result: str, kinds: frozenset[str]) -> ScriptedReply:
    if case.kind == "use_result":
        if "ignore_result" in kinds:
            return ScriptedReply(content="Done, everything is in order.")
        before, _, after = case.result.partition("{token}")
        found = re.search(re.escape(before) + "(.+?)" + re.escape(after), result)
        token = found.group(1) if found else "?"
        return ScriptedReply(content=f"Here it is: {token}.")
    assert case.fixed is not None
    if "give_up" in kinds:
        return ScriptedReply(content="Sorry, that did not work.")
    if "repeat_bad_call" in kinds:
        return ScriptedReply(tool_calls=((case.tool, json.dumps(dict(case.call_arguments))),))
    fixed = json.dumps(concrete(case.fixed.arguments))
    return ScriptedReply(tool_calls=((case.fixed.name, fixed),))
