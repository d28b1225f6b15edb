"""A check suite as a request class: case k's body, and the suite's own judge of its answer."""

from __future__ import annotations

import time

import orjson

from anvil_metrics.checks import jsonmode, reasoning, toolcases, tools, underload
from anvil_metrics.wire.observe import KEEP_CHARS, KeptAnswer, StreamObserver


def said(content: str, thought: str = "", fragments: tuple = ()) -> KeptAnswer:
    return KeptAnswer(content, thought, fragments, None, "stop")


def test_request_k_asks_case_k_mod_n_as_the_suite_asks_it():
    n = len(jsonmode.CASES)
    for k in (0, 3, n, 2 * n + 1):
        assert underload.case_body("json", k) == jsonmode.request_body(jsonmode.CASES[k % n])
    assert underload.case_body("reasoning_leakage", 5) == reasoning.request_body(
        reasoning.CASES[5 % len(reasoning.CASES)])


def test_the_suites_own_judge_gives_the_verdict():
    n = len(jsonmode.CASES)
    for k in range(2 * n):
        right = orjson.dumps(jsonmode.CASES[k % n].value).decode()
        assert underload.verdict("json", k, said(right)) == (True, None)
        passed, reason = underload.verdict("json", k, said(f"```json\n{right}\n```"))
        assert not passed and "fenced" in reason
    case = reasoning.CASES[1]  # Rome
    assert underload.verdict("reasoning_leakage", 1, said(case.answer)) == (True, None)
    passed, reason = underload.verdict("reasoning_leakage", 1, said(case.answer, "let me think"))
    assert not passed and "reasoning streamed" in reason


def test_a_reason_is_bounded():
    passed, reason = underload.verdict("json", 0, said("x" * 5000))
    assert not passed and 0 < len(reason) <= underload.REASON_CHARS


def test_a_judgement_costs_the_load_little():
    """Loosely: a json answer is judged in well under a millisecond once prepared (the
    module's figure is ~50 µs; this allows 40x for a slow, shared machine)."""
    underload.prepare("json")
    right = orjson.dumps(jsonmode.CASES[4].value).decode()
    t0 = time.perf_counter()
    for _ in range(200):
        underload.verdict("json", 4, said(right))
    assert (time.perf_counter() - t0) / 200 < 2e-3


def _stream(observer: StreamObserver, calls: list[tuple[str | None, str, str]],
            pieces: int = 5) -> None:
    """Feed `calls` (id, name, arguments) as a server streams them: the id and name in a
    call's first fragment, its arguments in `pieces`-character fragments, by index."""
    t = 1_000
    observer.on_data(b'{"choices":[{"index":0,"delta":{"role":"assistant"}}]}', t)
    for i, (cid, name, args) in enumerate(calls):
        first = {"index": i, "type": "function", "function": {"name": name, "arguments": ""}}
        if cid is not None:
            first["id"] = cid
        for frag in [first, *({"index": i, "function": {"arguments": args[j:j + pieces]}}
                              for j in range(0, len(args), pieces))]:
            t += 1_000
            observer.on_data(orjson.dumps({"choices": [{"index": 0, "delta": {
                "tool_calls": [frag]}}]}), t)
    observer.on_data(b'{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}',
                     t + 1)
    observer.on_data(b"[DONE]", t + 2)


def _judged(k: int, calls: list[tuple[str | None, str, str]], pieces: int = 5
            ) -> tuple[StreamObserver, dict]:
    def judge(answer: KeptAnswer) -> dict:
        passed, reason = underload.verdict("tools", k, answer)
        return {"check_passed": passed, "check_reason": reason}

    obs = StreamObserver(k, 0, judge=judge, max_tokens=2048)
    _stream(obs, calls, pieces)
    assert obs.failure is None
    return obs, obs.finish().extra


def test_streamed_tool_calls_are_assembled_and_judged_as_anvil_check_tools_judges():
    """Every tools case: the right calls, streamed in fragments, pass; a wrong name, an
    argument cut short or a call without an id fail with the suite's own reason; the
    tool-call deltas are output (first output at the first fragment, one chunk each)."""
    n = len(toolcases.TOOL_CASES)
    assert underload.SUITES["tools"].cases == n
    for k, case in enumerate(toolcases.TOOL_CASES):
        assert underload.case_body("tools", k + n) == tools.tool_body(case, stream=False)
        right = [(f"c{i}", c.name, orjson.dumps(toolcases.concrete(c.arguments)).decode())
                 for i, c in enumerate(case.calls)]
        if not right:
            continue
        obs, extra = _judged(k, right)
        assert extra["check_passed"] is True, (case.id, extra)
        assert obs.first_output_ns == obs.first_content_ns == 2_000
        frags = sum(1 + -(-len(a) // 5) for _, _, a in right)
        assert obs.content_chunks == frags and len(obs.deltas) == frags
        wrong = [(i, "not_a_tool", a) for i, _, a in right]
        _, extra = _judged(k, wrong)
        assert extra["check_passed"] is False and "not_a_tool" in extra["check_reason"]
        _, extra = _judged(k, [(right[0][0], right[0][1], right[0][2][:-1]), *right[1:]])
        assert extra["check_passed"] is False and "not JSON" in extra["check_reason"]
        _, extra = _judged(k, [(None, right[0][1], right[0][2]), *right[1:]])
        assert extra["check_passed"] is False and "no id" in extra["check_reason"]


def test_an_answer_longer_than_the_judge_keeps_fails_with_a_reason():
    case = next(c for c in toolcases.TOOL_CASES if c.calls)
    k = toolcases.TOOL_CASES.index(case)
    obs, extra = _judged(k, [("c0", case.calls[0].name, "x" * (KEEP_CHARS + 10))], 1000)
    assert extra["check_passed"] is False and str(KEEP_CHARS) in extra["check_reason"]
    assert obs.kept_chars > KEEP_CHARS
    assert sum(len(orjson.dumps(f)) for f in obs.fragments) <= KEEP_CHARS
