"""Trace files for the tests, with what a replay must find known in advance.

`mooncake_trace` writes a Mooncake-format JSONL: `groups` prompts' prefixes of whole blocks,
each request one group's prefix followed by blocks of its own and a partial last block, at
timestamps drawn from a seeded Poisson process. It returns the expected cached tokens by
its own account (every request after its group's first reuses the whole prefix), which
`trace.expected_reuse` must equal.
"""

from __future__ import annotations

import random
from pathlib import Path

import orjson

BLOCK = 512


def mooncake_trace(path: Path, n: int, *, groups: int = 20, seed: int = 0,
                   rate_rps: float = 50.0, block: int = BLOCK, max_output: int = 300
                   ) -> tuple[int, int]:
    """Write the trace; return (expected cached tokens, total input tokens)."""
    rng = random.Random(seed)
    prefix_blocks = [rng.randint(1, 6) for _ in range(groups)]
    first_id = 0
    prefix_ids = []
    for m in prefix_blocks:
        prefix_ids.append(list(range(first_id, first_id + m)))
        first_id += m
    seen_group: set[int] = set()
    t_ms, cached, total, lines = 0.0, 0, 0, []
    for _ in range(n):
        g = rng.randrange(groups)
        own = rng.randint(0, 3)
        tail = rng.randint(1, block - 1)  # the partial last block: never cached
        ids = [*prefix_ids[g], *range(first_id, first_id + own + 1)]
        first_id += own + 1
        size = (len(prefix_ids[g]) + own) * block + tail
        if g in seen_group:
            cached += len(prefix_ids[g]) * block
        seen_group.add(g)
        total += size
        lines.append({"timestamp": round(t_ms), "input_length": size,
                      "output_length": rng.randint(1, max_output), "hash_ids": ids})
        t_ms += rng.expovariate(rate_rps) * 1000
    path.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    return cached, total
