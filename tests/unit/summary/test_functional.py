"""summary.functional: a model's functional value is its worst variant's, a suite not run for
every variant is left out, and failures that were retained are said in words.

Why: a check passes for a model only if it passed with speculation on and off; taking
the best variant, or filling in a suite one variant never ran, would promote a model on
a result it does not have. (The blocks built from a campaign's own check documents:
`tests/unit/campaign/test_checks.py`.)
"""

from __future__ import annotations

from typing import Any

from anvil_metrics.summary.functional import (
    VariantChecks,
    check_words,
    functional_block,
    gate_results,
    model_functional,
    model_key,
    multimodal_block,
)


def _doc(**suites: dict[str, Any]) -> dict[str, Any]:
    return {"checks": suites, "options": {"transport": "cpu"}}


def _r(result: str, **extra: Any) -> dict[str, Any]:
    return {"result": result, **extra}


def test_model_key() -> None:
    assert model_key("official-fp8") == "official_fp8"
    assert model_key("m-1.5") == "m_1_5"


def test_the_worst_variant_decides_and_error_is_worst() -> None:
    variants = [VariantChecks("m", "off", _doc(json=_r("fail"), coding=_r("pass"),
                                               tools=_r("pass", passed=19, total=20))),
                VariantChecks("m", "on", _doc(json=_r("error"), coding=_r("pass"),
                                              tools=_r("pass", passed=20, total=20)))]
    assert model_functional(variants) == {"coding": "pass", "json": "error", "tools": "19/20"}


def test_a_suite_not_run_for_every_variant_is_left_out() -> None:
    variants = [VariantChecks("m", "off", _doc(coding=_r("pass"),
                                               reasoning_leakage=_r("pass"))),
                VariantChecks("m", "on", _doc(reasoning_leakage=_r("pass")))]
    # coding: one variant only; leakage: run by both, its field unknown in both
    assert model_functional(variants) == {"thinking_disabled_reasoning_leakage": None}
    assert model_functional([VariantChecks("m", "off", None)]) == {}


def test_retrieval_is_named_by_its_size_in_thousands() -> None:
    one = [VariantChecks("m", "off", _doc(retrieval=_r("pass",
                                                       requested_context_tokens=65536)))]
    assert model_functional(one) == {"retrieval_66k": "pass"}
    two = [*one, VariantChecks("m", "on", _doc(retrieval=_r("pass",
                                                            requested_context_tokens=900)))]
    assert model_functional(two) == {"retrieval": "pass"}


def test_three_equal_models_are_given_once() -> None:
    checks = [VariantChecks(m, "off", _doc(json=_r("pass"))) for m in ("a", "b", "c")]
    assert functional_block(checks) == {"all_models": {"json": "pass"}}
    assert functional_block([VariantChecks("a", "off", None)]) is None


def test_the_gate_reads_the_candidates_own_suites() -> None:
    checks = [VariantChecks("a", "off", _doc(json=_r("fail"))),
              VariantChecks("a", "on", _doc(json=_r("pass"), multimodal=_r("fail")))]
    assert gate_results(checks, "a/on") == {"json": True}  # multimodal is not functional
    assert gate_results(checks, "a/other") is None


def test_multimodal_across_transports_has_no_one_transport() -> None:
    on = {"checks": {"multimodal": _r("pass", general_image_seconds=1.0, ocr_seconds=2.0)},
          "options": {"transport": "gpu"}}
    checks = [VariantChecks("a", "off", _doc(multimodal=_r(
                  "fail", general_image_seconds=3.0, ocr_seconds=4.0))),
              VariantChecks("a", "on", on)]
    assert multimodal_block(checks) == {
        "transport": None, "mtp_enabled": True, "not_tested": [],
        "a": {"general_image_seconds": 2.0, "ocr_seconds": 3.0, "result": "fail"}}
    assert multimodal_block([VariantChecks("a", "off", _doc(json=_r("pass")))]) is None


def test_retained_failures_in_words() -> None:
    doc = _doc(json=_r("error", cases=[{"error": "HTTP 500"}]),
               tools=_r("pass", cases=[{"retries": [1, 2]}, {"retries": [3]}]))
    assert check_words([VariantChecks("a", "on", doc), VariantChecks("b", "off", None)]) == [
        "Checks of a/on: suite json could not be completed: HTTP 500.",
        "Checks of a/on: suite tools needed 3 retried request(s) (503/429 answers), each "
        "listed in its checks file."]
