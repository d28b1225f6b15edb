"""retrieval: the retrieval and near_limit suites' rules — the near-limit size, a plan past
the server's limit, the needle's judge — and the simulator's script that answers them (no
server). (The haystack: `test_haystack.py`; quality: `test_quality.py`.)"""

from __future__ import annotations

import pytest

from anvil_metrics.checks import haystack as hs
from anvil_metrics.checks import retrieval as r
from anvil_metrics.checks.client import ChatAnswer, CheckClient
from anvil_metrics.checks.suite import CheckContext, CheckOptions
from anvil_metrics.prep.prompts import messages_for
from anvil_metrics.sim import script_retrieval
from anvil_metrics.sim.tokenizer import count_chat_tokens
from anvil_metrics.urls import Endpoint

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
