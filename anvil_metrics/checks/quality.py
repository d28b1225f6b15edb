"""`quality`: three small fixed suites a broken model fails at once, reported as passed/total.

* `intelligence` — six short questions with one exact answer each (arithmetic, a fact, a
  time, a word reversed); the answer must contain it as a whole word.
* `session` — three conversations of three turns: a fact is given in the first turn, an
  unrelated question follows, and the last turn asks for the fact back (multi-turn memory,
  the chat template's history handling).
* `tools` — three tasks of two dependent tool calls: the first tool's result (an id) is the
  second's argument, and the final answer must contain a value only the second result
  gave. The check plays the tools from its tables, at most `MAX_TOOL_ROUNDS` requests a task.

Why fixed and small: this is a smoke test of a deployment (a quantization, a template, a
parser), not a benchmark; the public summary shows "6/6, 3/3, 3/3". The answer key lives
beside the questions; the simulator's script (`sim/script_quality.py`) reads it too.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from anvil_metrics.checks.results import CaseResult, SuiteResult
from anvil_metrics.checks.suite import CheckContext, Judgement, run_case, suite_result

MAX_TOKENS = 4096  # a short answer, with room to think first
MAX_TOOL_ROUNDS = 4


@dataclass(frozen=True, slots=True)
class Question:
    id: str
    prompt: str
    answer: str  # must appear as a whole word (case-insensitive)


INTELLIGENCE = (
    Question("multiply", "What is 17 multiplied by 23? Answer with the number only.", "391"),
    Question("capital", "What is the capital city of Australia? Answer with one word.",
             "Canberra"),
    Question("leap_year", "How many days are there in a leap year? Answer with the number "
             "only.", "366"),
    Question("arrival", "A train leaves at 14:40 and the trip takes 95 minutes. At what time "
             "does it arrive? Answer as HH:MM only.", "16:15"),
    Question("prime", "What is the smallest prime number greater than 90? Answer with the "
             "number only.", "97"),
    Question("reverse", "Write the word 'lantern' backwards, letters only, nothing else.",
             "nretnal"),
)


@dataclass(frozen=True, slots=True)
class Conversation:
    id: str
    turns: tuple[str, ...]  # user turns; the answers to all but the last are kept as history
    answer: str  # the last answer must contain it as a whole word


SESSION = (
    Conversation("colour", (
        "My name is Priya and my favourite colour is teal. Please just reply OK.",
        "What is 12 plus 30? Answer with the number only.",
        "What is my favourite colour? Answer with one word."), "teal"),
    Conversation("flight", (
        "I am flying to Lisbon tomorrow on flight TP1337. Please just reply OK.",
        "Name one planet of the solar system. One word.",
        "Which flight number did I say I am on? Answer with the flight number only."),
        "TP1337"),
    Conversation("code", (
        "Remember this locker code for me: 4471. Please just reply OK.",
        "What is the opposite of 'cold'? One word.",
        "What was the locker code I gave you? Answer with the code only."), "4471"),
)


@dataclass(frozen=True, slots=True)
class ToolStep:
    name: str
    description: str
    parameter: str  # the one string argument
    expects: str  # the argument's right value
    result: Mapping[str, Any]  # what the tool returns for it


@dataclass(frozen=True, slots=True)
class ToolTask:
    id: str
    prompt: str
    steps: tuple[ToolStep, ToolStep]  # the second needs the first's result
    answer: str  # only the second result gives it

    def tools(self) -> list[dict[str, Any]]:
        return [{"type": "function", "function": {
            "name": s.name, "description": s.description,
            "parameters": {"type": "object", "properties": {s.parameter: {"type": "string"}},
                           "required": [s.parameter]}}} for s in self.steps]


TOOLS = (
    ToolTask("orders", "What was the total of the most recent order placed by the customer "
             "with the email dana.kowalski@example.com? Use the tools.", (
                 ToolStep("lookup_customer", "Find a customer's id by their email.",
                          "email", "dana.kowalski@example.com", {"customer_id": "C-55821"}),
                 ToolStep("list_orders", "List a customer's orders, newest first, by "
                          "customer id.", "customer_id", "C-55821",
                          {"orders": [{"order_id": "O-9132", "date": "2026-11-28",
                                       "total": "184.37"},
                                      {"order_id": "O-8870", "date": "2026-10-02",
                                       "total": "62.10"}]})),
             "184.37"),
    ToolTask("forecast", "What will tomorrow's high temperature be in Bergen, in degrees "
             "Celsius? Use the tools.", (
                 ToolStep("find_city", "Find a city's id by its name.", "name", "Bergen",
                          {"city_id": "CITY-7734"}),
                 ToolStep("get_forecast", "Tomorrow's forecast for a city id.", "city_id",
                          "CITY-7734", {"high_c": 3.7, "low_c": -1.2,
                                        "summary": "sleet showers"})),
             "3.7"),
    ToolTask("stock", "How many units of the product named 'blue enamel kettle' are in "
             "stock? Use the tools.", (
                 ToolStep("find_product", "Find a product's SKU by its name.", "name",
                          "blue enamel kettle", {"sku": "KT-0093"}),
                 ToolStep("get_stock", "Units in stock for a SKU.", "sku", "KT-0093",
                          {"units": 238})),
             "238"),
)


def has_word(text: str, word: str) -> bool:
    """`word` in `text` as a whole word (not inside a longer number or word), any case."""
    return re.search(rf"(?<![\w.]){re.escape(word)}(?![\w]|\.\d)", text, re.IGNORECASE) \
        is not None


def visible(content: str) -> str:
    """The answer without thinking left inline in the content (up to a `</think>`)."""
    return content.rsplit("</think>", 1)[-1]


def judge_text(expected: str, content: str, finish_reason: str | None = None
               ) -> tuple[bool, str | None]:
    content = visible(content)
    if has_word(content, expected):
        return True, None
    if not content.strip():
        return False, f"no answer (empty content, finish_reason {finish_reason})"
    return False, f"{expected!r} is not in the answer"


def _same(given: Any, expected: str) -> bool:
    return isinstance(given, str) and given.strip().casefold() == expected.casefold()


def _called(step: ToolStep, name: str, arguments: Any) -> bool:
    return (name == step.name and isinstance(arguments, dict)
            and _same(arguments.get(step.parameter), step.expects))


def tool_result(task: ToolTask, name: str, arguments: Any) -> dict[str, Any]:
    """What the check, playing the tools, returns for one call (an error for a wrong one)."""
    step = next((s for s in task.steps if s.name == name), None)
    if step is None:
        return {"error": f"there is no tool named {name!r}"}
    if not _called(step, name, arguments):
        given = arguments.get(step.parameter) if isinstance(arguments, dict) else None
        return {"error": f"nothing found for {step.parameter}={given!r}"}
    return dict(step.result)


def judge_tools(task: ToolTask, calls: list[tuple[str, Any]], content: str | None
                ) -> tuple[bool, str | None]:
    """(passed, why not) from the calls made (name, parsed arguments) and the final answer
    (None: there was none within the rounds)."""
    for step in task.steps:
        if not any(_called(step, n, a) for n, a in calls):
            made = ", ".join(n for n, _ in calls) or "none"
            return False, (f"{step.name}({step.parameter}={step.expects!r}) was never called "
                           f"(calls made: {made})")
    if content is None:
        return False, f"no final answer within {MAX_TOOL_ROUNDS} requests"
    if not has_word(visible(content), task.answer):
        return False, f"the final answer lacks {task.answer!r}, which the tools returned"
    return True, None


def _ask_question(ctx: CheckContext, q: Question) -> Judgement:
    a = ctx.client.chat({"messages": [{"role": "user", "content": q.prompt}],
                         "max_tokens": MAX_TOKENS, "temperature": 0})
    passed, error = judge_text(q.answer, a.content, a.finish_reason)
    return Judgement(passed, a.content, error)


def _ask_conversation(ctx: CheckContext, c: Conversation) -> Judgement:
    messages: list[dict[str, Any]] = []
    content, finish = "", None
    for turn in c.turns:
        messages.append({"role": "user", "content": turn})
        a = ctx.client.chat({"messages": messages, "max_tokens": MAX_TOKENS,
                             "temperature": 0})
        content, finish = a.content, a.finish_reason
        messages.append({"role": "assistant", "content": content})
    passed, error = judge_text(c.answer, content, finish)
    return Judgement(passed, content, error, {"turns": len(c.turns)})


def _ask_tools(ctx: CheckContext, task: ToolTask) -> Judgement:
    messages: list[dict[str, Any]] = [{"role": "user", "content": task.prompt}]
    calls: list[tuple[str, Any]] = []
    final: str | None = None
    for _ in range(MAX_TOOL_ROUNDS):
        a = ctx.client.chat({"messages": messages, "tools": task.tools(),
                             "max_tokens": MAX_TOKENS, "temperature": 0})
        if not a.tool_calls:
            final = a.content
            break
        ids = [c.id or f"call_{len(calls) + i}" for i, c in enumerate(a.tool_calls)]
        messages.append({"role": "assistant", "content": a.content or None, "tool_calls": [
            {"id": i, "type": "function", "function": {"name": c.name,
                                                       "arguments": c.arguments}}
            for i, c in zip(ids, a.tool_calls, strict=True)]})
        for i, call in zip(ids, a.tool_calls, strict=True):
            args = call.parsed_arguments()
            calls.append((call.name, args))
            messages.append({"role": "tool", "tool_call_id": i,
                             "content": orjson.dumps(tool_result(task, call.name,
                                                                 args)).decode()})
    passed, error = judge_tools(task, calls, final)
    made = [f"{n}({orjson.dumps(a).decode() if a is not None else 'invalid JSON'})"
            for n, a in calls]
    return Judgement(passed, final, error, {"tool_calls": made})


def _part(cases: list[CaseResult], prefix: str) -> dict[str, int]:
    mine = [c for c in cases if c.id.startswith(prefix + "/")]
    return {"passed": sum(c.passed for c in mine), "total": len(mine)}


def run_quality(ctx: CheckContext) -> SuiteResult:
    started = time.monotonic()
    cases: list[CaseResult] = []
    for q in INTELLIGENCE:
        cases.append(run_case(ctx, f"intelligence/{q.id}", q.answer,
                              lambda q=q: _ask_question(ctx, q)))
    for c in SESSION:
        cases.append(run_case(ctx, f"session/{c.id}", c.answer,
                              lambda c=c: _ask_conversation(ctx, c)))
    for t in TOOLS:
        cases.append(run_case(ctx, f"tools/{t.id}", t.answer, lambda t=t: _ask_tools(ctx, t)))
    parts = {p: _part(cases, p) for p in ("intelligence", "session", "tools")}
    return suite_result("quality", cases, started, parts=parts)
