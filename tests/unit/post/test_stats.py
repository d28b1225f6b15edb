"""Nearest-rank percentiles and the metrics block: hand cases, numpy agreement, edge cases."""

from __future__ import annotations

import random

import numpy as np
import pytest
from fuzzing import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from anvil_metrics import catalog
from anvil_metrics.post import stats
from anvil_metrics.post.derive import RowColumns


def test_nearest_rank_spec_examples():
    values = [float(v) for v in range(12, 0, -1)]  # 12 values, unsorted
    assert stats.nearest_rank(values, 50) == 6.0   # the 6th smallest
    assert stats.nearest_rank(values, 95) == 12.0  # the 12th
    assert stats.nearest_rank(values, 99) == 12.0


def test_nearest_rank_ranks_in_integers():
    values = list(range(1, 21))
    assert stats.nearest_rank(values, 95) == 19.0  # ceil(19.0) = 19, not 20
    assert stats.nearest_rank(values, 50) == 10.0
    assert stats.nearest_rank(values, 0) == 1.0    # p0 is the minimum
    assert stats.nearest_rank(values, 100) == 20.0
    assert stats.nearest_rank([7], 50) == 7.0
    assert stats.nearest_rank_index(100, 95) == 94


def test_nearest_rank_skips_none_and_returns_float():
    got = stats.nearest_rank([None, 3, None, 1, 2], 50)
    assert got == 2.0 and type(got) is float
    assert stats.nearest_rank([], 50) is None
    assert stats.nearest_rank([None, None], 95) is None


@pytest.mark.parametrize("p", [-1, 101, 50.0, True, "50"])
def test_nearest_rank_rejects_bad_p(p):
    with pytest.raises(ValueError):
        stats.nearest_rank([1.0], p)
    with pytest.raises(ValueError):
        stats.nearest_rank([], p)


@settings(max_examples=examples(200), deadline=None)
@given(
    st.lists(st.floats(allow_nan=False, allow_infinity=False, width=64), min_size=1,
             max_size=400)
    | st.lists(st.integers(0, 10**6), min_size=1, max_size=400),
)
def test_nearest_rank_agrees_with_numpy_inverted_cdf(values):
    for p in (50, 95, 99):
        expected = float(np.percentile(np.asarray(values, dtype=float), p,
                                       method="inverted_cdf"))
        assert stats.nearest_rank(values, p) == expected


def _row(i: int, **kw) -> dict:
    row = {
        "request_index": i,
        "planned_context_tokens": 100,
        "prompt_tokens": 100,
        "output_tokens": 11,
        "output_token_source": "usage",
        "reasoning_chunks": 4,
        "content_chunks": 6,
        "e2e_ms": 1000.0,
        "time_to_first_output_ms": 100.0,
        "ttft_ms": 200.0,
        "generation_ms": 900.0,
        "visible_generation_ms": 800.0,
        "decode_tok_s": 10 / 0.9,
        "mean_inter_token_latency_ms": 90.0,
        "effective_prefill_tok_s": 1000.0,
    }
    row.update({name: None for name in catalog.ADDED})  # added fields: not reported here
    row.update(kw)
    return row


def aggregate(rows: list[dict], wall_clock_ms: float | None) -> dict:
    """`stats.aggregate` of plain row dicts."""
    columns = RowColumns.from_rows(rows)
    assert columns is not None
    return stats.aggregate(columns, wall_clock_ms)


def test_aggregate_keys_and_types():
    m = aggregate([_row(0), _row(1, prompt_tokens=300)], 4000.0)
    # every key but those only some runs have (goodput_rps: with criteria, `goodput.py`)
    assert set(m) == catalog.METRIC_KEYS - {a.name for a in catalog.AGGREGATES if a.conditional}
    assert "goodput_rps" not in m
    assert m["output_tokens"] == 22 and type(m["output_tokens"]) is int
    assert m["prompt_tokens"] == 400 and type(m["prompt_tokens"]) is int
    assert m["reasoning_chunks"] == 8 and m["content_chunks"] == 12
    assert m["prompt_tokens_p50"] == 100.0 and type(m["prompt_tokens_p50"]) is float
    assert m["prompt_tokens_p95"] == 300.0
    assert m["output_token_sources"] == {"usage": 2}
    assert m["ttft_samples"] == 2 and m["prompt_token_samples"] == 2
    assert m["throughput_tok_s"] == 5.5  # 22 tokens / 4 s
    assert m["input_throughput_tok_s"] == 100.0  # 400 prompt tokens / 4 s
    assert m["content_chunks_s"] is None
    assert m["prefix_cache_hit_avg"] is None
    assert m["e2e_p50_ms"] == 1000.0 and m["ttft_p95_ms"] == 200.0


def test_aggregate_throughput_none_without_wall_clock():
    assert aggregate([_row(0)], None)["throughput_tok_s"] is None
    assert aggregate([_row(0)], 0.0)["throughput_tok_s"] is None


def test_input_throughput_is_null_when_no_row_has_a_prompt_count():
    m = aggregate([_row(0, prompt_tokens=None), _row(1, prompt_tokens=None)], 4000.0)
    assert m["prompt_tokens"] == 0 and m["input_throughput_tok_s"] is None  # not 0: unknown
    assert aggregate([_row(0)], None)["input_throughput_tok_s"] is None


def test_aggregate_no_rows():
    m = aggregate([], 10.0)
    assert m["output_tokens"] == 0 and m["ttft_p50_ms"] is None
    assert m["output_token_sources"] == {} and m["ttft_samples"] == 0
    assert m["throughput_tok_s"] == 0.0


def test_aggregate_samples_skip_missing_values():
    rows = [_row(0), _row(1, ttft_ms=None, visible_generation_ms=None, content_chunks=0,
                          prompt_tokens=None, effective_prefill_tok_s=None)]
    m = aggregate(rows, 1000.0)
    assert m["ttft_samples"] == 1 and m["prompt_token_samples"] == 1
    assert m["prompt_tokens"] == 100
    assert m["ttft_p95_ms"] == 200.0


def test_content_chunks_s_over_chunk_rows_only():
    rows = [
        _row(0, output_token_source="chunks", output_tokens=10, content_chunks=6,
             visible_generation_ms=500.0),
        _row(1, output_token_source="chunks", output_tokens=10, content_chunks=9,
             visible_generation_ms=1000.0),
        _row(2, content_chunks=1000, visible_generation_ms=1.0),  # usage: not counted
        _row(3, output_token_source="chunks", output_tokens=4, content_chunks=0, ttft_ms=None,
             visible_generation_ms=None),  # no content: adds nothing
    ]
    m = aggregate(rows, 1000.0)
    assert m["content_chunks_s"] == 10.0  # 15 chunks / 1.5 s
    assert m["output_token_sources"] == {"chunks": 3, "usage": 1}


def test_content_chunks_s_zero_time_is_none():
    rows = [_row(0, output_token_source="chunks", visible_generation_ms=0.0)]
    assert aggregate(rows, 1000.0)["content_chunks_s"] is None


def test_prefix_cache_hit_avg():
    rows = [_row(0, cached_tokens=50), _row(1, cached_tokens=0, prompt_tokens=200), _row(2)]
    assert aggregate(rows, 1.0)["prefix_cache_hit_avg"] == 0.25  # (0.5 + 0) / 2
    assert aggregate([_row(0, cached_tokens=5, prompt_tokens=0)], 1.0)[
        "prefix_cache_hit_avg"] is None


@settings(max_examples=examples(200), deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(0, 1e6, allow_nan=False), st.floats(0, 1e6, allow_nan=False),
            st.integers(0, 10**6), st.one_of(st.none(), st.integers(0, 10**6)),
        ),
        max_size=40,
    ),
    st.randoms(use_true_random=False),
)
def test_aggregate_does_not_depend_on_row_order(cols, rnd: random.Random):
    rows = [
        _row(i, output_token_source="chunks", e2e_ms=a, visible_generation_ms=b,
             content_chunks=c, decode_tok_s=a / 7,
             **({} if cached is None else {"cached_tokens": cached}))  # absent: not reported
        for i, (a, b, c, cached) in enumerate(cols)
    ]
    shuffled = rows[:]
    rnd.shuffle(shuffled)
    assert aggregate(rows, 5.0) == aggregate(shuffled, 5.0)


def test_rows_written_before_the_added_fields_have_no_added_aggregates():
    old = [{k: v for k, v in _row(0).items() if k not in catalog.ADDED}]
    m = aggregate(old, 1000.0)
    added = {name for f in catalog.ROW if f.presence == "added" for name in f.percentile_names()}
    assert "content_tok_s_p50" in added
    conditional = {a.name for a in catalog.AGGREGATES if a.conditional}
    assert set(m) == catalog.METRIC_KEYS - added - conditional == stats.expected_keys(
        catalog.ADDED)
    # a file of the first added generation only lacks the second's aggregates
    after1 = frozenset().union(*catalog.ADDED_GENERATIONS[1:])
    gen1 = [{k: v for k, v in _row(0).items() if k not in after1}]
    later = {name for f in catalog.ROW if f.name in after1 for name in f.percentile_names()}
    assert "e2e_from_due_p95_ms" in later and "content_tok_s_p50" not in later
    assert set(aggregate(gen1, 1000.0)) == catalog.METRIC_KEYS - later - conditional


def test_content_tok_s_percentiles_over_the_rows_that_have_it():
    rows = [_row(0, content_tok_s=4.0), _row(1, content_tok_s=None), _row(2, content_tok_s=2.0)]
    m = aggregate(rows, 1000.0)
    assert (m["content_tok_s_p50"], m["content_tok_s_p95"]) == (2.0, 4.0)


def test_wilson_interval_by_hand() -> None:
    """Wilson's score interval: at 0 or n passed it is not empty (n / (n + z²) at n of n),
    and at 50 of 100 it is 0.5 ± 0.0962 (the textbook's figures)."""
    z2 = stats.Z95 ** 2
    assert stats.wilson_interval(0, 0) is None
    low, high = stats.wilson_interval(5, 5)
    assert high == 1.0 and low == pytest.approx(5 / (5 + z2), abs=1e-12)
    low, high = stats.wilson_interval(0, 5)
    assert low == 0.0 and high == pytest.approx(z2 / (5 + z2), abs=1e-12)
    low, high = stats.wilson_interval(50, 100)
    assert (low, high) == pytest.approx((0.4038, 0.5962), abs=1e-4)
