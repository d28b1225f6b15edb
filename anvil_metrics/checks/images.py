"""The multimodal suite's test images, drawn locally with Pillow from a seed.

Why drawn and not downloaded: a check must run offline, the same on every machine, and its
answer key must be known exactly. So every image is a pure function of (seed, case):

* a *scene*: a white canvas with three groups of solid shapes, each group one colour and one
  shape (say 3 red circles, 5 blue squares, 1 green triangle), every shape in its own cell
  of a 4 x 3 grid so none touch; the question asks how many of one group there are. The
  three counts differ, so the answer names the group that was asked about;
* an *OCR line*: three groups of three uppercase letters and digits ("KX7 4TN 9PW") in a
  large font, black on white. The alphabet leaves out pairs a reader (human or model) can
  confuse: 0/O/Q/D, 1/I/L, 2/Z, 5/S, 6/G, 8/B.

The font is Pillow's bundled scalable one (`ImageFont.load_default(size=...)`, Pillow >= 10.1)
so no system font is needed and the pixels are the same wherever this Pillow runs. Shapes
are 90 px and letters about 55 px tall: large enough for a small vision model.

The simulator's script (`sim/script_multimodal.py`) redraws these images to recognise them,
so the answer key lives here with the questions.
"""

from __future__ import annotations

import io
import random
from dataclasses import dataclass
from functools import cache

from PIL import Image, ImageDraw, ImageFont

COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 30, 30),
    "blue": (30, 70, 220),
    "green": (20, 150, 50),
}
SHAPES = ("circle", "square", "triangle")
GRID_COLUMNS, GRID_ROWS = 4, 3
CELL_PX = 160
SHAPE_PX = 90
JITTER_PX = 15  # a shape's centre moves up to this far from its cell's centre
MAX_COUNT = 5  # counts are three different numbers in 1..MAX_COUNT (at most 12 shapes)
OCR_ALPHABET = "ACEFHJKMNPRTUVWXY3479"
OCR_GROUPS, OCR_GROUP_CHARS = 3, 3
OCR_FONT_PX = 72
OCR_CANVAS_PX = (720, 160)
SCENES_PER_SEED = 2
OCR_PER_SEED = 2

COUNT_QUESTION = ("How many {colour} {shape}s are in the image? "
                  "Answer with a number only.")
OCR_QUESTION = ("What text is written in the image? "
                "Answer with the exact text only, nothing else.")


@dataclass(frozen=True, slots=True)
class Group:
    """One group of identical shapes in a scene."""

    colour: str
    shape: str
    count: int


@dataclass(frozen=True, slots=True)
class ImageCase:
    """One image and its question. `kind` is "general" (a scene to count) or "ocr";
    `expected` is the exact answer ("3", "KX7 4TN 9PW"); `scene` describes a scene's groups
    (empty for OCR), so a reader of checks.json sees what was drawn."""

    id: str
    kind: str
    question: str
    expected: str
    png: bytes
    scene: tuple[Group, ...] = ()

    @property
    def description(self) -> str:
        """What the image shows, in words (for a case's `expected`)."""
        if self.kind == "ocr":
            return f"the text {self.expected!r}"
        return ", ".join(f"{g.count} {g.colour} {g.shape}{'s' if g.count != 1 else ''}"
                         for g in self.scene)


def _rng(seed: int, case_id: str) -> random.Random:
    return random.Random(f"anvil-multimodal/{seed}/{case_id}")  # str seeds are stable


def _png(image: Image.Image) -> bytes:
    out = io.BytesIO()
    image.save(out, format="PNG", optimize=False)
    return out.getvalue()


def _draw_shape(draw: ImageDraw.ImageDraw, shape: str, cx: int, cy: int,
                fill: tuple[int, int, int]) -> None:
    h = SHAPE_PX // 2
    if shape == "circle":
        draw.ellipse((cx - h, cy - h, cx + h, cy + h), fill=fill)
    elif shape == "square":
        draw.rectangle((cx - h, cy - h, cx + h, cy + h), fill=fill)
    elif shape == "triangle":
        draw.polygon(((cx, cy - h), (cx + h, cy + h), (cx - h, cy + h)), fill=fill)
    else:
        raise ValueError(f"unknown shape {shape!r}")


def scene_case(seed: int, case_id: str) -> ImageCase:
    """A scene of three groups (colours, shapes and counts from the seed) and its question."""
    rng = _rng(seed, case_id)
    colours = rng.sample(sorted(COLOURS), len(COLOURS))
    shapes = rng.sample(SHAPES, len(SHAPES))
    counts = rng.sample(range(1, MAX_COUNT + 1), 3)
    groups = tuple(Group(c, s, n) for c, s, n in zip(colours, shapes, counts, strict=True))
    asked = rng.choice(groups)
    image = Image.new("RGB", (GRID_COLUMNS * CELL_PX, GRID_ROWS * CELL_PX), "white")
    draw = ImageDraw.Draw(image)
    cells = rng.sample(range(GRID_COLUMNS * GRID_ROWS), sum(counts))
    shapes_to_draw = [g for g in groups for _ in range(g.count)]
    for cell, group in zip(cells, shapes_to_draw, strict=True):
        col, row = cell % GRID_COLUMNS, cell // GRID_COLUMNS
        cx = col * CELL_PX + CELL_PX // 2 + rng.randint(-JITTER_PX, JITTER_PX)
        cy = row * CELL_PX + CELL_PX // 2 + rng.randint(-JITTER_PX, JITTER_PX)
        _draw_shape(draw, group.shape, cx, cy, COLOURS[group.colour])
    question = COUNT_QUESTION.format(colour=asked.colour, shape=asked.shape)
    return ImageCase(case_id, "general", question, str(asked.count), _png(image), groups)


def ocr_font() -> ImageFont.FreeTypeFont:
    """Pillow's bundled scalable font; ImportError when this Pillow has no FreeType (then
    `load_default` gives a tiny bitmap font whose size cannot be set)."""
    font = ImageFont.load_default(size=OCR_FONT_PX)
    if not isinstance(font, ImageFont.FreeTypeFont):
        raise ImportError("this Pillow has no FreeType (needed to draw the OCR text): "
                          "pip install 'anvil-metrics[multimodal]'")
    return font


def ocr_case(seed: int, case_id: str) -> ImageCase:
    """A line of random uppercase letters and digits, centred, and its question."""
    rng = _rng(seed, case_id)
    text = " ".join("".join(rng.choice(OCR_ALPHABET) for _ in range(OCR_GROUP_CHARS))
                    for _ in range(OCR_GROUPS))
    image = Image.new("RGB", OCR_CANVAS_PX, "white")
    draw = ImageDraw.Draw(image)
    font = ocr_font()
    left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
    x = (OCR_CANVAS_PX[0] - (right - left)) // 2 - left
    y = (OCR_CANVAS_PX[1] - (bottom - top)) // 2 - top
    draw.text((x, y), text, fill="black", font=font)
    return ImageCase(case_id, "ocr", OCR_QUESTION, text, _png(image))


@cache
def image_cases(seed: int) -> tuple[ImageCase, ...]:
    """The suite's cases for `seed`, in the order they are asked: scenes, then OCR lines."""
    scenes = tuple(scene_case(seed, f"scene_{i}") for i in range(1, SCENES_PER_SEED + 1))
    ocr = tuple(ocr_case(seed, f"ocr_{i}") for i in range(1, OCR_PER_SEED + 1))
    return scenes + ocr
