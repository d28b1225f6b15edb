"""The per-request formulas of the catalogue: hand-computed values, null propagation, zero
divisors, and rows made from raw records."""

from __future__ import annotations

import numpy as np
import pytest

from anvil_metrics import catalog
from anvil_metrics.post import derive
from anvil_metrics.records import Failure, RequestRecord


def formula(name: str, **inputs: float | None) -> float | None:
    """The catalogue's formula of `name` for one row (a column of one), None for null."""
    field = catalog.BY_NAME[name]
    cols = {k: np.array([np.nan if v is None else float(v)]) for k, v in inputs.items()}
    assert set(cols) == set(field.inputs), f"{name} reads {field.inputs}"
    value = field.compute(cols)[0]  # type: ignore[misc]
    return None if np.isnan(value) else float(value)


# --- durations -----------------------------------------------------------------------------


def test_duration_is_integer_difference_over_1e6():
    start = np.array([1_000, 0, 2**62 - 2], dtype=np.int64)
    stop = np.array([2_501_000, 4_502_171_800, 2**62 - 1], dtype=np.int64)
    got = derive.durations_ms(start, stop, np.ones(3, dtype=bool)).tolist()
    # the integer difference is exact even where the stamps themselves exceed 2**53
    assert got == [2.5, 4502.1718, 1e-6]


def test_duration_null_when_a_stamp_is_missing():
    start = np.array([5, 5], dtype=np.int64)
    stop = np.array([7, -(2**63)], dtype=np.int64)
    got = derive.durations_ms(start, stop, np.array([True, False]))
    assert got[0] == 2e-6 and np.isnan(got[1])


# --- row formulas --------------------------------------------------------------------------


def test_generation_and_visible_generation():
    assert formula("generation_ms", e2e_ms=10.0, time_to_first_output_ms=4.0) == 6.0
    assert formula("visible_generation_ms", e2e_ms=10.0, ttft_ms=7.5) == 2.5
    assert formula("generation_ms", e2e_ms=None, time_to_first_output_ms=4.0) is None
    assert formula("generation_ms", e2e_ms=10.0, time_to_first_output_ms=None) is None
    assert formula("visible_generation_ms", e2e_ms=10.0, ttft_ms=None) is None


def test_decode_tok_s_hand_computed():
    # 11 tokens, the first at time-to-first-output, 10 more over 2 s.
    assert formula("decode_tok_s", output_tokens=11, generation_ms=2000.0) == 5.0
    # One token: nothing decoded after the first, over a positive time → 0.0 (spec formula).
    assert formula("decode_tok_s", output_tokens=1, generation_ms=2000.0) == 0.0


def test_decode_tok_s_follows_the_spec_evaluation_order():
    # (n − 1) / (g / 1000) and (n − 1) * 1000 / g differ in the last bit here.
    assert (70 - 1) * 1000 / 9549.657 != (70 - 1) / (9549.657 / 1000)
    assert formula("decode_tok_s", output_tokens=70, generation_ms=9549.657) \
        == 7.2253903988384085


@pytest.mark.parametrize(
    ("tokens", "gen"),
    [(None, 1.0), (5, None), (0, 100.0), (5, 0.0), (5, -1.0)],
)
def test_decode_tok_s_null(tokens, gen):
    assert formula("decode_tok_s", output_tokens=tokens, generation_ms=gen) is None


def test_mean_inter_token_latency():
    itl = "mean_inter_token_latency_ms"
    assert formula(itl, generation_ms=2000.0, output_tokens=11) == 200.0
    assert formula(itl, generation_ms=2000.0, output_tokens=1) is None  # divisor 0
    assert formula(itl, generation_ms=2000.0, output_tokens=0) is None  # divisor negative
    assert formula(itl, generation_ms=None, output_tokens=5) is None
    assert formula(itl, generation_ms=2000.0, output_tokens=None) is None


def test_effective_prefill():
    pre = "effective_prefill_tok_s"
    assert formula(pre, prompt_tokens=1000, time_to_first_output_ms=500.0) == 2000.0
    assert formula(pre, prompt_tokens=1000, time_to_first_output_ms=0.0) is None
    assert formula(pre, prompt_tokens=None, time_to_first_output_ms=500.0) is None
    assert formula(pre, prompt_tokens=1000, time_to_first_output_ms=None) is None


def test_content_tok_s():
    tok = "content_tok_s"
    # 21 tokens of which 5 reasoning: 16 content, 15 after the first, over 1.5 s
    assert formula(tok, output_tokens=21, reasoning_tokens=5, visible_generation_ms=1500.0) \
        == 10.0
    assert formula(tok, output_tokens=21, reasoning_tokens=None,
                   visible_generation_ms=1500.0) is None  # usage does not split them
    assert formula(tok, output_tokens=21, reasoning_tokens=21,
                   visible_generation_ms=1500.0) is None  # no content token
    assert formula(tok, output_tokens=21, reasoning_tokens=5, visible_generation_ms=None) is None


def test_rates_never_return_inf():
    assert formula("decode_tok_s", output_tokens=10, generation_ms=1e-320) is None
    assert formula("effective_prefill_tok_s", prompt_tokens=10**6,
                   time_to_first_output_ms=1e-320) is None


def test_every_derived_field_reads_only_fields_before_it():
    seen: set[str] = set()
    for f in catalog.ROW:
        assert set(f.inputs) <= seen, f"{f.name} reads {set(f.inputs) - seen} before it exists"
        assert bool(f.formula) == f.derived and bool(f.source) != f.derived, f.name
        seen.add(f.name)


def test_every_derived_field_is_null_when_its_inputs_are():
    for f in catalog.DERIVED:
        cols = {k: np.array([np.nan]) for k in f.inputs}
        assert np.isnan(f.compute(cols)[0]), f.name  # type: ignore[misc]


# --- usage ---------------------------------------------------------------------------------


def _row_of(**kw) -> dict:
    return derive.derive_row(_record(**kw))


def test_output_tokens_source():
    def out(usage):
        row = _row_of(usage=usage, reasoning_chunks=3, content_chunks=4)
        return row["output_tokens"], row["output_token_source"]

    assert out({"completion_tokens": 9}) == (9, "usage")
    assert out({"completion_tokens": 0}) == (0, "usage")
    assert out(None) == (7, "chunks")
    assert out({"prompt_tokens": 5}) == (7, "chunks")
    assert out({"completion_tokens": None}) == (7, "chunks")
    # A bool or a float is not a token count.
    assert out({"completion_tokens": True}) == (7, "chunks")
    assert out({"completion_tokens": 9.0}) == (7, "chunks")


def test_prompt_cached_and_reasoning_tokens():
    def counts(usage):
        row = _row_of(usage=usage)
        return row["prompt_tokens"], row.get("cached_tokens"), row["reasoning_tokens"]

    usage = {"prompt_tokens": 100, "prompt_tokens_details": {"cached_tokens": 64},
             "completion_tokens_details": {"reasoning_tokens": 7}}
    assert counts(usage) == (100, 64, 7)
    assert counts(None) == (None, None, None)
    assert counts({"completion_tokens": 3}) == (None, None, None)
    assert counts({"prompt_tokens": 100}) == (100, None, None)
    assert counts({"prompt_tokens_details": None}) == (None, None, None)
    assert counts({"prompt_tokens_details": {"cached_tokens": None}}) == (None, None, None)
    assert counts({"prompt_tokens_details": {"cached_tokens": 0}}) == (None, 0, None)
    assert counts({"completion_tokens_details": {"reasoning_tokens": -1}}) == (None, None, None)


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


def test_row_of_a_record_hand_computed():
    t = derive.derive_row(_record())
    assert t["request_index"] == 4
    assert t["e2e_ms"] == 1250.0
    assert t["time_to_first_output_ms"] == 250.0
    assert t["ttft_ms"] == 400.0
    assert t["generation_ms"] == 1000.0
    assert t["visible_generation_ms"] == 850.0
    assert t["output_tokens"] == 21 and t["output_token_source"] == "usage"
    assert t["decode_tok_s"] == 20.0              # 20 tokens / 1 s
    assert t["mean_inter_token_latency_ms"] == 50.0
    assert t["effective_prefill_tok_s"] == 2000.0  # 500 tokens / 0.25 s
    assert t["prompt_tokens"] == 500 and "cached_tokens" not in t
    assert list(t) == [f for f in catalog.ROW_FIELDS if f != "cached_tokens"]


def test_row_of_a_record_without_usage_counts_chunks():
    t = _row_of(usage=None)
    assert (t["output_tokens"], t["output_token_source"]) == (11, "chunks")
    assert t["prompt_tokens"] is None and t["effective_prefill_tok_s"] is None
    assert t["decode_tok_s"] == 10.0


def test_row_of_a_record_with_cached_tokens():
    usage = {"prompt_tokens": 500, "completion_tokens": 2,
             "prompt_tokens_details": {"cached_tokens": 256}}
    t = _row_of(usage=usage)
    assert t["cached_tokens"] == 256
    assert t["decode_tok_s"] == 1.0 and t["mean_inter_token_latency_ms"] == 1000.0


def test_row_of_a_record_without_content():
    t = _row_of(first_content_ns=None, content_chunks=0)
    assert t["ttft_ms"] is None and t["visible_generation_ms"] is None
    assert t["generation_ms"] == 1000.0


def test_row_of_a_record_refuses_failures():
    with pytest.raises(ValueError, match="did not complete"):
        _row_of(failure=Failure(kind="timeout", message="x"))
    with pytest.raises(ValueError, match="did not complete"):
        _row_of(end_ns=None)


def test_reasoning_ms():
    rm = "reasoning_ms"
    # reasoning from 250 ms to the first content at 400 ms
    assert formula(rm, ttft_ms=400.0, time_to_first_output_ms=250.0, reasoning_chunks=3) \
        == 150.0
    assert formula(rm, ttft_ms=400.0, time_to_first_output_ms=400.0,
                   reasoning_chunks=0) is None  # no reasoning: no phase, not 0
    assert formula(rm, ttft_ms=None, time_to_first_output_ms=250.0,
                   reasoning_chunks=3) is None  # reasoning that never reached content
    assert derive.derive_row(_record())["reasoning_ms"] == 150.0


def test_reasoning_tok_s():
    rt = "reasoning_tok_s"
    # 30 reasoning tokens; the phase (first output → first content) took 1.5 s: after the
    # first output token, 29 more reasoning tokens and the first content token arrived
    assert formula(rt, reasoning_tokens=30, reasoning_ms=1500.0) == 20.0
    assert formula(rt, reasoning_tokens=None, reasoning_ms=1500.0) is None  # not split
    assert formula(rt, reasoning_tokens=30, reasoning_ms=None) is None  # no phase
    assert formula(rt, reasoning_tokens=30, reasoning_ms=0.0) is None  # divisor zero
    usage = {"prompt_tokens": 500, "completion_tokens": 21,
             "completion_tokens_details": {"reasoning_tokens": 6}}
    row = derive.derive_row(_record(usage=usage))  # phase: 250 → 400 ms
    assert row["reasoning_tok_s"] == 6 / 0.15
    assert row["content_tok_s"] == (21 - 6 - 1) / 0.85
