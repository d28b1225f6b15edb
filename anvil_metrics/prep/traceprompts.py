"""A trace request's prompt: one text per hash id, so a server's prefix cache sees exactly the
sharing the trace describes.

Why words of one token: a Mooncake request's `hash_ids` name its blocks of `block_tokens`
input tokens; two requests share a prefix exactly as far as their ids agree. So each id
becomes a text of exactly `block_tokens` tokens, the same text wherever the id appears, and
a request's prompt is its blocks' texts one after another. Exact sizes without counting
every block: each block is `block_tokens` words drawn from `WORDS`, two-letter words that
are one token each (with the space before them) in the BPE tokenizers of today's chat
models and under both of the simulator's rules (`words4`, `syllable3`). The chat template's
own tokens (`overhead_tokens`, counted once before the load) come off the last block, which
holds the remainder as Mooncake's does, so the templated prompt is `input_tokens` long (a
remainder shorter than the template's tokens takes words from the block before it, whose
text stays the start of its id's); `prepare` counts one whole prompt to check it. Where
the template's opening tokens are known (`opening_tokens`, those before the message's text:
an agent replay's), they come off the first block instead, so every id is one exact
`block_tokens` block of the templated prompt as the server counts it, on the boundaries of
the server's prefix-cache blocks (`load/agentbodies.py`).

A plain trace's `session_id` makes its requests one conversation's turns, as far as the
prefix cache sees them: a session's request begins with the whole message of the session's
request before it (cut to its own size if it is shorter) and goes on with words of its own
(`session_words`), so each turn's prompt holds the history the session has so far.

Each block's words come from its own generator, `PCG64([seed, id])`, with the seed taken
from the run's nonce: a rerun's blocks differ (no cache carries over), `--run-nonce` repeats
them. Requests without `hash_ids` (BurstGPT, plain JSONL) get text of their own (an id past
any hash id, from their line), after their `prefix_id`'s shared text if they have one.
"""

from __future__ import annotations

import zlib
from functools import lru_cache

import numpy as np

WORDS = ("an", "as", "at", "be", "by", "do", "go", "he", "if", "in", "is", "it", "me", "my",
         "no", "of", "on", "or", "so", "to", "up", "us", "we")
_WORDS = np.array(WORDS)
_LINE_IDS = 1 << 62  # a request's own text: ids past any hash id
_PREFIX_IDS = 1 << 61  # a plain trace's shared prefix


def nonce_seed(run_nonce: str) -> int:
    """The blocks' seed of a run: the CRC-32 of its nonce."""
    return zlib.crc32(run_nonce.encode())


@lru_cache(maxsize=8192)
def block_text(seed: int, block_id: int, words: int) -> str:
    """`words` words of block `block_id` (a shorter block is the start of the longer)."""
    rng = np.random.Generator(np.random.PCG64([seed, block_id]))
    return " ".join(_WORDS[rng.integers(0, len(WORDS), size=words)].tolist())


class TracePrompts:
    """The prompt text of each trace request (module docstring)."""

    def __init__(self, run_nonce: str, block_tokens: int, overhead_tokens: int,
                 opening_tokens: int = 0) -> None:
        self.seed = nonce_seed(run_nonce)
        self.block_tokens = block_tokens
        self.overhead_tokens = overhead_tokens
        self.opening_tokens = min(opening_tokens, overhead_tokens)

    def text(self, input_tokens: int, hash_ids: tuple[int, ...] = (), line: int = 0,
             prefix_id: str | None = None, prefix_tokens: int = 0,
             memo: dict[tuple[int, int], str] | None = None) -> str:
        """A trace request's message (`load.trace.TraceRequest`'s fields): `input_tokens`
        less the template's tokens, as blocks of words; `memo` keeps the blocks made
        (an agent job's: its context outgrows `block_text`'s cache)."""
        body = max(1, input_tokens - self.overhead_tokens)
        if hash_ids:
            n = len(hash_ids)
            words = [self.block_tokens] * (n - 1) + [body - self.block_tokens * (n - 1)]
            if n > 1:  # the template's opening inside the first block, its closing the last
                words[0] -= self.opening_tokens
                words[-1] += self.opening_tokens
            # a remainder shorter than the template's tokens takes words from the blocks
            # before it (their texts stay the start of their ids'): the size is kept
            for k in range(n - 1, 0, -1):
                if words[k] >= 1:
                    break
                words[k - 1] += words[k] - 1
                words[k] = 1
            words[0] = max(1, words[0])
            if memo is None:
                return " ".join(block_text(self.seed, h, w)
                                for h, w in zip(hash_ids, words, strict=True))
            out = []
            for h, w in zip(hash_ids, words, strict=True):
                t = memo.get((h, w))
                if t is None:
                    t = memo[h, w] = block_text(self.seed, h, w)
                out.append(t)
            return " ".join(out)
        parts = []
        if prefix_id is not None and 0 < prefix_tokens < body:
            parts.append(block_text(self.seed, _PREFIX_IDS + zlib.crc32(prefix_id.encode()),
                                    prefix_tokens))
            body -= prefix_tokens
        parts.append(block_text(self.seed, _LINE_IDS + line, body))
        return " ".join(parts)

    def session_words(self, before: list[str] | None, input_tokens: int, line: int,
                      prefix_id: str | None = None, prefix_tokens: int = 0) -> list[str]:
        """The words of a session's request, from the words of the session's request before
        it (`before`; None for the session's first, whose text is its own): those (its
        first words when this one is shorter), then new words of its own line."""
        if before is None:
            return self.text(input_tokens, (), line, prefix_id, prefix_tokens).split(" ")
        body = max(1, input_tokens - self.overhead_tokens)
        if body <= len(before):
            return before[:body]
        return before + block_text(self.seed, _LINE_IDS + line, body - len(before)).split(" ")
