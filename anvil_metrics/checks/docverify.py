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

# What each field means, `name: (unit, definition)` (the JSON Schema's descriptions and
# docs/fields.md come from these; `schemas/build.py` fails when a table and the document's
# keys differ).
Text = dict[str, tuple[str, str]]
FIELDS: Text = {
    "schema": ("", 'the document\'s kind and version, "anvil-serving.checks/v1"'),
    "model": ("", "the model asked: --model, else the one the server lists; null when it "
              "names none"),
    "host": ("", "the endpoint checked, without credentials"),
    "started_at": ("", "UTC ISO-8601 …Z stamp of the start"),
    "finished_at": ("", "UTC ISO-8601 …Z stamp of the end"),
    "engine": ("", "the serving engine as discovered from the server; null when unknown"),
    "engine_version": ("", "its version as the server reported it; null when unknown"),
    "max_model_len": ("tok", "the server's context limit; null when it does not say"),
    "options": ("", "the knobs the checks ran with (anvil check's flags, or a campaign's "
                "[checks])"),
    "checks": ("", "suite → its result, in the order the suites ran"),
}
OPTIONS: Text = {
    "context_tokens": ("tok", "retrieval's prompt size"),
    "near_limit_tokens": ("tok", "near_limit's prompt size; null: the server's limit less a "
                          "margin"),
    "timeout_s": ("s", "the time limit of one ordinary request"),
    "long_timeout_s": ("s", "the time limit of one long-context request"),
    "seed": ("", "the seed of retrieval's keys, values and depths and of the image cases"),
    "max_tokens": ("tok", "the cap on every answer's budget; null: each suite's own"),
    "transport": ("", "multimodal: how images reach the model, as the operator said; null "
                  "when not said"),
    "speculation": ("", "the variant's speculation label (campaigns), for the record"),
}
SUITE_TEXT: dict[str, str] = {  # what each suite asks
    "coding": "can the model write a small Python function that passes hidden tests",
    "json": "does the server honour response_format (json_object, json_schema)",
    "tools": "does the model call the right tools with schema-valid arguments",
    "streaming_tools": "do streamed tool-call fragments assemble into the right calls",
    "tool_result_recovery": "does the model read a tool's result back and use it",
    "responses_subset": "the streamed /v1/responses subset agents use: events, text deltas, "
                        "a function-call round trip",
    "reasoning_leakage": "with thinking disabled, does reasoning still come out",
    "retrieval": "can the model find one fact among distractors in a long prompt",
    "near_limit": "one retrieval needle in a prompt at the server's limit less a margin",
    "quality": "three small fixed suites (intelligence, session, tools), passed/total each",
    "multimodal": "can the server see: a counted-shapes scene and a line of OCR",
}
SUITE: Text = {
    "result": ("", '"error" when any case errored (or the suite could not start), else '
               '"pass" when every case passed, else "fail"'),
    "passed": ("", "cases that passed"),
    "total": ("", "cases asked"),
    "elapsed_s": ("s", "the suite's time, to the millisecond"),
    "error": ("", "why the suite could not start (a missing extra, no model); absent "
              "otherwise"),
    "cases": ("", "one entry per question asked"),
}
CASE: Text = {
    "id": ("", "the case's name within its suite"),
    "passed": ("", "the answer was right"),
    "expected": ("", "what a right answer holds (at most 500 characters), so a reader can "
                 "judge"),
    "answer": ("", "what the server answered (at most 500 characters); null when it did not"),
    "error": ("", "why the case failed or errored; null when it passed"),
    "elapsed_s": ("s", "the case's time, retries included, to the millisecond"),
    "error_kind": ("", '"transport" (no answer could be had: the case errored) or '
                   '"refused" (a 4xx: a failure); absent otherwise'),
    "retries": ("", "each retried attempt the case needed (a 503 or 429, a reset); absent "
                "without"),
}
RETRY: Text = {
    "attempt": ("", "which attempt was retried (1: the first)"),
    "status": ("", "its HTTP status; null for a connection error"),
    "reason": ("", "what came back, in words"),
    "wait_s": ("s", "how long the client waited before the next attempt"),
}


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
