"""`load/mixbodies.py`: request k's body is its class's and model's — a planned size, a
dataset's entry k mod n as it is, or a trace's entry k mod n (its blocks and output
length) — and a source that cannot be read names its class."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from anvil_metrics.checks import jsonmode, retrieval
from anvil_metrics.checks.haystack import HEAD_RE, make_haystacks
from anvil_metrics.errors import ScenarioError, UsageError
from anvil_metrics.load.mixbodies import MixBodies
from anvil_metrics.load.scenario import scenario_from_dict
from anvil_metrics.prep.prompts import Calibration, PromptFactory
from anvil_metrics.wire.observe import KeptAnswer

CAL = Calibration("probe", 20.0, 1.7)


def _mix(tmp_path: Path, trace_text: bytes | None = None) -> MixBodies:
    (tmp_path / "d.jsonl").write_bytes(b'{"prompt": "first question"}\n'
                                       b'{"messages": [{"role": "system", "content": "s"},'
                                       b' {"role": "user", "content": "second"}]}\n')
    (tmp_path / "t.jsonl").write_bytes(trace_text or (
        b'{"timestamp": 0, "input_length": 300, "output_length": 4, "hash_ids": [1]}\n'
        b'{"timestamp": 9, "input_length": 700, "output_length": 6, "hash_ids": [1, 2]}\n'))
    sc = scenario_from_dict({
        "measurement_protocol": "p", "max_tokens": 8, "context_tokens": 2000,
        "max_context_tokens": 4096, "context_seed": 3,
        "request_class": [{"name": "planned", "weight": 1},
                          {"name": "asked", "weight": 1, "dataset": str(tmp_path / "d.jsonl"),
                           "max_tokens": 5, "model": "lora"},
                          {"name": "traced", "weight": 1, "trace": str(tmp_path / "t.jsonl")}],
        "models": {"names": ["m", "lora"]}})
    bodies = MixBodies(sc, "m", PromptFactory(CAL, 3, "n0nce123"), [1992], template_tokens=9)
    bodies.prepare()
    return bodies


def test_each_class_routes_to_its_source(tmp_path: Path) -> None:
    bodies = _mix(tmp_path)
    seen = set()
    budget = 7  # the budget's planned size: a mix plans each class's own instead
    for k in range(60):
        klass, model = bodies.draw(k)
        raw = b"".join(bodies.build_parts(1992, k))
        doc = orjson.loads(raw)
        seen.add(klass)
        if klass == 1:  # the dataset's entry k mod 2, as it is, with the class's fields
            assert doc["messages"] == ([{"role": "user", "content": "first question"}]
                                       if k % 2 == 0 else
                                       [{"role": "system", "content": "s"},
                                        {"role": "user", "content": "second"}])
            assert (doc["model"], doc["max_tokens"], bodies.planned(k, budget)) == ("lora", 5,
                                                                               None)
        elif klass == 2:  # the trace's entry k mod 2: its output length, its size planned
            out, size = ((4, 300), (6, 700))[k % 2]
            assert (doc["max_tokens"], doc["ignore_eos"], bodies.planned(k, budget)) == (
                out, True, size)
        else:
            assert bodies.planned(k, budget) == 1992 and doc["max_tokens"] == 8
        assert bodies.extra(k) == {"class_index": klass, "model_index": model,
                                   "request_bytes": len(raw)}  # the body just built
    assert seen == {0, 1, 2}


def test_a_source_that_cannot_be_read_names_its_class(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"request_class\[2\]\.trace \('traced'\)"):
        _mix(tmp_path, b'{"timestamp": 0, "input_length": -1, "output_length": 4}\n')


def said(content: str, prompt_tokens: int | None = None) -> KeptAnswer:
    return KeptAnswer(content, "", (), prompt_tokens, "stop")


def test_a_check_class_asks_its_suites_cases_and_judges_each_answer() -> None:
    sc = scenario_from_dict({
        "measurement_protocol": "p", "max_tokens": 8, "context_tokens": 200,
        "max_context_tokens": 4096, "context_seed": 1,
        "request_class": [{"name": "chat", "weight": 1},
                          {"name": "json", "weight": 1, "check": "json"}]})
    bodies = MixBodies(sc, "m", PromptFactory(CAL, 3, "n0nce123"), [192])
    bodies.prepare()
    n, judged = len(jsonmode.CASES), 0
    for k in range(40):
        klass, _ = bodies.draw(k)
        doc = orjson.loads(b"".join(bodies.build_parts(192, k)))
        judge = bodies.judge(k)
        if klass == 0:
            assert judge is None and doc["max_tokens"] == 8
            continue
        case = jsonmode.CASES[k % n]  # case k mod n, as the suite asks it, streamed
        assert doc == {**jsonmode.request_body(case), "model": "m", "stream": True,
                       "stream_options": {"include_usage": True}}
        assert bodies.planned(k, 192) is None
        assert bodies.output_cap(k) == jsonmode.MAX_TOKENS
        assert judge is not None
        assert judge(said(orjson.dumps(case.value).decode())) == {"check_passed": True}
        wrong = judge(said("not json"))
        assert wrong["check_passed"] is False and "not JSON" in wrong["check_reason"]
        judged += 1
    assert judged > 5


def test_a_retrieval_class_is_sized_before_the_load_and_each_request_has_its_nonce() -> None:
    """Its needles' prompts are fitted to the class's context_tokens by the count given
    (here a count of 1.3 tokens a word, the head's 10 more), as `anvil check retrieval`
    fits them; each request's head has a nonce of its own; the judge is the suite's."""
    def count(messages: list[dict]) -> int:
        return 10 + round(1.3 * len(messages[-1]["content"].split()))

    sc = scenario_from_dict({
        "measurement_protocol": "p", "max_tokens": 8, "context_tokens": 200,
        "max_context_tokens": 8192, "context_seed": 1,
        "request_class": [{"name": "chat", "weight": 1},
                          {"name": "needle", "weight": 3, "check": "retrieval",
                           "context_tokens": 3000}]})
    bodies = MixBodies(sc, "m", PromptFactory(CAL, 3, "n0nce123"), [192])
    bodies.prepare(count)
    nonces, cases = set(), set()
    for k in range(60):
        if bodies.draw(k)[0] != 1:
            continue
        doc = orjson.loads(b"".join(bodies.build_parts(192, k)))
        text = doc["messages"][-1]["content"]
        head = HEAD_RE.match(text)
        assert head is not None and head.group(1) == "retrieval"
        nonces.add(text.split()[1])
        assert abs(count(doc["messages"]) - 3000) <= 3000 * retrieval.SIZE_TOLERANCE_PCT / 100
        assert bodies.planned(k, 192) == 3000 and doc["stream"] is True
        haystack = make_haystacks(1, retrieval.DEPTHS, retrieval.DISTRACTORS)[k % 4]
        cases.add(k % 4)
        assert haystack.needle.sentence in text and haystack.question in text
        judge = bodies.judge(k)
        assert judge is not None
        assert judge(said(f"It is {haystack.needle.value}.", 3000)) == {"check_passed": True}
        wrong = judge(said(f"It is {haystack.distractor_values[0]}.", 3000))
        assert wrong["check_passed"] is False and "another key" in wrong["check_reason"]
        off = judge(said(haystack.needle.value, 3100))
        assert off["check_passed"] is False and "3100" in off["check_reason"]
    assert len(cases) == 4 and len(nonces) > 10


def test_a_retrieval_class_needs_its_size_and_other_checks_refuse_one() -> None:
    base = {"measurement_protocol": "p", "max_tokens": 8, "context_tokens": 200,
            "max_context_tokens": 8192}
    with pytest.raises(ScenarioError, match=r"request_class\[0\]\.context_tokens"):
        scenario_from_dict({**base, "request_class": [
            {"name": "r", "weight": 1, "check": "retrieval"}]})
    with pytest.raises(ScenarioError, match=r"none beside check"):
        scenario_from_dict({**base, "request_class": [
            {"name": "t", "weight": 1, "check": "tools", "context_tokens": 100}]})
