"""Unit tests of `retrieval`, `near_limit` and `quality`: the haystack, the sizing fit, the
pure judges, and the simulator scripts that answer them (no server)."""

from __future__ import annotations

import orjson
import pytest

from anvil_metrics.checks import haystack as hs
from anvil_metrics.checks import quality as q
from anvil_metrics.checks import retrieval as r
from anvil_metrics.checks.client import ChatAnswer, CheckClient
from anvil_metrics.checks.suite import CheckContext, CheckOptions
from anvil_metrics.prep.prompts import Calibration, messages_for
from anvil_metrics.sim import script_quality, script_retrieval
from anvil_metrics.sim.tokenizer import count_chat_tokens
from anvil_metrics.urls import Endpoint

# -- the haystack -------------------------------------------------------------------------


def test_haystacks_are_reproducible_from_the_seed_and_distinct_within():
    a = hs.make_haystacks(7, r.DEPTHS, r.DISTRACTORS)
    assert a == hs.make_haystacks(7, r.DEPTHS, r.DISTRACTORS)
    assert a != hs.make_haystacks(8, r.DEPTHS, r.DISTRACTORS)
    assert a != hs.make_haystacks(7, r.DEPTHS, r.DISTRACTORS, salt="near_limit")
    for h in a:
        needles = (h.needle, *h.distractors)
        assert len({n.key for n in needles}) == len({n.value for n in needles}) == 5
        assert all(len(n.value) == 7 for n in needles)
    assert [h.needle.depth for h in a] == list(r.DEPTHS)
    with pytest.raises(ValueError):
        hs.make_haystacks(1, (1.5,), 2)


def test_prompt_holds_every_needle_once_at_its_depth_and_the_question_last():
    (h,) = hs.make_haystacks(3, (0.35,), 4)
    text = hs.prompt_text(h, 3000, seed=3, suite="retrieval", nonce="ab12cd34")
    assert hs.HEAD_RE.match(text).group(1) == "retrieval"
    assert text.endswith(h.question)
    assert hs.QUESTION_RE.search(text).group(1) == h.needle.key
    found = hs.NEEDLE_RE.findall(text)
    assert sorted(found) == sorted((n.key, n.value) for n in (h.needle, *h.distractors))
    words = text.split(" ")
    at = next(i for i, w in enumerate(words) if w == h.needle.key)
    assert abs(at / len(words) - 0.35) < 0.02
    # a needle starts a sentence: the word before it ends one
    start = text.index(h.needle.sentence)
    assert text[start - 2:start] == ". "


def test_place_puts_sentences_at_sentence_boundaries_in_word_positions():
    filler = "a b c. d e f. g h i."
    assert hs.place(filler, [(4, "X.")]) == "a b c. X. d e f. g h i."
    assert hs.place(filler, [(0, "X."), (9, "Y.")]) == "X. a b c. d e f. g h i. Y."
    assert hs.place(filler, [(3, "X."), (3, "Y.")]) == "a b c. X. Y. d e f. g h i."


def test_probes_of_one_fit_differ_only_after_the_last_needle():
    (h,) = hs.make_haystacks(5, (0.5,), 4)
    short = hs.prompt_text(h, 2000, 5, "retrieval", "n0", anchor_words=2000)
    longer = hs.prompt_text(h, 2100, 5, "retrieval", "n0", anchor_words=2000)
    last = max(short.index(n.sentence) for n in (h.needle, *h.distractors))
    assert short[:last + 40] == longer[:last + 40]


def _counter(per_word: float, overhead: int):
    calls = []

    def count(words: int) -> int:
        calls.append(words)
        return overhead + int(words * per_word + 0.002 * words ** 1.3)  # a little curved
    return count, calls


def test_fit_words_converges_from_a_wrong_calibration():
    count, calls = _counter(1.47, 60)
    fit = hs.fit_words(count, 131_072, Calibration("probe", 50, 1.3), start_words=100_000)
    assert abs(fit.counted_tokens - 131_072) <= 0.001 * 131_072
    assert fit.probes == len(calls) <= hs.FIT_ROUNDS


def test_start_words_leave_room_for_the_needles_and_question():
    (h,) = hs.make_haystacks(1, (0.5,), 4)
    cal = Calibration("probe", 20, 1.5)
    assert hs.start_words(cal, 4096, h) < cal.words_for(4096)


# -- retrieval's rules --------------------------------------------------------------------


def test_near_limit_size_is_the_limit_less_the_margin_rounded_down():
    assert r.near_limit_tokens(None, 393_216) == 389_000
    assert r.near_limit_tokens(None, 12_288) == 8_000
    assert r.near_limit_tokens(50_000, 393_216) == 50_000
    assert r.near_limit_tokens(None, None) is None


def test_over_limit_counts_the_answer_tokens():
    assert r.over_limit(131_072, None, "--context") is None
    assert r.over_limit(131_072, 262_144, "--context") is None
    why = r.over_limit(131_072, 32_768, "--context")
    assert "context 131072" in why and "max_model_len 32768" in why and "--context" in why
    assert r.over_limit(131_072, 131_072, "--context") is not None  # no room to answer


@pytest.fixture
def hay() -> hs.Haystack:
    return hs.make_haystacks(11, (0.5,), 4)[0]


def test_judge_needle_passes_the_value_at_the_planned_size(hay):
    assert r.judge_needle(hay, f"It is {hay.needle.value}.", 4100, 4096) == (True, None)
    thought = f"<think>{hay.distractors[0].value}? no.</think>It is {hay.needle.value}."
    assert r.judge_needle(hay, thought, 4096, 4096) == (True, None)


@pytest.mark.parametrize("content,tokens,why", [
    ("", 4096, "no answer"),
    ("I do not know.", 4096, "is not in the answer"),
    ("{d}", 4096, "another key's value"),
    ("{v} or {d}", 4096, "also gives another key's value"),
    ("{v}", 4200, "+2.54 % off the planned 4096"),
    ("{v}", 3900, "-4.79 % off"),
    ("{v}", None, "no usage.prompt_tokens"),
])
def test_judge_needle_fails(hay, content, tokens, why):
    content = content.format(v=hay.needle.value, d=hay.distractors[0].value)
    passed, error = r.judge_needle(hay, content, tokens, 4096, "stop")
    assert not passed and why in error


def test_near_limit_without_a_size_is_an_error_before_anything_is_asked():
    client = CheckClient(Endpoint.parse("http://127.0.0.1:9"), "m")
    result = r.run_near_limit(CheckContext(client, CheckOptions(), None))
    assert result.result == "error" and "max_model_len" in result.error
    assert result.to_json()["requested_context_tokens"] is None


class _NoUsage:
    """A client whose server answers without `usage`: the prompt cannot be sized."""

    def __init__(self) -> None:
        self.asked = 0

    def chat(self, body: dict, timeout_s: float | None = None) -> ChatAnswer:
        self.asked += 1
        return ChatAnswer(content="hello")

    def take_retries(self) -> tuple:
        return ()


def test_retrieval_fails_every_case_once_when_the_size_cannot_be_measured():
    client = _NoUsage()
    result = r.run_retrieval(CheckContext(client, CheckOptions(context_tokens=4096), None))
    assert result.result == "fail" and client.asked == 1  # the first probe, never again
    assert all("no usage.prompt_tokens" in c.error for c in result.cases)


# -- quality's judges ---------------------------------------------------------------------


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


# -- the simulator's scripts --------------------------------------------------------------


def _retrieval_request(h: hs.Haystack, suite: str = "retrieval", **extra) -> dict:
    text = hs.prompt_text(h, 800, 1, suite, "feedbeef")
    return {"messages": messages_for(text), **extra}


def test_script_retrieval_answers_the_asked_value_or_breaks_as_told(hay):
    data = _retrieval_request(hay)
    assert script_retrieval.answer(data, frozenset()).content.endswith(f"{hay.needle.value}.")
    wrong = script_retrieval.answer(data, frozenset({"retrieval:wrong_value"})).content
    assert hay.needle.value not in wrong and any(v in wrong for v in hay.distractor_values)
    assert hay.needle.value not in script_retrieval.answer(
        data, frozenset({"retrieval:no_answer"})).content
    off = script_retrieval.answer(data, frozenset({"retrieval:prompt_size"})).prompt_tokens
    assert off == round(count_chat_tokens(data["messages"]) * 1.02)
    # near_limit's fault does not touch retrieval, and the other way round
    assert hay.needle.value in script_retrieval.answer(
        data, frozenset({"near_limit:wrong_value"})).content
    near = _retrieval_request(hay, "near_limit")
    assert hay.needle.value not in script_retrieval.answer(
        near, frozenset({"near_limit:wrong_value"})).content


def test_script_retrieval_leaves_probes_and_strangers_alone(hay):
    assert script_retrieval.answer(_retrieval_request(hay, max_tokens=1), frozenset()) is None
    assert script_retrieval.answer({"messages": messages_for("hello")}, frozenset()) is None


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
