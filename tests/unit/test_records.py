"""records: a RequestRecord's JSON line round-trips, and `record_problem` (through its
public name) accepts a real stream's line and refuses each kind of broken one, naming the
field; the line's typed definition (`RequestLine`) reads what older files hold and gives
the line's JSON Schema.

Why: every figure anvil reports is rebuilt from these lines; a record that loses a field
on the way to disk, or a validator that lets an impossible line through, corrupts every
figure after it without a sign.
"""

from __future__ import annotations

from typing import Any

import pytest
from rawbuild import completed, failed

from anvil_metrics.fieldtypes import schema
from anvil_metrics.records import (
    Failure,
    RequestLine,
    RequestRecord,
    decode_line,
    line_gaps,
    line_problem,
    nested_too_deep,
    record_problem,
    worker_identity,
)


def test_a_record_round_trips_through_its_json_line() -> None:
    for rec in (completed(3, worker="h:1"), failed(4)):
        d = rec.to_json_dict()
        assert d["type"] == "request"
        assert RequestRecord.from_json_dict(d) == rec
    assert completed(0).ok and not failed(0).ok


def test_extra_is_written_only_when_it_holds_something() -> None:
    assert "extra" not in completed(0, extra={}).to_json_dict()
    assert completed(0).to_json_dict()["extra"] == {"note": "x"}


def test_from_json_dict_reads_nulls_and_absences_as_none() -> None:
    rec = RequestRecord.from_json_dict({"request_index": 2, "start_ns": 10, "end_ns": 20,
                                        "reasoning_chunks": None, "chunk_deltas_ns": None})
    assert (rec.reasoning_chunks, rec.content_chunks, rec.chunk_deltas_ns) == (0, 0, ())
    assert (rec.warmup, rec.chunk_channels, rec.extra, rec.failure) == (False, "", {}, None)
    assert Failure.from_dict({"kind": "timeout"}) == Failure("timeout", "")
    assert Failure("timeout").to_dict() == {"kind": "timeout", "message": "",
                                           "http_status": None, "phase": None}


def test_worker_identity_is_host_and_pid() -> None:
    import os

    host, _, pid = worker_identity().rpartition(":")
    assert host and pid == str(os.getpid())


def test_a_real_streams_lines_have_no_problem() -> None:
    assert record_problem(completed(1).to_json_dict()) is None
    assert record_problem(failed(1).to_json_dict()) is None


@pytest.mark.parametrize(("change", "says"), [
    ({"start_ns": 1.5}, "start_ns: expected an integer within ±2**62, file has 1.5"),
    ({"request_index": -1},
     "request_index: expected a non-negative integer below 2**53, file has -1"),
    ({"end_ns": "9"}, 'end_ns: expected an integer within ±2**62 or null, file has "9"'),
    ({"end_ns": 2**62},
     "end_ns: expected an integer within ±2**62 or null, file has 4611686018427387904"),
    ({"content_chunks": True},
     "content_chunks: expected a non-negative integer below 2**53 or null, file has true"),
    ({"warmup": 1}, "warmup: expected true or false, file has 1"),
    ({"chunk_deltas_ns": [1, -2]},
     "chunk_deltas_ns[1]: expected a non-negative integer, file has -2"),
    ({"chunk_deltas_ns": [1, True]},
     "chunk_deltas_ns[1]: expected a non-negative integer, file has true"),
    ({"chunk_deltas_ns": "12"}, 'chunk_deltas_ns: expected a list or null, file has "12"'),
    ({"usage": [1]}, "usage: expected an object or null, file has [1]"),
    ({"end_ns": None}, "a completed request (failure null) must have an end_ns"),
    ({"first_content_ns": None}, "a first-content stamp exists exactly when"),
    ({"end_ns": 1_000 + 10_000_000 + 1_500_000}, "stamps out of order: end_ns"),
    ({"failure": {"kind": "nope"}},
     'failure.kind: expected one of "aborted", "bad_response", "cancelled", '),
    ({"failure": {"message": "m"}}, "failure.kind: missing"),
    ({"failure": "x"}, 'failure: expected an object or null, file has "x"'),
    ({"failure": {"kind": "timeout", "phase": "later"}},
     'failure.phase: expected one of "connect", "decode", "headers", "prefill" or null'),
    ({"extra": {"waited_for_user": "yes"}},
     'extra.waited_for_user: expected true or false, file has "yes"'),
    ({"extra": {"start_delay_ns": 2.5}},
     "extra.start_delay_ns: expected a non-negative integer below 2**62 or null"),
    ({"extra": {"conversation": 3}}, "extra.turn: missing"),
    ({"extra": {"conversation": 3, "turn": 0}}, "extra.turn: expected an integer >= 1"),
    ({"extra": {"first_chunk_ns": 0}}, "stamps out of order: extra.first_chunk_ns 0 <"),
    ({"worker": 5}, "worker: expected a string or null, file has 5"),
])
def test_record_problem_names_each_broken_field(change: dict[str, Any], says: str) -> None:
    d = {**completed(1).to_json_dict(), **change}
    problem = record_problem(d)
    assert problem is not None and says in problem


def test_what_older_files_hold_is_read() -> None:
    """Any field but request_index and start_ns may be absent; null chunk counts and
    channels, null gaps and null extra are none; unknown keys, in the line or its extra and
    usage, are not read; a delta past 64 bits is a non-negative integer still."""
    old = {"request_index": 2, "start_ns": 10, "end_ns": 20, "reasoning_chunks": None,
           "chunk_deltas_ns": None, "chunk_channels": None, "extra": None, "later": [1]}
    assert record_problem(old) is None
    line = decode_line(b'{"type":"request","request_index":0,"start_ns":5,"end_ns":9,'
                       b'"chunk_deltas_ns":[1, 2],"usage":{"total_tokens":3,"x":{}},'
                       b'"extra":{"server":{"sent":1},"first_chunk_ns":6}}')
    assert line_problem(line) is None and line_gaps(line) == [1, 2]
    assert record_problem({**old, "chunk_deltas_ns": [2**70]}) is None


def test_the_line_has_one_schema_with_every_fields_words() -> None:
    s = schema(RequestLine)
    assert s["required"] == ["type", "request_index", "start_ns"]
    assert s["properties"]["type"] == {"const": "request"}
    for name, field in s["properties"].items():
        assert name == "type" or field["description"], name
    assert s["properties"]["start_ns"]["x-unit"] == "ns"
    assert s["properties"]["chunk_deltas_ns"]["items"] == {"type": "integer", "minimum": 0}
    assert set(s["properties"]["extra"]["properties"]) >= {"first_chunk_ns", "turn"}


def test_nested_too_deep_names_the_field_that_nests() -> None:
    deep: Any = 0
    for _ in range(5):
        deep = [deep]
    assert nested_too_deep({"a": {"b": 1}}, limit=3) is None
    assert nested_too_deep({"a": {"b": deep}}, limit=3) == "a.b"
    assert nested_too_deep({"x": [deep]}, limit=3) == "x[0]"
