"""The per-request formulas: hand-computed values, None propagation, zero divisors."""

from __future__ import annotations

import math

import pytest

from anvil_metrics import derive
from anvil_metrics.records import Failure, RequestRecord

# --- durations -----------------------------------------------------------------------------


def test_duration_is_integer_difference_over_1e6():
    assert derive.duration_ms(1_000, 2_501_000) == 2.5
    assert derive.e2e_ms(0, 4_502_171_800) == 4502.1718
    # The integer difference is exact even where the stamps themselves exceed 2**53.
    big = 2**62
    assert derive.e2e_ms(big, big + 1) == 1e-6


def test_duration_none_when_a_stamp_is_missing():
    assert derive.e2e_ms(None, 5) is None
    assert derive.time_to_first_output_ms(5, None) is None
    assert derive.ttft_ms(5, None) is None


def test_duration_refuses_a_clock_going_backwards():
    with pytest.raises(ValueError, match="backwards"):
        derive.duration_ms(10, 9)


# --- row formulas --------------------------------------------------------------------------


def test_generation_and_visible_generation():
    assert derive.generation_ms(10.0, 4.0) == 6.0
    assert derive.visible_generation_ms(10.0, 7.5) == 2.5
    assert derive.generation_ms(None, 4.0) is None
    assert derive.generation_ms(10.0, None) is None
    assert derive.visible_generation_ms(10.0, None) is None


def test_decode_tok_s_hand_computed():
    # 11 tokens, the first at time-to-first-output, 10 more over 2 s.
    assert derive.decode_tok_s(11, 2000.0) == 5.0
    # One token: nothing decoded after the first, over a positive time → 0.0 (spec formula).
    assert derive.decode_tok_s(1, 2000.0) == 0.0


def test_decode_tok_s_follows_the_spec_evaluation_order():
    # (n − 1) / (g / 1000) and (n − 1) * 1000 / g differ in the last bit here.
    assert (70 - 1) * 1000 / 9549.657 != (70 - 1) / (9549.657 / 1000)
    assert derive.decode_tok_s(70, 9549.657) == 7.2253903988384085


@pytest.mark.parametrize(
    ("tokens", "gen"),
    [(None, 1.0), (5, None), (0, 100.0), (5, 0.0), (5, -1.0)],
)
def test_decode_tok_s_none(tokens, gen):
    assert derive.decode_tok_s(tokens, gen) is None


def test_mean_inter_token_latency():
    assert derive.mean_inter_token_latency_ms(2000.0, 11) == 200.0
    assert derive.mean_inter_token_latency_ms(2000.0, 1) is None  # divisor 0
    assert derive.mean_inter_token_latency_ms(2000.0, 0) is None  # divisor negative
    assert derive.mean_inter_token_latency_ms(None, 5) is None
    assert derive.mean_inter_token_latency_ms(2000.0, None) is None


def test_effective_prefill():
    assert derive.effective_prefill_tok_s(1000, 500.0) == 2000.0
    assert derive.effective_prefill_tok_s(1000, 0.0) is None
    assert derive.effective_prefill_tok_s(None, 500.0) is None
    assert derive.effective_prefill_tok_s(1000, None) is None


def test_rates_never_return_inf():
    assert derive.decode_tok_s(10, 1e-320) is None
    assert derive.effective_prefill_tok_s(10**6, 1e-320) is None


def test_derive_row_propagates_none():
    got = derive.derive_row(
        {"e2e_ms": 10.0, "time_to_first_output_ms": None, "ttft_ms": None,
         "output_tokens": 3, "prompt_tokens": 7}
    )
    assert got == {
        "generation_ms": None,
        "visible_generation_ms": None,
        "decode_tok_s": None,
        "mean_inter_token_latency_ms": None,
        "effective_prefill_tok_s": None,
    }


def test_derive_row_hand_computed():
    got = derive.derive_row(
        {"e2e_ms": 3000.0, "time_to_first_output_ms": 1000.0, "ttft_ms": 1500.0,
         "output_tokens": 21, "prompt_tokens": 4000}
    )
    assert got == {
        "generation_ms": 2000.0,
        "visible_generation_ms": 1500.0,
        "decode_tok_s": 10.0,
        "mean_inter_token_latency_ms": 100.0,
        "effective_prefill_tok_s": 4000.0,
    }
    assert set(got) == set(derive.DERIVED_FIELDS)


# --- usage ---------------------------------------------------------------------------------


def test_output_tokens_source():
    assert derive.output_tokens_from({"completion_tokens": 9}, 3, 4) == (9, "usage")
    assert derive.output_tokens_from({"completion_tokens": 0}, 3, 4) == (0, "usage")
    assert derive.output_tokens_from(None, 3, 4) == (7, "chunks")
    assert derive.output_tokens_from({"prompt_tokens": 5}, 3, 4) == (7, "chunks")
    assert derive.output_tokens_from({"completion_tokens": None}, 3, 4) == (7, "chunks")
    # A bool or a float is not a token count.
    assert derive.output_tokens_from({"completion_tokens": True}, 3, 4) == (7, "chunks")
    assert derive.output_tokens_from({"completion_tokens": 9.0}, 3, 4) == (7, "chunks")


def test_prompt_and_cached_tokens():
    usage = {"prompt_tokens": 100, "prompt_tokens_details": {"cached_tokens": 64}}
    assert derive.prompt_tokens_from(usage) == 100
    assert derive.cached_tokens_from(usage) == 64
    assert derive.prompt_tokens_from(None) is None
    assert derive.prompt_tokens_from({"completion_tokens": 3}) is None
    assert derive.cached_tokens_from({"prompt_tokens": 100}) is None
    assert derive.cached_tokens_from({"prompt_tokens_details": None}) is None
    assert derive.cached_tokens_from({"prompt_tokens_details": {"cached_tokens": None}}) is None
    assert derive.cached_tokens_from({"prompt_tokens_details": {"cached_tokens": 0}}) == 0


# --- records → rows ------------------------------------------------------------------------


def _record(**kw) -> RequestRecord:
    base = dict(
        request_index=4,
        start_ns=1_000_000_000,
        first_output_ns=1_250_000_000,   # +250 ms
        first_content_ns=1_400_000_000,  # +400 ms
        end_ns=2_250_000_000,            # +1250 ms
        planned_context_tokens=512,
        reasoning_chunks=3,
        content_chunks=8,
        chunk_deltas_ns=(250_000_000, 50_000_000, 100_000_000),
        usage={"prompt_tokens": 500, "completion_tokens": 21},
    )
    base.update(kw)
    return RequestRecord(**base)


def test_timing_from_record_hand_computed():
    t = derive.timing_from_record(_record())
    assert t.request_index == 4
    assert t.e2e_ms == 1250.0
    assert t.time_to_first_output_ms == 250.0
    assert t.ttft_ms == 400.0
    assert t.generation_ms == 1000.0
    assert t.visible_generation_ms == 850.0
    assert t.output_tokens == 21 and t.output_token_source == "usage"
    assert t.decode_tok_s == 20.0              # 20 tokens / 1 s
    assert t.mean_inter_token_latency_ms == 50.0
    assert t.effective_prefill_tok_s == 2000.0  # 500 tokens / 0.25 s
    assert t.prompt_tokens == 500 and t.cached_tokens is None
    d = t.to_dict()
    assert "cached_tokens" not in d
    assert list(d) == [f for f in derive.ROW_FIELDS if f != "cached_tokens"]


def test_timing_from_record_without_usage_counts_chunks():
    t = derive.timing_from_record(_record(usage=None), request_index=0)
    assert t.request_index == 0
    assert (t.output_tokens, t.output_token_source) == (11, "chunks")
    assert t.prompt_tokens is None and t.effective_prefill_tok_s is None
    assert t.decode_tok_s == 10.0


def test_timing_from_record_with_cached_tokens():
    usage = {"prompt_tokens": 500, "completion_tokens": 2,
             "prompt_tokens_details": {"cached_tokens": 256}}
    t = derive.timing_from_record(_record(usage=usage))
    assert t.cached_tokens == 256
    assert t.to_dict()["cached_tokens"] == 256
    assert t.decode_tok_s == 1.0 and t.mean_inter_token_latency_ms == 1000.0


def test_timing_from_record_without_content():
    t = derive.timing_from_record(_record(first_content_ns=None, content_chunks=0))
    assert t.ttft_ms is None and t.visible_generation_ms is None
    assert t.generation_ms == 1000.0


def test_timing_from_record_refuses_failures():
    with pytest.raises(ValueError, match="failed"):
        derive.timing_from_record(_record(failure=Failure(kind="timeout", message="x")))
    with pytest.raises(ValueError, match="end_ns"):
        derive.timing_from_record(_record(end_ns=None))


def test_inter_token_gaps():
    assert derive.inter_token_gaps_ms(_record()) == [50.0, 100.0]
    assert derive.inter_token_gaps_ms(_record(chunk_deltas_ns=())) == []
    assert all(math.isfinite(g) for g in derive.inter_token_gaps_ms(_record()))
