"""traceprompts: each hash id one text of exactly its block's tokens, the same wherever the
id appears; a prompt exactly the trace's `input_tokens` once the template is counted in;
blocks that change with the run's nonce.

The counts are the simulator's own (both its rules): what `anvil sim` charges.
"""

from __future__ import annotations

import pytest

from anvil_metrics.prep.traceprompts import WORDS, TracePrompts, block_text
from anvil_metrics.sim.tokenizer import count_chat_tokens, count_text_tokens


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


@pytest.mark.parametrize("rule", ["words4", "syllable3"])
def test_every_word_is_one_token_and_a_prompt_is_its_size(rule: str) -> None:
    assert all(count_text_tokens(w, rule) == 1 for w in WORDS)
    assert count_text_tokens(block_text(1, 5, 512), rule) == 512
    overhead = count_chat_tokens(user(WORDS[0]), rule) - 1
    p = TracePrompts("abcd1234", 512, overhead)
    for size, ids in ((1500, (1, 2, 3)), (1024 + overhead + 1, (1, 2, 3)), (600, (1, 9)),
                      (1024 + 2, (1, 2, 3)), (512 + 1, (4, 5)), (40, (7,)), (900, ())):
        assert count_chat_tokens(user(p.text(size, ids, line=3)), rule) == size, (size, ids)


def test_an_id_is_the_same_text_wherever_it_appears() -> None:
    p = TracePrompts("n0nce", 512, 0)
    a, b = p.text(1300, (1, 2, 3)), p.text(1100, (1, 2, 9))
    shared = block_text(p.seed, 1, 512) + " " + block_text(p.seed, 2, 512)
    assert a.startswith(shared + " ") and b.startswith(shared + " ")
    assert a[len(shared):] != b[len(shared):]
    assert block_text(p.seed, 4, 512).startswith(block_text(p.seed, 4, 100))  # the remainder
    assert p.text(1300, (1, 2, 3)) == a  # rebuilt identically


def test_another_nonce_gives_other_blocks() -> None:
    assert TracePrompts("n0nce", 512, 0).text(600, (1, 2)) != TracePrompts(
        "other", 512, 0).text(600, (1, 2))


def test_plain_traces_share_only_their_prefix_id() -> None:
    p = TracePrompts("n0nce", 512, 0)
    a = p.text(300, line=1, prefix_id="sys", prefix_tokens=200)
    b = p.text(300, line=2, prefix_id="sys", prefix_tokens=200)
    c = p.text(300, line=1)
    assert a.split()[:200] == b.split()[:200] and a.split()[200:] != b.split()[200:]
    assert len(a.split()) == len(c.split()) == 300 and a != c


def test_the_templates_opening_goes_inside_the_first_block() -> None:
    """With the template's opening tokens known (`opening_tokens`), the first block gives up
    that many words and the last takes them: the prompt keeps its size, and the token chain
    a server's prefix cache hashes (the opening, then the words) fills whole blocks."""
    rule = "words4"
    overhead = count_chat_tokens(user(WORDS[0]), rule) - 1
    plain = TracePrompts("n0nce", 64, overhead)
    opened = TracePrompts("n0nce", 64, overhead, opening_tokens=3)
    for size, ids in ((64 * 3 + 20, (1, 2, 3)), (64 + overhead + 2, (1, 2)), (300, (5,))):
        assert count_chat_tokens(user(opened.text(size, ids)), rule) == size, (size, ids)
    a, b = plain.text(200, (1, 2, 3)).split(), opened.text(200, (1, 2, 3)).split()
    assert len(a) == len(b)
    assert b[:61] == block_text(opened.seed, 1, 61).split()  # 64 - 3 words of id 1
    assert b[61:125] == block_text(opened.seed, 2, 64).split()  # id 2 whole, after it
    assert a[:64] == block_text(plain.seed, 1, 64).split()  # without: the whole block
    assert TracePrompts("n", 64, 2, opening_tokens=9).opening_tokens == 2  # within overhead
