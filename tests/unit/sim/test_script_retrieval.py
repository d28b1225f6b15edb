"""The scripted answers to `retrieval` and `near_limit` (`sim/script_retrieval.py`): perfect
recall of the needle asked for, or the distractor, no answer, or a prompt size 2 % off."""

from __future__ import annotations

from typing import Any

import pytest

from anvil_metrics.sim.script import ScriptedReply
from anvil_metrics.sim.script_retrieval import PROMPT_SIZE_FACTOR, answer
from anvil_metrics.sim.tokenizer import count_chat_tokens


def doc(suite: str = "retrieval", key: str = "red-fox") -> dict[str, Any]:
    text = (f"Document 1f for a {suite} check. Filler text. The special magic value for "
            "blue-cat is 456. More filler. The special magic value for red-fox is 123. End. "
            f"What is the special magic value for {key} mentioned in the document?")
    return {"messages": [{"role": "user", "content": text}]}


@pytest.mark.parametrize("suite", ["retrieval", "near_limit"])
def test_the_needle_asked_for(suite: str) -> None:
    assert answer(doc(suite), frozenset()) == ScriptedReply(
        content="The special magic value for red-fox is 123.")
    wrong = answer(doc(suite), frozenset({f"{suite}:wrong_value"}))
    assert wrong == ScriptedReply(content="The special magic value for red-fox is 456.")


def test_no_answer_a_missing_key_and_the_prompt_size() -> None:
    gone = answer(doc(), frozenset({"retrieval:no_answer"}))
    assert gone is not None and "123" not in gone.content
    missing = answer(doc(key="gold-owl"), frozenset())
    assert missing == ScriptedReply(content="The document does not say.")
    sized = answer(doc(), frozenset({"retrieval:prompt_size"}))
    true = count_chat_tokens(doc()["messages"])
    assert sized is not None and sized.prompt_tokens == round(true * PROMPT_SIZE_FACTOR) != true


def test_what_is_not_ours() -> None:
    assert answer({**doc(), "max_tokens": 1}, frozenset()) is None  # a sizing probe
    assert answer({**doc(), "max_completion_tokens": 1}, frozenset()) is None
    assert answer(doc(suite="other"), frozenset()) is None
    no_question = {"messages": [{"role": "user", "content": "Document 1f for a retrieval "
                                 "check. The special magic value for a-b is 1."}]}
    assert answer(no_question, frozenset()) is None
