"""The `multimodal` suite: can the server see? A counted-shapes scene and a line of OCR.

Why these two: a vision model that has been quantized, or a server whose image path is
broken (wrong preprocessing, images dropped, a text-only build), still answers fluently, so
only a question whose answer is in the pixels tells. Counting coloured shapes tests general
scene understanding; reading a random string tests fine detail — neither can be guessed from
the text of the question. The images are drawn locally (`images.py`), so the answer key is
exact and no network is needed.

Cases (from `--seed`): `scene_1`, `scene_2` ("How many red circles...? Answer with a number
only.") and `ocr_1`, `ocr_2` ("What text is written in the image?"). Each is one
non-streamed chat request whose user message is the image (a PNG data URL) then the question.

Scoring (`judge_count`, `judge_text`):

* a count passes when the answer names exactly one number, as digits or an English word
  ("3", "three", "There are 3.") and it is the right one; an answer naming several numbers
  is ambiguous and fails;
* OCR passes when the answer contains the text's characters in order, case and whitespace
  ignored, not run into other letters or digits: "pwy fn3 7kw", "PWYFN37KW" and "The text
  is: PWY FN3 7KW." pass, "PWY FN3 7KWX" does not. The rendered text is uppercase, so a
  model writing it lowercase read the right characters; spacing is the font's, not content.

A `<think>...</think>` block left in the content is not judged (the reasoning_leakage suite
looks at that). A 400 from a text-only server ("only text content parts are supported") is
a failure — the server does not do what was asked — never an error.

Figures beside the cases: `general_image_seconds` and `ocr_seconds` are the mean elapsed
seconds of the answered cases of each kind (answered: right or wrong, not refused or
errored; None when none was); with two cases of each the mean is steadier than one case,
which on a fresh server also carries the first image's warm-up. `transport` is how images
reach the model, as the operator said (`--transport`; None when not said: anvil cannot see
it). `not_tested` lists what this suite does not cover, so a reader does not assume it.
"""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from anvil_metrics.checks.results import CaseResult, SuiteResult
from anvil_metrics.checks.suite import CheckContext, Judgement, run_case, suite_result

if TYPE_CHECKING:
    from anvil_metrics.checks.images import ImageCase

SUITE = "multimodal"
NOT_TESTED = ("video", "multi-image ordering", "32-image ceiling", "concurrency above one",
              "host-memory pressure")
MAX_TOKENS = 1024  # room for a reasoning model's thinking before its short answer
INSTALL_HINT = "pip install 'anvil-metrics[multimodal]'"
KIND_FIGURES = {"general": "general_image_seconds", "ocr": "ocr_seconds"}

NUMBER_WORDS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12,
}  # fmt: skip
_NUMBER = re.compile(r"\b(\d+|" + "|".join(NUMBER_WORDS) + r")\b", re.IGNORECASE)
_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL | re.IGNORECASE)


# -- scoring (pure) ---------------------------------------------------------------------------
def visible_answer(content: str) -> str:
    """The content without a `<think>` block (closed or not) and outer whitespace."""
    return _THINK.sub("", content).strip()


def numbers_in(text: str) -> tuple[int, ...]:
    """The distinct numbers `text` names, digits or English words up to twelve, in order."""
    found: list[int] = []
    for m in _NUMBER.finditer(text):
        word = m.group(1).lower()
        value = NUMBER_WORDS[word] if word in NUMBER_WORDS else int(word)
        if value not in found:
            found.append(value)
    return tuple(found)


def judge_count(answer: str, expected: int) -> str | None:
    """None when `answer` names exactly the number `expected`, else why it does not."""
    numbers = numbers_in(visible_answer(answer))
    if not numbers:
        return "the answer names no number"
    if len(numbers) > 1:
        return f"the answer names several numbers: {', '.join(map(str, numbers))}"
    if numbers[0] != expected:
        return f"counted {numbers[0]}, the image has {expected}"
    return None


def text_pattern(expected: str) -> re.Pattern[str]:
    """`expected`'s characters in order, any whitespace between, not inside a longer run of
    letters and digits; matched against the uppercased answer."""
    chars = [re.escape(c) for c in expected.upper() if not c.isspace()]
    return re.compile(r"(?<![A-Z0-9])" + r"\s*".join(chars) + r"(?![A-Z0-9])")


def judge_text(answer: str, expected: str) -> str | None:
    """None when `answer` contains the text `expected` (case and spaces ignored), else why."""
    if text_pattern(expected).search(visible_answer(answer).upper()):
        return None
    return "the answer does not contain the text in the image"


def mean_seconds(cases: Sequence[CaseResult], ids: Sequence[str]) -> float | None:
    """The mean elapsed seconds of the answered cases among `ids`; None when none was."""
    times = [c.elapsed_s for c in cases if c.id in ids and c.answer is not None]
    return round(sum(times) / len(times), 3) if times else None


# -- asking -----------------------------------------------------------------------------------
def data_url(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def request_body(case: ImageCase) -> dict[str, Any]:
    """The chat request for one case: the image, then the question, in one user message."""
    content = [{"type": "image_url", "image_url": {"url": data_url(case.png)}},
               {"type": "text", "text": case.question}]
    return {"messages": [{"role": "user", "content": content}], "temperature": 0,
            "max_tokens": MAX_TOKENS, "stream": False}


def expected_of(case: ImageCase) -> str:
    """What the reader of checks.json needs: the answer and what the image shows."""
    if case.kind == "ocr":
        return case.expected
    return f"{case.expected} (the image: {case.description})"


def _judge(ctx: CheckContext, case: ImageCase) -> Judgement:
    reply = ctx.client.chat(request_body(case))
    answer = reply.content
    if case.kind == "ocr":
        why = judge_text(answer, case.expected)
    else:
        why = judge_count(answer, int(case.expected))
    extra = {"question": case.question, "prompt_tokens": reply.prompt_tokens}
    return Judgement(why is None, answer, why, extra)


def _figures(ctx: CheckContext) -> dict[str, Any]:
    return {"transport": ctx.options.transport, "not_tested": list(NOT_TESTED)}


def run_multimodal(ctx: CheckContext) -> SuiteResult:
    """Ask every image case; the suite's figures are described in the module docstring."""
    started = time.monotonic()
    try:
        from anvil_metrics.checks.images import image_cases
        cases = image_cases(ctx.options.seed)
    except ImportError as e:
        why = str(e) if INSTALL_HINT in str(e) else f"Pillow is not installed ({e}): {INSTALL_HINT}"
        return SuiteResult(SUITE, (), time.monotonic() - started,
                           {**dict.fromkeys(KIND_FIGURES.values()), **_figures(ctx)}, error=why)
    results = [run_case(ctx, c.id, expected_of(c), lambda c=c: _judge(ctx, c)) for c in cases]
    seconds = {figure: mean_seconds(results, [c.id for c in cases if c.kind == kind])
               for kind, figure in KIND_FIGURES.items()}
    return suite_result(SUITE, results, started, **seconds, **_figures(ctx))
