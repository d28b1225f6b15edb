"""``--spec-k K --spec-accept A``: speculative decoding, accounted deterministically.

Why: a real server's speculative-decoding counters (vLLM's ``spec_decode_num_drafts``,
``…_num_draft_tokens``, ``…_num_accepted_tokens``, per position) or gauges (SGLang's
``spec_accept_length``, ``spec_accept_rate``) are what anvil reads to report acceptance rate
and accepted length. To test that reading against known truth the simulator must produce such
counters with values that follow from the request alone, never from chance or timing.

The account of one answer of N generated tokens (N as its ``usage.completion_tokens``):

- The first token comes from the prefill; no draft is involved.
- The other N - 1 come from drafts. Draft d (1, 2, …) proposes K tokens and accepts
  ``a_d = acc(d) - acc(d - 1)`` of them, where ``acc(d) = floor(A * K * d + 1/2)`` (error
  diffusion: the accepted total never strays more than half a token from ``A * K * d``, so
  the rate converges to A). A is taken as the exact decimal the user wrote (``Fraction``), so
  no float rounding enters. A draft yields ``a_d + 1`` tokens: the accepted ones and the one
  the target model samples itself (the bonus or correction token), as vLLM and SGLang count.
- Drafts continue until the N - 1 tokens are produced; the last draft's acceptance is cut to
  what is still needed (an engine stops at the length limit and does not count tokens past
  it). Hence, for N >= 1: ``N = 1 + drafts + accepted``.
- Accepted position p (0 … K-1) counts the drafts whose ``a_d > p``, as vLLM's
  ``num_accepted_tokens_per_pos`` does; their sum over p is the accepted total.

Acceptance rate = accepted / (drafts * K); accepted length = 1 + accepted / drafts (range
1 … K+1), as ``../shared/design/SERVERS.md`` defines them for the real servers.

The stream's timing does not change with K or A: the token deadlines stay ``prefill_end +
i * interval``. Only the counters (and SGLang's gauges) see the drafts.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from fractions import Fraction

MAX_SPEC_K = 16  # draft tokens per step a user may ask for (vLLM's usual range is 1-8)


@dataclass(frozen=True, slots=True)
class SpecCounts:
    """The drafts of one answer (or a sum of answers): what the counters add up."""

    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    accepted_per_pos: tuple[int, ...] = ()  # one entry per draft position 0 … K-1

    def __add__(self, other: SpecCounts) -> SpecCounts:
        width = max(len(self.accepted_per_pos), len(other.accepted_per_pos))
        mine = self.accepted_per_pos + (0,) * (width - len(self.accepted_per_pos))
        theirs = other.accepted_per_pos + (0,) * (width - len(other.accepted_per_pos))
        return SpecCounts(
            self.drafts + other.drafts,
            self.draft_tokens + other.draft_tokens,
            self.accepted_tokens + other.accepted_tokens,
            tuple(a + b for a, b in zip(mine, theirs, strict=True)),
        )


def check_spec(k: int, accept: float) -> None:
    """ValueError naming the bad value unless ``0 <= k <= MAX_SPEC_K`` and ``0 <= A <= 1``."""
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= MAX_SPEC_K:
        raise ValueError(f"spec_k must be an integer from 0 to {MAX_SPEC_K}, got {k!r}")
    if not 0.0 <= accept <= 1.0:
        raise ValueError(f"spec_accept must be a number from 0 to 1, got {accept!r}")


@functools.lru_cache(maxsize=4096)
def spec_counts(generated: int, k: int, accept: float) -> SpecCounts:
    """The draft account of an answer of `generated` tokens (see the module docstring).

    Cached: a run's answers mostly share a handful of lengths, and the loop is one step per
    draft, so each distinct length costs its drafts once.
    """
    check_spec(k, accept)
    if k == 0 or generated <= 1:
        return SpecCounts(accepted_per_pos=(0,) * k)
    rate_k = Fraction(repr(float(accept))) * k  # the decimal the user wrote, times K
    half = Fraction(1, 2)
    need = generated - 1
    per_pos = [0] * k
    drafts = accepted = before = 0
    while need > 0:  # each draft yields at least one token: at most `generated` rounds
        drafts += 1
        total = int(rate_k * drafts + half)  # floor: the value is never negative
        a = min(total - before, need - 1)
        before = total
        accepted += a
        need -= a + 1
        for p in range(a):
            per_pos[p] += 1
    return SpecCounts(drafts, drafts * k, accepted, tuple(per_pos))
