"""The `responses_subset` suite: the streamed `/v1/responses` (OpenAI Responses API) subset
that agents use — the event sequence, text deltas, one function-call round trip.

Why it exists: agent frameworks (the OpenAI Agents SDK, Codex) speak the Responses API, not
chat completions, and rebuild the answer from its typed events. A server whose stream lacks
`response.completed`, sends deltas before `response.created`, or whose deltas do not add up
to the `done` text breaks them even when the model is right. So each case checks the
protocol AND the answer (a short question with one right answer), so that a server that
streams well-formed nonsense still fails.

The events checked (OpenAI's streaming-events reference; vLLM emits the same):

    response.created                         first, always
    response.in_progress                     optional
    response.output_item.added               a `message` or `function_call` item begins
    response.content_part.added              before a message's text deltas (.done not
                                             required)
    response.output_text.delta / .done       text pieces; their concatenation == the done text
    response.function_call_arguments.delta / .done
                                             argument pieces; concatenation == `arguments`
    response.output_item.done
    response.completed                       last, `response.status` "completed", its
                                             `output` holding the same text / call

`sequence_number`, when every event has one, must increase. A `[DONE]` line after
`response.completed` (some servers send one) is ignored; `error` or `response.failed` fails.

Cases: `text` (a question, the streamed answer), `function_call` (a `function` tool offered:
the call must come as a `function_call` item with the right arguments) and `function_output`
(the call and a `function_call_output` holding a token no model can guess are sent back as
`input`; the answer must quote the token). `function_output` sends the server's own call
from `function_call` when there was one, else a well-formed one of ours, so it is judged
either way (`call_from` in the case says which).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from anvil_metrics.checks.reasoning import short_answer_problem
from anvil_metrics.checks.results import ANSWER_CHARS, SuiteResult
from anvil_metrics.checks.suite import CheckContext, Judgement, run_case, suite_result

SUITE = "responses_subset"
PATH = "/responses"
MAX_OUTPUT_TOKENS = 2048  # room for a reasoning model's thinking

TEXT_PROMPT = "What is the capital city of France? Reply with one word only."
TEXT_ANSWER = "Paris"
TOOL_NAME = "get_ticket_status"
TOOL_PROMPT = ("What is the status of support ticket T-4821, and what is its resolution "
               "code? Use the get_ticket_status tool.")
TOOL_ARGUMENTS = {"ticket_id": "T-4821"}
TOKEN = "ZQ-7731"  # the resolution code: only the tool's output holds it
TOOL_OUTPUT = {"ticket_id": "T-4821", "status": "resolved", "resolution_code": TOKEN}
TOOLS = [{
    "type": "function",
    "name": TOOL_NAME,
    "description": "Look up a support ticket: its status and resolution code.",
    "parameters": {"type": "object",
                   "properties": {"ticket_id": {"type": "string",
                                                "description": "the ticket id, e.g. T-1000"}},
                   "required": ["ticket_id"], "additionalProperties": False},
    "strict": True,
}]
OUR_CALL_ID = "call_anvil_check_1"


@dataclass(frozen=True, slots=True)
class FunctionCall:
    call_id: str
    name: str
    arguments: str


@dataclass(slots=True)
class StreamSummary:
    """What one streamed response said, and what is wrong with it as a protocol."""

    types: list[str] = field(default_factory=list)
    text: str = ""  # the output_text deltas joined
    done_text: str | None = None  # the output_text.done texts joined, None when none came
    completed: dict[str, Any] | None = None  # response.completed's `response`
    calls: list[FunctionCall] = field(default_factory=list)  # from the completed response
    added: list[str] = field(default_factory=list)  # output_item.added items' types
    problems: list[str] = field(default_factory=list)

    @property
    def completed_text(self) -> str:
        """The completed response's output text (its `message` items' output_text parts)."""
        out = []
        for item in (self.completed or {}).get("output") or ():
            if isinstance(item, dict) and item.get("type") == "message":
                out += [p.get("text", "") for p in item.get("content") or ()
                        if isinstance(p, dict) and p.get("type") == "output_text"
                        and isinstance(p.get("text"), str)]
        return "".join(out)


def summarize(events: Iterable[tuple[str, str]]) -> StreamSummary:
    """Read a stream's (SSE event name, data) pairs; every protocol breach goes in
    `problems` (the first one is the one reported)."""
    s = StreamSummary()
    args_delta: dict[str, str] = {}  # item_id -> argument deltas joined
    args_done: dict[str, str] = {}
    seq: list[Any] = []
    done_texts: list[str] = []
    for name, raw in events:
        if raw.strip() == "[DONE]":
            continue
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            s.problems.append(f"an event is not JSON: {raw[:80]!r}")
            continue
        kind = data.get("type") if isinstance(data, dict) else None
        if not isinstance(kind, str):
            s.problems.append(f"an event has no type: {raw[:80]!r}")
            continue
        if name not in ("message", kind):
            s.problems.append(f"SSE event name {name!r} but type {kind!r}")
        if s.completed is not None:
            s.problems.append(f"{kind} after response.completed")
        s.types.append(kind)
        seq.append(data.get("sequence_number"))
        if kind == "response.output_item.added":
            item = data.get("item")
            s.added.append(_str(item.get("type")) if isinstance(item, dict) else "")
        elif kind == "response.output_text.delta":
            s.text += _str(data.get("delta"))
        elif kind == "response.output_text.done":
            done_texts.append(_str(data.get("text")))
        elif kind == "response.function_call_arguments.delta":
            key = _str(data.get("item_id"))
            args_delta[key] = args_delta.get(key, "") + _str(data.get("delta"))
        elif kind == "response.function_call_arguments.done":
            args_done[_str(data.get("item_id"))] = _str(data.get("arguments"))
        elif kind in ("error", "response.failed", "response.incomplete"):
            s.problems.append(f"{kind}: {raw[:160]}")
        elif kind == "response.completed":
            response = data.get("response")
            s.completed = response if isinstance(response, dict) else {}
    s.done_text = "".join(done_texts) if done_texts else None
    _check_order(s, seq)
    _check_text(s)
    _check_calls(s, args_delta, args_done)
    return s


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _check_order(s: StreamSummary, seq: list[Any]) -> None:
    if not s.types:
        s.problems.append("the stream has no events")
        return
    if s.types[0] != "response.created":
        s.problems.append(f"the first event is {s.types[0]}, not response.created")
    if s.completed is None:
        s.problems.append(f"the stream ended without response.completed (last event: "
                          f"{s.types[-1]})")
    elif s.completed.get("status") != "completed":
        s.problems.append(f"response.completed has status {s.completed.get('status')!r}")
    if all(isinstance(n, int) for n in seq) and any(
            b <= a for a, b in zip(seq, seq[1:], strict=False)):
        s.problems.append("sequence_number does not increase")


def _check_text(s: StreamSummary) -> None:
    if not s.text and s.done_text is None:
        return
    if "message" not in s.added:
        s.problems.append("output text without a message item (response.output_item.added)")
    if "response.content_part.added" not in s.types:
        s.problems.append("output text without response.content_part.added")
    if s.done_text is None:
        s.problems.append("output_text deltas but no response.output_text.done")
    elif s.done_text != s.text:
        s.problems.append(f"response.output_text.done says {s.done_text[:60]!r}, the deltas "
                          f"add up to {s.text[:60]!r}")
    if s.completed is not None and s.completed_text != s.text:
        s.problems.append(f"response.completed's output text {s.completed_text[:60]!r} is not "
                          f"the deltas' {s.text[:60]!r}")


def _check_calls(s: StreamSummary, args_delta: Mapping[str, str],
                 args_done: Mapping[str, str]) -> None:
    for item in (s.completed or {}).get("output") or ():
        if isinstance(item, dict) and item.get("type") == "function_call":
            s.calls.append(FunctionCall(_str(item.get("call_id")), _str(item.get("name")),
                                        _str(item.get("arguments"))))
    if not s.calls and not args_done and not args_delta:
        return
    if "function_call" not in s.added:
        s.problems.append("a function call without a function_call item "
                          "(response.output_item.added)")
    for item_id, arguments in args_done.items():
        if args_delta.get(item_id, "") != arguments:
            s.problems.append(f"function_call_arguments.done says {arguments[:60]!r}, its "
                              f"deltas add up to {args_delta.get(item_id, '')[:60]!r}")
    if not args_done:
        s.problems.append("a function call without response.function_call_arguments.done")
    if not args_delta:
        s.problems.append("a function call without response.function_call_arguments.delta")
    if s.completed is not None and not s.calls:
        s.problems.append("response.completed's output holds no function_call item")
    for call in s.calls:
        if not call.call_id:
            s.problems.append(f"the function_call item for {call.name!r} has no call_id")
        if not any(_same_json(call.arguments, a) for a in args_done.values()):
            s.problems.append(f"response.completed's call arguments {call.arguments[:60]!r} "
                              "are not the streamed ones")


def _same_json(a: str, b: str) -> bool:
    """The same text, or the same JSON value written another way."""
    if a == b:
        return True
    try:
        return orjson.loads(a) == orjson.loads(b)
    except orjson.JSONDecodeError:
        return False


# -- judging one case (pure) ------------------------------------------------------------------


def shown(s: StreamSummary) -> dict[str, Any]:
    """What the reader is shown: the events' types (deltas counted), text, calls."""
    out: dict[str, Any] = {"events": _squeeze(s.types), "text": s.text[:ANSWER_CHARS]}
    if s.calls:
        out["function_calls"] = [{"name": c.name, "arguments": c.arguments[:ANSWER_CHARS]}
                                 for c in s.calls]
    return out


def _squeeze(types: list[str]) -> list[str]:
    """Runs of one type as "type ×n" (a hundred deltas are one line)."""
    runs: list[list[Any]] = []
    for t in types:
        if runs and runs[-1][0] == t:
            runs[-1][1] += 1
        else:
            runs.append([t, 1])
    return [t if n == 1 else f"{t} ×{n}" for t, n in runs]


def judge_text(s: StreamSummary) -> Judgement:
    problem = (s.problems[0] if s.problems else None) or (
        "the response has a function call, not text" if s.calls else None) or (
        short_answer_problem(s.text, TEXT_ANSWER))
    return Judgement(problem is None, shown(s), problem)


def judge_call(s: StreamSummary) -> Judgement:
    problem = s.problems[0] if s.problems else None
    if problem is None:
        if not s.calls:
            problem = f"no function_call item: the server answered {s.text[:80]!r}"
        elif s.calls[0].name != TOOL_NAME:
            problem = f"called {s.calls[0].name!r}, not {TOOL_NAME!r}"
        else:
            try:
                args = orjson.loads(s.calls[0].arguments)
            except orjson.JSONDecodeError:
                args = None
            if args != TOOL_ARGUMENTS:
                problem = (f"arguments {s.calls[0].arguments[:80]!r}, expected "
                           f"{orjson.dumps(TOOL_ARGUMENTS).decode()}")
    return Judgement(problem is None, shown(s), problem)


def judge_output(s: StreamSummary) -> Judgement:
    problem = (s.problems[0] if s.problems else None) or (
        "the server called a tool again instead of answering" if s.calls else None)
    if problem is None and TOKEN not in s.text:
        problem = (f"the answer does not quote the tool output's resolution code {TOKEN}: "
                   f"{s.text[:80]!r}")
    return Judgement(problem is None, shown(s), problem)


# -- the suite ---------------------------------------------------------------------------------


def body_of(ctx: CheckContext, input_: Any, tools: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": ctx.client.model, "input": input_, "stream": True,
                            "store": False, "temperature": 0,
                            "max_output_tokens": MAX_OUTPUT_TOKENS}
    if tools:
        body["tools"] = TOOLS
    return body


def ask(ctx: CheckContext, body: dict[str, Any]) -> StreamSummary:
    return summarize((e.event, e.data) for e in ctx.client.stream_events(PATH, body))


def output_input(call: FunctionCall | None) -> list[dict[str, Any]]:
    """The second turn's `input`: the question, the call, the call's output."""
    if call is None:
        call = FunctionCall(OUR_CALL_ID, TOOL_NAME, orjson.dumps(TOOL_ARGUMENTS).decode())
    return [
        {"role": "user", "content": TOOL_PROMPT},
        {"type": "function_call", "call_id": call.call_id, "name": call.name,
         "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id,
         "output": orjson.dumps(TOOL_OUTPUT).decode()},
    ]


def run_responses_subset(ctx: CheckContext) -> SuiteResult:
    started = time.monotonic()
    results = []
    results.append(run_case(
        ctx, "text", f"{TEXT_ANSWER}, streamed from response.created to response.completed",
        lambda: judge_text(ask(ctx, body_of(ctx, TEXT_PROMPT, tools=False)))))

    server_call: list[FunctionCall] = []

    def first_turn() -> Judgement:
        summary = ask(ctx, body_of(ctx, TOOL_PROMPT, tools=True))
        j = judge_call(summary)
        if j.passed:
            server_call.append(summary.calls[0])
        return j
    results.append(run_case(ctx, "function_call",
                            {"name": TOOL_NAME, "arguments": TOOL_ARGUMENTS}, first_turn))

    call = server_call[0] if server_call else None

    def second_turn() -> Judgement:
        j = judge_output(ask(ctx, body_of(ctx, output_input(call), tools=True)))
        return Judgement(j.passed, j.answer, j.error,
                         extra={"call_from": "server" if call else "check"})
    results.append(run_case(ctx, "function_output",
                            f"an answer quoting {TOKEN} from the function_call_output",
                            second_turn))
    return suite_result(SUITE, results, started)
