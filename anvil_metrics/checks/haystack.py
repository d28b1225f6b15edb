"""Long prompts with needles for `retrieval` and `near_limit`: what is hidden, where, and
how the prompt is sized to a planned token count against the server itself.

Why its own module: the two long-context suites share the haystack (RULER's "multi-key
needle in a haystack": one needle whose key is asked for, distractor needles with other
keys and values, all in sentence-like filler) and the sizing; the suites keep only their
cases and their verdicts, and the simulator's script reads the same sentence formats.

Sizing is measured, as for the load's prompts (`prompts.py`): a two-count linear fit
(`calibrate_by_probe`), then a few `max_tokens=1` probes of the whole prompt at full size,
correcting the filler's word count (secant steps) until the server's `usage.prompt_tokens`
is within `FIT_TOLERANCE_PCT` of the plan. The fit is done once per suite, on the first
case's prompt; every case then has the same filler length (its needles have the same shape,
so the same size within a few tokens), so a case costs one long request. A probe's prompt
differs from a case's only in its nonce, five tokens in: a server's prefix cache cannot
serve a case from a probe (near_limit times its request), and the sizes are the same. The
probes of one fit share their nonce and their needles' word positions, so they differ only
at their end: with a prefix cache (vLLM, SGLang) only the first costs a whole prefill.
"""

from __future__ import annotations

import bisect
import random
import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from anvil_metrics.prep.prompts import Calibration, body_text, fit_word_count

NEEDLE = "The special magic value for {key} is {value}."
QUESTION = ("What is the special magic value for {key} mentioned in the document above? "
            "Answer with the value only.")
HEAD = "Document {nonce} for a {suite} check. Read it; a question about it follows.\n\n"
NEEDLE_RE = re.compile(r"The special magic value for ([a-z]+-[a-z]+) is (\d+)\.")
QUESTION_RE = re.compile(r"What is the special magic value for ([a-z]+-[a-z]+) mentioned")
HEAD_RE = re.compile(r"^Document [0-9a-f]+ for a ([a-z_]+) check\.")

FIT_TOLERANCE_PCT = 0.1  # the probes stop within this; a case is judged at SIZE_TOLERANCE_PCT
FIT_ROUNDS = 6

_ADJECTIVES = ("amber", "brisk", "cobalt", "dusty", "eager", "frosty", "gilded", "hollow",
               "ivory", "jagged", "kindly", "lunar", "mellow", "nimble", "olive", "placid",
               "quartz", "rustic", "silent", "tawny", "umber", "velvet", "woolen", "zesty")
_NOUNS = ("anchor", "badger", "canyon", "dolphin", "ember", "falcon", "glacier", "harbor",
          "iris", "juniper", "kestrel", "lantern", "meadow", "nebula", "orchard", "pebble",
          "quiver", "raven", "saddle", "thistle", "urchin", "violet", "willow", "yarrow")


@dataclass(frozen=True, slots=True)
class Needle:
    key: str  # e.g. "cobalt-falcon"
    value: str  # seven digits, e.g. "4038821"
    depth: float  # 0..1 of the filler's length

    @property
    def sentence(self) -> str:
        return NEEDLE.format(key=self.key, value=self.value)


@dataclass(frozen=True, slots=True)
class Haystack:
    """One case's hidden facts: `needle` is asked for, `distractors` are not."""

    needle: Needle
    distractors: tuple[Needle, ...]

    @property
    def question(self) -> str:
        return QUESTION.format(key=self.needle.key)

    @property
    def distractor_values(self) -> tuple[str, ...]:
        return tuple(d.value for d in self.distractors)


def make_haystacks(seed: int, depths: Sequence[float], distractors: int,
                   salt: str = "retrieval") -> tuple[Haystack, ...]:
    """One haystack per depth: keys, values and distractor depths drawn from `seed`
    (`salt` keeps two suites' needles apart); keys and values distinct within a haystack."""
    rng = random.Random(f"{salt}:{seed}")
    out = []
    for depth in depths:
        if not 0.0 <= depth <= 1.0:
            raise ValueError(f"needle depth must be within 0..1, got {depth}")
        keys: list[str] = []
        while len(keys) < distractors + 1:
            key = f"{rng.choice(_ADJECTIVES)}-{rng.choice(_NOUNS)}"
            if key not in keys:
                keys.append(key)
        values: list[str] = []
        while len(values) < distractors + 1:
            value = str(rng.randint(1_000_000, 9_999_999))
            if value not in values:
                values.append(value)
        others = tuple(Needle(k, v, round(rng.uniform(0.02, 0.98), 3))
                       for k, v in zip(keys[1:], values[1:], strict=True))
        out.append(Haystack(Needle(keys[0], values[0], depth), others))
    return tuple(out)


def place(filler: str, sentences: Sequence[tuple[int, str]]) -> str:
    """`filler` with each (word index, sentence) inserted at the sentence boundary nearest
    to that word (in the order given when two land on the same boundary)."""
    words = filler.split(" ")
    starts = [0] + [i + 1 for i, w in enumerate(words) if w.endswith(".")]
    at: dict[int, list[str]] = {}
    for index, sentence in sentences:
        k = bisect.bisect_left(starts, index)
        near = min(starts[max(0, k - 1):k + 1], key=lambda s: abs(s - index))
        at.setdefault(near, []).append(sentence)
    out: list[str] = []
    for i in range(len(words) + 1):
        out.extend(at.get(i, ()))
        if i < len(words):
            out.append(words[i])
    return " ".join(out)


def prompt_text(haystack: Haystack, filler_words: int, seed: int, suite: str, nonce: str,
                anchor_words: int | None = None) -> str:
    """The user message: head (with `nonce`), filler with every needle, the question.
    Needles sit at their depth of `anchor_words` (default: the filler's length), so the
    prompts of a fit, which differ in length only, differ only after the last needle: a
    server with a prefix cache prefills each probe after the first almost for free."""
    filler = body_text(filler_words, seed)
    anchor = filler_words if anchor_words is None else anchor_words
    needles = [(min(filler_words, round(n.depth * anchor)), n.sentence)
               for n in (haystack.needle, *haystack.distractors)]
    return (HEAD.format(nonce=nonce, suite=suite) + place(filler, needles) + "\n\n"
            + haystack.question)


def new_nonce() -> str:
    return uuid.uuid4().hex[:8]


class SizingError(Exception):
    """The prompt could not be sized (the server reports no `usage.prompt_tokens`, or the
    fit does not come near the plan): a failure of the check, not a transport error."""


@dataclass(frozen=True, slots=True)
class Fit:
    words: int  # filler words that make the prompt the planned size
    counted_tokens: int  # the server's count of the last probe kept
    probes: int  # long probes spent


def fit_words(count: Callable[[int], int], target: int, calibration: Calibration,
              start_words: int, tolerance_pct: float = FIT_TOLERANCE_PCT,
              max_rounds: int = FIT_ROUNDS) -> Fit:
    """Correct the filler's word count until `count(words)` (the server's count of the
    whole prompt) is within `tolerance_pct` of `target`; secant steps, the calibration's
    slope until there are two counts. Returns the closest fit found."""
    fit = fit_word_count(count, target, start_words, calibration.tokens_per_word,
                         tolerance_pct, max_rounds)
    return Fit(fit.words, fit.counted_tokens, fit.rounds)


def start_words(calibration: Calibration, target: int, haystack: Haystack) -> int:
    """The first guess: the fit's words for `target`, less what the head, needles and
    question take (counted as filler words, which the probes then correct)."""
    fixed = len((HEAD + haystack.question).split()) + sum(
        len(n.sentence.split()) for n in (haystack.needle, *haystack.distractors))
    return max(1, calibration.words_for(target) - fixed)
