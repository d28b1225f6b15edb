"""The simulator's tokenizer rules (`sim/tokenizer.py`): counts worked by hand from the rules in
its docstring, the long-text (vectorised) count equal to the short one, ids exactly as long as
the count, and the template as text parsing back to the chat's ids."""

from __future__ import annotations

import numpy as np
import pytest

from anvil_metrics.sim.tokenizer import (
    GENERATION_PROMPT_TEXT,
    TokenizeError,
    chat_token_ids,
    count_chat_tokens,
    count_text_tokens,
    message_text,
    prompt_token_ids,
    render_chat,
    template_token_ids,
    text_ids,
    text_token_ids,
)

HELLO = [{"role": "user", "content": "hello"}]


@pytest.mark.parametrize(("text", "rule", "count"), [
    ("hello, world!", "words4", 6),  # hello 2, "," 1, world 2, "!" 1
    ("hello, world!\n", "words4", 6),  # a newline is free under words4
    ("hello, world!\n", "syllable3", 7),  # hello 1 + 5 // 3 = 2, world 2, "," "!" and "\n" 1
    ("a ab abc abcd abcde", "words4", 6),  # 1 + 1 + 1 + 1 + 2
    ("a ab abc abcd abcde", "syllable3", 8),  # 1 + 1 + 2 + 2 + 2
    ("   ", "words4", 0),
    ("", "syllable3", 0),
])
def test_counts_worked_by_hand(text: str, rule: str, count: int) -> None:
    assert count_text_tokens(text, rule) == count
    assert len(text_token_ids(text, rule)) == count
    assert text_ids(text, rule).tolist() == text_token_ids(text, rule)


@pytest.mark.parametrize(("unit", "words4", "syllable3"), [
    ("abcdefgh ", 2, 3),  # 8 letters: ceil(8 / 4), 1 + 8 // 3
    ("naïve café.\n", 4, 6),  # 2 + 1 + 1; 2 + 2 + 1 + the newline
])
def test_long_texts_count_as_the_rule_says(unit: str, words4: int, syllable3: int) -> None:
    text = unit * 100  # well past the length where counting turns vectorised
    assert len(text) > 256
    assert count_text_tokens(text, "words4") == 100 * words4
    assert count_text_tokens(text, "syllable3") == 100 * syllable3


def test_unknown_rule_is_refused() -> None:
    for call in (count_text_tokens, text_token_ids, text_ids):
        with pytest.raises(ValueError, match="unknown tokenizer rule 'bpe'"):
            call("x", "bpe")


def test_the_chat_template_costs() -> None:
    # generation prompt 3 + message overhead 4 + "user" 1 + "hello" 2
    assert count_chat_tokens(HELLO) == 10
    assert count_chat_tokens(HELLO, add_generation_prompt=False) == 7
    assert count_chat_tokens(HELLO, "syllable3") == 3 + 4 + 2 + 2
    assert count_chat_tokens([]) == 3
    ids = chat_token_ids(HELLO)
    assert len(ids) == 10 and ids == chat_token_ids(HELLO)  # deterministic
    assert ids[:1] == ids[-3:-2]  # each turn and the generation prompt open with <|im_start|>
    assert prompt_token_ids(HELLO).tolist() == ids
    assert prompt_token_ids(HELLO).dtype == np.uint32


def test_message_text_shapes() -> None:
    assert message_text({"role": "assistant", "content": None}) == ""
    parts = [{"type": "text", "text": "ab"}, {"type": "text", "text": "cd"}]
    assert message_text({"content": parts}) == "abcd"
    for bad in ([{"type": "image_url", "image_url": {}}], [{"type": "text"}], 3):
        with pytest.raises(TokenizeError):
            message_text({"content": bad})
    for messages in ([3], [{"content": "x"}], [{"role": "", "content": "x"}]):
        with pytest.raises(TokenizeError, match="message"):
            count_chat_tokens(messages)  # type: ignore[arg-type]


def test_the_template_as_text_parses_back() -> None:
    assert render_chat(HELLO) == "<|im_start|>user\nhello<|im_end|>\n" + GENERATION_PROMPT_TEXT
    assert GENERATION_PROMPT_TEXT == "<|im_start|>assistant\n"
    chat = [{"role": "system", "content": "be brief"}, *HELLO,
            {"role": "assistant", "content": "hi there, friend"}]
    for gen in (True, False):
        text = render_chat(chat, add_generation_prompt=gen)
        assert (template_token_ids(text).tolist()
                == prompt_token_ids(chat, add_generation_prompt=gen).tolist())
    # text outside the turns: the rule, with each marker one special id
    assert len(template_token_ids("hello <|im_end|>")) == 2 + 1
