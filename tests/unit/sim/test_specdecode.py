"""Speculative decoding's draft account (`sim/specdecode.py`) on its own.

The account is checked against sequences worked out by hand from its stated rule, and its
invariants (N = 1 + drafts + accepted, positions summing to the accepted total, the
error-diffusion bound) over many lengths.
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from fuzzing import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from anvil_metrics.sim.specdecode import MAX_SPEC_K, SpecCounts, check_spec, spec_counts

# -- speculative decoding ----------------------------------------------------------------------


def test_draft_account_worked_by_hand() -> None:
    # K=3, A=0.7: acc(d) = floor(2.1 d + 1/2) = 2, 4, 6, 8, 11 -> a = 2, 2, 2, 2, 3; 14 tokens
    # after the prefill's one: 3 + 3 + 3 + 3 = 12, then the fifth draft needs 2: a cut to 1
    assert spec_counts(15, 3, 0.7) == SpecCounts(5, 15, 9, (5, 4, 0))
    # A=1: every draft accepts all K and yields K+1 tokens
    assert spec_counts(9, 3, 1.0) == SpecCounts(2, 6, 6, (2, 2, 2))
    # A=0: every draft yields only the target model's own token
    assert spec_counts(6, 4, 0.0) == SpecCounts(5, 20, 0, (0, 0, 0, 0))
    # nothing to draft: an answer of 0 or 1 tokens, or speculative decoding off
    assert spec_counts(1, 3, 0.7) == spec_counts(0, 3, 0.7) == SpecCounts(0, 0, 0, (0, 0, 0))
    assert spec_counts(50, 0, 0.7) == SpecCounts()


def test_acceptance_is_the_decimal_written_not_its_float() -> None:
    # A=0.15, K=3: acc(30) = floor(0.45 * 30 + 1/2) = 14, so 30 drafts yield 30 + 14 tokens
    # after the prefill's one. In floats 0.15 * 3 * 30 + 0.5 falls just short of 14, and a
    # float account would need a 31st draft.
    assert math.floor(0.15 * 3 * 30 + 0.5) == 13
    assert spec_counts(45, 3, 0.15) == SpecCounts(30, 90, 14, (14, 0, 0))


@settings(max_examples=examples(300), deadline=None)
@given(n=st.integers(0, 600), k=st.integers(1, MAX_SPEC_K),
       accept=st.sampled_from([0.0, 0.05, 0.3, 0.5, 0.62, 0.7, 0.84, 0.99, 1.0]))
def test_draft_account_invariants(n: int, k: int, accept: float) -> None:
    c = spec_counts(n, k, accept)
    assert c.draft_tokens == c.drafts * k
    assert sum(c.accepted_per_pos) == c.accepted_tokens
    assert len(c.accepted_per_pos) == k
    assert list(c.accepted_per_pos) == sorted(c.accepted_per_pos, reverse=True)
    assert all(0 <= x <= c.drafts for x in c.accepted_per_pos)
    if n <= 1:
        assert c.drafts == 0
        return
    assert n == 1 + c.drafts + c.accepted_tokens
    # all drafts but the last accept acc(d - 1) in total; the last at most its full share
    rate_k = Fraction(str(accept)) * k
    full = math.floor(rate_k * c.drafts + Fraction(1, 2))
    before_last = math.floor(rate_k * (c.drafts - 1) + Fraction(1, 2))
    assert before_last <= c.accepted_tokens <= full


def test_acceptance_converges_to_the_rate_asked() -> None:
    for k, accept in ((3, 0.7), (4, 0.62), (8, 0.84), (1, 0.5)):
        c = spec_counts(20_001, k, accept)
        assert c.accepted_tokens / c.draft_tokens == pytest.approx(accept, abs=1e-3)


def test_spec_values_are_checked() -> None:
    check_spec(0, 0.0)
    check_spec(MAX_SPEC_K, 1.0)
    for k, a in ((-1, 0.5), (MAX_SPEC_K + 1, 0.5), (True, 0.5), (3, 1.01), (3, -0.1),
                 (3, math.nan)):
        with pytest.raises(ValueError, match="spec_"):
            check_spec(k, a)  # type: ignore[arg-type]


def test_spec_counts_add_position_by_position() -> None:
    total = SpecCounts(1, 3, 2, (1, 1, 0)) + SpecCounts(2, 6, 1, (1, 0, 0)) + SpecCounts()
    assert total == SpecCounts(3, 9, 3, (2, 1, 0))
