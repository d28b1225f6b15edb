"""schema: the run fields' definition and the rules around it — exact equality, a value as
the file shows it, the run fields and the failures, each refusal naming its field.

Why: these rules judge the raw header before a document exists and the document verify
reads; a rule that lets a wrong type through publishes a file other tools cannot read,
and one that refuses a right one fails a good run.
"""

from __future__ import annotations

import pytest
from rawbuild import HEADER

from anvil_metrics.post.schema import (
    FMT_MAX,
    SCHEMA,
    check_run_fields,
    end_problems,
    fmt,
    header_problems,
    raw_header_problems,
    redact_url,
    same,
)
from anvil_metrics.records import FAILURE_KINDS


@pytest.mark.parametrize(("a", "b", "want"), [
    (1, 1, True), (1, 1.0, False), (0.0, -0.0, False), (float("nan"), float("nan"), False),
    (None, 0, False), ({"a": [1, 2.5]}, {"a": [1, 2.5]}, True), ([1], [1, 2], False),
    ({"a": 1}, {"b": 1}, False), (True, 1, False),
])
def test_same_is_exact(a: object, b: object, want: bool) -> None:
    assert same(a, b) is want


def test_fmt_shows_the_files_text() -> None:
    assert fmt(0.1 + 0.2) == "0.30000000000000004"
    assert fmt({"b": 1, "a": None}) == '{"a":null,"b":1}'
    long = fmt("x" * 500)
    assert len(long) == FMT_MAX and long.endswith("...")
    assert fmt(object()).startswith("<")  # not JSON: shown, not raised


def test_redact_url() -> None:
    assert redact_url("http://u:p@h:1/v1") == "http://h:1/v1"
    assert redact_url(None) is None


def test_a_good_raw_header_has_no_problem() -> None:
    assert raw_header_problems(HEADER) == []


@pytest.mark.parametrize(("change", "says"), [
    ({"run_id": "run-1"}, "run_id: expected a string like benchmark-YYYYMMDDTHHMMSSZ[-N], "
                          "file has \"run-1\""),
    ({"started_at": "2026-08-01 16:00"}, "started_at: expected a string a UTC ISO-8601 …Z "
                                         "stamp, file has \"2026-08-01 16:00\""),
    ({"params": {"concurrency": "4"}}, "concurrency: expected an integer or null"),
    ({"params": {"model": 3}}, "model: expected a string or null, file has 3"),
    ({"params": {"serve_flags": []}}, "serve_flags: expected an object or null"),
])
def test_a_bad_raw_header_is_named(change: dict, says: str) -> None:
    problems = raw_header_problems({**HEADER, **change})
    assert len(problems) == 1 and problems[0].startswith(says)


def test_a_whole_document_names_what_is_missing_a_part_does_not() -> None:
    whole: list[str] = []
    check_run_fields({"schema": SCHEMA}, whole)
    assert "metrics: missing" in whole and "run_id: missing" in whole
    part: list[str] = []
    check_run_fields({"schema": SCHEMA}, part, whole=False)
    assert part == []
    wrong: list[str] = []
    check_run_fields({"schema": "v0", "base_url": "http://a:b@h"}, wrong, whole=False)
    assert wrong[0] == 'schema: expected "anvil-serving.benchmark/v1", file has "v0"'
    assert wrong[1].startswith("base_url: holds credentials") and "a:b" not in wrong[1]


def test_request_headers_must_keep_every_credential_redacted() -> None:
    assert header_problems({"X-Tenant": "a", "X-Api-Key": "[redacted]"}) == []
    leaked = header_problems({"X-Tenant": "a", "Authorization": "Bearer sk-7"})
    assert len(leaked) == 1 and leaked[0].startswith("request_headers.Authorization: a "
                                                     "credential's value is stored")
    assert "sk-7" not in leaked[0]


def test_finished_at_may_be_null_only_in_a_partial_run() -> None:
    for partial, count in ((True, 0), (False, 1)):
        problems: list[str] = []
        check_run_fields({"schema": SCHEMA, "finished_at": None, "partial": partial},
                         problems, whole=False)
        assert len(problems) == count


def test_failures_are_typed_by_their_definition() -> None:
    good = {"request_index": 0, "kind": "timeout", "http_status": None, "message": "m",
            "phase": "decode"}
    problems: list[str] = []
    check_run_fields({"failures": [good, {**good, "kind": "boom"}]}, problems, whole=False)
    kinds = ", ".join(f'"{k}"' for k in sorted(FAILURE_KINDS))
    assert problems == [f'failures[1].kind: expected one of {kinds}, file has "boom"']
    for bad, says in (({**good, "request_index": -1}, "failures[0].request_index: expected a "
                       "non-negative integer"), (5, "failures[0]: expected an object, file "
                                                   "has 5"),
                      ({**good, "x": 1}, "failures[0].x: unknown field")):
        problems = []
        check_run_fields({"failures": [bad]}, problems, whole=False)
        assert len(problems) == 1 and problems[0].startswith(says), problems


def test_why_a_run_ended_is_one_of_the_reasons() -> None:
    assert end_problems({"ended_by": "requests", "end_reason": None}) == []
    assert end_problems({"ended_by": "boredom"})[0].startswith(
        'ended_by: expected one of "aborted", "duration", "requests", "signal", "stopped" or '
        'null, file has "boredom"')


def test_a_column_set_without_its_block_is_named_once_per_column() -> None:
    from types import SimpleNamespace

    import numpy as np

    from anvil_metrics.post.schema import set_without_block

    rows = SimpleNamespace(absent=frozenset({"turn"}), present={
        "class_index": np.array([False, True]), "model_index": np.array([False, False])})
    assert set_without_block(None, ("class_index",), "mix") == []  # malformed rows: said so
    assert set_without_block(rows, ("class_index", "model_index", "turn"), "mix") == [
        "request_timings[].class_index: set, but the file has no mix block"]
