"""`anvil export --parquet`: every row of the document comes back from the file exactly (each
value, each null, `cached_tokens` absent where it was), typed as the catalogue types it, with
the rest of the document in the file's metadata."""

from __future__ import annotations

from pathlib import Path

import pytest
from rawbuild import HEADER, completed, failed, write_raw

pytest.importorskip("pyarrow")

from anvil_metrics.compare.runs import read_run  # noqa: E402
from anvil_metrics.export.parquet import read_rows, table_of, write_parquet  # noqa: E402
from anvil_metrics.jsonio import atomic_write_json  # noqa: E402
from anvil_metrics.post.benchmark import build_benchmark  # noqa: E402
from anvil_metrics.post.rawread import read_raw  # noqa: E402


def a_run(folder: Path) -> Path:
    """Rows with every kind of value: usage and chunk counts, cached tokens reported and
    not, reasoning and none (nulls), a failure."""
    folder.mkdir()
    records = [completed(0), completed(1, usage={"prompt_tokens": 130, "completion_tokens": 6,
                                                  "prompt_tokens_details": {"cached_tokens": 64}}),
               completed(2, usage=None, reasoning_chunks=0, chunk_channels="ccccc",
                         content_chunks=5),
               failed(3), completed(4, first_content_ns=None, content_chunks=0,
                                    reasoning_chunks=5, chunk_channels="rrrrr")]
    write_raw(folder / "requests.jsonl", HEADER, records)
    atomic_write_json(folder / "benchmark.json",
                      build_benchmark(read_raw(folder / "requests.jsonl")))
    return folder


def test_every_row_round_trips_exactly(tmp_path: Path) -> None:
    run = read_run(a_run(tmp_path / "run"))
    write_parquet(run.doc, run.rows, tmp_path / "rows.parquet")
    meta, rows = read_rows(tmp_path / "rows.parquet")
    assert rows == run.doc["request_timings"]
    for got, want in zip(rows, run.doc["request_timings"], strict=True):
        assert {k: type(v) for k, v in got.items()} == {k: type(v) for k, v in want.items()}
    assert "cached_tokens" in rows[1] and "cached_tokens" not in rows[0]
    assert any(v is None for v in rows[3].values())  # no content: its ttft_ms is null
    assert meta == {k: v for k, v in run.doc.items() if k != "request_timings"}
    assert meta["failures"][0]["request_index"] == 3


def test_columns_are_typed_as_the_catalogue_types_them(tmp_path: Path) -> None:
    import pyarrow as pa

    run = read_run(a_run(tmp_path / "run"))
    schema = table_of(run.doc, run.rows).schema
    assert schema.names == list(run.rows.fields())
    assert schema.field("request_index").type == pa.int64()
    assert schema.field("ttft_ms").type == pa.float64()
    assert schema.field("output_token_source").type == pa.string()
