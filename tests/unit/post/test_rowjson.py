"""rowjson: the rows written from columns are, byte for byte, orjson's text of the plain
document, whatever the batch size; a value strict JSON cannot hold is refused before
anything is written.

Why: the writer formats a million rows without building them as dicts; a seam between
two batches or a `cached_tokens` line out of place would give a file that no longer
equals what `anvil verify` recomputes.
"""

from __future__ import annotations

import numpy as np
import orjson
import pytest
from rawbuild import completed

from anvil_metrics.post import rowjson
from anvil_metrics.post.derive import RowColumns, derive_row

DOC = {"schema": "x", "request_timings": [], "wall_clock_ms": 1.5}


def _rows(n: int) -> list[dict]:
    rows = []
    for i in range(n):
        usage = {"prompt_tokens": 10 + i, "completion_tokens": 4,
                 "prompt_tokens_details": {"cached_tokens": i}} if i % 2 else None
        row = derive_row(completed(i, usage=usage))
        row["request_index"] = i
        rows.append(row)
    return rows


def _written(rows: list[dict]) -> bytes:
    columns = RowColumns.from_rows(rows)
    assert columns is not None
    return b"".join(rowjson.json_chunks(DOC, columns))


@pytest.mark.parametrize("batch", [1, 2, 1024])
def test_rows_are_orjsons_text_across_batch_seams(batch: int,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    rows = _rows(5)
    assert "cached_tokens" in rows[1] and "cached_tokens" not in rows[0]
    monkeypatch.setattr(rowjson, "ROW_BATCH", batch)
    assert _written(rows) == orjson.dumps({**DOC, "request_timings": rows},
                                          option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)


def test_no_rows_is_the_document_alone() -> None:
    assert _written([]) == orjson.dumps(DOC, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)


def test_an_infinite_float_is_refused_before_anything_is_written() -> None:
    columns = RowColumns.from_rows(_rows(2))
    columns.floats["e2e_ms"][1] = np.inf
    chunks = rowjson.json_chunks(DOC, columns)
    with pytest.raises(ValueError, match="request_timings e2e_ms holds ±inf"):
        next(chunks)


def test_a_document_value_strict_json_cannot_hold_is_refused() -> None:
    columns = RowColumns.from_rows(_rows(1))
    with pytest.raises(ValueError, match="refusing to write non-strict JSON"):
        b"".join(rowjson.json_chunks({**DOC, "wall_clock_ms": float("nan")}, columns))
