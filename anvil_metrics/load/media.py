"""Images and audio clips as load: a request class's media keys, checked, and its media
drawn before the load.

Why: a vision or audio model's cost is in its media (the preprocessor, the encoder, the
media tokens), so a text-only load misses it. vLLM's bench (`random-mm`), AIPerf and
GuideLLM send synthetic images; anvil draws them locally, seeded, so a run is reproducible
and needs no data set:

    [[request_class]]
    name = "vision"
    weight = 1
    images = 2                          # images per request (0: none)
    image_sizes = ["512x512", "1024x768"]  # WxH, each image's drawn uniformly from the list
    image_format = "png"                # "png" (default) | "jpeg"
    image_reuse = 0.0                   # the share of images that are one shared image
    audio_clips = 1                     # audio clips per request (0: none)
    audio_seconds = 2.5                 # each clip's length
    audio_sample_rate = 16000           # Hz, 16-bit mono WAV

Definitions. Request k of the class uses pool slot `k mod n`: image j of slot s is drawn
from the seed (`context_seed`), the class's position, s and j (numpy's PCG64 seeded with
them: uniform noise pixels, as vLLM's `random-mm`), its size from `image_sizes` by
`mix.uniform(seed, 3, s·1024 + j)`; it is the class's one shared image instead where
`mix.uniform(seed, 4, s·1024 + j) < image_reuse`. A clip is drawn likewise (uniform noise,
16-bit PCM). The pool's n is the run's `requests` when it has one, else `POOL_SLOTS`, and
at most what fits in `POOL_BYTES` (so a duration run's requests k and k + n send the same
media: `MediaPool.slots` says n). Nothing is drawn during the load: each slot's parts are
base64 `data:` URLs, built before it. Pillow draws images (the `multimodal` extra).
"""

from __future__ import annotations

import base64
import io
import math
import re
import wave
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from anvil_metrics.errors import ScenarioError, UsageError

MEDIA_KEYS = ("images", "image_sizes", "image_format", "image_reuse", "audio_clips",
              "audio_seconds", "audio_sample_rate")
IMAGE_FORMATS = ("png", "jpeg")
DEFAULT_SIZES = ("512x512",)
MAX_SIDE = 8192  # pixels, each side of an image
MAX_AUDIO_S = 600.0
POOL_SLOTS = 64  # a run without a request count: its pool's slots (at most)
POOL_BYTES = 512 << 20  # the base64 media of one class's pool, at most
SIZE_STREAM, REUSE_STREAM = 3, 4  # `mix.uniform`'s streams (1, 2: class and model)
PILLOW = "pip install 'anvil-metrics[multimodal]'"
_SIZE = re.compile(r"([1-9][0-9]*)x([1-9][0-9]*)")


@dataclass(frozen=True, slots=True)
class MediaPlan:
    """A class's media keys, checked (`parse_media`)."""

    images: int = 0
    image_sizes: tuple[tuple[int, int], ...] = ()
    image_format: str = "png"
    image_reuse: float = 0.0
    audio_clips: int = 0
    audio_seconds: float = 1.0
    audio_sample_rate: int = 16000

    def to_table(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.images:
            out |= {"images": self.images, "image_format": self.image_format,
                    "image_sizes": [f"{w}x{h}" for w, h in self.image_sizes],
                    "image_reuse": self.image_reuse}
        if self.audio_clips:
            out |= {"audio_clips": self.audio_clips, "audio_seconds": self.audio_seconds,
                    "audio_sample_rate": self.audio_sample_rate}
        return out

    def wav_bytes(self) -> int:
        """One clip's WAV size: a 44-byte header and 16-bit mono samples."""
        return 44 + 2 * round(self.audio_seconds * self.audio_sample_rate)


def _count(key: str, v: Any, src: str | None) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 64:
        raise ScenarioError(key, v, "a whole number from 0 to 64", source=src)
    return v


def _number(key: str, v: Any, low: float, high: float, allowed: str, src: str | None,
            low_open: bool = False) -> float:
    ok = (not isinstance(v, bool) and isinstance(v, int | float) and math.isfinite(v)
          and (v > low if low_open else v >= low) and v <= high)
    if not ok:
        raise ScenarioError(key, v, allowed, source=src)
    return float(v)


def _sizes(key: str, v: Any, src: str | None) -> tuple[tuple[int, int], ...]:
    allowed = f"a non-empty list of \"WxH\" strings, each side 1 to {MAX_SIDE} pixels"
    if not isinstance(v, list) or not v:
        raise ScenarioError(key, v, allowed, source=src)
    out = []
    for s in v:
        m = _SIZE.fullmatch(s) if isinstance(s, str) else None
        if m is None or max(int(m[1]), int(m[2])) > MAX_SIDE:
            raise ScenarioError(key, s, allowed, source=src)
        out.append((int(m[1]), int(m[2])))
    return tuple(out)


def parse_media(where: str, t: dict[str, Any], src: str | None) -> MediaPlan | None:
    """A `[[request_class]]` table's media keys (None: it has none, or 0 of each)."""
    images = _count(f"{where}.images", t.get("images", 0), src)
    clips = _count(f"{where}.audio_clips", t.get("audio_clips", 0), src)
    for k, n in (("image", images), ("audio", clips)):
        if not n:
            stray = [key for key in MEDIA_KEYS if key.startswith(k) and key != (
                "images" if k == "image" else "audio_clips") and key in t]
            if stray:
                raise ScenarioError(f"{where}.{stray[0]}", t[stray[0]], "none without "
                                    f"{'images' if k == 'image' else 'audio_clips'} >= 1",
                                    source=src)
    if not images and not clips:
        return None
    fmt = t.get("image_format", "png")
    if fmt not in IMAGE_FORMATS:
        raise ScenarioError(f"{where}.image_format", fmt, f"one of {list(IMAGE_FORMATS)}",
                            source=src)
    rate = t.get("audio_sample_rate", 16000)
    if isinstance(rate, bool) or not isinstance(rate, int) or not 8000 <= rate <= 48000:
        raise ScenarioError(f"{where}.audio_sample_rate", rate, "a whole number of Hz from "
                            "8000 to 48000", source=src)
    return MediaPlan(
        images=images, image_format=fmt, audio_clips=clips, audio_sample_rate=rate,
        image_sizes=(_sizes(f"{where}.image_sizes", t["image_sizes"], src)
                     if "image_sizes" in t else tuple(
                         tuple(map(int, s.split("x"))) for s in DEFAULT_SIZES)),  # type: ignore[misc]
        image_reuse=_number(f"{where}.image_reuse", t.get("image_reuse", 0.0), 0.0, 1.0,
                            "a number from 0 to 1", src),
        audio_seconds=_number(f"{where}.audio_seconds", t.get("audio_seconds", 1.0), 0.0,
                              MAX_AUDIO_S, f"a number of seconds > 0, at most {MAX_AUDIO_S:g}",
                              src, low_open=True))


def _pillow() -> Any:
    try:
        from PIL import Image
    except ImportError as e:
        raise UsageError(f"images as load need Pillow: {PILLOW}") from e
    return Image


def draw_image(plan: MediaPlan, key: tuple[int, ...], size: tuple[int, int]) -> bytes:
    """One image's file bytes: uniform noise pixels from numpy's PCG64 seeded with `key`."""
    import numpy as np

    image = _pillow()
    w, h = size
    pixels = np.random.default_rng(list(key)).integers(0, 256, (h, w, 3), dtype=np.uint8)
    out = io.BytesIO()
    if plan.image_format == "png":
        image.fromarray(pixels).save(out, format="PNG", compress_level=1)
    else:
        image.fromarray(pixels).save(out, format="JPEG", quality=85)
    return out.getvalue()


def draw_clip(plan: MediaPlan, key: tuple[int, ...]) -> bytes:
    """One clip's WAV bytes: 16-bit mono uniform noise from numpy's PCG64 seeded with `key`."""
    import numpy as np

    n = round(plan.audio_seconds * plan.audio_sample_rate)
    samples = np.random.default_rng(list(key)).integers(-8000, 8000, n, dtype=np.int16)
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(plan.audio_sample_rate)
        w.writeframes(samples.astype("<i2").tobytes())
    return out.getvalue()


def image_part(plan: MediaPlan, data: bytes) -> bytes:
    """An image's `data:` URL as the JSON string's inside (base64 needs no escaping)."""
    return b"data:image/%s;base64," % plan.image_format.encode() + base64.b64encode(data)


class MediaPool:
    """A class's media, drawn before the load: slot s's parts (`parts(k)`: request k's,
    slot k mod `slots`), each the inside of a JSON string (the module docstring)."""

    def __init__(self, plan: MediaPlan, seed: int, klass: int, requests: int | None,
                 uniform: Callable[[int, int, int], float]) -> None:
        """`uniform`: `mix.uniform` (passed: the mix imports this module)."""
        self.plan = plan
        est = (plan.images * 4 * 3 * max(w * h for w, h in plan.image_sizes or [(1, 1)]) // 3
               + plan.audio_clips * 4 * plan.wav_bytes() // 3 + 1)
        self.slots = max(1, min(requests or POOL_SLOTS, POOL_BYTES // est))
        shared: dict[tuple[int, int], bytes] = {}
        self._parts: list[tuple[bytes, ...]] = []
        for s in range(self.slots):
            parts: list[bytes] = []
            for j in range(plan.images):
                sizes = plan.image_sizes
                size = sizes[min(int(uniform(seed, SIZE_STREAM, s * 1024 + j) * len(sizes)),
                                 len(sizes) - 1)]
                if uniform(seed, REUSE_STREAM, s * 1024 + j) < plan.image_reuse:
                    if size not in shared:
                        shared[size] = image_part(plan, draw_image(plan, (seed, klass, 1 << 30),
                                                                   size))
                    parts.append(shared[size])
                else:
                    parts.append(image_part(plan, draw_image(plan, (seed, klass, s, j), size)))
            for j in range(plan.audio_clips):
                parts.append(base64.b64encode(draw_clip(plan, (seed, klass, s, 512 + j))))
            self._parts.append(tuple(parts))
        self.bytes = sum(len(p) for ps in self._parts for p in ps)

    def parts(self, index: int) -> tuple[bytes, ...]:
        """Request `index`'s media parts: its images' URLs, then its clips' base64 WAV."""
        return self._parts[index % self.slots]

    def content_parts(self, marker: str) -> list[dict[str, Any]]:
        """The message's media parts with `marker` where each one's data goes."""
        return ([{"type": "image_url", "image_url": {"url": marker}}] * self.plan.images
                + [{"type": "input_audio", "input_audio": {"data": marker, "format": "wav"}}]
                * self.plan.audio_clips)
