"""A check suite as a request class: case k's body, and the suite's own judge of its answer."""

from __future__ import annotations

import time

import orjson

from anvil_metrics.checks import jsonmode, reasoning, underload


def test_request_k_asks_case_k_mod_n_as_the_suite_asks_it():
    n = len(jsonmode.CASES)
    for k in (0, 3, n, 2 * n + 1):
        assert underload.case_body("json", k) == jsonmode.request_body(jsonmode.CASES[k % n])
    assert underload.case_body("reasoning_leakage", 5) == reasoning.request_body(
        reasoning.CASES[5 % len(reasoning.CASES)])


def test_the_suites_own_judge_gives_the_verdict():
    n = len(jsonmode.CASES)
    for k in range(2 * n):
        right = orjson.dumps(jsonmode.CASES[k % n].value).decode()
        assert underload.verdict("json", k, right, "") == (True, None)
        passed, reason = underload.verdict("json", k, f"```json\n{right}\n```", "")
        assert not passed and "fenced" in reason
    case = reasoning.CASES[1]  # Rome
    assert underload.verdict("reasoning_leakage", 1, case.answer, "") == (True, None)
    passed, reason = underload.verdict("reasoning_leakage", 1, case.answer, "let me think")
    assert not passed and "reasoning streamed" in reason


def test_a_reason_is_bounded():
    passed, reason = underload.verdict("json", 0, "x" * 5000, "")
    assert not passed and 0 < len(reason) <= underload.REASON_CHARS


def test_a_judgement_costs_the_load_little():
    """Loosely: a json answer is judged in well under a millisecond once prepared (the
    module's figure is ~50 µs; this allows 40x for a slow, shared machine)."""
    underload.prepare("json")
    right = orjson.dumps(jsonmode.CASES[4].value).decode()
    t0 = time.perf_counter()
    for _ in range(200):
        underload.verdict("json", 4, right, "")
    assert (time.perf_counter() - t0) / 200 < 2e-3
