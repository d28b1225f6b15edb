"""The simulator's prefix cache: which leading prompt tokens a real server would not prefill again.

vLLM and SGLang keep the KV cache of recent prompts and reuse it for a new prompt that starts
the same way; they report the reused part as ``usage.prompt_tokens_details.cached_tokens`` and
the time to first token shrinks accordingly. A load generator that sends shared prefixes
(multi-turn chats, a common system prompt) has to be checked against that behaviour, so with
``--prefix-cache`` the simulator reproduces it, with figures that are known in advance.

The model, after vLLM's automatic prefix caching:

- The whole templated prompt's token ids (`prompt_token_ids`, the ids ``/tokenize`` returns) are
  cut into blocks of B tokens; only full blocks count, a partial last block is never cached.
- Block k's key is ``hash((key of block k-1, ids of block k))``: a key stands for the whole
  prefix up to its block, so a hit on k leading blocks means the first k*B tokens are identical,
  and the same block content at another position does not hit.
- ``cached_tokens = B * (leading blocks found)``, but at most ``prompt_tokens - 1``: at least one
  token is always computed. (vLLM v1 caps at ``(prompt_tokens - 1) // B * B`` instead, so when a
  whole block-aligned prompt is cached it recomputes its last block, not one token.)
- A request's blocks enter the cache **when its prefill completes** (at its prefill deadline),
  not when it arrives. Two simultaneous requests with the same prefix therefore both miss, as on
  a real server without in-batch prefix sharing; a request that is refused, or whose client has
  gone before its prefill deadline, inserts nothing. Lookups do not refresh anything.
- Capacity is counted in blocks (``capacity_tokens // B``); beyond it the least recently used
  block is evicted. A completed prefill refreshes its blocks last-to-first, so the first block
  of a prompt is the most recently used: a prefix's tail is evicted before its head, as vLLM
  frees a request's blocks in reverse order.

Keys use Python's `hash` (SipHash on the block's bytes, salted per process): they live only in
this process, and at 64 bits a collision between a few hundred thousand blocks is negligible.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# The cache keys the ids ``/tokenize`` returns; they are computed by the tokenizer, and
# re-exported here because the cache is what needs every id of every prompt.
from anvil_metrics.sim.tokenizer import prompt_token_ids

__all__ = ["CacheLookup", "PrefixCache", "prompt_token_ids"]


@dataclass(frozen=True, slots=True)
class CacheLookup:
    """One prompt seen by the cache: its full blocks' chained keys and the tokens that hit."""

    keys: tuple[int, ...]
    cached_tokens: int


class PrefixCache:
    """An LRU set of chained block keys, shared by every request of one simulator process.

    Kept apart from the request path so the rules (see the module docstring) can be tested
    without a server. Memory is bounded: at most ``capacity_tokens // block_tokens`` keys
    (about 100 bytes each) are held; lookup and insertion cost one dict operation a block.
    """

    def __init__(self, block_tokens: int = 16, capacity_tokens: int = 4_000_000) -> None:
        if block_tokens < 1:
            raise ValueError(f"block_tokens must be >= 1, got {block_tokens}")
        if capacity_tokens < block_tokens:
            raise ValueError(
                f"capacity_tokens must be >= block_tokens ({block_tokens}), got {capacity_tokens}"
            )
        self.block_tokens = block_tokens
        self.capacity_blocks = capacity_tokens // block_tokens
        self._blocks: OrderedDict[int, None] = OrderedDict()  # oldest first

    def __len__(self) -> int:
        """Blocks held now."""
        return len(self._blocks)

    def clear(self) -> None:
        """Forget every block (vLLM's `POST /reset_prefix_cache`, SGLang's `/flush_cache`)."""
        self._blocks.clear()

    def block_keys(self, ids: Sequence[int] | np.ndarray) -> tuple[int, ...]:
        """Chained keys of the full blocks of `ids` (token ids, each in [0, 2**32)).

        One `hash` of ``(previous key, the block's bytes)`` per block: about 0.25 us a block,
        so ~6 ms for 393,216 tokens in blocks of 16.
        """
        data = np.asarray(ids, dtype=np.uint32).tobytes()
        step = 4 * self.block_tokens
        end = len(data) // step * step
        keys: list[int] = []
        key = 0
        for offset in range(0, end, step):
            key = hash((key, data[offset : offset + step]))
            keys.append(key)
        return tuple(keys)

    def lookup(self, ids: Sequence[int] | np.ndarray) -> CacheLookup:
        """How many leading tokens of the prompt `ids` are cached; changes nothing."""
        keys = self.block_keys(ids)
        blocks = self._blocks
        hits = 0
        for key in keys:
            if key not in blocks:
                break
            hits += 1
        cached = min(hits * self.block_tokens, max(len(ids) - 1, 0))
        return CacheLookup(keys, cached)

    def insert(self, keys: Sequence[int]) -> None:
        """Add (or refresh) a completed prefill's blocks, then evict beyond the capacity.

        Last block first, so the prompt's first block ends up the most recently used and a
        prefix loses its tail before its head when space runs out.
        """
        blocks = self._blocks
        for key in reversed(keys):
            if key in blocks:
                blocks.move_to_end(key)
            else:
                blocks[key] = None
        while len(blocks) > self.capacity_blocks:
            blocks.popitem(last=False)
