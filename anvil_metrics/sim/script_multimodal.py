"""The scripted simulator's eyes: it answers the multimodal suite's images right, or wrong.

Why by the image's hash: the simulator cannot see, but the suite's images are a pure
function of the seed (`checks/images.py`), so the script redraws them and keeps a table
sha256(PNG bytes) -> case. A request is recognised only when its one image is byte for byte
one the suite draws for a seed in ``range(KNOWN_SEEDS)`` (0 is `anvil check`'s default;
tests use 0 and 1) and its question is that case's. Nothing is embedded in the image for
the script's sake, so a real server is sent exactly what the script reads. Any other
request is not ours: it goes on to the ordinary text-only path, which refuses image parts
with a 400 (so `--seed 4` and above fail against the scripted simulator: refused).

Faults (`--script-fault` / ``PUT /sim/script-faults``):

    multimodal:wrong_count  the scenes are answered with one shape too many
    multimodal:wrong_text   the OCR lines are read with one character wrong
    multimodal:refuse       every image is refused with a 400, as a text-only server does

Pillow is imported only when a request carries an image, so a simulator without Pillow
still starts and answers everything else; without it images are simply not recognised.
The prompt tokens reported are the text's (the default ``words4`` rule) plus
`IMAGE_TOKENS` per image, so the simulator never has to tokenize an image part.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from functools import cache
from typing import TYPE_CHECKING, Any

from anvil_metrics.sim.script import ScriptedReply, last_user_text
from anvil_metrics.sim.tokenizer import TokenizeError, count_chat_tokens

if TYPE_CHECKING:
    from anvil_metrics.checks.images import ImageCase

FAULTS: dict[str, tuple[str, ...]] = {"multimodal": ("wrong_count", "wrong_text", "refuse")}
KNOWN_SEEDS = 4
IMAGE_TOKENS = 256  # what one image costs in the usage reported (a small VLM's order)
_DATA_URL_PREFIX = "data:image/png;base64,"


@cache
def known_images() -> dict[str, ImageCase]:
    """sha256 hex of every image the suite draws for the known seeds -> its case."""
    from anvil_metrics.checks.images import image_cases

    return {hashlib.sha256(c.png).hexdigest(): c
            for seed in range(KNOWN_SEEDS) for c in image_cases(seed)}


def image_urls(data: dict[str, Any]) -> list[str]:
    """The `image_url` URLs of the request's last user message, in order."""
    for message in reversed(data.get("messages") or ()):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if not isinstance(content, list):
                return []
            return [p["image_url"].get("url", "") for p in content
                    if isinstance(p, dict) and p.get("type") == "image_url"
                    and isinstance(p.get("image_url"), dict)]
    return []


def _png_of(url: Any) -> bytes | None:
    if not isinstance(url, str) or not url.startswith(_DATA_URL_PREFIX):
        return None
    try:
        return base64.b64decode(url[len(_DATA_URL_PREFIX):], validate=True)
    except (binascii.Error, ValueError):
        return None


def _text_tokens(data: dict[str, Any]) -> int:
    """The messages' tokens with the image parts left out."""
    messages = []
    for m in data.get("messages") or ():
        if isinstance(m, dict) and isinstance(m.get("content"), list):
            texts = [p for p in m["content"] if isinstance(p, dict) and p.get("type") == "text"]
            m = {**m, "content": texts}
        messages.append(m)
    try:
        return count_chat_tokens(messages)
    except TokenizeError:
        return 0


def wrong_text(text: str) -> str:
    """`text` with its last character replaced by another of the alphabet."""
    from anvil_metrics.checks.images import OCR_ALPHABET

    last = text[-1]
    other = OCR_ALPHABET[(OCR_ALPHABET.index(last) + 1) % len(OCR_ALPHABET)]
    return text[:-1] + other


def answer(data: dict[str, Any], faults: frozenset[str]) -> ScriptedReply | None:
    """The answer to one of the suite's images, None when the request is not one of them
    (or `multimodal:refuse` is on: the ordinary path then refuses it with a 400)."""
    urls = image_urls(data)
    if len(urls) != 1 or "multimodal:refuse" in faults:
        return None
    png = _png_of(urls[0])
    if png is None:
        return None
    try:
        case = known_images().get(hashlib.sha256(png).hexdigest())
    except ImportError:  # no Pillow here: no image can be recognised
        return None
    if case is None or last_user_text(data).strip() != case.question:
        return None
    if case.kind == "ocr":
        content = wrong_text(case.expected) if "multimodal:wrong_text" in faults \
            else case.expected
    else:
        count = int(case.expected)
        content = str(count + 1) if "multimodal:wrong_count" in faults else str(count)
    return ScriptedReply(content=content, prompt_tokens=_text_tokens(data) + IMAGE_TOKENS)
