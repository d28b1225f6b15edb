"""Prompt text: reproducible from seed and nonce, unique per request, varied."""

from __future__ import annotations

import collections
import re

import orjson

from anvil_metrics.prep.prompts import Calibration, PromptFactory, body_text
from anvil_metrics.sim.tokenizer import text_token_ids

CAL = Calibration("probe", 20.0, 1.7)


def _content(pf: PromptFactory, size: int, index: int) -> str:
    return pf.messages(size, index)[-1]["content"]


def test_same_seed_and_nonce_rebuild_identical_prompts() -> None:
    a = PromptFactory(CAL, seed=7, run_nonce="ab12cd34")
    b = PromptFactory(CAL, seed=7, run_nonce="ab12cd34")
    assert _content(a, 4096, 3) == _content(b, 4096, 3)
    c = PromptFactory(CAL, seed=7, run_nonce="ffff0000")  # a rerun with a new nonce
    assert _content(a, 4096, 3) != _content(c, 4096, 3)


def test_requests_share_no_long_token_prefix() -> None:
    pf = PromptFactory(CAL, seed=0, run_nonce="ab12cd34")
    for rule in ("words4", "syllable3"):
        ids = [text_token_ids(_content(pf, 4096, i), rule) for i in (0, 1, 9, 10, 11, 123)]
        for i in range(len(ids)):
            for j in range(i + 1, len(ids)):
                common = 0
                for x, y in zip(ids[i], ids[j], strict=False):
                    if x != y:
                        break
                    common += 1
                assert common <= 16, (rule, i, j, common)


def test_text_is_varied_not_one_repeated_token() -> None:
    words = re.findall(r"\w+", body_text(20_000, 1).lower())
    top, n = collections.Counter(words).most_common(1)[0]
    assert n / len(words) < 0.02, (top, n / len(words))
    assert len(set(words)) > 200


# --- shared-prefix mode, needles, request parts --------------------------------------------

from anvil_metrics.load.body import BodyBuilder  # noqa: E402
from anvil_metrics.load.scenario import scenario_from_dict  # noqa: E402
from anvil_metrics.prep.prompts import (  # noqa: E402
    SharedPrefix,
    messages_for,
)
from anvil_metrics.sim.tokenizer import chat_token_ids, count_chat_tokens  # noqa: E402
from anvil_metrics.wire.transport import chunks  # noqa: E402


def _common(a: list[int], b: list[int]) -> int:
    """Length of the common prefix of two token id lists."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                min(len(a), len(b)))


def _sim_counter(rule: str):
    return lambda msgs: count_chat_tokens(msgs, rule)


def test_shared_prefix_mode_shares_exactly_the_prefix() -> None:
    """Group members share the chat header + the group's prefix, token for token, and
    nothing more; different groups share no more than normal requests do; the prefix is
    sized to `prefix_tokens` by the server's count (±0.1 %)."""
    for rule in ("words4", "syllable3"):
        count = _sim_counter(rule)
        shared = SharedPrefix(prefix_tokens=3000, group_size=4)
        pf = PromptFactory(CAL, seed=3, run_nonce="ab12cd34", shared=shared)
        pf.prepare([4096, 8192], count)
        ids = {i: chat_token_ids(pf.messages(4096 if i % 2 else 8192, i), rule)
               for i in range(8)}
        # the text up to the tag, as a lone message: its ids before the template's end
        parts = pf.parts(4096, 1)
        lone = chat_token_ids(messages_for(parts.head + parts.prefix), rule)
        shared_ids = _common(lone, ids[1])
        assert abs(pf.prefix_counted - 3000) <= 3, (rule, pf.prefix_counted)
        for i in range(4):          # group 0: indices 0..3
            for j in range(i + 1, 4):
                assert _common(ids[i], ids[j]) == shared_ids, (rule, i, j)
        for i in range(4):          # vs group 1: only the header and "Run <nonce> group"
            assert _common(ids[i], ids[4 + i % 4]) <= 16, rule
        # every request still has its planned size (±0.1 % by the same count)
        for size in (4096, 8192):
            n = count(pf.messages(size, 2))
            assert abs(n - size) <= max(4, size // 1000), (rule, size, n)


def test_normal_mode_parts_splice_to_the_same_body() -> None:
    sc = scenario_from_dict({"measurement_protocol": "t", "max_tokens": 16,
                             "max_context_tokens": 9000})
    for shared in (None, SharedPrefix(1000, 3)):
        pf = PromptFactory(CAL, seed=1, run_nonce="n0", shared=shared)
        bb = BodyBuilder(sc, "m", pf)
        bb.prepare([2048])
        for i in (0, 1, 5):
            body = orjson.loads(bb.build(2048, i))
            assert body["messages"][-1]["content"] == pf.messages(2048, i)[-1]["content"]
            assert b"".join(bb.build_parts(2048, i)) == bb.build(2048, i)


def test_chunks_rebuild_the_request_exactly() -> None:
    parts = (b"head", b"x" * 200_000, b"", b"mid", b"y" * 70_000, b"t")
    out = list(chunks(parts, 65_536))
    assert b"".join(out) == b"".join(parts)
    assert all(len(c) == 65_536 for c in out[:-1]) and 0 < len(out[-1]) <= 65_536


def test_body_text_is_reproducible_and_has_the_asked_words() -> None:
    for n in (1, 5, 6, 17, 1000, 12_345):
        t = body_text(n, 9)
        assert t == body_text(n, 9)
        assert len(t.split()) == n
        assert t.endswith(".")
    assert body_text(1000, 1) != body_text(1000, 2)
