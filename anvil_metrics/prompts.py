"""Synthetic prompts of a planned size, reproducible from a seed, unique per request.

Every request's user message is `<unique prefix><shared body>`: the body is built once per
planned size (before the load, so building it never stalls the gevent hub) from natural-
looking sentences drawn from a seeded word list; the prefix names the run's nonce and the
request index, so no two requests of a run (nor two runs with the same seed) share a long
prefix a server's prefix cache could serve.

Sizing: a prompt's token count is measured, not assumed. `ProbeCalibration` fits
`tokens = overhead + per_word * words` from two `max_tokens=1` probes that read the
server's `usage.prompt_tokens` (chat template included), then sizes each body from the fit.
Without a server answer (method "none") a fixed 1.3 tokens per word is assumed. The
planned size and the server's count are both recorded for every request, so the error is
always visible. (Exact calibration to ±0.5 % on every server is the prompts issue.)
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

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

CountTokens = Callable[[list[dict]], int]


def body_text(n_words: int, seed: int) -> str:
    """`n_words` words of sentence-like text, identical for the same (n_words, seed)."""
    rng = random.Random(seed)
    words = _WORDS
    out: list[str] = []
    left = n_words
    while left > 0:
        n = min(left, rng.randint(6, 16))
        sent = [words[rng.randrange(len(words))] for _ in range(n)]
        sent[0] = sent[0].capitalize()
        out.append(" ".join(sent) + ".")
        left -= n
    return " ".join(out)


def request_prefix(run_nonce: str, request_index: int, warmup: bool = False) -> str:
    kind = "warmup" if warmup else "request"
    return f"Run {run_nonce} {kind} {request_index}. "


def messages_for(text: str, system_prompt: str | None = None) -> list[dict]:
    msgs: list[dict] = []
    if system_prompt:
        msgs.append({"role": "system", "content": system_prompt})
    msgs.append({"role": "user", "content": text})
    return msgs


@dataclass(frozen=True, slots=True)
class Calibration:
    """`tokens ≈ overhead_tokens + tokens_per_word * words` for this endpoint and model."""

    method: str  # "tokenize" | "probe" | "none"
    overhead_tokens: float
    tokens_per_word: float

    def words_for(self, planned_tokens: int) -> int:
        return max(1, round((planned_tokens - self.overhead_tokens) / self.tokens_per_word))


NO_CALIBRATION = Calibration("none", 0.0, FALLBACK_TOKENS_PER_WORD)


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


class PromptFactory:
    """Builds each request's messages. Bodies are cached per planned size (built up front
    with `prepare`); the per-request work is one string concatenation."""

    def __init__(self, calibration: Calibration, seed: int, run_nonce: str,
                 system_prompt: str | None = None) -> None:
        self.calibration = calibration
        self.seed = seed
        self.run_nonce = run_nonce
        self.system_prompt = system_prompt
        self._bodies: dict[int, str] = {}

    def prepare(self, sizes: list[int], count: CountTokens | None = None,
                tolerance_pct: float = 0.1, max_rounds: int = 4) -> dict[int, int | None]:
        """Build each planned size's body once. With `count` (the server's own count of a
        chat prompt), correct each body's word count until the counted size is within
        `tolerance_pct` of the plan (or `max_rounds` counts were spent): the linear fit
        alone misses by ~0.5-1 %. Returns size -> last counted tokens (None uncounted)."""
        counted: dict[int, int | None] = {}
        per_word = self.calibration.tokens_per_word
        for size in sorted(set(sizes)):
            if size in self._bodies:
                continue
            seed = self.seed * 1_000_003 + size
            words = self.calibration.words_for(size)
            body = body_text(words, seed)
            counted[size] = None
            for _ in range(max_rounds if count is not None else 0):
                n = count(messages_for(request_prefix(self.run_nonce, 0) + body,
                                       self.system_prompt))
                counted[size] = n
                miss = n - size
                if abs(miss) * 100 <= tolerance_pct * size:
                    break
                step = round(miss / per_word) or (1 if miss > 0 else -1)
                words = max(1, words - step)
                body = body_text(words, seed)
            self._bodies[size] = body
        return counted

    def messages(self, planned_tokens: int, request_index: int, warmup: bool = False
                 ) -> list[dict]:
        body = self._bodies.get(planned_tokens)
        if body is None:
            self.prepare([planned_tokens])
            body = self._bodies[planned_tokens]
        return messages_for(request_prefix(self.run_nonce, request_index, warmup) + body,
                            self.system_prompt)
