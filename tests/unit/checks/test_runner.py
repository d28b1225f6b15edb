"""The checks framework: a suite's verdict from its cases (a transport error is an error,
never a pass and never a failure; a 4xx refusal is a failure), answers cut, retries kept,
and `anvil verify`'s recomputation of a checks document (and its JSON Schema)."""

from __future__ import annotations

import copy
from http.server import BaseHTTPRequestHandler
from typing import Any

import orjson
import pytest
from conftest import http_server

from anvil_metrics.checks.client import CheckClient, CheckError
from anvil_metrics.checks.docverify import verify_checks
from anvil_metrics.checks.results import ANSWER_CHARS, CaseResult, Retry, SuiteResult, verdict
from anvil_metrics.schemas.build import check
from anvil_metrics.urls import Endpoint


def case(i: int, passed: bool = True, kind: str | None = None) -> CaseResult:
    return CaseResult(f"c{i}", passed, "4", "4" if passed else "5",
                      error=None if passed else "wrong", error_kind=kind)


def test_the_verdict_rule() -> None:
    assert verdict([case(1), case(2)]) == "pass"
    assert verdict([case(1), case(2, False)]) == "fail"
    assert verdict([case(1), case(2, False, "refused")]) == "fail"  # a 4xx: it declined
    assert verdict([case(1), case(2, False), case(3, False, "transport")]) == "error"
    assert verdict([]) == "error"  # nothing was asked: nothing can be said
    with pytest.raises(ValueError, match="passed with an error_kind"):
        CaseResult("x", True, 1, 1, error_kind="transport")
    with pytest.raises(ValueError, match="error_kind 'nope'"):
        CaseResult("x", False, 1, 1, error_kind="nope")


def test_answers_are_cut_and_retries_kept() -> None:
    c = CaseResult("long", False, "x", "y" * 2000, error="wrong", elapsed_s=1.23456,
                   retries=(Retry(1, 503, "loading", 1.0),), extra={"prompt_tokens": 9})
    out = c.to_json()
    assert len(out["answer"]) == ANSWER_CHARS and out["elapsed_s"] == 1.235
    assert out["retries"] == [{"attempt": 1, "status": 503, "reason": "loading",
                               "wait_s": 1.0}]
    assert out["prompt_tokens"] == 9 and "error_kind" not in out
    s = SuiteResult("json", (case(1), case(2, False)), 2.0, {"note": 1})
    assert (s.result, s.passed, s.total) == ("fail", 1, 2)
    assert SuiteResult("json", (), 0.0, error="no jsonschema").result == "error"


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


class _Recorder(BaseHTTPRequestHandler):
    """Answers every POST with a fixed chat completion, after a 503 for the first `FAILS`,
    and keeps each request body."""

    bodies: list[dict] = []
    fails = 0

    def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
        body = orjson.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).bodies.append(body)
        if type(self).fails > 0:
            type(self).fails -= 1
            self._send(503, {"error": {"message": "model loading"}})
            return
        self._send(200, {"choices": [{"message": {"content": "4"}, "finish_reason": "stop"}]})

    def _send(self, status: int, obj: dict) -> None:
        raw = orjson.dumps(obj)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: object) -> None:
        pass


def test_the_client_caps_answers_retries_503s_and_keeps_each_retry() -> None:
    _Recorder.bodies, _Recorder.fails = [], 2
    with http_server(_Recorder) as port:
        client = CheckClient(Endpoint.parse(f"http://127.0.0.1:{port}"), "m", max_tokens=64,
                             backoff_s=0.01)
        answer = client.chat({"messages": [{"role": "user", "content": "2+2?"}],
                              "max_tokens": 2048})
        assert answer.content == "4"
        retries = client.take_retries()
        assert [(r.attempt, r.status, r.reason) for r in retries] == [
            (1, 503, "model loading"), (2, 503, "model loading")]
        client.chat({"messages": [], "max_tokens": 1})
        _Recorder.fails = 99
        with pytest.raises(CheckError) as e:
            client.chat({"messages": []})
        assert e.value.kind == "transport" and "HTTP 503" in str(e.value)
    assert [b.get("max_tokens") for b in _Recorder.bodies[:4]] == [64, 64, 64, 1]
    assert all(b["model"] == "m" for b in _Recorder.bodies)
