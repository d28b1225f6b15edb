"""records: a RequestRecord's JSON line round-trips, and `record_problem` (through its
public name) accepts a real stream's line and refuses each kind of broken one, naming the
field.

Why: every figure anvil reports is rebuilt from these lines; a record that loses a field
on the way to disk, or a validator that lets an impossible line through, corrupts every
figure after it without a sign.
"""

from __future__ import annotations

from typing import Any

import pytest
from rawbuild import completed, failed

from anvil_metrics.records import (
    FAILURE_KINDS,
    Failure,
    RequestRecord,
    all_counts,
    failure_field_problems,
    failure_problem,
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


def test_worker_identity_is_host_and_pid() -> None:
    import os

    host, _, pid = worker_identity().rpartition(":")
    assert host and pid == str(os.getpid())


def test_a_real_streams_lines_have_no_problem() -> None:
    assert record_problem(completed(1).to_json_dict()) is None
    assert record_problem(failed(1).to_json_dict()) is None


@pytest.mark.parametrize(("change", "says"), [
    ({"start_ns": 1.5}, "start_ns must be an integer, got 1.5"),
    ({"request_index": -1}, "request_index must be >= 0"),
    ({"end_ns": "9"}, "end_ns must be an integer or null"),
    ({"end_ns": 2**62}, "end_ns must lie within ±2**62"),
    ({"content_chunks": True}, "content_chunks must be a non-negative integer"),
    ({"warmup": 1}, "warmup must be true or false"),
    ({"chunk_deltas_ns": [1, -2]}, "chunk_deltas_ns must be a list of non-negative"),
    ({"usage": [1]}, "usage must be an object or null"),
    ({"end_ns": None}, "a completed request (failure null) must have an end_ns"),
    ({"first_content_ns": None}, "a first-content stamp exists exactly when"),
    ({"end_ns": 1_000 + 10_000_000 + 1_500_000}, "stamps out of order: end_ns"),
    ({"failure": {"kind": "nope"}}, "failure.kind must be one of"),
    ({"extra": {"waited_for_user": "yes"}}, "extra.waited_for_user must be true or false"),
])
def test_record_problem_names_each_broken_field(change: dict[str, Any], says: str) -> None:
    d = {**completed(1).to_json_dict(), **change}
    problem = record_problem(d)
    assert problem is not None and says in problem


def test_failure_rules() -> None:
    assert failure_problem(None) is None
    assert failure_problem("x") == "failure must be null or an object, got 'x'"
    assert failure_problem({"message": "m"}).startswith("failure.kind must be one of")
    assert failure_field_problems({"kind": FAILURE_KINDS[0], "http_status": True,
                                   "phase": "later"}) == [
        ("http_status", "an integer or null"),
        ("phase", "one of ['connect', 'headers', 'prefill', 'decode'] or null")]


@pytest.mark.parametrize(("xs", "want"), [
    ([], True), ([0, 7, 2**63], True), ([1, True], False), ([1.0], False), ([-1], False),
    (["1"], False), ([[1]], False), ([2**70], True),
])
def test_all_counts(xs: list[Any], want: bool) -> None:
    assert all_counts(xs) is want


def test_nested_too_deep_names_the_field_that_nests() -> None:
    deep: Any = 0
    for _ in range(5):
        deep = [deep]
    assert nested_too_deep({"a": {"b": 1}}, limit=3) is None
    assert nested_too_deep({"a": {"b": deep}}, limit=3) == "a.b"
    assert nested_too_deep({"x": [deep]}, limit=3) == "x[0]"
