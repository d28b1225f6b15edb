"""haystack: the retrieval suites' haystacks — reproducible from the seed, every needle once
at its depth and the question last, the size fitted to the server's count.

Why: a haystack that differed between runs, or a needle dropped or placed twice, would
make a retrieval verdict depend on the draw rather than on the model.
"""

from __future__ import annotations

import pytest

from anvil_metrics.checks import haystack as hs
from anvil_metrics.checks import retrieval as r
from anvil_metrics.prep.prompts import Calibration


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
