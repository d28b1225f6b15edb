"""Synthetic prompts of a planned size, reproducible from a seed, unique per request.

Every request's user message is `<head><shared prefix><tag><body>`:

- `head` names the run's nonce and the request (or, in shared-prefix mode, the request's
  group), so two requests of a run, or two runs with the same seed, differ within the first
  few tokens after the chat template's header and a server's prefix cache cannot serve one
  request's prompt to another;
- `shared prefix` is empty except in shared-prefix mode, where every request of a group
  carries the same `prefix_tokens` of text and then differs at `tag`;
- `body` is natural-looking text from a seeded word list, built once per planned size
  before the load (building a 393k-token body takes ~10-20 ms with numpy; doing it per
  request on the gevent hub would stall every stream).

Sizing is measured, not assumed. `calibrate_by_probe` fits `tokens = overhead + per_word *
words` from two counts by the server (its tokenize endpoint, or a `max_tokens=1` probe's
`usage.prompt_tokens`, chat template included); `PromptFactory.prepare` then counts each
planned size's prompt and corrects its word count until the count is within tolerance.
The word counts found are what a calibration cache stores (`calcache.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

_WORDS = (
    "the of and to in is was for on that with as by at from this are be it an or which "
    "have has had not but were their its been also more one two three first new other "
    "time year people way day man woman child world life hand part place case week "
    "company system program question work government number night point home water room "
    "mother area money story fact month lot right study book eye job word business issue "
    "side kind head house service friend father power hour game line end member law car "
    "city community name president team minute idea kid body information back parent face "
    "others level office door health person art war history party result change morning "
    "reason research girl guy moment air teacher force education river mountain valley "
    "bridge harbor engine signal pattern measure report window garden market village "
    "storm winter summer autumn spring forest island desert ocean planet orbit velocity "
    "careful quiet bright heavy narrow ancient modern simple complex gentle rapid steady "
    "builds carries opens follows describes measures records reaches returns improves "
    "during across between under over after before without within around toward against "
    "because although whereas unless while since until therefore however meanwhile"
).split()

FALLBACK_TOKENS_PER_WORD = 1.3
MIN_UNIQUE_TOKENS = 32  # shared-prefix mode: each request keeps at least this much of its own

CountTokens = Callable[[list[dict]], int]

_CAPS = [w.capitalize() for w in _WORDS]
# index v + k*V: k=0 "word", 1 "Word" (sentence start), 2 "word." (end), 3 "Word." (both)
_VARIANTS = np.array(list(_WORDS) + _CAPS + [w + "." for w in _WORDS] + [c + "." for c in _CAPS],
                     dtype=object)


_BLOCK_WORDS = 4096  # text is drawn in fixed blocks, so a longer text extends a shorter one


def _block(seed: int, block: int) -> np.ndarray:
    """Word indices (variant-coded, see `_VARIANTS`) of one block of sentences."""
    v = len(_WORDS)
    rng = np.random.Generator(np.random.PCG64([seed, block]))
    ends = np.cumsum(rng.integers(6, 17, size=_BLOCK_WORDS // 6 + 2))
    ends = ends[ends < _BLOCK_WORDS]
    idx = rng.integers(0, v, size=_BLOCK_WORDS)
    idx[0] += v
    idx[ends] += v  # a sentence starts after each end
    idx[ends - 1] += 2 * v
    idx[-1] = idx[-1] % v + ((idx[-1] // v) | 2) * v  # a block ends a sentence
    return idx


def body_text(n_words: int, seed: int) -> str:
    """`n_words` words of sentence-like text (sentences of 6-16 words drawn uniformly from
    the word list), identical for the same (n_words, seed). The text of n words is the
    text of n + k words cut short (its last word then ends a sentence), so one more word
    costs the server one word's tokens: the size correction converges in a few counts.
    Vectorised: ~6 ms for the ~225k words of a 393k-token prompt."""
    n = max(1, n_words)
    v = len(_WORDS)
    blocks = [_block(seed, b) for b in range(-(-n // _BLOCK_WORDS))]
    idx = np.concatenate(blocks)[:n] if len(blocks) > 1 else blocks[0][:n].copy()
    idx[-1] = idx[-1] % v + ((idx[-1] // v) | 2) * v
    return " ".join(_VARIANTS[idx].tolist())


# Indices are written with a fixed number of digits, least significant first: tokenizers
# that split digits (Qwen's) would otherwise make request 1000's prompt 3 tokens longer than
# request 0's, and with the digits reversed two requests differ within the first digits.
INDEX_DIGITS = 6


def _index(i: int) -> str:
    return f"{i:0{INDEX_DIGITS}d}"[::-1]


def request_prefix(run_nonce: str, request_index: int, warmup: bool = False,
                   sizing: bool = False) -> str:
    """The unique head of a request's message in normal mode. Sizing counts use their own
    head (same length in words), so counting a prompt before the load never sends a real
    request's prompt: a server would cache it and serve that request warm."""
    kind = "Sizing" if sizing else "Warmup" if warmup else "Request"
    return f"{kind} {_index(request_index)} of run {run_nonce}. "


def group_prefix(run_nonce: str, group: int, warmup: bool = False, sizing: bool = False
                 ) -> str:
    """The head shared by one group's requests in shared-prefix mode."""
    kind = "Sizing group" if sizing else "Warmup group" if warmup else "Group"
    return f"{kind} {_index(group)} of run {run_nonce}. "


MAX_GROUP_SIZE = len(_WORDS)


def request_tag(request_index: int, group_size: int, warmup: bool = False) -> str:
    """Where a shared-prefix request leaves its group's prefix. Its first token must differ
    between any two members of a group, or they would share one token more than planned:
    so it opens with a word that is distinct per position in the group (a tokenizer gives
    distinct whole words distinct first tokens), not with shared punctuation or digits."""
    kind = "Warmup" if warmup else "Request"
    return f" {_CAPS[request_index % group_size]} {kind} {_index(request_index)}. "


def messages_for(text: str, system_prompt: str | None = None) -> list[dict]:
    msgs: list[dict] = []
    if system_prompt:
        msgs.append({"role": "system", "content": system_prompt})
    msgs.append({"role": "user", "content": text})
    return msgs


@dataclass(frozen=True, slots=True)
class Calibration:
    """`tokens ≈ overhead_tokens + tokens_per_word * words` for this endpoint and model."""

    method: str  # "tokenize" | "probe" | "local_tokenizer" | "none"
    overhead_tokens: float
    tokens_per_word: float

    def words_for(self, planned_tokens: float) -> int:
        return max(1, round((planned_tokens - self.overhead_tokens) / self.tokens_per_word))


NO_CALIBRATION = Calibration("none", 0.0, FALLBACK_TOKENS_PER_WORD)


@dataclass(frozen=True, slots=True)
class SharedPrefix:
    """Shared-prefix mode: requests `group_size` at a time share `prefix_tokens` of prompt
    (chat template header included) and differ after it."""

    prefix_tokens: int
    group_size: int


@dataclass(frozen=True, slots=True)
class WordFit:
    """A word count fitted to a token target: the closest count found and its words."""

    words: int
    counted_tokens: int
    rounds: int  # counts spent


def fit_word_count(count_words: Callable[[int], int], target: int, words: int,
                   per_word: float, tolerance_pct: float, max_rounds: int) -> WordFit:
    """Correct `words` until `count_words(words)` (the server's count of the prompt made
    with that many words) is within `tolerance_pct` of `target`, or `max_rounds` counts were
    spent (at least one). Steps use the slope between the last two counts (secant),
    `per_word` until there are two, so a calibration that is off still converges in a few
    counts. Returns the closest count found. The one implementation: the load's prompts
    (`PromptFactory`) and the checks' long prompts (`checks/haystack.py`) both use it."""
    words = max(1, words)
    best: tuple[int, int] | None = None  # (words, counted) closest to the target
    last: tuple[int, int] | None = None
    rounds = 0
    for rounds in range(1, max(1, max_rounds) + 1):  # noqa: B007 - rounds is reported
        counted = count_words(words)
        miss = counted - target
        if best is None or abs(miss) < abs(best[1] - target):
            best = (words, counted)
        if abs(miss) * 100 <= tolerance_pct * target:
            break
        if last is not None and last[0] != words:
            slope = (counted - last[1]) / (words - last[0])
            per_word = slope if slope > 0 else per_word
        last = (words, counted)
        words = max(1, words - (round(miss / per_word) or (1 if miss > 0 else -1)))
    assert best is not None
    return WordFit(best[0], best[1], rounds)


def calibrate_by_probe(
    count: CountTokens, seed: int, system_prompt: str | None = None,
    small_words: int = 200, large_words: int = 2000, method: str = "probe",
) -> Calibration:
    """Fit the linear model from two counts (`count` sends messages and returns the
    server's count of them: a `max_tokens=1` probe's `usage.prompt_tokens`, or its
    tokenize endpoint's; `method` names which)."""
    prefix = request_prefix("calib0000", 0)
    c1 = count(messages_for(prefix + body_text(small_words, seed), system_prompt))
    c2 = count(messages_for(prefix + body_text(large_words, seed), system_prompt))
    per_word = (c2 - c1) / (large_words - small_words)
    if per_word <= 0:
        return NO_CALIBRATION
    return Calibration(method, c1 - per_word * small_words, per_word)


@dataclass(frozen=True, slots=True)
class PromptParts:
    """One request's user message, in the pieces the body builder splices."""

    head: str
    prefix: str
    tag: str
    body: str

    @property
    def text(self) -> str:
        return self.head + self.prefix + self.tag + self.body


class PromptFactory:
    """Builds each request's messages. Bodies are built per planned size (with `prepare`,
    before the load); the per-request work is a few string concatenations.

    `words` (planned size -> body words) and `prefix_words` restore a previous calibration
    (see `calcache.py`) without counting again."""

    def __init__(self, calibration: Calibration, seed: int, run_nonce: str,
                 system_prompt: str | None = None, shared: SharedPrefix | None = None,
                 words: dict[int, int] | None = None, prefix_words: int | None = None
                 ) -> None:
        self.calibration = calibration
        self.seed = seed
        self.run_nonce = run_nonce
        self.system_prompt = system_prompt
        self.shared = shared
        self.words: dict[int, int] = dict(words or {})
        self.prefix_words = prefix_words
        self.prefix_counted: int | None = None
        self._prefix_text = ""
        self._bodies: dict[int, str] = {}
        self._delta: int | None = None

    def _body_seed(self, size: int) -> int:
        return self.seed * 1_000_003 + size

    def _fit(self, target: int, text_for: Callable[[int], str], words: int,
             count: CountTokens | None, tolerance_pct: float, max_rounds: int
             ) -> tuple[int, int | None]:
        """Correct `words` until the server's count of `text_for(words)` is within
        `tolerance_pct` of `target` (or `max_rounds` counts were spent). Steps use the
        slope between the last two counts (secant), the calibration's until there are two,
        so a calibration that is off still converges in a few counts."""
        if count is None:
            return words, None
        fit = fit_word_count(
            lambda w: count(messages_for(text_for(w), self.system_prompt)), target, words,
            self.calibration.tokens_per_word, tolerance_pct, max_rounds)
        return fit.words, fit.counted_tokens

    def _head_delta(self, count: CountTokens | None) -> int:
        """Tokens a real request's head costs over the sizing head (e.g. " request" may be
        one token where " sizing" is two): two tiny counts, so that fitting the sizing
        prompt to `size - delta` puts the real prompts on `size`."""
        if count is None:
            return 0
        if self._delta is None:
            real, sizing = self.parts(0, 0, body=""), self.parts(0, 0, body="", sizing=True)
            self._delta = (count(messages_for(real.head.rstrip(), self.system_prompt))
                           - count(messages_for(sizing.head.rstrip(), self.system_prompt)))
        return self._delta

    def _prepare_prefix(self, count: CountTokens | None, tolerance_pct: float,
                        max_rounds: int, recount_known: bool) -> None:
        if self.shared is None or self._prefix_text:
            return
        seed = self._body_seed(0) + 7

        def text_for(w: int) -> str:
            return group_prefix(self.run_nonce, 0, sizing=True) + body_text(w, seed)

        words = self.prefix_words
        if words is None or recount_known:
            start = words or self.calibration.words_for(self.shared.prefix_tokens)
            words, self.prefix_counted = self._fit(self.shared.prefix_tokens, text_for, start,
                                                   count, tolerance_pct, max_rounds)
        self.prefix_words = words
        self._prefix_text = body_text(words, seed)

    def prepare(self, sizes: list[int], count: CountTokens | None = None,
                tolerance_pct: float = 0.1, max_rounds: int = 5,
                recount_known: bool = False) -> dict[int, int | None]:
        """Build each planned size's body once. With `count` (the server's own count of a
        chat prompt), correct each body's word count until the counted size is within
        `tolerance_pct` of the plan (the linear fit alone misses by ~0.5-1 %); sizes whose
        word count is already known (a cached calibration) are built without counting
        unless `recount_known` (then the known count is the first guess: one count when
        it still holds). Counting uses a sizing head, never a real request's prompt.
        Returns size -> the server's count of the body kept (None when not counted)."""
        self._prepare_prefix(count, tolerance_pct, max_rounds, recount_known)
        delta = self._head_delta(count)
        counted: dict[int, int | None] = {}
        for size in sorted(set(sizes)):
            if size in self._bodies:
                continue
            seed = self._body_seed(size)
            parts = self.parts(size, 0, body="", sizing=True)
            lead = parts.head + parts.prefix + parts.tag

            def text_for(w: int, lead: str = lead, seed: int = seed) -> str:
                return lead + body_text(w, seed)

            words = self.words.get(size)
            counted[size] = None
            if words is None or recount_known:
                guess = words or self.calibration.words_for(size) - (self.prefix_words or 0)
                # the sizing prompt is fitted to what makes the *request's* prompt `size`
                words, n = self._fit(size - delta, text_for, max(1, guess), count,
                                     tolerance_pct, max_rounds)
                counted[size] = None if n is None else n + delta
            self.words[size] = words
            self._bodies[size] = body_text(words, seed)
        return counted

    def parts(self, planned_tokens: int, request_index: int, warmup: bool = False,
              body: str | None = None, sizing: bool = False) -> PromptParts:
        if body is None:
            body = self._bodies.get(planned_tokens)
            if body is None:
                self.prepare([planned_tokens])
                body = self._bodies[planned_tokens]
        if self.shared is None:
            return PromptParts(request_prefix(self.run_nonce, request_index, warmup, sizing),
                               "", "", body)
        group = request_index // self.shared.group_size
        return PromptParts(group_prefix(self.run_nonce, group, warmup, sizing),
                           self._prefix_text,
                           request_tag(request_index, self.shared.group_size, warmup), body)

    def messages(self, planned_tokens: int, request_index: int, warmup: bool = False
                 ) -> list[dict]:
        return messages_for(self.parts(planned_tokens, request_index, warmup).text,
                            self.system_prompt)
