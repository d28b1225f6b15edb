"""The scripted answers to `multimodal` (`sim/script_multimodal.py`): an image the suite draws
is known by its bytes and answered from its case, or wrongly per fault; any other image, or
the right image with another question, is not ours."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from anvil_metrics.checks.images import OCR_ALPHABET, image_cases
from anvil_metrics.sim.script_multimodal import (
    IMAGE_TOKENS,
    KNOWN_SEEDS,
    answer,
    image_urls,
    known_images,
    wrong_text,
)
from anvil_metrics.sim.tokenizer import count_chat_tokens

pytest.importorskip("PIL")
CASES = image_cases(1)
SCENE = next(c for c in CASES if c.kind != "ocr")
OCR = next(c for c in CASES if c.kind == "ocr")


def ask(question: str, png: bytes, *faults: str, url: str | None = None) -> dict[str, Any]:
    url = url or "data:image/png;base64," + base64.b64encode(png).decode()
    return {"messages": [{"role": "user", "content": [
        {"type": "text", "text": question}, {"type": "image_url", "image_url": {"url": url}}]}]}


def test_every_known_seeds_image_is_known() -> None:
    assert len(known_images()) == sum(len(image_cases(s)) for s in range(KNOWN_SEEDS))


def test_scenes_and_lines_answered_right_or_wrong() -> None:
    reply = answer(ask(SCENE.question, SCENE.png), frozenset())
    text_only = count_chat_tokens([{"role": "user", "content": SCENE.question}])
    assert reply is not None and reply.content == SCENE.expected
    assert reply.prompt_tokens == text_only + IMAGE_TOKENS
    more = answer(ask(SCENE.question, SCENE.png), frozenset({"multimodal:wrong_count"}))
    assert more is not None and more.content == str(int(SCENE.expected) + 1)
    line = answer(ask(OCR.question, OCR.png), frozenset())
    assert line is not None and line.content == OCR.expected
    misread = answer(ask(OCR.question, OCR.png), frozenset({"multimodal:wrong_text"}))
    assert misread is not None and misread.content == wrong_text(OCR.expected)


def test_wrong_text_changes_the_last_character_only() -> None:
    assert wrong_text("AC") == "AE" and wrong_text("A9") == "AA"  # wraps around the alphabet
    assert wrong_text(OCR_ALPHABET[0]) == OCR_ALPHABET[1]


def test_what_is_not_ours() -> None:
    none: frozenset[str] = frozenset()
    assert answer(ask(SCENE.question, SCENE.png), frozenset({"multimodal:refuse"})) is None
    assert answer(ask("How many?", SCENE.png), none) is None
    assert answer(ask(SCENE.question, b"not the image"), none) is None
    assert answer(ask(SCENE.question, b"", url="data:image/png;base64,@@@"), none) is None
    assert answer(ask(SCENE.question, b"", url="https://example.invalid/x.png"), none) is None
    assert answer({"messages": [{"role": "user", "content": "hi"}]}, none) is None


def test_image_urls_of_the_last_user_message() -> None:
    data = ask("q", b"", url="u1")
    data["messages"].append({"role": "assistant", "content": "x"})
    assert image_urls(data) == ["u1"]
    assert image_urls({"messages": [{"role": "user", "content": "text"}]}) == []
    assert image_urls({}) == []
