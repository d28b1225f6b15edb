"""rowmodel: a row of `request_timings` as the catalogue defines it — what it accepts and
refuses as text and as parsed values alike, old files' rows without the fields added since,
and the schema every field's words and units come with.

Why: `anvil verify` takes a million rows through this one definition; a row it lets through
wrongly typed would be recomputed from values the file does not hold, and a row it refuses
wrongly makes verify parse the whole file for messages it does not need.
"""

from __future__ import annotations

import math

import msgspec
import numpy as np
import orjson
import pytest
from rawbuild import completed

from anvil_metrics import catalog
from anvil_metrics.fieldtypes import UNIT, schema
from anvil_metrics.post import rowmodel
from anvil_metrics.post.derive import RowColumns, derive_row


def _rows(n: int = 3) -> list[dict]:
    rows = [derive_row(completed(i, usage={"prompt_tokens": 130, "completion_tokens": 6,
                                           "prompt_tokens_details": {"cached_tokens": i}}
                                 if i % 2 else None)) for i in range(n)]
    for i, r in enumerate(rows):
        r["request_index"] = i
    return rows


def _both(rows: list[dict]) -> tuple[RowColumns | None, RowColumns | None]:
    return RowColumns.from_text(orjson.dumps(rows)), RowColumns.from_rows(rows)


def test_text_and_parsed_rows_give_the_same_columns() -> None:
    rows = _rows()
    text, parsed = _both(rows)
    assert text is not None and parsed is not None
    assert text.row_dicts() == parsed.row_dicts() == rows
    assert text.present["cached_tokens"].tolist() == [False, True, False]


@pytest.mark.parametrize(("field", "value"), [
    ("e2e_ms", 5), ("e2e_ms", -0.5), ("e2e_ms", None), ("ttft_ms", True),
    ("output_tokens", 1.0), ("output_tokens", 2**53), ("cached_tokens", None),
    ("output_token_source", "guess"), ("step", "1"), ("turn", -1),
])
def test_a_value_the_catalogue_does_not_allow_is_refused(field: str, value: object) -> None:
    rows = _rows()
    rows[1][field] = value
    assert _both(rows) == (None, None)


def test_rows_with_other_keys_or_mixed_fields_are_refused() -> None:
    rows = _rows()
    assert _both([*rows[:2], {**rows[2], "x": 1}]) == (None, None)
    assert _both([*rows[:2], {k: v for k, v in rows[2].items() if k != "step"}]) == (
        None, None)  # an added field in some rows only
    assert RowColumns.from_text(b"[1]") is None and RowColumns.from_text(b"[{") is None


def test_an_older_files_rows_lack_the_fields_added_since() -> None:
    last = catalog.ADDED_GENERATIONS[-1]
    rows = [{k: v for k, v in r.items() if k not in last} for r in _rows()]
    text, parsed = _both(rows)
    assert text is not None and parsed is not None and text.absent == last
    assert np.isnan(text.values(next(iter(last)))).all()
    one_gen = [{k: v for k, v in r.items() if k not in catalog.ADDED_GENERATIONS[0]}
               for r in _rows()]
    assert _both(one_gen) == (None, None)  # the first generation without the later ones


def test_a_parsed_nan_or_a_number_too_large_for_a_double_is_refused() -> None:
    rows = _rows()
    rows[0]["ttft_ms"] = math.nan
    assert RowColumns.from_rows(rows) is None
    text = orjson.dumps(_rows()).replace(b'"e2e_ms":5.0', b'"e2e_ms":1e400', 1)
    assert b"1e400" in text and RowColumns.from_text(text) is None


def test_no_rows_are_columns_of_nothing() -> None:
    for cols in _both([]):
        assert cols is not None and len(cols) == 0 and cols.absent == frozenset()


def test_every_field_has_its_words_and_unit_in_the_schema() -> None:
    s = schema(rowmodel.Row)
    assert list(s["properties"]) == list(catalog.ROW_FIELDS)
    for f in catalog.ROW:
        field = s["properties"][f.name]
        assert f.description in field["description"]
        assert field.get(UNIT, "") == f.unit
    assert "cached_tokens" not in s["required"] and "e2e_ms" in s["required"]
    assert s["properties"]["e2e_ms"]["minimum"] == 0
    assert msgspec.json.decode(orjson.dumps(_rows()), type=list[rowmodel.Row])
