"""Conversations' texts: each piece grows the server's count of the templated prompt by its
planned size (the simulator's tokenizer stands in for the server's counter), and a
conversation shares nothing with another past the system prompt and its head's first
words."""

from __future__ import annotations

import pytest

from anvil_metrics.prep.prompts import NO_CALIBRATION, Calibration
from anvil_metrics.prep.turns import ConversationPrompts, TurnSizes, size_turn_texts
from anvil_metrics.sim.tokenizer import prompt_token_ids

CALIBRATION = Calibration("tokenize", 10.0, 1.3)


def make_count(rule: str):
    calls = []

    def count(messages: list[dict]) -> int:
        calls.append(messages)
        return int(prompt_token_ids(messages, rule).size)

    return count, calls


def conversation(prompts: ConversationPrompts, c: int, turns: int, answers: list[str]
                 ) -> list[list[dict]]:
    """Each turn's messages, with `answers[k]` as the server's answer to turn k + 1."""
    out, history = [], prompts.opening()
    for k in range(1, turns + 1):
        history = [*history, prompts.user_message(c, k)]
        out.append(history)
        if k < turns:
            history = [*history, {"role": "assistant", "content": answers[k - 1]}]
    return out


@pytest.mark.parametrize("rule", ["words4", "syllable3"])
@pytest.mark.parametrize("sizes", [TurnSizes(200), TurnSizes(512, 300, 1000),
                                   TurnSizes(64, 0, 128)])
def test_each_piece_grows_the_count_by_its_size(rule: str, sizes: TurnSizes) -> None:
    count, calls = make_count(rule)
    texts = size_turn_texts(sizes, CALIBRATION, seed=3, run_nonce="n0nce123", count=count)
    assert calls, "sized by counting"
    assert all("Calibration 0" in str(m) for m in calls)  # never a real prompt early
    prompts = ConversationPrompts(texts, "n0nce123")
    answers = ["Sure, here it is.", "Done: the second answer is longer than the first.",
               "Ok."]
    turns = conversation(prompts, 17, 4, answers)
    n = [count(m) for m in turns]
    tolerance = max(2, sizes.turn_tokens // 100)
    for k in range(1, 4):  # turn k + 1 adds the answer to turn k and its own message
        answer_growth = count([*turns[k - 1], {"role": "assistant", "content": answers[k - 1]}]
                              ) - n[k - 1]
        assert abs(n[k] - n[k - 1] - answer_growth - sizes.turn_tokens) <= tolerance, (k, n)
    assert texts.counted["turn_tokens"] is not None
    assert abs(texts.counted["turn_tokens"] - sizes.turn_tokens) <= tolerance
    first = turns[0]
    if sizes.prefix_tokens:
        without = count([{"role": "user", "content": first[-1]["content"].replace(
            texts.prefix, "")}, ])
        with_prefix = count([first[-1]])
        assert abs(with_prefix - without - sizes.prefix_tokens) <= max(2, sizes.prefix_tokens
                                                                        // 100)
    if sizes.system_prompt_tokens:
        assert first[0]["role"] == "system"
        assert abs(count(first) - count(first[1:]) - sizes.system_prompt_tokens) <= max(
            2, sizes.system_prompt_tokens // 100)
    else:
        assert first[0]["role"] == "user"


def test_conversations_share_only_the_system_prompt_and_the_template() -> None:
    count, _ = make_count("words4")
    texts = size_turn_texts(TurnSizes(300, 200, 400), CALIBRATION, 0, "n0nce123", count)
    prompts = ConversationPrompts(texts, "n0nce123")
    a = prompt_token_ids([*prompts.opening(), prompts.user_message(1, 1)])
    b = prompt_token_ids([*prompts.opening(), prompts.user_message(2, 1)])
    shared = next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
    system_only = prompt_token_ids(prompts.opening(), add_generation_prompt=False).size
    assert system_only <= shared <= system_only + 8  # + "<|im_start|>user\nConversation"
    # the same conversation's later turn starts with its whole first turn
    turn1 = prompt_token_ids([*prompts.opening(), prompts.user_message(1, 1)],
                             add_generation_prompt=False)
    turn2 = prompt_token_ids([*prompts.opening(), prompts.user_message(1, 1),
                              {"role": "assistant", "content": "ok"},
                              prompts.user_message(1, 2)])
    assert (turn2[:turn1.size] == turn1).all()


def test_without_a_counter_the_estimate_sizes_every_piece() -> None:
    texts = size_turn_texts(TurnSizes(130, 13, 26), NO_CALIBRATION, 0, "n0nce123")
    assert texts.counted == {"turn_tokens": None, "prefix_tokens": None,
                             "system_prompt_tokens": None}
    assert len(texts.turn.split()) == 100 and len(texts.prefix.split()) == 10
    assert texts.system is not None and len(texts.system.split()) == 20
