"""The simulator's media: image and audio parts counted by a stated rule (`anvil sim
--media`).

Why a rule and not a model: a test of images or audio as load (`load/media.py`) must know
the true media tokens of each request, so the simulator counts them by arithmetic over what
it received and reports them, as OpenAI does, in `usage.prompt_tokens_details`
(`image_tokens`, `audio_tokens`) and inside `prompt_tokens`:

- an image (an `image_url` part, a base64 `data:` URL, PNG or JPEG): ceil(w/28) × ceil(h/28)
  patches (Qwen2-VL's 28-pixel patches after its 2×2 merge) plus `IMAGE_OVERHEAD` (2: its
  start and end markers); w and h read from the image's header (Pillow);
- an audio clip (an `input_audio` part, base64 WAV): ceil(ms / 40), one token per 40 ms
  (Whisper-style encoders' 25 frames a second), ms = frames × 1000 / rate (the `wave` module).

A part that cannot be read is the request's 400. Without `--media` the simulator is a
text-only model and refuses any non-text part (`tokenizer.message_text`).
"""

from __future__ import annotations

import base64
import binascii
import io
import math
import wave
from dataclasses import dataclass
from typing import Any

PATCH_PX = 28
IMAGE_OVERHEAD = 2
AUDIO_MS_PER_TOKEN = 40


class MediaError(ValueError):
    """A media part the simulator cannot read (the request's 400)."""


@dataclass(frozen=True, slots=True)
class MediaCount:
    """A request's media: each image's (w, h, tokens), each clip's (ms, tokens)."""

    images: tuple[tuple[int, int, int], ...] = ()
    clips: tuple[tuple[float, int], ...] = ()

    @property
    def image_tokens(self) -> int:
        return sum(t for _, _, t in self.images)

    @property
    def audio_tokens(self) -> int:
        return sum(t for _, t in self.clips)

    def log(self) -> dict[str, Any]:
        """What `--log-requests` records of it."""
        return {"images": [list(i) for i in self.images], "clips": [list(c) for c in self.clips],
                "image_tokens": self.image_tokens, "audio_tokens": self.audio_tokens}


def image_tokens(w: int, h: int) -> int:
    return math.ceil(w / PATCH_PX) * math.ceil(h / PATCH_PX) + IMAGE_OVERHEAD


def _b64(text: Any) -> bytes:
    if not isinstance(text, str):
        raise MediaError("a media part's data must be a base64 string")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as e:
        raise MediaError(f"a media part's base64 is not valid: {e}") from e


def _image(part: dict[str, Any]) -> tuple[int, int, int]:
    url = (part.get("image_url") or {}).get("url") if isinstance(part.get("image_url"),
                                                                  dict) else None
    if not isinstance(url, str) or not url.startswith("data:image/") or ";base64," not in url:
        raise MediaError("an image_url part must be a base64 data: URL of an image")
    try:
        from PIL import Image, UnidentifiedImageError
    except ImportError as e:
        raise MediaError("the simulator reads images with Pillow: pip install "
                         "'anvil-metrics[multimodal]'") from e
    try:
        w, h = Image.open(io.BytesIO(_b64(url.split(";base64,", 1)[1]))).size
    except (UnidentifiedImageError, OSError) as e:
        raise MediaError(f"an image_url part is not an image: {e}") from e
    return w, h, image_tokens(w, h)


def _clip(part: dict[str, Any]) -> tuple[float, int]:
    audio = part.get("input_audio")
    if not isinstance(audio, dict) or audio.get("format") != "wav":
        raise MediaError("an input_audio part must be {\"data\": base64, \"format\": \"wav\"}")
    try:
        with wave.open(io.BytesIO(_b64(audio.get("data")))) as w:
            ms = w.getnframes() * 1000 / w.getframerate()
    except (wave.Error, EOFError) as e:
        raise MediaError(f"an input_audio part is not a WAV file: {e}") from e
    return ms, math.ceil(ms / AUDIO_MS_PER_TOKEN)


def split_media(messages: list[Any]) -> tuple[list[Any], MediaCount]:
    """The messages with their media parts taken out (the text the tokenizer counts) and
    the media counted (the module docstring's rule)."""
    images: list[tuple[int, int, int]] = []
    clips: list[tuple[float, int]] = []
    out = []
    for m in messages:
        content = m.get("content") if isinstance(m, dict) else None
        if not isinstance(content, list):
            out.append(m)
            continue
        kept = []
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "image_url":
                images.append(_image(part))
            elif kind == "input_audio":
                clips.append(_clip(part))
            else:
                kept.append(part)
        out.append({**m, "content": kept})
    return out, MediaCount(tuple(images), tuple(clips))
