"""multimodal: the suite's pure parts — scoring, the request it sends, its simulator
script, and the one-line error when Pillow is missing. (The images it draws:
`test_images.py`.)"""

from __future__ import annotations

import base64
import sys

import pytest

from anvil_metrics.checks import multimodal as mm
from anvil_metrics.checks.client import CheckClient
from anvil_metrics.checks.images import (
    image_cases,
    scene_case,
)
from anvil_metrics.checks.results import CaseResult
from anvil_metrics.checks.suite import CheckContext, CheckOptions
from anvil_metrics.sim import script_multimodal as smm
from anvil_metrics.sim.chat import full_text
from anvil_metrics.urls import Endpoint


# -- scoring -----------------------------------------------------------------------------------
@pytest.mark.parametrize("answer", ["3", "3.", " three ", "Three", "There are 3 red circles.",
                                    "<think>1, 2, 3, 4? no</think>3"])
def test_count_accepts_the_number_as_digits_or_word(answer: str) -> None:
    assert mm.judge_count(answer, 3) is None


@pytest.mark.parametrize(("answer", "why"), [
    ("4", "counted 4"), ("four", "counted 4"), ("", "no number"), ("many", "no number"),
    ("2 or 3", "several numbers"), ("33", "counted 33"), ("3rd", "no number"),
])  # fmt: skip
def test_count_rejects_wrong_missing_or_ambiguous_numbers(answer: str, why: str) -> None:
    assert why in (mm.judge_count(answer, 3) or "")


def test_numbers_in_is_distinct_and_ordered() -> None:
    assert mm.numbers_in("5 squares, five of them, and 2 circles") == (5, 2)


@pytest.mark.parametrize("answer", ["PWY FN3 7KW", "pwy fn3 7kw", "PWYFN37KW",
                                    "The text is: PWY FN3 7KW.", '"PWY FN3 7KW"',
                                    "PWY\nFN3 7KW", "<think>hm</think>PWY FN3 7KW"])
def test_text_ignores_case_and_spacing(answer: str) -> None:
    assert mm.judge_text(answer, "PWY FN3 7KW") is None


@pytest.mark.parametrize("answer", ["PWY FN3 7KX", "PWY FN3", "XPWY FN3 7KW", "PWY FN3 7KW9",
                                    "PWY-FN3-7KW", "", "PWV FN3 7KW"])
def test_text_rejects_any_other_reading(answer: str) -> None:
    assert mm.judge_text(answer, "PWY FN3 7KW") is not None


def test_the_simulators_nonsense_text_never_passes() -> None:
    nonsense = full_text("c", 200)
    for case in image_cases(0):
        judged = (mm.judge_text(nonsense, case.expected) if case.kind == "ocr"
                  else mm.judge_count(nonsense, int(case.expected)))
        assert judged is not None


def test_mean_seconds_counts_answered_cases_only() -> None:
    cases = [CaseResult("a", True, "1", "1", elapsed_s=2.0),
             CaseResult("b", False, "1", "2", error="wrong", elapsed_s=4.0),
             CaseResult("c", False, "1", None, error="400", error_kind="refused", elapsed_s=9.0),
             CaseResult("d", True, "x", "x", elapsed_s=1.0)]
    assert mm.mean_seconds(cases, ["a", "b", "c"]) == 3.0
    assert mm.mean_seconds(cases, ["c"]) is None


def test_the_request_carries_the_image_then_the_question() -> None:
    case = image_cases(0)[0]
    body = mm.request_body(case)
    image, text = body["messages"][0]["content"]
    url = image["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    assert base64.b64decode(url.split(",", 1)[1]) == case.png
    assert text == {"type": "text", "text": case.question}


# -- the simulator's script --------------------------------------------------------------------
def test_the_script_answers_its_images_right_or_as_the_fault_says() -> None:
    scene, _, ocr, _ = image_cases(1)
    right = smm.answer(mm.request_body(scene), frozenset())
    assert right is not None and right.content == scene.expected
    assert right.prompt_tokens is not None and right.prompt_tokens > smm.IMAGE_TOKENS
    wrong = smm.answer(mm.request_body(scene), frozenset({"multimodal:wrong_count"}))
    assert wrong is not None and mm.judge_count(wrong.content, int(scene.expected))
    read = smm.answer(mm.request_body(ocr), frozenset({"multimodal:wrong_count"}))
    assert read is not None and read.content == ocr.expected
    misread = smm.answer(mm.request_body(ocr), frozenset({"multimodal:wrong_text"}))
    assert misread is not None and mm.judge_text(misread.content, ocr.expected)
    assert smm.answer(mm.request_body(ocr), frozenset({"multimodal:refuse"})) is None


def test_the_script_ignores_what_is_not_its_own() -> None:
    assert smm.answer({"messages": [{"role": "user", "content": "hi"}]}, frozenset()) is None
    case = image_cases(0)[0]
    other_question = mm.request_body(case)
    other_question["messages"][0]["content"][1]["text"] = "Describe the image."
    assert smm.answer(other_question, frozenset()) is None
    not_drawn_here = mm.request_body(scene_case(smm.KNOWN_SEEDS, "scene_1"))
    assert smm.answer(not_drawn_here, frozenset()) is None


# -- Pillow missing -----------------------------------------------------------------------------
def test_without_pillow_the_suite_errors_with_the_install_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "PIL", None)  # `import PIL` now raises ImportError
    monkeypatch.delitem(sys.modules, "anvil_metrics.checks.images")
    client = CheckClient(Endpoint.parse("http://127.0.0.1:9"), "m")
    result = mm.run_multimodal(CheckContext(client, CheckOptions(transport="gpu")))
    assert result.result == "error" and result.cases == ()
    assert result.error is not None and "\n" not in result.error
    assert "pip install 'anvil-metrics[multimodal]'" in result.error
    assert result.extra["transport"] == "gpu" and result.extra["ocr_seconds"] is None
