"""The simulator's scripted mode (`anvil sim --script`): it answers `anvil check`'s questions
right, or wrong in a chosen way (`--script-fault SUITE:KIND`), so every suite's pass path
and each failure it can detect are tested against a real HTTP server in CI.

Why a script and not a model: the checks must be proven able to fail and able to pass. A
script reads the question (the suites' own case tables, or the needle in the prompt) and
answers as a correct server would — text, reasoning, tool calls — or breaks one thing.

Each suite family has its own module ``sim/script_<family>.py`` with

    FAULTS: dict[str, tuple[str, ...]]   suite -> the failure kinds it can play
    answer(data, faults) -> ScriptedReply | None
        `data` is the chat request's JSON object, `faults` the active "suite:kind" names;
        None when the request is not one of its questions.

The first module that recognises a request answers it; a request none recognises goes to
the ordinary (timed, nonsense-text) path. A scripted answer is written at once — checks
judge content, not timing.
"""

from __future__ import annotations

import importlib
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from types import ModuleType
from typing import Any

import orjson

from anvil_metrics.sim.chat import DONE_EVENT, raw_event
from anvil_metrics.sim.httpproto import HttpConnection

MODULES = ("script_coding", "script_json", "script_tools", "script_reasoning",
           "script_retrieval", "script_quality", "script_multimodal")


@dataclass(frozen=True, slots=True)
class ScriptedReply:
    """What the scripted server answers. `tool_calls` are (name, arguments JSON text);
    `prompt_tokens` overrides the tokenizer's count (None: counted from the text parts)."""

    content: str = ""
    reasoning: str = ""
    tool_calls: tuple[tuple[str, str], ...] = ()
    prompt_tokens: int | None = None
    finish_reason: str | None = None  # None: "tool_calls" with calls, else "stop"


@cache
def modules() -> tuple[ModuleType, ...]:
    """The script modules that exist (a family not written yet is skipped)."""
    found = []
    for name in MODULES:
        try:
            found.append(importlib.import_module(f"anvil_metrics.sim.{name}"))
        except ModuleNotFoundError as e:
            if e.name != f"anvil_metrics.sim.{name}":
                raise
    return tuple(found)


def known_faults() -> dict[str, tuple[str, ...]]:
    """Every "suite" -> its failure kinds, over all script modules."""
    out: dict[str, tuple[str, ...]] = {}
    for module in modules():
        for suite, kinds in module.FAULTS.items():
            out[suite] = tuple(dict.fromkeys(out.get(suite, ()) + tuple(kinds)))
    return out


def check_faults(names: Iterable[str]) -> tuple[str, ...]:
    """`names` ("suite:kind") checked against `known_faults`; ValueError names a bad one.
    No names, no imports: a simulator without faults starts without the suites' tables."""
    names = tuple(names)
    known = known_faults() if names else {}
    out = []
    for name in names:
        suite, _, kind = name.partition(":")
        if suite not in known or kind not in known[suite]:
            allowed = ", ".join(f"{s}:{k}" for s, ks in known.items() for k in ks)
            raise ValueError(f"--script-fault {name!r} is not known; allowed: {allowed}")
        out.append(name)
    return tuple(out)


def answer(data: dict[str, Any], faults: frozenset[str]) -> ScriptedReply | None:
    """The scripted answer to chat request `data`, None when no script knows the question."""
    found = family_answer(data, faults)
    return None if found is None else found[1]


def family_answer(data: dict[str, Any], faults: frozenset[str]
                  ) -> tuple[str, ScriptedReply] | None:
    """Which suite family's script answers chat request `data` (its module's name less
    `script_`: "json", "tools", "retrieval") and its answer; None when none knows it."""
    for module in modules():
        reply = module.answer(data, faults)
        if reply is not None:
            return module.__name__.rpartition(".")[2].removeprefix("script_"), reply
    return None


def last_user_text(data: dict[str, Any]) -> str:
    """The text of the request's last user message (text parts joined), "" when none."""
    for message in reversed(data.get("messages") or ()):
        if isinstance(message, dict) and message.get("role") == "user":
            return content_text(message.get("content"))
    return ""


def content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content
                       if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _pieces(text: str, size: int = 12) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


def chat_chunks(reply: ScriptedReply, model: str, reasoning_field: str,
                usage: dict[str, Any] | None) -> list[bytes]:
    """The SSE events of a streamed scripted answer: role, reasoning, content and tool-call
    fragments (the name in the first fragment of each index, the arguments in pieces),
    finish, usage when asked for, [DONE]."""
    cid = f"chatcmpl-{uuid.uuid4().hex[:24]}"
    created = int(time.time())

    def event(choices: list[dict[str, Any]], extra: dict[str, Any] | None = None) -> bytes:
        chunk = {"id": cid, "object": "chat.completion.chunk", "created": created,
                 "model": model, "choices": choices, **(extra or {})}
        return raw_event(orjson.dumps(chunk))

    def delta(d: dict[str, Any], finish: str | None = None) -> list[dict[str, Any]]:
        return [{"index": 0, "delta": d, "logprobs": None, "finish_reason": finish}]

    out = [event(delta({"role": "assistant", "content": ""}))]
    out += [event(delta({reasoning_field: p})) for p in _pieces(reply.reasoning)]
    out += [event(delta({"content": p})) for p in _pieces(reply.content)]
    for index, (name, arguments) in enumerate(reply.tool_calls):
        first = {"index": index, "id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
                 "function": {"name": name, "arguments": ""}}
        out.append(event(delta({"tool_calls": [first]})))
        for p in _pieces(arguments, 7):
            frag = {"index": index, "function": {"arguments": p}}
            out.append(event(delta({"tool_calls": [frag]})))
    out.append(event(delta({}, finish_reason(reply))))
    if usage is not None:
        out.append(event([], {"usage": usage}))
    out.append(DONE_EVENT)
    return out


def finish_reason(reply: ScriptedReply) -> str:
    if reply.finish_reason is not None:
        return reply.finish_reason
    return "tool_calls" if reply.tool_calls else "stop"


def message_of(reply: ScriptedReply, reasoning_field: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content or None}
    if reply.reasoning:
        message[reasoning_field] = reply.reasoning
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
             "function": {"name": name, "arguments": arguments}}
            for name, arguments in reply.tool_calls]
    return message


def respond(conn: HttpConnection, data: dict[str, Any], reply: ScriptedReply, model: str,
            reasoning_field: str, prompt_tokens: int) -> None:
    """Write the scripted answer to `data` whole, streamed or not as the request asks."""
    text = reply.reasoning + reply.content + "".join(a for _, a in reply.tool_calls)
    completion = max(1, len(text) // 4)
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion,
             "total_tokens": prompt_tokens + completion}
    if data.get("stream"):
        options = data.get("stream_options") or {}
        want_usage = isinstance(options, dict) and bool(options.get("include_usage"))
        events = chat_chunks(reply, model, reasoning_field, usage if want_usage else None)
        conn.write(conn.stream_head())
        for e in events[:-1]:
            conn.write(e)
        conn.stream_end(events[-1])
        return
    body = {"id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion",
            "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": message_of(reply, reasoning_field),
                         "logprobs": None, "finish_reason": finish_reason(reply)}],
            "usage": usage}
    conn.respond_json(200, body)
