"""The one builder of raw runs for tests: a header, records, and `requests.jsonl` files.

The live recorder appends `requests.jsonl` a line at a time (`recorder.RawWriter`); tests
write whole files of chosen records with `write_raw`, in the same line format.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from anvil_metrics.jsonio import dump_line
from anvil_metrics.records import RAW_SCHEMA, Failure, RequestRecord

HEADER: dict[str, Any] = {
    "schema": RAW_SCHEMA,
    "run_id": "benchmark-20260801T160039Z",
    "started_at": "2026-08-01T16:00:39Z",
    "params": {"concurrency": 1},
    "wall_anchor_ns": 1_785_600_039_000_000_000,
    "perf_anchor_ns": 1_000,
}


def write_raw(
    path: str | Path,
    header: dict[str, Any],
    records: Iterable[RequestRecord],
    run_end: dict[str, Any] | None = None,
) -> None:
    """Write a whole `requests.jsonl`; `type` keys are filled in."""
    with open(path, "wb") as f:
        f.write(dump_line({**header, "type": "run"}))
        for rec in records:
            f.write(dump_line(rec.to_json_dict()))
        if run_end is not None:
            f.write(dump_line({**run_end, "type": "run_end"}))


def completed(i: int, *, start_ns: int | None = None, warmup: bool = False,
              **kw: Any) -> RequestRecord:
    """A completed request `i`: 2 reasoning and 3 content chunks, 1 ms apart, usage
    reported; `kw` replaces any field."""
    start = 1_000 + i * 10_000_000 if start_ns is None else start_ns
    fields: dict[str, Any] = dict(
        request_index=i, start_ns=start, first_output_ns=start + 1_000_000,
        first_content_ns=start + 2_000_000, end_ns=start + 5_000_000, warmup=warmup,
        planned_context_tokens=128, reasoning_chunks=2, content_chunks=3,
        chunk_deltas_ns=(1_000_000, 1_000_000, 1_000_000, 1_000_000, 1_000_000),
        chunk_channels="rrccc", usage={"prompt_tokens": 130, "completion_tokens": 6},
        finish_reason="stop", http_status=200, extra={"note": "x"})
    fields.update(kw)
    return RequestRecord(**fields)


def failed(i: int, *, start_ns: int | None = None, warmup: bool = False,
           **kw: Any) -> RequestRecord:
    """A request `i` that failed with a 503 at the headers; `kw` replaces any field."""
    start = 1_000 + i * 10_000_000 if start_ns is None else start_ns
    fields: dict[str, Any] = dict(
        request_index=i, start_ns=start, end_ns=start + 5_000, warmup=warmup,
        failure=Failure(kind="http_error", message="503 busy", http_status=503,
                        phase="headers"),
        http_status=503)
    fields.update(kw)
    return RequestRecord(**fields)


def stamps(parts: dict[str, Any], start: int) -> tuple[int, int, int | None, int | None, int]:
    """A generated record's chunk counts and stamps from its drawn `parts` (`output`:
    "none", "reasoning", "content" or "both"; `reasoning_chunks`, `content_chunks`, and
    the durations `ttfo`, `to_content`, `to_end`): `(reasoning_chunks, content_chunks,
    first_output_ns, first_content_ns, end_ns)`, consistent as a real stream's are."""
    out = parts["output"]
    reasoning = parts["reasoning_chunks"] if out in ("reasoning", "both") else 0
    content = parts["content_chunks"] if out in ("content", "both") else 0
    first_output = None if out == "none" else start + parts["ttfo"]
    first_content = None
    if out == "content":
        first_content = first_output
    elif out == "both":
        assert first_output is not None
        first_content = first_output + parts["to_content"]
    end = (first_content or first_output or start) + parts["to_end"]
    return reasoning, content, first_output, first_content, end


def rows_of(records: Iterable[RequestRecord]) -> Any:
    """The completed `records` as benchmark rows (`RowColumns`), built as post-processing
    builds them (each its own request_index)."""
    from anvil_metrics.post.derive import rows_from_raw
    from anvil_metrics.post.rawcolumns import COL, ColumnBuilder

    cols = ColumnBuilder()
    for r in records:
        cols.add_record(0, r)
    table = cols.table()
    return rows_from_raw(table, table[:, COL["request_index"]])
