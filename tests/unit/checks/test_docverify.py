"""docverify: `anvil verify`'s recomputation of a checks document — a sound one verifies
(and meets its JSON Schema), and each edit of a verdict, a count or the host is named.

Why: a verdict is a figure like any other; one edited by hand must be caught.
"""

from __future__ import annotations

import copy
from typing import Any

from anvil_metrics.checks import docverify
from anvil_metrics.checks.docverify import REQUIRED, verify_checks
from anvil_metrics.checks.registry import SUITES
from anvil_metrics.checks.results import CaseResult, Retry, SuiteResult
from anvil_metrics.checks.suite import CheckOptions
from anvil_metrics.schemas.build import check


def case(i: int, passed: bool = True, kind: str | None = None) -> CaseResult:
    return CaseResult(f"c{i}", passed, "4", "4" if passed else "5",
                      error=None if passed else "wrong", error_kind=kind)


def document() -> dict[str, Any]:
    suites = {"json": SuiteResult("json", (case(1), case(2, False, "refused")), 1.0),
              "tools": SuiteResult("tools", (case(1), case(2)), 1.0),
              "coding": SuiteResult("coding", (case(1), case(2, False, "transport")), 1.0)}
    return {"schema": "anvil-serving.checks/v1", "model": "m", "host":
            "http://127.0.0.1:8000/v1", "started_at": "2026-12-01T00:00:00Z",
            "finished_at": "2026-12-01T00:00:01Z", "engine": None, "engine_version": None,
            "max_model_len": None, "options": {},
            "checks": {k: v.to_json() for k, v in suites.items()}}


def test_a_document_verifies_and_each_edit_is_named() -> None:
    doc = document()
    assert [doc["checks"][k]["result"] for k in ("json", "tools", "coding")] == [
        "fail", "pass", "error"]
    assert verify_checks(doc) == []
    said, breaches = check(doc, "anvil-serving.checks/v1")
    assert breaches == [] and "checks-v1.schema.json" in said
    edits = {
        "checks.json.result: 'pass'; its cases give 'fail'":
            lambda d: d["checks"]["json"].update(result="pass"),
        "checks.tools.passed: 1; its cases give 2":
            lambda d: d["checks"]["tools"].update(passed=1),
        "checks.coding.result: 'fail'; its cases give 'error'":
            lambda d: d["checks"]["coding"].update(result="fail"),
        "checks.tools.total: 3; its cases give 2":
            lambda d: d["checks"]["tools"].update(total=3),
        "host: carries credentials": lambda d: d.update(host="http://u:pw@127.0.0.1/v1"),
        "checks.tools.cases[0]: passed, yet carries an error":
            lambda d: d["checks"]["tools"]["cases"][0].update(error="x"),
    }
    for said_, edit in edits.items():
        bad = copy.deepcopy(doc)
        edit(bad)
        assert said_ in verify_checks(bad), said_
    bad = copy.deepcopy(doc)
    bad["checks"]["json"]["result"] = "maybe"
    assert any("result" in p for p in check(bad, "anvil-serving.checks/v1")[1])


def test_the_field_tables_are_the_documents_keys() -> None:
    """The words the JSON Schema and docs/fields.md give each field (`docverify.FIELDS`,
    `SUITE`, `CASE`, `RETRY`, `OPTIONS`, `SUITE_TEXT`) are for the keys the writers write."""
    doc = document()
    assert set(docverify.FIELDS) == set(doc) and set(REQUIRED) <= set(docverify.FIELDS)
    assert set(docverify.OPTIONS) == set(CheckOptions.__dataclass_fields__)
    assert set(docverify.SUITE_TEXT) == set(SUITES)
    errored = SuiteResult("json", (), 0.0, error="no model").to_json()
    assert set(docverify.SUITE) == set(errored) | set(doc["checks"]["json"])
    retried = CaseResult("c", False, 1, 2, error="x", error_kind="transport",
                         retries=(Retry(1, 503, "busy", 0.5),)).to_json()
    assert set(docverify.CASE) == set(retried)
    assert set(docverify.RETRY) == set(retried["retries"][0])
    for table in (docverify.FIELDS, docverify.OPTIONS, docverify.SUITE, docverify.CASE,
                  docverify.RETRY):
        assert all(text.strip() for _, text in table.values())
