"""`tools`, `streaming_tools`, `tool_result_recovery`: does the server still call tools right?

Why these three: a tool-call parser that a new engine version or a quantization breaks shows
up as a wrong function name, arguments that are not JSON, a parallel call dropped, a `"3"`
where the schema says integer — or, streamed, as `delta.tool_calls` fragments that do not
assemble (two calls sharing index 0). And an agent needs the model to read what a tool
returned: quote a fresh order id from the result, fix a call the tool rejected.

    tools                 20 cases (`toolcases.TOOL_CASES`), `tool_choice: "auto"`
    streaming_tools       the same 20 with `stream: true`, assembled by the client by index
    tool_result_recovery  6 conversations ending in a tool result: 3 carry a token made
                          per run that the answer must quote, 3 an error the next call
                          must correct

Scoring (BFCL's idea of comparing the call's structure, not its text): the function name
equal, the arguments a JSON object, every expected argument matching (`argument_problem`:
`jsonmatch` with the rules in `toolcases`), no argument the schema does not declare, no
call more or fewer than expected; parallel calls match in any order. Every call needs a
name and an id of its own (the tool's result answers to the id). The finish reason is
recorded, not judged (clients act on `tool_calls`, and servers differ on "tool_calls" vs
"stop").

The recovery conversations replay a call id of 9 alphanumerics: Mistral's template (and
API) refuse any other shape, and an id we invented must not be what fails the check.
"""

from __future__ import annotations

import itertools
import json
import random
import time
from collections.abc import Mapping, Sequence
from typing import Any

from anvil_metrics.checks.client import ChatAnswer, ToolCall
from anvil_metrics.checks.jsonmatch import ARGUMENTS, Exact, Unordered, mismatch
from anvil_metrics.checks.results import CaseResult, SuiteResult
from anvil_metrics.checks.suite import CheckContext, Judgement, run_case, suite_result
from anvil_metrics.checks.toolcases import (
    RECOVERY_CASES,
    SYSTEM,
    TOOL_CASES,
    TOOLS,
    ExpectedCall,
    RecoveryCase,
    ToolCase,
    expected_json,
    spec_json,
    tool_specs,
)

MAX_TOKENS = 2048  # room for a reasoning model's thinking before its call
TOKEN_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I: a token is read exactly
TOKEN_CHARS = 6
CALL_ID = "anvil0001"  # 9 alphanumerics (see the module docstring)


# -- scoring (pure) ---------------------------------------------------------------------------
def argument_problem(spec: Any, value: Any, path: str = "arguments") -> str | None:
    """None when `value` satisfies `spec` (`jsonmatch.ARGUMENTS`, the rules in `toolcases`),
    else why not, at `path` and below (`arguments.start.date`, `arguments.to[0]`)."""
    m = mismatch(spec, value, ARGUMENTS)
    if m is None:
        return None
    at = path + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in m.path)
    spec, got = m.expected, m.got
    if m.kind == "missing":
        return f"{at}: missing"
    if m.kind == "none_of":
        return f"{at}: {_show(got)} is none of {_show(spec_json(spec)['any_of'])}"
    if m.kind == "no_order":
        return f"{at}: {_show(got)} is not {_show(spec_json(list(spec.items)))} in any order"
    if m.kind == "not_object":
        return f"{at}: {_show(got)} is not an object"
    if m.kind == "not_list":
        if isinstance(spec, Unordered):
            return f"{at}: {_show(got)} is not a list of {len(spec.items)} (any order)"
        return f"{at}: {_show(got)} is not a list of {len(spec)}"
    if m.kind == "wrong_type":
        if isinstance(spec, str):
            return f"{at}: {_show(got)} is not a string ({_show(spec)} expected)"
        return f"{at}: {_show(got)} is not a number ({spec} expected)"
    if isinstance(spec, bool):
        return f"{at}: {_show(got)} is not {_show(spec)}"
    if isinstance(spec, int | float):
        return f"{at}: {got} != {spec}"
    return f"{at}: {_show(got)} != {_show(spec.value if isinstance(spec, Exact) else spec)}"


def undeclared(value: Any, schema: Mapping[str, Any], path: str = "arguments") -> list[str]:
    """The keys of `value` (nested objects too) that `schema` does not declare."""
    if not isinstance(value, dict) or schema.get("type") != "object":
        return []
    props = schema.get("properties") or {}
    out = []
    for key, sub in value.items():
        if key not in props:
            out.append(f"{path}.{key}")
        else:
            out += undeclared(sub, props[key], f"{path}.{key}")
    return out


def parse_arguments(call: ToolCall) -> tuple[dict[str, Any] | None, str | None]:
    """The call's arguments as an object, or None and why not (with a hint when the text is
    several JSON values run together: fragments of separate calls assembled on one index)."""
    parsed = call.parsed_arguments()
    if isinstance(parsed, dict):
        return parsed, None
    if parsed is not None:
        return None, f"{call.name}: arguments are JSON but not an object: {call.arguments[:80]!r}"
    try:
        _, end = json.JSONDecoder().raw_decode(call.arguments.strip())
    except ValueError:
        return None, f"{call.name}: arguments are not JSON: {call.arguments[:80]!r}"
    return None, (f"{call.name}: arguments are several JSON values run together (streamed "
                  f"fragments of different calls on one index?): {call.arguments[:80]!r}"
                  if end else f"{call.name}: arguments are not JSON")


def call_shape(calls: Sequence[ToolCall]) -> str | None:
    """What an agent needs of every call besides its content: a function name, and an id of
    its own (the tool's result answers to it by `tool_call_id`)."""
    for i, c in enumerate(calls):
        if not c.name:
            return f"tool call {i} has no function name"
        if not c.id:
            return f"tool call {i} ({c.name}) has no id"
    ids = [c.id for c in calls]
    if len(set(ids)) < len(ids):
        return f"tool calls share an id: {ids}"
    return None


def match_call(expected: ExpectedCall, name: str, arguments: dict[str, Any]) -> str | None:
    """None when the call is the expected one, else why not."""
    if name != expected.name:
        return f"called {name!r}, expected {expected.name!r}"
    why = argument_problem(dict(expected.arguments), arguments)
    if why:
        return f"{name}: {why}"
    sent = [k for k in expected.absent if k in arguments]
    if sent:
        return f"{name}: arguments.{sent[0]} was sent though the user gave none"
    extra = undeclared(arguments, TOOLS[expected.name]["function"]["parameters"])
    if extra:
        return f"{name}: {extra[0]} is not a parameter of the tool"
    return None


def judge_calls(expected: Sequence[ExpectedCall], calls: Sequence[ToolCall],
                content: str, text_contains: str | None = None) -> str | None:
    """None when `calls` are exactly the `expected` ones in any order (or, when none is
    expected, no call and a text containing `text_contains`); else why not."""
    if not expected:
        if calls:
            return f"called {calls[0].name!r} though no tool was needed"
        if text_contains and text_contains.casefold() not in content.casefold():
            return f"the answer does not say {text_contains!r}: {content[:120]!r}"
        return None
    if not calls:
        return f"no tool call; answered in text: {content[:120]!r}"
    why = call_shape(calls)
    if why:
        return why
    parsed = []
    for call in calls:
        arguments, why = parse_arguments(call)
        if why:
            return why
        parsed.append((call.name, arguments))
    if len(calls) < len(expected):
        missing = _best_reasons(expected, parsed)
        return (f"{len(expected)} calls expected, {len(calls)} made"
                + (f" ({missing})" if missing else ""))
    for chosen in itertools.permutations(range(len(parsed)), len(expected)):
        if all(match_call(e, *parsed[i]) is None for e, i in zip(expected, chosen, strict=True)):
            if len(parsed) > len(expected):
                spare = [parsed[i][0] for i in range(len(parsed)) if i not in chosen]
                return f"unexpected extra call(s): {', '.join(spare)}"
            return None
    return _best_reasons(expected, parsed) or "the calls do not match"


def _best_reasons(expected: Sequence[ExpectedCall],
                  parsed: Sequence[tuple[str, dict[str, Any]]]) -> str:
    """Why each expected call found no match: against an unused call of the same name if
    any, else the first unused call."""
    used: set[int] = set()
    reasons = []
    for e in expected:
        free = [i for i in range(len(parsed)) if i not in used]
        ok = [i for i in free if match_call(e, *parsed[i]) is None]
        if ok:
            used.add(ok[0])
            continue
        same = [i for i in free if parsed[i][0] == e.name]
        pick = (same or free or [None])[0]
        if pick is None:
            reasons.append(f"no call of {e.name!r}")
        else:
            used.add(pick)
            reasons.append(match_call(e, *parsed[pick]) or "")
    return "; ".join(r for r in reasons if r)


def calls_json(calls: Sequence[ToolCall]) -> list[dict[str, Any]]:
    """The calls as the reader sees them: arguments parsed when they are JSON."""
    out = []
    for c in calls:
        parsed = c.parsed_arguments()
        out.append({"name": c.name, "arguments": c.arguments if parsed is None else parsed})
    return out


def _show(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)[:80]


# -- tools and streaming_tools -----------------------------------------------------------------
def max_tokens(ctx: CheckContext) -> int:
    """`MAX_TOKENS`, or half the server's context when that is less (the prompts are short)."""
    return min(MAX_TOKENS, ctx.max_model_len // 2) if ctx.max_model_len else MAX_TOKENS


def tool_body(case: ToolCase, stream: bool, limit: int = MAX_TOKENS) -> dict[str, Any]:
    body: dict[str, Any] = {"messages": [{"role": "user", "content": case.prompt}],
                            "tools": tool_specs(case.tools), "tool_choice": "auto",
                            "temperature": 0, "max_tokens": limit}
    if stream:
        body["stream"] = True
    return body


def _answer_json(answer: ChatAnswer) -> Any:
    return calls_json(answer.tool_calls) if answer.tool_calls else answer.content


def _tool_case(ctx: CheckContext, case: ToolCase, stream: bool) -> CaseResult:
    if case.calls:
        expected: Any = [expected_json(c) for c in case.calls]
    else:
        expected = {"no_call": True, "text_contains": case.text_contains}

    def judge() -> Judgement:
        answer = ctx.client.chat(tool_body(case, stream, max_tokens(ctx)))
        why = judge_calls(case.calls, answer.tool_calls, answer.content, case.text_contains)
        extra: dict[str, Any] = {"kind": case.kind, "finish_reason": answer.finish_reason}
        if stream:
            extra["chunks"] = answer.chunks
        return Judgement(why is None, _answer_json(answer), why, extra)

    return run_case(ctx, case.id, expected, judge)


def _by_kind(cases: Sequence[CaseResult], kinds: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, list[int]] = {}
    for c in cases:
        tally = out.setdefault(kinds[c.id], [0, 0])
        tally[0] += c.passed
        tally[1] += 1
    return {k: f"{p}/{n}" for k, (p, n) in out.items()}


def _run_tool_cases(ctx: CheckContext, name: str, stream: bool) -> SuiteResult:
    started = time.monotonic()
    cases = [_tool_case(ctx, case, stream) for case in TOOL_CASES]
    return suite_result(name, cases, started,
                        by_kind=_by_kind(cases, {c.id: c.kind for c in TOOL_CASES}))


def run_tools(ctx: CheckContext) -> SuiteResult:
    return _run_tool_cases(ctx, "tools", stream=False)


def run_streaming_tools(ctx: CheckContext) -> SuiteResult:
    return _run_tool_cases(ctx, "streaming_tools", stream=True)


# -- tool_result_recovery -----------------------------------------------------------------------
def make_token(prefix: str, rng: random.Random) -> str:
    return prefix + "".join(rng.choice(TOKEN_ALPHABET) for _ in range(TOKEN_CHARS))


def recovery_messages(case: RecoveryCase, token: str | None) -> list[dict[str, Any]]:
    """The conversation up to the tool's result (`token` put in it for "use_result")."""
    result = case.result.replace("{token}", token) if token else case.result
    call = {"id": CALL_ID, "type": "function",
            "function": {"name": case.tool, "arguments": json.dumps(dict(case.call_arguments))}}
    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": case.prompt},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": CALL_ID, "content": result}]


def judge_recovery(case: RecoveryCase, token: str | None, calls: Sequence[ToolCall],
                   content: str) -> str | None:
    """None when the turn after the tool's result is right (see the module docstring)."""
    if case.kind == "use_result":
        if calls:
            return f"called {calls[0].name!r} again instead of answering from the result"
        if token and token not in content:
            return f"the answer does not quote {token} from the tool's result: {content[:120]!r}"
        return None
    assert case.fixed is not None
    if not calls:
        return f"no corrected call; answered in text: {content[:120]!r}"
    arguments, why = parse_arguments(calls[0])
    why = call_shape(calls) or why
    if why:
        return why
    if calls[0].name == case.tool and arguments == dict(case.call_arguments):
        return "repeated the call the tool rejected"
    why = match_call(case.fixed, calls[0].name, arguments or {})
    if why is None and len(calls) > 1:
        why = f"unexpected extra call(s): {', '.join(c.name for c in calls[1:])}"
    return why


def run_tool_result_recovery(ctx: CheckContext) -> SuiteResult:
    started = time.monotonic()
    rng = random.Random(f"tool_result_recovery:{ctx.options.seed}")
    results = []
    for case in RECOVERY_CASES:
        token = make_token(case.token_prefix, rng) if case.kind == "use_result" else None
        offered = (case.tool, *case.tools)
        body = {"messages": recovery_messages(case, token), "tools": tool_specs(offered),
                "tool_choice": "auto", "temperature": 0, "max_tokens": max_tokens(ctx)}
        expected: Any = ({"answer_contains": token} if token else expected_json(case.fixed)
                         if case.fixed else None)

        def judge(case: RecoveryCase = case, token: str | None = token,
                  body: dict[str, Any] = body) -> Judgement:
            answer = ctx.client.chat(body)
            why = judge_recovery(case, token, answer.tool_calls, answer.content)
            return Judgement(why is None, _answer_json(answer), why, {"kind": case.kind})

        results.append(run_case(ctx, case.id, expected, judge))
    return suite_result("tool_result_recovery", results, started,
                        by_kind=_by_kind(results, {c.id: c.kind for c in RECOVERY_CASES}))
