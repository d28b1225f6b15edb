"""derive: a record's row worked out by hand, rows read back from a file's dicts (and
refused when a type is wrong), and the column operations (select, concat, row_dicts).

Why by hand: build and verify both derive through this module, so a round trip alone
would not see a formula both get wrong; the expected figures below are the record's own
stamps and counts, divided on paper.
"""

from __future__ import annotations

import numpy as np
import pytest
from rawbuild import completed, failed

from anvil_metrics.post.derive import RowColumns, derive_row, durations_ms


def test_a_records_row_by_hand() -> None:
    # completed(0): output at +1 ms, content at +2 ms, end at +5 ms; usage 130 in, 6 out
    row = derive_row(completed(0))
    assert (row["e2e_ms"], row["time_to_first_output_ms"], row["ttft_ms"]) == (5.0, 1.0, 2.0)
    assert (row["output_tokens"], row["output_token_source"], row["prompt_tokens"]) == (
        6, "usage", 130)
    assert row["generation_ms"] == 4.0  # end − first output
    assert row["decode_tok_s"] == 1250.0  # (6 − 1) tokens / 4 ms
    assert row["mean_inter_token_latency_ms"] == 0.8  # 4 ms / (6 − 1)
    assert row["visible_generation_ms"] == 3.0  # end − first content
    assert row["schedule_lag_ms"] is None and row["step"] is None


def test_without_usage_the_chunks_count_and_the_extras_are_read() -> None:
    start = 1_000
    rec = completed(0, usage=None,
                    extra={"first_chunk_ns": start + 500_000, "start_delay_ns": 3_000_000})
    row = derive_row(rec)
    assert (row["output_tokens"], row["output_token_source"]) == (5, "chunks")
    assert row["prompt_tokens"] is None
    assert row["decode_tok_s"] == 1000.0  # (5 − 1) / 4 ms
    assert (row["time_to_first_chunk_ms"], row["schedule_lag_ms"]) == (0.5, 3.0)
    assert row["e2e_from_due_ms"] == 8.0  # 3 ms late + 5 ms


def test_an_agent_turns_row_carries_its_job_fields_and_others_have_none() -> None:
    rec = completed(0, extra={"job": 3, "session": 2, "parent_session": 0, "turn": 4,
                              "depth": 1, "tool_wait_ns": 250_500_000,
                              "join_wait_ns": 1_250_000})
    row = derive_row(rec)
    assert {k: row[k] for k in ("job_id", "session_id", "parent_session_id", "turn", "depth",
                                "tool_wait_ms", "join_wait_ms", "conversation_id")} == {
        "job_id": 3, "session_id": 2, "parent_session_id": 0, "turn": 4, "depth": 1,
        "tool_wait_ms": 250.5, "join_wait_ms": 1.25, "conversation_id": None}
    root = derive_row(completed(1, extra={"job": 3, "session": 0, "turn": 1, "depth": 0,
                                          "tool_wait_ns": 0}))
    assert (root["parent_session_id"], root["tool_wait_ms"]) == (None, 0.0)
    plain = derive_row(completed(2))
    assert all(plain[k] is None for k in ("job_id", "session_id", "parent_session_id",
                                          "turn", "depth", "tool_wait_ms",
                                          "join_wait_ms"))


def test_a_failed_record_has_no_row() -> None:
    with pytest.raises(ValueError, match="request 7 did not complete"):
        derive_row(failed(7))


def test_durations_ms_is_nan_where_the_stop_is_missing() -> None:
    out = durations_ms(np.array([10, 10]), np.array([1_500_010, 0]), np.array([True, False]))
    assert out[0] == 1.5 and np.isnan(out[1])


def test_rows_read_back_from_dicts_and_select_concat() -> None:
    rows = [derive_row(completed(i)) for i in range(3)]
    for i, r in enumerate(rows):
        r["request_index"] = i
    cols = RowColumns.from_rows(rows)
    assert cols is not None and len(cols) == 3
    assert cols.row_dicts() == rows
    assert np.isnan(cols.values("schedule_lag_ms")).all()
    picked = cols.select(np.array([True, False, True]))
    assert [r["request_index"] for r in picked.row_dicts()] == [0, 2]
    joined = RowColumns.concat([picked, cols.select(np.array([False, True, False]))])
    assert [r["request_index"] for r in joined.row_dicts()] == [0, 2, 1]
    assert [r["request_index"] for r in cols.row_dicts(1, 2)] == [1]


@pytest.mark.parametrize(("field", "value"), [
    ("e2e_ms", 5),  # an int where a float belongs
    ("e2e_ms", -1.0),  # a negative duration
    ("output_tokens", 6.0),
    ("output_tokens", -1),
    ("output_token_source", "guess"),
    ("e2e_ms", None),  # not nullable (ttft_ms is: a reasoning-only stream has none)
])
def test_from_rows_refuses_a_wrong_type(field: str, value: object) -> None:
    row = derive_row(completed(0))
    assert RowColumns.from_rows([row]) is not None
    assert RowColumns.from_rows([{**row, field: value}]) is None


def test_from_rows_refuses_an_unknown_key_and_a_missing_one() -> None:
    row = derive_row(completed(0))
    assert RowColumns.from_rows([{**row, "extra_field": 1}]) is None
    assert RowColumns.from_rows([{k: v for k, v in row.items() if k != "e2e_ms"}]) is None
    assert RowColumns.from_rows("rows") is None
    with pytest.raises(KeyError):
        RowColumns.from_rows([row]).values("output_token_source")


def test_the_prefill_gate_wait_is_its_own_field_and_stays_out_of_ttft() -> None:
    base = derive_row(completed(0))
    gated = derive_row(completed(0, extra={"prefill_gate_wait_ns": 7_250_000}))
    assert (base["prefill_gate_wait_ms"], gated["prefill_gate_wait_ms"]) == (None, 7.25)
    assert gated["ttft_ms"] == base["ttft_ms"]  # counted from the send, after the gate
