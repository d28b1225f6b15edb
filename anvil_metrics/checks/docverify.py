"""`anvil verify checks.json`: a checks document's verdicts recomputed from its cases.

Why: a `result`, `passed` and `total` are figures like any other — each must follow from
the cases listed under it by the one rule (`results.verdict`), so a document edited by hand
or written by another tool is caught. What a case's `passed` says about the server's answer
cannot be recomputed without the server; the cases keep `expected` and `answer` so a reader
can judge it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from anvil_metrics.checks.registry import SUITES
from anvil_metrics.checks.results import ANSWER_CHARS, ERROR_KINDS, RESULTS

SCHEMA = "anvil-serving.checks/v1"
REQUIRED = ("schema", "model", "host", "started_at", "checks")
SUITE_REQUIRED = ("result", "passed", "total", "elapsed_s", "cases")
CASE_REQUIRED = ("id", "passed", "expected", "answer", "error", "elapsed_s")


def _case_result(cases: list[Mapping[str, Any]]) -> str:
    if not cases or any(c.get("error_kind") == "transport" for c in cases):
        return "error"
    return "pass" if all(c.get("passed") is True for c in cases) else "fail"


def verify_checks(doc: Mapping[str, Any]) -> list[str]:
    """Every way `doc` breaks the rules, one line each ([] when it holds)."""
    problems = [f"{k}: missing" for k in REQUIRED if k not in doc]
    if doc.get("schema") != SCHEMA:
        problems.append(f"schema: {doc.get('schema')!r}; expected {SCHEMA!r}")
    host = doc.get("host")
    if isinstance(host, str) and "@" in host.split("//", 1)[-1].split("/", 1)[0]:
        problems.append("host: carries credentials")
    checks = doc.get("checks")
    if not isinstance(checks, Mapping):
        return [*problems, "checks: not an object"]
    for name, s in checks.items():
        where = f"checks.{name}"
        if name not in SUITES:
            problems.append(f"{where}: not a known suite")
        if not isinstance(s, Mapping):
            problems.append(f"{where}: not an object")
            continue
        problems += [f"{where}.{k}: missing" for k in SUITE_REQUIRED if k not in s]
        cases = s.get("cases")
        if not isinstance(cases, list) or not all(isinstance(c, Mapping) for c in cases):
            problems.append(f"{where}.cases: not a list of objects")
            continue
        for i, c in enumerate(cases):
            problems += [f"{where}.cases[{i}].{k}: missing" for k in CASE_REQUIRED if k not in c]
            kind = c.get("error_kind")
            if kind is not None and kind not in ERROR_KINDS:
                problems.append(f"{where}.cases[{i}].error_kind: {kind!r} is not one of "
                                f"{', '.join(ERROR_KINDS)}")
            if c.get("passed") is True and (kind is not None or c.get("error") is not None):
                problems.append(f"{where}.cases[{i}]: passed, yet carries an error")
            for k in ("expected", "answer"):
                if isinstance(c.get(k), str) and len(c[k]) > ANSWER_CHARS:
                    problems.append(f"{where}.cases[{i}].{k}: over {ANSWER_CHARS} characters")
        want = "error" if s.get("error") is not None else _case_result(cases)
        if s.get("result") not in RESULTS or s.get("result") != want:
            problems.append(f"{where}.result: {s.get('result')!r}; its cases give {want!r}")
        passed = sum(c.get("passed") is True for c in cases)
        if s.get("passed") != passed:
            problems.append(f"{where}.passed: {s.get('passed')!r}; its cases give {passed}")
        if s.get("total") != len(cases):
            problems.append(f"{where}.total: {s.get('total')!r}; its cases give {len(cases)}")
    return problems
