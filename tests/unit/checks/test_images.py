"""images: the multimodal suite's images — a scene shows exactly what its answer key says,
an OCR line is large and from its alphabet, each image the same for the same seed.

Why: the suite judges a model's reading of these images; an image that drew one shape too
many would fail a model that read it right.
"""

from __future__ import annotations

import io

import pytest
from PIL import Image

from anvil_metrics.checks.images import (
    CELL_PX,
    COLOURS,
    GRID_COLUMNS,
    GRID_ROWS,
    OCR_ALPHABET,
    image_cases,
    ocr_case,
    scene_case,
)


def _cell_colours(png: bytes) -> dict[str, int]:
    """Occupied cells per colour name; each occupied cell must hold exactly one colour."""
    image = Image.open(io.BytesIO(png)).convert("RGB")
    by_rgb = {rgb: name for name, rgb in COLOURS.items()}
    found: dict[str, int] = {}
    for row in range(GRID_ROWS):
        for col in range(GRID_COLUMNS):
            box = (col * CELL_PX, row * CELL_PX, (col + 1) * CELL_PX, (row + 1) * CELL_PX)
            colours = {rgb for _, rgb in image.crop(box).getcolors(CELL_PX * CELL_PX)}
            colours.discard((255, 255, 255))
            assert len(colours) <= 1, f"cell {row},{col} holds {colours}"
            for rgb in colours:
                found[by_rgb[rgb]] = found.get(by_rgb[rgb], 0) + 1
    return found


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_a_scene_shows_what_its_answer_key_says(seed: int) -> None:
    case = scene_case(seed, "scene_1")
    assert _cell_colours(case.png) == {g.colour: g.count for g in case.scene}
    counts = [g.count for g in case.scene]
    assert len(set(counts)) == 3 and len({g.shape for g in case.scene}) == 3
    asked = [g for g in case.scene if f"{g.colour} {g.shape}s" in case.question]
    assert len(asked) == 1 and str(asked[0].count) == case.expected


def test_an_ocr_line_is_large_and_from_the_alphabet() -> None:
    case = ocr_case(0, "ocr_1")
    assert len(case.expected) == 11 and set(case.expected.replace(" ", "")) <= set(OCR_ALPHABET)
    image = Image.open(io.BytesIO(case.png)).convert("L")
    left, top, right, bottom = image.point(lambda v: 255 if v < 128 else 0).getbbox()
    assert bottom - top >= 40 and left > 0 and right < image.width


def test_images_are_deterministic_per_seed() -> None:
    assert scene_case(3, "scene_1").png == scene_case(3, "scene_1").png
    assert ocr_case(3, "ocr_1").png == ocr_case(3, "ocr_1").png
    assert [c.png for c in image_cases(0)] != [c.png for c in image_cases(1)]
    assert [c.id for c in image_cases(0)] == ["scene_1", "scene_2", "ocr_1", "ocr_2"]
