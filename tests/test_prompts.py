"""Prompt text: reproducible from seed and nonce, unique per request, varied."""

from __future__ import annotations

import collections
import re

from anvil_metrics.prompts import Calibration, PromptFactory, body_text
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
