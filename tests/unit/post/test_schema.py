"""schema: the document's field rules apart from its numbers — exact equality, a value as
the file shows it, the run fields, the `client` block and the failures, each refusal
naming its field.

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
    check_client,
    check_failures,
    check_keys,
    check_run_fields,
    client_block,
    fmt,
    raw_client_problems,
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
    ({"run_id": "run-1"}, "run_id: \"run-1\" is not benchmark-YYYYMMDDTHHMMSSZ[-N]"),
    ({"started_at": "2026-08-01 16:00"}, "started_at: \"2026-08-01 16:00\" is not a UTC"),
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
    assert wrong[0] == 'schema: file has "v0", expected "anvil-serving.benchmark/v1"'
    assert wrong[1].startswith("base_url: holds credentials") and "a:b" not in wrong[1]


def test_request_headers_must_keep_every_credential_redacted() -> None:
    ok: list[str] = []
    check_run_fields({"schema": SCHEMA, "request_headers": {"X-Tenant": "a",
                                                            "X-Api-Key": "[redacted]"}},
                     ok, whole=False)
    assert ok == []
    leaked: list[str] = []
    check_run_fields({"schema": SCHEMA, "request_headers": {"X-Tenant": "a",
                                                            "Authorization": "Bearer sk-7"}},
                     leaked, whole=False)
    assert len(leaked) == 1 and leaked[0].startswith("request_headers.Authorization: a "
                                                     "credential's value is stored")
    assert "sk-7" not in leaked[0]
    bad: list[str] = []
    check_run_fields({"schema": SCHEMA, "request_headers": {"X-N": 3}}, bad, whole=False)
    assert bad == ["request_headers: expected an object of header names and text values"]


def test_finished_at_may_be_null_only_in_a_partial_run() -> None:
    for partial, count in ((True, 0), (False, 1)):
        problems: list[str] = []
        check_run_fields({"schema": SCHEMA, "finished_at": None, "partial": partial},
                         problems, whole=False)
        assert len(problems) == count


def test_client_block_fills_in_the_verdict_from_the_figures() -> None:
    block = client_block({"loop_lag_ms": {"p99": 12.0}, "cpu_pct": 50.0}, lambda: (1.5, None))
    assert block["loop_lag_ms"] == {"p50": None, "p99": 12.0, "max": None}
    assert block["saturated"] is True
    assert block["verdict"] == "saturated: event-loop lag p99 12.0 ms > 10 ms"
    assert (block["achieved_concurrency"], block["start_delay_ms"]) == (1.5, None)
    calm = client_block({"saturated": False}, lambda: (None, None))
    assert calm["verdict"] == "ok"
    assert client_block(None, lambda: (None, None)) is None


def test_raw_client_problems() -> None:
    good = {"loop_lag_ms": {"p50": 1.0, "p99": 2.0, "max": 3.0, "samples": 10},
            "cpu_pct": 20.0}
    assert raw_client_problems(good) == []
    assert raw_client_problems(None) == []
    assert raw_client_problems(3) == ["client: expected an object or null, file has 3"]
    upside_down = {**good, "loop_lag_ms": {"p50": 3.0, "p99": 2.0, "max": 1.0}}
    assert raw_client_problems(upside_down) == [
        "client.loop_lag_ms: p50 3.0 <= p99 2.0 <= max 1.0 does not hold"]


def test_check_client_holds_saturated_to_its_own_figures() -> None:
    client = {"loop_lag_ms": {"p50": 1.0, "p99": 2.0, "max": 3.0}, "cpu_pct": 95.0,
              "achieved_concurrency": 1.0, "saturated": False, "verdict": "ok",
              "start_delay_ms": None, "colour": "red"}
    problems: list[str] = []
    check_client({"client": client}, problems)
    assert problems[0] == "client.colour: unknown field"
    assert problems[1].startswith("client.saturated: file has false, its own figures")
    assert len(problems) == 2


def test_check_failures_and_check_keys() -> None:
    good = {"request_index": 0, "kind": "timeout", "http_status": None, "message": "m",
            "phase": "decode"}
    problems: list[str] = []
    check_failures({"failures": [good, {**good, "kind": "boom", "request_index": -1}, 5]},
                   problems)
    assert problems == [
        "failures[1].request_index: expected a non-negative integer, file has -1",
        f'failures[1].kind: expected one of {list(FAILURE_KINDS)}, file has "boom"',
        "failures[2]: expected an object, file has 5"]
    keys: list[str] = []
    check_keys("x", {"b": 1, "z": 2}, ("a", "b"), ("a", "b"), keys)
    assert keys == ["x.a: missing", "x.z: unknown field"]


def test_a_column_set_without_its_block_is_named_once_per_column() -> None:
    from types import SimpleNamespace

    import numpy as np

    from anvil_metrics.post.schema import set_without_block

    rows = SimpleNamespace(absent=frozenset({"turn"}), present={
        "class_index": np.array([False, True]), "model_index": np.array([False, False])})
    assert set_without_block(None, ("class_index",), "mix") == []  # malformed rows: said so
    assert set_without_block(rows, ("class_index", "model_index", "turn"), "mix") == [
        "request_timings[].class_index: set, but the file has no mix block"]
